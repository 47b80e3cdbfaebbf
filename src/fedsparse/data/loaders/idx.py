"""IDX, the format of MNIST, Fashion-MNIST and EMNIST: :func:`read_idx` reads one file,
:func:`load_idx` an image file and its label file.

A hostile file cannot make the reader allocate much more than the file could honestly
hold: the header is checked before the data are read, and decompression stops at the
size the header declares.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ..._validation import check_bool
from ._common import (
    DataFormatError,
    _check_file,
    _check_finite,
    _read_upto,
    _Stream,
    class_labels,
)

__all__ = ["load_idx", "read_idx"]


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
        if not 1 <= ndim <= 32:  # (NumPy's own limit is 64; an image file has 1 to 4)
            raise DataFormatError(f"{where} declares {ndim} dimensions; expected 1 to 32")
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


def _integer_labels(y: np.ndarray, where: str) -> np.ndarray:
    """``y`` as int64 class labels, refusing non-integer types, fractions, NaN, inf and
    negatives."""
    if y.dtype.kind not in "iuf":
        raise DataFormatError(f"{where} holds labels of type {y.dtype}; expected integers")
    if y.dtype.kind == "f":
        _check_finite(y, where, "label")
    return class_labels(y, where)


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
