"""LibSVM / svmlight text (E2006-tfidf, RCV1, MNIST, ...): :func:`load_libsvm` reads a
file into a SciPy CSR matrix and a target vector.

A malformed file (a bad token, NaN or infinite values, an index repeated within a line,
feature indices that are not integers or that would make an absurdly wide matrix) raises
:class:`~fedsparse.data.loaders.DataFormatError` naming the path, line and token.
"""

from __future__ import annotations

import os
import re

import numpy as np
import scipy.sparse as sp

from ..._validation import check_choice, fail
from ._common import DataFormatError, _float_dtype, _read_text

__all__ = ["MAX_LIBSVM_FEATURES", "load_libsvm"]


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


def _libsvm_locate_error(path, lines: list[bytes], first_line: list[int],
                         cut_line: int | None = None) -> DataFormatError:
    """Slow pass used only after the bulk parse failed: find the first bad token.

    ``cut_line``: the file's last line when it ends without a newline; a bad token there
    is said to be perhaps where the file was cut short (a copy or download that stopped
    mid-line leaves ``3:`` or ``3`` at the end).
    """
    for line, lineno in zip(lines, first_line, strict=True):
        cut = (" (the file ends inside this line, without a newline: was it cut short?)"
               if lineno == cut_line else "")
        toks = line.split()
        label = toks[0]
        try:
            if b"_" in label:
                raise ValueError(label)
            float(label)
        except ValueError:
            return DataFormatError(f"LibSVM file {os.fspath(path)!r}, line {lineno}: target "
                                   f"{label.decode(errors='replace')!r} is not a number{cut}")
        feats = toks[1:]
        if feats and feats[0].startswith(b"qid:"):
            feats = feats[1:]
        for tok in feats:
            idx, colon, val = tok.partition(b":")
            bad = not colon or not idx or not val or b":" in val or b"_" in tok
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
                    f"number value{cut}")
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
        With sorted column indices.
    y : ndarray of float64, shape (n,)
        The targets (class labels such as -1/+1 or 0..9, or regression values).
        ``qid`` fields are ignored.

    Raises
    ------
    FileNotFoundError, DataFormatError
        A missing file; a file with no example; a bad token (the message names the
        path, line number and token), e.g. an index that is not a non-negative integer;
        a NaN or infinite target or value; an index repeated within a line; indices
        beyond ``n_features``; an index 0
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
    # a last line without a newline may be where a copy stopped; only said when that line
    # is bad too (many files written by hand or by scripts lack the final newline)
    cut_line = len(raw_lines) if raw and not raw.endswith((b"\n", b"\r")) else None
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
        if any(b"_" in line for line in lines):  # Python's 1_000, which libsvm tools refuse
            raise ValueError("a number with an underscore")
        y = np.array(labels, dtype=np.float64)
        idx, data = _parse_pairs(feats)
    except (ValueError, OverflowError):
        raise _libsvm_locate_error(path, lines, linenos, cut_line) from None
    total = int(nnz.sum())
    if idx.shape[0] != total or (total and (idx.min() < 0 or idx.max() > MAX_LIBSVM_FEATURES)):
        raise _libsvm_locate_error(path, lines, linenos, cut_line)
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
    X.sum_duplicates()  # sorts the column indices; merges (and so counts) repeated ones
    if X.nnz != total:
        raise _repeated_index(where, cols, nnz, np.diff(X.indptr), linenos, offset)
    return X, y


def _repeated_index(where: str, cols: np.ndarray, nnz: np.ndarray, kept: np.ndarray,
                    linenos: list[int], offset: int) -> DataFormatError:
    """The error for the first line holding an index twice (``kept``: its entries once
    repeated ones are merged); a reader that summed them would change the data silently."""
    row = int(np.argmax(kept < nnz))
    start = int(nnz[:row].sum())
    seen: set[int] = set()
    for c in cols[start:start + int(nnz[row])].tolist():
        if c in seen:
            break
        seen.add(c)
    return DataFormatError(f"{where}, line {linenos[row]}: feature index {c + offset} appears "
                           "more than once; each index may appear once per line")


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
