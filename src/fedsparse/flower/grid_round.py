"""A round's messages on the Flower server: the ``train`` messages to the sampled
clients' nodes and their replies (the executor of :class:`fedsparse.rounds.RoundLoop`),
and the ``evaluate`` messages whose checked replies average into the record's metrics.

A reply that is late, an error, malformed or fails its checks is a failed upload (or a
dropped evaluation): logged and counted, never fatal.
"""

from __future__ import annotations

import copy
from logging import WARNING

import torch
from flwr.app import ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from .._validation import ConfigError
from ..rounds import Replies
from . import codec
from .handshake import Refusals, add_joined
from .job import Job
from .messaging import exchange, message_ttl
from .replies import Refused, error_reason, evaluation
from .server_checkpoint import RunTimeline

__all__ = ["evaluate_on_nodes", "grid_executor"]


def grid_executor(grid: Grid, job: Job, algorithm, table: dict[int, dict],
                  refusals: Refusals, weights: torch.Tensor,
                  feature_shape: tuple[int, ...], timeline: RunTimeline):
    """``execute`` for :class:`~fedsparse.rounds.RoundLoop`: one ``train`` message per
    sampled client that has a live node; a client without one, and a reply that is an
    error, late, malformed or of the wrong shape, is a failed upload of that client
    (logged, counted, never fatal). ``timeline``: what the nodes are told of the run's
    start and checkpoints, and the rules for nodes that join a resumed run
    (:func:`~fedsparse.flower.handshake.add_joined`)."""
    fl = job.flower
    timeout, poll = float(fl["round_timeout"]), float(fl["poll_interval"])

    def execute(t: int, clients: torch.Tensor, payload: torch.Tensor, config: dict,
                state_rows) -> Replies:
        nodes_now = set(grid.get_node_ids())
        add_joined(grid, table, refusals, nodes_now, job, weights, feature_shape, timeline)
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
                codec.UPLOAD_ENCODING: algorithm.upload_encoding,
                codec.START_ROUND: timeline.start,
                codec.SAVED_ROUND: t if timeline.saved is None else timeline.saved})
            msgs.append(Message(content, node, MessageType.TRAIN, group_id=str(t + 1),
                                ttl=message_ttl(timeout)))
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
                problems[row] = f"error reply: {error_reason(reply.error)}"
                continue
            try:
                up, nbytes = codec.get(reply.content, codec.UPLOAD, expected_shape=(P,))
            except ConfigError as exc:
                problems[row] = f"malformed reply: {exc}"
                continue
            if up.dtype != payload.dtype:
                # every client computes in the job's dtype: another one is not an honest
                # upload, and a cast would round (float16) or count bytes never agreed
                problems[row] = (f"malformed reply: upload dtype "
                                 f"{str(up.dtype).removeprefix('torch.')} is not the job's "
                                 f"{str(payload.dtype).removeprefix('torch.')}")
                continue
            uploads[row] = up
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


def evaluate_on_nodes(grid: Grid, table: dict, model: torch.Tensor, round: int,
                      timeout: float, poll: float, personal: bool, start: int = 0,
                      classification: bool = True) -> tuple[dict, int]:
    """Objective (and accuracy) of ``model``, the model after ``round`` rounds, over the
    online nodes whose replies pass :func:`~fedsparse.flower.replies.evaluation`:
    sum_i p_i f_i(x) with the handshake's weights renormalised over them, like the
    simulator's evaluation; and, when the nodes hold personalised models, ``personal_*``
    (train) and ``personal_test_*`` metrics micro-averaged by the nodes' example counts.
    ``classification``: whether the problem has classes (a regression's nodes report no
    accuracy, and one that does is left out). ``start``: the round the run started from
    (a node keeping its clients' state on disk reads the state of this run's history,
    :mod:`fedsparse.flower.node_state`).

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
    content[codec.TASK] = ConfigRecord({codec.ROUND: round, codec.START_ROUND: start})
    msgs = [Message(copy.deepcopy(content) if i else content, info["node_id"],
                    MessageType.EVALUATE, group_id=f"eval-{round}", ttl=message_ttl(timeout))
            for i, info in enumerate(asked)]
    replies = exchange(grid, msgs, timeout, poll)
    rows: list[dict] = []
    for i, info in enumerate(asked):
        reply = replies.get(i)
        if reply is None:
            why = f"no reply within round_timeout={timeout:g} s"
        elif reply.has_error():
            why = f"error reply: {error_reason(reply.error)}"
        else:
            try:
                rows.append(evaluation(reply.content, info, personal, classification))
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
