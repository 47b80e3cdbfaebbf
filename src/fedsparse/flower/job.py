"""A fedsparse job as Flower sees it: the run config, and the data on each node.

A *job* is one fedsparse run, written like a run of an experiment config::

    rounds = 20
    seed = 0
    clients_per_round = 10            # optional, default all
    dtype = "float32"                 # or "float64"
    [data]                            # kind = a generator + its arguments, or "node"
    kind = "fedht_simulation"
    num_clients = 100
    [problem]
    kind = "least_squares"
    [algorithm]
    kind = "fed_iter_ht"
    sparsity = 10
    [flower]                          # optional; Flower-only settings (defaults below)
    round_timeout = 120.0             # seconds to wait for the replies of a round
                                      # (0.1 s to a week)
    wait_timeout = 120.0              # seconds to wait for nodes at the start
                                      # (0 to a week)
    min_nodes = 0                     # nodes to wait for (0 = one per client)
    evaluate_every = 0                # evaluate on the nodes every k rounds (0 = at the end
                                      # only, -1 = never)
    out_dir = ""                      # where the ServerApp saves history + model ("" = nowhere;
                                      # "~" = its home; relative: to its working folder)
    poll_interval = 0.2               # seconds between two pulls for replies
    max_update_norm = 0.0             # refuse uploads farther than this (l2) from the
                                      # broadcast (0 = no absolute bound)
    max_update_ratio = 100.0          # refuse uploads farther than this many times the
                                      # round's median distance (>= 1; 0 = no such bound)
    resume = false                    # continue the stopped run whose checkpoint is in
                                      # out_dir (see fedsparse.flower.server_checkpoint)

With ``out_dir`` set, the server saves a checkpoint there every ``checkpoint_every``
rounds (a top-level key, default 10, as in the simulator) and at the end.

Flower carries it as the app's run config (nested tables flattened to dotted keys,
``algorithm.sparsity``), so ``flwr run --run-config 'algorithm.sparsity=5'`` overrides
single values.

Data on a node comes from its node config (:mod:`.node_data`).
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from functools import lru_cache

import torch

from .._resources import check_rounds
from .._validation import ConfigError, check_choice, check_int, check_seed, fail
from ..algorithms import REGISTRY as ALGORITHMS
from ..data import GENERATORS
from ..data.federated import FederatedDataset
from ..experiments.config import (
    DTYPES,
    FLOWER_DEFAULTS,
    build_algorithm,
    build_channel,
    build_data,
    build_problem,
    builder_arguments,
    check_config,
    check_flower_values,
    deep_merge,
    unknown_key,
)
from ..experiments.run_selection import pick_run
from ..problems import REGISTRY as PROBLEMS
from ..problems import NeuralProblem

#: ``data.kind`` meaning "each node brings its own file" (node config ``data-path``).
NODE_DATA = "node"
#: ``device`` and ``client_state_memory`` are accepted so an experiment config's runs are
#: jobs as they are; under Flower each node computes on the device of its node config, not
#: the job's, and keeps its own clients' state.
_TOP_KEYS = {"rounds", "seed", "clients_per_round", "dtype", "data", "problem", "algorithm",
             "flower", "label", "panel", "channel", "checkpoint_every", "slug", "device",
             "client_state_memory"}


@dataclass
class Job:
    """A validated fedsparse job (see the module docstring for the fields)."""

    rounds: int
    seed: int
    data: dict
    problem: dict
    algorithm: dict
    clients_per_round: int | None = None
    dtype: str = "float32"
    flower: dict = field(default_factory=lambda: dict(FLOWER_DEFAULTS))
    #: Losses applied on top of the network's own, as in the simulator (experiments).
    channel: dict = field(default_factory=dict)
    #: Rounds between two checkpoints the server saves in ``flower.out_dir``.
    checkpoint_every: int = 10

    @property
    def torch_dtype(self) -> torch.dtype:
        """The torch dtype of :attr:`dtype`."""
        return DTYPES[self.dtype]

    @property
    def num_clients(self) -> int:
        """N: ``data.num_clients``, or the generator's default."""
        if "num_clients" in self.data:
            return int(self.data["num_clients"])
        fn = GENERATORS[self.data["kind"]]
        default = inspect.signature(fn).parameters.get("num_clients")
        if default is None or default.default is inspect.Parameter.empty:
            raise ConfigError(f"data.num_clients is needed for data.kind={self.data['kind']!r}")
        return int(default.default)

    def build_problem(self):
        """A new :class:`~fedsparse.problems.Problem` from the ``[problem]`` table."""
        return build_problem(self.problem)

    def build_algorithm(self):
        """A new :class:`~fedsparse.algorithms.Algorithm` from the ``[algorithm]`` table.

        Raises
        ------
        ConfigError
            when the builder rejects the table's arguments.
        """
        return build_algorithm(self.algorithm)

    def build_channel(self):
        """The ``[channel]`` table as a channel (perfect when there is none)."""
        from ..channels import PerfectChannel

        return build_channel(self.channel) or PerfectChannel()

    def build_data(self) -> FederatedDataset:
        """The whole federated data set of a generator job (what the simulator uses)."""
        if self.data["kind"] == NODE_DATA:
            raise ConfigError('data.kind="node": the data lives on the nodes '
                              "(node config data-path); there is no data set to generate")
        return _generate(_freeze(self.data), self.dtype)

    def to_dict(self) -> dict:
        """The job as a nested dict that :func:`job_from_config` reads back."""
        out = {"rounds": self.rounds, "seed": self.seed, "dtype": self.dtype,
               "data": dict(self.data), "problem": dict(self.problem),
               "algorithm": dict(self.algorithm), "flower": dict(self.flower),
               "checkpoint_every": self.checkpoint_every}
        if self.clients_per_round is not None:
            out["clients_per_round"] = self.clients_per_round
        if self.channel:
            out["channel"] = dict(self.channel)
        return out


