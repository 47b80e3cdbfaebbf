"""Which Flower nodes take part in a run: waiting for them, the ``query`` handshake that
maps node ids to fedsparse client ids, the nodes refused, and the per-client statistics
the handshake collects for ``algorithm.bind``.

Every handshake reply is checked by :func:`fedsparse.flower.replies.node_info`; a node
that fails, claims a partition another node claims, reports another feature shape, or
does not answer :data:`HANDSHAKE_TRIES` times is refused (never asked again, never sent
work).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from logging import WARNING

import torch
from flwr.app import Message, MessageType, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from .job import Job
from .messaging import exchange, message_ttl
from .replies import Refused, error_reason, node_info
from .server_checkpoint import RunTimeline

__all__ = ["HANDSHAKE_TRIES", "Refusals", "add_joined", "handshake", "node_statistics",
           "wait_for_nodes"]


def wait_for_nodes(grid: Grid, needed: int, timeout: float) -> list[int]:
    """The ids of the connected nodes, sorted, once ``needed`` are connected or after
    ``timeout`` seconds, whichever comes first."""
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
class Refusals:
    """The refused nodes of a run, {node id: why}, and how often each node has not
    answered the handshake in time."""

    reasons: dict[int, str] = field(default_factory=dict)
    unanswered: Counter = field(default_factory=Counter)

    def refuse(self, node: int, why: str) -> None:
        self.reasons[node] = why
        log(WARNING, "fedsparse: node %s refused: %s", node, why)


def handshake(grid: Grid, nodes: list[int], job: Job, refusals: Refusals,
              feature_shape: tuple[int, ...] | None = None,
              statistics: frozenset | None = None) -> dict[int, dict]:
    """Query ``nodes``; return {partition id: checked node info incl. ``node_id``}.

    A node whose reply is an error or fails :func:`~fedsparse.flower.replies.node_info`,
    that has not answered :data:`HANDSHAKE_TRIES` times, every node of a partition that
    several claim, every node whose feature shape is not ``feature_shape``, and every
    node whose statistics' names are not ``statistics`` (each by default what most nodes
    report, if one has more nodes than any other) is refused with the reason. Every
    node's algorithm computes the same statistics: a node that leaves one out would get
    its client's value from nowhere (an "auto" step from the other nodes' L_i alone).
    """
    if not nodes:
        return {}
    timeout, poll = float(job.flower["round_timeout"]), float(job.flower["poll_interval"])
    # The query carries nothing: every node already holds the job (seed included).
    msgs = [Message(RecordDict(), node, MessageType.QUERY, group_id="handshake",
                    ttl=message_ttl(timeout)) for node in nodes]
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
            refusals.refuse(node, f"error reply to the handshake: {error_reason(reply.error)}")
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
    _keep_the_runs(table, refusals, lambda info: info["feature_shape"], feature_shape,
                   lambda shape: list(shape) if shape else None, "feature_shape", "is",
                   "shape")
    _keep_the_runs(table, refusals, lambda info: frozenset(info["stats"]), statistics,
                   lambda names: None if names is None else sorted(names), "statistics",
                   "are", "set")
    return table


def _keep_the_runs(table: dict[int, dict], refusals: Refusals, value_of, expected, shown,
                   what: str, verb: str, kind: str) -> None:
    """Refuse (and drop from ``table``) every node whose ``value_of(info)`` is not the
    run's: ``expected``, or by default the value most nodes report, if one has more
    nodes than any other (none, and every node refused, when two or more tie)."""
    counts = Counter(value_of(info) for info in table.values())
    if expected is None and counts:
        top = max(counts.values())
        leaders = [value for value, n in counts.items() if n == top]
        expected = leaders[0] if len(leaders) == 1 else None
    per = {tuple(shown(value)): n for value, n in counts.items()}
    for pid, info in list(table.items()):
        if value_of(info) != expected:
            del table[pid]
            refusals.refuse(info["node_id"], f"{what} {shown(value_of(info))} {verb} not "
                            f"the run's {shown(expected)} (nodes per {kind}: {per})")


def add_joined(grid: Grid, table: dict[int, dict], refusals: Refusals, nodes_now: set,
               job: Job, weights: torch.Tensor, feature_shape: tuple[int, ...],
               timeline: RunTimeline | None = None) -> None:
    """Handshake with the nodes that joined (or rejoined with a new id) since, or have not
    answered yet; update ``table`` and ``weights`` in place, keeping a partition that an
    online node still holds. A refused node is not asked again.

    ``timeline`` (:class:`~fedsparse.flower.server_checkpoint.RunTimeline`): in a
    resumed run, a node whose client the checkpoint knows must report the same data, and
    where the clients keep state it must keep it on disk; else it is refused."""
    known = {info["node_id"] for info in table.values()} | set(refusals.reasons)
    new = sorted(nodes_now - known)
    if not new:
        return
    statistics = frozenset(next(iter(table.values()))["stats"]) if table else None
    for pid, info in handshake(grid, new, job, refusals, feature_shape, statistics).items():
        why = None if timeline is None else timeline.refusal(pid, info)
        if why is not None:
            refusals.refuse(info["node_id"], why)
            continue
        old = table.get(pid)
        if old is not None and old["node_id"] in nodes_now:
            refusals.refuse(info["node_id"], f"partition_id={pid} is held by the online node "
                            f"{old['node_id']}")
            continue
        table[pid] = info  # a restarted node comes back with a new node id
        weights[pid] = info["weight"]


def node_statistics(table: dict[int, dict], N: int, dtype: torch.dtype
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
        _warn_if_one_dominates(name, values)
    return out


#: A statistic this many times the nodes' median is named in a warning: with
#: ``step_size="auto"`` (1 / max_i L_i) one node's L_i sets every client's step.
DOMINANT = 100.0


def _warn_if_one_dominates(name: str, values: torch.Tensor) -> None:
    known = values[torch.isfinite(values)]
    if known.numel() < 3:
        return
    median = float(known.median())
    top = int(torch.nan_to_num(values, nan=-1.0).argmax())
    if median > 0 and float(values[top]) > DOMINANT * median:
        log(WARNING, "fedsparse: client %d's %s = %.4g is %.0f times the nodes' median "
            "%.4g; a step size derived from the largest value (step_size=\"auto\") is set by "
            "that one node: check it, or give a numeric step size", top, name,
            float(values[top]), float(values[top]) / median, median)


def refuse_unfit_nodes(table: dict[int, dict], weights: torch.Tensor, refusals: Refusals,
                       timeline: RunTimeline) -> None:
    """Refuse the nodes of ``table`` that ``timeline`` says cannot take part in a resumed
    run (:meth:`~fedsparse.flower.server_checkpoint.RunTimeline.refusal`): their clients
    leave the table and their weight becomes 0, as for a client without a node."""
    for pid, info in list(table.items()):
        why = timeline.refusal(pid, info)
        if why is not None:
            refusals.refuse(info["node_id"], why)
            del table[pid]
            weights[pid] = 0.0
