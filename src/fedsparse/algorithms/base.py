"""The Algorithm interface: pure server and client halves over explicit state.

A round of any algorithm is::

    payload = algo.broadcast(state)                                  # server -> clients
    uploads, client_state, info = algo.client_update(payload, ctx)   # all sampled clients at once
    state = algo.aggregate(state, uploads, weights, delivered)       # server

``ctx`` (a :class:`ClientContext`) gives the client half the data of the sampled
clients, stacked along a leading axis S, and their mini-batches, drawn from
counter-based random numbers so the result does not depend on how clients are
grouped. Nothing is mutated in place: each call returns new state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .. import rng
from .._validation import ConfigError, check_float, check_int, fail
from ..data.federated import ClientSplit, FederatedDataset
from ..data.sparse_rows import SparseRows
from ..problems.base import Problem

ServerState = dict[str, Any]
"""Server state: a dict of tensors; ``state["model"]`` is the (P,) global model."""


@dataclass
class ClientContext:
    """What a client update may see: the sampled clients' data and their random streams.

    Attributes
    ----------
    problem : the learning problem.
    data : ClientSplit of the S sampled clients, stacked.
    clients : (S,) int64 global ids of the sampled clients.
    round : 0-based round index.
    seed : run seed.
    state : per-client state of the sampled clients (dict of (S, ...) tensors) or None.
    config : scalars the server sends with the payload (:meth:`Algorithm.client_config`).
    """

    problem: Problem
    data: ClientSplit
    clients: torch.Tensor
    round: int
    seed: int
    state: dict[str, torch.Tensor] | None = None
    config: dict[str, Any] = field(default_factory=dict)
    _full_weights: torch.Tensor | None = field(default=None, repr=False)

    @property
    def size(self) -> int:
        return int(self.clients.shape[0])

    def full(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """All local training data: ``X`` (S, n_max, d), ``y`` (S, n_max), ``w`` (S, n_max)."""
        if self._full_weights is None:
            self._full_weights = self.data.mean_weights()
        return self.data.X, self.data.y, self._full_weights

    def batch(self, step: int, batch_size: int | None) -> tuple[torch.Tensor, torch.Tensor,
                                                                 torch.Tensor]:
        """Mini-batch for local step ``step``: ``b`` examples per client, uniformly without
        replacement (clients with fewer than ``b`` examples use all of theirs).

        ``batch_size=None`` (or at least every client's size) returns :meth:`full`.
        The draw is a function of (seed, round, client id, step) only.
        """
        if self.is_full_batch(batch_size):
            return self.full()
        index, w = self.batch_index(step, batch_size)
        X = self.data.X
        if isinstance(X, SparseRows):  # CSR data: copy only the rows' non-zeros
            Xb = X.gather_rows(index)
        else:
            # One index_select of whole contiguous rows: an element-wise gather of the
            # same rows costs several times more (as much as the gradient itself).
            S, n_max, d = X.shape
            rows = (torch.arange(S)[:, None] * n_max + index).reshape(-1)
            Xb = torch.index_select(X.reshape(S * n_max, d), 0, rows).reshape(S, batch_size, d)
        return Xb, torch.gather(self.data.y, 1, index), w

    def is_full_batch(self, batch_size: int | None) -> bool:
        """True if :meth:`batch` returns the full local data (``None`` or ``b >= max n_i``)."""
        return batch_size is None or batch_size >= int(self.data.counts.max())

    def batch_index(self, step: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The draw behind :meth:`batch`: ``index`` (S, b) example positions and ``w``
        (S, b) their weights, 1/b each (0 on padding where a client has fewer than ``b``
        examples; the rest share the weight equally)."""
        counts = self.data.counts
        n_max = self.data.X.shape[1]
        keys = rng.uniform(self.seed, rng.BATCH, self.round, self.clients[:, None], step,
                           torch.arange(n_max)[None, :])
        valid = torch.arange(n_max)[None, :] < counts[:, None]
        index, picked = rng.choose_without_replacement(keys, valid, batch_size)
        w = picked.to(self.data.X.dtype)
        return index, w / w.sum(-1, keepdim=True)

    def random(self, *counters) -> torch.Tensor:
        """Uniforms for algorithm-specific draws, keyed by (seed, round, client, counters)."""
        return rng.uniform(self.seed, rng.ALGORITHM, self.round, self.clients, *counters)


class Algorithm:
    """Base class of every federated algorithm.

    Subclasses set :attr:`name`, :attr:`requires` (problem capabilities),
    :attr:`upload_encoding` and implement the four halves.
    """

    name = "algorithm"
    requires: frozenset[str] = frozenset({"grad"})
    #: How uploads travel: "dense", "sparse", "bitmap" or "auto" (see fedsparse.comm).
    upload_encoding = "dense"
    broadcast_encoding = "sparse"
    #: True if the algorithm keeps per-client state between rounds.
    stateful_clients = False
    #: Cohort size the algorithm asks for (None = all clients); ``simulate`` uses it when
    #: it is not given its own ``clients_per_round``.
    clients_per_round: int | None = None

    def hyperparameters(self) -> dict[str, Any]:
        """The keyword arguments that rebuild this algorithm (recorded with each run)."""
        return {}

    def check(self, problem: Problem, data: FederatedDataset) -> None:
        """Raise a clear error if this algorithm cannot run on (problem, data)."""
        missing = set(self.requires) - set(problem.capabilities)
        if missing:
            raise ConfigError(f"{self.name} needs the problem capabilities {sorted(missing)}, "
                              f"which {problem.name} does not provide")

    def init(self, problem: Problem, data: FederatedDataset) -> ServerState:
        """Initial server state: x_0 = 0 unless the algorithm says otherwise."""
        P = problem.param_dim(data.dim)
        return {"model": torch.zeros(P, dtype=data.dtype)}

    def init_clients(self, problem: Problem, data: FederatedDataset) -> dict | None:
        """Initial per-client state (dict of (N, ...) tensors), or None."""
        return None

    def broadcast(self, state: ServerState) -> torch.Tensor:
        """The payload every sampled client receives."""
        return state["model"]

    def client_config(self, state: ServerState) -> dict[str, Any]:
        """Scalars sent to the clients with the payload (e.g. a resolved step size)."""
        return {}

    def client_update(self, payload: torch.Tensor, ctx: ClientContext):
        """Run the local work of all sampled clients at once.

        Returns
        -------
        uploads : (S, P) tensor.
        client_state : updated per-client state (dict of (S, ...) tensors) or None.
        info : dict of scalar diagnostics for the round (may be empty).
        """
        raise NotImplementedError

    def aggregate(self, state: ServerState, uploads: torch.Tensor, weights: torch.Tensor,
                  delivered: torch.Tensor) -> ServerState:
        """New server state from the uploads that arrived (``delivered`` is (S,) bool)."""
        raise NotImplementedError

    def model(self, state: ServerState) -> torch.Tensor:
        """The (P,) global model to evaluate."""
        return state["model"]

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hyperparameters().items())
        return f"{self.name}({args})"


