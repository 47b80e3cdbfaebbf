"""Personalised federated learning: FedMac (Liu et al. 2023) and its baselines pFedMe
(Dinh et al. 2020), Per-FedAvg (Fallah et al. 2020, first order) and HeurFedAMP (Huang
et al. 2021), with the choices of docs/decisions.md, section 5.

Each client keeps a personalised model (PM) in its client state, and the simulator
records, beside the global model (GM), every client's PM on its own train and test split
(``personal_accuracy``, ``personal_test_accuracy``; ``history.personal_models``). The
client state is ``{"personal": (N, P), "trained": (N,) bool}``; a client that has not
trained yet is represented by the global model (HeurFedAMP: by the server's copy of its
model, the initial model until it uploads). Every algorithm here needs a classification
problem (linear softmax or logistic, or a neural network): personalised models are
compared by accuracy.

Which clients train, which are averaged (a decision, documented here)
---------------------------------------------------------------------
In FedMac and pFedMe **all N clients** run the client update every round and upload
(Liu et al. 2023, Alg. 1: ``ClientUpdate`` returns w_i to the server), and the server
averages a uniformly drawn set S^t of S of them (so the byte records count N uploads
and N broadcasts a round, as Alg. 1 sends them). Here the algorithm's own
``clients_per_round`` is that S; the algorithm asks the simulator for every client
(``Algorithm.clients_per_round`` stays None), and :meth:`FedMac.aggregate` draws S^t
with :func:`averaged_clients`, a counter-based draw keyed by (seed, round, client id) on
the ``rng.ALGORITHM`` stream, so the same S^t comes out whatever the grouping of clients
and on resume. Give S to the builder, not to ``simulate``: a ``simulate(...,
clients_per_round=k)`` makes only k clients train, and S^t is then drawn among those k.
Lost uploads (a channel) are left out of the average, renormalised over those of S^t
that arrived; if none of S^t arrived the model is kept.

Per-FedAvg and HeurFedAMP train only the sampled clients (``simulate``'s
``clients_per_round``). Per-FedAvg's PM of a client is the one-step adaptation of the
model it last received, on a TRAIN batch, computed when it was last sampled; Fallah et
al.'s evaluation (and pFedMe's code) adapts every client from the current global model
at evaluation time, which needs client data where ``Algorithm.personalized`` has none.
So a PM recorded after round t adapts w^t, the model broadcast in round t (the GM
recorded beside it is w^{t+1}), and with S < N the PM of a client not sampled in round t
adapts an earlier global model.

Server averaging is uniform (1/S, not p_i) with the beta rule
``w <- (1 - beta) w + (beta / S) sum_{i in S^t} w_i`` (FedMac, pFedMe); Per-FedAvg
averages its sampled clients uniformly.
"""

from __future__ import annotations

import torch

from .. import rng
from .._validation import check_float, check_int, fail
from ..problems.base import Problem
from ..sparsity.smooth import phi_rho_grad, zero_small
from .base import Algorithm, ClientContext, Cohort, payload_rows
from .local import LocalOptimizer, local_train

#: Counter of the server's draw of the averaged clients S^t on the ``rng.ALGORITHM``
#: stream (negative, so no client-side draw ``ctx.random(k >= 0)`` can coincide with it).
AVERAGED_DRAW = -1


def averaged_clients(seed: int, round: int, clients: torch.Tensor, size: int | None
                     ) -> torch.Tensor:
    """Which of ``clients`` the server averages in ``round``: S^t of FedMac's Alg. 1.

    ``size`` clients uniformly without replacement: those with the smallest keys
    ``rng.uniform(seed, rng.ALGORITHM, round, client_id, AVERAGED_DRAW)``.

    Parameters
    ----------
    seed, round : the run's seed and the 0-based round.
    clients : (S,) int64 ids of the clients that trained.
    size : S^t's size; None (or at least the number of clients) = all of them.

    Returns
    -------
    (S,) bool mask over ``clients``.
    """
    n = int(clients.shape[0])
    if size is None or size >= n:
        return torch.ones(n, dtype=torch.bool)
    keys = rng.uniform(seed, rng.ALGORITHM, round, clients.cpu(), AVERAGED_DRAW)
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


