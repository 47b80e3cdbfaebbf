"""Every file reader against hostile files: fuzzed inputs and a hand-made battery.

The fuzz tests draw random bytes, mutated valid files and random structures: whatever a
file holds, a reader either returns what its docstring promises (finite values, the
documented shapes and dtypes) or raises ``DataFormatError`` (or ``FileNotFoundError``)
whose message names the file; a dictionary file raises ``ConfigError`` naming it.
Nothing else may escape: no ``MemoryError``, no bare ``KeyError``/``TypeError``, no
traceback from inside NumPy or pickle. Each draws ``FEDSPARSE_FUZZ_EXAMPLES`` inputs
(default 100, a few seconds); set it to a few thousand for a longer search.

The battery (the end of this file) holds what a fuzzer would not find: lying headers,
decompression bombs, memo-shared pickle structures, code-execution payloads, labels
that are not classes. Its files are read in one worker process whose address space is
capped and whose run time is bounded, so a memory bomb or a hang fails its case fast
instead of taking the machine.
"""

from __future__ import annotations

import bz2
import gzip
import json
import os
import pickle
import re
import struct
import sys
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


# ============================================================== the hostile battery

#: Address space the worker may take beyond what its imports took.
CAP_BYTES = 1 << 30
#: Wall-clock bound for the whole battery (each case takes milliseconds when refused).
BATTERY_TIMEOUT_S = 240

_BOMB_MB = 2048  # the decompressed size of every bomb: twice the cap


def _bomb(kind: str) -> bytes:
    """2 GiB of zero bytes, as concatenated gzip/bzip2/xz members of 1 MiB each (a few
    KB to 2 MB on disk; every reader here accepts multi-member files)."""
    zeros = b"\0" * (1 << 20)
    member = {"gzip": lambda: gzip.compress(zeros, 9), "bz2": lambda: bz2.compress(zeros, 9),
              "xz": lambda: __import__("lzma").compress(zeros)}[kind]()
    return member * _BOMB_MB


def _packed(kind: str, data: bytes) -> bytes:
    return {"gzip": gzip.compress, "bz2": bz2.compress,
            "xz": lambda b: __import__("lzma").compress(b)}[kind](data)


def _idx_head(code: int, *dims: int) -> bytes:
    return bytes([0, 0, code, len(dims)]) + struct.pack(f">{len(dims)}I", *dims)


def _shared_labels(levels: int, width: int = 16) -> list:
    """A label list of ``width ** (levels + 1)`` entries that pickles to a few KB: every
    level repeats one list (the pickle memo stores it once)."""
    labels = [1] * width
    for _ in range(levels):
        labels = [labels] * width
    return labels


def _shared_tuple_ops(levels: int, width: int = 16) -> bytes:
    """The pickle opcodes (no PROTO, no STOP) of a tuple nested as :func:`_shared_labels`:
    hashable, so it can be a dict key or a set member, and hashing it visits
    ``width ** levels`` tuples. (Spliced in by hand: building that dict here would hash
    it too.)"""
    value = (1,) * width
    for _ in range(levels):
        value = (value,) * width
    return pickle.dumps(value, protocol=2)[2:-1]


def _deep_list_pickle(depth: int) -> bytes:
    """{'data': <ndarray>, 'labels': [[[...]]]} nested ``depth`` deep, written opcode by
    opcode (the pickler itself would recurse)."""
    pix = pickle.dumps(np.zeros((2, 3072), np.uint8), protocol=2)[2:-1]  # no PROTO, STOP
    labels = b"]" * depth + b"a" * (depth - 1)  # EMPTY_LIST x depth, APPEND x depth-1
    return (b"\x80\x02}(X\x04\x00\x00\x00data" + pix + b"X\x06\x00\x00\x00labels" + labels
            + b"u.")


