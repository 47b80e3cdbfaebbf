"""Choosing and changing the runs of an experiment config: ``--only`` and ``--run`` pick
runs by label, ``panel/label``, folder name or index, ``--set`` and ``--rounds`` change
them (also the sweeps' grid points and the tuner's trials).

Every function takes a config as :func:`~fedsparse.experiments.config.load_config` reads
it and returns a new one (or an index); :func:`~fedsparse.experiments.config.resolve_runs`
then checks and resolves the result.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

from .._validation import ConfigError, check_int, fail
from .claims import claim_labels
from .config import (
    RUN_KEYS,
    TABLE_KEYS,
    TOP_KEYS,
    check_config,
    deep_merge,
    run_label,
    run_panels,
    slugify,
)
from .config_checks import check_table, did_you_mean, unknown_key


def materialize_runs(config: dict) -> dict:
    """A copy of ``config`` with ``[defaults]`` merged into every run and emptied.

    Overrides then apply to each run as it will run (a value set on a run itself no
    longer wins over an override of the defaults).
    """
    check_config(config)
    config = copy.deepcopy(config)
    defaults = check_table("defaults", config.get("defaults", {}))
    config["runs"] = [deep_merge(defaults, run) for run in config["runs"]]
    config["defaults"] = {}
    return config


def _run_names(config: dict) -> list[tuple[str, set[str]]]:
    """("panel/label" or "label", every name a user may give) of each run, in order."""
    defaults = config.get("defaults", {}) if isinstance(config.get("defaults"), dict) else {}
    out = []
    for run in config["runs"]:
        run = deep_merge(defaults, run) if isinstance(run, dict) else {}
        label, panel = str(run_label(run)), str(run.get("panel", "") or "")
        slug = slugify(f"{panel}-{label}" if panel else label)
        out.append((f"{panel}/{label}" if panel else label, {label, f"{panel}/{label}", slug}))
    return out


def run_choices(config: dict) -> list[str]:
    """The names that tell the runs of an experiment config apart (``panel/label`` where
    a panel is set), in order."""
    return [name for name, _ in _run_names(config)]


def pick_run(config: dict, run: str | int | None) -> int:
    """The index of one run of an experiment config.

    Parameters
    ----------
    run : 0-based index, label, ``panel/label`` or run folder name (slug); None picks the
        first run.

    Raises
    ------
    ConfigError
        when ``run`` matches no run (with the closest name), or a label shared by runs of
        several panels (listing the ``panel/label`` names that tell them apart).
    """
    runs = config.get("runs")
    if not isinstance(runs, list) or not runs:
        raise ConfigError("the experiment config has no [[runs]] entry")
    if run is None:
        return 0
    if isinstance(run, int) and not isinstance(run, bool):
        return check_int("run", run, minimum=0, maximum=len(runs) - 1)
    names = _run_names(config)
    hits = [i for i, (_, keys) in enumerate(names) if str(run) in keys]
    choices = [n for n, _ in names]
    if not hits:
        every = sorted(set().union(*(keys for _, keys in names)))
        raise fail("run", run, f"must be a run of the config{did_you_mean(run, every)}: "
                   + ", ".join(choices) + f", or an index 0..{len(runs) - 1}")
    if len(hits) > 1:
        raise fail("run", run, "is ambiguous, it names several runs: "
                   + ", ".join(f"{i} ({choices[i]})" for i in hits)
                   + "; give panel/label or the index")
    return hits[0]


def select_runs(config: dict, only: Iterable[str]) -> dict:
    """A copy of ``config`` keeping the runs named in ``only``.

    Parameters
    ----------
    only : labels, ``panel/label`` or run folder names (slugs). A ``[compare]`` table
        whose reference run is not kept is dropped.

    Raises
    ------
    ConfigError
        for a name that matches no run, listing the run labels.
    """
    config = materialize_runs(config)
    names = _run_names(config)
    choices = [n for n, _ in names]
    keep = set()
    for name in only:
        hits = {i for i, (_, keys) in enumerate(names) if name in keys}
        if not hits:
            raise fail("--only", name, f"must name a run{did_you_mean(name, choices)}; runs: "
                       + ", ".join(choices))
        keep |= hits
    config["runs"] = [r for i, r in enumerate(config["runs"]) if i in keep]
    compare = config.get("compare")
    if compare and compare.get("reference") not in {run_label(r) for r in config["runs"]}:
        del config["compare"]  # its reference run is not selected: nothing to compare with
    if config.get("claims"):  # likewise the claims about runs or panels not selected
        kept = {run_label(r) for r in config["runs"]}
        panels = run_panels(config, config["runs"])
        config["claims"] = [c for c in config["claims"] if set(claim_labels(c)) <= kept
                            and ("panel" not in c or c["panel"] in panels)]
    return config


def set_path(config: dict, dotted: str, value) -> None:
    """Set ``a.b.c = value`` in a nested dict (used by ``--set`` and sweeps).

    Missing tables on the way are created; a scalar on the way is an error, and a table
    given as ``value`` is merged into an existing table, unless it names another
    ``kind``: then it replaces the table (the other kind's arguments would not apply).
    """
    keys = dotted.split(".")
    if not all(keys):
        raise fail("field", dotted, "must be dotted names such as algorithm.step_size")
    node = config
    for depth, k in enumerate(keys[:-1]):
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            where = ".".join(keys[:depth + 1])
            raise ConfigError(f"cannot set {dotted!r}: {where} is {node!r}, not a table")
    last = keys[-1]
    old = node.get(last)
    if isinstance(value, dict) and isinstance(old, dict) \
            and value.get("kind", old.get("kind")) == old.get("kind"):
        node[last] = deep_merge(old, value)
    else:
        node[last] = value


def set_run_field(run: dict, dotted: str, value) -> None:
    """``--set`` on one run: the field must be a run key and keep tables tables."""
    if not all(dotted.split(".")):
        raise fail("--set", dotted, "must be dotted names such as algorithm.step_size")
    top = dotted.split(".")[0]
    if top in TOP_KEYS and top not in RUN_KEYS:  # the config's own: --set cannot reach it
        raise fail("--set", dotted, f"{top!r} is a key of the config itself, and --set sets "
                   "fields of its runs (such as rounds or algorithm.step_size); to change "
                   f"{top!r}, edit a copy of the config (fedsparse show NAME > my.toml)")
    if top not in RUN_KEYS:
        raise unknown_key("a run", top, RUN_KEYS)
    if top in TABLE_KEYS and "." not in dotted and value is not None \
            and not isinstance(value, dict):
        raise fail(dotted, value, f"[{top}] is a table: set one of its keys, e.g. "
                   f"--set {top}.{'kind' if top != 'algorithm' else 'step_size'}=...")
    set_path(run, dotted, value)


def apply_overrides(config: dict, assignments: Iterable[tuple[str, object]] = (),
                    rounds: int | None = None) -> dict:
    """A copy of ``config`` with ``--set`` assignments and ``--rounds`` applied.

    Parameters
    ----------
    assignments : ``(field, value)`` pairs; ``field`` is a dotted run field
        (``algorithm.step_size``) applied to every run, or ``LABEL:field`` applied to the
        runs labelled ``LABEL`` only (or named ``panel/label``, or by their folder).
    rounds : the number of rounds of every run (None: unchanged).
    """
    config = materialize_runs(config)
    names = _run_names(config)
    for field, value in assignments or ():
        targets = config["runs"]
        if ":" in field:
            label, field = field.split(":", 1)
            targets = [r for r, (_, keys) in zip(config["runs"], names, strict=True)
                       if label in keys]
            if not targets:
                choices = [n for n, _ in names]
                every = sorted(set().union(*(keys for _, keys in names)))
                raise fail("--set", f"{label}:{field}", f"{label!r} is not a run label"
                           f"{did_you_mean(label, every)}; runs: {', '.join(choices)}")
        for run in targets:
            set_run_field(run, field.strip(), value)
    if rounds is not None:
        for run in config["runs"]:
            run["rounds"] = rounds
    return config