def _density(x: torch.Tensor) -> torch.Tensor:
    """Non-zero fraction of each row of (..., P): (...,) float64."""
    return (x != 0).to(torch.float64).mean(-1)


def _check_beta(beta) -> float:
    if not 0 < check_float("beta", beta) <= 2:
        raise fail("beta", beta, "must lie in (0, 2]: the server mix "
                   "w <- (1 - beta) w + beta mean(w_i) (beta = 1: the plain average)")
    return float(beta)


def _check_unit(name: str, value, what: str) -> float:
    if not 0 <= check_float(name, value) <= 1:
        raise fail(name, value, f"must lie in [0, 1]: {what}")
    return float(value)


class PersonalizedAlgorithm(Algorithm):
    """What the four personalised algorithms share: the client state
    ``{"personal": (S, P), "trained": (S,) bool}``, the check that the problem has
    classes, and :meth:`personalized`."""

    stateful_clients = True
    broadcast_encoding = "dense"
    upload_encoding = "dense"
    client_metrics = ("personal_density",)

    def _bind(self, problem: Problem, spec, stats):
        if getattr(problem, "task", None) != "classification":
            raise fail("problem", problem.name, f"{self.name} needs a classification "
                       "problem (softmax, logistic or a neural network): personalised "
                       "models are compared by their accuracy, which needs classes")
        self.dim = problem.param_dim(spec.dim)

    def init_clients(self, problem, clients, seed=0):
        spec = self._require_bound()
        S = int(clients.shape[0])
        return {"personal": torch.zeros(S, self.dim, dtype=spec.dtype, device=spec.device),
                "trained": torch.zeros(S, dtype=torch.bool, device=spec.device)}

    def _fallback(self, state) -> torch.Tensor:
        """(P,) or (N, P): what represents a client that has not trained yet."""
        return self.model(state)

    def personalized(self, state, client_state, clients=None):
        if client_state is None:  # the state lives elsewhere (Flower nodes)
            return None
        personal = client_state["personal"]
        trained = client_state["trained"].to(personal.device)
        fallback = self._fallback(state)
        if fallback.ndim == 2 and clients is not None:  # one per client: those rows
            fallback = fallback[clients.to(fallback.device)]
        fallback = fallback.to(personal.device)
        return torch.where(trained[:, None], personal, fallback)

    def round_metrics(self, state):
        # evaluate() gives the density on evaluation rounds only; this is every round
        return {"model_density": float(_density(self.model(state)))}

    @staticmethod
    def _client_state(personal: torch.Tensor) -> dict:
        return {"personal": personal,
                "trained": torch.ones(personal.shape[0], dtype=torch.bool,
                                      device=personal.device)}


