"""The Flower ServerApp: any fedsparse Algorithm, round by round, over Flower's grid.

One run:

1. wait for the nodes (``flower.min_nodes``, default one per client, at most
   ``flower.wait_timeout`` seconds), then a ``query`` handshake maps Flower's random
   node ids to fedsparse client ids (node config ``partition-id``) and collects each
   client's weight, size, feature shape and the per-client statistics the algorithm
   asks for (:meth:`Algorithm.statistics`, e.g. L_i for ``step_size="auto"``). Every
   reply is checked (:mod:`fedsparse.flower.replies`): a node that answers with an
   error or with anything out of bounds (a partition id outside 0..N-1, a non-finite or
   non-positive weight, a weight above its example count, ...), claims a partition
   another node also claims, or has not answered within ``flower.round_timeout``
   seconds :data:`HANDSHAKE_TRIES` times (it is asked again each round), is refused:
   logged, listed in ``history.config["refused_nodes"]``, never asked again and never
   sent work. The run goes on with the other nodes; only when no node is
   left does it stop (:class:`FlowerRunError`, with every refusal's reason);
2. ``algorithm.bind`` with a :class:`DataSpec` (N, feature shape, dtype, weights) and
   those statistics -- exactly what the simulator binds with -- then ``init``;
3. the rounds are :class:`fedsparse.rounds.RoundLoop`, the simulator's loop: clients
   sampled with the same seeded draw, one ``train`` message per sampled client with its
   encoded broadcast and ``algorithm.client_config(state)``; replies within
   ``flower.round_timeout`` seconds, without error and well-formed (right shape,
   consistent encoding, finite, within ``flower.max_update_norm`` of the broadcast when
   set, and within ``flower.max_update_ratio`` (default 100) times the round's median
   distance to the broadcast) are the received uploads; the rest (error replies,
   timeouts, malformed, non-finite or too distant replies, clients with no node) are
   failed uploads, logged and counted in the record's ``rejected``; never fatal. The
   job's ``channel`` applies on top, as in the simulator; a round with no delivered
   upload warns and keeps the model. What a client reports about its work (its reply's
   metrics) is recorded only under the names the algorithm declares
   (``algorithm.client_metrics``), as finite numbers; the record's own fields are the
   server's;
4. the global model is evaluated on the nodes before training, every
   ``flower.evaluate_every`` rounds and at the end (never if it is -1; the round loop's
   ``eval_every`` decides, as in the simulator); an evaluate reply that fails its checks (no weight,
   a weight other than the handshake's, a non-finite or negative objective, ...) is
   left out of the average, logged, and counted in the record's
   ``evaluations_dropped`` (present where it is not 0). The history is saved to
   ``flower.out_dir`` if set.

Without ``flower.max_update_norm`` and with ``flower.max_update_ratio = 0`` nothing
bounds how far one client's upload moves the model; the server says so loudly when
it starts.
"""

from __future__ import annotations

import copy
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from logging import INFO, WARNING
from pathlib import Path

import torch
from flwr.app import ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from .._validation import ConfigError
from ..algorithms.base import DataSpec
from ..channels import checked_channel
from ..client_store import ClientStore, has_personal_models
from ..history import History
from ..metrics import MODEL_FIELDS
from ..rounds import Replies, RoundLoop
from ..screening import cut
from . import codec
from .job import Job, job_from_config
from .replies import Refused, evaluation, node_info


class FlowerRunError(RuntimeError):
    """The run could not start (no nodes, inconsistent nodes); the message says why."""


def exchange(grid: Grid, messages: list[Message], timeout: float, poll: float = 0.2
             ) -> dict[int, Message]:
    """Push ``messages``; pull replies until all arrived or ``timeout`` seconds passed.

    Like ``grid.send_and_receive``, but polling every ``poll`` seconds: the deployment
    grid polls every 3 s, which is most of a short round on a fast network.

    Returns
    -------
    dict
        ``{i: reply to messages[i]}`` for the replies that arrived in time (error replies
        included), matched by the id of the message they answer: a reply to a message
        not sent here, or a second reply to one, is ignored.
    """
    if not messages:
        return {}
    index = {mid: i for i, mid in enumerate(grid.push_messages(messages)) if mid}
    pending = set(index)
    replies: dict[int, Message] = {}
    deadline = time.monotonic() + timeout
    while pending:
        for reply in grid.pull_messages(list(pending)):
            mid = reply.metadata.reply_to_message_id
            if mid in pending:
                pending.discard(mid)
                replies[index[mid]] = reply
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


