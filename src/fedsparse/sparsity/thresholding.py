"""Hard thresholding and the other proximal/projection operators (docs/decisions.md,
section 1)."""

from __future__ import annotations

from numbers import Integral

import numpy as np
import torch

from .._validation import check_choice, check_float, check_int, fail
from ._checks import check_tensor

#: Where a sparsity budget tau is counted on a multi-block (softmax) model: in each class
#: row ("row", ``||x_r||_0 <= tau`` for every r) or over the whole model ("global",
#: ``||x||_0 <= tau``).
SCOPES = ("row", "global")


def top_indices(x: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the ``k`` largest ``|x|`` along the last axis, ties to the lower index.

    Parameters
    ----------
    x : (..., d) tensor.
    k : 0 <= k <= d.

    Returns
    -------
    (..., k) int64 indices, ordered by decreasing magnitude.
    """
    check_tensor("x", x)
    if isinstance(k, bool) or not isinstance(k, Integral) or not 0 <= k <= x.shape[-1]:
        raise fail("k", k, f"must be an integer from 0 to the last axis' length {x.shape[-1]}")
    # A stable descending sort keeps equal magnitudes in index order, which is exactly
    # the tie rule of docs/decisions.md (order on (-|x_j|, j)); torch.topk gives no such guarantee.
    order = torch.sort(x.abs(), dim=-1, descending=True, stable=True).indices
    return order[..., :k]


_NUMPY_FLOATS = (torch.float32, torch.float64)


def hard_threshold(x: torch.Tensor, k: int) -> torch.Tensor:
    """H_k: keep exactly the ``k`` largest-magnitude entries along the last axis.

    Ties are broken in favour of the lower index, so exactly ``k`` entries survive
    (docs/decisions.md, section 1). ``k >= d`` returns ``x`` unchanged. Batched over leading axes.

    Parameters
    ----------
    x : (..., d) tensor.
    k : number of entries kept per vector.

    Returns
    -------
    (..., d) tensor with at most ``k`` non-zeros per vector (exactly ``k`` kept positions).
    """
    check_tensor("x", x)
    k = check_int("k", k, minimum=0)
    d = x.shape[-1]
    if k >= d:
        return x
    if k == 0:
        return torch.zeros_like(x)
    if x.device.type == "cpu" and not x.requires_grad and x.dtype in _NUMPY_FLOATS:
        # numpy's introselect is several times faster than torch.kthvalue/topk/sort on
        # CPU, and numpy's element-wise passes cost less than torch's here.
        return torch.from_numpy(_hard_threshold_numpy(x.numpy(), k))
    # NaN counts as infinitely large, so a diverging iterate stays visibly non-finite.
    mag = torch.where(torch.isnan(x), torch.inf, x.abs())
    threshold = torch.kthvalue(mag, d - k + 1, dim=-1, keepdim=True).values
    above = mag > threshold
    # Among entries equal to the threshold keep the lowest indices until exactly k are kept.
    ties = mag == threshold
    room = k - above.sum(-1, keepdim=True)
    keep = above | (ties & (torch.cumsum(ties, -1) <= room))
    return torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))


def _hard_threshold_numpy(x: np.ndarray, k: int) -> np.ndarray:
    """The CPU path of :func:`hard_threshold`, same result."""
    d = x.shape[-1]
    mag = np.abs(x)
    nan = np.isnan(x)
    if nan.any():
        mag[nan] = np.inf
    part = np.partition(mag, d - k, axis=-1)
    threshold = part[..., d - k: d - k + 1]
    keep = mag >= threshold
    # Rows with more than k entries at or above the threshold have ties at it; keep the
    # lowest-index ties. A zero threshold needs no such care: the tied entries are zeros.
    # The partition puts the k entries at or above the threshold last and the d - k
    # others, none above it, first: a row has more than k iff its first part reaches
    # the threshold (one max over the row instead of a count of the boolean mask, which
    # numpy sums several times slower).
    crowded = (part[..., :d - k].max(-1) == threshold[..., 0]) & (threshold[..., 0] != 0)
    if crowded.any():
        m, t = mag[crowded], threshold[crowded]
        above = m > t
        ties = m == t
        room = k - above.sum(-1, keepdims=True)
        keep[crowded] = above | (ties & (np.cumsum(ties, -1) <= room))
    # x where kept, +0.0 elsewhere, as np.where(keep, x, 0) gives, bit for bit: an AND of
    # x's bits with all ones or all zeros. np.where branches on the mask element by
    # element and took 150 us of a 300 us threshold of (100, 1000) float32 iterates,
    # the AND 20 us (benchmarks/bench_fedht.py thresholds 6 times a round).
    ints = np.dtype(f"i{x.dtype.itemsize}")
    return np.bitwise_and(x.view(ints), np.negative(keep, dtype=ints)).view(x.dtype)


def hard_threshold_blocks(x: torch.Tensor, k: int, blocks: int, scope: str = "row"
                          ) -> torch.Tensor:
    """H_k on a model made of ``blocks`` equal rows (softmax class rows).

    ``scope="row"`` applies H_k to each row: ``||x_r||_0 <= k`` for every class row r
    (Tong et al. 2022, appendix A.2). ``scope="global"`` applies H_k to the whole flat
    vector: the k largest magnitudes over all rows, ``||x||_0 <= k`` (Jeong et al. 2024,
    Sec. V-B.2: ``||x||_0 <= 90`` on the 784 x 10 model). Ties go to the lower flat index
    in both cases, so exactly ``k`` positions are kept per row, respectively overall.

    Parameters
    ----------
    x : (..., blocks * m) tensor.
    k : entries kept per block ("row") or in total ("global").
    blocks : number of equal blocks; must divide ``x.shape[-1]``.
    scope : "row" or "global".

    Returns
    -------
    (..., blocks * m) tensor with at most ``k`` non-zeros per block, respectively in total.
    """
    check_tensor("x", x, "(..., blocks * m)")
    blocks = check_int("blocks", blocks, minimum=1)
    check_choice("scope", scope, SCOPES)
    if blocks == 1 or scope == "global":
        return hard_threshold(x, k)
    shape = x.shape
    if shape[-1] % blocks:
        raise fail("blocks", blocks, f"must divide the vector length {shape[-1]}")
    return hard_threshold(x.reshape(*shape[:-1], blocks, -1), k).reshape(shape)


def project_l2_ball(u: torch.Tensor, radius: float) -> torch.Tensor:
    """Pi_R(u) = u if ||u|| <= R else R u / ||u||, batched over leading axes.

    Parameters
    ----------
    u : (..., d) floating-point tensor.
    radius : R, positive.
    """
    check_tensor("u", u, floating=True)
    radius = check_float("radius", radius, positive=True)
    norm = torch.linalg.vector_norm(u, dim=-1, keepdim=True)
    scale = torch.clamp(radius / torch.clamp(norm, min=torch.finfo(u.dtype).tiny), max=1.0)
    return u * scale
