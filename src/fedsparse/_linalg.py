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
        x[failed] = lstsq_gelsd(A[failed], b[failed].unsqueeze(-1)).squeeze(-1)
    return x


def lstsq_gelsd(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """The minimum-norm least-squares solutions of ``A X = B`` (LAPACK ``gelsd``, SVD
    based), batched, on the device of ``A``.

    torch offers ``gelsd`` on the CPU only (its CUDA ``lstsq`` is ``gels``, which needs
    full-rank tall systems), so a GPU's systems are solved on the CPU and the solution is
    moved back: the same numbers as a run on the CPU. The systems that reach here are
    small (restricted supports, singular fallbacks), so the copy costs little.

    Parameters
    ----------
    A : (..., m, n) matrices.
    B : (..., m, r) right-hand sides.

    Returns
    -------
    (..., n, r) solutions.
    """
    if A.device.type == "cpu":
        return torch.linalg.lstsq(A, B, driver="gelsd").solution
    return torch.linalg.lstsq(A.cpu(), B.cpu(), driver="gelsd").solution.to(A.device)
