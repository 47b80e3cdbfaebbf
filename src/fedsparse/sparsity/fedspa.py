"""FedSpa's personalised sparse masks (Huang et al. 2022): one persistent mask per client,
a random sparse start (uniform or Erdos-Renyi-Kernel densities) and, after local training, a
cosine-annealed drop by magnitude with regrowth by gradient."""

from __future__ import annotations

import math

import torch

from .. import rng
from .._validation import check_choice, check_float, check_int, fail
from ._checks import check_tensor
from ._mask_common import (
    check_cohort,
    check_density,
    keep_count,
    layout_of,
    rank_select,
    scopes,
)

#: How a random sparse start spreads the density over the prunable tensors.
DISTRIBUTIONS = ("erk", "uniform")

# The round slot of the ALGORITHM stream: rounds are >= 0, so no per-round draw of an
# algorithm ever hashes the same counters as a FedSpa initial mask.
_INITIAL_MASK = -1


def layer_densities(layout, density: float, distribution: str = "erk") -> list[float]:
    """Density of each prunable tensor (in flat-vector order) for a random sparse init.

    ``"uniform"``: ``density`` everywhere. ``"erk"``: Erdos-Renyi-Kernel (Evci et al.
    2020), as FedSpa uses it (Huang et al. 2022): density proportional to
    ``sum(shape) / prod(shape)`` scaled so the kept total is ``density`` times the prunable
    count; a tensor that would exceed 1 is made dense and the rest rescaled.
    """
    density = check_density(density)
    distribution = check_choice("distribution", distribution, DISTRIBUTIONS)
    layout = layout_of(layout)
    tensors = [(shape, hi - lo) for shape, lo, hi in zip(layout.shapes, layout.offsets[:-1],
                                                          layout.offsets[1:], strict=True)
               if bool(layout.prunable[lo:hi].any())]
    if distribution == "uniform":
        return [density] * len(tensors)
    raw = [sum(shape) / n for shape, n in tensors]
    dense: set[int] = set()
    while True:
        # Kept entries to share out: density * (non-dense count) minus what the dense
        # tensors already keep beyond their share.
        rhs = sum(n * density if i not in dense else -n * (1 - density)
                  for i, (_, n) in enumerate(tensors))
        divisor = sum(raw[i] * n for i, (_, n) in enumerate(tensors) if i not in dense)
        if divisor == 0:
            break
        eps = rhs / divisor
        top = max(raw[i] for i in range(len(tensors)) if i not in dense)
        if top * eps <= 1:
            break
        dense |= {i for i in range(len(tensors)) if i not in dense and raw[i] == top}
    return [1.0 if i in dense else min(1.0, eps * raw[i]) for i in range(len(tensors))]


def random_masks(layout, density: float, clients, seed: int, distribution: str = "erk"
                 ) -> torch.Tensor:
    """FedSpa's random initial masks, one per client (Huang et al. 2022).

    Each prunable tensor ``l`` keeps ``ceil(d_l * n_l)`` entries chosen uniformly at
    random, with ``d_l`` from :func:`layer_densities`. The choice is a pure function of
    ``(seed, client id)`` (counter-based uniforms from :mod:`fedsparse.rng`), so a client's
    mask is the same whichever cohort it is drawn in.

    Parameters
    ----------
    layout : a :class:`~fedsparse.models.layout.ParamLayout` (or a problem or module).
    density : target fraction of prunable entries kept, in (0, 1].
    clients : (S,) int client ids.
    seed : run seed.
    distribution : ``"erk"`` (default, Evci et al. 2020) or ``"uniform"``.

    Returns
    -------
    (S, P) bool masks, True on every non-prunable entry.
    """
    layout = layout_of(layout)
    densities = layer_densities(layout, density, distribution)
    seed = check_int("seed", seed)
    clients = _check_clients(clients)
    S = clients.numel()
    mask = torch.ones((S, layout.size), dtype=torch.bool)
    for idx, d in zip(scopes(layout, "layer"), densities, strict=True):
        k = keep_count(d, idx.numel())
        keys = rng.uniform(seed, rng.ALGORITHM, _INITIAL_MASK, clients[:, None], idx[None, :])
        pick, _ = rng.choose_without_replacement(keys, torch.ones_like(keys, dtype=torch.bool), k)
        mask[:, idx] = torch.zeros((S, idx.numel()), dtype=torch.bool).scatter_(1, pick, True)
    return mask


