"""Algorithms that wrap another one, with the wrapped algorithm's state nested in theirs.

A wrapper (e.g. :class:`~fedsparse.algorithms.compensation.SimilarityCompensation`)
changes one half of a round of its ``inner`` algorithm and leaves the rest to it. Its
server state holds the inner algorithm's whole state under one key, beside its own
entries, as optax's ``chain`` nests the states of the transformations it chains::

    {"inner": <inner.init(...)>, <the wrapper's own entries>}

so the wrapper never needs to know, or filter, the inner algorithm's key names, and a
wrapper's entry cannot shadow one of the inner algorithm's. Everything the round loop
and the runtimes read of an algorithm (its name, encodings, capabilities, cohort size,
declared diagnostics: :data:`DELEGATED`) is read through to the bound inner algorithm,
in one place.
"""

from __future__ import annotations

from operator import attrgetter

import torch

from .._validation import fail
from .base import Algorithm

#: The key of the inner algorithm's state in a wrapper's server state.
INNER = "inner"
#: The attributes a wrapper reports as the inner algorithm's (read through, so the bound
#: inner algorithm's values are the ones used).
DELEGATED = ("name", "requires", "upload_encoding", "broadcast_encoding",
             "stateful_clients", "clients_per_round", "client_metrics", "uploads_are_updates",
             "round_metric_names")


def innermost_state(state: dict) -> dict:
    """The state of the innermost algorithm of a server state, wrapped or not (a
    callback given only the state, which holds the global model as ``"model"`` there)."""
    while isinstance(state, dict) and INNER in state:
        state = state[INNER]
    return state


class Wrapper(Algorithm):
    """Base class of an algorithm that wraps ``inner``; by default it is ``inner``.

    Subclasses add their own server-state entries in :meth:`init` (beside
    ``state["inner"]``) and override the halves they change; the others pass the inner
    state (``state["inner"]``) to ``inner``.

    Parameters
    ----------
    inner : the wrapped :class:`~fedsparse.algorithms.Algorithm`.
    """

    def __init__(self, inner: Algorithm):
        if not isinstance(inner, Algorithm):
            raise fail("algorithm", type(inner).__name__, "must be a fedsparse Algorithm")
        self.inner = inner

    def statistics(self, problem, split):
        return self.inner.statistics(problem, split)

    def sequential_steps(self):
        return self.inner.sequential_steps()

    def state_bytes(self, num_clients, model_size, itemsize):
        return self.inner.state_bytes(num_clients, model_size, itemsize)

    def _bind(self, problem, spec, stats):
        self.inner = self.inner.bind(problem, spec, stats)

    def init(self, problem, seed=0):
        return {INNER: self.inner.init(problem, seed)}

    def init_clients(self, problem, clients, seed=0):
        return self.inner.init_clients(problem, clients, seed)

    def broadcast(self, state, clients):
        return self.inner.broadcast(state[INNER], clients)

    def client_config(self, state):
        return self.inner.client_config(state[INNER])

    def client_update(self, payload, ctx):
        return self.inner.client_update(payload, ctx)

    def aggregate(self, state, uploads, cohort):
        return {**state, INNER: self.inner.aggregate(state[INNER], uploads, cohort)}

    def model(self, state):
        return self.inner.model(state[INNER])

    def round_metrics(self, state):
        return self.inner.round_metrics(state[INNER])

    def personalized(self, state, client_state, clients=None):
        return self.inner.personalized(state[INNER], client_state, clients)

    def with_global_model(self, state: dict, model: torch.Tensor) -> dict:
        return {**state, INNER: self.inner.with_global_model(state[INNER], model)}


for _name in DELEGATED:
    setattr(Wrapper, _name, property(attrgetter(f"inner.{_name}"),
                                     doc=f"The wrapped algorithm's ``{_name}``."))
