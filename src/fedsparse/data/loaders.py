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
expected. "Malformed" includes an empty file, NaN or infinite features or targets,
labels that are not integers (or out of range, for CIFAR) and, for LibSVM, feature
indices that are not integers or that would make an absurdly wide matrix. A bad
argument (``which="cifar1000"``, ``n_features=0``) raises
:class:`~fedsparse._validation.ConfigError` naming the parameter.

A hostile file cannot make a reader allocate much more than the file could honestly
hold: IDX headers are checked before the data are read, and decompression stops at the
size the header declares; text files (LibSVM, LEAF JSON) are refused at their first NUL
byte, so a decompression bomb of zeros stops at its first chunk; the CIFAR unpickler
runs no code and refuses structures that would take exponential time or memory to hash
or expand (memo-shared nested lists and tuples) before they are used.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import math
import os
import pickle
import re
import zlib
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .._validation import check_bool, check_choice, fail

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



def _float_dtype(dtype) -> np.dtype:
    """``dtype`` as numpy float32 or float64, or a clear error naming it."""
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise fail("dtype", dtype, "must be numpy.float32 or numpy.float64") from None
    if dtype not in (np.float32, np.float64):
        raise fail("dtype", dtype, "must be numpy.float32 or numpy.float64")
    return dtype

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


_OPENERS = {"gzip": gzip.open, "bz2": bz2.open, "xz": lzma.open, None: open}
_DECOMPRESSION_ERRORS = (OSError, EOFError, lzma.LZMAError, zlib.error, ValueError)
_CHUNK = 1 << 24


class _Stream:
    """A file's content, decompressed as it is read: ``read(n)`` gives at most ``n``
    bytes, and a corrupt compressed stream raises a DataFormatError naming the file."""

    def __init__(self, p: Path, what: str):
        self.path, self.what = p, what
        self.kind = _compression(p)
        self._fh = _OPENERS[self.kind](p, "rb")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._fh.close()

    def read(self, n: int) -> bytes:
        try:
            return self._fh.read(n)
        except _DECOMPRESSION_ERRORS as exc:
            raise DataFormatError(f"{self.what} file {str(self.path)!r} looks {self.kind}-"
                                  "compressed but could not be decompressed (truncated or "
                                  f"corrupt?): {exc}") from None


