"""What a client sends, screened before the server uses it: uploads and diagnostics.

The round loop (:mod:`fedsparse.rounds`) rejects an upload that is non-finite or too far
from what its client was sent (:func:`upload_problems`), and records a client's
diagnostics only under the names its algorithm declares, as finite numbers
(:func:`screen_client_metrics`). What a remote peer sent is bounded before it is looked
at and cut short before it is logged (:func:`cut`, :func:`shown`).
"""

from __future__ import annotations

import math

import torch

#: Why an upload with NaN or inf values is rejected.
NONFINITE = "non-finite values (NaN or inf)"
#: At most this many diagnostics per client reply, each name at most this long: what a
#: remote client sends is bounded before it is looked at.
MAX_CLIENT_METRICS = 64
MAX_METRIC_NAME = 64


def cut(text, limit: int = 200) -> str:
    """``str(text)`` cut to ``limit`` characters: what a remote peer sent, in a log line or
    an error message, is never echoed whole."""
    text = str(text)
    return text if len(text) <= limit else text[:limit] + f"...({len(text)} chars)"


def shown(value, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters (see :func:`cut`)."""
    return cut(repr(value), limit)


def screen_client_metrics(metrics, declared) -> tuple[dict[str, float], list[str]]:
    """The diagnostics of one client (or a mean over clients) that may be recorded.

    Parameters
    ----------
    metrics : mapping name -> value, as the client sent it.
    declared : the names the algorithm declares (``algorithm.client_metrics``).

    Returns
    -------
    accepted : {name: float} for the declared names with a finite real value.
    refused : one line per refused entry (name, value and why, cut short); a mapping
        of more than :data:`MAX_CLIENT_METRICS` entries is refused whole, in one line.
    """
    if len(metrics) > MAX_CLIENT_METRICS:
        return {}, [f"{len(metrics)} diagnostics (at most {MAX_CLIENT_METRICS} are read)"]
    accepted: dict[str, float] = {}
    refused: list[str] = []
    for name, value in metrics.items():
        if not isinstance(name, str) or len(name) > MAX_METRIC_NAME or name not in declared:
            refused.append(f"{shown(name)}: not in its client_metrics {tuple(declared)}")
        elif isinstance(value, bool) or not isinstance(value, int | float):
            refused.append(f"{name!r}={shown(value)}: not a number")
        elif not math.isfinite(float(value)):
            refused.append(f"{name!r}={value!r}: not finite")
        else:
            accepted[name] = float(value)
    return accepted, refused


def upload_problems(uploads: torch.Tensor, received: torch.Tensor, payload: torch.Tensor,
                    max_update_norm: float | None, max_update_ratio: float | None = None,
                    updates: bool = False) -> dict[int, str]:
    """{row: reason} for received uploads that must not reach the model.

    An upload is rejected when it is non-finite, farther than ``max_update_norm`` (l2)
    from what its client was sent, or farther than ``max_update_ratio`` times the
    round's median distance: the lower median over the received finite uploads, so with
    more honest clients than hostile ones it is an honest client's distance. No relative
    bound applies in a round whose median distance is zero (most clients sent back what
    they were sent), and a lone upload is its own median.

    Parameters
    ----------
    uploads : (S, P); received : (S,) bool; payload : (P,) or (S, P) the broadcast.
    max_update_norm : absolute bound on the distance (None = none).
    max_update_ratio : bound relative to the round's median distance (None = none).
    updates : True if the uploads are changes from the broadcast (deltas): the distance
        is then the upload's own norm.
    """
    out: dict[int, str] = {}
    rows = torch.nonzero(received).flatten()
    if rows.numel() == 0:
        return out
    got = uploads[rows]
    finite = torch.isfinite(got).all(-1).cpu()
    for r in rows[~finite].tolist():
        out[int(r)] = NONFINITE
    if (max_update_norm is None and max_update_ratio is None) or not finite.any():
        return out
    moved = got
    if not updates:
        moved = got - (payload[rows] if payload.ndim == 2 else payload)
    dist = torch.linalg.vector_norm(moved.to(torch.float64), dim=-1).cpu()
    median = float(dist[finite].median())
    for r, d, ok in zip(rows.tolist(), dist.tolist(), finite.tolist(), strict=True):
        if not ok:
            continue
        if max_update_norm is not None and d > max_update_norm:
            out[int(r)] = f"distance {d:.4g} to the broadcast exceeds max_update_norm=" \
                          f"{max_update_norm:g}"
        elif max_update_ratio is not None and median > 0 and d > max_update_ratio * median:
            out[int(r)] = f"distance {d:.4g} to the broadcast exceeds max_update_ratio=" \
                          f"{max_update_ratio:g} times the round's median distance {median:.4g}"
    return out
