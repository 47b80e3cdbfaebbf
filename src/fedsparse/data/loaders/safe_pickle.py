"""A restricted unpickler for the CIFAR python batches: it runs no code and refuses
what would take more time or memory than the file could honestly describe.

A CIFAR batch is a pickled dict of a NumPy array and a list of labels. The unpickler
here admits only the globals that rebuild such an array, and refuses structures that
would take exponential time or memory to hash or expand (memo-shared nested lists and
tuples) before they are used. :func:`unpickle_batch` reads one batch file with it.
"""

from __future__ import annotations

import io
import math
import pickle

import numpy as np

from ._common import DataFormatError, _check_file

__all__ = ["unpickle_batch"]


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


def unpickle_batch(path) -> dict:
    """The dict a CIFAR batch file holds, its bytes keys decoded as latin1.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    DataFormatError
        The file is empty, corrupt, not a dict, or refused by the restricted unpickler
        (the message says why).
    """
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