def _read_text(path, what: str) -> bytes:
    """The whole content of a text file (LibSVM, JSON), decompressed when it starts
    with a gzip, bzip2 or xz signature.

    A NUL byte is refused as soon as it is read: no text format here holds one, and a
    decompression bomb (gigabytes of zeros from a few kilobytes) is then stopped at its
    first chunk instead of filling the memory.
    """
    p = _check_file(path, what)
    chunks, size = [], 0
    with _Stream(p, what) as stream:
        while chunk := stream.read(_CHUNK):
            nul = chunk.find(b"\0")
            if nul >= 0:
                inside = " of its decompressed content" if stream.kind else ""
                raise DataFormatError(f"{what} file {str(p)!r} holds a NUL byte at offset "
                                      f"{size + nul}{inside}: it is binary data, not "
                                      f"{what} text")
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks)


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
        Bad magic number, unknown type code, fewer (or more) data bytes than the
        header's dimensions require, or a NaN or infinite value in a float file. The
        header is checked before any data are read: a compressed file is decompressed
        only up to the size its header declares (and one byte more, to refuse trailing
        data), and a header declaring more than 1032 times the compressed file's size
        (deflate's limit) is refused unread.
    MemoryError
        The data the header declares (and the file holds) do not fit in memory; the
        message names the file and the size.
    """
    p = _check_file(path, "IDX")
    where = f"IDX file {os.fspath(path)!r}"
    with _Stream(p, "IDX") as stream:
        head = _read_upto(stream, 4)
        if len(head) < 4:
            raise DataFormatError(f"{where} is {len(head)} bytes long; expected at least a "
                                  "4-byte header (0x00 0x00 type ndim)")
        if head[0] != 0 or head[1] != 0:
            raise DataFormatError(f"{where} has magic bytes {head.hex()}; an IDX file starts "
                                  "with two zero bytes, a type code and the number of "
                                  "dimensions (e.g. 00000803 for images, 00000801 for labels)")
        code, ndim = head[2], head[3]
        if code not in _IDX_DTYPES:
            raise DataFormatError(f"{where} has type code 0x{code:02x}; expected one of "
                                  + ", ".join(f"0x{c:02x}" for c in _IDX_DTYPES))
        if ndim < 1:
            raise DataFormatError(f"{where} declares {ndim} dimensions; expected at least 1")
        header = 4 + 4 * ndim
        shape = _read_upto(stream, 4 * ndim)
        if len(shape) < 4 * ndim:
            raise DataFormatError(f"{where} is truncated: its header declares {ndim} "
                                  f"dimensions ({header} header bytes) but the file has "
                                  f"{4 + len(shape)} bytes")
        dims = tuple(int(d) for d in np.frombuffer(shape, dtype=">u4"))
        dtype = _IDX_DTYPES[code]
        # Python integers: a product of up to 255 uint32 dimensions overflows int64 and
        # could wrap round to the actual data length.
        expected = math.prod(dims) * dtype.itemsize
        need = f"dimensions {dims} of {dtype.name} need {expected} data bytes"
        if stream.kind is None:  # the file's size is known: a lying header reads nothing
            got = p.stat().st_size - header
            if got != expected:
                state = "truncated" if got < expected else "longer than its header says"
                raise DataFormatError(f"{where} is {state}: {need}, found {got}")
        elif expected > _MAX_EXPANSION * p.stat().st_size:
            raise DataFormatError(
                f"{where} is truncated or a decompression bomb: {need}, more than "
                f"{_MAX_EXPANSION} times its {p.stat().st_size} compressed bytes (the most "
                "deflate can expand; bzip2 and xz files are held to the same bound: "
                "decompress such a file first to read it)")
        try:
            raw = _read_upto(stream, expected)
        except MemoryError:
            raise MemoryError(f"{where}: not enough memory for the {expected} data bytes its "
                              f"header declares ({need})") from None
        if len(raw) < expected:
            raise DataFormatError(f"{where} is truncated: {need}, found {len(raw)}")
        if stream.read(1):
            raise DataFormatError(f"{where} is longer than its header says: {need}, and more "
                                  "follow (trailing data)")
    arr = np.frombuffer(raw, dtype=dtype).reshape(dims)
    arr = arr.astype(dtype.newbyteorder("="), copy=False)
    if arr.dtype.kind == "f":
        _check_finite(arr, where)
    return arr


#: The most a compressed IDX file may expand: deflate's limit (258-byte matches coded
#: in about 2 bits: 1032 to 1), applied to bzip2 and xz too.
_MAX_EXPANSION = 1032


def _read_upto(stream: _Stream, n: int) -> bytearray:
    """Up to ``n`` bytes of ``stream``, read in chunks: the buffer grows with what the
    file holds, never to a size only a header claims."""
    buf = bytearray()
    while len(buf) < n:
        chunk = stream.read(min(n - len(buf), _CHUNK))
        if not chunk:
            break
        buf += chunk
    return buf


def _check_finite(arr: np.ndarray, where: str, what: str = "value") -> None:
    """Raise DataFormatError naming ``where`` and the first non-finite entry."""
    bad = ~np.isfinite(arr)
    if bad.any():
        pos = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), arr.shape))
        at = f" at index {pos if len(pos) > 1 else pos[0]}" if pos else ""
        raise DataFormatError(f"{where} holds a NaN or infinite {what} ({arr[pos]}{at}); "
                              "expected finite numbers")


def _integer_labels(y: np.ndarray, where: str) -> np.ndarray:
    """``y`` as int64, refusing floats that do not hold integers (1.5, NaN, inf)."""
    if y.dtype.kind in "iu":
        return y.astype(np.int64)
    if y.dtype.kind == "f":
        _check_finite(y, where, "label")
        if np.any(y != np.round(y)) or np.any(np.abs(y) >= 2**62):
            first = int(np.flatnonzero((y != np.round(y)) | (np.abs(y) >= 2**62))[0])
            raise DataFormatError(f"{where} holds label {float(y[first])} at index {first}; "
                                  "expected integer class labels")
        return y.astype(np.int64)
    raise DataFormatError(f"{where} holds labels of type {y.dtype}; expected integers")


def load_idx(images_path, labels_path=None, *, flatten: bool = True, scale: bool = True):
    """Load an IDX image file and (optionally) its IDX label file.

    Parameters
    ----------
    images_path : str or path-like
        IDX file of shape (n, rows, cols) (or (n, d), or (n, *shape)), gzipped or not.
    labels_path : str or path-like, optional
        IDX file of shape (n,) with one integer label per image.
    flatten : bool, default True
        Return X of shape (n, rows*cols). Otherwise keep the images: a 3-D file
        (n, rows, cols) gains a channel axis, (n, 1, rows, cols), the layout of
        :class:`torch.nn.Conv2d` (as :func:`load_cifar` returns (n, 3, 32, 32)); other
        files keep their stored shape.
    scale : bool, default True
        Return float32 pixels divided by 255 (in [0, 1]) for uint8 images; otherwise
        the stored dtype unchanged.

    Returns
    -------
    X : ndarray, (n, rows*cols), or (n, 1, rows, cols) with ``flatten=False``
    y : ndarray of int64, shape (n,), or None when ``labels_path`` is None.

    Raises
    ------
    FileNotFoundError, DataFormatError
        Missing or malformed files, no images, NaN or infinite values, labels that are
        not integers, or a label count that differs from the image count.
    """
    flatten, scale = check_bool("flatten", flatten), check_bool("scale", scale)
    X = read_idx(images_path)
    where = f"IDX image file {os.fspath(images_path)!r}"
    if X.ndim < 2:
        raise DataFormatError(f"{where} has shape {X.shape}; expected (n, rows, cols) or (n, d)")
    if X.size == 0:
        raise DataFormatError(f"{where} has shape {X.shape}: it holds no pixels; expected at "
                              "least one image of at least one value")
    if flatten:
        X = X.reshape(X.shape[0], -1)
    elif X.ndim == 3:
        X = X[:, None]
    if scale:
        was_uint8 = X.dtype == np.uint8
        with np.errstate(over="ignore"):  # reported just below, naming the file
            X = X.astype(np.float32)
        if was_uint8:
            X /= np.float32(255.0)
        else:  # float32 may overflow what a float64 or int32 file held
            _check_finite(X, where + " (as float32)")
    y = None
    if labels_path is not None:
        y = read_idx(labels_path)
        lwhere = f"IDX label file {os.fspath(labels_path)!r}"
        if y.ndim != 1:
            raise DataFormatError(f"{lwhere} has shape {y.shape}; expected one dimension (n,)")
        if y.shape[0] != X.shape[0]:
            raise DataFormatError(f"{lwhere} holds {y.shape[0]} labels but image file "
                                  f"{os.fspath(images_path)!r} holds {X.shape[0]} images; "
                                  "expected one label per image")
        y = _integer_labels(y, lwhere)
    return X, y


# --------------------------------------------------------------------------- LibSVM


#: Most columns a LibSVM matrix may have: the int32 index limit of SciPy's CSR, and far
#: beyond any model this library can hold (a dense (d,) float32 parameter vector).
MAX_LIBSVM_FEATURES = 2**31 - 1
#: An index at least this large, and this many times the largest index of every other
#: row, is taken for a corrupt line rather than a real feature (see :func:`load_libsvm`).
_OUTLIER_FLOOR, _OUTLIER_RATIO = 1 << 20, 1000

# A token with two colons ("1:2:3"), an empty value ("3:") or an empty index (":3"):
# each shifts the index/value alternation of the bulk parse, and "1:2:3 4" or "5 :3"
# would do so without changing the number of tokens.
_BAD_COLON = re.compile(rb":(?:[^\s:]*:|(?=\s)|\Z)")
_EMPTY_INDEX = re.compile(rb"\s:")


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
            bad = not colon or not idx or not val or b":" in val
            if not bad:
                try:
                    i = int(idx)
                    float(val)
                    bad = i < 0 or i > MAX_LIBSVM_FEATURES
                except (ValueError, OverflowError):
                    bad = True
            if bad:
                return DataFormatError(
                    f"LibSVM file {os.fspath(path)!r}, line {lineno}: bad token "
                    f"{tok.decode(errors='replace')!r}; expected index:value with a "
                    f"non-negative integer index (at most {MAX_LIBSVM_FEATURES}) and a "
                    "number value")
    return DataFormatError(f"LibSVM file {os.fspath(path)!r} could not be parsed")


def _parse_pairs(chunks: list[bytes], budget: int = 1 << 23) -> tuple[np.ndarray, np.ndarray]:
    """The ``index:value`` pairs of ``chunks``: (int64 indices, float64 values).

    Parsed in batches of about ``budget`` bytes so that the temporary token lists stay
    small next to the result; each batch is one vectorised NumPy conversion per
    column. Indices are parsed as integers, so ``1e3:1`` or ``2.0:1`` is refused.

    Raises
    ------
    ValueError, OverflowError
        A token is not ``integer:number`` (the caller then locates it line by line).
    """
    idx: list[np.ndarray] = []
    val: list[np.ndarray] = []
    start, size = 0, 0
    for i, c in enumerate(chunks):
        size += len(c) + 1
        if size >= budget or i == len(chunks) - 1:
            text = b" ".join(chunks[start:i + 1])
            if _BAD_COLON.search(text) or _EMPTY_INDEX.search(text) or text.startswith(b":"):
                raise ValueError("a token without exactly one colon between index and value")
            tokens = text.replace(b":", b" ").split()
            if len(tokens) % 2:
                raise ValueError("a token without a colon")
            if tokens:
                idx.append(np.array(tokens[0::2], dtype=np.int64))
                val.append(np.array(tokens[1::2], dtype=np.float64))
            start, size = i + 1, 0
    if not idx:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    return np.concatenate(idx), np.concatenate(val)


def load_libsvm(path, n_features: int | None = None, *, zero_based="auto",
                dtype=np.float64):
    """Read a LibSVM / svmlight text file into a CSR matrix and a target vector.

    Each non-empty line is ``target [qid:q] index:value index:value ...``; text after
    ``#`` is a comment. The tokens of the whole file are parsed in one vectorised
    NumPy call per column (an E2006-tfidf file of 16,087 lines and 150,360 features
    reads in a few seconds); a second, line-by-line pass runs only to report the first
    bad token.

    Parameters
    ----------
    path : str or path-like
        The file; plain text or gzip/bzip2/xz-compressed (recognised by its first bytes).
    n_features : int, optional
        Number of columns, at most :data:`MAX_LIBSVM_FEATURES`. Default: the largest
        index seen (plus one when zero-based). An index beyond ``n_features`` is an
        error.
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
        A missing file; a file with no example; a bad token (the message names the
        path, line number and token), e.g. an index that is not a non-negative integer;
        a NaN or infinite target or value; indices beyond ``n_features``; an index 0
        with ``zero_based=False``. Without ``n_features``, also an index that would make
        more than :data:`MAX_LIBSVM_FEATURES` columns, or one that is at least 2^20 and
        1,000 times the largest index of every other row (a corrupt line would
        otherwise silently make a matrix of, say, 10^13 columns); pass ``n_features``
        if such an index is real.
    ConfigError
        A bad ``n_features``, ``zero_based`` or ``dtype``.
    """
    check_choice("zero_based", zero_based, ("auto", True, False))
    dtype = _float_dtype(dtype)
    if n_features is not None and (isinstance(n_features, bool)
                                   or not isinstance(n_features, (int, np.integer))
                                   or not 1 <= n_features <= MAX_LIBSVM_FEATURES):
        raise fail("n_features", n_features,
                   f"must be None or an integer in 1..{MAX_LIBSVM_FEATURES}")
    raw = _read_text(path, "LibSVM")
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
    if not lines:
        raise DataFormatError(f"{where} holds no example (it is empty, or only comments and "
                              "blank lines); expected lines 'target index:value ...'")
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
        y = np.array(labels, dtype=np.float64)
        idx, data = _parse_pairs(feats)
    except (ValueError, OverflowError):
        raise _libsvm_locate_error(path, lines, linenos) from None
    total = int(nnz.sum())
    if idx.shape[0] != total or (total and (idx.min() < 0 or idx.max() > MAX_LIBSVM_FEATURES)):
        raise _libsvm_locate_error(path, lines, linenos)
    ends = np.cumsum(nnz)

    def line_of(entry: int) -> int:
        return linenos[int(np.searchsorted(ends, entry, side="right"))]

    if not np.all(np.isfinite(y)):
        raise DataFormatError(f"{where}, line {linenos[int(np.argmin(np.isfinite(y)))]}: "
                              "NaN or infinite target; expected finite numbers")
    if not np.all(np.isfinite(data)):
        raise DataFormatError(f"{where}, line {line_of(int(np.argmin(np.isfinite(data))))}: "
                              "NaN or infinite value; expected finite numbers")
    cols = idx  # no copy: E2006-tfidf has 19 million entries
    has_zero = total > 0 and bool((cols == 0).any())
    if zero_based is False and has_zero:
        raise DataFormatError(f"{where}, line {line_of(int(np.argmax(cols == 0)))}: index 0 "
                              "found but zero_based=False (one-based indices start at 1)")
    offset = 1 if zero_based is False or (zero_based == "auto" and not has_zero) else 0
    cols -= offset  # in place: the file's index of column c is c + offset
    needed = int(cols.max()) + 1 if total else 0
    if n_features is None:
        top = int(np.argmax(cols)) if total else 0
        if needed > MAX_LIBSVM_FEATURES:
            raise DataFormatError(f"{where}, line {line_of(top)}: feature index "
                                  f"{int(cols[top]) + offset} needs {needed} columns, more "
                                  f"than the {MAX_LIBSVM_FEATURES} allowed")
        if needed > _OUTLIER_FLOOR:
            _check_outlier_index(where, cols, nnz, top, line_of, int(cols[top]) + offset)
        n_features = needed
    elif needed > n_features:
        first = int(np.argmax(cols >= n_features))
        raise DataFormatError(f"{where}, line {line_of(first)}: feature index "
                              f"{int(cols[first]) + offset} needs {int(cols[first]) + 1} "
                              f"columns but n_features={n_features}")
    indptr = np.zeros(len(lines) + 1, dtype=np.int64)
    np.cumsum(nnz, out=indptr[1:])
    index_dtype = np.int32 if total < 2**31 else np.int64
    X = sp.csr_matrix((data.astype(dtype), cols.astype(index_dtype),
                       indptr.astype(index_dtype)), shape=(len(lines), n_features))
    X.sum_duplicates()  # also sorts the column indices
    return X, y


def _check_outlier_index(where: str, cols: np.ndarray, nnz: np.ndarray, top: int,
                         line_of, shown: int) -> None:
    """Refuse a largest column ``cols[top]`` far beyond every other row's largest."""
    ends = np.cumsum(nnz)
    row = int(np.searchsorted(ends, top, side="right"))
    others = np.ones(cols.shape[0], dtype=bool)
    others[ends[row] - nnz[row]:ends[row]] = False
    rest = int(cols[others].max()) if others.any() else -1
    if rest >= 0 and cols[top] >= _OUTLIER_RATIO * (rest + 1):
        raise DataFormatError(
            f"{where}, line {line_of(top)}: feature index {shown} is far beyond every other "
            f"row's (their largest column is {rest}), so the matrix would have "
            f"{int(cols[top]) + 1} columns; fix the line, or pass n_features if the index "
            "is real")


# ---------------------------------------------------------------------------- CIFAR


def _numpy_private(module: str, name: str):
    """``numpy._core.<module>.<name>`` (NumPy 2) or ``numpy.core.<module>.<name>``."""
    import importlib

    try:
        return getattr(importlib.import_module(f"numpy._core.{module}"), name)
    except ImportError:  # pragma: no cover - NumPy 1.x
        return getattr(importlib.import_module(f"numpy.core.{module}"), name)


class _NdarrayType:
    """Stands in for ``numpy.ndarray`` inside a pickle: pickles name the class only as
    the first argument of ``_reconstruct``; calling it (``ndarray((10**12,))``) would
    allocate whatever shape the file asks for, so that is refused."""

    def __call__(self, *args, **kwargs):
        raise pickle.UnpicklingError("refusing to call numpy.ndarray directly (a CIFAR batch "
                                     "rebuilds arrays only through _reconstruct)")


class _Lines(io.BytesIO):
    """The pickle's bytes; a text line (GLOBAL, INT, ...) cut off by the end of the file
    is reported as truncation, where the pure-Python unpickler would use the stub."""

    def readline(self, size=-1):
        line = super().readline(size)
        if line and not line.endswith(b"\n"):
            raise pickle.UnpicklingError("pickle data was truncated (in a text line)")
        return line


def _dtype_spec(spec) -> np.dtype:
    """``numpy.dtype(spec)`` for a plain dtype only (``"u1"``, ``b"<i8"``, a dtype): a
    structured spec is a nested structure NumPy would walk, and a CIFAR batch has none."""
    if isinstance(spec, np.dtype) and spec.fields is None and spec.subdtype is None:
        return spec
    if isinstance(spec, (str, bytes)) and len(spec) <= 16:
        try:
            dtype = np.dtype(spec.decode("latin1") if isinstance(spec, bytes) else spec)
        except TypeError:
            dtype = None
        if dtype is not None and dtype.fields is None and dtype.subdtype is None:
            return dtype
    shown = spec if isinstance(spec, (str, bytes, np.dtype)) else type(spec).__name__
    raise pickle.UnpicklingError(f"numpy.dtype({shown!r:.60}); a CIFAR batch uses plain "
                                 "dtypes such as 'u1'")


def _scalar_key(key, what: str):
    """``key`` if hashing it takes time linear in its size (a string, bytes, a number,
    None); a tuple could be memo-shared and nested, and hashing it exponential."""
    if key is None or isinstance(key, (str, bytes, int, float)):
        return key
    raise pickle.UnpicklingError(f"a {what} of type {type(key).__name__}; the keys of a "
                                 "CIFAR batch are strings")


class _CifarUnpickler(pickle._Unpickler):
    """Unpickler that admits only the globals a genuine CIFAR batch references, and
    never allocates more than the file could hold.

    Plain containers, strings, bytes and numbers need no global at all; a NumPy array
    is rebuilt through ``numpy.core.multiarray._reconstruct`` (``numpy._core`` in
    NumPy 2) with ``numpy.ndarray`` and ``numpy.dtype``, or, in protocol-5 pickles,
    ``numpy.core.numeric._frombuffer``; Python 3 pickles of protocol 2 write bytes as
    ``_codecs.encode(text, "latin1")``. Any other global (``os.system``,
    ``builtins.eval``, ...) raises :class:`pickle.UnpicklingError` before it is looked
    up, so a crafted file cannot run code.

    The pure-Python unpickler is used on the file's bytes: the C one grows its memo
    table to the largest index a ``LONG_BINPUT`` names (a 10-byte file can ask for
    32 GB), and byte-string opcodes then cannot claim more than the file holds.
    ``_reconstruct`` allocates its ``shape`` before any data are read, so that shape is
    checked against the file size too (genuine pickles pass an empty one).

    A pickle stores a repeated object once (its memo), so a few KB can describe a list
    nested seven deep whose every level repeats one list: 16^8 entries when expanded.
    Building it is cheap; what would expand it is refused here or by the checks that
    follow the load: dict keys and set members must be strings, bytes, numbers or None
    (hashing a memo-shared nested tuple is exponential), dtypes must be plain (NumPy
    walks a structured spec), and an array's state must be a shape of integers and the
    raw bytes of a non-object dtype.
    """

    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, data: bytes):
        super().__init__(_Lines(data), encoding="bytes")
        self._budget = len(data)

    def _reconstruct(self, subtype, shape, dtype):
        if subtype is not np.ndarray and not isinstance(subtype, _NdarrayType):
            raise pickle.UnpicklingError(f"_reconstruct of {subtype!r}; expected numpy.ndarray")
        dims = _shape(shape)
        size = math.prod(dims) * _dtype_spec(dtype).itemsize
        if size > self._budget:
            raise pickle.UnpicklingError(f"an array of shape {dims} would need {size} bytes, "
                                         f"more than the {self._budget}-byte file holds")
        return _numpy_private("multiarray", "_reconstruct")(np.ndarray, dims, dtype)

    @staticmethod
    def _frombuffer(buf, dtype, shape, order):
        return _numpy_private("numeric", "_frombuffer")(buf, _dtype_spec(dtype), _shape(shape),
                                                        order)

    @staticmethod
    def _dtype(spec, align=False, copy=False):
        # Python 2 pickles (the official batches) spell the flags 0 and 1
        if not all(isinstance(f, int) and f in (0, 1) for f in (align, copy)):
            raise pickle.UnpicklingError("numpy.dtype(..., align, copy) with flags that are "
                                         "not 0/1")
        return np.dtype(_dtype_spec(spec), align=align, copy=copy)

    @staticmethod
    def _latin1(text, encoding="utf-8", errors="strict"):
        # Protocol 2 in Python 3 spells bytes b as _codecs.encode(b.decode("latin1"),
        # "latin1"); other codecs ("hex", ...) could grow the data at each call.
        if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
            raise pickle.UnpicklingError(f"_codecs.encode(..., {encoding!r}); a CIFAR batch "
                                         "uses only the latin1 codec")
        return text.encode("latin1", errors)

    def find_class(self, module, name):
        if name == "_reconstruct" and module in ("numpy.core.multiarray",
                                                 "numpy._core.multiarray"):
            return self._reconstruct
        if name == "_frombuffer" and module in ("numpy.core.numeric", "numpy._core.numeric"):
            # Reads its data from a buffer in the file: bounded by the file size.
            return self._frombuffer
        if (module, name) == ("numpy", "ndarray"):
            return _NdarrayType()
        if (module, name) == ("numpy", "dtype"):
            return self._dtype
        if (module, name) == ("_codecs", "encode"):
            return self._latin1
        raise pickle.UnpicklingError(
            f"refusing to load global {module}.{name}: a CIFAR batch may reference only "
            "numpy array reconstruction (numpy.core.multiarray._reconstruct, "
            "numpy.ndarray, numpy.dtype, numpy.core.numeric._frombuffer) and "
            "_codecs.encode")

    # -- opcodes that hash, or hand a state to NumPy: checked first --------------------
    def load_setitem(self):
        value = self.stack.pop()
        key = _scalar_key(self.stack.pop(), "dict key")
        self.stack[-1][key] = value

    def load_setitems(self):
        items = self.pop_mark()
        target = self.stack[-1]
        for i in range(0, len(items), 2):
            target[_scalar_key(items[i], "dict key")] = items[i + 1]

    def load_dict(self):
        items = self.pop_mark()
        self.append({_scalar_key(items[i], "dict key"): items[i + 1]
                     for i in range(0, len(items), 2)})

    def load_additems(self):
        items = [_scalar_key(item, "set member") for item in self.pop_mark()]
        target = self.stack[-1]
        if not isinstance(target, set):
            raise pickle.UnpicklingError(f"ADDITEMS on a {type(target).__name__}")
        target.update(items)

    def load_frozenset(self):
        self.append(frozenset(_scalar_key(item, "set member") for item in self.pop_mark()))

    def load_build(self):
        state = self.stack.pop()
        target = self.stack[-1]
        if isinstance(target, np.dtype):
            # (version, byte order, subarray, names, fields, itemsize, alignment, flags):
            # a plain dtype has no subarray, names or fields
            if not isinstance(state, tuple) or any(
                    isinstance(v, (tuple, list, dict)) for v in state):
                raise pickle.UnpicklingError("a dtype state with fields or a subarray; a "
                                             "CIFAR batch uses plain dtypes")
        elif isinstance(target, np.ndarray):
            # (version, shape, dtype, is_fortran, raw bytes)
            if not (isinstance(state, tuple) and len(state) == 5
                    and isinstance(state[2], np.dtype) and not state[2].hasobject
                    and isinstance(state[4], (bytes, bytearray))):
                raise pickle.UnpicklingError("an array state that is not (version, shape, "
                                             "dtype, order, raw bytes) of a non-object dtype")
            _shape(state[1])
        else:
            raise pickle.UnpicklingError(f"BUILD of a {type(target).__name__}; a CIFAR batch "
                                         "builds only numpy arrays and dtypes")
        target.__setstate__(state)

    dispatch[pickle.SETITEM[0]] = load_setitem
    dispatch[pickle.SETITEMS[0]] = load_setitems
    dispatch[pickle.DICT[0]] = load_dict
    dispatch[pickle.ADDITEMS[0]] = load_additems
    dispatch[pickle.FROZENSET[0]] = load_frozenset
    dispatch[pickle.BUILD[0]] = load_build