def _check_clients(clients) -> torch.Tensor:
    try:
        c = torch.as_tensor(clients)
    except (TypeError, ValueError, RuntimeError):
        raise fail("clients", clients, "must be a 1-D sequence of client ids") from None
    if c.ndim == 0:
        c = c.reshape(1)
    if c.ndim != 1 or c.is_floating_point() or c.dtype == torch.bool or c.is_complex():
        raise fail("clients", clients, "must be a 1-D sequence of integer client ids")
    if c.numel() and int(c.min()) < 0:
        raise fail("clients", clients, "client ids must be non-negative")
    return c.to(torch.int64)


def fedspa_drop_fraction(round: int, rounds: int, alpha0: float = 0.5) -> float:
    """FedSpa's cosine-annealed drop fraction ``alpha_t = (alpha0/2)(1 + cos(pi t / T))``."""
    rounds = check_int("rounds", rounds, minimum=1)
    round = check_int("round", round, minimum=0, maximum=rounds)
    alpha0 = check_float("alpha0", alpha0, nonnegative=True, maximum=1.0)
    return alpha0 / 2 * (1 + math.cos(math.pi * round / rounds))


def fedspa_update(mask: torch.Tensor, params: torch.Tensor, grad: torch.Tensor, layout,
                  round: int, rounds: int, alpha0: float = 0.5) -> torch.Tensor:
    """FedSpa's mask update after local training (Huang et al. 2022), for S clients at once.

    Per prunable tensor ``l`` and client: ``n_l = ceil(alpha_t * nnz_l)`` with
    ``alpha_t = (alpha0/2)(1 + cos(pi t / T))``; the ``n_l`` active entries of smallest
    ``|params|`` are dropped and the ``n_l`` entries of largest ``|grad|`` among those
    inactive in the *old* mask are grown, so ``nnz_l`` is unchanged. Ties follow H_tau
    (the lower index is kept, and grown). When a tensor has fewer than ``n_l`` inactive
    entries, only as many as it has are swapped. Grown entries start at 0: the caller
    multiplies the parameters by the new mask (entries inactive in the old mask are
    already 0).

    Parameters
    ----------
    mask : (S, P) bool current masks.
    params : (S, P) parameters after local training.
    grad : (S, P) dense gradients (one local batch, at ``params``).
    layout : a :class:`~fedsparse.models.layout.ParamLayout` (or a problem or module).
    round, rounds : t in [0, T] and T >= 1.
    alpha0 : initial drop fraction in [0, 1] (0.5 as in FedSpa).

    Returns
    -------
    (S, P) bool new masks; non-prunable entries are left as they were in ``mask``.
    """
    alpha = fedspa_drop_fraction(round, rounds, alpha0)
    # the type first: a linear problem's layout is sized by the mask
    size = check_tensor("mask", mask, "(S, P)").shape[-1]
    layout = layout_of(layout, size)
    mask = check_cohort("mask", mask, layout.size, dtype=torch.bool)
    S = mask.shape[0]
    params = check_cohort("params", params, layout.size, rows=S).detach()
    grad = check_cohort("grad", grad, layout.size, rows=S).detach()
    new = mask.clone()
    if S == 0:
        return new
    for idx in scopes(layout, "layer"):
        idx = idx.to(mask.device)
        active = mask[:, idx]
        nnz = active.sum(1)                                            # (S,)
        # ceil(alpha * nnz) once per distinct nnz (usually one), not once per client.
        values, inverse = torch.unique(nnz, return_inverse=True)
        drop = torch.tensor([keep_count(alpha, int(v)) for v in values],
                            dtype=torch.int64, device=nnz.device)[inverse]
        drop = torch.minimum(drop, idx.numel() - nnz)                  # room to regrow
        kept = rank_select(params[:, idx], active, nnz - drop)
        grown = rank_select(grad[:, idx], ~active, drop)
        new[:, idx] = kept | grown
    return new
