"""Supports of sparse vectors and how well one recovers another's."""

from __future__ import annotations

import torch

from .._validation import check_float, fail
from ._checks import check_tensor


def support(x: torch.Tensor, tol: float = 0.0) -> torch.Tensor:
    """Boolean mask of the entries with ``|x_j| > tol``; same shape as ``x``."""
    check_tensor("x", x, "(...)", min_ndim=0)
    return x.abs() > check_float("tol", tol)


def support_union(*xs: torch.Tensor) -> torch.Tensor:
    """Union of the supports of tensors of one shape, as a boolean mask."""
    if not xs:
        raise fail("xs", xs, "needs at least one tensor")
    out = support(xs[0])
    for i, x in enumerate(xs[1:], start=1):
        _check_same_shape(f"xs[{i}]", x, "xs[0]", xs[0])
        out = out | support(x)
    return out


def support_scores(x: torch.Tensor, truth: torch.Tensor, tol: float = 0.0) -> dict[str, float]:
    """Precision, recall and F1 of ``supp(x)`` against ``supp(truth)``.

    Precision is 1 for an empty estimate and recall is 1 for an empty truth, so a
    perfect zero/zero match scores 1 everywhere.
    """
    _check_same_shape("truth", truth, "x", x)
    est, true = support(x, tol), support(truth)
    hits = int((est & true).sum())
    n_est, n_true = int(est.sum()), int(true.sum())
    precision = hits / n_est if n_est else 1.0
    recall = hits / n_true if n_true else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"support_precision": precision, "support_recall": recall, "support_f1": f1}


def density(x: torch.Tensor, tol: float = 0.0) -> float:
    """Fraction of entries with ``|x_j| > tol``."""
    return float(support(x, tol).sum()) / max(x.numel(), 1)


def _check_same_shape(name: str, x, other_name: str, other) -> None:
    """``x`` a tensor of ``other``'s shape (broadcasting would compare other entries)."""
    check_tensor(name, x, "(...)", min_ndim=0)
    check_tensor(other_name, other, "(...)", min_ndim=0)
    if x.shape != other.shape:
        raise fail(name, f"tensor of shape {tuple(x.shape)}",
                   f"must have the shape {tuple(other.shape)} of {other_name}")