def _shape(shape) -> tuple[int, ...]:
    """An array shape from a pickle: non-negative integers only."""
    dims = (shape,) if isinstance(shape, int) else tuple(shape) \
        if isinstance(shape, (tuple, list)) else ()
    plain = len(dims) <= 32 and all(type(d) is int for d in dims)
    if not plain or isinstance(shape, bool) or any(d < 0 for d in dims) or not (
            isinstance(shape, (int, tuple, list))):
        shown = repr(dims) if plain else type(shape).__name__
        raise pickle.UnpicklingError(f"an array shape {shown}; expected at most 32 "
                                     "non-negative integers")
    return dims


def _unpickle_batch(path) -> dict:
    p = _check_file(path, "CIFAR batch")
    raw = p.read_bytes()
    if not raw:
        raise DataFormatError(f"CIFAR batch {str(p)!r} is empty; expected a python pickle")
    try:
        obj = _CifarUnpickler(raw).load()
    except pickle.UnpicklingError as exc:
        if "truncated" in str(exc):
            raise DataFormatError(f"CIFAR batch {str(p)!r} is not a readable python pickle "
                                  f"(truncated or corrupt?): {exc}") from None
        raise DataFormatError(f"CIFAR batch {str(p)!r} was refused: {exc}") from None
    except Exception as exc:
        # Only the few globals above can run, so whatever else goes wrong (a bad
        # opcode, a malformed numpy state, a struct or memo error) is a corrupt file.
        raise DataFormatError(f"CIFAR batch {str(p)!r} is not a readable python pickle "
                              f"(truncated or corrupt?): {type(exc).__name__}: {exc}") from None
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
        A batch is empty, corrupt, lacks its keys, references any Python global other
        than NumPy's array reconstruction (the file is refused and nothing in it runs),
        asks for an array larger than the file, holds pixels that are not integers in
        0..255 (float, NaN, ...), or labels that are not integers in 0..9 (CIFAR-10),
        0..99 (fine) or 0..19 (coarse).
    ConfigError
        A bad ``which``, ``split`` or ``label_mode``.
    """
    check_choice("which", which, _CIFAR)
    check_choice("split", split, ("train", "test"))
    flatten, scale = check_bool("flatten", flatten), check_bool("scale", scale)
    check_choice("label_mode", label_mode, ("fine", "coarse"))
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
    num_classes = 10 if which == "cifar10" else (100 if label_mode == "fine" else 20)
    xs, ys = [], []
    for name in files[split]:
        batch = _unpickle_batch(root / name)
        where = f"CIFAR batch {str(root / name)!r}"
        if "data" not in batch or label_key not in batch:
            keys = sorted(k[:40] if isinstance(k, str) else _shown(k) for k in batch)
            raise DataFormatError(f"{where} has keys {keys}; expected "
                                  f"'data' and {label_key!r}")
        data = _cifar_pixels(batch["data"], where)
        labels = _cifar_labels(batch[label_key], label_key, num_classes, where)
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


def _shown(value) -> str:
    """A short text for a value from a hostile file: an integer of a million digits
    cannot even be converted (Python refuses beyond 4300), a string is cut."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"<an int of {value.bit_length()} bits>"
    if isinstance(value, (str, bytes)):
        value = value[:40]
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _cifar_pixels(data, where: str) -> np.ndarray:
    """A batch's ``data`` as (n, 3072) uint8, refusing any other shape, dtype or range."""
    if not isinstance(data, np.ndarray) or data.ndim != 2 or data.shape[1] != 3072 \
            or data.shape[0] == 0:
        shape = getattr(data, "shape", type(data).__name__)
        raise DataFormatError(f"{where}: 'data' has shape {shape}; expected (n, 3072) uint8 "
                              "with n >= 1")
    if data.dtype.kind == "f":
        _check_finite(data, f"{where}: 'data'", "pixel")
    if data.dtype.kind not in "iu":
        raise DataFormatError(f"{where}: 'data' has dtype {data.dtype}; expected uint8 pixel "
                              "values 0..255")
    if data.dtype != np.uint8 and (data.min() < 0 or data.max() > 255):
        raise DataFormatError(f"{where}: 'data' holds pixel values {data.min()}..{data.max()}; "
                              "expected 0..255")
    return data.astype(np.uint8, copy=False)