#: How often a node that does not answer the handshake is asked (at the start or when it
#: joins, then once a round) before it is refused: a slow start is no refusal, and a
#: node that never answers costs at most this many timeouts.
HANDSHAKE_TRIES = 3


@dataclass
class _Refusals:
    """The refused nodes of a run, {node id: why}, and how often each node has not
    answered the handshake in time."""

    reasons: dict[int, str] = field(default_factory=dict)
    unanswered: Counter = field(default_factory=Counter)

    def refuse(self, node: int, why: str) -> None:
        self.reasons[node] = why
        log(WARNING, "fedsparse: node %s refused: %s", node, why)


def _handshake(grid: Grid, nodes: list[int], job: Job, refusals: _Refusals,
               feature_shape: tuple[int, ...] | None = None) -> dict[int, dict]:
    """Query ``nodes``; return {partition id: checked node info incl. ``node_id``}.

    A node whose reply is an error or fails :func:`~fedsparse.flower.replies.node_info`,
    that has not answered :data:`HANDSHAKE_TRIES` times, every node of a partition that
    several claim, and every node whose feature shape is not ``feature_shape`` (default:
    the shape most nodes report, if one shape has more nodes than any other) is refused
    with the reason.
    """
    if not nodes:
        return {}
    timeout, poll = float(job.flower["round_timeout"]), float(job.flower["poll_interval"])
    # The query carries nothing: every node already holds the job (seed included).
    msgs = [Message(RecordDict(), node, MessageType.QUERY, group_id="handshake")
            for node in nodes]
    replies = exchange(grid, msgs, timeout, poll)
    claims: dict[int, list[dict]] = {}
    for i, node in enumerate(nodes):
        reply = replies.get(i)
        if reply is None:
            refusals.unanswered[node] += 1
            tries = refusals.unanswered[node]
            if tries >= HANDSHAKE_TRIES:
                refusals.refuse(node, f"no handshake reply within round_timeout={timeout:g} s, "
                                f"{tries} times")
            else:
                log(WARNING, "fedsparse: node %s did not answer the handshake within %g s "
                    "(%d of %d tries); asked again next round", node, timeout, tries,
                    HANDSHAKE_TRIES)
            continue
        if reply.has_error():
            refusals.refuse(node, f"error reply to the handshake: {cut(reply.error.reason)}")
            continue
        try:
            info = node_info(reply.content, job.num_clients)
        except Refused as exc:
            refusals.refuse(node, f"handshake: {exc}")
            continue
        claims.setdefault(info["partition_id"], []).append({**info, "node_id": node})
    table = {}
    for pid, infos in sorted(claims.items()):
        if len(infos) == 1:
            table[pid] = infos[0]
            continue
        ids = [info["node_id"] for info in infos]
        for info in infos:
            refusals.refuse(info["node_id"], f"partition_id={pid} is claimed by nodes {ids}; "
                    "the server cannot tell which holds it: give every node its own "
                    "partition-id")
    shapes = Counter(info["feature_shape"] for info in table.values())
    if feature_shape is None and shapes:
        top = max(shapes.values())
        leaders = [shape for shape, n in shapes.items() if n == top]
        feature_shape = leaders[0] if len(leaders) == 1 else None
    for pid, info in list(table.items()):
        if info["feature_shape"] != feature_shape:
            del table[pid]
            refusals.refuse(info["node_id"], f"feature_shape {list(info['feature_shape'])} "
                    f"is not the run's {list(feature_shape) if feature_shape else None} "
                    f"(nodes per shape: {dict(shapes)})")
    return table


def _add_joined(grid: Grid, table: dict[int, dict], refusals: _Refusals, nodes_now: set,
                job: Job, weights: torch.Tensor, feature_shape: tuple[int, ...]) -> None:
    """Handshake with the nodes that joined (or rejoined with a new id) since, or have not
    answered yet; update ``table`` and ``weights`` in place, keeping a partition that an
    online node still holds. A refused node is not asked again."""
    known = {info["node_id"] for info in table.values()} | set(refusals.reasons)
    new = sorted(nodes_now - known)
    if not new:
        return
    for pid, info in _handshake(grid, new, job, refusals, feature_shape).items():
        old = table.get(pid)
        if old is not None and old["node_id"] in nodes_now:
            refusals.refuse(info["node_id"], f"partition_id={pid} is held by the online node "
                            f"{old['node_id']}")
            continue
        table[pid] = info  # a restarted node comes back with a new node id
        weights[pid] = info["weight"]


