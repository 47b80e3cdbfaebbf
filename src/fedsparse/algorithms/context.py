"""What the two halves of a round see: the sampled clients' data and random streams
(:class:`ClientContext`), the data as the server may know it (:class:`DataSpec`) and the
clients of a round at aggregation (:class:`Cohort`). The contract they serve is
:class:`fedsparse.algorithms.base.Algorithm`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import rng
from .._validation import ConfigError
from ..data.federated import ClientSplit, FederatedDataset
from ..data.sparse_rows import SparseRows
from ..problems.base import Problem

#: The most mini-batch keys (clients x positions x steps) :meth:`ClientContext.prefetch`
#: draws at once: 4M float64 keys, 32 MB, beside the int64 hashes they come from.
PREFETCH_KEYS = 1 << 22

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
    config : scalars the server sends with the payload (:meth:`Algorithm.client_config`),
        and the run's length T as ``config["total_rounds"]`` (the round loop adds it, in
        the simulator and over Flower alike; see :attr:`total_rounds`).
    """

    problem: Problem
    data: ClientSplit
    clients: torch.Tensor
    round: int
    seed: int
    state: dict[str, torch.Tensor] | None = None
    config: dict[str, Any] = field(default_factory=dict)
    _full_weights: torch.Tensor | None = field(default=None, repr=False)
    #: The clients' example counts on the CPU, read once (the mini-batch draws are made
    #: on the CPU, so a GPU run would otherwise copy them back at every local step).
    _cpu_counts: torch.Tensor | None = field(default=None, repr=False)
    _largest: int | None = field(default=None, repr=False)  # max_i n_i, read once
    #: :meth:`prefetch`'s plans, (steps, batch size) each, and the draws made ahead.
    _planned: list = field(default_factory=list, repr=False)
    _drawn: dict = field(default_factory=dict, repr=False)

    @property
    def size(self) -> int:
        return int(self.clients.shape[0])

    @property
    def total_rounds(self) -> int:
        """T, the number of rounds of the run (rounds are 0 .. T-1), sent by the round loop
        with every payload (``config["total_rounds"]``)."""
        if "total_rounds" not in self.config:
            raise ConfigError("this client update needs the run's number of rounds: the round "
                              "loop sends it as config['total_rounds'] (give it in "
                              "ClientContext(config=...) when calling client_update by hand)")
        return int(self.config["total_rounds"])

    def full(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """All local training data: ``X`` (S, n_max, *feature_shape), ``y`` (S, n_max),
        ``w`` (S, n_max); pooled data are padded for this (S clients only)."""
        if self._full_weights is None:
            self._full_weights = self.data.mean_weights()
        X = self.data.X if isinstance(self.data.X, (torch.Tensor, SparseRows)) \
            else self.data.dense_X()
        return X, self.data.y, self._full_weights

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
        return self.data.gather(index), torch.gather(self.data.y, 1, index), w

    def batch_grad(self, problem: Problem, params: torch.Tensor, step: int,
                   batch_size: int | None) -> torch.Tensor:
        """``problem.grad(params, *self.batch(step, batch_size))``: the same numbers, but
        on dense CPU data a problem with ``grad_rows`` (linear models) reads the drawn
        rows in place instead of from a gathered copy of the mini-batch."""
        fused = getattr(problem, "grad_rows", None)
        if fused is None or self.is_full_batch(batch_size):
            return problem.grad(params, *self.batch(step, batch_size))
        index, w = self.batch_index(step, batch_size)
        y = torch.gather(self.data.y, 1, index)
        g = fused(params, self.data.X, index, y, w)  # None where it does not apply
        return g if g is not None else problem.grad(params, self.data.gather(index), y, w)

    def is_full_batch(self, batch_size: int | None) -> bool:
        """True if :meth:`batch` returns the full local data (``None`` or ``b >= max n_i``)."""
        return batch_size is None or batch_size >= self._largest_count()

    def _counts_on_cpu(self) -> torch.Tensor:
        if self._cpu_counts is None:
            self._cpu_counts = self.data.counts.cpu()
        return self._cpu_counts

    def _largest_count(self) -> int:
        if self._largest is None:
            self._largest = int(self._counts_on_cpu().max())
        return self._largest

    def prefetch(self, steps: range, batch_size: int | None) -> None:
        """Draw the mini-batches of local steps ``steps`` at once, for :meth:`batch` to
        hand out as the steps ask for them (each once).

        The draws are the ones :meth:`batch` makes step by step (a key is a function of
        the counters alone); made together they cost one vectorised draw and one copy to
        the device instead of one each, the host-side work that bounds a round of many
        small local steps on a GPU. Keys for at most :data:`PREFETCH_KEYS` positions are
        held at a time: longer spans are drawn in parts, as the steps reach them.
        """
        if len(steps) > 1 and not self.is_full_batch(batch_size):
            self._planned.append((steps, batch_size))

    def batch_index(self, step: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The draw behind :meth:`batch`: ``index`` (S, b) example positions and ``w``
        (S, b) their weights, 1/b each (0 on padding where a client has fewer than ``b``
        examples; the rest share the weight equally)."""
        drawn = self._drawn.pop((step, batch_size), None)
        if drawn is not None:
            return drawn
        planned = next((steps for steps, b in self._planned if b == batch_size and step in steps),
                       None)
        if planned is None:
            return self._draw_steps([step], batch_size)[0]
        per_step = max(self.size * self._largest_count(), 1)
        ahead = planned[planned.index(step):][:max(PREFETCH_KEYS // per_step, 1)]
        block = self._draw_steps(list(ahead), batch_size)
        self._drawn.update({(k, batch_size): d
                            for k, d in zip(ahead[1:], block[1:], strict=True)})
        return block[0]

    def _draw_steps(self, steps: list[int], batch_size: int) -> list[
            tuple[torch.Tensor, torch.Tensor]]:
        """:meth:`batch_index` of each of ``steps``, drawn together."""
        counts, clients = self._counts_on_cpu(), self.clients.cpu()
        steps_t = torch.tensor(steps, dtype=torch.int64)
        S, n_max = counts.shape[0], self._largest_count()
        if 2 * int(counts.sum()) >= S * n_max:  # little padding: one draw over (S, n_max)
            index, picked = self._draw(clients, counts, n_max, steps_t, batch_size)
        else:
            # Uneven sizes (log-normal, power law): clients in groups of sizes within a
            # factor 2, each drawn over its own longest client, so the keys cost about
            # 2 sum(n_i), not S max(n_i). The draw is the same: a key is a function of
            # (client, position), and positions past a client's count are never picked.
            index = torch.empty(S, len(steps), batch_size, dtype=torch.int64)
            picked = torch.empty(S, len(steps), batch_size, dtype=torch.bool)
            group = torch.floor(torch.log2(counts.clamp(min=1).to(torch.float64)))
            for g in torch.unique(group):
                rows = torch.nonzero(group == g).flatten()
                # at least b positions (a group of clients with fewer than b examples
                # takes all of theirs and pads), at most the longest sampled client
                width = max(int(counts[rows].max()), batch_size)
                index[rows], picked[rows] = self._draw(clients[rows], counts[rows], width,
                                                       steps_t, batch_size)
        w = picked.to(self.data.X.dtype)
        device = self.data.y.device
        index, w = index.to(device), (w / w.sum(-1, keepdim=True)).to(device)
        return [(index[:, k], w[:, k]) for k in range(len(steps))]

    def _draw(self, clients: torch.Tensor, counts: torch.Tensor, width: int,
              steps: torch.Tensor, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`~fedsparse.rng.choose_without_replacement` over the keys of positions
        ``0 .. width - 1`` of ``clients`` (those past a client's count are invalid) at
        each of ``steps``: (S, len(steps), b) positions and whether each was picked."""
        positions = torch.arange(width)
        keys = rng.uniform(self.seed, rng.BATCH, self.round, clients[:, None, None],
                           steps[None, :, None], positions[None, None, :])
        valid = (positions[None, :] < counts[:, None])[:, None, :]
        return rng.choose_without_replacement(keys, valid, batch_size)

    def random(self, *counters) -> torch.Tensor:
        """Uniforms for algorithm-specific draws, keyed by (seed, round, client, counters)."""
        return rng.uniform(self.seed, rng.ALGORITHM, self.round, self.clients, *counters)


@dataclass(frozen=True)
class DataSpec:
    """What the server may know of the federated data: never a client's examples.

    Attributes
    ----------
    num_clients : N.
    feature_shape : shape of one example's features, e.g. ``(784,)`` or ``(1, 28, 28)``.
    dtype : floating dtype of data and model.
    weights : (N,) float64 client weights p_i (0 for a client with no node on Flower).
    device : where the model lives.
    """

    num_clients: int
    feature_shape: tuple[int, ...]
    dtype: torch.dtype
    weights: torch.Tensor
    device: torch.device = torch.device("cpu")

    @property
    def dim(self) -> int:
        """Number of features d (the product of ``feature_shape``)."""
        return math.prod(self.feature_shape)

    @classmethod
    def of(cls, data: FederatedDataset) -> DataSpec:
        """The spec of a whole data set (what the simulator binds with)."""
        shape = getattr(data, "feature_shape", None) or (data.dim,)
        device = getattr(data.train.X, "device", torch.device("cpu"))
        return cls(data.num_clients, tuple(shape), data.dtype, data.weights, device)


@dataclass(frozen=True)
class Cohort:
    """The clients of one round, as :meth:`Algorithm.aggregate` sees them.

    Attributes
    ----------
    round : 0-based round index.
    clients : (S,) int64 sampled client ids, ascending.
    weights : (S,) float64 their weights p_i.
    delivered : (S,) bool, True where the upload arrived and passed validation. Rows
        of ``uploads`` that were not delivered are zero and must not be used.
    seed : the run seed (the round loop gives it; 0, ``simulate``'s default, when a
        cohort is built by hand), so that the server half draws from the same streams
        as the client half (:meth:`random`).
    """

    round: int
    clients: torch.Tensor
    weights: torch.Tensor
    delivered: torch.Tensor
    seed: int = 0

    @property
    def size(self) -> int:
        return int(self.clients.shape[0])

    def random(self, *counters) -> torch.Tensor:
        """Uniforms for the server's algorithm-specific draws, keyed by (seed, round,
        client, counters): the ``rng.ALGORITHM`` stream of :meth:`ClientContext.random`,
        so a draw keyed by the same counters gives the same numbers in either half. Use
        counters no client-side draw uses (e.g. negative ones).

        Returns
        -------
        (S,) float64 uniforms in [0, 1), one per client of :attr:`clients` (broadcast
        with any tensor counter).
        """
        return rng.uniform(self.seed, rng.ALGORITHM, self.round, self.clients, *counters)
