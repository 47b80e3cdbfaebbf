"""Federated data sets whose clients are materialised only when they are used.

A cross-device population has 10^5 to 10^7 clients, of which a round samples a few
hundred. A :class:`LazyFederatedDataset` knows every client's number of examples
(``counts``, 8 bytes a client) and the client weights, and produces client i's examples
only when i is sampled or evaluated: from ``(seed, i)`` for the generated data sets
(``lazy=True`` on :func:`~fedsparse.data.fedprox_synthetic`,
:func:`~fedsparse.data.shifted_gaussian` and :func:`~fedsparse.data.fedht_simulation`),
or from an on-disk file (:mod:`fedsparse.data.ondisk`). Memory follows the sampled
clients, not the data set.

The materialised clients are exactly what the eager data set of the same arguments
holds: the same values, the same layout (padded or pooled, chosen by the eager rule of
:func:`~fedsparse.data.from_arrays`), padded features padded to the same ``n_max`` (the
whole data set's longest client), so :func:`fedsparse.simulate` gives the same history
on both. Pooled clients' targets are padded only to the selected clients' longest (the
eager data set pads them to ``n_max``): mini-batch draws are the same, full-batch sums
of pooled data may differ in the last bits.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch

from .._validation import fail
from .federated import ClientSplit, FederatedDataset
from .pooled import PooledRows, _client_index

__all__ = ["ClientSource", "LazyFederatedDataset", "LazySplit", "client_subset"]

#: Bytes of features materialised at once when every client is evaluated or a
#: statistic of every client is computed.
CHUNK_BYTES = 256 * 2**20


@dataclass(frozen=True)
class ClientSource:
    """Where the clients' examples come from.

    Attributes
    ----------
    read : ``read(i) -> (X_i, y_i, X_test_i, y_test_i)``, client i's arrays (the test
        pair None without a test split); features (n_i, *feature_shape), targets (n_i,).
        Values are converted to ``base_dtype`` exactly as the eager data set stores them.
    counts : ((N,) train counts, (N,) test counts or None), int64 tensors.
    feature_shape : shape of one example's features.
    base_dtype : the dtype the eager data set stores (values pass through it).
    pooled : True if the eager data set stores the features pooled (see
        :func:`~fedsparse.data.from_arrays`, ``layout="auto"``).
    describe : a short description of the source for error messages.
    missing : ``missing(i) -> Exception`` for a client id outside 0..N-1 (default a
        :class:`~fedsparse.ConfigError`).
    """

    read: Callable[[int], tuple]
    counts: tuple[torch.Tensor, torch.Tensor | None]
    feature_shape: tuple[int, ...]
    base_dtype: torch.dtype
    pooled: bool
    describe: str = "generated"
    missing: Callable[[int], Exception] | None = None

    @property
    def num_clients(self) -> int:
        return int(self.counts[0].shape[0])

    def n_max(self, part: int) -> int:
        return int(self.counts[part].max())


def auto_pooled(feature_shape: tuple[int, ...], train_counts: torch.Tensor,
                test_counts: torch.Tensor | None) -> bool:
    """The layout rule of ``from_arrays(layout="auto")`` from the counts alone: pool
    image-like features, and vectors whose padding would more than double the memory."""
    if len(feature_shape) != 1:
        return True
    splits = [c for c in (train_counts, test_counts) if c is not None]
    padded = sum(c.shape[0] * int(c.max()) for c in splits)
    real = sum(int(c.sum()) for c in splits)
    return padded > 2 * real


def _stack(xs: list, ys: list, n_max: int, source: ClientSource, dtype: torch.dtype,
           pad: bool, flatten: bool) -> ClientSplit:
    """Client arrays as a :class:`ClientSplit` in the eager data set's layout: padded
    features to the whole data set's ``n_max`` (what the eager data set's full-batch
    sums run over), pooled ones with targets padded to these clients' longest.

    The arrays are stacked in NumPy first and converted by one torch cast (to
    ``base_dtype``, then ``dtype``: the values the eager data set holds, which converted
    each client's arrays by the same element-wise casts); one cast of S clients costs
    a fraction of S small ones."""
    base = source.base_dtype
    counts = torch.tensor([np.shape(x)[0] for x in xs], dtype=torch.int64)
    S = len(xs)

    def cast(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a).to(base).to(dtype)

    if source.pooled and not pad:
        # Pooled features have no padding, and the padded targets need none past these
        # clients' longest: the mini-batch draws do not depend on the width (the keys
        # are functions of positions), and S x n_max targets of a heavy-tailed data set
        # would cost more than the examples themselves.
        n_max = int(counts.max())
        pool = cast(np.concatenate([np.asarray(x) for x in xs], axis=0))
        starts = torch.cumsum(counts, 0) - counts
        X = PooledRows(pool, starts, counts, n_max=n_max)
    else:
        first = np.asarray(xs[0])
        Xn = np.zeros((S, n_max, *source.feature_shape), dtype=first.dtype)
        for s, x in enumerate(xs):
            Xn[s, : np.shape(x)[0]] = x
        X = cast(Xn)
        if flatten and X.ndim != 3:
            X = X.reshape(S, n_max, -1)
    first_y = np.asarray(ys[0])
    Yn = np.zeros((S, n_max), dtype=first_y.dtype)
    for s, y in enumerate(ys):
        Yn[s, : np.shape(y)[0]] = y
    return ClientSplit(X, cast(Yn), counts)


@dataclass(frozen=True)
class LazySplit:
    """One split (train or test) of a lazy data set: counts now, examples on demand.

    Stands in for :class:`~fedsparse.data.ClientSplit` where the round loop selects
    clients (:meth:`select` materialises them); it holds no examples.
    """

    source: ClientSource
    part: int  # 0 train, 1 test
    dtype: torch.dtype
    pad: bool = False      # padded layout even where the source is pooled
    flatten: bool = False  # and (S, n_max, d) features (what linear problems read)
    device: torch.device = torch.device("cpu")

    @property
    def counts(self) -> torch.Tensor:
        """(N,) int64 number of examples of every client."""
        return self.source.counts[self.part]

    @property
    def num_clients(self) -> int:
        return self.source.num_clients

    @property
    def feature_shape(self) -> tuple[int, ...]:
        return self.source.feature_shape

    @property
    def layout(self) -> str:
        return "pooled" if self.source.pooled and not self.pad else "padded"

    @property
    def n_max(self) -> int:
        return self.source.n_max(self.part)

    def select(self, clients) -> ClientSplit:
        """The clients ``clients`` ((S,) ids, any order), materialised (S, n_max, ...)."""
        return materialise(self.source, clients, self.dtype, self.pad, self.flatten,
                           self.device)[self.part]


def materialise(source: ClientSource, clients, dtype: torch.dtype, pad: bool, flatten: bool,
                device: torch.device) -> tuple[ClientSplit, ClientSplit | None]:
    """Train and test splits of ``clients``, read once from ``source``."""
    ids = _ids(source, clients)
    parts = [source.read(i) for i in ids]
    train = _stack([p[0] for p in parts], [p[1] for p in parts], source.n_max(0), source,
                   dtype, pad, flatten)
    test = None
    if source.counts[1] is not None:
        test = _stack([p[2] for p in parts], [p[3] for p in parts], source.n_max(1), source,
                      dtype, pad, flatten)
    if device.type != "cpu":
        train = train.to_device(device)
        test = None if test is None else test.to_device(device)
    return train, test


def _ids(source: ClientSource, clients) -> list[int]:
    """Client ids as ints, each checked against the source's N."""
    N = source.num_clients
    if source.missing is not None and not isinstance(clients, slice):
        flat = torch.as_tensor(clients).reshape(-1)
        if not flat.is_floating_point() and flat.dtype != torch.bool:
            bad = flat[(flat < 0) | (flat >= N)]
            if bad.numel():
                raise source.missing(int(bad[0]))
    return _client_index(clients, N, torch.device("cpu")).tolist()


@dataclass(frozen=True, repr=False)
class LazyFederatedDataset(FederatedDataset):
    """A :class:`FederatedDataset` whose ``train`` and ``test`` are :class:`LazySplit`.

    It runs in :func:`fedsparse.simulate` like the eager data set of the same
    arguments, with the same history; evaluation reads the clients in chunks (or a
    seeded sample of them: ``simulate(..., eval_clients=k)``). Code that reads every
    client's tensors directly (``data.train.X``) needs :meth:`subset` first.

    Build one with ``lazy=True`` on a generator, or with
    :func:`fedsparse.data.ondisk.open_federated`.
    """

    @classmethod
    def from_source(cls, source: ClientSource, *, dtype: torch.dtype, name: str,
                    ground_truth: torch.Tensor | None = None,
                    weights: torch.Tensor | None = None) -> LazyFederatedDataset:
        """A lazy data set over ``source``; ``weights`` (N,) default ``n_i / sum n_j``
        (the default of :func:`~fedsparse.data.from_arrays`)."""
        train = LazySplit(source, 0, dtype)
        test = None if source.counts[1] is None else LazySplit(source, 1, dtype)
        if weights is None:
            weights = source.counts[0].to(torch.float64)
            weights = weights / weights.sum()
        return cls(train=train, weights=weights, test=test, ground_truth=ground_truth,
                   name=name)

    @property
    def dtype(self) -> torch.dtype:
        return self.train.dtype

    @property
    def device(self) -> torch.device:
        return self.train.device

    @property
    def source(self) -> ClientSource:
        return self.train.source

    def _with(self, **changes) -> LazyFederatedDataset:
        train = replace(self.train, **changes)
        test = None if self.test is None else replace(self.test, **changes)
        return replace(self, train=train, test=test)

    def to(self, dtype: torch.dtype) -> LazyFederatedDataset:
        """The same data in another floating dtype (applied as clients are read)."""
        gt = None if self.ground_truth is None else self.ground_truth.to(dtype)
        return replace(self._with(dtype=dtype), ground_truth=gt)

    def to_device(self, device) -> LazyFederatedDataset:
        """The same data, read onto ``device``; client weights and ground truth moved."""
        device = torch.device(device)
        gt = None if self.ground_truth is None else self.ground_truth.to(device)
        return replace(self._with(device=device), weights=self.weights.to(device),
                       ground_truth=gt)

    def padded(self, flatten: bool = False) -> LazyFederatedDataset:
        """The same data, materialised in the padded layout (see
        :meth:`FederatedDataset.padded`)."""
        pad = True
        flatten = self.train.flatten or (flatten and len(self.feature_shape) != 1)
        if pad == self.train.pad and flatten == self.train.flatten:
            return self
        return self._with(pad=pad, flatten=flatten)

    def labels(self) -> torch.Tensor:
        raise fail("labels()", "lazy data set", "would read every client; take "
                   "data.subset(clients).labels() of the clients wanted")

    def subset(self, clients, weights: torch.Tensor | None = None) -> FederatedDataset:
        """Clients ``clients`` materialised as an eager :class:`FederatedDataset`.

        Parameters
        ----------
        clients : (S,) client ids.
        weights : (S,) their weights (default: their p_i renormalised to sum to 1).
        """
        ids = torch.tensor(_ids(self.source, clients), dtype=torch.int64)
        train, test = materialise(self.source, ids, self.dtype, self.train.pad,
                                  self.train.flatten, self.device)
        if weights is None:
            weights = self.weights[ids.to(self.weights.device)]
            weights = weights / weights.sum()
        return FederatedDataset(train=train, weights=weights, test=test,
                                ground_truth=self.ground_truth, name=self.name)

    def chunks(self, budget: int | None = None) -> list[torch.Tensor]:
        """Consecutive client ranges whose features take at most ``budget`` bytes as
        materialised (at least one client each): how every client is read, a chunk at a
        time. Padded clients take ``n_max`` rows each, pooled ones their own. Default
        budget :data:`CHUNK_BYTES`."""
        budget = CHUNK_BYTES if budget is None else budget
        row = math.prod(self.feature_shape) * torch.finfo(self.dtype).bits // 8
        parts = [p for p in (0, 1) if self.source.counts[p] is not None]
        N = self.num_clients
        if self.layout == "padded":
            per_client = row * sum(self.source.n_max(p) for p in parts)
            size = max(1, budget // max(per_client, 1))
            return [torch.arange(a, min(a + size, N)) for a in range(0, N, size)]
        rows = sum(self.source.counts[p].to(torch.int64) for p in parts)
        ends = torch.cumsum(rows * row, 0)
        out, a = [], 0
        while a < N:
            base = int(ends[a - 1]) if a else 0
            b = int(torch.searchsorted(ends, base + budget, right=True))
            b = min(max(b, a + 1), N)
            out.append(torch.arange(a, b))
            a = b
        return out

    def statistics(self, algorithm, problem, budget: int | None = None
                   ) -> dict[str, torch.Tensor]:
        """``algorithm.statistics`` of every client, read a chunk at a time; nothing is
        read when the algorithm needs none (it returns {} on a single client)."""
        if not algorithm.statistics(problem, self.train.select([0])):
            return {}
        parts = [algorithm.statistics(problem, self.train.select(c))
                 for c in self.chunks(budget)]
        return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}

    def probe(self, size: int = 16) -> FederatedDataset:
        """The first ``size`` clients, materialised: what a problem checks (feature shape,
        labels) before a run. Where the source can read every client's labels without
        their features (a data set on disk), :meth:`~FederatedDataset.labels` of the
        probe returns all of them, so one bad label anywhere is refused before the first
        round; generated clients' labels are of one kind, and the first ones stand for
        all."""
        sub = self.subset(torch.arange(min(size, self.num_clients)))
        every_label = getattr(self.source.read, "labels", None)
        if every_label is None:
            return sub
        return _Probe(train=sub.train, weights=sub.weights, test=sub.test,
                      ground_truth=sub.ground_truth, name=sub.name, every_label=every_label)

    def __repr__(self) -> str:
        # The eager data set's text: the fingerprint of a run (checkpoints) is the same.
        n = self.train.counts
        extra = ""
        if self.layout == "pooled" or len(self.feature_shape) != 1:
            extra = f", feature_shape={self.feature_shape}, layout={self.layout}"
        return (f"FederatedDataset({self.name!r}, clients={self.num_clients}, dim={self.dim}"
                f"{extra}, examples={int(n.sum())} (per client {int(n.min())}..{int(n.max())}), "
                f"test={'yes' if self.test is not None else 'no'}, "
                f"ground_truth={'yes' if self.ground_truth is not None else 'no'})")


@dataclass(frozen=True)
class _Probe(FederatedDataset):
    """A few clients of a lazy data set, materialised, with every client's labels."""

    every_label: Callable[[], list] | None = None  # read only if a problem checks labels

    def split_labels(self) -> list[tuple[str, torch.Tensor]]:
        return [(split, torch.as_tensor(labels)) for split, labels in self.every_label()]


def client_subset(data: FederatedDataset, clients: torch.Tensor,
                  weights: torch.Tensor | None = None) -> FederatedDataset:
    """Clients ``clients`` of any data set (lazy or eager) as an eager data set, with
    ``weights`` (default: their p_i renormalised to sum to 1)."""
    if isinstance(data, LazyFederatedDataset):
        return data.subset(clients, weights)
    if weights is None:
        weights = data.weights[clients.to(data.weights.device)]
        weights = weights / weights.sum()
    idx = clients.to(data.train.counts.device)
    test = None if data.test is None else data.test.select(idx)
    return FederatedDataset(train=data.train.select(idx), weights=weights, test=test,
                            ground_truth=data.ground_truth, name=data.name)
