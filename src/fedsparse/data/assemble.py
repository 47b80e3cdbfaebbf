"""From per-client arrays to a :class:`~fedsparse.data.dataset.FederatedDataset`:
:func:`from_arrays` checks every client's arrays, then stacks them padded or pooled."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .._validation import ConfigError, check_choice, check_dtype, fail
from .dataset import ClientSplit, FederatedDataset
from .pooled import PooledRows
from .sparse_rows import SparseRows, is_sparse_matrix

__all__ = ["from_arrays"]


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
    # the values only: a tensor that requires grad would chain every round's computation
    # (and the final model) to the caller's autograd graph
    return t.detach().to(dtype)


def _check_per_client(name: str, value) -> None:
    """Refuse what is not a sequence with one array per client. An iterator or generator
    has no length and would be used up by a first pass; a mapping or text would be read
    entry by entry as something else."""
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__len__") \
            or not hasattr(value, "__getitem__"):
        raise fail(name, type(value).__name__, "must be a sequence with one array per client "
                   "(a list, a tuple or an array of clients); for a generator or another "
                   "iterator, pass list(...)")
    meta = next((i for i, v in enumerate(value)
                 if isinstance(v, torch.Tensor) and v.is_meta), None) \
        if isinstance(value, list | tuple) else None
    if meta is not None:
        raise fail(f"{name}[{meta}]", "a tensor on the meta device", "must hold values (a "
                   "meta tensor has a shape only)")


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
        if 0 in shape[1:]:  # a model of 0 parameters: every metric would divide by 0
            raise fail(f"{kind}_xs[{i}].shape", shape, "has no features: every example "
                       "needs at least one (a LibSVM file with no index:value on any line "
                       "gives this)")
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

    Every array is copied: a later write into the caller's arrays (or tensors) does not
    change the data set.

    Parameters
    ----------
    xs, ys : sequences of length N (lists, tuples or arrays of clients; an iterator or
        generator is refused); ``xs[i]`` is (n_i, *feature_shape), e.g. (n_i, d)
        vectors or (n_i, C, H, W) images, the same feature shape for every client;
        ``ys[i]`` is (n_i,). The ``xs`` are all dense (arrays or tensors) or all SciPy
        sparse matrices (n_i, d); sparse features stay sparse (a
        :class:`~fedsparse.data.sparse_rows.SparseRows`, memory proportional to the
        non-zeros).
    test_xs, test_ys : optional per-client test arrays of the same feature shape.
    ground_truth : optional (P,) model that generated the data.
    weights : optional (N,) positive client weights; normalised to sum to 1.
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
    check_dtype("dtype", dtype)
    for arg, value in (("xs", xs), ("ys", ys), ("test_xs", test_xs), ("test_ys", test_ys)):
        if value is not None or arg in ("xs", "ys"):
            _check_per_client(arg, value)
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
        try:
            w = torch.as_tensor(np.asarray(weights, dtype=np.float64))
        except (TypeError, ValueError):  # text, a generator, ragged lists
            w = None
        if w is None or w.shape != (len(xs),) or not torch.isfinite(w).all() or (w <= 0).any():
            shown = weights if hasattr(weights, "__len__") else type(weights).__name__
            raise fail("weights", shown, f"must be {len(xs)} finite positive numbers (a "
                       "weight of 0 would leave a round whose only deliveries carry no "
                       "weight undefined)")
    w = w / w.sum()
    gt = None
    if ground_truth is not None:
        # a copy, as the features and targets are (stacked): an array of the data set's
        # dtype would otherwise stay shared, and a later write into the caller's array
        # would change the metrics (rel_error, support) and data digest of later runs
        gt = _as_tensor("ground_truth", ground_truth, dtype).reshape(-1).clone()
        if not torch.isfinite(gt).all():
            raise fail("ground_truth", "NaN/inf", "must be finite")
    return FederatedDataset(train=train, weights=w, test=test, ground_truth=gt, name=name)
