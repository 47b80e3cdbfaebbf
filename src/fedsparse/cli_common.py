"""What the command lines share (``fedsparse`` and ``fedsparse flower``, and the search
spaces of ``fedsparse tune``): a value as a user types it, a folder option, and an
experiment found by name or by path.

Importing this module is cheap (the experiment machinery is imported when an experiment
is looked up), so the command line can import it at start.
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import re
import tomllib
from pathlib import Path

from ._resources import check_work
from ._validation import ConfigError, check_int, fail

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


def folder(text: str) -> str:
    """An ``--out`` folder as typed: refused when empty, which a path would read as the
    current folder and ``fedsparse run`` as no ``--out`` at all."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a folder, got {text!r}")
    return text


def _key(names: str) -> str:
    """A regular expression of ``KEY=`` as an error names a config key or a parameter
    (``runs[0].rounds=0 is invalid: ...``, ``num_clients=0 is invalid: ...``): ``names``
    a regular expression of the key, maybe behind ``runs[i].``, and not a part of a longer
    name (``data.seed`` is not ``seed``)."""
    return rf"(?<![\w.\[\]-])(?:runs\[\d+\]\.)?(?:{names})="


def _set_texts(args) -> list[tuple[str, object, str]]:
    """``(field, value, as typed)`` of each ``--set`` of ``args`` that ``fedsparse run``,
    ``sweep`` or ``tune`` parsed (the typed text read back from the command line;
    ``field=value`` where it cannot be)."""
    pairs = [p for p in getattr(args, "set", None) or () if isinstance(p, tuple) and len(p) == 2]
    argv = list(getattr(args, "argv", None) or ())
    typed = [argv[i + 1] if t == "--set" else t[len("--set="):]
             for i, t in enumerate(argv)
             if (t == "--set" and i + 1 < len(argv)) or t.startswith("--set=")]
    if len(typed) != len(pairs) or any(
            text.split("=", 1)[0].strip() != key
            for text, (key, _) in zip(typed, pairs, strict=True)):
        typed = [f"{key}={value!r}" for key, value in pairs]
    return [(key, value, text.strip())
            for (key, value), text in zip(pairs, typed, strict=True)]


def name_typed_options(message: str, args) -> str:
    """A ConfigError's ``message`` naming the option the user typed where it names the
    config key or parameter that option set (``KEY=VALUE is invalid: ...``):
    ``runs[0].seed=-1`` given as ``--set seed=-1`` reads ``--set seed=-1``, a grid point's
    ``rounds=0`` reads ``--grid rounds=0``, and ``num_clients=0`` given as ``--clients 0``
    reads ``--clients=0`` (the ``option_names`` a command's parser maps its options'
    parameters to). A key whose value came from a config file stays named as it is."""
    for name, _ in getattr(args, "param", None) or ():  # tune's --param NAME=SPACE
        message = message.replace(f"space {name}=", f"--param {name}=", 1)
    for field, _ in getattr(args, "grid", None) or ():  # a sweep's field, or its values
        message = message.replace(f"grid field={field!r}", f"--grid {field}", 1)
        message = message.replace(f"grid[{field!r}]=", f"--grid {field}=", 1)
    for key, option in (getattr(args, "option_names", None) or {}).items():
        message = re.sub(_key(re.escape(key)), lambda _, o=option: f"{o}=", message)
    given = [(f, v, f"--set {t}") for f, v, t in reversed(_set_texts(args))]
    given += [(f, v, f"--grid {f}={v!r}") for f, values in getattr(args, "grid", None) or ()
              for v in values]
    for field, value, typed in given:
        if isinstance(value, dict):  # an error names the table's entry, not the table
            continue
        path = field.split(":", 1)[-1].strip()
        names = "|".join(dict.fromkeys(map(re.escape, (path, path.rsplit(".", 1)[-1]))))
        pattern = _key(names) + re.escape(repr(value)) + "(?= is invalid)"
        message = re.sub(pattern, lambda _, t=typed: t, message)
    return message


