"""Federated composite optimisation: FedMid and FedDualAvg (Yuan, Zaheer, Reddi 2021),
the sparse baselines of Jeong et al. 2024 (Sec. V-B), with an l0 constraint, l0 or l1
penalty, and optionally the l2 ball of Jeong et al. 2024."""

from __future__ import annotations

import math

import torch

from .._resources import check_steps
from .._validation import check_choice, check_float, check_int, fail
from ..sparsity import hard_threshold_blocks, project_l2_ball
from .base import Algorithm, ClientContext, payload_rows, weighted_mean
from .sparse_models import check_scope, check_scoped_sparsity

REGULARIZERS = ("l0_constraint", "l0", "l1")


class FederatedComposite(Algorithm):
    """What FedMid and FedDualAvg (Yuan, Zaheer, Reddi 2021) share: the sparsity
    regulariser psi and its prox, the round counter, the checks; :class:`FedMid` and
    :class:`FedDualAvg` give the two rounds.

    ``prox_{s psi}`` is: H_tau for the constraint ``||x||_0 <= tau`` (per class row for
    softmax, or over the whole model with ``sparsity_scope="global"``); hard
    thresholding at ``sqrt(2 lambda s)`` for ``lambda ||x||_0``; soft thresholding at
    ``lambda s`` for ``lambda ||x||_1``.

    With ``radius`` R the feasible set also has the l2 ball ``||x|| <= R`` (Jeong et al.
    2024 apply ``||x|| <= 1e5`` "throughout all the methods" in Sec. V-B.2) and every
    prox below is followed by ``Pi_R`` (so each local iterate and the server model are
    in the ball, as in FedGradMP's Alg. 2). ``Pi_R o prox`` is the exact prox of
    ``psi + indicator(ball)`` for the l0 constraint (the tau largest entries are still
    the best support) and for the l1 penalty (the optimality condition gives
    ``x = soft(v) / (1 + mu)``, a scaling); for the l0 penalty it is the composition of
    the two, not the joint prox.

    The mean is p-weighted over the uploads that arrived (docs/decisions.md, section 3).
    """

    def __init__(self, *, sparsity, client_lr, server_lr, local_steps, batch_size,
                 regularizer, penalty, sparsity_scope="row", radius=None):
        self.regularizer = check_choice("regularizer", regularizer, REGULARIZERS)
        self.sparsity_scope = check_scope(sparsity_scope)
        if regularizer != "l0_constraint" and sparsity_scope != "row":
            raise fail("sparsity_scope", sparsity_scope, "must be 'row' with "
                       f"regularizer={regularizer!r} (the penalty acts entry by entry)")
        self.radius = check_float("radius", radius, positive=True, allow_none=True)
        if regularizer == "l0_constraint":
            self.sparsity = check_int("sparsity", sparsity, minimum=1)
            if penalty:
                raise fail("penalty", penalty, "must be 0 with regularizer='l0_constraint'")
        else:
            if sparsity is not None:
                raise fail("sparsity", sparsity, f"must be None with regularizer={regularizer!r}"
                           " (the penalty sets the sparsity)")
            self.sparsity = None
        self.penalty = check_float("penalty", penalty, nonnegative=True)
        if regularizer != "l0_constraint" and self.penalty == 0:
            raise fail("penalty", penalty, f"must be positive with regularizer={regularizer!r}")
        self.client_lr = check_float("client_lr", client_lr, positive=True)
        self.server_lr = check_float("server_lr", server_lr, positive=True)
        self.local_steps = check_int("local_steps", local_steps, minimum=1)
        check_steps(local_steps=self.local_steps)
        self.batch_size = check_int("batch_size", batch_size, minimum=1, allow_none=True)

    def hyperparameters(self):
        return {"sparsity": self.sparsity, "client_lr": self.client_lr,
                "server_lr": self.server_lr, "local_steps": self.local_steps,
                "batch_size": self.batch_size, "regularizer": self.regularizer,
                "penalty": self.penalty, "sparsity_scope": self.sparsity_scope,
                "radius": self.radius}

    def _bind(self, problem, spec, stats):
        self.blocks: int = problem.blocks  # class rows thresholded separately (softmax)
        if self.sparsity is not None:
            check_scoped_sparsity(self.sparsity, self.sparsity_scope, problem, spec)

    def prox(self, v: torch.Tensor, step: float) -> torch.Tensor:
        """prox_{step psi}(v), then Pi_R when a radius is set; batched over leading axes.
        The l0 constraint needs a bound algorithm (its class rows); the penalties do not."""
        if self.regularizer == "l0_constraint":
            self._require_bound()
            x = hard_threshold_blocks(v, self.sparsity, self.blocks, self.sparsity_scope)
        elif self.regularizer == "l0":
            # argmin_x (1/2)(x - v)^2 + step*lambda*[x != 0]: keep v where v^2/2 > step*lambda.
            x = torch.where(v.abs() > math.sqrt(2 * self.penalty * step), v,
                            torch.zeros_like(v))
        else:
            x = torch.sign(v) * torch.clamp(v.abs() - self.penalty * step, min=0.0)
        return x if self.radius is None else project_l2_ball(x, self.radius)

    def init(self, problem, seed=0):
        state = super().init(problem, seed)
        state["round"] = 0  # rounds aggregated (kept in checkpoints; the schedule reads t)
        return state


