"""A short digest of a federated data set's contents, so that a checkpoint can refuse to
resume on other data (another seed, another file) than the run that wrote it.

An eager data set is hashed whole (features, targets, counts, weights, ground truth: a
fraction of a second for Fashion-MNIST's 60,000 images). A lazy one is never read whole:
an on-disk set contributes its per-client checksums (which cover every row), a generated
one its counts, weights and ground truth and the examples of its first, middle and last
clients, which any change of seed or generator argument changes.

The digest is computed afresh by every checkpointed run (once, before its first round;
never in the round loop): one read of the data, where training reads them every round
or epoch. It is deliberately not cached with the data set object: a cache
can only be keyed on something cheaper than the bytes, such as torch's version counters,
and a write through a NumPy view (``X.numpy()[i] = ...``, or into the array a tensor was
made from with ``torch.from_numpy``) bumps none of them, so a resume on changed data
would have been accepted and a new run's checkpoints would have named data it did not
train on.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from .dataset import ClientSplit, FederatedDataset
from .lazy import LazyFederatedDataset
from .pooled import PooledRows
from .sparse_rows import SparseRows

__all__ = ["data_digest", "tensors_digest", "update_digest"]


def _eager_tensors(data: FederatedDataset) -> list[torch.Tensor]:
    """Every tensor an eager data set's digest reads."""
    tensors = [data.weights]
    if data.ground_truth is not None:
        tensors.append(data.ground_truth)
    for split in (data.train, data.test):
        if isinstance(split, ClientSplit):
            tensors += [*_features(split.X), split.y, split.counts]
    return tensors


def data_digest(data: FederatedDataset) -> str:
    """A 32-hex-digit BLAKE2b digest of ``data``'s contents, computed afresh (see the module
    docstring)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{data.dtype} {tuple(data.feature_shape)} {data.num_clients}".encode())
    if not isinstance(data, LazyFederatedDataset):
        for tensor in _eager_tensors(data):
            update_digest(h, tensor)
        return h.hexdigest()
    update_digest(h, data.weights)
    if data.ground_truth is not None:
        update_digest(h, data.ground_truth)
    source = data.source
    for counts in source.counts:
        if counts is not None:
            update_digest(h, counts)
    identity = getattr(source.read, "identity", None)  # on disk: the checksums
    if identity is not None:
        h.update(identity.encode())
    else:
        N = source.num_clients
        for i in sorted({0, N // 2, N - 1}):
            for array in source.read(i):
                if array is not None:
                    update_digest(h, array)
    return h.hexdigest()


def _features(X) -> tuple[torch.Tensor, ...]:
    if isinstance(X, SparseRows):
        return X.indptr, X.col, X.val
    if isinstance(X, PooledRows):
        return X.pool, X.starts, X.counts
    return (X,)


def tensors_digest(tensors) -> str:
    """A short digest of ``(name, tensor)`` pairs: their names, dtypes, shapes and values
    (a network's frozen parameters and buffers, a dictionary's atoms)."""
    h = hashlib.blake2b(digest_size=8)
    for name, tensor in tensors:
        h.update(f"{name};".encode())
        update_digest(h, tensor)
    return h.hexdigest()


def update_digest(h, array) -> None:
    """Feed one array's dtype, shape and bytes to the hash ``h`` (no copy when it is
    contiguous on the CPU)."""
    if isinstance(array, torch.Tensor):
        t = array.detach().cpu().contiguous()
        try:
            array = t.numpy()
        except TypeError:  # a dtype NumPy lacks (bfloat16): its bytes, named as torch does
            h.update(f"{t.dtype} {tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
            return
    array = np.ascontiguousarray(array)
    h.update(f"{array.dtype} {array.shape}".encode())
    h.update(memoryview(array).cast("B"))
