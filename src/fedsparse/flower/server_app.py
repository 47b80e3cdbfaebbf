"""The Flower ServerApp: any fedsparse Algorithm, round by round, over Flower's grid.

One run:

1. wait for the nodes (``flower.min_nodes``, default one per client, at most
   ``flower.wait_timeout`` seconds), then a ``query`` handshake maps Flower's random
   node ids to fedsparse client ids (node config ``partition-id``) and collects each
   client's weight, size, feature shape and the per-client statistics the algorithm
   asks for (:meth:`Algorithm.statistics`, e.g. L_i for ``step_size="auto"``);
2. ``algorithm.bind`` with a :class:`DataSpec` (N, feature shape, dtype, weights) and
   those statistics -- exactly what the simulator binds with -- then ``init``;
3. the rounds are :class:`fedsparse.rounds.RoundLoop`, the simulator's loop: clients
   sampled with the same seeded draw, one ``train`` message per sampled client with its
   encoded broadcast and ``algorithm.client_config(state)``; replies within
   ``flower.round_timeout`` seconds, without error and well-formed (right shape,
   consistent encoding, finite, and within ``flower.max_update_norm`` of the broadcast
   when set) are the received uploads; the rest (error replies, timeouts, malformed or
   non-finite replies, clients with no node) are failed uploads, logged and counted in
   the record's ``rejected``; never fatal. The job's ``channel`` applies on top, as
   in the simulator; a round with no delivered upload warns and keeps the model;
4. the history (bytes up/down per round, delivered counts, evaluation on the nodes
   every ``flower.evaluate_every`` rounds and at the end, never if it is -1) is saved to
   ``flower.out_dir`` if set.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from logging import INFO, WARNING
from pathlib import Path

import torch
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from .._validation import ConfigError
from ..algorithms.base import DataSpec
from ..channels import checked_channel
from ..history import History
from ..metrics import MODEL_FIELDS
from ..rounds import ClientStore, Replies, RoundLoop
from . import codec
from .job import Job, job_from_config


class FlowerRunError(RuntimeError):
    """The run could not start (no nodes, inconsistent nodes); the message says why."""


def exchange(grid: Grid, messages: list[Message], timeout: float, poll: float = 0.2
             ) -> list[Message]:
    """Push ``messages``; pull replies until all arrived or ``timeout`` seconds passed.

    Like ``grid.send_and_receive``, but polling every ``poll`` seconds: the deployment
    grid polls every 3 s, which is most of a short round on a fast network.

    Returns
    -------
    list of Message
        The replies that arrived in time, in arrival order (error replies included).
    """
    if not messages:
        return []
    pending = {i for i in grid.push_messages(messages) if i}
    replies: list[Message] = []
    deadline = time.monotonic() + timeout
    while pending:
        got = list(grid.pull_messages(list(pending)))
        replies.extend(got)
        pending.difference_update(r.metadata.reply_to_message_id for r in got)
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(poll)
    return replies


def _wait_for_nodes(grid: Grid, needed: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    nodes = sorted(grid.get_node_ids())
    while len(nodes) < needed and time.monotonic() < deadline:
        time.sleep(0.5)
        nodes = sorted(grid.get_node_ids())
    return nodes


def _handshake(grid: Grid, nodes: list[int], timeout: float, job: Job) -> dict[int, dict]:
    """Query ``nodes``; return {partition id: node info incl. ``node_id``}."""
    if not nodes:
        return {}
    msgs = [Message(RecordDict({"fedsparse": ConfigRecord({"seed": job.seed})}), node,
                    MessageType.QUERY, group_id="handshake") for node in nodes]
    N = job.num_clients
    table: dict[int, dict] = {}
    for reply in exchange(grid, msgs, timeout, float(job.flower["poll_interval"])):
        node = reply.metadata.src_node_id
        if reply.has_error():
            log(WARNING, "fedsparse: node %s failed the handshake: %s", node,
                reply.error.reason)
            continue
        info = dict(reply.content["node"])
        info["stats"] = {k.removeprefix("stat."): info.pop(k) for k in list(info)
                         if k.startswith("stat.")}
        info["node_id"] = node
        pid = int(info["partition_id"])
        if pid in table and table[pid]["node_id"] != node:
            raise FlowerRunError(f"nodes {table[pid]['node_id']} and {node} both hold "
                                 f"partition-id={pid}; give every node its own partition-id")
        if int(info["num_partitions"]) != N:
            raise FlowerRunError(f"node {node} has num-partitions={info['num_partitions']}, "
                                 f"but the job has {N} clients")
        table[pid] = info
    return table


def _add_joined(grid: Grid, table: dict[int, dict], nodes_now: set, timeout: float,
                job: Job) -> None:
    """Handshake with the nodes that joined (or rejoined with a new id) since; update
    ``table`` in place, keeping a partition that an online node still holds."""
    known = {info["node_id"] for info in table.values()}
    if not nodes_now - known:
        return
    for pid, info in _handshake(grid, sorted(nodes_now - known), timeout, job).items():
        old = table.get(pid)
        if old is not None and old["node_id"] in nodes_now:
            log(WARNING, "fedsparse: node %s also claims partition-id=%d, held by "
                "the online node %s; ignored", info["node_id"], pid, old["node_id"])
            continue
        table[pid] = info  # a restarted node comes back with a new node id


def _node_statistics(table: dict[int, dict], N: int, dtype: torch.dtype
                     ) -> dict[str, torch.Tensor]:
    """The per-client statistics the nodes sent in the handshake, as (N,) tensors (NaN
    for clients without a node), for ``algorithm.bind``."""
    names = {k for info in table.values() for k in info.get("stats", {})}
    out = {}
    for name in sorted(names):
        values = torch.full((N,), float("nan"), dtype=dtype)
        for pid, info in table.items():
            if name in info.get("stats", {}):
                values[pid] = float(info["stats"][name])
        out[name] = values
    return out


def _grid_executor(grid: Grid, job: Job, algorithm, table: dict[int, dict]):
    """``execute`` for :class:`~fedsparse.rounds.RoundLoop`: one ``train`` message per
    sampled client that has a live node; a reply that is an error, late, malformed or of
    the wrong shape is a failed upload of that client (logged, never fatal)."""
    fl = job.flower
    timeout, poll = float(fl["round_timeout"]), float(fl["poll_interval"])

    def execute(t: int, clients: torch.Tensor, payload: torch.Tensor, config: dict,
                state_rows) -> Replies:
        nodes_now = set(grid.get_node_ids())
        _add_joined(grid, table, nodes_now, timeout, job)
        S, P = int(clients.shape[0]), int(payload.shape[-1])
        # A client whose node has gone offline is not sent anything (and so not delivered):
        # waiting round_timeout for a node the SuperLink knows is gone would stall the run.
        node_of = {pid: table[pid]["node_id"] for pid in clients.tolist()
                   if pid in table and table[pid]["node_id"] in nodes_now}
        shared = RecordDict()
        if payload.ndim == 1:  # encoded once; every message gets its own copy
            per_client = codec.put(shared, "payload", payload, algorithm.broadcast_encoding)
        _put_config(shared, config)
        msgs, bytes_down = [], 0
        for row, pid in enumerate(clients.tolist()):
            if pid not in node_of:
                continue
            content = RecordDict({k: copy.deepcopy(v) for k, v in shared.items()})
            if payload.ndim == 1:
                bytes_down += per_client
            else:
                bytes_down += codec.put(content, "payload", payload[row],
                                        algorithm.broadcast_encoding)
            content["fedsparse"] = ConfigRecord({
                "round": t, "partition_id": pid, "upload_encoding": algorithm.upload_encoding})
            msgs.append(Message(content, node_of[pid], MessageType.TRAIN, group_id=str(t + 1)))
        row_of_node = {node: row for row, pid in enumerate(clients.tolist())
                       if (node := node_of.get(pid)) is not None}
        uploads = torch.zeros(S, P, dtype=payload.dtype)
        received = torch.zeros(S, dtype=torch.bool)
        problems: dict[int, str] = {}
        bytes_up, infos = 0, []
        for reply in exchange(grid, msgs, timeout, poll):
            node = reply.metadata.src_node_id
            row = row_of_node.get(node)
            if row is None:
                continue
            if reply.has_error():
                log(WARNING, "fedsparse: round %d: client %d (node %s) failed: %s", t + 1,
                    int(clients[row]), node, reply.error.reason)
                continue
            try:
                up, nbytes = codec.get(reply.content, "upload", expected_shape=(P,))
                metrics = dict(reply.content["metrics"]) if "metrics" in reply.content else {}
                info = {k: float(v) for k, v in metrics.items() if k != "num-examples"}
            except (ConfigError, TypeError, ValueError) as exc:
                problems[row] = f"malformed reply: {exc}"
                continue
            uploads[row] = up.to(payload.dtype)
            received[row] = True
            bytes_up += nbytes
            infos.append(info)
        mean_info = {k: sum(i[k] for i in infos if k in i) / sum(k in i for i in infos)
                     for k in sorted({k for i in infos for k in i})}
        return Replies(uploads=uploads, received=received, bytes_up=bytes_up, info=mean_info,
                       problems=problems, bytes_down=bytes_down)

    return execute


def run_on_grid(grid: Grid, job: Job, *, callback: Callable | None = None) -> History:
    """Run ``job`` over ``grid``; return its :class:`~fedsparse.History`.

    The rounds are :class:`fedsparse.rounds.RoundLoop`, the simulator's own loop, with
    the clients' work sent as messages and the evaluation done on the nodes.

    Parameters
    ----------
    grid : Flower's grid (deployment or simulation runtime).
    job : the validated job.
    callback : called as ``callback(record, state)`` after every round.

    Returns
    -------
    History
        One record per round, ``history.model`` the final global model.

    Raises
    ------
    FlowerRunError
        when no node answers the handshake or the nodes are inconsistent.
    """
    fl = job.flower
    timeout, poll = float(fl["round_timeout"]), float(fl["poll_interval"])
    every = int(fl["evaluate_every"])
    problem = job.build_problem()
    algorithm = job.build_algorithm()
    N = job.num_clients
    needed = int(fl["min_nodes"]) or N
    nodes = _wait_for_nodes(grid, needed, float(fl["wait_timeout"]))
    log(INFO, "fedsparse: %d node(s) connected, %d client(s) in the job", len(nodes), N)
    table = _handshake(grid, nodes, timeout, job)
    if not table:
        raise FlowerRunError(f"no node answered the handshake within "
                             f"{fl['round_timeout']} s ({len(nodes)} connected)")
    missing = sorted(set(range(N)) - set(table))
    if missing:
        log(WARNING, "fedsparse: no node holds clients %s%s; their uploads never arrive",
            missing[:10], " ..." if len(missing) > 10 else "")
    shapes = {tuple(int(v) for v in i["feature_shape"]) for i in table.values()}
    if len(shapes) != 1:
        raise FlowerRunError(f"the nodes' data have different feature shapes {sorted(shapes)}")
    dtype = job.torch_dtype
    # Clients without a node get weight 0: they are never delivered, so the renormalised
    # mean over delivered uploads does not use it.
    weights = torch.zeros(N, dtype=torch.float64)
    for pid, info in table.items():
        weights[pid] = float(info["weight"])
    spec = DataSpec(N, shapes.pop(), dtype, weights)
    bound = algorithm.bind(problem, spec, _node_statistics(table, N, dtype))
    # As in simulate: the job's cohort size, else the one the algorithm asks for.
    per_round = job.clients_per_round or getattr(algorithm, "clients_per_round", None)
    state = bound.init(problem, job.seed)

    history = History(config={"algorithm": repr(algorithm), "problem": problem.name,
                              "data": repr(job.data), "seed": job.seed,
                              "clients_per_round": per_round, "rounds": job.rounds,
                              "runtime": "flower", "nodes": len(table)})
    rounds_done = []

    def measure(model, t: int) -> dict:
        # The simulator's record fields (None where the server cannot know them: it has
        # no ground truth, and no accuracy for a regression problem).
        out = dict.fromkeys(MODEL_FIELDS)
        out.update(_evaluate(grid, table, model, t, timeout, poll))
        return out

    def evaluate(model, state, store) -> dict:
        t = len(rounds_done)
        rounds_done.append(t)
        out: dict = {}
        if every >= 0 and (t + 1 == job.rounds or (every and (t + 1) % every == 0)):
            out.update(measure(model, t))
        out["nnz"] = int((model != 0).sum())
        out["density"] = out["nnz"] / model.numel()
        return out

    model = bound.model(state)
    nnz = int((model != 0).sum())
    history.initial = {"round": 0, **(measure(model, -1) if every >= 0 else {}),
                       "nnz": nnz, "density": nnz / model.numel(),
                       "bytes_up": 0, "bytes_down": 0, "bytes_up_total": 0,
                       "bytes_down_total": 0, "bytes_total": 0, "clients_sampled": 0,
                       "delivered": 0, "seconds": 0.0, "elapsed": 0.0}

    def logged(record, state):
        log(INFO, "fedsparse: round %d/%d: %d/%d delivered, %d rejected, %d B up, %d B down",
            record["round"], job.rounds, record["delivered"], record["clients_sampled"],
            record["rejected"], record["bytes_up"], record["bytes_down"])
        if callback is not None:
            callback(record, state)

    loop = RoundLoop(bound, weights, job.seed, per_round,
                     checked_channel(job.build_channel(), N),
                     _grid_executor(grid, job, bound, table), evaluate, ClientStore(None),
                     max_update_norm=fl.get("max_update_norm") or None,
                     stop_on_nonfinite_upload=False)
    state = loop.run(state, history, 0, job.rounds, callback=logged, progress=False)
    history.model = bound.model(state)
    return history


def _put_config(content: RecordDict, config: dict) -> None:
    scalars, arrays = {}, {}
    for k, v in config.items():
        if isinstance(v, torch.Tensor):
            arrays[k] = v
        elif isinstance(v, (bool, int, float, str, bytes)):
            scalars[k] = v
        else:
            raise ConfigError(f"client_config[{k!r}] has type {type(v).__name__}; Flower can "
                              "carry numbers, strings, bytes and tensors")
    content["config"] = ConfigRecord(scalars)
    if arrays:
        content["config.arrays"] = codec.tensors_to_record(arrays)


def _evaluate(grid: Grid, table: dict, model: torch.Tensor, t: int, timeout: float,
              poll: float) -> dict:
    """Objective (and accuracy) of ``model`` over the nodes that reply: sum_i p_i f_i(x)
    with the weights renormalised over them, like the simulator's evaluation; and, when
    the nodes hold personalised models, ``personal_*`` (train) and ``personal_test_*``
    metrics micro-averaged by the nodes' example counts."""
    content = RecordDict()
    codec.put(content, "model", model, "auto")
    msgs = [Message(copy.deepcopy(content) if i else content, info["node_id"],
                    MessageType.EVALUATE, group_id=f"eval-{t + 1}")
            for i, info in enumerate(table.values())]
    replies = exchange(grid, msgs, timeout, poll)
    rows = [dict(r.content["metrics"]) for r in replies if not r.has_error()]
    out: dict = {}
    if len(rows) < len(msgs):
        log(WARNING, "fedsparse: evaluation at round %d: %d of %d node(s) replied; the "
            "metrics are over those", t + 1, len(rows), len(msgs))
    if not rows:
        return out
    for prefix, weight_key in (("", "weight"), ("test_", "test-examples")):
        have = [r for r in rows if f"{prefix}objective" in r]
        if not have:
            continue
        w = torch.tensor([float(r[weight_key]) for r in have], dtype=torch.float64)
        w = w / w.sum()
        out[f"{prefix}objective"] = float(w @ torch.tensor(
            [float(r[f"{prefix}objective"]) for r in have], dtype=torch.float64))
        if all(f"{prefix}accuracy" in r for r in have):
            out[f"{prefix}accuracy"] = float(w @ torch.tensor(
                [float(r[f"{prefix}accuracy"]) for r in have], dtype=torch.float64))
    # Personalised models (they stay on the nodes): each node reports its own model on
    # its own data; micro-averaged over the examples, as fedsparse.metrics.
    # evaluate_personal does in the simulator.
    for prefix, count_key in (("personal_", "num-examples"), ("personal_test_", "test-examples")):
        for name in ("objective", "accuracy"):
            have = [r for r in rows if f"{prefix}{name}" in r and count_key in r]
            if not have:
                continue
            n = torch.tensor([float(r[count_key]) for r in have], dtype=torch.float64)
            out[f"{prefix}{name}"] = float(n @ torch.tensor(
                [float(r[f"{prefix}{name}"]) for r in have], dtype=torch.float64) / n.sum())
    return out


