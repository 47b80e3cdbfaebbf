"""The round FedMac (Liu et al. 2023, Alg. 1) and pFedMe (Dinh et al. 2020, Alg. 1) share:
a personalised model theta_i coupled to the client's copy w_i of the global model, every
client training, and the server averaging a drawn set S^t of the uploads with the beta
rule. The two differ only in their three steps (:class:`CoupledPersonalization`)."""

from __future__ import annotations

import torch

from ..._validation import check_float, check_int, fail
from ...problems.protocol import block_at
from ...sparsity.smooth import zero_small
from ..base import ClientContext, Cohort, payload_rows
from .base import PersonalizedAlgorithm, check_unit, density

#: Counter of the server's draw of the averaged clients S^t on the ``rng.ALGORITHM``
#: stream (negative, so no client-side draw ``ctx.random(k >= 0)`` can coincide with it).
AVERAGED_DRAW = -1


def averaged_clients(cohort: Cohort, size: int | None) -> torch.Tensor:
    """Which clients of ``cohort`` the server averages: S^t of FedMac's Alg. 1.

    ``size`` clients uniformly without replacement: those with the smallest keys
    ``cohort.random(AVERAGED_DRAW)``, i.e. ``rng.uniform(seed, rng.ALGORITHM, round,
    client_id, AVERAGED_DRAW)``.

    Parameters
    ----------
    cohort : the round's clients (S,) that trained, its round and the run's seed.
    size : S^t's size; None (or at least the number of clients) = all of them.

    Returns
    -------
    (S,) bool mask over ``cohort.clients``, on the CPU.
    """
    n = cohort.size
    if size is None or size >= n:
        return torch.ones(n, dtype=torch.bool)
    keys = cohort.random(AVERAGED_DRAW).cpu()
    mask = torch.zeros(n, dtype=torch.bool)
    mask[torch.topk(keys, size, largest=False).indices] = True
    return mask


def fedmac_bits(dim: int, upload_density: float, broadcast_density: float) -> float:
    """FedMac's communication cost of one client and round, in bits (Liu et al. 2023,
    Section 5.5): non-zeros cost 64 bits, zeros 1 bit, plus a d-bit index matrix.

        bits = 64 d (s_up + s_down) + d (2 - s_up - s_down) + d

    which is the paper's ``2 * 64 s d + 2 (1 - s) d + d`` when the upload and the
    broadcast have the same non-zero fraction s. The paper prices a model trained without
    sparsity at ``2 * 64 d`` (no index matrix); this formula always counts the matrix, so
    a fully dense model costs 129 d here.

    Parameters
    ----------
    dim : d, the model's length.
    upload_density, broadcast_density : non-zero fractions s_up, s_down in [0, 1].
    """
    s = upload_density + broadcast_density
    return float(64 * dim * s + dim * (2 - s) + dim)


def _check_beta(beta) -> float:
    if not 0 < check_float("beta", beta) <= 2:
        raise fail("beta", beta, "must lie in (0, 2]: the server mix "
                   "w <- (1 - beta) w + beta mean(w_i) (beta = 1: the plain average)")
    return float(beta)


