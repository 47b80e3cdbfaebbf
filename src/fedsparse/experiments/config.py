"""Experiment configs (TOML): schema, defaults merging and object construction.

Schema::

    title = "..."            # one line
    description = "..."      # what it shows
    paper_claim = "..."      # what the paper reports, for the results page
    [defaults]               # deep-merged into every run
    rounds = 100
    seed = 0
    clients_per_round = 10   # optional
    dtype = "float64"        # optional, default float32
    device = "cuda"          # optional: "cpu" (default), "cuda", "cuda:N" or "auto"
    channel = {kind = "bernoulli", probability = 0.8}   # optional
    eval_clients = 200       # optional: evaluate a seeded sample of clients (estimates)
    client_state_memory = 0  # optional: bytes of per-client state kept in memory; beyond,
                             # memory-mapped files (default: half the free memory)
    [defaults.data]          # kind = a generator in fedsparse.data.GENERATORS + kwargs
    [defaults.problem]       # kind = least_squares | logistic | softmax | neural + kwargs
                             # (neural: model = {kind = "mlp", ...}, path, chunk_clients,
                             # autocast = "bf16" for a bfloat16 forward on a GPU)
    [defaults.algorithm]     # kind = a key of fedsparse.algorithms.REGISTRY + kwargs
    # a relative file path (data.path, a file dictionary's path) is read against the
    # working directory; the saved config.toml names it absolute
    [[runs]]
    label = "FedIter-HT"     # legend entry and output folder name
    panel = "regression"     # one figure panel per distinct value
    [runs.algorithm]
    kind = "fed_iter_ht"
    [plot]
    y = ["objective"]        # metrics on the y axis (one figure each; [] = no figures)
    x = ["round", "bytes_total"]
    logy = true
    band = "std"             # with --seeds: "std" or "ci95" (95% interval of the mean)
    [compare]                # optional: rounds each run needs to reach a reference
    reference = "Distributed-IHT"   # a run label
    at_rounds = [100]        # the reference's rounds whose value is the target
    metric = "objective"
    [[claims]]               # optional: the paper's claims as checks with a verdict
    text = "..."             # (see fedsparse.experiments.claims)
    kind = "reaches"         # or "order"

``device`` may also stand at the top level (every run that sets none); a run's own (or
its ``[defaults]``) wins, and ``fedsparse run/sweep/tune --device`` wins over both.

A run may also hold a ``[runs.flower]`` (or ``[defaults.flower]``) table: Flower-only
settings read by ``fedsparse flower app`` (see :mod:`fedsparse.flower.job`).

The whole file is checked before anything runs (:func:`check_config`,
:func:`resolve_runs`): an unknown key or table anywhere, a value of the wrong type or a
metric no run records is a :class:`~fedsparse.ConfigError` naming the key, with a
did-you-mean suggestion where a known name is close.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import tomllib
from pathlib import Path

import torch

from .._validation import (
    ConfigError,
    broken_link,
    check_choice,
    check_float,
    check_int,
    expand_home,
    fail,
)
from ..devices import DEFAULT_DEVICE, check_device_spec
from ..metric_names import METRICS as METRICS  # every field a record can hold

# the builders, importable from here as they always were
from .builders import CHANNEL_KEYS as CHANNEL_KEYS
from .builders import build_algorithm as build_algorithm
from .builders import build_channel as build_channel
from .builders import build_data as build_data
from .builders import build_problem as build_problem
from .builders import builder_arguments as builder_arguments
from .claims import check_claim_labels, check_claims
from .config_checks import check_keys, check_table, did_you_mean, unknown_key

DTYPES = {"float32": torch.float32, "float64": torch.float64}
RUN_KEYS = {"label", "panel", "rounds", "seed", "clients_per_round", "dtype", "channel", "data",
            "problem", "algorithm", "checkpoint_every", "flower", "device", "eval_clients",
            "client_state_memory"}
#: Keys of a run that hold a table (``--set algorithm=3`` would replace one by a scalar).
TABLE_KEYS = ("data", "problem", "algorithm", "channel", "flower")
#: Top-level keys of an experiment config. ``short_title`` and ``fstar_rounds`` are read
#: by the Figure 6 experiments (:mod:`fedsparse.experiments.real_data`).
TOP_KEYS = ("title", "short_title", "description", "paper_claim", "fstar_rounds", "device",
            "defaults", "runs", "plot", "compare", "claims")
PLOT_KEYS = ("y", "x", "logy", "band")
#: The ``[flower]`` table of a run (how a Flower server runs it as a job,
#: :mod:`fedsparse.flower.job`) and its defaults: its keys are checked here, where a
#: config is read, and need no Flower installed.
FLOWER_DEFAULTS: dict = {"round_timeout": 120.0, "wait_timeout": 120.0, "min_nodes": 0,
                         "evaluate_every": 0, "out_dir": "", "poll_interval": 0.2,
                         "max_update_norm": 0.0, "max_update_ratio": 100.0, "resume": False}
COMPARE_KEYS = ("reference", "at_rounds", "metric")
#: The bounds of ``flower.round_timeout``, in seconds: a tenth of a second to a week.
#: Outside them the value is a unit mistake (milliseconds or minutes written as seconds),
#: not a wait anyone means: flwr 1.41 refuses a message whose expiry (round_timeout + 60 s,
#: ``fedsparse.flower.messaging.message_ttl``) is past the year 9999, so 1e12 s failed every
#: message, and 1e-9 s waited for no reply. A real deployment needs several seconds (a
#: SuperNode polls for work every 3 s when idle); the in-process grid answers in less.
ROUND_TIMEOUT_RANGE = (0.1, 7 * 24 * 3600.0)
#: The bounds of ``flower.wait_timeout``, in seconds: no wait (the nodes connected at the
#: start, at once) to a week, as long as ``flower.round_timeout`` may be. A longer one is a
#: unit mistake, not a wait anyone means: Python's clock takes 1e12 s, so a server short of
#: nodes would sit idle for ever instead of starting with those it has.
WAIT_TIMEOUT_RANGE = (0.0, 7 * 24 * 3600.0)


def load_config(path: str | Path) -> dict:
    """Read a TOML experiment file, with a clear error naming the file and the problem."""
    path = Path(path)
    link = broken_link(path)
    if link:  # not "does not exist": the link is there to be seen
        raise ConfigError(f"config file {str(path)!r} is {link}")
    if not path.exists():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} is not a file")
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"config file {str(path)!r} cannot be read: {exc.strerror}") from None


def deep_merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in override.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) \
            else copy.deepcopy(v)
    return out


def check_metric(name: str, value) -> str:
    """``value`` is a field that round records can hold (see :data:`METRICS`)."""
    if not isinstance(value, str) or value not in METRICS:
        raise fail(name, value, f"must be a recorded metric{did_you_mean(value, METRICS)}: "
                   + ", ".join(METRICS))
    return value


def _metric_list(name: str, value) -> list[str]:
    if isinstance(value, str) or not isinstance(value, list):
        raise fail(name, value, 'must be a list of metric names, e.g. ["objective"]')
    return [check_metric(f"{name}[{i}]", v) for i, v in enumerate(value)]


def check_config(config: dict) -> dict:
    """Check an experiment config's top level, ``[plot]`` and ``[compare]``.

    Parameters
    ----------
    config : a parsed experiment TOML file (see the module docstring).

    Returns
    -------
    dict
        ``config`` itself (not copied).

    Raises
    ------
    ConfigError
        naming the first unknown key or table (with the closest known one), or the key
        whose value has the wrong type.
    """
    if not isinstance(config, dict):
        raise fail("config", type(config).__name__, "must be a table (a parsed TOML file)")
    for key in config:
        if key not in TOP_KEYS:
            hint = ""
            if key == "flower":  # the one table other commands read, so say where it goes
                hint = ("; Flower settings of an experiment config go in [defaults.flower] "
                        "(every run) or [runs.flower] (one run)")
            what = f"table [{key}]" if isinstance(config[key], dict) else f"key {key!r}"
            close = difflib.get_close_matches(key, TOP_KEYS, n=1, cutoff=0.6)
            if close:
                hint = f" (did you mean {close[0]!r}?)" + hint
            raise ConfigError(f"unknown top-level {what}{hint}; allowed: "
                              f"{', '.join(TOP_KEYS)}")
    for key in ("title", "short_title", "description", "paper_claim"):
        if key in config and not isinstance(config[key], str):
            raise fail(key, config[key], "must be a string")
    if "fstar_rounds" in config:
        check_int("fstar_rounds", config["fstar_rounds"], minimum=1)
    if "device" in config:
        check_device_spec("device", config["device"])
    for key in check_table("defaults", config.get("defaults", {})):
        if key not in RUN_KEYS:  # named where it was written, not in the runs it reaches
            raise unknown_key("[defaults]", key, RUN_KEYS)
    runs = config.get("runs")
    if not runs:
        raise ConfigError("an experiment config needs at least one [[runs]] entry")
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise fail("runs", runs, "must be an array of tables ([[runs]] entries)")
    plot = check_table("plot", config.get("plot", {}))
    check_keys("[plot]", plot, PLOT_KEYS)
    for axis in ("y", "x"):
        if axis in plot:
            _metric_list(f"plot.{axis}", plot[axis])
    if not isinstance(plot.get("logy", False), bool):
        raise fail("plot.logy", plot["logy"], "must be true or false")
    check_choice("plot.band", plot.get("band", "std"), ("std", "ci95"))
    compare = check_table("compare", config.get("compare", {}))
    if compare:
        check_keys("[compare]", compare, COMPARE_KEYS)
        if not isinstance(compare.get("reference"), str):
            raise fail("compare.reference", compare.get("reference"),
                       "must name the label of the run to compare with")
        at = compare.get("at_rounds", [])
        if not isinstance(at, list) or not at:
            raise fail("compare.at_rounds", at, "must be a non-empty list of rounds")
        for i, r in enumerate(at):
            check_int(f"compare.at_rounds[{i}]", r, minimum=1)
        check_metric("compare.metric", compare.get("metric", "objective"))
    if "claims" in config:
        check_claims(config["claims"], check_metric)
        check_claim_labels(config["claims"], {run_label(r) for r in runs},
                           run_panels(config, runs))
    return config


def run_panels(config: dict, runs: list[dict]) -> set[str]:
    """The panels of ``runs`` as :func:`resolve_runs` names them ("" for none), a run's own
    ``panel`` or the ``[defaults]`` one."""
    default = config.get("defaults", {}).get("panel", "")
    return {str(r.get("panel", default) or "") for r in runs}


def run_label(run: dict) -> str:
    """A run's label: its own, or its algorithm's kind (what :func:`resolve_runs` uses)."""
    label = run.get("label")
    if label is None and isinstance(run.get("algorithm"), dict):
        label = run["algorithm"].get("kind")
    return label


def resolve_runs(config: dict) -> list[dict]:
    """Every run with the defaults merged in, validated.

    Raises
    ------
    ConfigError
        for an unknown key anywhere in the config, a run field of the wrong type, two
        runs with the same panel and label, or a ``[compare]`` reference that is not a
        run label.
    """
    check_config(config)
    defaults = config.get("defaults", {})
    out: list[dict] = []
    seen: dict[str, dict] = {}  # folder name -> the run that has it
    for i, run in enumerate(config["runs"]):
        run = deep_merge(defaults, run)
        for key in run:
            if key not in RUN_KEYS:
                raise unknown_key(f"runs[{i}]", key, RUN_KEYS)
        for table in ("data", "problem", "algorithm"):
            if table not in run:
                raise ConfigError(f"runs[{i}] needs a [{table}] table with a kind "
                                  f"(in [defaults.{table}] or [runs.{table}])")
            check_table(f"runs[{i}].{table}", run[table])
            if "kind" not in run[table]:
                raise ConfigError(f"runs[{i}] needs {table}.kind")
        for table in ("channel", "flower"):
            if run.get(table) is not None:
                check_table(f"runs[{i}].{table}", run[table])
        if run.get("flower"):
            _check_flower(f"runs[{i}].flower", run["flower"])
        _absolute_paths(run)
        run.setdefault("label", run["algorithm"]["kind"])
        run.setdefault("panel", "")
        for key in ("label", "panel"):
            if not isinstance(run[key], str):
                raise fail(f"runs[{i}].{key}", run[key], "must be a string")
        if not run["label"].strip():
            raise fail(f"runs[{i}].label", run["label"], "must not be empty: it names the "
                       "run in the legends, the summary and --only")
        check_int(f"runs[{i}].rounds", run.setdefault("rounds", 100), minimum=1)
        check_int(f"runs[{i}].seed", run.setdefault("seed", 0), minimum=0)
        check_int(f"runs[{i}].clients_per_round", run.get("clients_per_round"), minimum=1,
                  allow_none=True)
        check_int(f"runs[{i}].checkpoint_every", run.get("checkpoint_every", 10), minimum=1)
        check_int(f"runs[{i}].eval_clients", run.get("eval_clients"), minimum=1,
                  allow_none=True)
        check_int(f"runs[{i}].client_state_memory", run.get("client_state_memory"), minimum=0,
                  allow_none=True)
        check_choice(f"runs[{i}].dtype", run.setdefault("dtype", "float32"), DTYPES)
        run["device"] = check_device_spec(f"runs[{i}].device", run.get(
            "device", config.get("device", DEFAULT_DEVICE)))
        slug = slugify(f"{run['panel']}-{run['label']}" if run["panel"] else run["label"])
        if slug in seen:
            other = seen[slug]
            same = (other["panel"], other["label"]) == (run["panel"], run["label"])
            raise ConfigError(
                f"runs[{i}]: two runs share panel and label ({run['panel']!r}, {run['label']!r})"
                if same else
                f"runs[{i}]: its panel and label ({run['panel']!r}, {run['label']!r}) give "
                f"the folder name {slug!r}, as those of another run ({other['panel']!r}, "
                f"{other['label']!r}) do (folder names keep only letters and digits): "
                "change one label")
        seen[slug] = run
        run["slug"] = slug
        out.append(run)
    compare = config.get("compare")
    if compare:
        labels = sorted({r["label"] for r in out})
        ref = compare["reference"]
        if ref not in labels:
            raise fail("compare.reference", ref, f"must be a run label"
                       f"{did_you_mean(ref, labels)}: {', '.join(labels)}")
    return out


def _absolute_paths(run: dict) -> None:
    """Make the files a run reads (``data.path``, a file ``algorithm.dictionary``'s
    ``path``) absolute paths, in place.

    A relative path is read against the working directory; the config saved with the
    results (which ``--resume`` reads again, perhaps from another directory) must name
    the same file.
    """
    for name, table in (("data.path", run["data"]),
                        ("algorithm.dictionary.path", run["algorithm"].get("dictionary"))):
        path = table.get("path") if isinstance(table, dict) else None
        if isinstance(path, (str, os.PathLike)) and str(path):
            table["path"] = str(expand_home(name, path).absolute())


def _check_flower(name: str, table: dict) -> None:
    check_keys(f"[{name}]", table, FLOWER_DEFAULTS)
    check_flower_values({**FLOWER_DEFAULTS, **table})


def _seconds(flower: dict, key: str, bounds: tuple[float, float], meaning: str) -> float:
    """``flower[key]``, a number of seconds within ``bounds`` (``meaning`` says them)."""
    low, high = bounds
    value = check_float(f"flower.{key}", flower[key], positive=low > 0, nonnegative=True)
    if not low <= value <= high:
        raise fail(f"flower.{key}", flower[key], f"must be from {low:g} to {high:g} seconds "
                   f"({meaning})")
    return value


def check_flower_values(flower: dict) -> None:
    """The values of a complete ``[flower]`` table (the defaults filled in)."""
    timeout = _seconds(flower, "round_timeout", ROUND_TIMEOUT_RANGE,
                       "a tenth of a second to a week; a real deployment needs several, a "
                       "SuperNode polling for work every 3 s")
    _seconds(flower, "wait_timeout", WAIT_TIMEOUT_RANGE,
             "no wait to a week; the server starts with the nodes connected by then")
    check_int("flower.min_nodes", flower["min_nodes"], minimum=0)
    check_float("flower.poll_interval", flower["poll_interval"], positive=True,
                maximum=timeout)
    check_int("flower.evaluate_every", flower["evaluate_every"], minimum=-1)
    check_float("flower.max_update_norm", flower["max_update_norm"], nonnegative=True)
    ratio = check_float("flower.max_update_ratio", flower["max_update_ratio"], nonnegative=True)
    if 0 < ratio < 1:
        raise fail("flower.max_update_ratio", ratio, "must be 0 (no bound) or at least 1: it "
                   "multiplies the round's median update distance")
    if not isinstance(flower["out_dir"], str):
        raise fail("flower.out_dir", flower["out_dir"], 'must be a folder path as a string '
                   '("" = save nothing)')
    if not isinstance(flower["resume"], bool):
        raise fail("flower.resume", flower["resume"], "must be true or false")
    if flower["resume"] and not flower["out_dir"]:
        raise fail("flower.resume", True, "needs flower.out_dir, the folder whose checkpoint "
                   "the run continues")


def slugify(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9]+", "-", text).strip("-").lower() or "run"
