"""Fuzz tests of every file reader: random bytes, mutated valid files, random structures.

Whatever a file holds, a reader either returns what its docstring promises (finite
values, the documented shapes and dtypes) or raises ``DataFormatError`` (or
``FileNotFoundError``) whose message names the file; a dictionary file raises
``ConfigError`` naming it. Nothing else may escape: no ``MemoryError``, no bare
``KeyError``/``TypeError``, no traceback from inside NumPy or pickle.

Each test draws ``FEDSPARSE_FUZZ_EXAMPLES`` inputs (default 100, a few seconds); set it
to a few thousand for a longer search.
"""

from __future__ import annotations

import bz2
import gzip
import json
import os
import pickle
import struct
from pathlib import Path

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from fedsparse._validation import ConfigError
from fedsparse.data.loaders import (
    MAX_LIBSVM_FEATURES,
    DataFormatError,
    load_cifar,
    load_idx,
    load_leaf,
    load_libsvm,
    read_idx,
)
from fedsparse.sparsity import as_dictionary

FUZZ = settings(max_examples=int(os.environ.get("FEDSPARSE_FUZZ_EXAMPLES", "100")),
                deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def expect_clean(read, path: Path, allowed=(DataFormatError, FileNotFoundError)):
    """``read()``'s result, or None when it raised one of ``allowed`` naming ``path``."""
    try:
        return read()
    except allowed as exc:
        assert path.name in str(exc), f"the error does not name the file: {exc}"
        return None


# ---------------------------------------------------------------------- mutations


@st.composite
def mutated(draw, valid: bytes) -> bytes:
    """``valid`` after 1-4 random edits: overwrite, insert, delete, duplicate, cut."""
    data = bytearray(valid)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["set", "insert", "delete", "dup", "cut"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "set" and data:
            data[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[pos:pos + draw(st.integers(1, 8))]
        elif op == "dup":
            data[pos:pos] = data[pos:pos + draw(st.integers(1, 16))]
        else:
            del data[pos:]
    return bytes(data)


def compressed(strategy):
    """The bytes of ``strategy``, plain or gzip/bzip2-compressed (then maybe mutated)."""
    @st.composite
    def build(draw):
        data = draw(strategy)
        how = draw(st.sampled_from([None, "gzip", "bz2"]))
        if how is None:
            return data
        packed = gzip.compress(data) if how == "gzip" else bz2.compress(data)
        return draw(st.one_of(st.just(packed), mutated(packed)))
    return build()


# ------------------------------------------------------------------------------ IDX


def idx_bytes(arr: np.ndarray) -> bytes:
    codes = {np.uint8: 0x08, np.int8: 0x09, np.int16: 0x0B, np.int32: 0x0C,
             np.float32: 0x0D, np.float64: 0x0E}
    head = bytes([0, 0, codes[arr.dtype.type], arr.ndim]) + struct.pack(f">{arr.ndim}I",
                                                                          *arr.shape)
    return head + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


_RNG = np.random.default_rng(0)
IDX_VALID = [
    idx_bytes(_RNG.integers(0, 256, (3, 4, 4), dtype=np.uint8)),
    idx_bytes(_RNG.integers(0, 10, 3).astype(np.uint8)),
    idx_bytes(_RNG.standard_normal((3, 5)).astype(np.float32)),
    idx_bytes(_RNG.standard_normal((2, 3)).astype(np.float64)),
    idx_bytes(np.arange(6, dtype=np.int32).reshape(3, 2)),
]
IDX_INPUTS = st.one_of(st.binary(max_size=200),
                       st.sampled_from(IDX_VALID).flatmap(mutated),
                       compressed(st.sampled_from(IDX_VALID)))


@FUZZ
@given(images=IDX_INPUTS, labels=IDX_INPUTS)
def test_fuzz_idx(workdir, images, labels):
    ip, lp = workdir / "images.idx", workdir / "labels.idx"
    ip.write_bytes(images)
    lp.write_bytes(labels)
    arr = expect_clean(lambda: read_idx(ip), ip)
    if arr is not None:
        assert isinstance(arr, np.ndarray) and arr.ndim >= 1
        assert arr.dtype.kind != "f" or np.isfinite(arr).all()
    for flatten in (True, False):
        try:
            out = load_idx(ip, lp, flatten=flatten)
        except (DataFormatError, FileNotFoundError) as exc:
            assert "images.idx" in str(exc) or "labels.idx" in str(exc), str(exc)
            continue
        X, y = out
        assert X.shape[0] == y.shape[0] >= 1 and X.size > 0
        assert X.dtype == np.float32 and np.isfinite(X).all()
        assert y.dtype == np.int64 and y.ndim == 1
        if flatten:
            assert X.ndim == 2


# --------------------------------------------------------------------------- LibSVM

SVM_VALID = [
    b"1 1:0.5 3:-2 # comment\n-1 qid:7 2:1e-3 4:4\n\n+1 4:7.25\n0.5\n",
    b"2 0:1 2:3\n3 1:4\n",
    b"0.25 10:1 20:2 30:3\n-1.5 5:0.5\n",
]
SVM_TEXT = st.text(alphabet="0123456789:.-+eE \t\n#qidnaf", max_size=120)
SVM_INPUTS = st.one_of(st.binary(max_size=200),
                       SVM_TEXT.map(str.encode),
                       st.sampled_from(SVM_VALID).flatmap(mutated),
                       compressed(st.sampled_from(SVM_VALID)))


@FUZZ
@given(data=SVM_INPUTS, zero_based=st.sampled_from(["auto", True, False]))
def test_fuzz_libsvm(workdir, data, zero_based):
    p = workdir / "data.svm"
    p.write_bytes(data)
    out = expect_clean(lambda: load_libsvm(p, zero_based=zero_based), p)
    if out is not None:
        X, y = out
        assert X.shape[0] == y.shape[0] >= 1
        assert 0 <= X.shape[1] <= MAX_LIBSVM_FEATURES
        assert np.isfinite(X.data).all() and np.isfinite(y).all()
        assert X.nnz == 0 or (X.indices.min() >= 0 and X.indices.max() < X.shape[1])


# ---------------------------------------------------------------------------- CIFAR


def _py2_pickle(obj) -> bytes:
    """Bytes written as Python 2 str, like the official batches."""
    import io

    class P(pickle._Pickler):
        dispatch = dict(pickle._Pickler.dispatch)

        def save_bytes(self, b):
            op = pickle.SHORT_BINSTRING + bytes([len(b)]) if len(b) < 256 else \
                pickle.BINSTRING + struct.pack("<i", len(b))
            self.write(op + b)
            self.memoize(b)

        dispatch[bytes] = save_bytes

    buf = io.BytesIO()
    P(buf, protocol=2).dump(obj)
    return buf.getvalue().replace(b"numpy._core.multiarray", b"numpy.core.multiarray")


_BATCH = {b"batch_label": b"testing batch", b"labels": [3, 7],
          b"data": _RNG.integers(0, 256, (2, 3072), dtype=np.uint8),
          b"filenames": [b"a.png", b"b.png"]}
CIFAR_VALID = [_py2_pickle(_BATCH)] + [
    pickle.dumps({k.decode(): v for k, v in _BATCH.items()}, protocol=k) for k in (2, 4, 5)]

# Random python structures: what a pickle could hold, with the keys a batch needs.
_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True), st.binary(max_size=8), st.text(max_size=4),
                    st.sampled_from([np.zeros((2, 3072), np.uint8), np.ones(3, np.float32),
                                     np.full((2, 3072), np.nan), np.zeros((1, 3072), np.int64),
                                     np.array([[1, 2]], dtype=object)]))
_VALUES = st.recursive(_LEAVES, lambda c: st.one_of(st.lists(c, max_size=4),
                                                    st.tuples(c, c)), max_leaves=10)
_STRUCTURES = st.dictionaries(st.sampled_from([b"data", b"labels", "data", "labels", b"x", 3]),
                              _VALUES, max_size=4)
CIFAR_INPUTS = st.one_of(
    st.binary(max_size=200),
    st.sampled_from(CIFAR_VALID).flatmap(mutated),
    st.tuples(_STRUCTURES, st.sampled_from([2, 4, 5])).map(
        lambda a: pickle.dumps(a[0], protocol=a[1])),
)


@FUZZ
@given(data=CIFAR_INPUTS)
def test_fuzz_cifar(workdir, data):
    d = workdir / "cifar-10-batches-py"
    d.mkdir(exist_ok=True)
    p = d / "test_batch"
    p.write_bytes(data)
    out = expect_clean(lambda: load_cifar(workdir, split="test"), p)
    if out is not None:
        X, y = out
        assert X.shape == (y.shape[0], 3072) and y.shape[0] >= 1
        assert X.dtype == np.float32 and 0 <= X.min() and X.max() <= 1
        assert y.dtype == np.int64 and 0 <= y.min() and y.max() <= 9


# ----------------------------------------------------------------------------- LEAF

_LEAF_DOC = {"users": ["f_a", "f_b"], "num_samples": [2, 1],
             "user_data": {"f_a": {"x": [[0.1, 0.2, 0.3], [0.0, 1.0, 0.5]], "y": [3, 1]},
                           "f_b": {"x": [[0.7, 0.8, 0.9]], "y": [2]}}}
_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(),
              st.text(max_size=4), st.sampled_from(["f_a", "f_b", "x", "y"])),
    lambda c: st.one_of(st.lists(c, max_size=4),
                        st.dictionaries(st.sampled_from(["users", "num_samples", "user_data",
                                                         "f_a", "x", "y"]), c, max_size=3)),
    max_leaves=12)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


