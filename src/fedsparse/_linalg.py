"""Batched linear solves that do not stop a run on one singular system."""

from __future__ import annotations

import torch


def solve_or_lstsq(A: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``A^{-1} b`` per batch element, the minimum-norm least-squares solution where
    ``A`` is singular in floating point.

    A saturated logistic Hessian in float32, or duplicate atoms in OMP, makes single
    systems of a batch singular; solving them in the least-squares sense keeps the rest
    of the batch (and the run) going instead of raising from inside LAPACK.

    Parameters
    ----------
    A : (S, k, k) matrices.
    b : (S, k) right-hand sides.

    Returns
    -------
    (S, k) solutions.
    """
    x, info = torch.linalg.solve_ex(A, b.unsqueeze(-1))
    x = x.squeeze(-1)
    failed = info != 0
    if failed.any():
        x[failed] = torch.linalg.lstsq(A[failed], b[failed].unsqueeze(-1),
                                       driver="gelsd").solution.squeeze(-1)
    return x
