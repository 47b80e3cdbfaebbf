"""The Flower ClientApp: one fedsparse client on one node.

Three message types:

* ``query`` -- the handshake: the node tells the server which fedsparse client it is
  (``partition-id``), how many examples it holds, its aggregation weight, the feature
  shape and the per-client statistics the algorithm binds with
  (:meth:`~fedsparse.algorithms.Algorithm.statistics`, e.g. its smoothness constant L_i
  for ``step_size="auto"``), so the server binds exactly as the simulator does without
  seeing any data;
* ``train`` -- decode the broadcast payload, run ``algorithm.client_update`` with
  S = 1 and ``clients = tensor([partition_id])``, so the counter-based random numbers
  draw the same mini-batches as the embedded simulator, and reply with the encoded
  upload; per-client algorithm state stays on the node in ``context.state`` and, with
  the node config ``state-dir``, on its disk, by round, so that a resumed run goes on
  with the state the client had at the server's checkpoint
  (:mod:`fedsparse.flower.node_state`);
* ``evaluate`` -- loss (and accuracy) of the global model on the local data and, for a
  personalised algorithm (FedMac, pFedMe, Per-FedAvg, HeurFedAMP), of this client's
  personalised model, which lives in ``context.state`` and never leaves the node: the
  reply carries ``personal_objective``, ``personal_accuracy`` and their ``personal_test_``
  forms, which the server micro-averages by example counts as the simulator does.

The node config (``flower-supernode --node-config``) is read by :data:`NODE_CONFIG_KEYS`;
a key near one of them (``state_dir`` for ``state-dir``) is an error on the node's first
message, which the server gives as the reason it refuses the node, since the node would
otherwise run without it (memory only, or without its file); any other key is named in
a warning (a SuperNode may carry keys of other apps), and the keys Flower itself sets
(:data:`FLOWER_NODE_KEYS`) pass. A ``state-dir`` given for an algorithm whose clients
keep no state is named in a warning too: nothing is written there. Each warning, and
each one raised while the node builds the job (a job of days), is logged once per run on
a node, on its first message (:func:`_warn_once`).

The node computes on the device its node config names (``device``: "cpu", the default,
"cuda", "cuda:N" or "auto", a GPU where one exists): its data move there once, when
the node first needs them; payloads, client state and the model are moved there per
message, and what goes back over the network is moved back to the CPU. "cuda" on a
node without a GPU is a clear error on the node's first message (the handshake),
which the server logs when it refuses the node.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, replace
from logging import WARNING
from numbers import Integral, Real

import torch
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import NUM_PARTITIONS_KEY, PARTITION_ID_KEY
from flwr.common.logger import log

from .._validation import ConfigError, fail
from ..algorithms.base import ClientContext, DataSpec
from ..comm import ENCODINGS
from ..data.federated import FederatedDataset
from ..devices import resolve_device
from ..experiments.config_checks import did_you_mean
from ..metrics import evaluate as evaluate_model
from ..metrics import evaluate_personal
from ..screening import shown
from . import codec
from .job import Job, job_from_config
from .node_data import NodeData, load_node_data
from .node_state import NodeStateStore

STATE_KEY = "fedsparse.client_state"
#: The ``context.state`` record of the warnings this node has logged in this run.
WARNED_KEY = "fedsparse.warned"

#: The node config keys a fedsparse node reads: its client (``partition-id``, and
#: ``num-partitions`` to check it against the job), its data file (``data-path``), where
#: it keeps its client's state (``state-dir``) and where it computes (``device``).
NODE_CONFIG_KEYS = ("partition-id", "num-partitions", "data-path", "state-dir", "device")
#: The keys Flower itself puts in a node config: its simulation runtime gives every
#: virtual node these two (flwr 1.41 sets no other; a SuperNode passes its
#: ``--node-config`` as it is).
FLOWER_NODE_KEYS = frozenset({PARTITION_ID_KEY, NUM_PARTITIONS_KEY})


@dataclass
class _Runtime:
    job: Job
    problem: object
    algorithm: object
    node: NodeData
    #: Where this node computes (node config ``device``); ``node``'s data live there.
    device: torch.device
    #: The algorithm's initial server state, built on first use by
    #: :func:`_personal_model` (what represents a client that has not trained yet).
    initial: dict | None = None
    #: P, the size of the model the server sends (a dictionary's coefficients, or the
    #: problem's parameters), computed on the first message.
    model_size: int | None = None
    #: The client's state on disk (node config ``state-dir``, for an algorithm whose
    #: clients keep state), or None.
    store: NodeStateStore | None = None
    #: What is wrong in the node config that does not stop the node (an unknown key, a
    #: ``state-dir`` nothing is written to), and the warnings raised while building the
    #: runtime (a job of days, :func:`~fedsparse._resources.check_steps`), logged by
    #: :func:`_warn_once`.
    warnings: tuple[str, ...] = ()


_RUNTIMES: dict[str, _Runtime] = {}


def _runtime(default_job: Job | None, default_key: dict | None, context: Context) -> _Runtime:
    """Job, problem, algorithm and local data of this node, built once per process
    (``default_key`` is ``default_job.to_dict()``, computed once per app); the node
    config's warnings are logged on the run's first message (:func:`_warn_once`)."""
    run_config = dict(context.run_config)
    node_config = dict(context.node_config)
    key = json.dumps([run_config, node_config, default_key], sort_keys=True, default=str)
    if key not in _RUNTIMES:
        # a warning while building (check_steps: a job of days) would come again with each
        # message's new process: kept with the node config's, to be logged once per run
        with warnings.catch_warnings(record=True) as raised:
            rt, notes = _build_runtime(default_job, run_config, node_config)
        notes += [text for text in dict.fromkeys(str(w.message) for w in raised)
                  if text not in notes]
        rt.warnings = tuple(notes)
        if len(_RUNTIMES) > 64:  # a long-lived process serving many runs: do not grow forever
            _RUNTIMES.clear()
        _RUNTIMES[key] = rt
    rt = _RUNTIMES[key]
    _warn_once(rt, context)
    return rt


def _build_runtime(default_job: Job | None, run_config: dict,
                   node_config: dict) -> tuple[_Runtime, list[str]]:
    """The runtime of :func:`_runtime`, and the node config's warnings."""
    job = job_from_config(run_config) if run_config else default_job
    if job is None:
        raise RuntimeError("this ClientApp has no fedsparse job: the run config is empty "
                           "and make_client_app() was given none")
    notes = check_node_config(node_config)
    problem = job.build_problem()
    device = _node_device(node_config)
    node = load_node_data(job, node_config)
    # linear models read the padded (1, n, d) layout
    node = replace(node, train=problem.prepare(node.train),
                   test=None if node.test is None else problem.prepare(node.test))
    if device.type != "cpu":  # once: every message of this process reuses them
        node = replace(node, train=node.train.to_device(device),
                       test=None if node.test is None else node.test.to_device(device))
    local = _local_dataset(node)
    problem.check_data(local)
    # Bound like the server's copy (same N, feature shape, dtype); what needs every
    # client's statistics (an "auto" step) comes from the server in client_config.
    spec = DataSpec(job.num_clients, DataSpec.of(local).feature_shape, job.torch_dtype,
                    torch.ones(job.num_clients, dtype=torch.float64), device)
    rt = _Runtime(job, problem, job.build_algorithm().bind(problem, spec, {}), node,
                  device)
    state_dir = node_config.get("state-dir")
    if state_dir is not None and (not isinstance(state_dir, str) or not state_dir):
        raise fail("node config state-dir", state_dir, "must be a folder path, e.g. "
                   "--node-config 'state-dir=\"/var/lib/fedsparse\"'")
    if state_dir and rt.algorithm.stateful_clients:
        rt.store = NodeStateStore(state_dir, job, node.partition_id)
    elif state_dir:
        # said where the unknown keys are: whoever set it expects the state kept there
        notes.append(f"node config state-dir={shown(state_dir, 200)} is ignored: "
                     f"algorithm {job.algorithm['kind']!r} keeps no client state "
                     "between rounds, so nothing is written there")
    return rt, notes


