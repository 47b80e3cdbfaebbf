"""Loaders for real data in its official file formats, returning plain arrays.

Every loader returns NumPy arrays (or a SciPy CSR matrix for LibSVM text) and
never a torch tensor: turn them into a federated data set with the partitioners in
:mod:`fedsparse.data.partition` and :func:`~fedsparse.data.partition.from_partitions`.

Formats
-------
* IDX (MNIST, Fashion-MNIST, EMNIST): :func:`read_idx`, :func:`load_idx`.
* LibSVM / svmlight text (E2006-tfidf, RCV1, MNIST, ...): :func:`load_libsvm`.
* CIFAR-10/100 python pickles, read with a restricted unpickler: :func:`load_cifar`.
* LEAF JSON (FEMNIST, Shakespeare, ...), natural per-writer clients: :func:`load_leaf`.

Compressed files (gzip, bzip2, xz) are recognised by their first bytes, never by
their suffix. A missing file raises :class:`FileNotFoundError`; a malformed one raises
:class:`DataFormatError` (a :class:`ValueError`); both name the path and say what was
expected.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import pickle
import zlib
from pathlib import Path

import numpy as np
import scipy.sparse as sp

__all__ = [
    "DataFormatError",
    "load_cifar",
    "load_idx",
    "load_leaf",
    "load_libsvm",
    "read_idx",
]


class DataFormatError(ValueError):
    """A data file exists but does not hold what its format requires.

    The message names the path and what was expected.
    """


# --------------------------------------------------------------------------- helpers

_GZIP_MAGIC = b"\x1f\x8b"
_BZ2_MAGIC = b"BZh"
_XZ_MAGIC = b"\xfd7zXZ\x00"


def _check_file(path, what: str) -> Path:
    p = Path(os.fspath(path)).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"{what} file {str(p)!r} does not exist")
    if not p.is_file():
        raise FileNotFoundError(f"{what} path {str(p)!r} is not a regular file")
    return p


def _compression(p: Path) -> str | None:
    with open(p, "rb") as fh:
        head = fh.read(6)
    if head.startswith(_GZIP_MAGIC):
        return "gzip"
    if head.startswith(_BZ2_MAGIC):
        return "bz2"
    if head.startswith(_XZ_MAGIC):
        return "xz"
    return None


def _read_bytes(path, what: str) -> bytes:
    """The whole content of ``path``, decompressed when it starts with a gzip, bzip2
    or xz signature."""
    p = _check_file(path, what)
    kind = _compression(p)
    opener = {"gzip": gzip.open, "bz2": bz2.open, "xz": lzma.open, None: open}[kind]
    try:
        with opener(p, "rb") as fh:
            return fh.read()
    except (OSError, EOFError, lzma.LZMAError, zlib.error, ValueError) as exc:
        raise DataFormatError(f"{what} file {str(p)!r} looks {kind}-compressed but could not "
                              f"be decompressed (truncated or corrupt?): {exc}") from None


# ------------------------------------------------------------------------------ IDX

# IDX type codes -> big-endian NumPy dtypes.
_IDX_DTYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def read_idx(path) -> np.ndarray:
    """Read one IDX file (the MNIST format) into an array of its stored shape.

    The header is two zero bytes, a type code (0x08 uint8, 0x09 int8, 0x0B int16,
    0x0C int32, 0x0D float32, 0x0E float64), the number of dimensions, then one
    big-endian uint32 per dimension; the data follow in big-endian C order.

    Parameters
    ----------
    path : str or path-like
        The file, gzip/bzip2/xz-compressed or not (recognised by its first bytes).

    Returns
    -------
    ndarray of shape ``dims`` in native byte order (uint8 for image files).

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    DataFormatError
        Bad magic number, unknown type code, or fewer (or more) data bytes than the
        header's dimensions require.
    """
    raw = _read_bytes(path, "IDX")
    where = f"IDX file {os.fspath(path)!r}"
    if len(raw) < 4:
        raise DataFormatError(f"{where} is {len(raw)} bytes long; expected at least a 4-byte "
                              "header (0x00 0x00 type ndim)")
    if raw[0] != 0 or raw[1] != 0:
        raise DataFormatError(f"{where} has magic bytes {raw[:4].hex()}; an IDX file starts "
                              "with two zero bytes, a type code and the number of dimensions "
                              "(e.g. 00000803 for images, 00000801 for labels)")
    code, ndim = raw[2], raw[3]
    if code not in _IDX_DTYPES:
        raise DataFormatError(f"{where} has type code 0x{code:02x}; expected one of "
                              + ", ".join(f"0x{c:02x}" for c in _IDX_DTYPES))
    if ndim < 1:
        raise DataFormatError(f"{where} declares {ndim} dimensions; expected at least 1")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataFormatError(f"{where} is truncated: its header declares {ndim} dimensions "
                              f"({header} header bytes) but the file has {len(raw)} bytes")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[code]
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    got = len(raw) - header
    if got != expected:
        state = "truncated" if got < expected else "longer than its header says"
        raise DataFormatError(f"{where} is {state}: dimensions {dims} of {dtype.name} need "
                              f"{expected} data bytes, found {got}")
    arr = np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)
    return arr.astype(dtype.newbyteorder("="))


def load_idx(images_path, labels_path=None, *, flatten: bool = True, scale: bool = True):
    """Load an IDX image file and (optionally) its IDX label file.

    Parameters
    ----------
    images_path : str or path-like
        IDX file of shape (n, rows, cols) (or (n, d)), gzipped or not.
    labels_path : str or path-like, optional
        IDX file of shape (n,) with one label per image.
    flatten : bool, default True
        Return X of shape (n, rows*cols); otherwise keep (n, rows, cols).
    scale : bool, default True
        Return float32 pixels divided by 255 (in [0, 1]) for uint8 images; otherwise
        the stored dtype unchanged.

    Returns
    -------
    X : ndarray, (n, rows*cols) or (n, rows, cols)
    y : ndarray of int64, shape (n,), or None when ``labels_path`` is None.

    Raises
    ------
    FileNotFoundError, DataFormatError
        Missing or malformed files, or a label count that differs from the image count.
    """
    X = read_idx(images_path)
    if X.ndim < 2:
        raise DataFormatError(f"IDX image file {os.fspath(images_path)!r} has shape {X.shape}; "
                              "expected (n, rows, cols) or (n, d)")
    if flatten:
        X = X.reshape(X.shape[0], -1)
    if scale:
        was_uint8 = X.dtype == np.uint8
        X = X.astype(np.float32)
        if was_uint8:
            X /= np.float32(255.0)
    y = None
    if labels_path is not None:
        y = read_idx(labels_path)
        if y.ndim != 1:
            raise DataFormatError(f"IDX label file {os.fspath(labels_path)!r} has shape "
                                  f"{y.shape}; expected one dimension (n,)")
        if y.shape[0] != X.shape[0]:
            raise DataFormatError(f"IDX label file {os.fspath(labels_path)!r} holds {y.shape[0]} "
                                  f"labels but image file {os.fspath(images_path)!r} holds "
                                  f"{X.shape[0]} images; expected one label per image")
        y = y.astype(np.int64)
    return X, y


# --------------------------------------------------------------------------- LibSVM


def _libsvm_locate_error(path, lines: list[bytes], first_line: list[int]) -> DataFormatError:
    """Slow pass used only after the bulk parse failed: find the first bad token."""
    for line, lineno in zip(lines, first_line, strict=True):
        toks = line.split()
        label = toks[0]
        try:
            float(label)
        except ValueError:
            return DataFormatError(f"LibSVM file {os.fspath(path)!r}, line {lineno}: target "
                                   f"{label.decode(errors='replace')!r} is not a number")
        feats = toks[1:]
        if feats and feats[0].startswith(b"qid:"):
            feats = feats[1:]
        for tok in feats:
            idx, colon, val = tok.partition(b":")
            bad = not colon
            if not bad:
                try:
                    i = int(idx)
                    float(val)
                    bad = i < 0
                except ValueError:
                    bad = True
            if bad:
                return DataFormatError(
                    f"LibSVM file {os.fspath(path)!r}, line {lineno}: bad token "
                    f"{tok.decode(errors='replace')!r}; expected index:value with a "
                    "non-negative integer index and a number value")
    return DataFormatError(f"LibSVM file {os.fspath(path)!r} could not be parsed")


def _parse_numbers(chunks: list[bytes], budget: int = 1 << 23) -> np.ndarray:
    """All whitespace- or colon-separated numbers of ``chunks`` as one float64 array.

    Parsed in batches of about ``budget`` bytes so that the temporary token lists stay
    small next to the result; each batch is one vectorised NumPy conversion.
    """
    out: list[np.ndarray] = []
    start, size = 0, 0
    for i, c in enumerate(chunks):
        size += len(c) + 1
        if size >= budget or i == len(chunks) - 1:
            tokens = b" ".join(chunks[start:i + 1]).replace(b":", b" ").split()
            if tokens:
                out.append(np.array(tokens, dtype=np.float64))
            start, size = i + 1, 0
    return np.concatenate(out) if out else np.zeros(0)


def load_libsvm(path, n_features: int | None = None, *, zero_based="auto",
                dtype=np.float64):
    """Read a LibSVM / svmlight text file into a CSR matrix and a target vector.

    Each non-empty line is ``target [qid:q] index:value index:value ...``; text after
    ``#`` is a comment. The tokens of the whole file are parsed in one vectorised
    NumPy call (an E2006-tfidf file of 16,087 lines and 150,360 features reads in a
    few seconds); a second, line-by-line pass runs only to report the first bad token.

    Parameters
    ----------
    path : str or path-like
        The file; plain text or gzip/bzip2/xz-compressed (recognised by its first bytes).
    n_features : int, optional
        Number of columns. Default: the largest index seen (plus one when zero-based).
        An index beyond ``n_features`` is an error.
    zero_based : {"auto", True, False}, default "auto"
        Whether index 0 is the first column. ``"auto"`` means one-based unless an
        index 0 appears in the file; ``False`` with an index 0 in the file is an error.
    dtype : {numpy.float64, numpy.float32}, default float64
        dtype of the stored values. float64 is the default so that values survive a
        round trip exactly; pass float32 to halve the memory of large files.

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (n, n_features)
        With sorted column indices and duplicate entries summed.
    y : ndarray of float64, shape (n,)
        The targets (class labels such as -1/+1 or 0..9, or regression values).
        ``qid`` fields are ignored.

    Raises
    ------
    FileNotFoundError, DataFormatError
        A missing file; a bad token (the message names the path, line number and the
        token); indices beyond ``n_features``; an index 0 with ``zero_based=False``.
    """
    if zero_based not in ("auto", True, False):
        raise ValueError(f"zero_based={zero_based!r} is invalid: must be 'auto', True or False")
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype={dtype} is invalid: must be float32 or float64")
    if n_features is not None and (isinstance(n_features, bool)
                                   or not isinstance(n_features, (int, np.integer))
                                   or n_features < 1):
        raise ValueError(f"n_features={n_features!r} is invalid: must be a positive integer")
    raw = _read_bytes(path, "LibSVM")
    where = f"LibSVM file {os.fspath(path)!r}"
    has_comments = b"#" in raw
    lines: list[bytes] = []
    linenos: list[int] = []
    raw_lines = raw.splitlines()
    del raw  # keep at most two copies of the text alive
    for k, line in enumerate(raw_lines, start=1):
        if has_comments:
            line = line.split(b"#", 1)[0]
        line = line.strip()
        if line:
            lines.append(line)
            linenos.append(k)
    del raw_lines
    labels: list[bytes] = []
    feats: list[bytes] = []
    nnz = np.empty(len(lines), dtype=np.int64)
    for r, line in enumerate(lines):
        head = line.split(None, 1)
        labels.append(head[0])
        rest = head[1] if len(head) > 1 else b""
        if rest.startswith(b"qid:"):
            q = rest.split(None, 1)
            rest = q[1] if len(q) > 1 else b""
        nnz[r] = rest.count(b":")
        feats.append(rest)
    try:
        y = np.array(labels, dtype=np.float64) if labels else np.zeros(0)
        vals = _parse_numbers(feats)
    except ValueError:
        raise _libsvm_locate_error(path, lines, linenos) from None
    total = int(nnz.sum())
    if vals.shape[0] != 2 * total:
        raise _libsvm_locate_error(path, lines, linenos)
    idx = vals[0::2]
    data = vals[1::2]
    if total and (np.any(idx < 0) or np.any(idx != np.floor(idx)) or np.any(idx >= 2**53)):
        raise _libsvm_locate_error(path, lines, linenos)
    if not (np.all(np.isfinite(y)) and np.all(np.isfinite(data))):
        row = int(np.flatnonzero(~np.isfinite(y))[0]) if not np.all(np.isfinite(y)) else int(
            np.searchsorted(np.cumsum(nnz), np.flatnonzero(~np.isfinite(data))[0], side="right"))
        raise DataFormatError(f"{where}, line {linenos[row]}: NaN or infinite value; "
                              "expected finite numbers")
    cols = idx.astype(np.int64)
    has_zero = total > 0 and bool((cols == 0).any())
    if zero_based is False and has_zero:
        row = int(np.searchsorted(np.cumsum(nnz), np.flatnonzero(cols == 0)[0], side="right"))
        raise DataFormatError(f"{where}, line {linenos[row]}: index 0 found but "
                              "zero_based=False (one-based indices start at 1)")
    if zero_based is False or (zero_based == "auto" and not has_zero):
        cols -= 1
    needed = int(cols.max()) + 1 if total else 0
    if n_features is None:
        n_features = needed
    elif needed > n_features:
        row = int(np.searchsorted(np.cumsum(nnz), np.flatnonzero(cols >= n_features)[0],
                                  side="right"))
        bad = int(idx[np.flatnonzero(cols >= n_features)[0]])
        raise DataFormatError(f"{where}, line {linenos[row]}: feature index {bad} needs "
                              f"{needed} columns but n_features={n_features}")
    indptr = np.zeros(len(lines) + 1, dtype=np.int64)
    np.cumsum(nnz, out=indptr[1:])
    index_dtype = np.int32 if max(n_features, total) < 2**31 else np.int64
    X = sp.csr_matrix((data.astype(dtype), cols.astype(index_dtype),
                       indptr.astype(index_dtype)), shape=(len(lines), n_features))
    X.sum_duplicates()  # also sorts the column indices
    return X, y


# ---------------------------------------------------------------------------- CIFAR


class _CifarUnpickler(pickle.Unpickler):
    """Unpickler that admits only the globals a genuine CIFAR batch references.

    Plain containers, strings, bytes and numbers need no global at all; a NumPy array
    is rebuilt through ``numpy.core.multiarray._reconstruct`` (``numpy._core`` in
    NumPy 2), ``numpy.ndarray`` and ``numpy.dtype``. Any other global (``os.system``,
    ``builtins.eval``, ...) raises :class:`pickle.UnpicklingError` before it is
    looked up, so a crafted file cannot run code.
    """

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }

    def find_class(self, module, name):
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(
                f"refusing to load global {module}.{name}: a CIFAR batch may reference only "
                "numpy array reconstruction (numpy.core.multiarray._reconstruct, "
                "numpy.ndarray, numpy.dtype)")
        if name == "_reconstruct":
            try:
                from numpy._core.multiarray import _reconstruct  # NumPy >= 2
            except ImportError:  # pragma: no cover - NumPy 1.x
                from numpy.core.multiarray import _reconstruct
            return _reconstruct
        return np.ndarray if name == "ndarray" else np.dtype


def _unpickle_batch(path) -> dict:
    p = _check_file(path, "CIFAR batch")
    try:
        with open(p, "rb") as fh:
            obj = _CifarUnpickler(fh, encoding="bytes").load()
    except pickle.UnpicklingError as exc:
        raise DataFormatError(f"CIFAR batch {str(p)!r} was refused: {exc}") from None
    except (EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise DataFormatError(f"CIFAR batch {str(p)!r} is not a readable python pickle "
                              f"(truncated or corrupt?): {exc}") from None
    if not isinstance(obj, dict):
        raise DataFormatError(f"CIFAR batch {str(p)!r} holds a {type(obj).__name__}; "
                              "expected a dict with keys b'data' and b'labels'")
    return {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in obj.items()}


_CIFAR = {
    "cifar10": ("cifar-10-batches-py",
                {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}),
    "cifar100": ("cifar-100-python", {"train": ["train"], "test": ["test"]}),
}


def load_cifar(path, *, which: str = "cifar10", split: str = "train", label_mode: str = "fine",
               flatten: bool = True, scale: bool = True):
    """Read CIFAR-10 or CIFAR-100 from the official python-pickle batches.

    Parameters
    ----------
    path : str or path-like
        The extracted directory (``cifar-10-batches-py`` with ``data_batch_1`` ..
        ``data_batch_5`` and ``test_batch``; ``cifar-100-python`` with ``train`` and
        ``test``) or its parent directory.
    which : {"cifar10", "cifar100"}
    split : {"train", "test"}
    label_mode : {"fine", "coarse"}, default "fine"
        CIFAR-100 only: the 100 fine labels or the 20 coarse super-classes.
    flatten : bool, default True
        X of shape (n, 3072) in the file's channel-major order (1024 red, 1024 green,
        1024 blue values); otherwise (n, 3, 32, 32).
    scale : bool, default True
        float32 pixels in [0, 1]; otherwise the stored uint8 values.

    Returns
    -------
    X : ndarray, (n, 3072) or (n, 3, 32, 32)
    y : ndarray of int64, shape (n,)

    Raises
    ------
    FileNotFoundError
        A batch file is missing.
    DataFormatError
        A batch is corrupt, lacks its keys, or references any Python global other than
        NumPy's array reconstruction (the file is refused and nothing in it runs).
    """
    if which not in _CIFAR:
        raise ValueError(f"which={which!r} is invalid: must be 'cifar10' or 'cifar100'")
    if split not in ("train", "test"):
        raise ValueError(f"split={split!r} is invalid: must be 'train' or 'test'")
    if label_mode not in ("fine", "coarse"):
        raise ValueError(f"label_mode={label_mode!r} is invalid: must be 'fine' or 'coarse'")
    dirname, files = _CIFAR[which]
    root = Path(os.fspath(path)).expanduser()
    if (root / dirname).is_dir():
        root = root / dirname
    if not root.is_dir():
        raise FileNotFoundError(f"CIFAR directory {str(root)!r} does not exist; expected the "
                                f"extracted {dirname!r} directory (or its parent)")
    if not (root / files[split][0]).exists():
        raise FileNotFoundError(f"CIFAR directory {str(root)!r} holds neither {dirname!r} nor its "
                                f"batch file {files[split][0]!r}; expected the extracted "
                                f"{dirname!r} directory (or its parent)")
    label_key = "labels" if which == "cifar10" else f"{label_mode}_labels"
    xs, ys = [], []
    for name in files[split]:
        batch = _unpickle_batch(root / name)
        where = f"CIFAR batch {str(root / name)!r}"
        if "data" not in batch or label_key not in batch:
            raise DataFormatError(f"{where} has keys {sorted(map(str, batch))}; expected "
                                  f"'data' and {label_key!r}")
        data = batch["data"]
        if not isinstance(data, np.ndarray) or data.ndim != 2 or data.shape[1] != 3072:
            shape = getattr(data, "shape", type(data).__name__)
            raise DataFormatError(f"{where}: 'data' has shape {shape}; expected (n, 3072) uint8")
        labels = np.asarray(batch[label_key], dtype=np.int64).reshape(-1)
        if labels.shape[0] != data.shape[0]:
            raise DataFormatError(f"{where} holds {data.shape[0]} images but {labels.shape[0]} "
                                  "labels; expected one label per image")
        xs.append(data)
        ys.append(labels)
    X = np.concatenate(xs)
    y = np.concatenate(ys)
    if not flatten:
        X = X.reshape(-1, 3, 32, 32)
    if scale:
        X = X.astype(np.float32) / np.float32(255.0)
    return X, y


# ----------------------------------------------------------------------------- LEAF


def load_leaf(path, *, dtype=np.float32):
    """Read LEAF JSON files (FEMNIST and friends): one client per writer.

    Each file holds ``{"users": [...], "num_samples": [...], "user_data": {user:
    {"x": [[...], ...], "y": [...]}}}``.

    Parameters
    ----------
    path : str or path-like
        One JSON file, or a directory whose ``*.json`` files are read in name order.
    dtype : NumPy dtype, default float32
        dtype of the features.

    Returns
    -------
    clients : list of (X, y)
        ``X`` of shape (n_u, d) (each example flattened), ``y`` int64 of shape (n_u,)
        when all labels are integers (else float64), one pair per writer, in the
        order of the files' ``users`` lists.
    users : list of str
        The writer ids, aligned with ``clients``.

    Raises
    ------
    FileNotFoundError, DataFormatError
        No JSON file, invalid JSON, missing keys, a user listed twice, counts that
        disagree with ``num_samples``, or writers with different feature sizes.
    """
    p = Path(os.fspath(path)).expanduser()
    if p.is_dir():
        files = sorted(q for q in p.iterdir() if q.suffix == ".json" and q.is_file())
        if not files:
            raise FileNotFoundError(f"LEAF directory {str(p)!r} holds no *.json file")
    else:
        files = [_check_file(p, "LEAF JSON")]
    clients, users, origin = [], [], {}
    dim = None
    for f in files:
        try:
            doc = json.loads(_read_bytes(f, "LEAF JSON"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DataFormatError(f"LEAF file {str(f)!r} is not valid JSON: {exc}") from None
        if not isinstance(doc, dict) or "users" not in doc or "user_data" not in doc:
            raise DataFormatError(f"LEAF file {str(f)!r}: expected an object with keys 'users', "
                                  "'num_samples' and 'user_data'")
        counts = doc.get("num_samples")
        if counts is not None and len(counts) != len(doc["users"]):
            raise DataFormatError(f"LEAF file {str(f)!r}: 'num_samples' has {len(counts)} "
                                  f"entries but 'users' has {len(doc['users'])}")
        for k, u in enumerate(doc["users"]):
            if u in origin:
                raise DataFormatError(f"LEAF file {str(f)!r}: user {u!r} also appears in "
                                      f"{str(origin[u])!r}; expected each writer once")
            origin[u] = f
            entry = doc["user_data"].get(u)
            if not isinstance(entry, dict) or "x" not in entry or "y" not in entry:
                raise DataFormatError(f"LEAF file {str(f)!r}: user_data[{u!r}] must have "
                                      "keys 'x' and 'y'")
            try:
                X = np.asarray(entry["x"], dtype=dtype)
                yv = np.asarray(entry["y"])
            except (ValueError, TypeError) as exc:
                raise DataFormatError(f"LEAF file {str(f)!r}: user {u!r} data is not numeric "
                                      f"or ragged: {exc}") from None
            if X.ndim == 1 and X.shape[0] == 0:
                X = X.reshape(0, 0 if dim is None else dim)
            X = X.reshape(X.shape[0], -1)
            if yv.ndim != 1 or yv.shape[0] != X.shape[0]:
                raise DataFormatError(f"LEAF file {str(f)!r}: user {u!r} has {X.shape[0]} "
                                      f"examples but {yv.shape} labels")
            if counts is not None and counts[k] != X.shape[0]:
                raise DataFormatError(f"LEAF file {str(f)!r}: user {u!r} has {X.shape[0]} "
                                      f"examples but num_samples says {counts[k]}")
            if dim is None:
                dim = X.shape[1]
            elif X.shape[1] != dim:
                raise DataFormatError(f"LEAF file {str(f)!r}: user {u!r} has {X.shape[1]} "
                                      f"features per example; earlier writers have {dim}")
            if yv.dtype.kind in "iu" or (yv.dtype.kind == "f" and yv.size
                                         and np.all(yv == np.round(yv))):
                yv = yv.astype(np.int64)
            else:
                yv = yv.astype(np.float64)
            clients.append((X, yv))
            users.append(str(u))
    return clients, users
