"""Pruning masks over the flat parameter vector of a model (Mao et al. 2022;
docs/decisions.md, section 4).

Magnitude and SynFlow masks (Tanaka et al. 2020) are data-free: one (P,) bool mask per
model. FedSpa (Huang et al. 2022) keeps one persistent mask per client and evolves it
after local training: cosine-annealed drop by magnitude, regrowth by gradient.

Every mask keeps an exact number of entries per scope: ``ceil(density * count)``
prunable entries, chosen by score with ties broken as for H_tau (the lower flat index
wins, docs/decisions.md, section 1). Only prunable entries compete (conv and linear weights, as
:class:`~fedsparse.models.layout.ParamLayout` marks them); biases and normalisation
parameters are always kept.

``density`` is the fraction *kept* (docs/decisions.md, section 4): Mao et al. 2022's
"60% pruned" is ``density=0.4``.
"""

from __future__ import annotations

import copy
import math
from fractions import Fraction

import torch
from torch import nn

from .. import rng
from .._validation import check_choice, check_float, check_int, fail
from ..models.layout import ParamLayout
from .thresholding import top_indices

SCOPES = ("layer", "global")
DISTRIBUTIONS = ("erk", "uniform")

# The round slot of the ALGORITHM stream: rounds are >= 0, so no per-round draw of an
# algorithm ever hashes the same counters as a FedSpa initial mask.
_INITIAL_MASK = -1


# --------------------------------------------------------------------------- helpers


def _check_density(density) -> float:
    density = check_float("density", density)
    if not 0.0 < density <= 1.0:
        raise fail("density", density, "must be in (0, 1]: the fraction of prunable weights "
                                       "kept (60% pruned is density=0.4)")
    return density


def _keep_count(fraction: float, count: int) -> int:
    """``ceil(fraction * count)``, with ``fraction`` read as the decimal it prints as.

    Binary floating point would keep 8 of 100 entries at ``density=0.07`` (0.07 * 100 is
    7.000000000000001); the decimal reading keeps the 7 a user asked for.
    """
    return min(count, math.ceil(Fraction(repr(float(fraction))) * count))


def _layout_of(problem, size: int | None = None):
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


def _check_vector(name: str, x, size: int) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise fail(name, type(x).__name__, "must be a torch tensor")
    if x.ndim != 1 or x.shape[0] != size:
        raise fail(name, f"tensor of shape {tuple(x.shape)}",
                   f"must be a (P,) flat parameter vector with P={size}")
    return x


def _check_cohort(name: str, x, size: int, rows: int | None = None, dtype=None) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise fail(name, type(x).__name__, "must be a torch tensor")
    if x.ndim != 2 or x.shape[1] != size or (rows is not None and x.shape[0] != rows):
        want = f"({'S' if rows is None else rows}, {size})"
        raise fail(name, f"tensor of shape {tuple(x.shape)}", f"must have shape {want}")
    if dtype is not None and x.dtype != dtype:
        raise fail(name, f"tensor of dtype {x.dtype}", f"must be {dtype}")
    return x


def _scopes(layout, scope: str) -> list[torch.Tensor]:
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