def _warn_once(rt: _Runtime, context: Context) -> None:
    """Log the node config's warnings that this run has not logged on this node yet.

    A SuperNode starts a ClientApp process for every message, and the simulation runtime
    hands a node's messages to whichever of its worker processes is free, so a warning
    logged when a process builds its runtime would be repeated on every message of every
    round; and a process may serve several runs (an in-process grid), each of which
    should be told. What persists for one node and run, in a SuperNode as in the
    simulation runtime, is ``context.state``: the warnings logged are kept there
    (:data:`WARNED_KEY`), so a SuperNode restarted within a run, whose state is lost,
    says them again.
    """
    if not rt.warnings:
        return
    said = list(context.state[WARNED_KEY]["said"]) if WARNED_KEY in context.state else []
    new = [text for text in rt.warnings if text not in said]
    for text in new:
        log(WARNING, "fedsparse: %s", text)
    if new:
        context.state[WARNED_KEY] = ConfigRecord({"said": said + new})


def check_node_config(node_config: dict) -> list[str]:
    """Refuse a node config key that is a near miss of one this node reads; name any
    other unknown key in a warning, which the caller logs.

    A near miss (``state_dir``, ``data_path``, ``Device``) is almost surely meant for the
    key it resembles, and ignoring it would change the run without a word: no
    ``state-dir`` keeps the client's state in memory only (a resume refuses the node),
    no ``data-path`` is refused as missing rather than as misspelt. A key unlike every one may
    be another app's on a shared SuperNode, so it is only named.

    Returns
    -------
    list of str
        One warning for each other unknown key, naming it, its value and the known keys
        (without the ``fedsparse:`` that :func:`_warn_once` logs them with).

    Raises
    ------
    ConfigError
        naming the key, its value, the key it resembles and the known keys.
    """
    known = ", ".join(NODE_CONFIG_KEYS)
    warnings = []
    for key, value in node_config.items():
        if key in NODE_CONFIG_KEYS or key in FLOWER_NODE_KEYS:
            continue
        hint = did_you_mean(key, NODE_CONFIG_KEYS)  # " (did you mean 'state-dir'?)"
        if hint:
            raise ConfigError(f"node config {key}={shown(value)} is an unknown key{hint}; "
                              f"known keys: {known}")
        warnings.append(f"node config {key}={shown(value)} is an unknown key, ignored; "
                        f"known keys: {known}")
    return warnings