def weighted_mean(uploads: torch.Tensor, weights: torch.Tensor,
                  delivered: torch.Tensor) -> torch.Tensor:
    """``sum_i p_i x_i / sum_i p_i`` over delivered uploads (weights renormalised).

    Parameters
    ----------
    uploads : (S, P); weights : (S,) float64; delivered : (S,) bool with at least one True.
    """
    w = torch.where(delivered, weights, torch.zeros_like(weights))
    w = (w / w.sum()).to(uploads.dtype)
    return w @ uploads


def check_sparsity(sparsity: int, problem: Problem, data: FederatedDataset) -> None:
    """sparsity must fit in one block of the model (a class row for softmax)."""
    block = problem.param_dim(data.dim) // problem.blocks
    what = "the model dimension" if problem.blocks == 1 else "the class-row length"
    check_int("sparsity", sparsity, minimum=1)
    if sparsity > block:
        raise fail("sparsity", sparsity, f"must be at most {what} {block}")


def check_step_size(name: str, value):
    """A step size argument: a positive number or "auto" (returned unchanged)."""
    if isinstance(value, str):
        if value != "auto":
            raise fail(name, value, 'must be a positive number or "auto"')
        return value
    check_float(name, value, positive=True)
    return value


def resolve_step_size(step_size, problem: Problem, data: FederatedDataset) -> float:
    """A number, or "auto" = 1 / max_i L_i from the problem's Lipschitz estimate."""
    if step_size != "auto":
        return float(step_size)
    X, w = data.train.X, data.train.mean_weights()
    return float(1.0 / problem.lipschitz(X, w).max())