class FedMac(PersonalizedAlgorithm):
    """FedMac (Liu et al. 2023, Alg. 1) and pFedMe (Dinh et al. 2020): a personalised
    model theta_i coupled to the client's copy w_i of the global model.

    Round t, every client i that trains (all N by default), from ``theta = w_i = w^t``;
    for r = 0..R-1, on one mini-batch D (b examples without replacement) per r, K steps

        FedMac:  theta <- theta - eta_p (grad l_i(theta; D) + gamma tanh(theta / rho)
                                          - lambda w_i)                         (eq. 9)
        pFedMe:  theta <- theta - eta_p (grad l_i(theta; D) + gamma tanh(theta / rho)
                                          + lambda (theta - w_i))

    then one step on w_i:

        FedMac:  w_i <- w_i - eta (lambda (w_i - theta) + gamma_w tanh(w_i / rho))  (eq. 6)
        pFedMe:  w_i <- w_i - eta lambda (w_i - theta)

    theta warm-starts across r and restarts from w^t every round. After every theta step
    with gamma > 0 and every w step with gamma_w > 0 the rule Z
    (:func:`fedsparse.sparsity.zero_small`) zeroes entries below the step's shrink size
    (eta_p gamma, eta gamma_w), keeping at least ``density_floor`` of the entries
    non-zero. The client uploads w_i and keeps theta_i, its PM.

    Server: S^t = :func:`averaged_clients` (S of the clients that trained),
    ``w^{t+1} = (1 - beta) w^t + (beta / S) sum_{i in S^t} w_i`` over those of S^t
    that arrived, then Z with eta gamma_w. Both the upload and the broadcast carry
    Z-applied models.

    Each round records ``averaged`` (uploads in the average), ``model_density`` (the new
    global model's non-zero fraction), ``fedmac_bits`` (:func:`fedmac_bits` per client,
    from the mean density of the delivered uploads and the density of the broadcast
    w^t) and ``fedmac_bits_total``; the clients add ``personal_density`` and
    ``upload_density`` (means over the clients that trained).
    """

    upload_encoding = "auto"
    broadcast_encoding = "auto"
    client_metrics = ("personal_density", "upload_density")

    def __init__(self, name: str, *, lam, gamma, gamma_w, rho, step_size, personal_step_size,
                 local_steps, inner_steps, batch_size, beta, clients_per_round,
                 density_floor):
        self.name = name
        self.correlation = name == "fedmac"
        self.lam = check_float("lam", lam, positive=True)
        self.gamma = check_float("gamma", gamma, nonnegative=True)
        self.gamma_w = check_float("gamma_w", gamma_w, nonnegative=True)
        if check_float("rho", rho) <= 0:
            raise fail("rho", rho, "must be positive: the smoothing level of "
                       "phi_rho(x) = rho * sum log cosh(x / rho)")
        self.rho = float(rho)
        self.step_size = check_float("step_size", step_size, positive=True)
        self.personal_step_size = check_float("personal_step_size", personal_step_size,
                                              positive=True)
        self.local_steps = check_int("local_steps", local_steps, minimum=1)
        self.inner_steps = check_int("inner_steps", inner_steps, minimum=1)
        self.batch_size = check_int("batch_size", batch_size, minimum=1, allow_none=True)
        self.beta = _check_beta(beta)
        # S^t's size: drawn by aggregate among the clients that trained (all of them, as
        # Algorithm.clients_per_round stays None); see the module docstring.
        self.averaged_per_round = check_int("clients_per_round", clients_per_round, minimum=1,
                                            allow_none=True)
        self.density_floor = _check_unit("density_floor", density_floor,
                                         "the fraction of entries rule Z keeps non-zero")

    def hyperparameters(self):
        out = {"lam": self.lam, "gamma": self.gamma}
        if self.correlation:
            out["gamma_w"] = self.gamma_w
        out.update(rho=self.rho, step_size=self.step_size,
                   personal_step_size=self.personal_step_size, local_steps=self.local_steps,
                   inner_steps=self.inner_steps, batch_size=self.batch_size, beta=self.beta,
                   clients_per_round=self.averaged_per_round,
                   density_floor=self.density_floor)
        return out

    def _bind(self, problem, spec, stats):
        super()._bind(problem, spec, stats)
        S = self.averaged_per_round
        if S is not None and S > spec.num_clients:
            raise fail("clients_per_round", S,
                       f"must be at most the number of clients {spec.num_clients}")

    def init(self, problem, seed=0):
        state = super().init(problem, seed)
        # The seed keys the server's draw of S^t; the bit counts are FedMac's cost record.
        state.update(seed=int(seed), averaged=0, fedmac_bits=0.0, fedmac_bits_total=0.0)
        return state

    def client_update(self, payload: torch.Tensor, ctx: ClientContext):
        problem = ctx.problem
        eta, eta_p, lam = self.step_size, self.personal_step_size, self.lam
        # The updates run in place on (S, P) buffers: at the DNN's size the round is
        # memory-bound, and every out-of-place term would be one more (S, P) pass.
        w = payload_rows(payload, ctx.size).clone()
        theta = w.clone()
        for r in range(self.local_steps):
            X, y, wt = ctx.batch(r, self.batch_size)
            for _ in range(self.inner_steps):
                g = problem.grad(theta, X, y, wt)
                if self.gamma:
                    g.add_(phi_rho_grad(theta, self.rho), alpha=self.gamma)
                if self.correlation:  # g - lam w
                    g.sub_(w, alpha=lam)
                else:  # g + lam (theta - w)
                    g.add_(theta, alpha=lam).sub_(w, alpha=lam)
                theta = zero_small(theta.sub_(g, alpha=eta_p), eta_p * self.gamma,
                                   floor=self.density_floor)
            # w <- w - eta (lam (w - theta) + gamma_w phi'(w))
            shrink = (phi_rho_grad(w, self.rho) if self.correlation and self.gamma_w
                      else None)
            w.mul_(1 - eta * lam).add_(theta, alpha=eta * lam)
            if shrink is not None:
                w.sub_(shrink, alpha=eta * self.gamma_w)
            if self.correlation:
                w = zero_small(w, eta * self.gamma_w, floor=self.density_floor)
        info = {"personal_density": float(_density(theta).mean()),
                "upload_density": float(_density(w).mean())}
        return w, self._client_state(theta), info

    def aggregate(self, state, uploads: torch.Tensor, cohort: Cohort):
        model = state["model"]
        chosen = averaged_clients(state["seed"], cohort.round, cohort.clients,
                                  self.averaged_per_round)
        used = (chosen & cohort.delivered).to(uploads.device)
        new = model
        if used.any():
            new = (1 - self.beta) * model + self.beta * uploads[used].mean(0)
            if self.correlation:
                new = zero_small(new, self.step_size * self.gamma_w, floor=self.density_floor)
        s_up = float(_density(uploads[cohort.delivered.to(uploads.device)]).mean())
        bits = fedmac_bits(int(model.shape[0]), s_up, float(_density(model)))
        return {**state, "model": new, "averaged": int(used.sum()), "fedmac_bits": bits,
                "fedmac_bits_total": state["fedmac_bits_total"] + bits}

    def round_metrics(self, state):
        return {**super().round_metrics(state), "averaged": state["averaged"],
                "fedmac_bits": state["fedmac_bits"],
                "fedmac_bits_total": state["fedmac_bits_total"]}


