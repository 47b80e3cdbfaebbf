"""HeurFedAMP: heuristic attentive message passing (Huang et al. 2021), one cloud model
per client weighted by the similarity of the clients' models."""

from __future__ import annotations

import torch

from ..._validation import check_float
from ..base import ClientContext, payload_rows
from ..local import LocalOptimizer, local_train
from .base import PersonalizedAlgorithm, check_unit, density


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

    name = "heur_fedamp"

    def __init__(self, *, lam, alpha_k, sigma, self_weight, step_size, local_steps,
                 batch_size):
        self.lam = check_float("lam", lam, positive=True)
        self.alpha_k = check_float("alpha_k", alpha_k, positive=True)
        self.sigma = check_float("sigma", sigma, nonnegative=True)
        self.self_weight = check_unit("self_weight", self_weight,
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
        return w, self._client_state(w), {"personal_density": float(density(w).mean())}

    def aggregate(self, state, uploads, cohort):
        rows = cohort.delivered.to(uploads.device)
        models = state["models"].clone()
        models[cohort.clients[cohort.delivered].to(models.device)] = uploads[rows]
        return {**state, "models": models, "model": models.mean(0)}


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
