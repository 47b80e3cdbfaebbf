"""Hard thresholding and the other proximal/projection operators (SPEC.md section 1)."""

from __future__ import annotations

import numpy as np
import torch

from .._validation import check_float, check_int, fail


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
    # A stable descending sort keeps equal magnitudes in index order, which is exactly
    # SPEC.md's tie rule (order on (-|x_j|, j)); torch.topk gives no such guarantee.
    order = torch.sort(x.abs(), dim=-1, descending=True, stable=True).indices
    return order[..., :k]


_NUMPY_FLOATS = (torch.float32, torch.float64)


def hard_threshold(x: torch.Tensor, k: int) -> torch.Tensor:
    """H_k: keep exactly the ``k`` largest-magnitude entries along the last axis.

    Ties are broken in favour of the lower index, so exactly ``k`` entries survive
    (SPEC.md section 1). ``k >= d`` returns ``x`` unchanged. Batched over leading axes.

    Parameters
    ----------
    x : (..., d) tensor.
    k : number of entries kept per vector.

    Returns
    -------
    (..., d) tensor with at most ``k`` non-zeros per vector (exactly ``k`` kept positions).
    """
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
    threshold = np.partition(mag, d - k, axis=-1)[..., d - k: d - k + 1]
    keep = mag >= threshold
    # Rows with more than k entries at or above the threshold have ties at it; keep the
    # lowest-index ties. A zero threshold needs no such care: the tied entries are zeros.
    crowded = (keep.sum(-1) > k) & (threshold[..., 0] != 0)
    if crowded.any():
        m, t = mag[crowded], threshold[crowded]
        above = m > t
        ties = m == t
        room = k - above.sum(-1, keepdims=True)
        keep[crowded] = above | (ties & (np.cumsum(ties, -1) <= room))
    return np.where(keep, x, np.zeros((), dtype=x.dtype))


def hard_threshold_blocks(x: torch.Tensor, k: int, blocks: int) -> torch.Tensor:
    """H_k applied to each of ``blocks`` equal rows of the flat vector (softmax class rows).

    Paper 000 appendix A.2 constrains ``||x_r||_0 <= tau`` for every class row ``r``.

    Parameters
    ----------
    x : (..., blocks * m) tensor.
    k : entries kept per block.
    blocks : number of equal blocks; must divide ``x.shape[-1]``.

    Returns
    -------
    (..., blocks * m) tensor with at most ``k`` non-zeros per block.
    """
    blocks = check_int("blocks", blocks, minimum=1)
    if blocks == 1:
        return hard_threshold(x, k)
    shape = x.shape
    if shape[-1] % blocks:
        raise fail("blocks", blocks, f"must divide the vector length {shape[-1]}")
    return hard_threshold(x.reshape(*shape[:-1], blocks, -1), k).reshape(shape)


def project_l2_ball(u: torch.Tensor, radius: float) -> torch.Tensor:
    """Pi_R(u) = u if ||u|| <= R else R u / ||u||, batched over leading axes."""
    radius = check_float("radius", radius, positive=True)
    norm = torch.linalg.vector_norm(u, dim=-1, keepdim=True)
    scale = torch.clamp(radius / torch.clamp(norm, min=torch.finfo(u.dtype).tiny), max=1.0)
    return u * scale