class PerFedAvg(PersonalizedAlgorithm):
    """Per-FedAvg, first-order (Fallah et al. 2020), with the step mapping of
    docs/decisions.md, section 5.

    Each sampled client, from ``w = w^t``, R meta-steps, each with two independent
    mini-batches D and D' of its TRAIN data::

        w~ = w - alpha grad l_i(w; D)
        w  = w - beta_m grad l_i(w~; D')          (first order: no Hessian term)

    with alpha = eta_p (``inner_step_size``) and beta_m = eta (``step_size``), a mapping
    fedsparse fixes (Liu et al. 2023 give only eta and eta_p). The client uploads w; its
    PM is one adaptation step of the model it received, on a third TRAIN batch:
    ``theta_i = w^t - alpha grad l_i(w^t; D'')``. The test split is never read (pFedMe's
    code adapts on a test batch). The server averages the uploads uniformly.
    """

    def __init__(self, *, step_size, inner_step_size, local_steps, batch_size):
        self.name = "per_fedavg"
        self.step_size = check_float("step_size", step_size, positive=True)
        self.inner_step_size = check_float("inner_step_size", inner_step_size, positive=True)
        self.local_steps = check_int("local_steps", local_steps, minimum=1)
        self.batch_size = check_int("batch_size", batch_size, minimum=1, allow_none=True)

    def hyperparameters(self):
        return {"step_size": self.step_size, "inner_step_size": self.inner_step_size,
                "local_steps": self.local_steps, "batch_size": self.batch_size}

    def client_update(self, payload: torch.Tensor, ctx: ClientContext):
        problem, alpha, b = ctx.problem, self.inner_step_size, self.batch_size
        start = payload_rows(payload, ctx.size)
        w = start
        for r in range(self.local_steps):
            w_tilde = w - alpha * problem.grad(w, *ctx.batch(2 * r, b))
            w = w - self.step_size * problem.grad(w_tilde, *ctx.batch(2 * r + 1, b))
        personal = start - alpha * problem.grad(start, *ctx.batch(2 * self.local_steps, b))
        return w, self._client_state(personal), \
            {"personal_density": float(_density(personal).mean())}

    def aggregate(self, state, uploads, cohort):
        rows = cohort.delivered.to(uploads.device)
        return {**state, "model": uploads[rows].mean(0)}


