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
    channel = {kind = "bernoulli", probability = 0.8}   # optional
    [defaults.data]          # kind = a generator in fedsparse.data.GENERATORS + kwargs
    [defaults.problem]       # kind = least_squares | logistic | softmax + kwargs
    [defaults.algorithm]     # kind = a key of fedsparse.algorithms.REGISTRY + kwargs
    [[runs]]
    label = "FedIter-HT"     # legend entry and output folder name
    panel = "regression"     # one figure panel per distinct value
    [runs.algorithm]
    kind = "fed_iter_ht"
    [plot]
    y = ["objective"]        # metrics on the y axis (one figure each)
    x = ["round", "bytes_total"]
    logy = true
"""

from __future__ import annotations

import copy
import re
import tomllib
from pathlib import Path

import torch

from .._validation import ConfigError, check_choice, fail

DTYPES = {"float32": torch.float32, "float64": torch.float64}
RUN_KEYS = {"label", "panel", "rounds", "seed", "clients_per_round", "dtype", "channel", "data",
            "problem", "algorithm", "checkpoint_every"}


def load_config(path: str | Path) -> dict:
    """Read a TOML experiment file, with a clear error naming the file and the problem."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {exc}") from None


def deep_merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in override.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) \
            else copy.deepcopy(v)
    return out


def set_path(config: dict, dotted: str, value) -> None:
    """Set ``a.b.c = value`` in a nested dict (used by ``--set`` and sweeps)."""
    keys = dotted.split(".")
    node = config
    for k in keys[:-1]:
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            raise ConfigError(f"cannot set {dotted!r}: {k!r} is not a table")
    node[keys[-1]] = value


def resolve_runs(config: dict) -> list[dict]:
    """Every run with the defaults merged in, validated."""
    runs = config.get("runs")
    if not runs:
        raise ConfigError("an experiment config needs at least one [[runs]] entry")
    defaults = config.get("defaults", {})
    out, seen = [], set()
    for i, run in enumerate(runs):
        run = deep_merge(defaults, run)
        unknown = set(run) - RUN_KEYS
        if unknown:
            raise ConfigError(f"runs[{i}] has unknown keys {sorted(unknown)}; allowed: "
                              f"{sorted(RUN_KEYS)}")
        for table in ("data", "problem", "algorithm"):
            if "kind" not in run.get(table, {}):
                raise ConfigError(f"runs[{i}] needs {table}.kind")
        run.setdefault("label", run["algorithm"]["kind"])
        run.setdefault("panel", "")
        run.setdefault("rounds", 100)
        run.setdefault("seed", 0)
        check_choice(f"runs[{i}].dtype", run.setdefault("dtype", "float32"), DTYPES)
        slug = slugify(f"{run['panel']}-{run['label']}" if run["panel"] else run["label"])
        if slug in seen:
            raise ConfigError(f"runs[{i}]: two runs share panel and label ({slug!r})")
        seen.add(slug)
        run["slug"] = slug
        out.append(run)
    return out


def slugify(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9]+", "-", text).strip("-").lower() or "run"


def _kwargs(table: dict) -> dict:
    return {k: v for k, v in table.items() if k != "kind"}


def _build(table: str, registry: dict, spec: dict, **extra):
    """``registry[spec["kind"]](**rest of spec, **extra)``; an unknown kind or keyword is a
    ConfigError naming the table."""
    kind = check_choice(f"{table}.kind", spec["kind"], registry)
    try:
        return registry[kind](**_kwargs(spec), **extra)
    except TypeError as exc:  # e.g. an unexpected keyword argument
        raise ConfigError(f"{table} {kind!r}: {exc}") from None


def build_data(spec: dict, dtype: torch.dtype):
    """The FederatedDataset of a ``[data]`` table (``kind`` = a key of GENERATORS)."""
    from .. import data as data_mod

    return _build("data", data_mod.GENERATORS, spec, dtype=dtype)


def build_problem(spec: dict):
    """The Problem of a ``[problem]`` table (``kind`` = a key of problems.REGISTRY)."""
    from .. import problems

    return _build("problem", problems.REGISTRY, spec)


def build_algorithm(spec: dict):
    """The Algorithm of an ``[algorithm]`` table (``kind`` = a key of algorithms.REGISTRY)."""
    from .. import algorithms

    return _build("algorithm", algorithms.REGISTRY, spec)


def build_channel(spec: dict | None):
    from ..channels import BernoulliChannel, PerfectChannel

    if not spec:
        return None
    kind = check_choice("channel.kind", spec.get("kind"), ("perfect", "bernoulli"))
    if kind == "perfect":
        return PerfectChannel()
    if "probability" not in spec:
        raise fail("channel.probability", None, "a bernoulli channel needs a probability in [0, 1]")
    return BernoulliChannel(spec["probability"])
