"""LEAF JSON (FEMNIST, Shakespeare, ...), one client per writer: :func:`load_leaf`.

A file is refused at its first NUL byte, and its structure, numbers and labels are
checked writer by writer; every message names the file, the user and the entry.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from ..._validation import fail
from ._common import (
    DataFormatError,
    _check_file,
    _check_finite,
    _float_dtype,
    _read_text,
    class_labels,
)

__all__ = ["load_leaf"]


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
    unlisted = sorted(set(data) - set(names), key=str)
    if unlisted:  # a damaged or hand-edited file: its examples would vanish unsaid
        raise DataFormatError(f"{where}: user_data holds {len(unlisted)} writer(s) that "
                              f"'users' does not list, e.g. {unlisted[0]!r}; expected each "
                              "writer of user_data in 'users'")
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
        yield u, X, class_labels(yv, f"{where}: user {u!r} labels 'y'", entry["y"])


def _is_count(c) -> bool:
    """A JSON integer (or an integer written as a float, 3.0)."""
    return (isinstance(c, int) and not isinstance(c, bool)) or (
        isinstance(c, float) and c.is_integer())


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
