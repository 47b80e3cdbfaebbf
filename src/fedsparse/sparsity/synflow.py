"""SynFlow pruning masks (Tanaka et al. 2020), as SAFARI prunes with them (Mao et al. 2022).

Data-free: the scores are ``|theta| * |d R / d theta|`` of the all-ones input's output ``R``
of the network with ``|theta|`` everywhere, pruned iteratively to the target density.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from .._validation import check_choice, check_int, fail
from ._mask_common import SCOPES, check_density, check_vector, layout_of, scopes, select


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
    theta = check_vector("theta", theta, layout.size)
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
    density = check_density(density)
    iterations = check_int("iterations", iterations, minimum=1)
    scope = check_choice("scope", scope, SCOPES)
    module = problem if isinstance(problem, nn.Module) else getattr(problem, "module", None)
    if not isinstance(module, nn.Module):
        raise fail("problem", problem, "must be a neural problem or a torch module for SynFlow")
    layout = layout_of(problem)
    params = check_vector("params", params, layout.size)
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

    groups = scopes(layout, scope)
    # Scored on the CPU, where the problem's template module lives: the same float64
    # scores (and so the same mask) whichever device the run uses; the mask then goes to
    # the parameters' device.
    net = _SynFlowNet(module, layout, buffers)
    theta = params.detach().to("cpu", torch.float64)
    mask = torch.ones(layout.size, dtype=torch.bool)
    for e in range(1, iterations + 1):
        scores = net.scores(theta * mask, input_shape)
        # density**1.0 is exactly density, so the last pass keeps ceil(density * count).
        mask = select(scores, layout, groups, density ** (e / iterations), allowed=mask)
    return mask.to(params.device)