def _cifar_labels(labels, key: str, num_classes: int, where: str) -> np.ndarray:
    """A batch's label list as int64, refusing non-integers and values out of range.

    A list is checked entry by entry before NumPy sees it: ``numpy.asarray`` would
    expand a memo-shared nested list (a few KB of pickle) to gigabytes.
    """
    expected = f"expected integer labels 0..{num_classes - 1}"
    if isinstance(labels, np.ndarray):
        if labels.ndim != 1 or labels.dtype.kind not in "iu":
            raise DataFormatError(f"{where}: {key!r} is an array of shape {labels.shape} and "
                                  f"dtype {labels.dtype}; {expected}")
        arr = labels
    elif isinstance(labels, (list, tuple)):
        for i, v in enumerate(labels):
            if type(v) is not int:  # bool, float, bytes, a nested list, ...
                shown = f"{type(v).__name__} {_shown(v)}" if isinstance(
                    v, (bool, float, complex, str, bytes)) or v is None \
                    else f"a {type(v).__name__}"
                raise DataFormatError(f"{where}: {key!r} holds {shown} at index {i}; "
                                      f"{expected}")
            if not 0 <= v < num_classes:
                raise DataFormatError(f"{where}: {key!r} holds label {_shown(v)} at index {i}; "
                                      f"expected 0..{num_classes - 1}")
        return np.array(labels, dtype=np.int64)
    else:
        raise DataFormatError(f"{where}: {key!r} is a {type(labels).__name__}; expected a "
                              f"list of integer labels 0..{num_classes - 1}")
    bad = (arr < 0) | (arr >= num_classes)
    if bad.any():
        first = int(np.argmax(bad))
        raise DataFormatError(f"{where}: {key!r} holds label {arr[first]} at index {first}; "
                              f"expected 0..{num_classes - 1}")
    return arr.astype(np.int64)