def _node_statistics(table: dict[int, dict], N: int, dtype: torch.dtype
                     ) -> dict[str, torch.Tensor]:
    """The per-client statistics the nodes sent in the handshake, as (N,) tensors (NaN
    for clients without a node), for ``algorithm.bind``."""
    names = {k for info in table.values() for k in info["stats"]}
    out = {}
    for name in sorted(names):
        values = torch.full((N,), float("nan"), dtype=dtype)
        for pid, info in table.items():
            if name in info["stats"]:
                values[pid] = info["stats"][name]
        out[name] = values
    return out


def _grid_executor(grid: Grid, job: Job, algorithm, table: dict[int, dict],
                   refusals: _Refusals, weights: torch.Tensor,
                   feature_shape: tuple[int, ...]):
    """``execute`` for :class:`~fedsparse.rounds.RoundLoop`: one ``train`` message per
    sampled client that has a live node; a client without one, and a reply that is an
    error, late, malformed or of the wrong shape, is a failed upload of that client
    (logged, counted, never fatal)."""
    fl = job.flower
    timeout, poll = float(fl["round_timeout"]), float(fl["poll_interval"])

    def execute(t: int, clients: torch.Tensor, payload: torch.Tensor, config: dict,
                state_rows) -> Replies:
        nodes_now = set(grid.get_node_ids())
        _add_joined(grid, table, refusals, nodes_now, job, weights, feature_shape)
        S, P = int(clients.shape[0]), int(payload.shape[-1])
        problems: dict[int, str] = {}
        # A client whose node has gone offline is not sent anything (and so not delivered):
        # waiting round_timeout for a node the SuperLink knows is gone would stall the run.
        shared = RecordDict()
        if payload.ndim == 1:  # encoded once; every message gets its own copy
            per_client = codec.put(shared, codec.PAYLOAD, payload, algorithm.broadcast_encoding)
        _put_config(shared, config)
        msgs, rows, bytes_down = [], [], 0
        for row, pid in enumerate(clients.tolist()):
            node = table[pid]["node_id"] if pid in table else None
            if node is None or node not in nodes_now:
                problems[row] = "no node holds this client" if node is None else \
                    f"its node {node} is offline"
                continue
            content = RecordDict({k: copy.deepcopy(v) for k, v in shared.items()})
            if payload.ndim == 1:
                bytes_down += per_client
            else:
                bytes_down += codec.put(content, codec.PAYLOAD, payload[row],
                                        algorithm.broadcast_encoding)
            content[codec.TASK] = ConfigRecord({
                codec.ROUND: t, codec.PARTITION_ID: pid,
                codec.UPLOAD_ENCODING: algorithm.upload_encoding})
            msgs.append(Message(content, node, MessageType.TRAIN, group_id=str(t + 1)))
            rows.append(row)
        uploads = torch.zeros(S, P, dtype=payload.dtype)
        received = torch.zeros(S, dtype=torch.bool)
        bytes_up, info_rows = 0, {}
        replies = exchange(grid, msgs, timeout, poll)
        for i, row in enumerate(rows):
            reply = replies.get(i)
            if reply is None:
                problems[row] = f"no reply within round_timeout={timeout:g} s"
                continue
            if reply.has_error():
                problems[row] = f"error reply: {cut(reply.error.reason)}"
                continue
            try:
                up, nbytes = codec.get(reply.content, codec.UPLOAD, expected_shape=(P,))
            except ConfigError as exc:
                problems[row] = f"malformed reply: {exc}"
                continue
            uploads[row] = up.to(payload.dtype)
            received[row] = True
            bytes_up += nbytes
            info_rows[row] = _reply_metrics(reply, t, int(clients[row]))
        return Replies(uploads=uploads, received=received, bytes_up=bytes_up,
                       problems=problems, bytes_down=bytes_down, info_rows=info_rows)

    return execute