class CoupledPersonalization(PersonalizedAlgorithm):
    """A personalised model theta_i coupled to the client's copy w_i of the global model
    (Liu et al. 2023, Alg. 1; Dinh et al. 2020, Alg. 1), the steps left to subclasses.

    Round t, every client i that trains (all N by default), from ``theta = w_i = w^t``;
    for r = 0..R-1, on one mini-batch D (b examples without replacement) per r, K steps
    ``theta <- Z(theta - eta_p g)`` with ``g = personal_gradient(theta, w_i,
    grad l_i(theta; D))`` (with ``inner_tolerance`` nu, a client stops early once
    ``||g||^2 <= nu``), then one step ``w_i <- global_step(w_i, theta)``. theta
    warm-starts across r and restarts from w^t every round. The client uploads w_i and
    keeps theta_i, its PM.

    Server: S^t = :func:`averaged_clients` (S of the clients that trained),
    ``w^{t+1} = server_step((1 - beta) w^t + (beta / S) sum_{i in S^t} w_i)`` over those
    of S^t that arrived (``server_step`` is the identity unless a subclass sparsifies).

    Each round records ``averaged`` (uploads in the average), ``model_density`` (the new
    global model's non-zero fraction), ``fedmac_bits`` (:func:`fedmac_bits` per client,
    from the mean density of the delivered uploads and the density of the broadcast
    w^t) and ``fedmac_bits_total``; the clients add ``personal_density`` and
    ``upload_density`` (means over the clients that trained).

    The steps may update their first argument in place (it is the client's own (S, P)
    buffer): at the DNN's size the round is memory-bound, and every out-of-place term
    would be one more (S, P) pass.
    """

    upload_encoding = "auto"
    broadcast_encoding = "auto"
    client_metrics = ("personal_density", "upload_density")

    def __init__(self, *, lam, gamma, rho, step_size, personal_step_size, local_steps,
                 inner_steps, batch_size, beta, clients_per_round, density_floor,
                 inner_tolerance=None):
        self.lam = check_float("lam", lam, positive=True)
        self.gamma = check_float("gamma", gamma, nonnegative=True)
        if check_float("rho", rho) <= 0:
            raise fail("rho", rho, "must be positive: the smoothing level of "
                       "phi_rho(x) = rho * sum log cosh(x / rho)")
        self.rho = float(rho)
        self.step_size = check_float("step_size", step_size, positive=True)
        self.personal_step_size = check_float("personal_step_size", personal_step_size,
                                              positive=True)
        self.local_steps = check_int("local_steps", local_steps, minimum=1)
        self.inner_steps = check_int("inner_steps", inner_steps, minimum=1)
        self.inner_tolerance = check_float("inner_tolerance", inner_tolerance,
                                           positive=True, allow_none=True)
        self.batch_size = check_int("batch_size", batch_size, minimum=1, allow_none=True)
        self.beta = _check_beta(beta)
        # S^t's size: drawn by aggregate among the clients that trained (all of them, as
        # Algorithm.clients_per_round stays None); see the package docstring.
        self.averaged_per_round = check_int("clients_per_round", clients_per_round, minimum=1,
                                            allow_none=True)
        self.density_floor = check_unit("density_floor", density_floor,
                                        "the fraction of entries rule Z keeps non-zero")

    def hyperparameters(self):
        return {"lam": self.lam, "gamma": self.gamma, "rho": self.rho,
                "step_size": self.step_size, "personal_step_size": self.personal_step_size,
                "local_steps": self.local_steps, "inner_steps": self.inner_steps,
                "batch_size": self.batch_size, "beta": self.beta,
                "clients_per_round": self.averaged_per_round,
                "density_floor": self.density_floor, "inner_tolerance": self.inner_tolerance}

    def _bind(self, problem, spec, stats):
        super()._bind(problem, spec, stats)
        S = self.averaged_per_round
        if S is not None and S > spec.num_clients:
            raise fail("clients_per_round", S,
                       f"must be at most the number of clients {spec.num_clients}")

    def init(self, problem, seed=0):
        state = super().init(problem, seed)
        # FedMac's cost record (Liu et al. 2023, Section 5.5), kept for pFedMe too.
        state.update(averaged=0, fedmac_bits=0.0, fedmac_bits_total=0.0)
        return state

    # -- the steps ------------------------------------------------------------------------
    def personal_gradient(self, theta: torch.Tensor, w: torch.Tensor, grad: torch.Tensor
                          ) -> torch.Tensor:
        """The gradient (S, P) of the PMs' objective at theta (S, P), given the copies w
        (S, P) of the global model and ``grad`` (S, P) = grad l_i(theta; D), a fresh
        tensor it may build the result in. It must be entry-wise: the round passes the
        same column block (s, k) of all three where the problem steps block by block."""
        raise NotImplementedError

    def personal_step(self, theta: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
        """theta <- Z(theta - eta_p gradient), Z with the shrink size eta_p gamma."""
        return self._zero_personal(theta.sub_(gradient, alpha=self.personal_step_size))

    def _zero_personal(self, theta: torch.Tensor) -> torch.Tensor:
        """Z with the theta step's shrink size eta_p gamma."""
        return zero_small(theta, self.personal_step_size * self.gamma,
                          floor=self.density_floor)

    def _descend_personal(self, theta: torch.Tensor, w: torch.Tensor, X, y, weights,
                          problem) -> torch.Tensor:
        """The same step as ``personal_step(theta, personal_gradient(theta, w, grad))``,
        with the gradient built column block by column block where the problem can
        (:meth:`~fedsparse.problems.Problem.descend_`): the steps are entry-wise, so the
        bits are the same, and no (S, P) gradient is written and read again."""
        def gradient(block, at):
            return self.personal_gradient(block_at(theta, at), block_at(w, at), block)

        problem.descend_(theta, X, y, weights, self.personal_step_size, term=gradient)
        return self._zero_personal(theta)

    def global_step(self, w: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
        """One step on the copies w (S, P) of the global model given the PMs theta."""
        raise NotImplementedError

    def server_step(self, model: torch.Tensor) -> torch.Tensor:
        """What becomes of the server's (P,) beta-mix of S^t: itself by default."""
        return model

    # -- the round ------------------------------------------------------------------------
    def client_update(self, payload: torch.Tensor, ctx: ClientContext):
        w = payload_rows(payload, ctx.size)  # a copy: the steps update it in place
        theta = w.clone()
        ctx.prefetch(range(self.local_steps), self.batch_size)
        for r in range(self.local_steps):
            X, y, weights = ctx.batch(r, self.batch_size)
            for _ in range(self.inner_steps):
                if self.inner_tolerance is None:
                    theta = self._descend_personal(theta, w, X, y, weights, ctx.problem)
                    continue
                g = self.personal_gradient(theta, w, ctx.problem.grad(theta, X, y, weights))
                # nu: a client whose ||grad H~||^2 is within it takes no more steps on D
                moving = (g * g).sum(-1) > self.inner_tolerance
                if not bool(moving.any()):
                    break
                theta = torch.where(moving[:, None], self.personal_step(theta.clone(), g),
                                    theta)
            w = self.global_step(w, theta)
        info = {"personal_density": float(density(theta).mean()),
                "upload_density": float(density(w).mean())}
        return w, self._client_state(theta), info

    def aggregate(self, state, uploads: torch.Tensor, cohort: Cohort):
        model = state["model"]
        chosen = averaged_clients(cohort, self.averaged_per_round)
        used = (chosen & cohort.delivered).to(uploads.device)
        new = model
        if used.any():
            new = self.server_step((1 - self.beta) * model + self.beta * uploads[used].mean(0))
        s_up = float(density(uploads[cohort.delivered.to(uploads.device)]).mean())
        bits = fedmac_bits(int(model.shape[0]), s_up, float(density(model)))
        return {**state, "model": new, "averaged": int(used.sum()), "fedmac_bits": bits,
                "fedmac_bits_total": state["fedmac_bits_total"] + bits}

    round_metric_names = (*PersonalizedAlgorithm.round_metric_names, "averaged", "fedmac_bits",
                          "fedmac_bits_total")

    def round_metrics(self, state):
        return {**super().round_metrics(state), "averaged": state["averaged"],
                "fedmac_bits": state["fedmac_bits"],
                "fedmac_bits_total": state["fedmac_bits_total"]}
