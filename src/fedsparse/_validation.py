"""Parameter checks with one error template.

Every public builder validates its keyword arguments here, so a user sees
``sparsity=50 is invalid: must be at most the model dimension 20`` instead of a
traceback from inside torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real


class ConfigError(ValueError):
    """A parameter has a value that is not allowed. The message names both."""


def fail(name: str, value, allowed: str) -> ConfigError:
    return ConfigError(f"{name}={value!r} is invalid: {allowed}")


def check_int(name: str, value, *, minimum: int | None = None, maximum: int | None = None,
              allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise fail(name, value, "must be an integer")
    if minimum is not None and value < minimum:
        raise fail(name, value, f"must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise fail(name, value, f"must be at most {maximum}")
    return int(value)


def check_float(name: str, value, *, positive: bool = False, nonnegative: bool = False,
                maximum: float | None = None, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise fail(name, value, "must be a finite number")
    if positive and value <= 0:
        raise fail(name, value, "must be positive")
    if nonnegative and value < 0:
        raise fail(name, value, "must be non-negative")
    if maximum is not None and value > maximum:
        raise fail(name, value, f"must be at most {maximum}")
    return float(value)


def check_choice(name: str, value, choices: Iterable):
    choices = tuple(choices)
    if value not in choices:
        raise fail(name, value, "must be one of " + ", ".join(repr(c) for c in choices))
    return value
