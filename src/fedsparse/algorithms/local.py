"""Local training shared by the model-averaging algorithms: SGD (with momentum) or Adam,
for all S clients of a chunk at once, with an optional proximal term and a mask.

The optimiser state (momentum buffer, Adam moments) is fresh every round: it lives only
inside one call, as in the reference code of FedAvg-style methods (Mao et al.'s SAFARI
code re-creates its optimiser every round; Liu et al. and Dinh et al. use plain SGD).
The update rules are PyTorch's ``torch.optim.SGD`` / ``torch.optim.Adam`` ones, written
element-wise on (S, P) stacks so no Python loop runs over clients.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._validation import check_choice, check_float, check_int, fail
from ..problems.protocol import proximal_grad, proximal_term
from .base import ClientContext

OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class LocalOptimizer:
    """Hyper-parameters of local training.

    Attributes
    ----------
    step_size : learning rate eta.
    local_steps : K optimiser steps per round.
    batch_size : examples per step and client (None = the full local data).
    optimizer : "sgd" or "adam".
    momentum : SGD momentum (heavy ball, PyTorch's convention); 0 = plain SGD.
    betas, eps : Adam's (beta1, beta2) and epsilon.
    """

    step_size: float
    local_steps: int
    batch_size: int | None
    optimizer: str = "sgd"
    momentum: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8

    @classmethod
    def checked(cls, *, step_size, local_steps, batch_size, optimizer="sgd", momentum=0.0,
                betas=(0.9, 0.999), eps=1e-8) -> LocalOptimizer:
        """Validated hyper-parameters (each bad value is a clear error naming it)."""
        check_float("step_size", step_size, positive=True)
        check_int("local_steps", local_steps, minimum=1)
        check_int("batch_size", batch_size, minimum=1, allow_none=True)
        check_choice("optimizer", optimizer, OPTIMIZERS)
        check_float("momentum", momentum, nonnegative=True, maximum=0.999999)
        if momentum and optimizer != "sgd":
            raise fail("momentum", momentum, 'applies to optimizer="sgd" only (Adam has betas)')
        if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
            raise fail("betas", betas, "must be a pair (beta1, beta2)")
        for name, b in zip(("betas[0]", "betas[1]"), betas, strict=True):
            check_float(name, b, nonnegative=True, maximum=0.999999)
        check_float("eps", eps, positive=True)
        return cls(float(step_size), int(local_steps), batch_size, optimizer, float(momentum),
                   (float(betas[0]), float(betas[1])), float(eps))

    def hyperparameters(self) -> dict:
        out = {"step_size": self.step_size, "local_steps": self.local_steps,
               "batch_size": self.batch_size, "optimizer": self.optimizer}
        if self.optimizer == "sgd":
            out["momentum"] = self.momentum
        return out


def _adam_floor(eps: float, x: torch.Tensor) -> float | None:
    """The smallest normal number of ``x``'s dtype, to which Adam's bias-corrected second
    moments may be raised before their square root without changing any bit of the
    denominators ``sqrt(v) + eps``: on the CPU, where torch's vectorised square root is
    several times slower on zeros and subnormals than on normal numbers (4 million
    float32 moments, two thirds of them 0 where a mask or a dead unit zeroes the
    gradient: 6.9 ms against 0.7 ms on AVX-512). None where nothing is gained (a GPU),
    or where ``eps`` does not absorb ``sqrt(floor)`` (it does from about 2e-12 in
    float32; torch's default is 1e-8)."""
    if x.device.type != "cpu" or not x.dtype.is_floating_point:
        return None
    tiny = torch.finfo(x.dtype).tiny
    e = torch.tensor(eps, dtype=x.dtype)
    return tiny if bool(torch.tensor(tiny, dtype=x.dtype).sqrt() + e == e) else None


def local_train(opt: LocalOptimizer, x: torch.Tensor, ctx: ClientContext, *,
                mu: float = 0.0, anchor: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, first_step: int = 0) -> torch.Tensor:
    """K local optimiser steps on each client's loss, all S clients at once.

    Step k on client i, with a mini-batch xi_{i,k} drawn by ``ctx.batch(first_step + k)``::

        g   = grad f_i(x; xi_{i,k}) + mu (x - anchor)           (FedProx: Li et al. 2020, eq. 2)
        g   = g * M                                              (a mask M keeps pruned entries)
        x   = x - eta * update(g)                                SGD / momentum / Adam
        x   = x * M                                              pruned entries stay exactly 0

    Parameters
    ----------
    opt : the optimiser and its hyper-parameters.
    x : (S, P) starting models (modified copy returned).
    ctx : the clients' data and random streams.
    mu : proximal weight; ``anchor`` (P,) or (S, P) is the point it pulls towards.
    mask : (S, P) or (P,) bool, entries allowed to be non-zero (None = all).
    first_step : counter of the first mini-batch draw (so callers can interleave draws).

    Returns
    -------
    (S, P) local models after K steps.
    """
    # In place on (S, P) buffers: for a network every out-of-place term is one more pass
    # over S x P memory, which is what a round of small local steps is bound by.
    largest = torch.finfo(x.dtype).max
    for name, value in (("step_size", opt.step_size), ("mu", mu)):
        if value and abs(value) > largest:  # torch would fail converting it to x's dtype
            raise fail(name, value, f"must be at most {largest:.4g}, the largest {x.dtype} "
                       "number (a value this large diverges in one step anyway)")
    x = x.clone()
    m = None if mask is None else mask.to(x.dtype)
    if m is not None:
        x.mul_(m)
    buf = exp_avg = exp_sq = None
    b1, b2 = opt.betas
    ctx.prefetch(range(first_step, first_step + opt.local_steps), opt.batch_size)
    plain = m is None and opt.optimizer == "sgd" and not opt.momentum
    floor = _adam_floor(opt.eps, x) if opt.optimizer == "adam" else None
    proximal = proximal_term(x, mu, anchor) if plain else None
    for k in range(opt.local_steps):
        X, y, w = ctx.batch(first_step + k, opt.batch_size)
        if plain:  # x -= eta (g + mu (x - anchor)): a problem may do it without forming g
            ctx.problem.descend_(x, X, y, w, opt.step_size, term=proximal)
            continue
        g = proximal_grad(ctx.problem, x, X, y, w, mu, anchor)  # new: updated in place below
        if m is not None:
            g.mul_(m)
        if opt.optimizer == "adam":  # torch.optim.Adam's update, term for term
            if exp_avg is None:
                exp_avg, exp_sq = torch.zeros_like(x), torch.zeros_like(x)
            exp_avg.mul_(b1).add_(g, alpha=1 - b1)
            exp_sq.mul_(b2).addcmul_(g, g, value=1 - b2)
            step = k + 1
            v = exp_sq / (1 - b2 ** step)
            if floor is not None:
                v.clamp_min_(floor)
            denom = v.sqrt_().add_(opt.eps)
            x.addcdiv_(exp_avg, denom, value=-opt.step_size / (1 - b1 ** step))
        elif opt.momentum:
            buf = g if buf is None else buf.mul_(opt.momentum).add_(g)
            x.sub_(buf, alpha=opt.step_size)
        else:
            x.sub_(g, alpha=opt.step_size)
        if m is not None:
            x.mul_(m)
    return x
