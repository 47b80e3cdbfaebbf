"""Similarity-based compensation for lost uploads (Mao et al. 2022, SAFARI, Alg. 3), as a
server-side wrapper around any algorithm whose uploads are models.

The server keeps a record ``rho`` (N x N, +inf where never measured) of the distances
between the uploads of clients received in the same round::

    rho_uv = || x_u - x_v ||_2            for every pair u != v received in round t   (eq. 35)

and replaces each sampled client j whose upload was lost by the received client j' that
is closest to j in the record::

    j' = argmin_{i received} rho_ij       (lowest client id on ties; Alg. 3 prints "maximize",
                                           a typo: rho is a distance)
    x_{t+1} = aggregate( x_i for i received, x_{j'} in place of each lost j )

A lost client with no recorded distance to any received one is dropped and the weights are
renormalised over the rest. The record is updated every round (not computed once, a bug of
the public code) and lives in the server state, so it is checkpointed; each round records
``compensated`` (lost uploads replaced) and ``dropped`` (lost and never compared).
"""

from __future__ import annotations

import torch

from .._validation import fail
from .base import Algorithm, Cohort


class SimilarityCompensation(Algorithm):
    """``inner`` with lost uploads replaced by their most similar received ones.

    Parameters
    ----------
    inner : an algorithm whose uploads are models (``inner.uploads_are_models``).
    """

    def __init__(self, inner: Algorithm):
        if not isinstance(inner, Algorithm):
            raise fail("algorithm", type(inner).__name__, "must be a fedsparse Algorithm")
        if not inner.uploads_are_models:
            raise fail("algorithm", inner.name, "uploads no models (its uploads are not in the "
                       "model space), so distances between them mean nothing; similarity "
                       "compensation needs uploads that are models")
        self.inner = inner
        self.name = inner.name
        self.requires = inner.requires
        self.upload_encoding = inner.upload_encoding
        self.broadcast_encoding = inner.broadcast_encoding
        self.stateful_clients = inner.stateful_clients
        self.clients_per_round = inner.clients_per_round
        self.client_metrics = inner.client_metrics

    def hyperparameters(self):
        return {**self.inner.hyperparameters(), "compensation": True}

    def __repr__(self):
        return f"similarity_compensation({self.inner!r})"

    def statistics(self, problem, split):
        return self.inner.statistics(problem, split)

    def sequential_steps(self):
        return self.inner.sequential_steps()

    def state_bytes(self, num_clients, model_size, itemsize):
        # the (N, N) float64 distance record
        return {**self.inner.state_bytes(num_clients, model_size, itemsize),
                "the similarity record": 8 * num_clients * num_clients}

    def _bind(self, problem, spec, stats):
        self.inner = self.inner.bind(problem, spec, stats)

    def init(self, problem, seed=0):
        state = dict(self.inner.init(problem, seed))
        N = self.spec.num_clients
        state["similarity"] = torch.full((N, N), float("inf"), dtype=torch.float64)
        state["compensated"] = 0
        state["dropped"] = 0
        return state

    def init_clients(self, problem, clients, seed=0):
        return self.inner.init_clients(problem, clients, seed)

    def _inner_state(self, state):
        return {k: v for k, v in state.items()
                if k not in ("similarity", "compensated", "dropped")}

    def broadcast(self, state, clients):
        return self.inner.broadcast(self._inner_state(state), clients)

    def client_config(self, state):
        return self.inner.client_config(self._inner_state(state))

    def client_update(self, payload, ctx):
        return self.inner.client_update(payload, ctx)

    def model(self, state):
        return self.inner.model(self._inner_state(state))

    def personalized(self, state, client_state, clients=None):
        return self.inner.personalized(self._inner_state(state), client_state, clients)

    def round_metrics(self, state):
        return {"compensated": state["compensated"], "dropped": state["dropped"]}

    def aggregate(self, state, uploads, cohort):
        sim = update_similarity(state["similarity"], uploads, cohort)
        uploads, delivered, dropped = substitute(sim, uploads, cohort)
        inner = self.inner.aggregate(self._inner_state(state), uploads,
                                     Cohort(cohort.round, cohort.clients, cohort.weights,
                                            delivered))
        return {**inner, "similarity": sim,
                "compensated": int(delivered.sum() - cohort.delivered.sum()),
                "dropped": dropped}


def update_similarity(record: torch.Tensor, uploads: torch.Tensor, cohort: Cohort
                      ) -> torch.Tensor:
    """The record with every pair received in this round re-measured (eq. 35).

    Parameters
    ----------
    record : (N, N) float64 distances, +inf where never measured.
    uploads : (S, P) the round's uploads; cohort : who they are and which arrived.

    Returns
    -------
    (N, N) new record (one ``cdist`` over the R received uploads: O(R^2 P)).
    """
    rows = torch.nonzero(cohort.delivered).flatten()
    ids = cohort.clients[rows].to(record.device)
    got = uploads[rows.to(uploads.device)].to(torch.float64)
    dist = torch.cdist(got[None], got[None])[0].to(record.device)
    dist.fill_diagonal_(float("inf"))  # a client is never its own substitute
    out = record.clone()
    out[ids[:, None], ids[None, :]] = dist
    return out


def substitute(record: torch.Tensor, uploads: torch.Tensor, cohort: Cohort
               ) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Lost uploads replaced by the received upload closest in ``record`` (Alg. 3).

    Returns
    -------
    uploads : (S, P) with each compensated row a copy of its substitute's upload.
    delivered : (S,) bool, received or compensated.
    dropped : number of lost clients with no recorded distance to any received one.
    """
    received = cohort.delivered
    lost = torch.nonzero(~received).flatten()
    got = torch.nonzero(received).flatten()
    if lost.numel() == 0 or got.numel() == 0:
        return uploads, received, int(lost.numel()) if got.numel() == 0 else 0
    # clients ascend within the cohort, so argmin's first minimum is the lowest id
    d = record[cohort.clients[lost][:, None].to(record.device),
               cohort.clients[got][None, :].to(record.device)]
    best, pick = d.min(dim=1)
    known = torch.isfinite(best).cpu()
    out = uploads.clone()
    src = got[pick.cpu()][known]
    dst = lost[known]
    out[dst.to(out.device)] = uploads[src.to(out.device)]
    delivered = received.clone()
    delivered[dst] = True
    return out, delivered, int((~known).sum())


def similarity_compensation(algorithm: Algorithm) -> SimilarityCompensation:
    """Wrap ``algorithm`` with SAFARI's similarity-based compensation (Mao et al. 2022,
    Alg. 3): each lost upload is replaced by the received upload of the client most
    similar to it in the server's distance record (see the module docstring).

    Parameters
    ----------
    algorithm : any algorithm whose uploads are models (FedAvg, FedProx, the hard
        thresholding family, SAFARI's sparse training, ...).
    """
    return SimilarityCompensation(algorithm)
