"""What a partition looks like: per-client sizes and the client x label histogram
(drawn by :func:`fedsparse.report.plot_partition`)."""

from __future__ import annotations

import numpy as np

from ..._validation import ConfigError
from ._common import _labels

__all__ = ["describe_clients", "describe_partition"]

#: ``describe_clients`` lists every client up to this many, else the first ``_SHOWN``.
_ALL_ROWS, _SHOWN = 100, 50


def describe_partition(parts, y=None) -> dict:
    """Per-client sizes and (with labels) the client x label histogram.

    Parameters
    ----------
    parts : list of 1-D int arrays, one per client.
    y : array-like, (n,), optional
        Labels of the whole data set.

    Returns
    -------
    dict with keys
        ``num_clients`` (int), ``sizes`` ((N,) int64), ``total`` (int, examples
        assigned), ``duplicates`` (int, examples in more than one part: 0 for a proper
        partition), and with ``y``: ``classes`` ((C,) the distinct labels),
        ``histogram`` ((N, C) int64 counts), ``labels_per_client`` ((N,) int64, labels
        with a nonzero count), ``unassigned`` (examples of ``y`` in no part) and
        ``table`` (str, a printable summary).
    """
    parts = [np.asarray(p, dtype=np.int64).reshape(-1) for p in parts]
    sizes = np.array([p.size for p in parts], dtype=np.int64)
    allidx = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    _, mult = np.unique(allidx, return_counts=True)
    out = {"num_clients": len(parts), "sizes": sizes, "total": int(sizes.sum()),
           "duplicates": int((mult > 1).sum())}
    header = f"{len(parts)} clients, {int(sizes.sum())} examples"
    if y is None:
        out["table"] = _sizes_table(header, sizes, len(parts))
        return out
    classes, codes = _labels(y)
    if allidx.size and (allidx.min() < 0 or allidx.max() >= codes.size):
        raise ConfigError(f"parts hold indices outside 0..{codes.size - 1} (len(y)={codes.size})")
    hist = np.zeros((len(parts), classes.size), dtype=np.int64)
    for i, p in enumerate(parts):
        hist[i] = np.bincount(codes[p], minlength=classes.size)
    out.update(classes=classes, histogram=hist, labels_per_client=(hist > 0).sum(axis=1),
               unassigned=int(codes.size - np.unique(allidx).size))
    out["table"] = _table(header + f", {classes.size} labels, {out['unassigned']} unassigned",
                          sizes, hist, classes, len(parts))
    return out


def describe_clients(sizes, y=None) -> dict:
    """:func:`describe_partition` of data stored client after client (a data set on disk):
    client i holds the next ``sizes[i]`` examples of ``y``. Vectorised (a million clients
    take a second); its table lists the first 50 clients when there are over 100.

    Parameters
    ----------
    sizes : (N,) int examples per client.
    y : (sum(sizes),) labels in client order, optional.

    Returns
    -------
    dict with :func:`describe_partition`'s keys (no example is in two clients or none).
    """
    sizes = np.asarray(sizes, dtype=np.int64).reshape(-1)
    N = sizes.size
    shown = N if N <= _ALL_ROWS else _SHOWN
    out = {"num_clients": N, "sizes": sizes, "total": int(sizes.sum()), "duplicates": 0}
    header = f"{N} clients, {out['total']} examples"
    if y is None:
        out["table"] = _sizes_table(header, sizes, shown)
        return out
    classes, codes = _labels(y)
    if codes.size != out["total"]:
        raise ConfigError(f"y has {codes.size} labels, the sizes add up to {out['total']}")
    owner = np.repeat(np.arange(N), sizes)
    hist = np.bincount(owner * classes.size + codes,
                       minlength=N * classes.size).reshape(N, classes.size)
    out.update(classes=classes, histogram=hist, labels_per_client=(hist > 0).sum(axis=1),
               unassigned=0)
    out["table"] = _table(header + f", {classes.size} labels", sizes, hist, classes, shown)
    return out


def _sizes_table(header: str, sizes: np.ndarray, shown: int) -> str:
    """The printable sizes of the first ``shown`` clients (no labels)."""
    rows = [f"client {i:4d}: {s:7d}" for i, s in enumerate(sizes[:shown])]
    return "\n".join([header, *rows, *_more(len(sizes) - shown)])


def _table(header: str, sizes: np.ndarray, hist: np.ndarray, classes: np.ndarray,
           shown: int) -> str:
    """The printable client x label table of the first ``shown`` clients."""
    width = max(5, *(len(str(c)) + 1 for c in classes))
    head = "client   size " + "".join(f"{str(c):>{width}}" for c in classes)
    rows = [f"{i:6d} {s:6d} " + "".join(f"{v:>{width}d}" for v in h)
            for i, (s, h) in enumerate(zip(sizes[:shown], hist[:shown], strict=True))]
    return "\n".join([header, head, *rows, *_more(len(sizes) - shown)])


def _more(hidden: int) -> list[str]:
    return [f"... and {hidden:,} more clients"] if hidden else []
