"""The round records a checkpoint holds, and how its checks name what they refuse.

Records are saved as one string of JSON lines (:class:`RecordLines`: torch.save pickles
through a Python callback per object, which made a long run of cheap rounds spend most
of its time rewriting its records) and checked on resume (:func:`checked_records`), as
are the lists of dicts that checkpoints of format 3 and earlier held. :class:`Unlike`,
:func:`kind` and :func:`~fedsparse._validation.shown` (imported here) serve every check of
:mod:`fedsparse.checkpoints`.
"""

from __future__ import annotations

import json

import numpy as np
import torch

from ._validation import ConfigError, shown
from .metric_names import record_problem


class Unlike(Exception):
    """An entry unlike the fresh state (the message names it; the caller adds the file)."""


def kind(value) -> str:
    """``"a list"``, ``"an int"``, ``"a tensor"``: what a refused value is."""
    name = "tensor" if isinstance(value, torch.Tensor) else type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


class RecordLines:
    """A run's round records as the string a checkpoint holds: one JSON line each.

    Each record is encoded once, at the first save after its round (a record is not
    changed after its round), so saving costs one string join rather than encoding every
    round again. NumPy and 0-d torch numbers a callback added are saved as Python numbers.
    """

    def __init__(self) -> None:
        self._lines: list[str] = []

    def text(self, records: list[dict]) -> str:
        """The JSON lines of ``records`` (those of the earlier saves and the new ones)."""
        if len(records) < len(self._lines):  # a shorter history: encode it afresh
            self._lines.clear()
        self._lines.extend(_json_line(r) for r in records[len(self._lines):])
        return "".join(self._lines)


def _json_line(record: dict) -> str:
    try:
        return json.dumps(record, default=_number) + "\n"
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"round record {shown(record.get('round'))} cannot be saved in a "
                          f"checkpoint: {exc}; a record holds numbers, strings, None and "
                          "lists or dicts of them (a callback that adds fields must add "
                          "such values)") from None


def _number(value):
    """A NumPy scalar or 0-d tensor as a Python number (json.dumps's ``default``)."""
    if isinstance(value, (np.generic, torch.Tensor)) and getattr(value, "ndim", 1) == 0:
        return value.item()
    raise TypeError(f"a {type(value).__name__} is not a number, string or list")


def _decoded(text: str) -> list:
    """The records of a checkpoint's JSON lines."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    records = []
    for i, line in enumerate(lines, start=1):
        try:
            records.append(json.loads(line))
        except ValueError as exc:  # (RecursionError: the caller's "nested too deeply")
            raise Unlike(f"record line {i} is not JSON ({exc})") from None
    return records


def checked_records(records, initial, done: int, budget: list) -> tuple[list, dict]:
    """``(records, initial)`` as plain lists and dicts, refused (:class:`Unlike`) unless
    they are one dict per completed round (JSON lines, or a list as format 3 held them)
    and the round-0 record; ``budget`` as :func:`_plain`'s."""
    if isinstance(records, str):
        records = _decoded(records)
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise Unlike("records is not a list of per-round dicts")
    if len(records) != done:
        raise Unlike(f"it is at round {done} but holds {len(records)} round records")
    for i, rec in enumerate(records, start=1):
        if rec.get("round") != i:
            raise Unlike(f"record {i} says round {shown(rec.get('round'))}, expected {i}")
    if not isinstance(initial, dict) or initial.get("round") != 0:
        raise Unlike("its initial record is not the round-0 record")
    plain = [_plain(f"records[{i}]", rec, budget) for i, rec in enumerate(records)]
    plain_initial = _plain("initial", initial, budget)
    # (after the copies, whose budget bounds what a hostile file's entries expand to)
    for name, rec in [("the initial record", plain_initial),
                      *((f"record {i}", r) for i, r in enumerate(plain, start=1))]:
        problem = record_problem(rec)
        if problem is not None:  # a checksum detects damage, not an edit
            raise Unlike(f"{name}: {problem}")
    return plain, plain_initial


def _plain(name: str, value, budget: list):
    """A copy of a record value made of None, bool, int, float, str, lists and dicts with
    string keys; ``budget[0]`` counts down the entries copied (shared lists count once
    per reference)."""
    budget[0] -= 1
    if budget[0] < 0:
        raise Unlike("its records hold more entries than a file of its size can "
                     "(one list referenced over and over?)")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(f"{name}[{i}]", v, budget) for i, v in enumerate(value)]
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise Unlike(f"{name} has a key {key!r} that is not a string")
        return {k: _plain(f"{name}[{k!r}]", v, budget) for k, v in value.items()}
    raise Unlike(f"{name} is {kind(value)}; a record holds numbers, strings, None and "
                 "lists or dicts of them")
