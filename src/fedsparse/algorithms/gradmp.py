"""Federated gradient matching pursuit: FedGradMP and its inexact, partial-participation
variant (Jeong, Needell, Qin 2024, Algorithms 1 and 2)."""

from __future__ import annotations

import torch

from .._resources import check_steps
from .._validation import check_choice, check_float, check_int
from ..problems.restricted import mask_to_index, restricted_lipschitz, restricted_loss_grad
from .base import Algorithm, ClientContext, check_step_size, payload_rows, weighted_mean
from .sparse_models import SparseModel, check_dictionary_arg, check_scope, dictionary_spec

INNER_SOLVERS = ("exact", "newton", "gd", "sgd")


class FedGradMP(Algorithm):
    """FedGradMP (Jeong et al. 2024, Alg. 1) and inexact FedGradMP with partial participation
    (Alg. 2).

    Client i, from ``x_{t,1} = x_t`` and ``Lambda = supp(x_t)``, for k = 1..K::

        r      = grad g_{i,j_k}(x_{t,k})                 mini-batch gradient (b examples)
        Gamma  = approx_{2 tau}(r)                       2 tau atoms best matching r
        Gamma^ = Gamma u Lambda                          at most 3 tau atoms
        b      = argmin f_i(x), x in R(A_{Gamma^})       on the client's FULL local data
        Lambda = approx_tau(b)
        x_{t,k+1} = P_Lambda(b)                          (then Pi_R if radius is set)

    Server: ``x_{t+1} = P_{Lambda_s}(sum_i p_i x_{t,K+1}^(i))`` with
    ``Lambda_s = approx_tau(sum_i p_i x_{t,K+1}^(i))`` (then Pi_R), p_i renormalised over
    the sampled clients whose upload arrived (Alg. 2 with cohort size L).

    approx_tau is hard thresholding in the standard basis and, for a dictionary A, picks
    the tau atoms with largest ``|A^T w|_j / ||a_j||`` and projects by least squares
    (docs/decisions.md, section 1). Models are kept and sent as their coefficients.

    Softmax models (``blocks`` class rows) count tau in one of two ways
    (``sparsity_scope``). "row": every step above acts on each class row separately,
    ``||x_r||_0 <= tau`` for each r, so Gamma^ holds up to ``blocks * 3 tau`` atoms.
    "global": the model is one vector with ``||x||_0 <= tau`` (Jeong et al. 2024,
    Sec. V-B.2), and each local iteration is Alg. 1 on that vector::

        Gamma  = the 2 tau largest |r_q| (/ ||a_q|| with a dictionary) over all rows
        Gamma^ = Gamma u supp(x_{t,k})                    at most 3 tau positions
        b      = argmin f_i(x) over x supported on Gamma^
        x_{t,k+1} = H_tau(b)                              tau largest over all rows

    (with a dictionary, H_tau is approx_tau in the block-diagonal dictionary, see
    :class:`~fedsparse.algorithms.sparse_models.SparseModel`); the server keeps the tau
    largest entries of the average over the whole model.

    The restricted minimisation (``inner_solver``): "exact" (least squares: Cholesky on
    the <= 3 tau columns with one refinement step, SVD-based lstsq where that is
    ill-conditioned; logistic/softmax: Newton to 1e-10), "newton" (to
    ``inner_tol``), "gd" (gradient descent, step 1/L_restricted, until the step is at
    most ``inner_tol`` = delta), or "sgd" (``inner_steps`` mini-batch SGD steps of size
    ``inner_lr``). The mean inner iterations used is recorded as ``inner_iterations``.
    """

    name = "fed_grad_mp"
    client_metrics = ("inner_iterations",)
    requires = frozenset({"grad", "restricted_solve"})
    upload_encoding = "sparse"
    broadcast_encoding = "sparse"

    def __init__(self, *, sparsity, local_steps, batch_size, dictionary, clients_per_round,
                 inner_solver, radius, inner_tol, inner_max_iter, inner_steps, inner_lr,
                 inner_batch_size, sparsity_scope="row"):
        self.sparsity = check_int("sparsity", sparsity, minimum=1)
        self.sparsity_scope = check_scope(sparsity_scope)
        self.local_steps = check_int("local_steps", local_steps, minimum=1)
        self.batch_size = check_int("batch_size", batch_size, minimum=1, allow_none=True)
        check_dictionary_arg(dictionary)
        self.dictionary = dictionary
        self.clients_per_round = check_int("clients_per_round", clients_per_round, minimum=1,
                                           allow_none=True)
        self.inner_solver = check_choice("inner_solver", inner_solver, INNER_SOLVERS)
        self.radius = check_float("radius", radius, positive=True, allow_none=True)
        self.inner_tol = check_float("inner_tol", inner_tol, positive=True)
        self.inner_max_iter = check_int("inner_max_iter", inner_max_iter, minimum=1)
        self.inner_steps = check_int("inner_steps", inner_steps, minimum=1)
        self.inner_lr = check_step_size("inner_lr", inner_lr)
        self.inner_batch_size = check_int("inner_batch_size", inner_batch_size, minimum=1,
                                          allow_none=True)
        if self.inner_solver == "sgd":
            check_steps(local_steps=self.local_steps, inner_steps=self.inner_steps)
        else:
            check_steps(local_steps=self.local_steps)

    def hyperparameters(self):
        return {"sparsity": self.sparsity, "sparsity_scope": self.sparsity_scope,
                "local_steps": self.local_steps,
                "batch_size": self.batch_size, "dictionary": dictionary_spec(self.dictionary),
                "clients_per_round": self.clients_per_round, "inner_solver": self.inner_solver,
                "radius": self.radius, "inner_tol": self.inner_tol,
                "inner_max_iter": self.inner_max_iter, "inner_steps": self.inner_steps,
                "inner_lr": self.inner_lr, "inner_batch_size": self.inner_batch_size}

    def sequential_steps(self):
        # the inner solvers other than "sgd" may stop after one iteration
        return self.local_steps * (self.inner_steps if self.inner_solver == "sgd" else 1)

    def _bind(self, problem, spec, stats):
        # The geometry (dictionary, blocks) is a pure function of (problem, d, dtype).
        self.geometry: SparseModel = SparseModel.build(
            self.sparsity, self.dictionary, problem, spec.dim, spec.dtype, self.name,
            self.sparsity_scope)

    def init(self, problem, seed=0):
        spec = self._require_bound()
        P = self.geometry.wrap(problem).param_dim(self.spec.dim)
        return {"model": torch.zeros(P, dtype=spec.dtype, device=spec.device)}

    def model(self, state):
        # With dictionary=, the record evaluates the feature-space model x = A a (so the
        # objective, accuracy and the data set's ground truth all live in R^d).
        return self.geometry.signal(state["model"])

    def _inner_sgd(self, prob, ctx, k, index, valid, c, full):
        Z_full, _ = prob.restricted_features(index, full[0])
        Z_full = Z_full * valid.unsqueeze(1).to(Z_full.dtype)
        metric = prob.restricted_metric(index, valid)
        if self.inner_lr == "auto":
            L = restricted_lipschitz(prob, Z_full, full[2], valid, metric)
            lr = (1.0 / L.clamp(min=1e-300)).unsqueeze(-1)
        else:
            lr = float(self.inner_lr)
        vmask = valid.to(c.dtype)
        bs = self.inner_batch_size or self.batch_size
        first = self.local_steps + k * self.inner_steps
        ctx.prefetch(range(first, first + self.inner_steps), bs)
        for j in range(self.inner_steps):
            # Batches of the inner solver use their own step counters, after the K outer ones.
            X, y, w = ctx.batch(first + j, bs)
            Z, cls = prob.restricted_features(index, X)
            _, g = restricted_loss_grad(prob, c, Z * valid.unsqueeze(1).to(Z.dtype), cls, y, w,
                                        metric)
            c = c - lr * g * vmask
        return c * vmask

    def client_update(self, payload: torch.Tensor, ctx: ClientContext):
        X_full, y_full, w_full = ctx.full()
        geo = self.geometry
        prob = geo.wrap(ctx.problem)
        S, P = ctx.size, payload.shape[-1]
        a = payload_rows(payload, S)
        lam = a != 0                        # Lambda = supp(x_t) at k = 1
        # |Gamma u Lambda| <= 3 tau, per class row or over the whole model.
        width = min(P, (1 if geo.is_global else geo.blocks) * 3 * self.sparsity)
        iters = []
        ctx.prefetch(range(self.local_steps), self.batch_size)
        for k in range(self.local_steps):
            gamma = geo.select(ctx.batch_grad(prob, a, k, self.batch_size), 2 * self.sparsity)
            index, valid = mask_to_index(gamma | lam, width)
            init = torch.gather(a, 1, index) * valid
            if self.inner_solver == "sgd":
                coef = self._inner_sgd(prob, ctx, k, index, valid, init,
                                       (X_full, y_full, w_full))
                iters.append(float(self.inner_steps))
            else:
                coef, info = prob.restricted_solve(index, valid, X_full, y_full, w_full, init,
                                                   method=self.inner_solver,
                                                   tol=self.inner_tol,
                                                   max_iter=self.inner_max_iter)
                iters.append(info["inner_iterations"])
            # index rows are distinct positions, so padding only writes zeros.
            b = torch.zeros_like(a).scatter_(1, index, coef * valid)
            a, lam = geo.approx(b)
            a = geo.project_ball(a, self.radius)
        return a, None, {"inner_iterations": sum(iters) / len(iters)}

    def aggregate(self, state, uploads, cohort):
        model, _ = self.geometry.approx(weighted_mean(uploads, cohort))
        return {**state, "model": self.geometry.project_ball(model, self.radius)}


