"""The federated dataset: per-client splits stacked along a leading client axis."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from .._validation import ConfigError, check_choice, check_int, fail
from .pooled import PooledRows, ranges
from .sparse_rows import SparseRows, is_sparse_matrix


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
        rows = (torch.arange(S, device=X.device)[:, None] * n_max + index).reshape(-1)
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

    def labels(self) -> torch.Tensor:
        """All real labels of the training and test splits, concatenated (for label-set
        checks, which must catch a bad test label before any training)."""
        ys = [self.train.y[self.train.mask]]
        if self.test is not None:
            ys.append(self.test.y[self.test.mask])
        return torch.cat(ys)

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


def _as_tensor(name: str, a, dtype: torch.dtype) -> torch.Tensor:
    if is_sparse_matrix(a):
        raise fail(name, type(a).__name__,
                   "sparse matrices are not accepted by from_arrays yet; pass dense arrays")
    try:
        t = torch.as_tensor(np.asarray(a) if not isinstance(a, torch.Tensor) else a)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name} could not be read as a numeric array: {exc}") from None
    if not (t.is_floating_point() or t.dtype in (torch.int8, torch.int16, torch.int32,
                                                 torch.int64, torch.uint8, torch.bool)):
        raise fail(name, str(t.dtype), "must hold numbers")
    return t.to(dtype)


@dataclass
class _ReadSplit:
    """One split's arrays after validation, before they are stacked."""

    kind: str
    xs: list            # dense (n_i, *feature_shape) tensors, or SciPy CSR matrices
    ys: list            # (n_i,) tensors
    sparse: bool
    feature_shape: tuple[int, ...]

    @property
    def counts(self) -> torch.Tensor:
        return torch.tensor([x.shape[0] for x in self.xs], dtype=torch.int64)


def _read_split(kind: str, xs: Sequence, ys: Sequence, dtype: torch.dtype,
                feature_shape: tuple[int, ...] | None) -> _ReadSplit:
    """Validate and convert one split's per-client arrays (features against
    ``feature_shape`` of ``train_xs[0]``, None while reading the training split)."""
    if len(xs) != len(ys):
        raise ConfigError(f"{kind}: got {len(xs)} feature arrays but {len(ys)} target arrays; "
                          "need one of each per client")
    sparse = [is_sparse_matrix(x) for x in xs]
    if any(sparse) and not all(sparse):
        i = sparse.index(not sparse[0])
        raise fail(f"{kind}_xs[{i}]", type(xs[i]).__name__,
                   f"must be {'sparse' if sparse[0] else 'dense'} like {kind}_xs[0]: the "
                   "clients' features must be all SciPy sparse matrices or all dense arrays")
    tx, ty = [], []
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        if not sparse[i]:
            x = _as_tensor(f"{kind}_xs[{i}]", x, dtype)
        y = _as_tensor(f"{kind}_ys[{i}]", y, dtype)
        feature_shape = _check_client_shapes(kind, i, x, y, feature_shape)
        if not torch.isfinite(y).all() or (not sparse[i] and not torch.isfinite(x).all()):
            raise fail(f"{kind} data of client {i}", "NaN/inf", "must be finite")
        tx.append(x)
        ty.append(y)
    return _ReadSplit(kind, tx, ty, bool(sparse[0]), feature_shape)


def _check_client_shapes(kind: str, i: int, x, y: torch.Tensor,
                         feature_shape: tuple[int, ...] | None) -> tuple[int, ...]:
    """Validate client ``i``'s features (dense or sparse) against its targets and the
    feature shape of ``train_xs[0]`` (None for that client); return the feature shape."""
    shape = tuple(x.shape)
    if len(shape) < 2:
        raise fail(f"{kind}_xs[{i}].shape", shape, "must have at least 2 axes (examples, "
                   "*feature_shape), e.g. (n, d) or (n, C, H, W)")
    if y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise fail(f"{kind}_ys[{i}].shape", tuple(y.shape),
                   f"must be 1-D with {x.shape[0]} entries, one per row of {kind}_xs[{i}]")
    if x.shape[0] == 0:
        raise fail(f"{kind}_xs[{i}]", "(empty)", "every client needs at least one example")
    if feature_shape is None:
        return shape[1:]
    if shape[1:] != feature_shape:
        if len(shape) == 2 and len(feature_shape) == 1:
            raise fail(f"{kind}_xs[{i}].shape[1]", x.shape[1],
                       f"must equal the feature dimension {feature_shape[0]} of train_xs[0]")
        raise fail(f"{kind}_xs[{i}].shape[1:]", shape[1:],
                   f"must equal the feature shape {feature_shape} of train_xs[0]: every "
                   "client's examples must have the same shape")
    return feature_shape


def _padded_targets(ys: list, n_max: int, dtype: torch.dtype) -> torch.Tensor:
    Y = torch.zeros(len(ys), n_max, dtype=dtype)
    for i, y in enumerate(ys):
        Y[i, : y.shape[0]] = y
    return Y


