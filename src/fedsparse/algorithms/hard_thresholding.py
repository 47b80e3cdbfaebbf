"""Federated iterative hard thresholding: Fed-HT, FedIter-HT, Distributed-IHT (Tong et al.
2022)."""

from __future__ import annotations

import torch

from .._resources import check_steps
from .._validation import ConfigError, check_float, check_int, fail
from ..sparsity import hard_threshold_blocks, project_l2_ball
from .base import (
    Algorithm,
    ClientContext,
    check_step_size,
    lipschitz_statistics,
    payload_rows,
    requires_bound,
    resolve_step_size,
    weighted_mean,
)
from .sparse_models import (
    SparseModel,
    check_dictionary_arg,
    check_scope,
    check_scoped_sparsity,
    dictionary_spec,
)


class FederatedHardThresholding(Algorithm):
    """Local SGD with hard thresholding at the server (and optionally after each local step).

    Client i, from ``x_{t,0} = x_t``, for k = 0..K-1 on a mini-batch ``I_{t,k}``::

        x_{t,k+1} = x_{t,k} - gamma * grad f_{I_{t,k}}(x_{t,k})            (Fed-HT, Alg. 1)
        x_{t,k+1} = H_tau(x_{t,k} - gamma * grad f_{I_{t,k}}(x_{t,k}))     (FedIter-HT, Alg. 2)

    Server: ``x_{t+1} = H_tau(sum_i p_i x_{t,K}^(i))`` with p_i renormalised over the
    uploads that arrived. Distributed-IHT (Alg. A1) is Fed-HT with K = 1.
    For softmax, H_tau acts on each class row (``sparsity_scope="row"``, Tong et al.
    2022, A.2) or keeps the tau largest entries of the whole model
    (``sparsity_scope="global"``, ``||x||_0 <= tau`` as in Jeong et al. 2024, V-B.2).

    FedIter-HT also takes a dictionary A (Jeong et al. 2024 compare it so): the model is
    kept and sent as tau-sparse coefficients a, the local step is taken on the model
    coefficients and H_tau becomes approx_tau (docs/decisions.md, section 1; support
    chosen by the coefficients): ``a <- approx_tau(a - gamma A^T grad f(A a))``, server
    ``approx_tau(sum_i p_i a_i)``; "auto" steps use the smoothness of ``a -> f(A a)``.

    FedIter-HT with ``radius`` R adds the l2 ball ``||x|| <= R`` of Jeong et al. 2024
    (Sec. IV-C, applied "throughout all the methods" in their Sec. V-B.2) as FedGradMP
    does: ``x_{t,k+1} = Pi_R(H_tau(x_{t,k} - gamma g_{t,k}))`` after every local step and
    ``x_{t+1} = Pi_R(H_tau(sum_i p_i x_{t,K}^(i)))`` at the server. Pi_R o H_tau is the
    exact Euclidean projection on ``{||x||_0 <= tau, ||x|| <= R}`` (the tau largest
    entries maximise ``||v_S||``, which minimises the distance whether the ball binds
    or not).
    """

    def __init__(self, name: str, *, sparsity: int, step_size, local_steps: int,
                 batch_size: int | None, local_threshold: bool, dictionary=None,
                 sparsity_scope: str = "row", radius: float | None = None):
        self.name = name
        check_dictionary_arg(dictionary)
        if dictionary is not None and not local_threshold:
            raise fail("dictionary", dictionary_spec(dictionary),
                       f"{name} does not take a dictionary (FedIter-HT and FedGradMP do)")
        self.dictionary = dictionary
        self.sparsity = check_int("sparsity", sparsity, minimum=1)
        self.sparsity_scope = check_scope(sparsity_scope)
        self.radius = check_float("radius", radius, positive=True, allow_none=True)
        if self.radius is not None and not local_threshold:
            raise fail("radius", radius, f"{name} does not take an l2 ball (FedIter-HT, "
                       "FedGradMP, FedMid and FedDualAvg do)")
        self.step_size = check_step_size("step_size", step_size)
        self.local_steps = check_int("local_steps", local_steps, minimum=1)
        check_steps(local_steps=self.local_steps)
        self.batch_size = check_int("batch_size", batch_size, minimum=1, allow_none=True)
        self.local_threshold = local_threshold
        # Thresholded local iterates are tau-sparse, so they travel as (index, value).
        self.upload_encoding = "sparse" if local_threshold else "dense"

    def hyperparameters(self):
        out = {"sparsity": self.sparsity, "sparsity_scope": self.sparsity_scope,
               "step_size": self.step_size, "local_steps": self.local_steps,
               "batch_size": self.batch_size}
        if self.local_threshold:
            out["radius"] = self.radius
        if self.name == "distributed_iht":
            del out["local_steps"]
        if self.dictionary is not None:
            out["dictionary"] = dictionary_spec(self.dictionary)
        return out

    def _step_problem(self, problem):
        """The problem the local step differentiates: with a dictionary, ``a -> f(A a)``."""
        return problem if self.geometry is None else self.geometry.wrap(problem)

    def statistics(self, problem, split):
        if self.dictionary is not None:  # "auto" needs the smoothness of a -> f(A a)
            problem = SparseModel.build(self.sparsity, self.dictionary, problem,
                                        split.X.shape[-1], split.X.dtype, self.name,
                                        self.sparsity_scope).wrap(problem)
        return lipschitz_statistics(self.step_size, problem, split)

    def _bind(self, problem, spec, stats):
        # Class rows thresholded separately (softmax); the dictionary's geometry, if any.
        self.blocks: int = problem.blocks
        self.geometry: SparseModel | None = None
        if self.dictionary is None:
            check_scoped_sparsity(self.sparsity, self.sparsity_scope, problem, spec)
        else:  # tau counts atoms, which SparseModel.build checks
            self.geometry = SparseModel.build(self.sparsity, self.dictionary, problem,
                                              spec.dim, spec.dtype, self.name,
                                              self.sparsity_scope)
        # "auto" is resolved once, on the server, and sent to the clients with the model.
        self.resolved_step = resolve_step_size(self.step_size, stats) \
            if stats or self.step_size != "auto" else None

    def init(self, problem, seed=0):
        state = super().init(problem, seed)
        if self.geometry is not None:  # the model is held as its dictionary coefficients
            state["model"] = torch.zeros(self.geometry.blocks * self.geometry.dictionary.atoms,
                                         dtype=self.spec.dtype, device=self.spec.device)
        if self.resolved_step is None:
            raise ConfigError('step_size="auto" is resolved from the clients\' statistics: '
                              "bind the algorithm with stats=algorithm.statistics(...)")
        state["step_size"] = self.resolved_step
        return state

    def client_config(self, state):
        return {"step_size": state["step_size"]}

    @requires_bound
    def _threshold(self, x: torch.Tensor) -> torch.Tensor:
        """H_tau (per block or global), or approx_tau on the coefficients with a
        dictionary; then Pi_R when a radius is set."""
        if self.geometry is None:
            x = hard_threshold_blocks(x, self.sparsity, self.blocks, self.sparsity_scope)
            return x if self.radius is None else project_l2_ball(x, self.radius)
        return self.geometry.project_ball(self.geometry.approx(x)[0], self.radius)

    def model(self, state):
        if self.geometry is None:
            return state["model"]
        return self.geometry.signal(state["model"])  # records evaluate x = A a

    def client_update(self, payload: torch.Tensor, ctx: ClientContext):
        gamma = ctx.config["step_size"]
        # With a dictionary, x holds the coefficients a and the step is on a -> f(A a).
        prob = self._step_problem(ctx.problem)
        x = payload_rows(payload, ctx.size)
        ctx.prefetch(range(self.local_steps), self.batch_size)
        for k in range(self.local_steps):
            X, y, w = ctx.batch(k, self.batch_size)
            x = x - gamma * prob.grad(x, X, y, w)
            if self.local_threshold:
                x = self._threshold(x)
        return x, None, {}

    def aggregate(self, state, uploads, cohort):
        return {**state, "model": self._threshold(weighted_mean(uploads, cohort))}