class FedMid(FederatedComposite):
    """FedMid, federated mirror descent (Yuan et al. 2021, Alg. 2 with the squared-norm
    mirror map), round t::

        client:  x <- prox_{eta_c psi}(x - eta_c g(x)),  K steps from x_t
        server:  x_{t+1} = prox_{eta_s eta_c psi}(x_t + eta_s mean_i(x_i - x_t))

    With the l0 constraint and eta_s = 1 this is exactly FedIter-HT (Tong et al. 2022,
    Alg. 2). Its uploads are sparse under the l0 constraint (dense under a penalty); see
    :class:`FederatedComposite` for psi, its prox and the l2 ball.
    """

    name = "fed_mid"

    def __init__(self, **composite):
        super().__init__(**composite)
        self.upload_encoding = "sparse" if self.regularizer == "l0_constraint" else "dense"

    def client_update(self, payload: torch.Tensor, ctx: ClientContext):
        eta = self.client_lr
        x = payload_rows(payload, ctx.size)
        ctx.prefetch(range(self.local_steps), self.batch_size)
        for k in range(self.local_steps):
            X, y, w = ctx.batch(k, self.batch_size)
            x = self.prox(x - eta * ctx.problem.grad(x, X, y, w), eta)
        return x, None, {}

    def aggregate(self, state, uploads, cohort):
        mean = weighted_mean(uploads, cohort)
        # eta_s = 1 is plain averaging; skip x_t + (mean - x_t), which can round differently.
        x = mean if self.server_lr == 1.0 else \
            state["model"] + self.server_lr * (mean - state["model"])
        return {**state, "model": self.prox(x, self.server_lr * self.client_lr),
                "round": state["round"] + 1}


class FedDualAvg(FederatedComposite):
    """FedDualAvg (Yuan et al. 2021, Alg. 1), round t, dual state z (model = its prox)::

        client:  z_0 = z_t;  x_k = prox_{eta~_{t,k} psi}(z_k);  z_{k+1} = z_k - eta_c g(x_k)
        server:  z_{t+1} = z_t + eta_s mean_i(z_i - z_t)
                 x_{t+1} = prox_{eta~_{t+1,0} psi}(z_{t+1})

    with ``eta~_{t,k} = eta_s eta_c K t + eta_c k``. Uploads and the broadcast of the dual
    are dense (z is not sparse); see :class:`FederatedComposite` for psi, its prox and
    the l2 ball.
    """

    name = "fed_dual_avg"
    upload_encoding = "dense"
    broadcast_encoding = "dense"

    def init(self, problem, seed=0):
        state = super().init(problem, seed)
        state["dual"] = state["model"].clone()
        return state

    def broadcast(self, state, clients):
        return state["dual"]

    def client_update(self, payload: torch.Tensor, ctx: ClientContext):
        eta = self.client_lr
        z = payload_rows(payload, ctx.size)
        base = self.server_lr * eta * self.local_steps * ctx.round  # eta~_{t,0}, t the round
        ctx.prefetch(range(self.local_steps), self.batch_size)
        for k in range(self.local_steps):
            X, y, w = ctx.batch(k, self.batch_size)
            x = self.prox(z, base + eta * k)
            z = z - eta * ctx.problem.grad(x, X, y, w)
        return z, None, {}

    def aggregate(self, state, uploads, cohort):
        # t is the round's index, not a count of aggregations: a round in which nothing
        # arrived keeps the state but not the schedule (Yuan et al. 2021, Alg. 1)
        t = cohort.round + 1
        z = state["dual"] + self.server_lr * (weighted_mean(uploads, cohort) - state["dual"])
        step = self.server_lr * self.client_lr * self.local_steps * t
        return {**state, "dual": z, "model": self.prox(z, step), "round": t}


def fed_mid(*, sparsity: int | None = None, client_lr: float = 0.01, server_lr: float = 1.0,
            local_steps: int = 5, batch_size: int | None = None,
            regularizer: str = "l0_constraint", penalty: float = 0.0,
            sparsity_scope: str = "row", radius: float | None = None) -> FedMid:
    """FedMid (Yuan, Zaheer, Reddi 2021) with a sparsity regulariser (see
    :class:`FedMid`); Jeong et al. 2024's baseline uses the l0 constraint.

    Parameters
    ----------
    sparsity : tau for ``regularizer="l0_constraint"`` (per class row for softmax unless
        ``sparsity_scope`` is "global").
    client_lr, server_lr : eta_c and eta_s.
    local_steps : K.
    batch_size : examples per local step; None = full local data.
    regularizer : "l0_constraint", "l0" (penalty lambda ||x||_0) or "l1" (lambda ||x||_1).
    penalty : lambda for the penalties.
    sparsity_scope : "row" (tau per softmax class row) or "global" (the tau largest
        entries of the whole model); only with the l0 constraint.
    radius : R of the l2 ball (``Pi_R`` after every prox, at the clients and the
        server); None = no ball.
    """
    return FedMid(sparsity=sparsity, client_lr=client_lr, server_lr=server_lr,
                  local_steps=local_steps, batch_size=batch_size, regularizer=regularizer,
                  penalty=penalty, sparsity_scope=sparsity_scope, radius=radius)


def fed_dual_avg(*, sparsity: int | None = None, client_lr: float = 0.01,
                 server_lr: float = 1.0, local_steps: int = 5, batch_size: int | None = None,
                 regularizer: str = "l0_constraint", penalty: float = 0.0,
                 sparsity_scope: str = "row", radius: float | None = None
                 ) -> FedDualAvg:
    """FedDualAvg (Yuan, Zaheer, Reddi 2021) with a sparsity regulariser (see
    :class:`FedDualAvg`). Parameters as :func:`fed_mid`; the ball acts on the
    primal points ``x = Pi_R(prox(z))`` (the dual z is an unconstrained sum of
    gradients)."""
    return FedDualAvg(sparsity=sparsity, client_lr=client_lr, server_lr=server_lr,
                      local_steps=local_steps, batch_size=batch_size, regularizer=regularizer,
                      penalty=penalty, sparsity_scope=sparsity_scope, radius=radius)