def _select(scores: torch.Tensor, layout, groups, density: float,
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
        k = _keep_count(density, idx.numel())
        if allowed is not None:
            idx = idx[allowed[idx]]
            k = min(k, idx.numel())
        keep[idx[top_indices(scores[idx], k)]] = True
    return keep


def _rank_select(values: torch.Tensor, valid: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """(S, n) bool: per row the ``count[s]`` valid entries of largest ``|values|``.

    Ties go to the lower index (H_tau's rule). ``count[s]`` must not exceed the number
    of valid entries of row ``s``.
    """
    order = top_indices(values, values.shape[1])       # every entry, by (-|v|, index)
    # Walking that order, take valid entries until count[s] are taken: the first
    # count[s] valid entries in H_tau order.
    ranked = valid.gather(1, order)
    take = ranked & (torch.cumsum(ranked, dim=1) <= count[:, None])
    return torch.zeros_like(valid).scatter_(1, order, take)


# --------------------------------------------------------------------- magnitude


def magnitude_mask(problem, params: torch.Tensor, density: float, scope: str = "layer"
                   ) -> torch.Tensor:
    """Magnitude pruning mask (MAG in Mao et al. 2022): keep the largest ``|params|``.

    Parameters
    ----------
    problem : a problem (its ``layout`` or ``module`` gives the parameter tensors), a
        :class:`~fedsparse.models.layout.ParamLayout` or a torch module. A problem without
        a module (linear models) is one fully prunable tensor.
    params : (P,) flat parameter vector the mask is scored on.
    density : fraction of prunable entries kept, in (0, 1].
    scope : ``"layer"`` keeps ``ceil(density * n_l)`` entries of every prunable tensor
        ``l``; ``"global"`` keeps ``ceil(density * n)`` of all ``n`` prunable entries.

    Returns
    -------
    (P,) bool mask, True on kept entries and on every non-prunable entry. Ties in
    ``|params|`` go to the lower flat index, so the count is exact.
    """
    density = _check_density(density)
    scope = check_choice("scope", scope, SCOPES)
    size = params.shape[-1] if isinstance(params, torch.Tensor) and params.ndim else None
    layout = _layout_of(problem, size)
    params = _check_vector("params", params, layout.size)
    return _select(params.detach().abs(), layout, _scopes(layout, scope), density)


# ----------------------------------------------------------------------- SynFlow


class _SynFlowNet:
    """A float64, eval-mode deep copy of a module with ``|theta|`` everywhere (SynFlow).

    Built once per mask and reloaded for each scoring pass: the user's module is never
    touched, so there is nothing to restore.
    """

    def __init__(self, module: nn.Module, layout, buffers: dict | None = None):
        net = copy.deepcopy(module).to(device="cpu", dtype=torch.float64).eval()
        named = dict(net.named_parameters())
        missing = [n for n in layout.names if n not in named]
        if missing:
            raise fail("problem", type(module).__name__,
                       f"has no parameter {missing[0]!r} that its layout names")
        with torch.no_grad():
            for p in net.parameters():  # frozen parameters (not in the flat vector) too
                p.abs_()
            for m in net.modules():
                # A batch norm without running statistics (a neural problem's template
                # uses batch statistics only) would normalise the single all-ones sample
                # to zero and cut every path through it. Eval mode means the statistics
                # of a fresh layer instead, mean 0 and variance 1, as at initialisation.
                if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is None \
                        and m.num_features:
                    m.running_mean = torch.zeros(m.num_features, dtype=torch.float64)
                    m.running_var = torch.ones(m.num_features, dtype=torch.float64)
            own = dict(net.named_buffers())
            for name, value in (buffers or {}).items():
                if name not in own or own[name] is None:
                    raise fail("buffers", name,
                               ("must name buffers of the module: " + ", ".join(own))
                               if own else "must be empty: the module has no buffers")
                own[name].copy_(torch.as_tensor(value).to(own[name].device))
            for b in own.values():
                if b is not None and b.is_floating_point():
                    b.abs_()
        self.net, self.layout = net, layout
        self.params = [named[n].requires_grad_(True) for n in layout.names]

    def scores(self, theta: torch.Tensor, input_shape: tuple[int, ...]) -> torch.Tensor:
        """(P,) float64 ``|dR/dtheta * theta|`` at the parameters ``|theta|``."""
        theta = theta.detach().to(torch.float64).abs()
        with torch.no_grad():
            for p, value in zip(self.params, self.layout.unflatten(theta).values(),
                                strict=True):
                p.copy_(value)
        out = self.net(torch.ones((1, *input_shape), dtype=torch.float64))
        if not isinstance(out, torch.Tensor):
            raise fail("problem", type(self.net).__name__, "must return one tensor from forward")
        grads = torch.autograd.grad(out.sum(), self.params, allow_unused=True)
        flat = torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1)
                          for p, g in zip(self.params, grads, strict=True)])
        return (flat * theta).abs()


def synflow_scores(module: nn.Module, layout, theta: torch.Tensor, input_shape,
                   buffers: dict | None = None) -> torch.Tensor:
    """SynFlow saliencies ``|dR/dtheta * theta|`` (Tanaka et al. 2020), float64, (P,).

    ``R`` is the sum of the outputs of a float64, eval-mode deep copy of ``module`` whose
    parameters are ``|theta|`` and whose floating buffers are their absolute values, on one
    all-ones input of shape ``input_shape``. The user's module is never touched.

    Parameters
    ----------
    module : the template network. Batch-norm layers without running statistics use
        mean 0 and variance 1 (a fresh layer's statistics), so paths through them count.
    layout : its :class:`~fedsparse.models.layout.ParamLayout`.
    theta : (P,) flat parameters (masked by the caller).
    input_shape : shape of one example, without the batch axis.
    buffers : optional ``{name: tensor}`` replacing the module's buffers (e.g. averaged
        batch-norm statistics); absolute values are taken as for the module's own.
    """
    theta = _check_vector("theta", theta, layout.size)
    return _SynFlowNet(module, layout, buffers).scores(theta, tuple(input_shape))