def _node_device(node_config: dict) -> torch.device:
    """The node config's ``device`` (default the CPU), checked."""
    try:
        return resolve_device(node_config.get("device"))
    except ConfigError as exc:
        raise ConfigError(f"node config {exc}") from None


def _local_dataset(node: NodeData) -> FederatedDataset:
    """The node's data as a one-client data set (its weight is irrelevant here)."""
    return FederatedDataset(train=node.train, test=node.test, name=node.source,
                            weights=torch.ones(1, dtype=torch.float64,
                                               device=node.train.y.device))


def _on(device: torch.device, tensors: dict | None) -> dict | None:
    return None if tensors is None else {k: v.to(device) for k, v in tensors.items()}


def _client_state(rt: _Runtime, context: Context, done: int) -> dict | None:
    """The client's state once round ``done`` is over: the one this run keeps in its
    context, else the latest the node's disk holds (a resumed run, or a node restarted
    within one), else the initial one."""
    if STATE_KEY in context.state:
        return _on(rt.device, codec.record_to_tensors(context.state[STATE_KEY]))
    if not rt.algorithm.stateful_clients:
        return None
    fresh = rt.algorithm.init_clients(rt.problem, torch.tensor([rt.node.partition_id]),
                                      rt.job.seed)
    kept = None if rt.store is None else rt.store.load(fresh, before=done)
    return fresh if kept is None else kept


def _begin_run(rt: _Runtime, context: Context, meta) -> None:
    """Where the client's state is on disk: this run's history only (the server says
    which round the run started from; an older server says nothing, and no file goes)."""
    if rt.store is not None and codec.START_ROUND in meta:
        rt.store.begin(int(context.run_id), _task_int(meta, codec.START_ROUND))


def _personal_model(rt: _Runtime, context: Context, model: torch.Tensor, done: int
                    ) -> torch.Tensor | None:
    """(P,) this client's personalised model once round ``done`` is over, or None if the
    algorithm has none.

    ``algorithm.personalized`` reads the client state kept on the node and, for a client
    that has not trained yet, the server state that stands in for it: the global model
    ``model`` (FedMac, pFedMe, Per-FedAvg) or, for HeurFedAMP, the server's copy of the
    client's model, which is the initial model until the client has trained. So the
    node passes the initial server state with ``model`` set to the global model, which
    gives exactly what the simulator evaluates.
    """
    if not rt.algorithm.stateful_clients:
        return None
    client_state = _client_state(rt, context, done)
    if rt.initial is None:
        rt.initial = rt.algorithm.init(rt.problem, rt.job.seed)
    personal = rt.algorithm.personalized(rt.algorithm.with_global_model(rt.initial, model),
                                         client_state)
    if personal is None:
        return None
    # (1, P) for this client; a per-client fallback of the server (N, P) broadcasts to
    # (N, P), whose row partition_id is this client's.
    return personal[0] if personal.shape[0] == 1 else personal[rt.node.partition_id]


