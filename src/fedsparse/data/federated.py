"""The federated dataset: per-client splits stacked along a leading client axis."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from .._validation import ConfigError, fail
from .sparse_rows import SparseRows, is_sparse_matrix


@dataclass(frozen=True)
class ClientSplit:
    """One split (train or test) of every client, zero-padded to a common length.

    Attributes
    ----------
    X : (N, n_max, d) features; rows past ``counts[i]`` are zero padding. For sparse
        (CSR) client data a :class:`~fedsparse.data.sparse_rows.SparseRows` of that
        shape, which keeps only the non-zeros.
    y : (N, n_max) targets (class labels stored as floats holding integers).
    counts : (N,) int64 number of real examples per client.
    """

    X: torch.Tensor
    y: torch.Tensor
    counts: torch.Tensor

    @property
    def num_clients(self) -> int:
        return self.X.shape[0]

    @property
    def mask(self) -> torch.Tensor:
        """(N, n_max) bool, True on real examples."""
        return torch.arange(self.X.shape[1]) < self.counts[:, None]

    def mean_weights(self) -> torch.Tensor:
        """(N, n_max) example weights 1/n_i on real examples, 0 on padding."""
        return self.mask.to(self.X.dtype) / self.counts.clamp(min=1)[:, None].to(self.X.dtype)

    def select(self, clients: torch.Tensor | None) -> ClientSplit:
        """The (S,) clients ``clients`` (all when None) as a split of S clients."""
        if clients is None:
            return self
        return ClientSplit(self.X[clients], self.y[clients], self.counts[clients])

    def client(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Client ``i``'s real examples: ``(X_i (n_i, d), y_i (n_i,))``; ``X_i`` is a torch
        sparse COO tensor when the data are sparse."""
        n = int(self.counts[i])
        return self.X[i, :n], self.y[i, :n]

    def to(self, dtype: torch.dtype) -> ClientSplit:
        """The same split with ``X`` and ``y`` cast to ``dtype``."""
        return replace(self, X=self.X.to(dtype), y=self.y.to(dtype))


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
    def dim(self) -> int:
        """Feature dimension d."""
        return self.train.X.shape[-1]

    @property
    def dtype(self) -> torch.dtype:
        return self.train.X.dtype

    def to(self, dtype: torch.dtype) -> FederatedDataset:
        """The same data in another floating dtype (float64 for recovery experiments)."""
        gt = None if self.ground_truth is None else self.ground_truth.to(dtype)
        test = None if self.test is None else self.test.to(dtype)
        return replace(self, train=self.train.to(dtype), test=test, ground_truth=gt)

    def labels(self) -> torch.Tensor:
        """All real training labels, concatenated (for label-set checks)."""
        return self.train.y[self.train.mask]

    def __repr__(self) -> str:
        n = self.train.counts
        return (f"FederatedDataset({self.name!r}, clients={self.num_clients}, dim={self.dim}, "
                f"examples={int(n.sum())} (per client {int(n.min())}..{int(n.max())}), "
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


def _stack_split(kind: str, xs: Sequence, ys: Sequence, dtype: torch.dtype,
                 dim: int | None) -> ClientSplit:
    if len(xs) != len(ys):
        raise ConfigError(f"{kind}: got {len(xs)} feature arrays but {len(ys)} target arrays; "
                          "need one of each per client")
    sparse = [is_sparse_matrix(x) for x in xs]
    if any(sparse):
        if not all(sparse):
            i = sparse.index(not sparse[0])
            raise fail(f"{kind}_xs[{i}]", type(xs[i]).__name__,
                       f"must be {'sparse' if sparse[0] else 'dense'} like {kind}_xs[0]: the "
                       "clients' features must be all SciPy sparse matrices or all dense arrays")
        return _stack_sparse_split(kind, xs, ys, dtype, dim)
    tx, ty = [], []
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        x = _as_tensor(f"{kind}_xs[{i}]", x, dtype)
        y = _as_tensor(f"{kind}_ys[{i}]", y, dtype)
        dim = _check_client_shapes(kind, i, x, y, dim)
        if not (torch.isfinite(x).all() and torch.isfinite(y).all()):
            raise fail(f"{kind} data of client {i}", "NaN/inf", "must be finite")
        tx.append(x)
        ty.append(y)
    counts = torch.tensor([x.shape[0] for x in tx], dtype=torch.int64)
    n_max = int(counts.max())
    X = torch.zeros(len(tx), n_max, dim, dtype=dtype)
    Y = torch.zeros(len(tx), n_max, dtype=dtype)
    for i, (x, y) in enumerate(zip(tx, ty, strict=True)):
        X[i, : x.shape[0]] = x
        Y[i, : y.shape[0]] = y
    return ClientSplit(X, Y, counts)


def _check_client_shapes(kind: str, i: int, x, y: torch.Tensor, dim: int | None) -> int:
    """Validate client ``i``'s features (dense or sparse) against its targets and the
    feature dimension ``dim`` of client 0 (None for client 0); return the dimension."""
    if len(x.shape) != 2:
        raise fail(f"{kind}_xs[{i}].shape", tuple(x.shape), "must be 2-D (examples, features)")
    if y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise fail(f"{kind}_ys[{i}].shape", tuple(y.shape),
                   f"must be 1-D with {x.shape[0]} entries, one per row of {kind}_xs[{i}]")
    if x.shape[0] == 0:
        raise fail(f"{kind}_xs[{i}]", "(empty)", "every client needs at least one example")
    dim = x.shape[1] if dim is None else dim
    if x.shape[1] != dim:
        raise fail(f"{kind}_xs[{i}].shape[1]", x.shape[1],
                   f"must equal the feature dimension {dim} of client 0")
    return dim


def _stack_sparse_split(kind: str, xs: Sequence, ys: Sequence, dtype: torch.dtype,
                        dim: int | None) -> ClientSplit:
    """Per-client SciPy sparse matrices -> a ClientSplit whose X is :class:`SparseRows`."""
    ty = []
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        y = _as_tensor(f"{kind}_ys[{i}]", y, dtype)
        dim = _check_client_shapes(kind, i, x, y, dim)
        if not torch.isfinite(y).all():
            raise fail(f"{kind} targets of client {i}", "NaN/inf", "must be finite")
        ty.append(y)
    X = SparseRows.from_scipy(xs, dtype=dtype, name=f"{kind}_xs")
    counts = torch.tensor([x.shape[0] for x in xs], dtype=torch.int64)
    Y = torch.zeros(len(ty), X.shape[1], dtype=dtype)
    for i, y in enumerate(ty):
        Y[i, : y.shape[0]] = y
    return ClientSplit(X, Y, counts)


def from_arrays(xs: Sequence, ys: Sequence, *, test_xs: Sequence | None = None,
                test_ys: Sequence | None = None, ground_truth=None, weights=None,
                dtype: torch.dtype = torch.float32, name: str = "custom") -> FederatedDataset:
    """Build a :class:`FederatedDataset` from per-client arrays.

    Parameters
    ----------
    xs, ys : sequences of length N; ``xs[i]`` is (n_i, d), ``ys[i]`` is (n_i,). The
        ``xs`` are all dense (arrays or tensors) or all SciPy sparse matrices; sparse
        features stay sparse (a :class:`~fedsparse.data.sparse_rows.SparseRows`, memory
        proportional to the non-zeros).
    test_xs, test_ys : optional per-client test arrays of the same layout.
    ground_truth : optional (P,) model that generated the data.
    weights : optional (N,) non-negative client weights; normalised to sum to 1.
        Default ``p_i = n_i / sum_j n_j``.
    dtype : floating dtype of the stored tensors.
    """
    if len(xs) == 0:
        raise fail("xs", "[]", "need at least one client")
    train = _stack_split("train", xs, ys, dtype, None)
    test = None
    if (test_xs is None) != (test_ys is None):
        raise ConfigError("test_xs and test_ys must be given together")
    if test_xs is not None:
        if len(test_xs) != len(xs):
            raise fail("len(test_xs)", len(test_xs), f"must equal the number of clients {len(xs)}")
        test = _stack_split("test", test_xs, test_ys, dtype, train.X.shape[-1])
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
