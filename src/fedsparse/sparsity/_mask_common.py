"""What the pruning masks share: argument checks, the scopes a mask counts over, and the
exact-count selection by score (ties to the lower flat index, as for H_tau)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import torch
from torch import nn

from .._validation import check_float, fail
from ..models.layout import ParamLayout
from ._checks import check_tensor
from .thresholding import top_indices

SCOPES = ("layer", "global")


def check_density(density) -> float:
    density = check_float("density", density)
    if not 0.0 < density <= 1.0:
        raise fail("density", density, "must be in (0, 1]: the fraction of prunable weights "
                                       "kept (60% pruned is density=0.4)")
    return density


def keep_count(fraction: float, count: int) -> int:
    """``ceil(fraction * count)``, with ``fraction`` read as the decimal it prints as.

    Binary floating point would keep 8 of 100 entries at ``density=0.07`` (0.07 * 100 is
    7.000000000000001); the decimal reading keeps the 7 a user asked for.
    """
    return min(count, math.ceil(Fraction(repr(float(fraction))) * count))


def layout_of(problem, size: int | None = None):
    """The :class:`ParamLayout` of a layout, a module or a problem.

    A problem without a torch module (the linear models) is one dense, fully prunable
    tensor of ``size`` entries.
    """
    if isinstance(problem, ParamLayout):
        return problem
    if isinstance(problem, nn.Module):
        return ParamLayout.from_module(problem)
    layout = getattr(problem, "layout", None)
    if isinstance(layout, ParamLayout):
        return layout
    if callable(layout) and "neural" in getattr(problem, "capabilities", ()):
        layout = layout()  # a neural problem's layout does not depend on the features
        if isinstance(layout, ParamLayout):
            return layout
    module = getattr(problem, "module", None)
    if isinstance(module, nn.Module):
        return ParamLayout.from_module(module)
    if size is not None and hasattr(problem, "loss"):
        return ParamLayout.dense(size)
    raise fail("problem", problem, "must be a ParamLayout, a torch module or a problem")


def check_vector(name: str, x, size: int) -> torch.Tensor:
    check_tensor(name, x, f"({size},)", min_ndim=0)
    if x.ndim != 1 or x.shape[0] != size:
        raise fail(name, f"tensor of shape {tuple(x.shape)}",
                   f"must be a (P,) flat parameter vector with P={size}")
    return x


def check_cohort(name: str, x, size: int, rows: int | None = None, dtype=None) -> torch.Tensor:
    check_tensor(name, x, f"({'S' if rows is None else rows}, {size})", min_ndim=0)
    if x.ndim != 2 or x.shape[1] != size or (rows is not None and x.shape[0] != rows):
        want = f"({'S' if rows is None else rows}, {size})"
        raise fail(name, f"tensor of shape {tuple(x.shape)}", f"must have shape {want}")
    if dtype is not None and x.dtype != dtype:
        raise fail(name, f"tensor of dtype {x.dtype}", f"must be {dtype}")
    return x


def scopes(layout, scope: str) -> list[torch.Tensor]:
    """Flat indices (ascending int64) of the prunable entries of each scope.

    ``"layer"``: one group per parameter tensor holding prunable entries;
    ``"global"``: one group of every prunable entry.
    """
    prunable = layout.prunable
    if scope == "global":
        idx = prunable.nonzero().squeeze(1)
        return [idx] if idx.numel() else []
    groups = []
    for lo, hi in zip(layout.offsets[:-1], layout.offsets[1:], strict=True):
        idx = lo + prunable[lo:hi].nonzero().squeeze(1)
        if idx.numel():
            groups.append(idx)
    return groups


def select(scores: torch.Tensor, layout, groups, density: float,
            allowed: torch.Tensor | None = None) -> torch.Tensor:
    """(P,) mask: per group, the ``ceil(density * group size)`` top scores; ties as H_tau.

    ``allowed`` (P,) restricts the candidates (SynFlow's earlier mask), while the count
    still refers to the whole group, so the kept fraction is exact at every iteration.
    The mask lies on the device of ``scores`` (the layout's indices are moved there).
    """
    device = scores.device
    keep = ~layout.prunable.to(device)  # (~ makes a new tensor: the layout is not touched)
    if allowed is not None:
        allowed = allowed.to(device)
    for idx in groups:
        idx = idx.to(device)
        k = keep_count(density, idx.numel())
        if allowed is not None:
            idx = idx[allowed[idx]]
            k = min(k, idx.numel())
        group = scores[idx]
        if _selectable(group):
            chosen = torch.from_numpy(_largest(group.detach().abs().numpy()[None], [k])[0])
            keep[idx[chosen]] = True
        else:
            keep[idx[top_indices(group, k)]] = True
    return keep


def _selectable(x: torch.Tensor) -> bool:
    """Whether :func:`_largest` may choose among ``x``: a CPU float tensor without NaN
    (a sort puts NaN above every number, an order a selection does not keep)."""
    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) \
        and not bool(torch.isnan(x).any())


def _largest(key: np.ndarray, counts) -> np.ndarray:
    """(R, n) bool: per row ``r`` the ``counts[r]`` largest entries of ``key`` (R, n),
    ties to the lower index; the set the first ``counts[r]`` of a stable descending sort
    hold. One selection per row at its own rank (``np.partition``): a stable sort of
    78,400 scores takes about 6 ms on the CPU, the selection 0.1 ms."""
    R, n = key.shape
    keep = np.zeros((R, n), dtype=bool)
    for r, count in enumerate(int(c) for c in counts):
        row = key[r]
        if count >= n:
            keep[r] = True
        elif count > 0:
            cut = np.partition(row, n - count)[n - count]
            above, tie = row > cut, row == cut
            room = count - int(above.sum())
            keep[r] = above | ((np.cumsum(tie) <= room) & tie)
    return keep


def rank_select(values: torch.Tensor, valid: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """(S, n) bool: per row the ``count[s]`` valid entries of largest ``|values|``.

    Ties go to the lower index (H_tau's rule). ``count[s]`` must not exceed the number
    of valid entries of row ``s``.
    """
    if _selectable(values):
        count = torch.minimum(count, valid.sum(1))
        key = values.detach().abs().masked_fill(~valid, -1.0)  # below every magnitude
        return torch.from_numpy(_largest(key.numpy(), count.tolist())).to(valid.device)
    order = top_indices(values, values.shape[1])       # every entry, by (-|v|, index)
    # Walking that order, take valid entries until count[s] are taken: the first
    # count[s] valid entries in H_tau order.
    ranked = valid.gather(1, order)
    take = ranked & (torch.cumsum(ranked, dim=1) <= count[:, None])
    return torch.zeros_like(valid).scatter_(1, order, take)