def fed_grad_mp(*, sparsity: int, local_steps: int = 3, batch_size: int | None = None,
                dictionary=None, clients_per_round: int | None = None,
                inner_solver: str = "exact", radius: float | None = None,
                inner_tol: float = 1e-6, inner_max_iter: int = 100, inner_steps: int = 2,
                inner_lr: float | str = "auto", inner_batch_size: int | None = None,
                sparsity_scope: str = "row") -> FedGradMP:
    """FedGradMP (Jeong et al. 2024, Algorithm 1; Algorithm 2 with the inexact/partial
    options).

    Parameters
    ----------
    sparsity : tau, atoms kept (per class row for softmax unless ``sparsity_scope`` is
        "global").
    local_steps : K local GradMP iterations per round.
    batch_size : b, mini-batch size of the gradient proxy; None = full local data.
    dictionary : None (standard basis), a (d, m) tensor (atoms as columns), or a spec
        dict ``{kind="gaussian", atoms=200, seed=0}`` / ``{kind="file", path=...}``.
        The model is kept and sent as its m coefficients; records evaluate ``A a``.
    clients_per_round : cohort size L sampled uniformly without replacement each round
        (None = all clients); the simulator honours it unless it is given its own.
    inner_solver : "exact", "newton", "gd" or "sgd" (see :class:`FedGradMP`).
    radius : R of the optional l2-ball projection Pi_R (after each local iterate and after
        aggregation); None = no projection.
    inner_tol : delta, accuracy of the "gd"/"newton" inner solvers.
    inner_max_iter : cap on inner iterations ("gd"/"newton").
    inner_steps : number of SGD steps of the "sgd" inner solver.
    inner_lr : SGD step size of the "sgd" inner solver, or "auto" = 1/L_restricted.
    inner_batch_size : SGD mini-batch of the "sgd" inner solver (default ``batch_size``).
    sparsity_scope : "row" (tau per softmax class row) or "global" (tau over the whole
        model, the paper's ``||x||_0 <= 90`` for its softmax experiments); no effect on
        single-block models. See :class:`FedGradMP` for the global iteration.
    """
    return FedGradMP(sparsity=sparsity, local_steps=local_steps, batch_size=batch_size,
                     dictionary=dictionary, clients_per_round=clients_per_round,
                     inner_solver=inner_solver, radius=radius, inner_tol=inner_tol,
                     inner_max_iter=inner_max_iter, inner_steps=inner_steps, inner_lr=inner_lr,
                     inner_batch_size=inner_batch_size, sparsity_scope=sparsity_scope)
