"""What the four personalised algorithms share: the personal-model client state, the
check that the problem has classes, and :meth:`PersonalizedAlgorithm.personalized` with
its fallback for a client that has not trained yet."""

from __future__ import annotations

import torch

from ..._validation import check_float, fail
from ...problems.base import Problem
from ..base import Algorithm


def density(x: torch.Tensor) -> torch.Tensor:
    """Non-zero fraction of each row of (..., P): (...,) float64."""
    return (x != 0).to(torch.float64).mean(-1)


def check_unit(name: str, value, what: str) -> float:
    """A fraction ``value`` in [0, 1]; ``what`` says what it is in the error."""
    if not 0 <= check_float(name, value) <= 1:
        raise fail(name, value, f"must lie in [0, 1]: {what}")
    return float(value)


class PersonalizedAlgorithm(Algorithm):
    """What the four personalised algorithms share: the client state
    ``{"personal": (S, P), "trained": (S,) bool}``, the check that the problem has
    classes, and :meth:`personalized`.

    A client's personalised model (PM) is its ``personal`` row once it has trained, and
    :meth:`_fallback` (the global model; HeurFedAMP: the server's copy of its model)
    before. Subclasses return their PMs from ``client_update`` through
    :meth:`_client_state`.
    """

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

    round_metric_names = ("model_density",)

    def round_metrics(self, state):
        # evaluate() gives the density on evaluation rounds only; this is every round
        return {"model_density": float(density(self.model(state)))}

    @staticmethod
    def _client_state(personal: torch.Tensor) -> dict:
        """The client state after training: ``personal`` (S, P) the PMs, all trained."""
        return {"personal": personal,
                "trained": torch.ones(personal.shape[0], dtype=torch.bool,
                                      device=personal.device)}