def make_server_app(job: Job | None = None, *, callback: Callable | None = None,
                    on_finish: Callable[[History], None] | None = None) -> ServerApp:
    """A ServerApp that runs a fedsparse job.

    Parameters
    ----------
    job : the job to run when the run config is empty (the Python simulation API);
        under ``flwr run`` the job comes from the app's run config.
    callback : ``callback(record, state)`` after every round.
    on_finish : called with the final :class:`~fedsparse.History`.

    Returns
    -------
    ServerApp
        Whose ``main`` runs the job with :func:`run_on_grid` and saves the history to
        ``flower.out_dir`` if set.
    """
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        run_config = dict(context.run_config)
        the_job = job_from_config(run_config) if run_config else job
        if the_job is None:
            raise ConfigError("this ServerApp has no fedsparse job: the run config is empty "
                              "and make_server_app() was given none")
        history = run_on_grid(grid, the_job, callback=callback)
        out_dir = the_job.flower.get("out_dir")
        if out_dir:
            history.save(Path(out_dir))
            log(INFO, "fedsparse: history and model saved to %s", out_dir)
        if on_finish is not None:
            on_finish(history)

    return app


#: The ServerApp ``flwr run`` loads (``fedsparse.flower.server_app:app``); its job comes
#: from the run config.
app = make_server_app()
