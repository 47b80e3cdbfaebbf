"""The smoothed l1 norm of FedMac (Liu et al. 2023) and the zeroing rule that turns its
small entries into exact zeros.

Liu et al. 2023 replace ``||x||_1`` by the twice differentiable

    phi_rho(x) = rho * sum_j log cosh(x_j / rho),      grad phi_rho(x) = tanh(x / rho),

which tends to ``||x||_1`` as rho -> 0 (``|z| - log 2 <= log cosh z <= |z|``). The naive
``log(cosh(z))`` overflows once ``|z|`` exceeds about 710 (float64) or 89 (float32),
which a small rho reaches at once (rho = 1e-3 and |x| = 1 give z = 1000), so log cosh is
computed as ``|z| + log1p(exp(-2|z|)) - log 2`` (docs/decisions.md, section 1): exact,
finite for every finite z, and with a finite autograd gradient.

Gradient steps on phi_rho shrink entries towards zero but never reach it, and the paper
does not say how its sparsity is counted. :func:`zero_small` is the rule Z fedsparse
applies after every step of a model under phi_rho (docs/decisions.md, section 5):
entries smaller than the step's own shrink size become exactly zero, never more than a
fraction ``1 - floor`` of the vector (the paper's "50% lower bound" on the non-zero
fraction).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .._validation import check_float, fail
from ._checks import check_tensor

_LOG2 = math.log(2.0)


def log_cosh(z: torch.Tensor) -> torch.Tensor:
    """Element-wise ``log cosh z``, stable for every finite ``z``.

    Computed as ``|z| + log1p(exp(-2|z|)) - log 2``: ``exp`` only ever sees a
    non-positive argument, so nothing overflows, and the autograd gradient is
    ``tanh z`` (0 at z = 0).

    Parameters
    ----------
    z : tensor of any shape.

    Returns
    -------
    Tensor of the shape of ``z``.
    """
    a = check_tensor("z", z, "(...)", min_ndim=0).abs()
    return a + torch.log1p(torch.exp(-2.0 * a)) - _LOG2


def phi_rho(x: torch.Tensor, rho: float) -> torch.Tensor:
    """The smoothed l1 norm ``phi_rho(x) = rho * sum_j log cosh(x_j / rho)`` (Liu et al.
    2023, Section 3.2), summed over the last axis.

    ``||x||_1 - d rho log 2 <= phi_rho(x) <= ||x||_1`` for x of length d.

    Parameters
    ----------
    x : (..., d) tensor (e.g. (S, P) models, one per row).
    rho : smoothing level, positive; smaller is closer to ``||x||_1``.

    Returns
    -------
    (...,) tensor.
    """
    check_tensor("x", x, min_ndim=0)
    rho = _check_rho(rho)
    return rho * log_cosh(x / rho).sum(-1)


def phi_rho_grad(x: torch.Tensor, rho: float) -> torch.Tensor:
    """Gradient of :func:`phi_rho`: ``tanh(x / rho)``, the shape of ``x``.

    Bounded by 1 in absolute value, so a step ``x - eta gamma tanh(x / rho)`` moves every
    entry by at most ``eta gamma`` (the shrink size :func:`zero_small` uses). The step is
    stable for entries near zero when ``eta gamma / rho < 2`` (the slope of tanh at 0 is
    1 / rho).
    """
    check_tensor("x", x, "(...)", min_ndim=0)
    rho = _check_rho(rho)
    return torch.tanh(x / rho)


def zero_small(x: torch.Tensor, threshold: float, *, floor: float = 0.5) -> torch.Tensor:
    """The zeroing rule Z (docs/decisions.md, section 5): set entries with
    ``|x_j| < threshold`` to exactly 0, row by row, while each row keeps at least
    ``ceil(floor * d)`` non-zeros.

    In FedMac (Liu et al. 2023) ``threshold`` is the shrink size of the step just taken
    (``eta_p gamma`` after a theta step, ``eta gamma_w`` after a w step) and ``floor`` is
    the paper's 50% lower bound on the fraction of non-zeros. When a row has more small
    entries than it may zero, the smallest ``|x_j|`` are zeroed first (ties: the lower
    index first), so the row ends with exactly ``ceil(floor * d)`` non-zeros. Z only ever
    zeroes: a row that already holds more zeros than the floor allows (e.g. the all-zero
    initial model of a linear problem) keeps them and loses no further entry.

    Parameters
    ----------
    x : (..., d) tensor; each row along the last axis is one model.
    threshold : non-negative; 0 returns ``x`` unchanged.
    floor : fraction of each row that must stay non-zero, in [0, 1].

    Returns
    -------
    New (..., d) tensor (``x`` itself when ``threshold`` is 0).
    """
    check_tensor("x", x)
    threshold = check_float("threshold", threshold, nonnegative=True)
    floor = check_float("floor", floor, nonnegative=True, maximum=1.0)
    if threshold == 0 or x.numel() == 0:
        return x
    d = x.shape[-1]
    # round() guards against floor * d landing a hair above an integer (0.28 * 25 is
    # 7.000000000000001 in floating point).
    max_zeros = d - math.ceil(round(floor * d, 9))
    flat = x.reshape(-1, d)
    nonzero = flat != 0
    small = nonzero & (flat.abs() < threshold)
    budget = (max_zeros - (~nonzero).sum(-1)).clamp(min=0)
    kill = small
    over = small.sum(-1) > budget
    if over.any():
        # Per row, the budget-th smallest candidate |x| is the cut: everything below it
        # goes, and of the entries equal to it the lowest indices fill the budget. One
        # topk of the largest budget (usually a few entries per step at the floor) is far
        # cheaper than a full sort of every row.
        rows = torch.nonzero(over).flatten()
        b = budget[rows]
        kill = small.clone()
        kill[rows] = False
        if int(b.max()) > 0:
            inf = torch.tensor(float("inf"), dtype=flat.dtype, device=flat.device)
            key = torch.where(small[rows], flat[rows].abs(), inf).detach()
            cut = _kth_smallest(key, (b - 1).clamp(min=0))[:, None]
            below = key < cut
            tie = key == cut
            need = b[:, None] - below.sum(-1, keepdim=True)
            if (tie.sum(-1, keepdim=True) > need).any():  # rare: equal |x| at the cut
                tie = tie & (torch.cumsum(tie, -1) <= need)
            chosen = below | tie
            kill[rows] = chosen & (b[:, None] > 0)
    return flat.masked_fill(kill, 0.0).reshape(x.shape)


def _kth_smallest(key: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """(R,) the ``k[r]``-th smallest (0-based) entry of each row of ``key`` (R, d)."""
    if key.device.type == "cpu":
        # numpy's introselect, row by row at the row's own rank: torch.topk of the largest
        # rank, or one np.partition of every row at all the rows' ranks, costs some 20
        # times more when the ranks reach thousands and differ from row to row (a model at
        # the floor re-zeroes tens of thousands of entries per step in FedMac's Figure 6
        # setting: 1 ms against 22 ms for 20 rows of 79,510).
        rows = key.numpy()
        return torch.from_numpy(np.array([np.partition(row, rank)[rank] for row, rank
                                          in zip(rows, k.tolist(), strict=True)],
                                         dtype=rows.dtype).reshape(-1))
    smallest = torch.topk(key, int(k.max()) + 1, dim=-1, largest=False).values
    return smallest.gather(1, k[:, None])[:, 0]


def _check_rho(rho) -> float:
    if check_float("rho", rho) <= 0:
        raise fail("rho", rho, "must be positive: the smoothing level of "
                   "phi_rho(x) = rho * sum log cosh(x / rho)")
    return float(rho)