def attention_models(models: torch.Tensor, clients: torch.Tensor, sigma: float,
                     self_weight: float) -> torch.Tensor:
    """HeurFedAMP's per-client cloud models u_i (Huang et al. 2021, heuristic variant).

        u_i = xi_ii w_i + sum_{j != i} xi_ij w_j,
        xi_ij = (1 - xi_ii) exp(sigma cos(w_i, w_j)) / sum_{h != i} exp(sigma cos(w_i, w_h))

    with a fixed self-weight xi_ii. Each u_i is its own tensor row (public FedAMP code
    aliases one buffer, so every client receives the same u). ``cos`` of a zero vector
    is taken as 0. With one client, u_1 = w_1.

    Parameters
    ----------
    models : (N, P) the server's latest model of every client.
    clients : (S,) ids whose u_i to compute.
    sigma : attention sharpness (>= 0).
    self_weight : xi_ii in [0, 1].

    Returns
    -------
    (S, P) tensor, row s = u_{clients[s]}.
    """
    clients = clients.to(models.device)
    own = models[clients]
    N = models.shape[0]
    if N == 1:
        return own.clone()
    # cosine in float64: the softmax of sigma * cos amplifies its rounding by sigma.
    m = models.to(torch.float64)
    norms = torch.linalg.vector_norm(m, dim=-1)
    cos = (m[clients] @ m.T) / (norms[clients, None] * norms[None, :]).clamp(
        min=torch.finfo(torch.float64).tiny)
    logits = sigma * cos
    is_self = clients[:, None] == torch.arange(N, device=models.device)[None, :]
    logits = logits.masked_fill(is_self, float("-inf"))
    xi = (1 - self_weight) * torch.softmax(logits, dim=-1)
    xi = xi.masked_fill(is_self, self_weight)
    return (xi @ m).to(models.dtype)