def suggest(name: str, known) -> str:
    """``" Did you mean 'a' or 'b'?"`` for the names in ``known`` close to ``name``, or
    ``""``."""
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def resolve_experiment(name_or_path: str | None) -> tuple[str, dict | None, object]:
    """(name, TOML config or None, Python experiment or None) for a name or a file path."""
    from .experiments.config import load_config
    from .experiments.registry import python_experiments, toml_experiments

    name = DEFAULT_EXPERIMENT if name_or_path is None else name_or_path
    if not name.strip():
        raise fail("experiment", name, "must be a named experiment (`fedsparse list`) or a "
                   "TOML file; leave it out for the default, " + DEFAULT_EXPERIMENT)
    if any(len(part.encode()) > 255 for part in Path(name).parts):  # (the OS would refuse)
        raise fail("experiment", f"{name[:60]}... ({len(name)} characters)", "must be a "
                   "named experiment (`fedsparse list`) or a TOML file, whose name is at "
                   "most 255 bytes")
    # a folder of the experiment's name (an earlier run's --out) does not hide it
    if name.endswith(".toml") or "/" in name or Path(name).is_file():
        return Path(name).stem, load_config(name), None  # says what is wrong with the path
    tomls, pythons = toml_experiments(), python_experiments()
    if name in tomls:
        return name, load_config(tomls[name]), None
    if name in pythons:
        return name, None, pythons[name]
    folder = f" ('{name}' here is a folder, not a config file.)" if Path(name).is_dir() else ""
    raise ConfigError(f"experiment {name!r} is neither a config file nor a named experiment."
                      f"{folder}{suggest(name, [*tomls, *pythons])} `fedsparse list` shows "
                      "them all.")


#: The integer options of ``run``, ``sweep`` and ``tune`` that become a config value or
#: a run's parameter, with the least value each takes: the rule of the config key or
#: parameter it sets (``runs[i].rounds``, ``seeds``, ``jobs``, ``trials``,
#: ``sampler_seed``), checked here so that an error names the option the user typed.
_COUNT_OPTIONS = (("rounds", "--rounds", 1), ("seeds", "--seeds", 1), ("jobs", "--jobs", 1),
                  ("trials", "--trials", 1), ("sampler_seed", "--sampler-seed", 0))


def check_count_options(args) -> None:
    """Refuse a count option (``--rounds``, ``--seeds``, ``--jobs``, ``--trials``,
    ``--sampler-seed``) out of its range, naming the option, before anything runs."""
    for attr, option, minimum in _COUNT_OPTIONS:
        value = getattr(args, attr, None)
        if value is not None:
            check_int(option, value, minimum=minimum)
    seeds, rounds = getattr(args, "seeds", None), getattr(args, "rounds", None)
    if seeds is not None:  # each replicate is a round at least (a run's own check, which
        # knows the runs and warns of days, comes later)
        check_work(seeds * (rounds or 1), f"--seeds {seeds}" + (
            f" of --rounds {rounds}" if rounds else ""), what="rounds in all", warn=False)


def leaf_parser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The sub-command parser that ``argv`` reaches (``fedsparse flower app ...`` -> app)."""
    for token in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and token in subs[0].choices:
            parser = subs[0].choices[token]
    return parser


#: Options spelt another way before: every command replaces what is there with --force
#: (``data write`` and ``data describe`` called it --overwrite, which they still take,
#: hidden from --help), so another command given --overwrite names --force.
_SYNONYMS = {"--overwrite": "--force"}


def unknown_options(parser: argparse.ArgumentParser, extra: list[str],
                     argv: list[str]) -> str:
    """"unrecognized arguments: ..." with, for each unknown option, the options it may
    have meant."""
    options = [o for a in parser._actions for o in a.option_strings if o.startswith("--")
               and a.help is not argparse.SUPPRESS]  # a deprecated spelling is not offered
    notes = []
    for token in extra:
        if not token.startswith("--"):
            continue
        name = token.split("=", 1)[0]
        close = [o for o in options if o.startswith(name)] or \
            difflib.get_close_matches(name, options, n=2, cutoff=0.6)
        if _SYNONYMS.get(name) in options:
            notes.append(f"{name} is not an option of this command; it says "
                         f"{_SYNONYMS[name]}")
            continue
        if name == "--seed" and "--seeds" in options:
            after = argv[argv.index(token) + 1:argv.index(token) + 2]
            value = token.split("=", 1)[1] if "=" in token else (
                after[0] if after and after[0].isdigit() else "N")
            notes.append(f"{name} is not an option (options are never abbreviated): the run "
                         f"seed is --set seed={value}, the data seed --set data.seed={value}; "
                         "--seeds N repeats every run over N seeds")
        elif close:
            notes.append(f"{name} is not an option (options are never abbreviated); did you "
                         f"mean {' or '.join(close)}?")
    return f"unrecognized arguments: {' '.join(extra)}" + "".join(f"\n  {n}" for n in notes)
