"""The federated dataset: per-client splits stacked along a leading client axis.

:class:`ClientSplit` holds one split (train or test) of every client,
:class:`FederatedDataset` the splits with the client weights; both are built by
:func:`fedsparse.data.federated.from_arrays` (:mod:`fedsparse.data.assemble`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace

import torch

from .._validation import check_int, fail
from .pooled import PooledRows, ranges
from .sparse_rows import SparseRows

__all__ = ["ClientSplit", "FederatedDataset"]


@functools.lru_cache(maxsize=16)
def _row_starts(S: int, n_max: int, device: torch.device) -> torch.Tensor:
    """(S, 1) first row of each client in the (S * n_max)-row flat view, made once per
    shape and device: every local step's gather adds it to its index (three dispatched
    calls fewer a step, which a round of small steps on a GPU is bound by)."""
    return torch.arange(S, device=device)[:, None] * n_max


def _xs_layout(X) -> str:
    if isinstance(X, PooledRows):
        return "pooled"
    if isinstance(X, SparseRows):
        return "sparse"
    return "padded"


@dataclass(frozen=True)
class ClientSplit:
    """One split (train or test) of every client, stacked along a leading client axis.

    Attributes
    ----------
    X : (N, n_max, *feature_shape) features, in one of three layouts:

        * a dense tensor, zero-padded: rows past ``counts[i]`` are zeros;
        * a :class:`~fedsparse.data.sparse_rows.SparseRows` of shape (N, n_max, d) for
          sparse (CSR) client data, which keeps only the non-zeros;
        * a :class:`~fedsparse.data.pooled.PooledRows`, every client's examples once in
          one pool (no padding), whose ``shape`` still reports (N, n_max, *feature_shape).

        Code that needs a batch reads it with :meth:`gather` (any layout) rather than
        indexing ``X``.
    y : (N, n_max) targets (class labels stored as floats holding integers), padded.
    counts : (N,) int64 number of real examples per client.
    """

    X: torch.Tensor | SparseRows | PooledRows
    y: torch.Tensor
    counts: torch.Tensor

    @property
    def num_clients(self) -> int:
        return self.X.shape[0]

    @property
    def layout(self) -> str:
        """"padded" (dense tensor), "sparse" (SparseRows) or "pooled" (PooledRows)."""
        return _xs_layout(self.X)

    @property
    def feature_shape(self) -> tuple[int, ...]:
        """Shape of one example's features, e.g. ``(d,)`` or ``(C, H, W)``."""
        return tuple(self.X.shape[2:])

    @property
    def mask(self) -> torch.Tensor:
        """(N, n_max) bool, True on real examples."""
        return torch.arange(self.X.shape[1], device=self.counts.device) < self.counts[:, None]

    def mean_weights(self) -> torch.Tensor:
        """(N, n_max) example weights 1/n_i on real examples, 0 on padding."""
        return self.mask.to(self.X.dtype) / self.counts.clamp(min=1)[:, None].to(self.X.dtype)

    def select(self, clients: torch.Tensor | None) -> ClientSplit:
        """The (S,) clients ``clients`` (all when None) as a split of S clients.

        Pooled features share the pool (no copy of the examples)."""
        if clients is None:
            return self
        X = self.X.select(clients) if isinstance(self.X, PooledRows) else self.X[clients]
        return ClientSplit(X, self.y[clients], self.counts[clients])

    def client(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Client ``i``'s real examples: ``(X_i (n_i, *feature_shape), y_i (n_i,))``;
        ``X_i`` is a torch sparse COO tensor when the data are sparse, a view of the pool
        when they are pooled."""
        n = int(self.counts[i])
        if isinstance(self.X, PooledRows):
            return self.X.client(i), self.y[i, :n]
        return self.X[i, :n], self.y[i, :n]

    def gather(self, index: torch.Tensor) -> torch.Tensor | SparseRows:
        """Examples ``index[s, j]`` of client s: a mini-batch of every client at once.

        Positions past a client's count read as zeros, in every layout (the padding of
        the dense tensor).

        Parameters
        ----------
        index : (S, b) int64 row positions within each client, in ``0 .. n_max - 1``.

        Returns
        -------
        (S, b, *feature_shape) dense tensor; for sparse (CSR) data a
        :class:`~fedsparse.data.sparse_rows.SparseRows` of shape (S, b, d), which the
        linear problems read directly (copying only the rows' non-zeros).
        """
        X = self.X
        if isinstance(X, PooledRows):
            return X.gather_rows(index)
        if isinstance(X, SparseRows):
            return X.gather_rows(index)
        S, n_max = X.shape[:2]
        if index.ndim != 2 or index.shape[0] != S:
            raise fail("index.shape", tuple(index.shape), f"must be ({S}, b)")
        # One index_select of whole contiguous rows: an element-wise gather of the same
        # rows costs several times more (as much as a linear model's gradient).
        rows = (_row_starts(S, n_max, X.device) + index).reshape(-1)
        flat = X.reshape(S * n_max, -1)
        return torch.index_select(flat, 0, rows).reshape(S, index.shape[1], *X.shape[2:])

    def dense_X(self) -> torch.Tensor:
        """The padded dense features (N, n_max, *feature_shape).

        The tensor itself for the padded layout; a new tensor (N x n_max rows of memory)
        for pooled and sparse data."""
        if isinstance(self.X, PooledRows):
            return self.X.dense()
        if isinstance(self.X, SparseRows):
            return self.X.to_dense()
        return self.X

    def padded(self, flatten: bool = False) -> ClientSplit:
        """This split in the padded layout (sparse data stay :class:`SparseRows`).

        ``flatten=True`` also reshapes the features to (N, n_max, d), d the product of
        the feature shape: the layout the linear problems read.
        """
        X = self.X
        if isinstance(X, PooledRows):
            X = X.dense()
        if flatten and not isinstance(X, SparseRows) and X.ndim != 3:
            X = X.reshape(X.shape[0], X.shape[1], -1)
        return self if X is self.X else replace(self, X=X)

    def iter_chunks(self, max_examples: int
                    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """The real examples in chunks of at most ``max_examples``, any layout.

        Examples come client after client, in row order (the order of ``y[mask]``).

        Yields
        ------
        clients : (m,) int64 position on the client axis of every example.
        X : (m, *feature_shape) dense features.
        y : (m,) targets.
        """
        max_examples = check_int("max_examples", max_examples, minimum=1)
        y = self.y[self.mask]
        if isinstance(self.X, PooledRows):
            chunks = self.X.iter_chunks(max_examples)
        else:
            chunks = self._padded_chunks(max_examples)
        offset = 0
        for owner, Xc in chunks:
            m = owner.shape[0]
            yield owner, Xc, y[offset:offset + m]
            offset += m

    def _padded_chunks(self, max_examples: int):
        X, device = self.X, self.counts.device
        N, n_max = X.shape[:2]
        owner = torch.repeat_interleave(torch.arange(N, device=device), self.counts)
        rows = ranges(torch.arange(N, device=device) * n_max, self.counts)
        for a in range(0, rows.shape[0], max_examples):
            b = min(a + max_examples, rows.shape[0])
            if isinstance(X, SparseRows):
                Xc = X._take_flat_rows(rows[a:b], (1, b - a, X.shape[2])).to_dense()[0]
            else:
                Xc = torch.index_select(X.reshape(N * n_max, -1), 0, rows[a:b])
                Xc = Xc.reshape(b - a, *X.shape[2:])
            yield owner[a:b], Xc

    def to(self, dtype: torch.dtype) -> ClientSplit:
        """The same split with ``X`` and ``y`` cast to ``dtype``."""
        return replace(self, X=self.X.to(dtype), y=self.y.to(dtype))

    def to_device(self, device) -> ClientSplit:
        """The same split with every tensor on ``device``.

        Raises
        ------
        ConfigError
            for sparse (CSR) features and a device other than the CPU: their products
            are CPU segment sums.
        """
        device = torch.device(device)
        X = self.X
        if isinstance(X, SparseRows):
            if device.type != "cpu":
                raise fail("device", str(device), "sparse (CSR) client features run on the "
                           "CPU only; densify them (from_arrays with dense arrays) to use "
                           "another device")
        elif isinstance(X, PooledRows):
            X = X.to_device(device)
        else:
            X = X.to(device)
        return ClientSplit(X, self.y.to(device), self.counts.to(device))


@dataclass(frozen=True)
class FederatedDataset:
    """Per-client training (and optional test) data with client weights.

    Attributes
    ----------
    train : ClientSplit, stacked training data of all N clients.
    test : ClientSplit or None.
    weights : (N,) float64 client weights p_i, summing to 1 (default n_i / sum n_j).
    ground_truth : (P,) tensor or None, the sparse model that generated the data.
    name : a short description used in reports.
    """

    train: ClientSplit
    weights: torch.Tensor
    test: ClientSplit | None = None
    ground_truth: torch.Tensor | None = None
    name: str = "custom"

    @property
    def num_clients(self) -> int:
        return self.train.num_clients

    @property
    def feature_shape(self) -> tuple[int, ...]:
        """Shape of one example's features: ``(d,)`` for vectors, ``(C, H, W)`` for images."""
        return self.train.feature_shape

    @property
    def dim(self) -> int:
        """Number of features d, the product of :attr:`feature_shape` (the input size of
        a linear model)."""
        return math.prod(self.feature_shape)

    @property
    def layout(self) -> str:
        """How the features are stored: "padded", "sparse" or "pooled"."""
        return self.train.layout

    @property
    def dtype(self) -> torch.dtype:
        return self.train.X.dtype

    @property
    def device(self) -> torch.device:
        return self.train.counts.device

    def to(self, dtype: torch.dtype) -> FederatedDataset:
        """The same data in another floating dtype (float64 for recovery experiments)."""
        gt = None if self.ground_truth is None else self.ground_truth.to(dtype)
        test = None if self.test is None else self.test.to(dtype)
        return replace(self, train=self.train.to(dtype), test=test, ground_truth=gt)

    def to_device(self, device) -> FederatedDataset:
        """The same data with every tensor (features, targets, counts, client weights,
        ground truth) on ``device``; see :meth:`ClientSplit.to_device`."""
        device = torch.device(device)
        gt = None if self.ground_truth is None else self.ground_truth.to(device)
        test = None if self.test is None else self.test.to_device(device)
        return replace(self, train=self.train.to_device(device), test=test,
                       weights=self.weights.to(device), ground_truth=gt)

    def padded(self, flatten: bool = False) -> FederatedDataset:
        """The same data in the padded layout (N, n_max, *feature_shape); itself when it
        already is (sparse data stay sparse).

        ``flatten=True`` also reshapes image features to (N, n_max, d): what linear
        problems read. Memory N x n_max rows per split.
        """
        train = self.train.padded(flatten)
        test = None if self.test is None else self.test.padded(flatten)
        if train is self.train and test is self.test:
            return self
        return replace(self, train=train, test=test)

    def split_labels(self) -> list[tuple[str, torch.Tensor]]:
        """``[("train", labels), ("test", labels)]``: the real labels of each split (no
        test entry without a test split), for label checks that name the split."""
        out = [("train", self.train.y[self.train.mask])]
        if self.test is not None:
            out.append(("test", self.test.y[self.test.mask]))
        return out

    def labels(self) -> torch.Tensor:
        """All real labels of the training and test splits, concatenated (for label-set
        checks, which must catch a bad test label before any training)."""
        return torch.cat([labels for _, labels in self.split_labels()])

    def __repr__(self) -> str:
        n = self.train.counts
        # Padded vector data keep the historical text (it is part of checkpoint
        # fingerprints); other layouts and image shapes say what they are.
        extra = ""
        if self.layout == "pooled" or len(self.feature_shape) != 1:
            extra = f", feature_shape={self.feature_shape}, layout={self.layout}"
        return (f"FederatedDataset({self.name!r}, clients={self.num_clients}, dim={self.dim}"
                f"{extra}, examples={int(n.sum())} (per client {int(n.min())}..{int(n.max())}), "
                f"test={'yes' if self.test is not None else 'no'}, "
                f"ground_truth={'yes' if self.ground_truth is not None else 'no'})")


def checked(data: FederatedDataset) -> FederatedDataset:
    """``data`` as a run reads it, after checking what :func:`~fedsparse.data.from_arrays`
    guarantees, for a :class:`FederatedDataset` built by hand.

    Checks: a float32 or float64 ``dtype``; ``weights`` a finite, positive (N,) tensor
    summing to 1 (within 1e-6; returned in float64, renormalised); for stacked splits,
    (N,) int64 ``counts`` from 1 to n_max, targets (N, n_max), and a test split with the
    same clients and feature shape. A client weight of 0 is refused: the weighted mean of
    a round in which only such clients deliver would be 0/0.

    Raises
    ------
    ConfigError naming the field, its value and what is allowed.
    """
    from .._validation import check_dtype

    check_dtype("data.dtype", data.dtype)
    N = data.num_clients
    w = data.weights
    if not isinstance(w, torch.Tensor) or w.shape != (N,) or not w.is_floating_point():
        raise fail("data.weights", _described(w), f"must be a floating ({N},) tensor, one "
                   "weight per client")
    w = w.to(torch.float64)
    if not torch.isfinite(w).all() or (w <= 0).any() or abs(float(w.sum()) - 1) > 1e-6:
        raise fail("data.weights", _described(w), "must be finite positive weights summing "
                   "to 1 (a weight of 0 would leave a round whose only deliveries carry "
                   "no weight undefined)")
    for kind, split in (("train", data.train), ("test", data.test)):
        if split is None or not isinstance(split, ClientSplit):
            continue  # a lazy split checks its clients as it reads them
        _check_split(f"data.{kind}", split, N, data.feature_shape)
    return data if w is data.weights else replace(data, weights=w / w.sum())


def _check_split(name: str, split: ClientSplit, N: int, feature_shape) -> None:
    counts, y = split.counts, split.y
    if split.num_clients != N or split.feature_shape != tuple(feature_shape):
        raise fail(f"{name}.X.shape", tuple(split.X.shape), f"must be ({N}, n_max, "
                   f"*{tuple(feature_shape)}): the training split's clients and features")
    n_max = int(split.X.shape[1])
    if not isinstance(counts, torch.Tensor) or counts.shape != (N,) \
            or counts.dtype != torch.int64:
        raise fail(f"{name}.counts", _described(counts), f"must be a ({N},) int64 tensor")
    if bool(((counts < 1) | (counts > n_max)).any()):
        raise fail(f"{name}.counts", _described(counts), f"must lie from 1 to n_max = {n_max} "
                   "(every client holds at least one example)")
    if not isinstance(y, torch.Tensor) or y.shape != (N, n_max) or y.dtype != split.X.dtype:
        raise fail(f"{name}.y", _described(y), f"must be a ({N}, {n_max}) tensor of the "
                   f"features' dtype {split.X.dtype}")


def _described(value) -> str:
    """A tensor in an error message: its shape, dtype and a few values."""
    if isinstance(value, torch.Tensor):
        more = "..." if value.numel() > 5 else ""
        return f"<{tuple(value.shape)} {value.dtype} tensor {value.flatten()[:5].tolist()}{more}>"
    return f"<{type(value).__name__}>"