def synflow_mask(problem, params: torch.Tensor, density: float, iterations: int = 100,
                 scope: str = "layer", *, input_shape=None, buffers: dict | None = None
                 ) -> torch.Tensor:
    """Iterative SynFlow mask (Tanaka et al. 2020), as SAFARI uses it (Mao et al. 2022).

    For ``e = 1..iterations`` the parameters ``|params|`` masked by the current mask are
    scored by :func:`synflow_scores` and the mask keeps the top ``density**(e/iterations)``
    fraction per scope among the entries it still holds (a pruned entry stays pruned,
    even where its score ties with a kept one). The last iteration keeps exactly
    ``ceil(density * count)`` per scope, ties as H_tau. Scoring runs on a float64,
    eval-mode deep copy of the module; the module itself is never modified.

    Parameters
    ----------
    problem : a neural problem (``.module``, the template network) or a torch module.
    params : (P,) flat parameters to score (the global model of the round).
    density : fraction of prunable entries kept, in (0, 1].
    iterations : n >= 1 scoring passes (Tanaka et al. use 100; SAFARI's code uses 1).
    scope : ``"layer"`` (per prunable tensor, SAFARI's choice) or ``"global"``.
    input_shape : shape of one example; defaults to ``problem.feature_shape``.
    buffers : optional ``{name: tensor}`` replacing the module's buffers for scoring.

    Returns
    -------
    (P,) bool mask, True on kept entries and on every non-prunable entry.
    """
    density = _check_density(density)
    iterations = check_int("iterations", iterations, minimum=1)
    scope = check_choice("scope", scope, SCOPES)
    module = problem if isinstance(problem, nn.Module) else getattr(problem, "module", None)
    if not isinstance(module, nn.Module):
        raise fail("problem", problem, "must be a neural problem or a torch module for SynFlow")
    layout = _layout_of(problem)
    params = _check_vector("params", params, layout.size)
    if input_shape is None:
        input_shape = getattr(problem, "feature_shape", None)
    if input_shape is None:
        raise fail("input_shape", None, "must be given: the shape of one example (the problem "
                   "does not know its feature shape yet)")
    try:
        input_shape = tuple(int(s) for s in input_shape)
    except (TypeError, ValueError):
        raise fail("input_shape", input_shape, "must be a tuple of positive integers") from None
    if not all(s > 0 for s in input_shape):
        raise fail("input_shape", input_shape, "must be a tuple of positive integers")

    groups = _scopes(layout, scope)
    # Scored on the CPU, where the problem's template module lives: the same float64
    # scores (and so the same mask) whichever device the run uses; the mask then goes to
    # the parameters' device.
    net = _SynFlowNet(module, layout, buffers)
    theta = params.detach().to("cpu", torch.float64)
    mask = torch.ones(layout.size, dtype=torch.bool)
    for e in range(1, iterations + 1):
        scores = net.scores(theta * mask, input_shape)
        # density**1.0 is exactly density, so the last pass keeps ceil(density * count).
        mask = _select(scores, layout, groups, density ** (e / iterations), allowed=mask)
    return mask.to(params.device)


# ------------------------------------------------------------------------ FedSpa


def layer_densities(layout, density: float, distribution: str = "erk") -> list[float]:
    """Density of each prunable tensor (in flat-vector order) for a random sparse init.

    ``"uniform"``: ``density`` everywhere. ``"erk"``: Erdos-Renyi-Kernel (Evci et al.
    2020), as FedSpa uses it (Huang et al. 2022): density proportional to
    ``sum(shape) / prod(shape)`` scaled so the kept total is ``density`` times the prunable
    count; a tensor that would exceed 1 is made dense and the rest rescaled.
    """
    density = _check_density(density)
    distribution = check_choice("distribution", distribution, DISTRIBUTIONS)
    layout = _layout_of(layout)
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
    layout = _layout_of(layout)
    densities = layer_densities(layout, density, distribution)
    seed = check_int("seed", seed)
    clients = _check_clients(clients)
    S = clients.numel()
    mask = torch.ones((S, layout.size), dtype=torch.bool)
    for idx, d in zip(_scopes(layout, "layer"), densities, strict=True):
        k = _keep_count(d, idx.numel())
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
    size = mask.shape[-1] if isinstance(mask, torch.Tensor) and mask.ndim else None
    layout = _layout_of(layout, size)
    mask = _check_cohort("mask", mask, layout.size, dtype=torch.bool)
    S = mask.shape[0]
    params = _check_cohort("params", params, layout.size, rows=S).detach()
    grad = _check_cohort("grad", grad, layout.size, rows=S).detach()
    new = mask.clone()
    if S == 0:
        return new
    for idx in _scopes(layout, "layer"):
        idx = idx.to(mask.device)
        active = mask[:, idx]
        nnz = active.sum(1)                                            # (S,)
        # ceil(alpha * nnz) once per distinct nnz (usually one), not once per client.
        values, inverse = torch.unique(nnz, return_inverse=True)
        drop = torch.tensor([_keep_count(alpha, int(v)) for v in values],
                            dtype=torch.int64, device=nnz.device)[inverse]
        drop = torch.minimum(drop, idx.numel() - nnz)                  # room to regrow
        kept = _rank_select(params[:, idx], active, nnz - drop)
        grown = _rank_select(grad[:, idx], ~active, drop)
        new[:, idx] = kept | grown
    return new
