"""The search space of ``fedsparse tune``: one field's range or choices as typed
(``log(1e-4, 1e-1)``, ``int(1, 10)``, ``choice(a, b)``, ``[a, b]``) and the start-up
points spread over a space (a Latin hypercube)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .._validation import fail, finite_number
from ..cli_common import parse_value
from .config import RUN_KEYS


@dataclass(frozen=True)
class Space:
    """The values one field may take.

    ``kind`` is "log" (floats, log-uniform in [low, high]), "uniform" (floats,
    uniform), "int" (integers in [low, high]), "logint" (integers, log-uniform) or
    "choice" (one of ``choices``).
    """

    kind: str
    low: float | None = None
    high: float | None = None
    choices: tuple = ()

    def suggest(self, trial, name: str):
        """The value Optuna's ``trial`` proposes for the field ``name``."""
        if self.kind in ("log", "uniform"):
            return trial.suggest_float(name, self.low, self.high, log=self.kind == "log")
        if self.kind in ("int", "logint"):
            return trial.suggest_int(name, int(self.low), int(self.high),
                                     log=self.kind == "logint")
        return trial.suggest_categorical(name, list(self.choices))

    def first(self):
        """A value in the space (its low end or first choice), to check the config with."""
        return self.ends()[0]

    def ends(self) -> list:
        """Every value a check of the config should try: the two ends of a range, or
        every choice."""
        if self.kind == "choice":
            return list(self.choices)
        cast = int if self.kind in ("int", "logint") else float
        return [cast(self.low), cast(self.high)]

    def __str__(self) -> str:
        if self.kind == "choice":
            return f"choice({', '.join(map(repr, self.choices))})"
        ends = self.ends()
        return f"{self.kind}({ends[0]!r}, {ends[1]!r})"


_SPACE = re.compile(r"^\s*(log|uniform|int|logint|choice)\s*\((.*)\)\s*$", re.S)


def parse_space(text: str, name: str = "param") -> Space:
    """``log(1e-4, 1e-1)``, ``uniform(0, 1)``, ``int(1, 10)``, ``logint(1, 1000)``,
    ``choice(a, b, ...)`` or a TOML list ``[a, b, ...]`` (a choice).

    Raises
    ------
    ConfigError
        naming ``name`` and the text, for any other form or an empty or reversed range.
    """
    forms = ("log(LOW, HIGH), uniform(LOW, HIGH), int(LOW, HIGH), logint(LOW, HIGH), "
             "choice(A, B, ...) or [A, B, ...]")
    if not isinstance(text, str):
        raise fail(name, text, f"must be one of {forms}")
    stripped = text.strip()
    if stripped.startswith("["):
        values = parse_value(stripped)
        if not isinstance(values, list) or not values:
            raise fail(name, text, f"must be one of {forms}")
        return _choice(values, name, text)
    match = _SPACE.match(stripped)
    if not match:
        raise fail(name, text, f"must be one of {forms}")
    kind, inner = match.groups()
    raw = _split_args(inner)
    if "" in raw:  # choice(1,,2) or a comma at an end: a value left out, not ''
        raise fail(name, text, f"{kind}(...) has an empty value between commas")
    args = [parse_value(a) for a in raw]
    if kind == "choice":
        if not args:
            raise fail(name, text, "choice(...) needs at least one value")
        return _choice(args, name, text)
    if len(args) != 2 or not all(finite_number(a) for a in args):
        raise fail(name, text, f"{kind}(LOW, HIGH) takes two finite numbers")
    low, high = args
    if not low < high:
        raise fail(name, text, "needs LOW < HIGH")
    if not math.isfinite(float(high) - float(low)):  # the start points divide the width
        raise fail(name, text, f"{kind}(LOW, HIGH) needs HIGH - LOW to be a finite number")
    if kind in ("log", "logint") and low <= 0:
        raise fail(name, text, f"{kind}(...) needs LOW > 0")
    if kind in ("int", "logint") and not (float(low).is_integer() and float(high).is_integer()):
        raise fail(name, text, f"{kind}(...) takes integer bounds")
    return Space(kind, float(low), float(high))


def _choice(values: list, name: str, text: str) -> Space:
    """The choice among ``values`` (of ``choice(...)`` or ``[...]`` alike): each a finite
    number, a boolean or text."""
    if not all(isinstance(v, bool | str) or finite_number(v) for v in values):
        raise fail(name, text, "choice values must be finite numbers, booleans or text")
    return Space("choice", choices=tuple(values))


def _split_args(inner: str) -> list[str]:
    """Comma-separated arguments, commas inside quotes or brackets kept."""
    out, depth, quote, cur = [], 0, None, ""
    for ch in inner:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        cur += ch
    if cur.strip():
        out.append(cur)
    return [a.strip() for a in out]


def check_space(space) -> dict[str, Space]:
    if not isinstance(space, dict) or not space:
        raise fail("param", space, "give at least one FIELD=SPACE, e.g. "
                   "algorithm.step_size=log(1e-4, 1e-1)")
    settable = sorted(RUN_KEYS - {"label", "panel"})
    checked = {}
    for name, s in space.items():
        if not isinstance(name, str) or name.split(".")[0] not in settable:
            raise fail("param field", name, "must be a run field such as "
                       "algorithm.step_size; it starts with one of " + ", ".join(settable))
        checked[name] = s if isinstance(s, Space) else parse_space(s, f"param {name}")
    return checked


def start_points(space: dict[str, Space], n: int, seed: int) -> list[dict]:
    """``n`` start-up points spread over the space: a Latin hypercube (each field's
    range cut into n equal slices, on the log scale for log spaces, one point at the
    middle of each slice, the slices paired across fields by a permutation drawn from
    ``seed``). Spread points find the region worth modelling more surely than n random
    draws, which may all fall where the runs diverge."""
    import numpy as np

    rng = np.random.default_rng(seed)
    points: list[dict] = [{} for _ in range(n)]
    for name, s in space.items():
        order = rng.permutation(n)
        for k in range(n):
            q = (order[k] + 0.5) / n
            if s.kind == "choice":
                value = s.choices[int(q * len(s.choices))]
            elif s.kind in ("log", "logint"):
                value = math.exp(math.log(s.low) + q * (math.log(s.high) - math.log(s.low)))
            else:
                value = s.low + q * (s.high - s.low)
            if s.kind in ("int", "logint"):
                value = int(round(value))
            points[k][name] = value
    return points