# ----------------------------------------------------------------------------- LEAF


def load_leaf(path, *, dtype=np.float32, example_shape=None):
    """Read LEAF JSON files (FEMNIST and friends): one client per writer.

    Each file holds ``{"users": [...], "num_samples": [...], "user_data": {user:
    {"x": [[...], ...], "y": [...]}}}``; ``num_samples`` is optional.

    Parameters
    ----------
    path : str or path-like
        One JSON file, or a directory whose ``*.json`` files are read in name order.
    dtype : {numpy.float32, numpy.float64}, default float32
        dtype of the features.
    example_shape : tuple of int, optional
        Reshape every example to this shape, e.g. ``(1, 28, 28)`` to feed FEMNIST's
        784-pixel rows to a CNN. Default: flat vectors.

    Returns
    -------
    clients : list of (X, y)
        ``X`` of shape (n_u, d) (each example flattened) or (n_u, *example_shape),
        ``y`` int64 class labels of shape (n_u,), one pair per writer, in the order of
        the files' ``users`` lists.
    users : list of str
        The writer ids, aligned with ``clients``.

    Raises
    ------
    FileNotFoundError
        No such file, or a directory without a JSON file.
    DataFormatError
        An empty file or one with no writer at all, invalid JSON, a value of the wrong
        type or missing key (``users`` must be a list of strings, ``user_data`` an
        object, each entry an object with ``x`` and ``y``), a user listed twice,
        counts that disagree with ``num_samples``, features or labels that are not
        numbers (``true``/``false`` among them, NaN or infinite), labels that are not
        class labels (integers 0 .. 2**31 - 1; ``3.0`` counts as 3), writers with
        different feature sizes, or examples that do not fit ``example_shape``. The
        message names the file, the user and the entry.
    ConfigError
        A bad ``dtype`` or ``example_shape``.
    """
    dtype = _float_dtype(dtype)
    if example_shape is not None:
        if isinstance(example_shape, int) and not isinstance(example_shape, bool):
            example_shape = (example_shape,)
        if not isinstance(example_shape, (tuple, list)) or not example_shape or not all(
                isinstance(k, int) and not isinstance(k, bool) and k >= 1
                for k in example_shape):
            raise fail("example_shape", example_shape, "must be None or a tuple of positive "
                       "integers, e.g. (1, 28, 28)")
        example_shape = tuple(example_shape)
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
        for u, X, yv in _leaf_file(f, dtype, origin):
            where = f"LEAF file {str(f)!r}: user {u!r}"
            if dim is None:
                dim = X.shape[1]
            elif X.shape[1] != dim:
                raise DataFormatError(f"{where} has {X.shape[1]} features per example; "
                                      f"earlier writers have {dim}")
            if example_shape is not None:
                if math.prod(example_shape) != dim:
                    raise DataFormatError(f"{where} has {dim} features per example, which do "
                                          f"not fit example_shape={example_shape}")
                X = X.reshape(X.shape[0], *example_shape)
            clients.append((X, yv))
            users.append(u)
    if not clients:
        raise DataFormatError(f"LEAF {'directory' if p.is_dir() else 'file'} {str(p)!r} holds "
                              "no writer; expected at least one entry in 'users'")
    return clients, users


