"""What the command lines share (``fedsparse`` and ``fedsparse flower``, and the search
spaces of ``fedsparse tune``): a value as a user types it, and an experiment found by
name or by path.

Importing this module is cheap (the experiment machinery is imported when an experiment
is looked up), so the command line can import it at start.
"""

from __future__ import annotations

import datetime
import difflib
import re
import tomllib
from pathlib import Path

from ._validation import ConfigError

#: What ``fedsparse run`` runs without a name.
DEFAULT_EXPERIMENT = "fedht-default"
#: A number TOML does not accept but a user types (".5", "1.", "1E3").
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def parse_value(text: str):
    """A ``--set`` value: a TOML value (``3``, ``0.1``, ``1e-3``, ``true``, ``"text"``,
    ``[1, 2]``, ``{kind = "bernoulli", probability = 0.5}``); anything else is the text
    itself as a string (``auto``, ``/path/to/file``)."""
    text = text.strip()
    if text in ("True", "False"):  # Python spelling of TOML's true/false
        return text == "True"
    try:
        doc = tomllib.loads(f"v = {text}")
    except tomllib.TOMLDecodeError:
        doc = None
    # a date, or a second line smuggling in more keys, is not a --set value: keep the text
    if doc is not None and len(doc) == 1 and not isinstance(
            doc["v"], datetime.date | datetime.time):
        return doc["v"]
    if _NUMBER.fullmatch(text):
        return float(text)
    return text


def suggest(name: str, known) -> str:
    """``" Did you mean 'a' or 'b'?"`` for the names in ``known`` close to ``name``, or
    ``""``."""
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def resolve_experiment(name_or_path: str | None) -> tuple[str, dict | None, object]:
    """(name, TOML config or None, Python experiment or None) for a name or a file path."""
    from .experiments.config import load_config
    from .experiments.registry import python_experiments, toml_experiments

    name = name_or_path or DEFAULT_EXPERIMENT
    if name.endswith(".toml") or "/" in name or Path(name).exists():
        return Path(name).stem, load_config(name), None  # says what is wrong with the path
    tomls, pythons = toml_experiments(), python_experiments()
    if name in tomls:
        return name, load_config(tomls[name]), None
    if name in pythons:
        return name, None, pythons[name]
    raise ConfigError(f"experiment {name!r} is neither a config file nor a named experiment."
                      f"{suggest(name, [*tomls, *pythons])} `fedsparse list` shows them all.")