def _build_split(split: _ReadSplit, pooled: bool, dtype: torch.dtype) -> ClientSplit:
    """Stack a validated split: SparseRows, PooledRows (``pooled``) or a padded tensor."""
    counts = split.counts
    n_max = int(counts.max())
    if split.sparse:
        X = SparseRows.from_scipy(split.xs, dtype=dtype, name=f"{split.kind}_xs")
    elif pooled:
        X = PooledRows.from_list(split.xs)
    else:
        X = torch.zeros(len(split.xs), n_max, *split.feature_shape, dtype=dtype)
        for i, x in enumerate(split.xs):
            X[i, : x.shape[0]] = x
    return ClientSplit(X, _padded_targets(split.ys, n_max, dtype), counts)


def _pooling_pays(splits: list[_ReadSplit]) -> bool:
    """The "auto" rule: pool image-like features, and vectors whose padding would more
    than double the memory (power-law client sizes)."""
    dense = [s for s in splits if not s.sparse]
    if not dense:
        return False
    if len(dense[0].feature_shape) != 1:
        return True
    padded = sum(len(s.xs) * int(s.counts.max()) for s in dense)
    real = sum(int(s.counts.sum()) for s in dense)
    return padded > 2 * real


def from_arrays(xs: Sequence, ys: Sequence, *, test_xs: Sequence | None = None,
                test_ys: Sequence | None = None, ground_truth=None, weights=None,
                dtype: torch.dtype = torch.float32, name: str = "custom",
                layout: str = "auto") -> FederatedDataset:
    """Build a :class:`FederatedDataset` from per-client arrays.

    Parameters
    ----------
    xs, ys : sequences of length N; ``xs[i]`` is (n_i, *feature_shape), e.g. (n_i, d)
        vectors or (n_i, C, H, W) images, the same feature shape for every client;
        ``ys[i]`` is (n_i,). The ``xs`` are all dense (arrays or tensors) or all SciPy
        sparse matrices (n_i, d); sparse features stay sparse (a
        :class:`~fedsparse.data.sparse_rows.SparseRows`, memory proportional to the
        non-zeros).
    test_xs, test_ys : optional per-client test arrays of the same feature shape.
    ground_truth : optional (P,) model that generated the data.
    weights : optional (N,) non-negative client weights; normalised to sum to 1.
        Default ``p_i = n_i / sum_j n_j``.
    dtype : floating torch dtype of the stored tensors.
    name : short description used in reports.
    layout : how dense features are stored.

        * ``"padded"``: one zero-padded tensor (N, n_max, *feature_shape) per split, the
          layout linear problems compute on (memory N x n_max rows);
        * ``"pooled"``: a :class:`~fedsparse.data.pooled.PooledRows`, every example
          once (memory n_total rows, whatever the client sizes);
        * ``"auto"`` (default): pooled when the features are not vectors (images) or
          when padding would more than double the memory (``N * n_max > 2 * n_total``
          over the dense splits, as with power-law client sizes); padded otherwise.

        Sparse features are always :class:`SparseRows` ("pooled" is refused for them).

    Returns
    -------
    FederatedDataset
    """
    check_choice("layout", layout, ("auto", "padded", "pooled"))
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise fail("dtype", dtype, "must be a floating torch dtype, e.g. torch.float32 or "
                   "torch.float64")
    if len(xs) == 0:
        raise fail("xs", "[]", "need at least one client")
    splits = [_read_split("train", xs, ys, dtype, None)]
    if (test_xs is None) != (test_ys is None):
        raise ConfigError("test_xs and test_ys must be given together")
    if test_xs is not None:
        if len(test_xs) != len(xs):
            raise fail("len(test_xs)", len(test_xs), f"must equal the number of clients {len(xs)}")
        splits.append(_read_split("test", test_xs, test_ys, dtype, splits[0].feature_shape))
    if layout == "pooled" and any(s.sparse for s in splits):
        raise fail("layout", layout, "sparse (SciPy) features are always stored as SparseRows "
                   "(memory proportional to the non-zeros); use 'auto' or 'padded'")
    pooled = layout == "pooled" or (layout == "auto" and _pooling_pays(splits))
    built = [_build_split(s, pooled, dtype) for s in splits]
    del splits  # the converted per-client copies; only the stacked tensors stay alive
    train, test = built[0], (built[1] if len(built) > 1 else None)
    if weights is None:
        w = train.counts.to(torch.float64)
    else:
        w = torch.as_tensor(np.asarray(weights, dtype=np.float64))
        if w.shape != (len(xs),) or not torch.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise fail("weights", weights, f"must be {len(xs)} finite non-negative numbers "
                       "with a positive sum")
    w = w / w.sum()
    gt = None
    if ground_truth is not None:
        gt = _as_tensor("ground_truth", ground_truth, dtype).reshape(-1)
        if not torch.isfinite(gt).all():
            raise fail("ground_truth", "NaN/inf", "must be finite")
    return FederatedDataset(train=train, weights=w, test=test, ground_truth=gt, name=name)