def _leaf_file(f: Path, dtype: np.dtype, origin: dict):
    """Yield ``(user, X (n, d), y (n,))`` for each writer of one LEAF file, checking the
    structure as it goes; ``origin`` maps users already seen to their file."""
    where = f"LEAF file {str(f)!r}"
    raw = _read_text(f, "LEAF JSON")
    if not raw.strip():
        raise DataFormatError(f"{where} is empty; expected a JSON object with keys 'users', "
                              "'num_samples' and 'user_data'")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
        raise DataFormatError(f"{where} is not valid JSON: {type(exc).__name__}: "
                              f"{str(exc)[:200]}") from None
    if not isinstance(doc, dict) or "users" not in doc or "user_data" not in doc:
        raise DataFormatError(f"{where}: expected an object with keys 'users', "
                              "'num_samples' and 'user_data'")
    names, data, counts = doc["users"], doc["user_data"], doc.get("num_samples")
    # true/false can only be among the numbers if the text spells them somewhere
    may_hold_booleans = b"true" in raw or b"false" in raw
    if not isinstance(names, list) or not all(isinstance(u, str) for u in names):
        raise DataFormatError(f"{where}: 'users' must be a list of writer ids (strings)")
    if not isinstance(data, dict):
        raise DataFormatError(f"{where}: 'user_data' is a {type(data).__name__}; expected an "
                              "object mapping each user to {'x': [...], 'y': [...]}")
    if counts is not None and (not isinstance(counts, list) or len(counts) != len(names)
                               or not all(_is_count(c) for c in counts)):
        raise DataFormatError(f"{where}: 'num_samples' must be a list of {len(names)} "
                              "integers, one per user")
    for k, u in enumerate(names):
        if u in origin:
            raise DataFormatError(f"{where}: user {u!r} also appears in {str(origin[u])!r}; "
                                  "expected each writer once")
        origin[u] = f
        entry = data.get(u)
        if not isinstance(entry, dict) or "x" not in entry or "y" not in entry:
            raise DataFormatError(f"{where}: user_data[{u!r}] must be an object with keys "
                                  "'x' and 'y'")
        X = _leaf_array(entry["x"], dtype, f"{where}: user {u!r} features 'x'")
        if may_hold_booleans:  # NumPy would read [1, true] as [1, 1]
            _refuse_booleans(entry["x"], f"{where}: user {u!r} features 'x'")
            _refuse_booleans(entry["y"], f"{where}: user {u!r} labels 'y'")
        yv = _leaf_array(entry["y"], np.float64, f"{where}: user {u!r} labels 'y'")
        if X.ndim == 0 or X.shape[0] == 0 or X.size == 0:
            raise DataFormatError(f"{where}: user {u!r} features 'x' have shape {X.shape}; "
                                  "expected a non-empty list of examples, each with at least "
                                  "one number")
        X = X.reshape(X.shape[0], -1)
        if yv.ndim != 1 or yv.shape[0] != X.shape[0]:
            raise DataFormatError(f"{where}: user {u!r} has {X.shape[0]} examples but labels "
                                  f"of shape {yv.shape}; expected one label per example")
        if counts is not None and counts[k] != X.shape[0]:
            raise DataFormatError(f"{where}: user {u!r} has {X.shape[0]} examples but "
                                  f"num_samples says {counts[k]}")
        yield u, X, _leaf_labels(yv, entry["y"], f"{where}: user {u!r} labels 'y'")