class _Calls:
    """A pickle that calls ``func(*args)`` when loaded."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return (self.func, self.args)


def _leaf(x, y, **extra) -> bytes:
    return json.dumps({"users": ["w"], "user_data": {"w": {"x": x, "y": y}}, **extra}).encode()


_PIX = np.zeros((2, 3072), np.uint8)
_GOOD_IDX = _idx_head(0x08, 3, 2, 2) + bytes(12)

# (case id, file name, file bytes, reader, keyword arguments, what the message must say)
# The reader gets the file's path (CIFAR: the directory above cifar-10-batches-py/).
HOSTILE_FILES = [
    # ---- IDX, plain
    ("idx-empty", "a.idx", b"", "read_idx", {}, "0 bytes long"),
    ("idx-bad-magic", "a.idx", b"\x01\x02\x08\x01" + bytes(8), "read_idx", {}, "magic bytes"),
    ("idx-type-code", "a.idx", b"\x00\x00\x07\x01" + bytes(8), "read_idx", {}, "type code 0x07"),
    ("idx-no-dims", "a.idx", _idx_head(0x08), "read_idx", {}, "declares 0 dimensions"),
    ("idx-255-dims", "a.idx", _idx_head(0x08, *[1] * 255) + b"a", "read_idx", {},
     "declares 255 dimensions; expected 1 to 32"),
    ("idx-header-cut", "a.idx", _idx_head(0x08, 3, 4, 4)[:9], "read_idx", {},
     "truncated: its header declares 3 dimensions"),
    ("idx-data-cut", "a.idx", _GOOD_IDX[:-3], "read_idx", {}, r"truncated.*\(3, 2, 2\)"),
    ("idx-trailing-data", "a.idx", _GOOD_IDX + b"junk", "read_idx", {},
     "longer than its header says"),
    ("idx-header-declares-2^96-bytes", "a.idx", _idx_head(0x08, *[2**32 - 1] * 3) + bytes(16),
     "read_idx", {}, "truncated.*79228162458924105385300197375"),
    ("idx-header-declares-16GiB-float", "a.idx", _idx_head(0x0E, 2**31, 1) + bytes(64),
     "read_idx", {}, "truncated"),
    ("idx-nan", "a.idx", _idx_head(0x0D, 2) + struct.pack(">2f", 1.0, float("nan")),
     "read_idx", {}, "NaN or infinite value"),
    # ---- IDX, compressed: bombs, lying headers, cut streams
    ("idx-gz-trailing-bomb", "a.idx.gz", _packed("gzip", _GOOD_IDX) + _bomb("gzip"), "read_idx",
     {}, "longer than its header says"),
    ("idx-bz2-trailing-bomb", "a.idx.bz2", _packed("bz2", _GOOD_IDX) + _bomb("bz2"), "read_idx",
     {}, "longer than its header says"),
    ("idx-xz-trailing-bomb", "a.idx.xz", _packed("xz", _GOOD_IDX) + _bomb("xz"), "read_idx",
     {}, "longer than its header says"),
    ("idx-gz-header-declares-4GiB", "a.idx.gz",
     _packed("gzip", _idx_head(0x08, 65536, 65536)) + _bomb("gzip"), "read_idx", {},
     "truncated"),
    ("idx-gz-header-declares-64MiB-holds-12B", "a.idx.gz",
     _packed("gzip", _idx_head(0x08, 1 << 26) + bytes(12)), "read_idx", {}, "truncated"),
    ("idx-bz2-header-declares-4GiB-holds-2GiB", "a.idx.bz2",
     _packed("bz2", _idx_head(0x08, 65536, 65536)) + _bomb("bz2"), "read_idx", {},
     "truncated|more than"),
    ("idx-gz-cut-stream", "a.idx.gz", _packed("gzip", _GOOD_IDX)[:-12], "read_idx", {},
     "could not be decompressed"),
    ("idx-gz-garbage-after-stream", "a.idx.gz", _packed("gzip", _GOOD_IDX) + b"\x00junk",
     "read_idx", {}, "could not be decompressed|longer than"),
    ("idx-gz-of-gz-bomb", "a.idx.gz", _packed("gzip", _packed("gzip", _GOOD_IDX)
                                               + _bomb("gzip")[:4_000_000]),
     "read_idx", {}, "magic bytes"),
    ("idx-float-labels", "l.idx", _idx_head(0x0D, 3) + struct.pack(">3f", 0, 1.5, 2),
     "load_idx", {"images": "img.idx"}, "label 1.5 at index 1"),
    ("idx-negative-label", "l.idx", _idx_head(0x0C, 3) + struct.pack(">3i", 0, -1, 2),
     "load_idx", {"images": "img.idx"}, "label -1 at index 1 is not a class label"),
    # ---- LibSVM
    ("svm-empty", "d.svm", b"", "load_libsvm", {}, "holds no example"),
    ("svm-letter-index", "d.svm", b"1 a:2\n", "load_libsvm", {}, "line 1: bad token 'a:2'"),
    ("svm-negative-index", "d.svm", b"1 1:1\n2 -3:2\n", "load_libsvm", {},
     "line 2: bad token '-3:2'"),
    ("svm-float-index", "d.svm", b"1 1.5:2\n", "load_libsvm", {}, "bad token '1.5:2'"),
    # Python reads 1_0 as 10; the libsvm tools (C's strtod) do not
    ("svm-underscore-value", "d.svm", b"1 1:1\n1 10:2_5\n", "load_libsvm", {},
     "line 2: bad token '10:2_5'"),
    ("svm-underscore-target", "d.svm", b"1_0 1:2\n", "load_libsvm", {},
     "line 1: target '1_0' is not a number"),
    ("svm-nan-value", "d.svm", b"1 1:1\n1 2:nan\n", "load_libsvm", {},
     "line 2: NaN or infinite value"),
    ("svm-inf-target", "d.svm", b"inf 1:2\n", "load_libsvm", {}, "line 1: NaN or infinite "
                                                                "target"),
    ("svm-overflowing-value", "d.svm", b"1 1:1e400\n", "load_libsvm", {},
     "NaN or infinite value"),
    ("svm-index-beyond-int32", "d.svm", b"1 1:1\n1 99999999999999:1\n", "load_libsvm", {},
     "99999999999999"),
    ("svm-outlier-index", "d.svm", b"1 1:1\n1 2:1\n1 100000000:1\n", "load_libsvm", {},
     "line 3: feature index 100000000 is far beyond"),
    ("svm-index-beyond-n_features", "d.svm", b"1 5:1\n", "load_libsvm", {"n_features": 3},
     "n_features=3"),
    ("svm-binary", "d.svm", bytes(range(1, 256)) * 4, "load_libsvm", {}, "line 1"),
    ("svm-gz-bomb", "d.svm.gz", _bomb("gzip"), "load_libsvm", {}, "NUL byte"),
    ("svm-gz-text-then-bomb", "d.svm.gz", _packed("gzip", b"1 1:2\n") + _bomb("gzip"),
     "load_libsvm", {}, "NUL byte"),
    # ---- CIFAR pickles
    ("cifar-memo-shared-labels-6KB", "test_batch",
     pickle.dumps({b"data": _PIX, b"labels": _shared_labels(6)}, protocol=2), "load_cifar",
     {}, "'labels' holds a list at index 0; expected integer labels 0..9"),
    ("cifar-memo-shared-labels-deeper", "test_batch",
     pickle.dumps({b"data": _PIX, b"labels": _shared_labels(7)}, protocol=2), "load_cifar",
     {}, "'labels' holds a list at index 0"),
    ("cifar-memo-shared-data", "test_batch",
     pickle.dumps({b"data": _shared_labels(7), b"labels": [0, 1]}, protocol=2), "load_cifar",
     {}, "'data' has shape list"),
    ("cifar-labels-nested-1e5-deep", "test_batch", _deep_list_pickle(10**5), "load_cifar", {},
     "'labels' holds a list at index 0"),
    # hashing a memo-shared nested tuple (a dict key, a set member) visits it 16^7 times
    ("cifar-memo-shared-tuple-as-key", "test_batch",
     b"\x80\x02}(" + _shared_tuple_ops(7) + b"K\x00u.", "load_cifar", {},
     "a dict key of type tuple"),
    ("cifar-memo-shared-tuple-in-set", "test_batch",
     b"\x80\x04\x8f(" + _shared_tuple_ops(7) + b"\x90.", "load_cifar", {},
     "a set member of type tuple"),
    ("cifar-os-system", "test_batch",
     pickle.dumps({"data": _Calls(os.system, "touch pwned"), "labels": []}, protocol=2),
     "load_cifar", {}, r"refusing to load global (posix|os|nt)\.system"),
    ("cifar-builtins-eval", "test_batch",
     pickle.dumps({"data": _Calls(eval, "1+1"), "labels": []}, protocol=4), "load_cifar", {},
     "refusing to load global builtins.eval"),
    ("cifar-builtins-exec-protocol-0", "test_batch",
     pickle.dumps({"data": _Calls(exec, "x=1"), "labels": []}, protocol=0), "load_cifar", {},
     r"refusing to load global (builtins|__builtin__)\.exec"),
    ("cifar-getattr-chain", "test_batch",
     pickle.dumps({"data": _Calls(getattr, "x", "upper"), "labels": []}, protocol=2),
     "load_cifar", {}, r"refusing to load global (builtins|__builtin__)\.getattr"),
    ("cifar-reconstruct-1e12", "test_batch",
     b"\x80\x02cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n\x8a\x08"
     + struct.pack("<q", 10**12) + b"\x85C\x01b\x87R.", "load_cifar", {},
     "would need 1000000000000 bytes"),
    ("cifar-setstate-lying-shape", "test_batch",
     b"\x80\x02}(U\x04datacnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85"
     b"C\x01b\x87R(K\x01\x8a\x06" + (10**12).to_bytes(6, "little")
     + b"\x85cnumpy\ndtype\nU\x02u1\x85R\x89C\x00tbU\x06labels]u.", "load_cifar", {},
     "not a readable python pickle|'data' has shape"),
    ("cifar-labels-floats", "test_batch", pickle.dumps({b"data": _PIX, b"labels": [0, 1.5]}),
     "load_cifar", {}, "'labels' holds float 1.5 at index 1"),
    ("cifar-labels-bools", "test_batch",
     pickle.dumps({b"data": _PIX, b"labels": [True, False]}), "load_cifar", {},
     "'labels' holds bool True at index 0"),
    ("cifar-labels-huge-int", "test_batch",
     pickle.dumps({b"data": _PIX, b"labels": [0, 2**70]}), "load_cifar", {},
     "label 1180591620717411303424 at index 1; expected 0..9"),
    # Python refuses to print an int of more than 4300 digits
    ("cifar-labels-int-of-80000-bits", "test_batch",
     pickle.dumps({b"data": _PIX, b"labels": [0, 2**80000]}), "load_cifar", {},
     "holds label <an int of 80001 bits> at index 1"),
    ("cifar-key-int-of-80000-bits", "test_batch",
     pickle.dumps({b"data": _PIX, 2**80000: [0, 1]}), "load_cifar", {},
     "has keys .*<an int of 80001 bits>.*; expected 'data' and 'labels'"),
    ("cifar-labels-out-of-range", "test_batch",
     pickle.dumps({b"data": _PIX, b"labels": [0, 10]}), "load_cifar", {},
     "label 10 at index 1; expected 0..9"),
    ("cifar-labels-none", "test_batch", pickle.dumps({b"data": _PIX, b"labels": None}),
     "load_cifar", {}, "'labels' is a NoneType"),
    ("cifar-pixels-nan", "test_batch",
     pickle.dumps({b"data": np.full((2, 3072), np.nan, np.float32), b"labels": [0, 1]}),
     "load_cifar", {}, "NaN or infinite pixel"),
    ("cifar-not-a-dict", "test_batch", pickle.dumps([_PIX, [0, 1]]), "load_cifar", {},
     "holds a list; expected a dict"),
    ("cifar-truncated", "test_batch",
     pickle.dumps({b"data": _PIX, b"labels": [0, 1]}, protocol=2)[:500], "load_cifar", {},
     "truncated"),
    # ---- LEAF JSON
    ("leaf-unlisted-writer", "d.json", json.dumps({"users": ["w"], "user_data": {
        "w": {"x": [[1.0]], "y": [0]}, "v": {"x": [[2.0]], "y": [1]}}}).encode(), "load_leaf",
     {}, "user_data holds 1 writer.s. that 'users' does not list, e.g. 'v'"),
    ("leaf-true-among-features", "d.json", _leaf([[1, True]], [0]), "load_leaf", {},
     r"user 'w' features 'x' hold true/false \(example 0\)"),
    ("leaf-false-among-float-features", "d.json", _leaf([[0.5, 0.25], [False, 1.0]], [0, 1]),
     "load_leaf", {}, r"features 'x' hold true/false \(example 1\)"),
    ("leaf-true-among-labels", "d.json", _leaf([[1.0], [2.0]], [1, True]), "load_leaf", {},
     "labels 'y' hold true/false"),
    ("leaf-label-1.5", "d.json", _leaf([[1.0], [2.0]], [0, 1.5]), "load_leaf", {},
     "labels 'y': label 1.5 at index 1 is not a class label; expected whole numbers"),
    ("leaf-label-1e30", "d.json", _leaf([[1.0]], [1e30]), "load_leaf", {},
     "labels 'y': label 1e\\+30 at index 0 is not a class label"),
    ("leaf-label-2^62", "d.json", _leaf([[1.0]], [2**62]), "load_leaf", {},
     "labels 'y': label 4611686018427387904 at index 0"),
    ("leaf-label-negative", "d.json", _leaf([[1.0]], [-3]), "load_leaf", {},
     "labels 'y': label -3 at index 0"),
    ("leaf-labels-fewer-than-examples", "d.json", _leaf([[1.0], [2.0]], [0]), "load_leaf", {},
     "2 examples but labels of shape"),
    ("leaf-num-samples-lies", "d.json", _leaf([[1.0]], [0], num_samples=[5]), "load_leaf", {},
     "num_samples says 5"),
    ("leaf-ragged-features", "d.json", _leaf([[1.0, 2.0], [3.0]], [0, 1]), "load_leaf", {},
     "ragged"),
    ("leaf-nan-feature", "d.json", b'{"users": ["w"], "user_data": {"w": {"x": [[NaN]], '
                                   b'"y": [0]}}}', "load_leaf", {}, "NaN or infinite"),
    ("leaf-huge-integer-feature", "d.json", _leaf([[10**400]], [0]), "load_leaf", {},
     "object values"),
    ("leaf-nested-1e5-deep", "d.json",
     b'{"users": ["w"], "user_data": {"w": {"x": ' + b"[" * 100_000 + b"]" * 100_000
     + b', "y": []}}}', "load_leaf", {}, "not valid JSON"),
    ("leaf-user-twice", "d.json",
     json.dumps({"users": ["w", "w"], "user_data": {"w": {"x": [[1]], "y": [0]}}}).encode(),
     "load_leaf", {}, "user 'w' also appears"),
    ("leaf-gz-bomb", "d.json.gz", _bomb("gzip"), "load_leaf", {}, "NUL byte"),
]

_WORKER = r"""
import json, resource, sys, time