def _build(name, sparsity, step_size, local_steps, batch_size, local_threshold,
           dictionary=None, sparsity_scope="row", radius=None):
    return FederatedHardThresholding(name, sparsity=sparsity, step_size=step_size,
                                     local_steps=local_steps, batch_size=batch_size,
                                     local_threshold=local_threshold, dictionary=dictionary,
                                     sparsity_scope=sparsity_scope, radius=radius)


def fed_ht(*, sparsity: int, step_size: float | str = "auto", local_steps: int = 5,
           batch_size: int | None = None, sparsity_scope: str = "row"
           ) -> FederatedHardThresholding:
    """Fed-HT (Tong et al. 2022, Algorithm 1): K local SGD steps, hard thresholding at the
    server.

    ``x_{t+1} = H_tau(sum_i p_i x_{t,K}^(i))``, ``x_{t,k+1} = x_{t,k} - gamma g_{t,k}``.
    Uploads are dense; the broadcast is tau-sparse.

    Parameters
    ----------
    sparsity : tau, non-zeros kept (per class row for softmax unless ``sparsity_scope``
        is "global").
    step_size : gamma, or "auto" = 1 / max_i L_i.
    local_steps : K.
    batch_size : examples per local step and client; None = the full local data.
    sparsity_scope : "row" (tau per softmax class row) or "global" (the tau largest
        entries of the whole model); no effect on single-block models.
    """
    return _build("fed_ht", sparsity, step_size, local_steps, batch_size, False,
                  sparsity_scope=sparsity_scope)