def _is_count(c) -> bool:
    """A JSON integer (or an integer written as a float, 3.0)."""
    return (isinstance(c, int) and not isinstance(c, bool)) or (
        isinstance(c, float) and c.is_integer())


#: Labels are class indices 0 .. _LEAF_LABELS - 1 (FEMNIST has 62 classes): a label
#: of 1e30 is a corrupt file, not a class.
_LEAF_LABELS = 2**31


def _leaf_labels(y: np.ndarray, given: list, where: str) -> np.ndarray:
    """The finite float64 labels ``y`` (read from the JSON list ``given``) as int64 class
    labels, refusing fractions, negatives and absurd values, naming the first."""
    bad = (y != np.round(y)) | (y < 0) | (y >= _LEAF_LABELS)
    if bad.any():
        i = int(np.argmax(bad))
        raise DataFormatError(f"{where} hold {given[i]!r:.40} at index {i}; expected integer "
                              f"class labels 0..{_LEAF_LABELS - 1}")
    return y.astype(np.int64)


def _refuse_booleans(value, where: str) -> None:
    """Refuse a true or false anywhere in the JSON lists ``value``, naming the example."""
    if not isinstance(value, list):
        return
    for i, example in enumerate(value):
        stack = [example]
        while stack:
            item = stack.pop()
            if isinstance(item, bool):
                raise DataFormatError(f"{where} hold true/false (example {i}); expected "
                                      "numbers")
            if isinstance(item, list):
                stack.extend(item)


def _leaf_array(value, dtype, where: str) -> np.ndarray:
    """A JSON list of numbers as a finite array of ``dtype``."""
    try:
        # Inferred first: asking for float directly would turn "1.5" into 1.5, null
        # into NaN and true into 1.0 without a word.
        arr = np.asarray(value)
    except (ValueError, TypeError, OverflowError) as exc:
        raise DataFormatError(f"{where} are ragged: {exc}") from None
    if arr.dtype.kind not in "iuf":
        raise DataFormatError(f"{where} hold {arr.dtype} values (strings, null, true/false or "
                              "integers beyond 64 bits); expected numbers")
    _check_finite(arr, where)
    with np.errstate(over="ignore"):
        out = arr.astype(dtype)
    _check_finite(out, f"{where} (as {np.dtype(dtype).name})")
    return out