class HeurFedAMP(PersonalizedAlgorithm):
    """HeurFedAMP (Huang et al. 2021, heuristic attentive message passing).

    The server keeps every client's latest model w_j (N, P) and sends each sampled client
    its own cloud model u_i (:func:`attention_models`; a (S, P) broadcast, one row per
    client). The client runs R SGD steps (lr eta_p = ``step_size``) from u_i on

        l_i(w) + (lambda / (2 alpha_k)) ||w - u_i||^2

    (the proximal term with its gradient), uploads w_i and keeps it as its PM. The server
    stores the uploads that arrived. There is no global model: :meth:`model` returns the
    uniform mean of the stored models so that every run records the same GM fields; it
    is not part of the method. Liu et al. 2023's alpha is alpha_k; xi_ii
    (``self_weight``) is not reported there and defaults to 0.5 (docs/decisions.md,
    section 5).
    """

    def __init__(self, *, lam, alpha_k, sigma, self_weight, step_size, local_steps,
                 batch_size):
        self.name = "heur_fedamp"
        self.lam = check_float("lam", lam, positive=True)
        self.alpha_k = check_float("alpha_k", alpha_k, positive=True)
        self.sigma = check_float("sigma", sigma, nonnegative=True)
        self.self_weight = _check_unit("self_weight", self_weight,
                                       "xi_ii, the weight of a client's own model in its u_i")
        self.local = LocalOptimizer.checked(step_size=step_size, local_steps=local_steps,
                                            batch_size=batch_size)

    def hyperparameters(self):
        return {"lam": self.lam, "alpha_k": self.alpha_k, "sigma": self.sigma,
                "self_weight": self.self_weight, "step_size": self.local.step_size,
                "local_steps": self.local.local_steps, "batch_size": self.local.batch_size}

    def state_bytes(self, num_clients, model_size, itemsize):
        # the server's (N, P) latest models (the attention weights are (S, N) a round)
        return {"the server's client models": num_clients * model_size * itemsize}

    def init(self, problem, seed=0):
        state = super().init(problem, seed)
        spec = self._require_bound()
        state["models"] = state["model"].expand(spec.num_clients, -1).clone()
        return state

    def _fallback(self, state):
        return state["models"]

    def broadcast(self, state, clients):
        return attention_models(state["models"], clients, self.sigma, self.self_weight)

    def client_update(self, payload: torch.Tensor, ctx: ClientContext):
        start = payload_rows(payload, ctx.size)
        w = local_train(self.local, start, ctx, mu=self.lam / self.alpha_k, anchor=start)
        return w, self._client_state(w), {"personal_density": float(_density(w).mean())}

    def aggregate(self, state, uploads, cohort):
        rows = cohort.delivered.to(uploads.device)
        models = state["models"].clone()
        models[cohort.clients[cohort.delivered].to(models.device)] = uploads[rows]
        return {**state, "models": models, "model": models.mean(0)}


# -- builders ---------------------------------------------------------------------------

def fedmac(*, lam: float, step_size: float, personal_step_size: float, gamma: float = 0.0,
           gamma_w: float = 0.0, rho: float = 1e-3, local_steps: int = 20,
           inner_steps: int = 1, batch_size: int | None = 20, beta: float = 1.0,
           clients_per_round: int | None = None, density_floor: float = 0.5) -> FedMac:
    """FedMac: sparse personalised FL by maximising correlation (Liu et al. 2023, Alg. 1).

    Client i's PM theta_i minimises ``H_i(theta; w) = l_i(theta) + gamma phi_rho(theta)
    - lambda <theta, w>`` and its copy of the global model follows
    ``grad F_i(w) = lambda (w - theta(w)) + gamma_w tanh(w / rho)`` (eq. 6), with the
    smoothed l1 norm ``phi_rho(x) = rho sum log cosh(x / rho)``; see :class:`FedMac` for
    the round, the zeroing rule Z and the records.

    Parameters
    ----------
    lam : lambda > 0, the correlation weight (the paper: 1e-4).
    step_size : eta, the step of w (the paper: 3000 with lambda = 1e-4, so eta lambda
        = 0.3).
    personal_step_size : eta_p, the step of theta.
    gamma, gamma_w : weights of phi_rho on theta and on w (>= 0; 0 = no sparsity term).
    rho : smoothing level of phi_rho (> 0); steps are stable while eta_p gamma / rho < 2.
    local_steps : R, the w steps per round (one mini-batch each).
    inner_steps : K, theta steps per w step on the same mini-batch (1 in the paper's
        experiments).
    batch_size : |D| examples per mini-batch (None = the full local data).
    beta : server mix in (0, 2]: ``w <- (1 - beta) w + beta mean_{S^t} w_i``.
    clients_per_round : S, the uploads averaged each round (None = all); every client
        trains every round (do not give ``simulate`` a ``clients_per_round``).
    density_floor : fraction of entries rule Z keeps non-zero (the paper: 50%).
    """
    return FedMac("fedmac", lam=lam, gamma=gamma, gamma_w=gamma_w, rho=rho,
                  step_size=step_size, personal_step_size=personal_step_size,
                  local_steps=local_steps, inner_steps=inner_steps, batch_size=batch_size,
                  beta=beta, clients_per_round=clients_per_round, density_floor=density_floor)