def _store_state(context: Context, state: dict | None) -> None:
    if state is None:
        return
    context.state[STATE_KEY] = codec.tensors_to_record(state)


def _config(content: RecordDict, device: torch.device) -> dict:
    """The algorithm's client config: scalars from :data:`~fedsparse.flower.codec.CONFIG`,
    tensors (moved to ``device``) from :data:`~fedsparse.flower.codec.CONFIG_ARRAYS`.
    The server is not trusted either: a number must be finite, a step size one positive
    number (other tensors, a custom algorithm's indices or masks, pass as they are)."""
    config = dict(content[codec.CONFIG]) if codec.CONFIG in content else {}
    for key, value in config.items():
        number = isinstance(value, Real) and not isinstance(value, bool)
        if key == "step_size" and not (number and math.isfinite(value) and value > 0):
            raise fail("server config step_size", value, "must be a positive number")
        if not (number and math.isfinite(value)) and not isinstance(value, str | bool):
            raise fail(f"server config {key}", value, "must be a finite number or text")
    arrays = codec.record_to_tensors(content[codec.CONFIG_ARRAYS]) \
        if codec.CONFIG_ARRAYS in content else {}
    for key, value in arrays.items():
        shown = value.tolist() if value.numel() <= 8 else \
            f"<{value.dtype} tensor of shape {tuple(value.shape)}>"
        if value.is_floating_point() and not torch.isfinite(value).all():
            raise fail(f"server config {key}", shown, "must hold finite numbers")
        if key == "step_size" and not (value.numel() == 1 and value.item() > 0):
            raise fail("server config step_size", shown, "must be one positive number")
    return {**config, **_on(device, arrays)}


def _task_int(meta, key: str) -> int:
    """A whole number of the server's task record (round, partition id), by name."""
    value = meta[key] if key in meta else None
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 0:
        raise fail(f"server task {key}", value, "must be a whole number >= 0")
    return int(value)


def _model_payload(rt: _Runtime, msg: Message, name: str, rows: bool = True) -> torch.Tensor:
    """The model the server sent: P values (or one (1, P) row of a per-client broadcast,
    with ``rows``), P being this node's model size; anything else is named here rather
    than failing inside the problem's products."""
    x, _ = codec.get(msg.content, name)
    if x.dtype != rt.job.torch_dtype:
        raise fail(f"server {name} dtype", str(x.dtype).removeprefix("torch."),
                   f"must be {str(rt.job.torch_dtype).removeprefix('torch.')}: this node's "
                   "job runs in it")
    P = rt.model_size = rt.model_size or _model_size(rt)
    allowed = [(P,), (1, P)] if rows else [(P,)]
    if tuple(x.shape) not in allowed:
        raise fail(f"server {name} shape", tuple(x.shape), f"must be one of {allowed}: this "
                   f"node's model has {P} parameters")
    return x


def _model_size(rt: _Runtime) -> int:
    """P: the problem's parameters, or a dictionary's coefficients."""
    algorithm = rt.algorithm
    while hasattr(algorithm, "inner"):  # a wrapper holds the inner algorithm's model
        algorithm = algorithm.inner
    geometry = getattr(algorithm, "geometry", None)  # a dictionary: the model is coefficients
    problem = rt.problem if geometry is None else geometry.wrap(rt.problem)
    return problem.param_dim(math.prod(rt.node.train.feature_shape))