def vm_size():
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) * 1024 for l in fh if l.startswith("VmSize"))

from fedsparse.data import loaders

cases = json.loads(open(sys.argv[1]).read())
cap = vm_size() + int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
for case in cases:
    start = time.perf_counter()
    try:
        getattr(loaders, case["reader"])(*case["args"], **case["kwargs"])
        kind, message = None, ""
    except BaseException as exc:
        kind, message = type(exc).__name__, str(exc)
    print(json.dumps({"id": case["id"], "type": kind, "message": message[:2000],
                      "seconds": time.perf_counter() - start}), flush=True)
"""


def _battery_call(root: Path, name: str, reader: str, kwargs: dict):
    """Write nothing; say how the worker calls ``reader`` on the case file ``name``."""
    if reader == "load_cifar":
        return [str(root)], {"split": "test"}
    if reader == "load_idx":
        return [str(root / kwargs["images"]), str(root / name)], {}
    return [str(root / name)], kwargs


@pytest.fixture(scope="module")
def battery(tmp_path_factory) -> dict:
    """Each case's outcome: {"type": exception name or None, "message", "seconds"}."""
    import subprocess

    base = tmp_path_factory.mktemp("hostile")
    cases = []
    for case_id, name, data, reader, kwargs, _ in HOSTILE_FILES:
        root = base / case_id
        folder = root / "cifar-10-batches-py" if reader == "load_cifar" else root
        folder.mkdir(parents=True)
        (folder / name).write_bytes(data)
        if reader == "load_idx":
            (root / kwargs["images"]).write_bytes(_idx_head(0x08, 3, 2) + bytes(6))
        args, call_kwargs = _battery_call(root, name, reader, kwargs)
        cases.append({"id": case_id, "reader": reader, "args": args, "kwargs": call_kwargs})
    spec = base / "cases.json"
    spec.write_text(json.dumps(cases))
    env = dict(os.environ, OMP_NUM_THREADS="1", MALLOC_ARENA_MAX="2")
    try:
        done = subprocess.run([sys.executable, "-c", _WORKER, str(spec), str(CAP_BYTES)],
                              capture_output=True, text=True, timeout=BATTERY_TIMEOUT_S,
                              cwd=base, env=env)
        out, err = done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:  # the cases that finished still count
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = f"the worker ran past {BATTERY_TIMEOUT_S} s"
    results = {}
    for line in out.splitlines():
        rec = json.loads(line)
        results[rec["id"]] = rec
    results["__stderr__"] = err
    results["__base__"] = base
    return results


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="the address-space cap needs Linux (RLIMIT_AS, /proc)")
@pytest.mark.parametrize("case", HOSTILE_FILES, ids=[c[0] for c in HOSTILE_FILES])
def test_hostile_file_is_refused_fast_naming_the_file(battery, case):
    case_id, name, _, _, _, pattern = case
    got = battery.get(case_id)
    assert got is not None, (f"no outcome (the worker died or hung before this case): "
                             f"{battery['__stderr__'][-2000:]}")
    assert got["type"] == "DataFormatError", got
    assert name in got["message"], f"the message does not name the file: {got['message']}"
    assert re.search(pattern, got["message"]), got["message"]
    assert not (battery["__base__"] / "pwned").exists()  # the worker's folder
