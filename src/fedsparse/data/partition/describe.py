"""What a partition looks like: per-client sizes and the client x label histogram
(drawn by :func:`fedsparse.report.plot_partition`)."""

from __future__ import annotations

import numpy as np

from ..._validation import ConfigError
from ._common import _labels

__all__ = ["describe_partition"]


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
        lines = [header] + [f"client {i:4d}: {s:7d}" for i, s in enumerate(sizes)]
        out["table"] = "\n".join(lines)
        return out
    classes, codes = _labels(y)
    if allidx.size and (allidx.min() < 0 or allidx.max() >= codes.size):
        raise ConfigError(f"parts hold indices outside 0..{codes.size - 1} (len(y)={codes.size})")
    hist = np.zeros((len(parts), classes.size), dtype=np.int64)
    for i, p in enumerate(parts):
        hist[i] = np.bincount(codes[p], minlength=classes.size)
    out.update(classes=classes, histogram=hist, labels_per_client=(hist > 0).sum(axis=1),
               unassigned=int(codes.size - np.unique(allidx).size))
    width = max(5, *(len(str(c)) + 1 for c in classes))
    head = "client   size " + "".join(f"{str(c):>{width}}" for c in classes)
    rows = [f"{i:6d} {s:6d} " + "".join(f"{v:>{width}d}" for v in h)
            for i, (s, h) in enumerate(zip(sizes, hist, strict=True))]
    out["table"] = "\n".join([header + f", {classes.size} labels, {out['unassigned']} "
                              "unassigned", head, *rows])
    return out