def _freeze(spec: dict) -> str:
    return json.dumps(spec, sort_keys=True)


@lru_cache(maxsize=2)
def _generate(spec_json: str, dtype: str) -> FederatedDataset:
    # Cached: a node (or a Ray actor hosting many virtual nodes) generates the data once.
    spec = json.loads(spec_json)
    return build_data(spec, DTYPES[dtype])


def _unflatten(flat: dict) -> dict:
    out: dict = {}
    for key, value in flat.items():
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"run config key {key!r} clashes with the scalar {p!r}")
        node[parts[-1]] = value
    return out


def job_from_config(config: dict, run: str | int | None = None) -> Job:
    """Build a :class:`Job` from a job dict, an experiment config or a Flower run config.

    Parameters
    ----------
    config : one of
        * a job: ``{"rounds": .., "data": {...}, "problem": {...}, "algorithm": {...}}``;
        * an experiment config with ``[defaults]`` and ``[[runs]]`` (see
          :mod:`fedsparse.experiments.config`); ``run`` picks the run;
        * a flat Flower run config with dotted keys (``"algorithm.sparsity": 10``).
    run : label or 0-based index of the run of an experiment config (default the first).
    """
    if not isinstance(config, dict):
        raise fail("config", type(config).__name__, "must be a dict (a parsed TOML table)")
    if any("." in k for k in config):
        config = deep_merge(config, _unflatten({k: v for k, v in config.items() if "." in k}))
        config = {k: v for k, v in config.items() if "." not in k}
    if "runs" in config:
        # the whole experiment config is checked: a top-level [flower] table, or any key
        # the run does not inherit, would otherwise be dropped without a word
        check_config(config)
        index = pick_run(config, run)
        config = deep_merge(config.get("defaults", {}), config["runs"][index])
    elif run is not None:
        raise fail("run", run, "is only allowed for an experiment config with [[runs]]")
    if config.get("eval_clients") is not None:
        raise fail("eval_clients", config["eval_clients"], "is a simulator setting: a Flower "
                   "run evaluates on its nodes (flower.evaluate_every sets how often); remove "
                   "it from the run")
    for key in config:
        if key not in _TOP_KEYS and key != "eval_clients":
            raise unknown_key("the job", key, _TOP_KEYS - {"slug"})
    for table in ("data", "problem", "algorithm"):
        if not isinstance(config.get(table), dict) or "kind" not in config[table]:
            raise ConfigError(f"the job needs a [{table}] table with a kind")
    if config.get("channel") is not None and not isinstance(config["channel"], dict):
        raise fail("channel", config["channel"], "must be a table such as {kind='bernoulli', "
                   "probability=0.8}")
    build_channel(config.get("channel"))  # a bad channel fails here, not mid-run
    data_kind = config["data"]["kind"]
    check_choice("data.kind", data_kind, [*GENERATORS, NODE_DATA])
    if data_kind == "ondisk":
        # N is in the folder's index, which the server does not read (the data live on
        # the nodes): "needs data.num_clients", then "unknown key 'num_clients'" left no way
        raise fail("data.kind", data_kind, 'is the simulator\'s: a Flower node holds its own '
                   "client's data, not the whole folder; give each node its client's arrays "
                   "in an .npz file (fedsparse.data.ondisk.read_client(DIR, i) reads them) "
                   'with data.kind = "node" and the node config data-path')
    if data_kind == NODE_DATA and "num_clients" not in config["data"]:
        raise ConfigError('data.kind="node" needs data.num_clients, the number of clients')
    _check_data_table(config["data"])
    if not isinstance(config.get("flower", {}), dict):
        raise fail("flower", config["flower"], "must be a table of Flower settings, e.g. "
                   "[flower] round_timeout = 60")
    check_choice("problem.kind", config["problem"]["kind"], PROBLEMS)
    check_choice("algorithm.kind", config["algorithm"]["kind"], ALGORITHMS)
    flower = dict(FLOWER_DEFAULTS)
    extra = set(config.get("flower", {})) - set(FLOWER_DEFAULTS)
    if extra:
        raise ConfigError(f"unknown [flower] keys {sorted(extra)}; allowed: "
                          f"{sorted(FLOWER_DEFAULTS)}")
    flower.update(config.get("flower", {}))
    check_flower_values(flower)
    cpr = config.get("clients_per_round")
    cpr = None if cpr in (None, 0) else check_int("clients_per_round", cpr, minimum=1)
    job = Job(rounds=check_rounds(config.get("rounds", 100)),
              seed=check_seed("seed", config.get("seed", 0)),
              data=dict(config["data"]), problem=dict(config["problem"]),
              algorithm=dict(config["algorithm"]), clients_per_round=cpr,
              dtype=check_choice("dtype", config.get("dtype", "float32"), DTYPES),
              flower=flower, channel=dict(config.get("channel") or {}),
              checkpoint_every=check_int("checkpoint_every", 10 if config.get(
                  "checkpoint_every") is None else config["checkpoint_every"], minimum=1))
    if cpr is not None and cpr > job.num_clients:
        raise fail("clients_per_round", cpr, f"must be at most the number of clients "
                   f"{job.num_clients}")
    problem = job.build_problem()
    if isinstance(problem, NeuralProblem):  # its autocast needs float32 models
        problem.check_model_dtype(job.torch_dtype)
    job.build_algorithm()  # fail here, with the builder's message, not on a node
    return job


