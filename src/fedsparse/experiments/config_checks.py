"""Checks of an experiment config's tables and keys, and the errors that name what is
allowed (shared by the config reader and the builders)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from .._validation import ConfigError, fail


def did_you_mean(name, choices: Iterable) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices`` to ``name``, or ""."""
    choices = [str(c) for c in choices]
    same = [c for c in choices if c.lower() == str(name).lower()]  # "b" for "B"
    close = same or difflib.get_close_matches(str(name), choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_key(where: str, key, allowed: Iterable) -> ConfigError:
    """The error for a key ``where`` does not know, naming the allowed ones."""
    allowed = sorted(str(a) for a in allowed)
    return ConfigError(f"{where} has an unknown key {key!r}{did_you_mean(key, allowed)}; "
                       f"allowed: {', '.join(allowed)}")


def check_keys(where: str, table: dict, allowed: Iterable) -> None:
    allowed = tuple(allowed)
    for key in table:
        if key not in allowed:
            raise unknown_key(where, key, allowed)


def check_table(name: str, value) -> dict:
    if not isinstance(value, dict):
        raise fail(name, value, "must be a table")
    return value