def pfedme(*, lam: float, step_size: float, personal_step_size: float,
           local_steps: int = 20, inner_steps: int = 1, batch_size: int | None = 20,
           beta: float = 1.0, gamma: float = 0.0, rho: float = 1e-3,
           clients_per_round: int | None = None, density_floor: float = 0.5) -> FedMac:
    """pFedMe (Dinh et al. 2020, Alg. 1) with Moreau envelopes, as Liu et al. 2023 run it.

    theta_i approximately minimises ``l_i(theta) + gamma phi_rho(theta) + (lambda / 2)
    ||theta - w_i||^2`` (K SGD steps per mini-batch), then
    ``w_i <- w_i - eta lambda (w_i - theta_i)``; all clients train and the server applies
    ``w <- (1 - beta) w + beta mean_{S^t} w_i`` (see :class:`FedMac`). The PM is theta_i
    (pFedMe's code evaluates w_i instead). ``gamma > 0`` is Liu et al.'s "modified
    pFedMe" (Figure 4), with the same zeroing rule Z on theta.

    Parameters
    ----------
    lam : lambda > 0 (the paper: 15).
    step_size : eta, the step of w_i.
    personal_step_size : eta_p, the step of theta.
    local_steps, inner_steps, batch_size, beta, clients_per_round, density_floor :
        as :func:`fedmac`.
    gamma, rho : the modified pFedMe's phi_rho weight on theta (0 = pFedMe) and its
        smoothing level.
    """
    return FedMac("pfedme", lam=lam, gamma=gamma, gamma_w=0.0, rho=rho, step_size=step_size,
                  personal_step_size=personal_step_size, local_steps=local_steps,
                  inner_steps=inner_steps, batch_size=batch_size, beta=beta,
                  clients_per_round=clients_per_round, density_floor=density_floor)


def per_fedavg(*, step_size: float, inner_step_size: float, local_steps: int = 20,
               batch_size: int | None = 20) -> PerFedAvg:
    """Per-FedAvg, first-order (Fallah et al. 2020): MAML-style local meta-steps
    ``w <- w - beta_m grad l(w - alpha grad l(w; D); D')``; the PM is one step
    ``w - alpha grad l(w; train batch)`` (see :class:`PerFedAvg`).

    Parameters
    ----------
    step_size : beta_m = eta, the meta step.
    inner_step_size : alpha = eta_p, the adaptation step (also the PM's).
    local_steps : R meta-steps per round.
    batch_size : examples per mini-batch (None = the full local data).
    """
    return PerFedAvg(step_size=step_size, inner_step_size=inner_step_size,
                     local_steps=local_steps, batch_size=batch_size)


def heur_fedamp(*, lam: float, alpha_k: float, sigma: float, step_size: float,
                self_weight: float = 0.5, local_steps: int = 20,
                batch_size: int | None = 20) -> HeurFedAMP:
    """HeurFedAMP (Huang et al. 2021): one attention-weighted cloud model u_i per client,
    local training with the proximal term ``(lambda / (2 alpha_k)) ||w - u_i||^2`` (see
    :class:`HeurFedAMP` and :func:`attention_models`).

    Parameters
    ----------
    lam : lambda > 0 (Liu et al. 2023: 5, or 1 on MNIST).
    alpha_k : alpha_k > 0 (Liu et al.'s alpha, 0.5).
    sigma : attention sharpness >= 0 in ``exp(sigma cos(w_i, w_j))`` (the paper: 50).
    step_size : eta_p, the local SGD step.
    self_weight : xi_ii in [0, 1], the weight of a client's own model in u_i.
    local_steps : R SGD steps per round.
    batch_size : examples per step (None = the full local data).
    """
    return HeurFedAMP(lam=lam, alpha_k=alpha_k, sigma=sigma, self_weight=self_weight,
                      step_size=step_size, local_steps=local_steps, batch_size=batch_size)