def job_to_run_config(job: Job) -> dict:
    """The nested run config of a job (for ``[tool.flwr.app.config]``).

    Returns
    -------
    dict
        :meth:`Job.to_dict` without ``None`` values in the data, problem and algorithm
        tables (TOML has no null; a missing key means the builder's default).
    """
    out = job.to_dict()
    for table in ("data", "problem", "algorithm"):
        nulls = [k for k, v in out[table].items() if v is None]
        for k in nulls:
            del out[table][k]
    for key, value in flatten(out).items():
        # Flower's run config holds scalars only: a list (a scheduled channel's rows,
        # per-client probabilities) would be refused by `flwr run` after the project and
        # its processes are up
        if isinstance(value, list | tuple | dict):
            raise fail(key, value if len(str(value)) < 60 else f"<{type(value).__name__}>",
                       "is a list; a Flower run config holds numbers, booleans and "
                       "strings only, so this job cannot run on Flower as it is")
    return out


def flatten(config: dict, prefix: str = "") -> dict:
    """Nested dict -> dotted keys, as Flower flattens ``[tool.flwr.app.config]``.

    Parameters
    ----------
    config : nested dict of tables.
    prefix : dotted key of ``config`` itself ("" at the top).

    Returns
    -------
    dict
        ``{"a.b": value}`` for every non-dict leaf.
    """
    out = {}
    for k, v in config.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out


def _check_data_table(data: dict) -> None:
    """``[data]``'s keys and ``num_clients`` now, at the server: the nodes build the data,
    and a typo there would surface only once every node has refused the handshake."""
    if "num_clients" in data:
        check_int("data.num_clients", data["num_clients"], minimum=1)
    if data["kind"] == NODE_DATA:
        extra = set(data) - {"kind", "num_clients"}
        if extra:
            raise unknown_key('[data] of kind "node"', sorted(extra)[0], {"kind", "num_clients"})
        return
    if "seed" in data:  # the one value every generator checks alike
        check_seed("data.seed", data["seed"])
    arguments = builder_arguments(GENERATORS[data["kind"]], data)  # what build_data accepts
    if arguments is None:  # a generator taking **kwargs: any key
        return
    known = {*arguments, "kind"}
    for key in data:
        if key not in known:
            raise unknown_key(f"[data] of kind {data['kind']!r}", key, known)
