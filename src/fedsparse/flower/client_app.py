"""The Flower ClientApp: one fedsparse client on one node.

Three message types:

* ``query`` -- the handshake: the node tells the server which fedsparse client it is
  (``partition-id``), how many examples it holds, its aggregation weight, the feature
  dimension and, when the problem has one, its smoothness constant L_i (so the server
  can resolve ``step_size="auto"`` = 1 / max_i L_i without seeing any data);
* ``train`` -- decode the broadcast payload, run ``algorithm.client_update`` with
  S = 1 and ``clients = tensor([partition_id])``, so the counter-based random numbers
  draw the same mini-batches as the embedded simulator, and reply with the encoded
  upload; per-client algorithm state stays on the node in ``context.state``;
* ``evaluate`` -- loss (and accuracy) of the global model on the local data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from ..algorithms.base import ClientContext
from ..data.federated import FederatedDataset
from . import codec
from .job import Job, NodeData, job_from_config, load_node_data

STATE_KEY = "fedsparse.client_state"


@dataclass
class _Runtime:
    job: Job
    problem: object
    algorithm: object
    node: NodeData


_RUNTIMES: dict[str, _Runtime] = {}


def _runtime(default_job: Job | None, default_key: dict | None, context: Context) -> _Runtime:
    """Job, problem, algorithm and local data of this node, built once per process
    (``default_key`` is ``default_job.to_dict()``, computed once per app)."""
    run_config = dict(context.run_config)
    node_config = dict(context.node_config)
    key = json.dumps([run_config, node_config, default_key], sort_keys=True, default=str)
    if key not in _RUNTIMES:
        job = job_from_config(run_config) if run_config else default_job
        if job is None:
            raise RuntimeError("this ClientApp has no fedsparse job: the run config is empty "
                               "and make_client_app() was given none")
        problem = job.build_problem()
        algorithm = job.build_algorithm()
        rt = _Runtime(job, problem, algorithm, load_node_data(job, node_config))
        problem.check_data(_local_dataset(rt))
        if len(_RUNTIMES) > 64:  # a long-lived process serving many runs: do not grow forever
            _RUNTIMES.clear()
        _RUNTIMES[key] = rt
    return _RUNTIMES[key]


def _local_dataset(rt: _Runtime) -> FederatedDataset:
    """The node's data as a one-client data set (its weight is irrelevant here)."""
    return FederatedDataset(train=rt.node.train, weights=torch.ones(1, dtype=torch.float64),
                            test=rt.node.test, name=rt.node.source)


def _client_state(rt: _Runtime, context: Context) -> dict | None:
    if STATE_KEY in context.state:
        return codec.record_to_tensors(context.state[STATE_KEY])
    if not rt.algorithm.stateful_clients:
        return None
    return rt.algorithm.init_clients(rt.problem, _local_dataset(rt))


def _store_state(context: Context, state: dict | None) -> None:
    if state is None:
        return
    context.state[STATE_KEY] = codec.tensors_to_record(state)


def _config(content: RecordDict) -> dict:
    """The algorithm's client config: scalars from ``config``, tensors from ``config.arrays``."""
    config = dict(content["config"]) if "config" in content else {}
    if "config.arrays" in content:
        config.update(codec.record_to_tensors(content["config.arrays"]))
    return config


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
        info = {"partition_id": node.partition_id, "num_partitions": node.num_partitions,
                "count": int(node.train.counts[0]), "weight": float(node.weight),
                "dim": int(node.train.X.shape[-1]), "dtype": str(node.train.X.dtype),
                "source": node.source}
        if "lipschitz" in rt.problem.capabilities:
            X, w = node.train.X, node.train.mean_weights()
            info["lipschitz"] = float(rt.problem.lipschitz(X, w)[0])
        return Message(RecordDict({"node": ConfigRecord(info)}), reply_to=msg)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        rt = _runtime(job, job_key, context)
        meta = msg.content["fedsparse"]
        expected = int(meta["partition_id"])
        if expected != rt.node.partition_id:
            raise RuntimeError(f"the server sent client {expected}'s work to the node holding "
                               f"partition {rt.node.partition_id}")
        payload, _ = codec.get(msg.content, "payload")
        ctx = ClientContext(rt.problem, rt.node.train, torch.tensor([rt.node.partition_id]),
                            int(meta["round"]), rt.job.seed, state=_client_state(rt, context),
                            config=_config(msg.content))
        uploads, new_state, info = rt.algorithm.client_update(payload, ctx)
        _store_state(context, new_state)
        content = RecordDict()
        codec.put(content, "upload", uploads[0], str(meta["upload_encoding"]))
        metrics = {k: float(v) for k, v in info.items()}
        metrics["num-examples"] = int(rt.node.train.counts[0])
        content["metrics"] = MetricRecord(metrics)
        return Message(content, reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        rt = _runtime(job, job_key, context)
        model, _ = codec.get(msg.content, "model")
        metrics = {"weight": float(rt.node.weight),
                   "num-examples": int(rt.node.train.counts[0])}
        if rt.node.test is not None:
            metrics["test-examples"] = int(rt.node.test.counts[0])
        for name, split in (("", rt.node.train), ("test_", rt.node.test)):
            if split is None:
                continue
            w = split.mean_weights()
            metrics[f"{name}objective"] = float(rt.problem.loss(model, split.X, split.y, w)[0])
            acc = rt.problem.accuracy(model, split.X, split.y, w)
            if acc is not None:
                metrics[f"{name}accuracy"] = float(acc[0])
        return Message(RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)

    return app


#: The ClientApp ``flwr run`` loads (``fedsparse.flower.client_app:app``); its job comes
#: from the run config.
app = make_client_app()
