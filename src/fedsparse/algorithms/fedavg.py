"""FedAvg (McMahan et al. 2017) and FedProx (Li et al. 2020): local training, then the
weighted average of the local models.

Both are the baselines of every sparse method here, on linear and neural problems.
FedProx's proximal term has a real gradient ``mu (x - x_t)`` (a proximal term built
outside autograd, with no gradient, is a known bug of public code; it makes FedProx
FedAvg).
"""

from __future__ import annotations

from dataclasses import replace

from .._validation import check_float
from .base import (
    Algorithm,
    ClientContext,
    check_step_size,
    lipschitz_statistics,
    payload_view,
    resolve_step_size,
    weighted_mean,
)
from .local import LocalOptimizer, local_train


class FederatedAveraging(Algorithm):
    """FedAvg / FedProx.

    Client i, from ``x_{i,0} = x_t``, K steps of SGD (or momentum SGD, or Adam with fresh
    moments every round) on mini-batches of its data, on

        h_i(x) = f_i(x) + (mu / 2) ||x - x_t||^2          (mu = 0: FedAvg)

    Server: ``x_{t+1} = sum_i p_i x_{i,K} / sum_i p_i`` over the uploads that arrived
    (McMahan et al. 2017, Alg. 1; Li et al. 2020, Alg. 2).
    """

    upload_encoding = "dense"
    broadcast_encoding = "dense"

    def __init__(self, name: str, *, step_size, local_steps, batch_size, optimizer, momentum,
                 mu):
        self.name = name
        self.step_size = check_step_size("step_size", step_size)
        # "auto" is checked later (it needs the problem); any number is checked now.
        self.local = LocalOptimizer.checked(
            step_size=1.0 if step_size == "auto" else step_size, local_steps=local_steps,
            batch_size=batch_size, optimizer=optimizer, momentum=momentum)
        self.mu = check_float("mu", mu, nonnegative=True)

    def hyperparameters(self):
        out = {**self.local.hyperparameters(), "step_size": self.step_size}
        if self.name == "fed_prox":
            out["mu"] = self.mu
        return out

    def statistics(self, problem, split):
        return lipschitz_statistics(self.step_size, problem, split)

    def _bind(self, problem, spec, stats):
        self.resolved_step = resolve_step_size(self.step_size, stats) \
            if stats or self.step_size != "auto" else None

    def init(self, problem, seed=0):
        state = super().init(problem, seed)
        state["step_size"] = self.resolved_step
        return state

    def client_config(self, state):
        return {"step_size": state["step_size"]}

    def client_update(self, payload, ctx: ClientContext):
        opt = self.local
        if ctx.config.get("step_size") not in (None, opt.step_size):
            opt = replace(opt, step_size=ctx.config["step_size"])
        x = payload_view(payload, ctx.size)  # local_train trains a copy
        return local_train(opt, x, ctx, mu=self.mu, anchor=payload), None, {}

    def aggregate(self, state, uploads, cohort):
        return {**state, "model": weighted_mean(uploads, cohort)}


def fed_avg(*, step_size: float | str = 0.01, local_steps: int = 5,
            batch_size: int | None = None, optimizer: str = "sgd", momentum: float = 0.0
            ) -> FederatedAveraging:
    """FedAvg (McMahan et al. 2017, Algorithm 1).

    ``x_{t+1} = sum_i p_i x_{i,K}``, each ``x_{i,K}`` from K local steps started at x_t.

    Parameters
    ----------
    step_size : eta, or "auto" = 1 / max_i L_i (linear problems only).
    local_steps : K optimiser steps per round.
    batch_size : examples per step and client; None = the full local data.
    optimizer : "sgd" or "adam" (moments fresh each round).
    momentum : SGD momentum (0 = plain SGD).
    """
    return FederatedAveraging("fed_avg", step_size=step_size, local_steps=local_steps,
                              batch_size=batch_size, optimizer=optimizer, momentum=momentum,
                              mu=0.0)


def fed_prox(*, mu: float, step_size: float | str = 0.01, local_steps: int = 5,
             batch_size: int | None = None, optimizer: str = "sgd", momentum: float = 0.0
             ) -> FederatedAveraging:
    """FedProx (Li et al. 2020, Algorithm 2): FedAvg whose local objective adds
    ``(mu / 2) ||x - x_t||^2``, with its real gradient ``mu (x - x_t)``.

    Parameters
    ----------
    mu : proximal weight (> 0; mu = 0 is :func:`fed_avg`).
    step_size, local_steps, batch_size, optimizer, momentum : as :func:`fed_avg`.
    """
    check_float("mu", mu, positive=True)
    return FederatedAveraging("fed_prox", step_size=step_size, local_steps=local_steps,
                              batch_size=batch_size, optimizer=optimizer, momentum=momentum,
                              mu=mu)
