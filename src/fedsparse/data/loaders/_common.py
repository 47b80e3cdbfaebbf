"""What every reader of :mod:`fedsparse.data.loaders` shares: the error it raises, the
check that a file exists, decompression recognised by a file's first bytes (gzip, bzip2,
xz, never the suffix), bounded reading, and the checks of values and dtypes.

Text files are refused at their first NUL byte (no text format here holds one), so a
decompression bomb of zeros stops at its first chunk instead of filling the memory.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import zlib
from pathlib import Path

import numpy as np

from ..._validation import DataFormatError, fail

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


#: Labels are class indices 0 .. MAX_CLASS_LABEL (FEMNIST has 62 classes): a label of
#: -1 or 1e30 is a corrupt file, not a class, and would fail deep inside a loss.
MAX_CLASS_LABEL = 2**31 - 1


def class_labels(y: np.ndarray, where: str, shown=None) -> np.ndarray:
    """The finite labels ``y`` as int64 class labels, refusing fractions, negatives and
    absurd values, naming the first (as ``shown[i]``, the value the file wrote, if given)."""
    bad = (y != np.round(y)) | (y < 0) | (y > MAX_CLASS_LABEL)
    if bad.any():
        i = int(np.argmax(bad))
        value = shown[i] if shown is not None else y[i].item()
        raise DataFormatError(f"{where}: label {value!r:.40} at index {i} is not a class "
                              f"label; expected whole numbers 0..{MAX_CLASS_LABEL}")
    return y.astype(np.int64)
