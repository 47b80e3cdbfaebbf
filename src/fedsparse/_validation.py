"""Parameter checks with one error template.

Every public builder validates its keyword arguments here, so a user sees
``sparsity=50 is invalid: must be at most the model dimension 20`` instead of a
traceback from inside torch.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from numbers import Integral, Real

#: The integers torch and NumPy index and count with are int64: a value beyond this range
#: cannot be a size, a count, a seed or a step counter of a run (it would overflow there).
INT64_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A parameter has a value that is not allowed. The message names both."""


class DataFormatError(ValueError):
    """A data file exists but does not hold what its format requires.

    The message names the path and what was expected. (Defined here, beside
    :class:`ConfigError`, so that the command line catches it without importing the data
    readers; :mod:`fedsparse.data` exports it.)
    """


def _is_bool(value) -> bool:
    """True for Python's and NumPy's booleans (NumPy is not imported here: a NumPy bool
    exists only if NumPy is loaded, and ``fedsparse --help`` must not load it)."""
    if isinstance(value, bool):
        return True
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.bool_)


def finite_number(value) -> bool:
    """A number, not a boolean, that a float holds finitely: not NaN, an infinity or an
    integer too large for a float (``10**400``, as an edited file may hold)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def shown(value) -> str:
    """``repr(value)`` for a short scalar; else its type (the repr of a memo-shared
    nested list from a hostile file could be gigabytes long)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"<an int of {value.bit_length()} bits>"
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        text = repr(value[:120] if isinstance(value, (str, bytes)) else value)
        return text if len(text) <= 120 else text[:117] + "..."
    return f"<{type(value).__name__}>"


def fail(name: str, value, allowed: str) -> ConfigError:
    return ConfigError(f"{name}={value!r} is invalid: {allowed}")


def expand_home(name: str, path):
    """``path`` as a :class:`~pathlib.Path` with a leading ``~`` or ``~USER`` replaced by
    that home folder, as the shell does; a ``~USER`` that names no user of this machine
    (or a ``~`` with no home folder to be found) is a ConfigError naming ``name``, where
    :meth:`pathlib.Path.expanduser` raises a bare RuntimeError."""
    from pathlib import Path

    try:
        return Path(path).expanduser()
    except RuntimeError:
        head = str(path).replace("\\", "/").split("/", 1)[0]
        raise fail(name, str(path), f"starts with {head}, which names no home folder on "
                   "this machine (no such user); give the path without it") from None


def broken_link(path) -> str | None:
    """What is wrong with ``path`` if it is a symbolic link that leads to no file, in
    words that follow "is" ("a symbolic link that loops back to itself ..."); None for
    anything else (a file, a folder, a link to one, nothing at all).

    Reading or writing such a path fails with "Too many levels of symbolic links" or "No
    such file or directory", and :meth:`pathlib.Path.exists` is False for both, so a
    message built on either says the file is missing: this names the link.
    """
    import errno
    import os
    from pathlib import Path

    path = Path(path)
    if not path.is_symlink():
        return None
    try:
        path.resolve(strict=True)
    except RuntimeError:  # a loop, to Python 3.12
        return "a symbolic link that loops back to itself (it leads to no file)"
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a loop, from Python 3.13
            return "a symbolic link that loops back to itself (it leads to no file)"
        return f"a symbolic link to {os.readlink(path)!r}, where there is no file"
    return None


def check_int(name: str, value, *, minimum: int | None = None, maximum: int | None = None,
              allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if _is_bool(value) or not isinstance(value, Integral):
        raise fail(name, value, "must be an integer")
    if minimum is not None and value < minimum:
        raise fail(name, value, f"must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise fail(name, value, f"must be at most {maximum}")
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        low = "-2**63" if minimum is None else minimum
        raise fail(name, value, f"must be an integer from {low} to 2**63 - 1, the 64-bit "
                   "integers torch and NumPy index and count with")
    return int(value)


def check_float(name: str, value, *, positive: bool = False, nonnegative: bool = False,
                maximum: float | None = None, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if _is_bool(value) or not isinstance(value, Real) \
            or not math.isfinite(value):
        raise fail(name, value, "must be a finite number")
    if positive and value <= 0:
        raise fail(name, value, "must be positive")
    if nonnegative and value < 0:
        raise fail(name, value, "must be non-negative")
    if maximum is not None and value > maximum:
        raise fail(name, value, f"must be at most {maximum}")
    return float(value)


def check_bool(name: str, value, *, allow_none: bool = False) -> bool | None:
    """A flag: True or False (NumPy's bool too). Strings such as "no" and "false" and the
    integers 0/1 are refused: Python would take "no" for True."""
    if value is None and allow_none:
        return None
    if not _is_bool(value):
        raise fail(name, value, "must be True or False (true or false in a TOML file)")
    return bool(value)


def check_seed(name: str, value) -> int:
    """A seed of the counter-based generator and of NumPy: an integer in [0, 2**63 - 1]
    (the counters are int64)."""
    if _is_bool(value) or not isinstance(value, Integral) \
            or not 0 <= value <= INT64_MAX:
        raise fail(name, value, "must be an integer from 0 to 2**63 - 1")
    return int(value)


def check_choice(name: str, value, choices: Iterable):
    choices = tuple(choices)
    if value not in choices:
        raise fail(name, value, "must be one of " + ", ".join(repr(c) for c in choices))
    return value


def check_dtype(name: str, value, *, allow_none: bool = False):
    """A floating dtype fedsparse computes in: ``torch.float32`` or ``torch.float64``.

    Half precisions are refused here rather than deep inside a run: the evaluation and
    the linear problems go through NumPy, which has no bfloat16, and float16 sums of a
    round's updates lose the small steps. (An opt-in bf16 autocast for neural networks on
    a GPU is the way to use them.)
    """
    if value is None and allow_none:
        return None
    import torch  # here, not at the top: ``fedsparse --help`` does not load torch

    if value not in (torch.float32, torch.float64):
        raise fail(name, value, "must be torch.float32 or torch.float64")
    return value