@st.composite
def leaf_mutated_doc(draw) -> bytes:
    """The valid document with 1-3 of its nodes replaced by random JSON values."""
    doc = json.loads(json.dumps(_LEAF_DOC))
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(doc))
        path = draw(st.sampled_from(paths))
        value = draw(_JSON)
        if not path:
            doc = value
            continue
        node = doc
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
    return json.dumps(doc).encode()


LEAF_INPUTS = st.one_of(st.binary(max_size=200),
                        _JSON.map(lambda v: json.dumps(v).encode()),
                        leaf_mutated_doc(),
                        st.just(json.dumps(_LEAF_DOC).encode()).flatmap(mutated),
                        compressed(st.just(json.dumps(_LEAF_DOC).encode())))


@FUZZ
@given(data=LEAF_INPUTS)
def test_fuzz_leaf(workdir, data):
    p = workdir / "leaf.json"
    p.write_bytes(data)
    out = expect_clean(lambda: load_leaf(p), p)
    if out is not None:
        clients, users = out
        assert len(clients) == len(users) >= 1
        assert all(isinstance(u, str) for u in users)
        dims = {X.shape[1] for X, _ in clients}
        assert len(dims) == 1
        for X, y in clients:
            assert X.ndim == 2 and X.shape[0] == y.shape[0] >= 1 and X.dtype == np.float32
            assert np.isfinite(X).all() and y.ndim == 1
            assert y.dtype == np.int64 or (y.dtype == np.float64 and np.isfinite(y).all())


# -------------------------------------------------------------- dictionary (.npy)


def _npy(arr) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def _npz(**arrays) -> bytes:
    import io

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


NPY_VALID = [_npy(_RNG.standard_normal((4, 6))), _npy(np.eye(4, dtype=np.float32)),
             _npy(np.arange(24, dtype=">i4").reshape(4, 6)), _npz(a=np.ones((4, 6)))]
NPY_INPUTS = st.one_of(st.binary(max_size=200), st.sampled_from(NPY_VALID).flatmap(mutated))


@FUZZ
@given(data=NPY_INPUTS)
def test_fuzz_dictionary_file(workdir, data):
    p = workdir / "dictionary.npy"
    p.write_bytes(data)
    spec = {"kind": "file", "path": str(p)}
    D = expect_clean(lambda: as_dictionary(spec, dim=4), p, allowed=(ConfigError,))
    if D is not None:
        assert D.matrix.shape[0] == 4 and D.matrix.dtype.is_floating_point
        assert bool(D.matrix.isfinite().all()) and bool((D.norms > 0).all())