def fed_iter_ht(*, sparsity: int, step_size: float | str = "auto", local_steps: int = 5,
                batch_size: int | None = None, dictionary=None, sparsity_scope: str = "row",
                radius: float | None = None) -> FederatedHardThresholding:
    """FedIter-HT (Tong et al. 2022, Algorithm 2): hard thresholding after every local
    step too.

    ``x_{t,k+1} = H_tau(x_{t,k} - gamma g_{t,k})``, ``x_{t+1} = H_tau(sum_i p_i x_{t,K}^(i))``.
    Uploads and broadcasts are tau-sparse. Parameters as :func:`fed_ht`, plus
    ``dictionary``: None (standard basis), a (d, m) tensor or a spec dict such as
    ``{kind="gaussian", atoms=200, seed=0}``; with a dictionary, H_tau is approx_tau and
    the model travels as its m coefficients (see :class:`FederatedHardThresholding`);
    and ``radius``: R of the l2 ball, ``Pi_R`` after every thresholding (local steps and
    server), None = no ball.
    """
    return _build("fed_iter_ht", sparsity, step_size, local_steps, batch_size, True,
                  dictionary, sparsity_scope, radius)


def distributed_iht(*, sparsity: int, step_size: float | str = "auto",
                    batch_size: int | None = None, local_steps: int = 1,
                    sparsity_scope: str = "row") -> FederatedHardThresholding:
    """Distributed-IHT (Tong et al. 2022, Algorithm A1): one local step per round.

    ``x_{t+1} = H_tau(sum_i p_i (x_t - gamma v_t^(i)))`` = Fed-HT with K = 1.
    ``local_steps`` is accepted for a uniform interface and must be 1.
    """
    if check_int("local_steps", local_steps, minimum=1) != 1:
        raise fail("local_steps", local_steps, "Distributed-IHT takes exactly one local step "
                   "per round; use fed_ht for more")
    return _build("distributed_iht", sparsity, step_size, 1, batch_size, False,
                  sparsity_scope=sparsity_scope)