def _reply_metrics(reply: Message, t: int, client: int) -> dict:
    """The metrics a train reply carries, as sent (the round loop screens them), without
    the example count."""
    if codec.METRICS not in reply.content:
        return {}
    record = reply.content[codec.METRICS]
    if not isinstance(record, ConfigRecord | MetricRecord):
        log(WARNING, "fedsparse: round %d: client %d sent metrics as a %s; not recorded", t + 1,
            client, type(record).__name__)
        return {}
    return {k: v for k, v in record.items() if k != codec.NUM_EXAMPLES}


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
        One record per round, ``history.model`` the final global model;
        ``history.config["refused_nodes"]`` maps each refused node id to the reason.

    Raises
    ------
    FlowerRunError
        when no node is left after the handshake (none answered, or every one was
        refused; the message gives each reason).
    """
    fl = job.flower
    timeout, poll = float(fl["round_timeout"]), float(fl["poll_interval"])
    problem = job.build_problem()
    algorithm = job.build_algorithm()
    N = job.num_clients
    needed = int(fl["min_nodes"]) or N
    nodes = _wait_for_nodes(grid, needed, float(fl["wait_timeout"]))
    log(INFO, "fedsparse: %d node(s) connected, %d client(s) in the job", len(nodes), N)
    max_norm = float(fl["max_update_norm"]) or None
    max_ratio = float(fl["max_update_ratio"]) or None
    if max_norm is None and max_ratio is None:
        log(WARNING, "fedsparse: NO BOUND ON UPLOADS: flower.max_update_norm and "
            "flower.max_update_ratio are both 0, so one client's upload can move the model "
            "arbitrarily far; set flower.max_update_ratio (default 100) to bound it")
    refusals = _Refusals()
    table = _handshake(grid, nodes, job, refusals)
    if not table:
        why = {**{node: "no handshake reply within round_timeout" for node in
                  refusals.unanswered}, **refusals.reasons}
        reasons = "; ".join(f"node {node}: {w}" for node, w in list(why.items())[:10])
        raise FlowerRunError(f"no usable node: {len(nodes)} connected, none passed the "
                             f"handshake within {fl['round_timeout']} s"
                             + (f" ({reasons})" if reasons else ""))
    missing = sorted(set(range(N)) - set(table))
    if missing:
        log(WARNING, "fedsparse: no node holds clients %s%s; their uploads never arrive",
            missing[:10], " ..." if len(missing) > 10 else "")
    feature_shape = next(iter(table.values()))["feature_shape"]
    dtype = job.torch_dtype
    # Clients without a node get weight 0 until a node takes them (``_add_joined``): they
    # are never delivered, so the renormalised mean over delivered uploads does not use it.
    weights = torch.zeros(N, dtype=torch.float64)
    for pid, info in table.items():
        weights[pid] = info["weight"]
    spec = DataSpec(N, feature_shape, dtype, weights)
    bound = algorithm.bind(problem, spec, _node_statistics(table, N, dtype))
    # As in simulate: the job's cohort size, else the one the algorithm asks for.
    per_round = job.clients_per_round or getattr(algorithm, "clients_per_round", None)
    state = bound.init(problem, job.seed)
    # what the nodes report as personal_* metrics
    personal = has_personal_models(bound, problem, state, job.seed)

    history = History(config={"algorithm": repr(algorithm), "problem": problem.name,
                              "data": repr(job.data), "seed": job.seed,
                              "clients_per_round": per_round, "rounds": job.rounds,
                              "runtime": "flower", "nodes": len(table),
                              "refused_nodes": refusals.reasons})

    def evaluate(model, state, store, round: int) -> dict:
        # The simulator's record fields (None where the server cannot know them: it has
        # no ground truth, and no accuracy for a regression problem).
        out = dict.fromkeys(MODEL_FIELDS)
        metrics, dropped = _evaluate(grid, table, model, round, timeout, poll, personal)
        out.update(metrics)
        if dropped:
            out["evaluations_dropped"] = dropped
        return out

    def support(model) -> dict:
        # the server holds the model: its support is known every round, evaluated or not
        nnz = int((model != 0).sum())
        return {"nnz": nnz, "density": nnz / model.numel()}

    def logged(record, state):
        log(INFO, "fedsparse: round %d/%d: %d/%d delivered, %d rejected, %d B up, %d B down",
            record["round"], job.rounds, record["delivered"], record["clients_sampled"],
            record["rejected"], record["bytes_up"], record["bytes_down"])
        if callback is not None:
            callback(record, state)

    loop = RoundLoop(bound, weights, job.seed, per_round,
                     checked_channel(job.build_channel(), N),
                     _grid_executor(grid, job, bound, table, refusals, weights,
                                    feature_shape),
                     evaluate, ClientStore(None), eval_every=int(fl["evaluate_every"]),
                     max_update_norm=max_norm, max_update_ratio=max_ratio,
                     stop_on_nonfinite_upload=False, every_round=support)
    history.initial = loop.initial_record(state, job.rounds)
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
    content[codec.CONFIG] = ConfigRecord(scalars)
    if arrays:
        content[codec.CONFIG_ARRAYS] = codec.tensors_to_record(arrays)


def _evaluate(grid: Grid, table: dict, model: torch.Tensor, round: int, timeout: float,
              poll: float, personal: bool) -> tuple[dict, int]:
    """Objective (and accuracy) of ``model``, the model after ``round`` rounds, over the
    online nodes whose replies pass :func:`~fedsparse.flower.replies.evaluation`:
    sum_i p_i f_i(x) with the handshake's weights renormalised over them, like the
    simulator's evaluation; and, when the nodes hold personalised models, ``personal_*``
    (train) and ``personal_test_*`` metrics micro-averaged by the nodes' example counts.

    Returns
    -------
    metrics : dict
    dropped : int
        Nodes asked whose evaluation is left out (no reply, an error, a failed check).
    """
    online = set(grid.get_node_ids())
    asked = [info for info in table.values() if info["node_id"] in online]
    content = RecordDict()
    codec.put(content, codec.MODEL, model, "auto")
    msgs = [Message(copy.deepcopy(content) if i else content, info["node_id"],
                    MessageType.EVALUATE, group_id=f"eval-{round}")
            for i, info in enumerate(asked)]
    replies = exchange(grid, msgs, timeout, poll)
    rows: list[dict] = []
    for i, info in enumerate(asked):
        reply = replies.get(i)
        if reply is None:
            why = f"no reply within round_timeout={timeout:g} s"
        elif reply.has_error():
            why = f"error reply: {cut(reply.error.reason)}"
        else:
            try:
                rows.append(evaluation(reply.content, info, personal))
                continue
            except Refused as exc:
                why = str(exc)
        log(WARNING, "fedsparse: round %d: evaluation of node %s (client %d) left out: %s",
            round, info["node_id"], info["partition_id"], why)
    if len(rows) < len(table):
        log(WARNING, "fedsparse: evaluation at round %d: %d of %d node(s) counted; the "
            "metrics are over those", round, len(rows), len(table))
    dropped = len(asked) - len(rows)
    out: dict = {}
    if not rows:
        return out, dropped
    for prefix, weight_key in (("", codec.WEIGHT), ("test_", codec.TEST_EXAMPLES)):
        have = [r for r in rows if f"{prefix}objective" in r]
        if not have:
            continue
        w = torch.tensor([r[weight_key] for r in have], dtype=torch.float64)
        w = w / w.sum()
        out[f"{prefix}objective"] = float(w @ torch.tensor(
            [r[f"{prefix}objective"] for r in have], dtype=torch.float64))
        if all(f"{prefix}accuracy" in r for r in have):
            out[f"{prefix}accuracy"] = float(w @ torch.tensor(
                [r[f"{prefix}accuracy"] for r in have], dtype=torch.float64))
    # Personalised models (they stay on the nodes): each node reports its own model on
    # its own data; micro-averaged over the examples, as fedsparse.metrics.
    # evaluate_personal does in the simulator.
    for prefix, count_key in (("personal_", codec.NUM_EXAMPLES),
                              ("personal_test_", codec.TEST_EXAMPLES)):
        for name in ("objective", "accuracy"):
            have = [r for r in rows if f"{prefix}{name}" in r and count_key in r]
            if not have:
                continue
            n = torch.tensor([r[count_key] for r in have], dtype=torch.float64)
            out[f"{prefix}{name}"] = float(n @ torch.tensor(
                [r[f"{prefix}{name}"] for r in have], dtype=torch.float64) / n.sum())
    return out, dropped


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