def make_client_app(job: Job | None = None) -> ClientApp:
    """A ClientApp running fedsparse client updates.

    Parameters
    ----------
    job : the job to run when the run config is empty (the Python simulation API);
        under ``flwr run`` the job comes from the app's run config.

    Returns
    -------
    ClientApp
        Handling ``query``, ``train`` and ``evaluate`` messages (see the module docstring).
    """
    app = ClientApp()
    job_key = None if job is None else job.to_dict()

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        rt = _runtime(job, job_key, context)
        node = rt.node
        info = {codec.PARTITION_ID: node.partition_id,
                codec.NUM_PARTITIONS: node.num_partitions,
                codec.COUNT: int(node.train.counts[0]), codec.WEIGHT: float(node.weight),
                codec.FEATURE_SHAPE: list(DataSpec.of(_local_dataset(node)).feature_shape),
                codec.DTYPE: str(node.train.X.dtype), codec.SOURCE: node.source,
                codec.KEEPS_STATE: rt.store is not None}
        if node.test is not None:  # its evaluate replies must then report the same count
            info[codec.TEST_EXAMPLES] = int(node.test.counts[0])
        # The statistics the server's algorithm.bind needs (e.g. L_i for an "auto" step),
        # computed here on the node's own data: the server never sees the data.
        for name, value in rt.algorithm.statistics(rt.problem, node.train).items():
            info[f"{codec.STAT_PREFIX}{name}"] = float(value[0])
        return Message(RecordDict({codec.NODE: ConfigRecord(info)}), reply_to=msg)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        rt = _runtime(job, job_key, context)
        meta = msg.content[codec.TASK] if codec.TASK in msg.content else {}
        expected = _task_int(meta, codec.PARTITION_ID)
        if expected != rt.node.partition_id:
            raise RuntimeError(f"the server sent client {expected}'s work to the node holding "
                               f"partition {rt.node.partition_id}")
        encoding = meta[codec.UPLOAD_ENCODING] if codec.UPLOAD_ENCODING in meta else None
        if encoding not in ENCODINGS:  # (before the work, not after it)
            raise fail(f"server task {codec.UPLOAD_ENCODING}", encoding,
                       f"must be one of {', '.join(ENCODINGS)}")
        payload = _model_payload(rt, msg, codec.PAYLOAD)
        t = _task_int(meta, codec.ROUND)
        _begin_run(rt, context, meta)
        ctx = ClientContext(rt.problem, rt.node.train, torch.tensor([rt.node.partition_id]),
                            t, rt.job.seed, state=_client_state(rt, context, t),
                            config=_config(msg.content, rt.device))
        try:
            uploads, new_state, info = rt.algorithm.client_update(payload.to(rt.device), ctx)
        except KeyError as exc:  # a config value the algorithm reads was not sent
            raise ConfigError(f"the server's train message lacks the config value "
                              f"{exc.args[0]!r} that {rt.algorithm.name} needs") from None
        _store_state(context, new_state)
        if rt.store is not None and new_state is not None:
            rt.store.save(t + 1, new_state)
            if codec.SAVED_ROUND in meta:
                rt.store.prune(_task_int(meta, codec.SAVED_ROUND))
        content = RecordDict()
        codec.put(content, codec.UPLOAD, uploads[0], encoding)
        metrics = {k: float(v) for k, v in info.items()}
        metrics[codec.NUM_EXAMPLES] = int(rt.node.train.counts[0])
        content[codec.METRICS] = MetricRecord(metrics)
        return Message(content, reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        rt = _runtime(job, job_key, context)
        model = _model_payload(rt, msg, codec.MODEL, rows=False).to(rt.device)
        metrics = {codec.WEIGHT: float(rt.node.weight),
                   codec.NUM_EXAMPLES: int(rt.node.train.counts[0])}
        if rt.node.test is not None:
            metrics[codec.TEST_EXAMPLES] = int(rt.node.test.counts[0])
        # The simulator's own evaluation (chunked for large or pooled data) on one client.
        measured = evaluate_model(rt.problem, _local_dataset(rt.node), model)
        for key in ("objective", "accuracy", "test_objective", "test_accuracy"):
            if measured[key] is not None:
                metrics[key] = float(measured[key])
        meta = msg.content[codec.TASK] if codec.TASK in msg.content else {}
        _begin_run(rt, context, meta)
        # the model after round ROUND (an older server says nothing: the latest state)
        done = _task_int(meta, codec.ROUND) if codec.ROUND in meta else rt.job.rounds
        personal = _personal_model(rt, context, model, done)
        if personal is not None:
            mine = evaluate_personal(rt.problem, _local_dataset(rt.node), personal[None])
            metrics.update({k: float(v) for k, v in mine.items() if v is not None})
        return Message(RecordDict({codec.METRICS: MetricRecord(metrics)}), reply_to=msg)

    return app


#: The ClientApp ``flwr run`` loads (``fedsparse.flower.client_app:app``); its job comes
#: from the run config.
app = make_client_app()
