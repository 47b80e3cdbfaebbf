"""The data a Flower node trains on, from its node config.

``partition-id`` (the fedsparse client id, 0-based) and ``num-partitions`` select a row
of the job's seeded generator (every node regenerates the same federated data set and
keeps its own row), or ``data-path`` names an ``.npz`` file on that node with arrays
``X`` (n, d) and ``y`` (n,) (optionally ``X_test``, ``y_test``; no other arrays); then
the job's ``data.kind = "node"`` and ``data.num_clients`` gives the number of clients.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral
from pathlib import Path

import numpy as np
import torch

from .._validation import ConfigError, fail
from ..data.federated import ClientSplit, from_arrays
from .job import NODE_DATA, Job

__all__ = ["NPZ_ARRAYS", "NodeData", "load_node_data"]


@dataclass
class NodeData:
    """What a node trains on: its client id and its local split."""

    partition_id: int
    num_partitions: int
    train: ClientSplit
    test: ClientSplit | None
    weight: float
    source: str


def _node_int(node_config: dict, key: str) -> int | None:
    if key not in node_config:
        return None
    value = node_config[key]
    # Flower parses --node-config as TOML: 2.9, true or inf arrive as such, and int()
    # would take 2.9 for 2 and true for 1
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise fail(f"node config {key}", value, "must be a whole number, e.g. "
                   f"--node-config '{key}=0'")
    return int(value)


def load_node_data(job: Job, node_config: dict) -> NodeData:
    """The local data of one node (see the module docstring).

    Raises
    ------
    ConfigError
        naming the node config key that is missing or inconsistent with the job.
    """
    pid = _node_int(node_config, "partition-id")
    num = _node_int(node_config, "num-partitions")
    N = job.num_clients
    if pid is None:
        raise ConfigError("node config partition-id is missing: every node needs its client "
                          f"id (0..{N - 1}), e.g. --node-config 'partition-id=0 "
                          f"num-partitions={N}'")
    if num is not None and num != N:
        raise fail("node config num-partitions", num, f"must equal the job's number of "
                   f"clients {N} (data.num_clients)")
    if not 0 <= pid < N:
        raise fail("node config partition-id", pid, f"must be in 0..{N - 1}")
    path = node_config.get("data-path")
    if path and job.data["kind"] != NODE_DATA:
        raise fail("node config data-path", str(path), f'applies to data.kind = "node"; this '
                   f"job draws every node's data from data.kind = {job.data['kind']!r}, so a "
                   "file would train on other data with another weight")
    if path:
        train, test = _load_npz(Path(str(path)), job.torch_dtype)
        return NodeData(pid, N, train, test, float(int(train.counts[0])), f"file {path}")
    if job.data["kind"] == NODE_DATA:
        raise ConfigError('data.kind="node" but this node has no data-path in its node '
                          "config; start it with --node-config 'data-path=\"/path/data.npz\" "
                          "partition-id=..'")
    data = job.build_data()
    if data.num_clients != N:
        raise fail("data.num_clients", data.num_clients, f"does not match {N}")
    one = torch.tensor([pid])
    test = None if data.test is None else data.test.select(one)
    return NodeData(pid, N, data.train.select(one), test, float(data.weights[pid]),
                    f"{job.data['kind']} partition {pid}/{N}")


def _load_npz(path: Path, dtype: torch.dtype) -> tuple[ClientSplit, ClientSplit | None]:
    if not path.exists():
        raise fail("node config data-path", str(path), "does not exist on this node")
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets the same message
        raise ConfigError(f"data-path {str(path)!r} is not a readable .npz file: {exc}") from None
    missing = {"X", "y"} - set(arrays)
    if missing:
        raise fail("data-path arrays", sorted(arrays), f"must contain X and y (missing "
                   f"{sorted(missing)})")
    extra = set(arrays) - set(NPZ_ARRAYS)
    if extra:  # a misspelt X_test would otherwise leave the node without test data
        raise fail(f"data-path {str(path)!r} arrays", sorted(arrays), "may only be "
                   f"{', '.join(NPZ_ARRAYS)} (unknown: {sorted(extra)})")
    test_x, test_y = arrays.get("X_test"), arrays.get("y_test")
    try:
        fd = from_arrays([arrays["X"]], [arrays["y"]],
                         test_xs=None if test_x is None else [test_x],
                         test_ys=None if test_y is None else [test_y], dtype=dtype)
    except ConfigError as exc:
        # from_arrays names a data set's per-client lists (train_xs[0], "client 0"); the
        # node's operator knows the file and its arrays
        message = str(exc)
        for theirs, ours in _NPZ_NAMES:
            message = message.replace(theirs, ours)
        raise ConfigError(f"data-path {str(path)!r}: {message}") from None
    return fd.train, fd.test


#: The arrays a node's ``.npz`` file may hold.
NPZ_ARRAYS = ("X", "y", "X_test", "y_test")
#: from_arrays' names of one client's arrays -> the arrays of the node's file.
_NPZ_NAMES = (("train data of client 0", "X or y"), ("test data of client 0", "X_test or y_test"),
              ("train_xs[0]", "X"), ("train_ys[0]", "y"), ("test_xs[0]", "X_test"),
              ("test_ys[0]", "y_test"), ("test_xs and test_ys", "X_test and y_test"))
