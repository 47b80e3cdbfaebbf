"""From a partition to a federated data set: each client's rows, split into train and
test."""

from __future__ import annotations

from numbers import Real

import numpy as np

from ..._validation import ConfigError, fail
from .. import federated
from ..sparse_rows import is_sparse_matrix

__all__ = ["from_partitions"]


def from_partitions(X, y, parts, *, test_fraction=0.2, seed=0, dtype=None, name="partitioned",
                    test=None):
    """Build a :class:`~fedsparse.data.federated.FederatedDataset` from a partition.

    Each client's indices are shuffled with the seed and split: ``round(test_fraction
    * n_i)`` test examples, clipped to ``1 .. n_i - 1`` so that every client keeps at
    least one training and one test example (``test_fraction=0`` gives no test split).
    A SciPy sparse ``X`` stays sparse: each client receives its CSR row slice.

    Parameters
    ----------
    X : ndarray, torch.Tensor or scipy.sparse matrix, (n, d) or (n, *feature_shape)
        Dense examples keep their shape: images (n, C, H, W) reach ``from_arrays`` as
        per-client (n_i, C, H, W) arrays.
    y : array-like, (n,)
    parts : list of 1-D int arrays (e.g. from a partitioner)
        Disjoint: an example in two parts, or twice in one, is refused, since it could be
        in a training split and a test split at once.
    test_fraction : float in [0, 1), default 0.2
    seed : int or None
    dtype : torch.dtype, optional
        Passed on to ``from_arrays`` (its default when None).
    name : str
        Data set name used in reports.
    test : (X_test, y_test, test_parts), optional
        A test split of its own instead of a held-out share (``test_fraction`` must then
        be 0): client i's test examples are ``X_test[test_parts[i]]``, e.g. an official
        test split dealt by label (:func:`.official_test.deal_test_split`).

    Returns
    -------
    FederatedDataset
    """
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, Real) \
            or not 0 <= test_fraction < 1:
        raise ConfigError(f"test_fraction={test_fraction!r} is invalid: must be in [0, 1)")
    if len(parts) == 0:
        raise ConfigError("parts=[] is invalid: need at least one client")
    sparse = is_sparse_matrix(X)
    if sparse:
        X = X.tocsr()
    elif not hasattr(X, "detach"):
        X = np.asarray(X)
    if hasattr(y, "detach"):
        y = y.detach().cpu().numpy()
    y = np.asarray(y)
    n = X.shape[0]
    if y.shape != (n,):
        raise ConfigError(f"y has shape {y.shape}; expected ({n},), one target per row of X")
    rng = np.random.default_rng(seed)

    def rows(idx):
        if sparse:
            return X[idx]
        if hasattr(X, "detach"):
            import torch

            return X[torch.as_tensor(idx)]
        return X[idx]

    given_test = test  # (the loop below names each client's held-out rows ``test``)
    xs, ys, txs, tys = [], [], [], []
    owner = np.full(n, -1, dtype=np.int64)  # the part that holds each example, -1 none
    for i, p in enumerate(parts):
        raw = p.detach().cpu().numpy() if hasattr(p, "detach") else np.asarray(p)
        if raw.size and raw.dtype.kind not in "iu":  # a bool mask or floats would be cast
            raise fail(f"parts[{i}]", f"<{raw.dtype} array>", "must hold integer example "
                       "indices (for a boolean mask m, pass numpy.flatnonzero(m))")
        p = raw.astype(np.int64).reshape(-1)
        if p.size and (p.min() < 0 or p.max() >= n):
            raise ConfigError(f"parts[{i}] holds indices outside 0..{n - 1}")
        # An example listed twice could land in one client's training split and in a
        # test split (its own or another client's): the test accuracy would be measured
        # on examples trained on, without a word.
        uniq, seen = np.unique(p, return_counts=True)
        if (seen > 1).any():
            raise fail(f"parts[{i}]", f"<{p.size} indices>", f"lists example "
                       f"{int(uniq[np.argmax(seen > 1)])} more than once; every example "
                       "may be in one part, once")
        taken = owner[uniq] >= 0
        if taken.any():
            j = int(uniq[np.argmax(taken)])
            raise fail(f"parts[{i}]", f"<{p.size} indices>", f"holds example {j}, which "
                       f"parts[{int(owner[j])}] holds too; no example may be given to two "
                       "clients (its training copy would be another client's test example)")
        owner[uniq] = i
        need = 2 if test_fraction > 0 else 1
        if p.size < need:
            raise ConfigError(f"parts[{i}] has {p.size} examples; each client needs at least "
                             f"{need} ({'one train and one test' if need == 2 else 'one'})")
        p = rng.permutation(p)
        n_test = 0
        if test_fraction > 0:
            n_test = int(min(max(round(test_fraction * p.size), 1), p.size - 1))
        train, test = p[n_test:], p[:n_test]
        xs.append(rows(train))
        ys.append(y[train])
        if n_test:
            txs.append(rows(test))
            tys.append(y[test])
    kwargs = {} if dtype is None else {"dtype": dtype}
    if given_test is not None:
        if test_fraction > 0:
            raise fail("test_fraction", test_fraction, "must be 0 with a test split of its "
                       "own (test=...): its examples are not held out of the parts")
        X_test, y_test, test_parts = given_test
        if len(test_parts) != len(parts):
            raise fail("test", f"<{len(test_parts)} test parts>", f"needs one per part "
                       f"({len(parts)})")
        every = np.concatenate([np.asarray(t, dtype=np.int64).reshape(-1)
                                for t in test_parts])
        if np.unique(every).size != every.size:
            raise fail("test", "<test parts>", "must be disjoint: a test example given to "
                       "two clients would be counted twice")
        txs = [X_test[np.asarray(t, dtype=np.int64)] for t in test_parts]
        tys = [np.asarray(y_test)[np.asarray(t, dtype=np.int64)] for t in test_parts]
    if test_fraction > 0 or given_test is not None:
        kwargs.update(test_xs=txs, test_ys=tys)
    # through the module at call time, so that a replaced federated.from_arrays is used
    return federated.from_arrays(xs, ys, name=name, **kwargs)
