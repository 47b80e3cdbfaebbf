"""The Flower server against hostile clients: a battery kept so that a change that
reopens any of these holes fails.

Every case drives :func:`~fedsparse.flower.server_app.run_on_grid` over the in-process
grid of ``conftest.py`` (no processes), where one client rewrites its replies (or never
sends them). Each case asserts that

* the server runs to the end (a hostile reply never kills it),
* the record holds only what the server measured: the round, delivered and rejected
  counts and the bytes are the server's, whatever the client claims, and a field a
  client invents never appears,
* ``rejected`` counts every failed upload of a sampled client (malformed, non-finite,
  too far, an error reply, no reply, no node), and
* the honest clients' work is unaffected: the model equals the simulator's with exactly
  the delivery pattern the server recorded, and an evaluation counts only the honest
  nodes.

The categories (the rows of the table in the test-suite summary at the bottom):
malformed train replies, client metrics that impersonate server fields, malformed
evaluate replies, malformed handshakes, nodes that never reply, and nodes that claim
another's partition.
"""

import logging
import math
import warnings

import pytest
import torch

flwr = pytest.importorskip("flwr")

from flwr.app import (  # noqa: E402
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    MetricRecord,
    RecordDict,
)

import fedsparse as fs  # noqa: E402
from fedsparse.data.federated import FederatedDataset  # noqa: E402
from fedsparse.flower import job_from_config  # noqa: E402
from fedsparse.flower.handshake import Refusals, handshake  # noqa: E402
from fedsparse.flower.replies import Refused, node_info  # noqa: E402
from fedsparse.flower.server_app import HANDSHAKE_TRIES, run_on_grid  # noqa: E402

pytestmark = pytest.mark.flower

ROUNDS = 3
HOSTILE = 1  # the partition whose node turns hostile (train and evaluate cases)
JOB = {"rounds": ROUNDS, "seed": 2,
       "data": {"kind": "fedht_simulation", "num_clients": 4, "samples_per_client": 16,
                "dim": 30, "support_size": 4},
       "problem": {"kind": "least_squares"},
       "algorithm": {"kind": "fed_iter_ht", "sparsity": 4, "local_steps": 2, "batch_size": 5,
                     "step_size": 0.003},
       "flower": {"round_timeout": 0.3, "wait_timeout": 0.0, "poll_interval": 0.02,
                  "evaluate_every": 1}}


class Replay:
    """The simulator's channel that delivers exactly what the Flower run delivered."""

    def __init__(self, delivered_clients):
        self.delivered_clients = delivered_clients

    def delivered(self, seed, round, clients):
        ok = set(self.delivered_clients[round])
        return torch.tensor([int(c) in ok for c in clients])


def _job(**changes):
    return job_from_config({**JOB, **changes})


def _run(fake_grid, job, fate=None, partitions=range(4), nodes=None, callback=None):
    grid = fake_grid(job, partitions, fate or (lambda kind, group, pid: "ok"), nodes=nodes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # e.g. a round without uploads
        return run_on_grid(grid, job, callback=callback), grid


def _simulate(job, delivered_clients):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fs.simulate(job.build_algorithm(), job.build_problem(), job.build_data(),
                           rounds=job.rounds, seed=job.seed,
                           clients_per_round=job.clients_per_round,
                           channel=Replay(delivered_clients))


_HONEST: dict = {}


def _honest(fake_grid, job):
    """The run of ``job`` with every node honest (computed once per job)."""
    key = repr(job.to_dict())
    if key not in _HONEST:
        history, _ = _run(fake_grid, job)
        assert history.column("rejected") == [0] * ROUNDS
        assert history.column("delivered_clients") == [[0, 1, 2, 3]] * ROUNDS
        _HONEST[key] = history
    return _HONEST[key]


def _check_server_record(history, honest, job, *, rejected, delivered):
    """The record is the server's: rounds 1..R, its own counts, no field a client made
    up; the model is the simulator's with exactly the recorded deliveries."""
    assert history.column("round") == list(range(1, ROUNDS + 1))
    assert history.column("rejected") == rejected
    assert history.column("delivered_clients") == delivered
    assert history.column("delivered") == [len(d) for d in delivered]
    assert history.column("clients_sampled") == [4] * ROUNDS
    allowed = set(honest.records[0]) | {"evaluations_dropped"}
    for record in history.records:
        assert set(record) <= allowed, set(record) - allowed
    reference = _simulate(job, delivered)
    torch.testing.assert_close(history.model, reference.model, rtol=1e-5, atol=1e-7)


# -- malformed train replies ----------------------------------------------------------


def _set_meta(key, value):
    def corrupt(content):
        content["upload.meta"][key] = value
    return corrupt


def _set_values(transform):
    def corrupt(content):
        arrays = content["upload"]
        arrays["value"] = Array(transform(arrays["value"].numpy().copy()))
    return corrupt


def _set_index(transform):
    def corrupt(content):
        index = content["upload"]["index"].numpy().copy()
        content["upload"]["index"] = Array(transform(index))
    return corrupt


def _replace(name, record):
    def corrupt(content):
        content[name] = record
    return corrupt


def _reencoded(dtype):
    """The client's own upload, encoded consistently in another dtype than the job's."""
    def corrupt(content):
        from fedsparse.flower import codec

        upload, _ = codec.get(content, codec.UPLOAD)
        codec.put(content, codec.UPLOAD, upload.to(dtype), "auto")
    return corrupt


def _repeat_first(index):
    index[1] = index[0]
    return index


def _clear(content):
    for key in list(content):
        del content[key]


def _out_of_range(index):
    index[0] = 30  # P = 30: one past the end
    return index


#: Client HOSTILE's upload in round 2, rewritten; each is a failed upload of that client.
TRAIN_REPLIES = {
    "wrong length": _set_meta("shape", [31]),
    "negative shape": _set_meta("shape", [-30]),
    "shape of 2^40 entries": _set_meta("shape", [2**40]),
    "lying nnz": _set_meta("nnz", [3]),
    "nnz of another type": _set_meta("nnz", "four"),
    "unknown encoding": _set_meta("encoding", "zip"),
    "integer dtype": _set_meta("dtype", "int64"),
    "index out of range": _set_index(_out_of_range),
    "repeated index": _set_index(_repeat_first),
    "index of floats": _set_index(lambda i: i.astype("float32")),
    "NaN values": _set_values(lambda v: v * float("nan")),
    "inf values": _set_values(lambda v: v + float("inf")),
    "values of another dtype": _set_values(lambda v: v.astype("float64")),
    "a float16 upload for a float32 job": _reencoded(torch.float16),
    "a float64 upload for a float32 job": _reencoded(torch.float64),
    "scaled by 1e30": _set_values(lambda v: v * 1e30),
    "scaled by -1e30": _set_values(lambda v: v * -1e30),
    "no upload": lambda content: content.pop("upload"),
    "no metadata": lambda content: content.pop("upload.meta"),
    "upload of another record type": _replace("upload", ConfigRecord({"value": 1.0})),
    "metadata of another record type": _replace("upload.meta", MetricRecord({"nnz": 4})),
    "empty reply": _clear,
}


@pytest.mark.parametrize("name", sorted(TRAIN_REPLIES))
def test_a_malformed_train_reply_is_a_failed_upload_of_that_client(fake_grid, name, caplog):
    job = _job()
    honest = _honest(fake_grid, job)

    def fate(kind, group, pid):
        return TRAIN_REPLIES[name] if kind == "train" and group == "2" and pid == HOSTILE \
            else "ok"

    with caplog.at_level(logging.WARNING):
        history, _ = _run(fake_grid, job, fate)
    _check_server_record(history, honest, job, rejected=[0, 1, 0],
                         delivered=[[0, 1, 2, 3], [0, 2, 3], [0, 1, 2, 3]])
    assert f"upload of client {HOSTILE} rejected" in caplog.text


def test_a_server_callback_that_leaves_a_nan_in_the_model_is_named(fake_grid):
    def poisons(record, state):
        if record["round"] == 2:
            state["model"][0] = float("nan")

    with pytest.raises(fs.ConfigError, match=r"round 2: callback .*poisons left a "
                                             r"non-finite model"):
        _run(fake_grid, _job(), callback=poisons)


def test_a_1e30_upload_never_moves_the_model_by_default(fake_grid):
    """Without the default bound relative to the round's median distance, one reply
    scaled by 1e30 moves the model to ~1e27; with it, the upload is refused."""
    scaled = TRAIN_REPLIES["scaled by 1e30"]

    def fate(kind, group, pid):
        return scaled if kind == "train" and group == "2" and pid == HOSTILE else "ok"

    job = _job()
    history, _ = _run(fake_grid, job, fate)
    assert float(history.model.abs().max()) < 10
    off = _job(flower={**JOB["flower"], "max_update_ratio": 0})
    unbounded, _ = _run(fake_grid, off, fate)
    assert float(unbounded.model.abs().max()) > 1e20
    assert unbounded.column("rejected") == [0, 0, 0]


# -- client metrics that impersonate server fields ------------------------------------


def _metrics(record):
    def rewrite(content):
        content["metrics"] = record
    return rewrite


def _both(*rewrites):
    def rewrite(content):
        for r in rewrites:
            r(content)
    return rewrite


SERVER_CLAIMS = {"rejected": 0, "delivered": 99, "round": 7, "bytes_up": 0,
                 "bytes_total": -1, "clients_sampled": 1, "objective": -5.0, "nnz": 0,
                 "density": 2.0, "seconds": 1e9, "elapsed": -1.0}

#: Client HOSTILE's train-reply metrics in round 2: (rewrite, upload accepted?).
METRIC_REPLIES = {
    "server fields": (_metrics(MetricRecord(SERVER_CLAIMS)), True),
    "server fields with a NaN upload": (_both(_metrics(MetricRecord(SERVER_CLAIMS)),
                                              TRAIN_REPLIES["NaN values"]), False),
    "server fields with a 1e30 upload": (_both(_metrics(MetricRecord(SERVER_CLAIMS)),
                                               TRAIN_REPLIES["scaled by 1e30"]), False),
    "server fields as strings": (_metrics(ConfigRecord(
        {"rejected": "0", "delivered_clients": "all", "round": "7"})), True),
    "new field names": (_metrics(MetricRecord({"accuracy_boost": 1.0, "x" * 5000: 1.0})), True),
    "10000 names": (_metrics(MetricRecord({f"m{i}": 1.0 for i in range(10_000)})), True),
    "NaN and inf": (_metrics(MetricRecord({"rejected": float("nan"),
                                           "delivered": float("inf")})), True),
    "metrics as arrays": (_metrics(ArrayRecord({"rejected": Array(torch.zeros(3).numpy())})),
                          True),
}


@pytest.mark.parametrize("name", sorted(METRIC_REPLIES))
def test_client_metrics_never_rewrite_the_servers_record(fake_grid, name, caplog):
    rewrite, accepted = METRIC_REPLIES[name]
    job = _job()
    honest = _honest(fake_grid, job)

    def fate(kind, group, pid):
        return rewrite if kind == "train" and group == "2" and pid == HOSTILE else "ok"

    with caplog.at_level(logging.WARNING):
        history, _ = _run(fake_grid, job, fate)
    said = f"client {HOSTILE} sent" if accepted else f"upload of client {HOSTILE} rejected"
    assert said in caplog.text
    delivered = [0, 1, 2, 3] if accepted else [0, 2, 3]
    _check_server_record(history, honest, job, rejected=[0, 0 if accepted else 1, 0],
                         delivered=[[0, 1, 2, 3], delivered, [0, 1, 2, 3]])
    for field in ("bytes_down", "nnz", "density"):
        assert history.records[1][field] == honest.records[1][field] or not accepted, field
    if accepted:
        assert history.records[1]["bytes_up"] == honest.records[1]["bytes_up"]
        assert history.records[1]["objective"] == pytest.approx(honest.records[1]["objective"])


#: FedGradMP declares ``inner_iterations``: a hostile value of a declared name.
DECLARED_VALUES = {"NaN": float("nan"), "inf": float("inf"), "string": "many",
                   "list": [1.0, 2.0], "bool": True}


@pytest.mark.parametrize("name", sorted(DECLARED_VALUES))
def test_a_declared_metric_with_a_hostile_value_is_dropped(fake_grid, name):
    """The record keeps the mean of the honest clients' values, exactly as if the
    hostile client had sent no metrics."""
    job = _job(algorithm={"kind": "fed_grad_mp", "sparsity": 4, "local_steps": 2,
                          "batch_size": 5, "inner_solver": "gd", "inner_tol": 1e-9,
                          "inner_max_iter": 50})
    value = DECLARED_VALUES[name]

    def hostile(content):
        content["metrics"] = ConfigRecord({"inner_iterations": value})

    def silent(content):
        content.pop("metrics")

    def fate_of(rewrite):
        return lambda kind, group, pid: rewrite if kind == "train" and pid == HOSTILE else "ok"

    history, _ = _run(fake_grid, job, fate_of(hostile))
    without, _ = _run(fake_grid, job, fate_of(silent))
    honest, _ = _run(fake_grid, job)
    ours = history.column("inner_iterations")
    assert None not in ours and all(math.isfinite(v) for v in ours)
    assert ours == without.column("inner_iterations")
    assert history.column("rejected") == [0] * ROUNDS
    torch.testing.assert_close(history.model, honest.model)


# -- malformed evaluate replies -------------------------------------------------------


def _eval_set(**values):
    def rewrite(content):
        for k, v in values.items():
            content["metrics"][k] = v
    return rewrite


def _eval_as_config(**values):
    def rewrite(content):
        metrics = dict(content["metrics"])
        metrics.update(values)
        content["metrics"] = ConfigRecord(metrics)
    return rewrite


def _eval_pop(key):
    def rewrite(content):
        content["metrics"].pop(key)
    return rewrite


#: Client HOSTILE's evaluate reply, every time; each drops that node's evaluation.
EVALUATE_REPLIES = {
    "no metrics": lambda content: content.pop("metrics"),
    "metrics as arrays": _replace("metrics", ArrayRecord({"weight": Array(torch.ones(1).numpy())})),
    "no weight": _eval_pop("weight"),
    "weight 'abc'": _eval_as_config(weight="abc"),
    "NaN weight": _eval_set(weight=float("nan")),
    "inf weight": _eval_set(weight=float("inf")),
    "negative weight": _eval_set(weight=-1.0),
    "zero weight": _eval_set(weight=0.0),
    "weight 1e300": _eval_set(weight=1e300),
    "weight unlike the handshake's": _eval_set(weight=0.5),
    "no objective": _eval_pop("objective"),
    "NaN objective": _eval_set(objective=float("nan")),
    "inf objective": _eval_set(objective=float("inf")),
    "negative objective": _eval_set(objective=-1.0),
    "objective 'abc'": _eval_as_config(objective="abc"),
    "accuracy 2": _eval_set(accuracy=2.0),
    "num-examples 'x'": _eval_as_config(**{"num-examples": "x"}),
    "num-examples unlike the handshake's": _eval_set(**{"num-examples": 10**9}),
    "test objective without test examples": _eval_set(test_objective=1.0),
    # the job's nodes have no test data, and their handshakes say so
    "test-examples its handshake did not report": _eval_set(**{"test-examples": 10**9}),
    "personal objective NaN": _eval_set(personal_objective=float("nan")),
    "personal objective without personal models": _eval_set(personal_objective=0.5),
    "error reply": "error",
    "no reply": "drop",
}


def _objectives_over(job, history, clients):
    """sum_i p_i f_i(x) / sum_i p_i over ``clients``, at every evaluated model (round 0 and
    every round), computed from the data, not from any node's reply."""
    data, problem = job.build_data(), job.build_problem()
    models = [history.initial_model, *history.round_models]
    out = []
    for model in models:
        values, weights = [], []
        for c in clients:
            one = torch.tensor([c])
            local = FederatedDataset(train=data.train.select(one),
                                     weights=torch.ones(1, dtype=torch.float64))
            values.append(fs.metrics.evaluate(problem, local, model)["objective"])
            weights.append(float(data.weights[c]))
        out.append(sum(w * v for w, v in zip(weights, values, strict=True)) / sum(weights))
    return out


@pytest.mark.parametrize("name", sorted(EVALUATE_REPLIES))
def test_a_malformed_evaluate_reply_drops_only_that_nodes_evaluation(fake_grid, name,
                                                                      caplog):
    job = _job()
    honest = _honest(fake_grid, job)
    rewrite = EVALUATE_REPLIES[name]

    def fate(kind, group, pid):
        return rewrite if kind == "evaluate" and pid == HOSTILE else "ok"

    models = []
    with caplog.at_level(logging.WARNING):
        history, _ = _run(fake_grid, job, fate,
                          callback=lambda record, state: models.append(state["model"].clone()))
    # training is untouched: every upload delivered, the honest model
    _check_server_record(history, honest, job, rejected=[0] * ROUNDS,
                         delivered=[[0, 1, 2, 3]] * ROUNDS)
    torch.testing.assert_close(history.model, honest.model)
    rows = [history.initial, *history.records]
    assert [r["evaluations_dropped"] for r in rows] == [1] * (ROUNDS + 1)
    history.initial_model, history.round_models = torch.zeros_like(models[0]), models
    expected = _objectives_over(job, history, [c for c in range(4) if c != HOSTILE])
    ours = [r["objective"] for r in rows]
    assert ours == pytest.approx(expected, rel=1e-5)
    assert all(r.get("accuracy") is None for r in rows)  # least squares: no accuracy
    assert f"evaluation of node {1000 + HOSTILE}" in caplog.text


# -- malformed handshakes -------------------------------------------------------------


def _node_set(**values):
    def rewrite(content):
        for k, v in values.items():
            content["node"][k] = v
    return rewrite


def _node_pop(key):
    def rewrite(content):
        content["node"].pop(key)
    return rewrite


#: The handshake reply of the node holding partition 3, rewritten: (rewrite, words the
#: logged reason must contain). The node is refused; the run goes on without client 3.
HANDSHAKES = {
    "partition_id 99": (_node_set(partition_id=99), "partition_id"),
    "partition_id -1": (_node_set(partition_id=-1), "partition_id"),
    "partition_id 'x'": (_node_set(partition_id="x"), "partition_id"),
    "partition_id 1.5": (_node_set(partition_id=1.5), "partition_id"),
    "partition_id True": (_node_set(partition_id=True), "partition_id"),
    "no partition_id": (_node_pop("partition_id"), "partition_id"),
    "num_partitions 5": (_node_set(num_partitions=5), "num_partitions"),
    "no node record": (lambda content: content.pop("node"), "node"),
    "node record of metrics": (_replace("node", MetricRecord({"partition_id": 3})), "node"),
    "NaN weight": (_node_set(weight=float("nan")), "weight"),
    "inf weight": (_node_set(weight=float("inf")), "weight"),
    "negative weight": (_node_set(weight=-5.0), "weight"),
    "zero weight": (_node_set(weight=0.0), "weight"),
    "weight 1e300": (_node_set(weight=1e300), "weight"),
    "weight 'abc'": (_node_set(weight="abc"), "weight"),
    "weight above its count": (_node_set(weight=17.0), "weight"),
    "no weight": (_node_pop("weight"), "weight"),
    "count 0": (_node_set(count=0), "count"),
    "count -1": (_node_set(count=-1), "count"),
    "count 2^62": (_node_set(count=2**62), "count"),
    "count 'x'": (_node_set(count="x"), "count"),
    "test-examples 0": (_node_set(**{"test-examples": 0}), "test-examples"),
    "test-examples 2^62": (_node_set(**{"test-examples": 2**62}), "test-examples"),
    "feature_shape [999]": (_node_set(feature_shape=[999]), "feature_shape"),
    "feature_shape []": (_node_set(feature_shape=[]), "feature_shape"),
    "feature_shape [-30]": (_node_set(feature_shape=[-30]), "feature_shape"),
    "feature_shape 'x'": (_node_set(feature_shape="x"), "feature_shape"),
    "statistic NaN": (_node_set(**{"stat.lipschitz": float("nan")}), "lipschitz"),
    "statistic 'x'": (_node_set(**{"stat.lipschitz": "x"}), "lipschitz"),
    # every node's algorithm computes the same statistics (none here: a numeric step)
    "a statistic of its own": (_node_set(**{"stat.other": 1.0}), "statistics ['other'] "
                                                                  "are not the run's []"),
    "error reply": ("error", "error"),
    "no reply": ("drop", "reply"),
}


@pytest.mark.parametrize("name", sorted(HANDSHAKES))
def test_a_malformed_handshake_refuses_only_that_node(fake_grid, name, caplog):
    rewrite, why = HANDSHAKES[name]
    job = _job()
    honest = _honest(fake_grid, job)

    def fate(kind, group, pid):
        return rewrite if kind == "query" and pid == 3 else "ok"

    with caplog.at_level(logging.WARNING):
        history, grid = _run(fake_grid, job, fate)
    refused = history.config["refused_nodes"]
    assert list(refused) == [1003] and why in refused[1003]
    assert "1003" in caplog.text and "refused" in caplog.text
    # client 3 has no node: counted as rejected in every round it is sampled
    _check_server_record(history, honest, job, rejected=[1] * ROUNDS,
                         delivered=[[0, 1, 2]] * ROUNDS)
    # a refused node is never sent work, nor asked again (a silent one: 3 times in all)
    asked = HANDSHAKE_TRIES if name == "no reply" else 1
    assert [kind for kind, _, node in grid.sent if node == 1003] == ["query"] * asked
    assert history.config["nodes"] == 3


def test_num_partitions_true_is_no_count_even_for_a_one_client_job():
    # True == 1 in Python, but a boolean is no partition count
    node = {"partition_id": 0, "num_partitions": 1, "count": 10, "weight": 1.0,
            "feature_shape": [3]}
    assert node_info(RecordDict({"node": ConfigRecord(node)}), 1)["partition_id"] == 0
    with pytest.raises(Refused, match="num_partitions=True"):
        node_info(RecordDict({"node": ConfigRecord({**node, "num_partitions": True})}), 1)


def test_a_tie_between_two_feature_shapes_refuses_every_node(fake_grid):
    """Two nodes report the job's feature shape, two [999]: no shape has more nodes than
    the other, so the server cannot tell which is the run's and takes none."""
    job = _job()

    def fate(kind, group, pid):
        return _node_set(feature_shape=[999]) if kind == "query" and pid >= 2 else "ok"

    grid = fake_grid(job, range(4), fate)
    refusals = Refusals()
    table = handshake(grid, sorted(grid.get_node_ids()), job, refusals)
    assert table == {}
    assert sorted(refusals.reasons) == [1000, 1001, 1002, 1003]
    assert all("is not the run's None" in why for why in refusals.reasons.values())


@pytest.mark.parametrize("rewrite", ["pop", "add"])
def test_a_node_that_leaves_out_or_adds_a_statistic_is_refused(fake_grid, rewrite):
    """With step_size="auto" every node sends its L_i: one that left it out was taken, its
    client's L_i NaN, and the step was 1/max L over the other nodes' only."""
    job = _job(algorithm={**JOB["algorithm"], "step_size": "auto"})
    change = _node_pop("stat.lipschitz") if rewrite == "pop" else \
        _node_set(**{"stat.other": 1.0})

    def fate(kind, group, pid):
        return change if kind == "query" and pid == 1 else "ok"

    grid = fake_grid(job, range(4), fate)
    refusals = Refusals()
    table = handshake(grid, sorted(grid.get_node_ids()), job, refusals)
    assert sorted(table) == [0, 2, 3] and list(refusals.reasons) == [1001]
    sent = "[]" if rewrite == "pop" else "['lipschitz', 'other']"
    assert f"statistics {sent} are not the run's ['lipschitz']" in refusals.reasons[1001]


def test_a_handshake_with_a_huge_weight_cannot_take_over_the_average(fake_grid):
    """Weights are self-reported: a node may claim its whole example count as weight.
    The default bound on update distances keeps its upload within reach of the others."""
    job = _job()

    def fate(kind, group, pid):
        if kind == "query" and pid == 3:
            return _node_set(weight=16.0)  # its count: allowed, 64x its honest share
        if kind == "train" and pid == 3:
            return TRAIN_REPLIES["scaled by 1e30"]
        return "ok"

    history, _ = _run(fake_grid, job, fate)
    assert history.column("rejected") == [1] * ROUNDS
    assert float(history.model.abs().max()) < 10


def test_a_node_cannot_change_its_share_of_the_test_metrics(fake_grid, caplog):
    """Test metrics are weighted by each node's test example count, which its handshake
    reports: an evaluate reply claiming another count is left out, and the test
    accuracy is the other nodes' (nodes with test data: FedProx's Synthetic)."""
    job = _job(data={"kind": "fedprox_synthetic", "num_clients": 4, "dim": 12,
                     "num_classes": 3},
               problem={"kind": "softmax", "num_classes": 3},
               algorithm={"kind": "fed_avg", "local_steps": 2, "batch_size": 5,
                          "step_size": 0.05})
    honest, _ = _run(fake_grid, job)

    def inflated(content):
        content["metrics"]["test-examples"] = 10**6  # its share of test metrics, 10^6 x

    def fate(kind, group, pid):
        return inflated if kind == "evaluate" and pid == HOSTILE else "ok"

    with caplog.at_level(logging.WARNING):
        history, _ = _run(fake_grid, job, fate)
    rows = [history.initial, *history.records]
    assert [r["evaluations_dropped"] for r in rows] == [1] * (ROUNDS + 1)
    assert "test-examples=1000000, but its handshake reported" in caplog.text
    torch.testing.assert_close(history.model, honest.model)  # training is untouched
    data, problem = job.build_data(), job.build_problem()
    others = torch.tensor([c for c in range(4) if c != HOSTILE])
    three = FederatedDataset(train=data.train.select(others), test=data.test.select(others),
                             weights=data.weights[others])
    expected = fs.metrics.evaluate(problem, three, history.model)["test_accuracy"]
    assert rows[-1]["test_accuracy"] == pytest.approx(expected, rel=1e-5)
    assert rows[-1]["test_accuracy"] != honest.records[-1]["test_accuracy"]


# -- nodes that never reply -----------------------------------------------------------

#: What node 1001 does not answer: (message types it drops, rejected per round,
#: delivered per round, evaluations dropped in round 0 and every round).
SILENT = {
    "never replies": ({"query", "train", "evaluate"}, [1] * ROUNDS, [[0, 2, 3]] * ROUNDS,
                      None),
    "no train replies": ({"train"}, [1] * ROUNDS, [[0, 2, 3]] * ROUNDS, [0] + [0] * ROUNDS),
    "no evaluate replies": ({"evaluate"}, [0] * ROUNDS, [[0, 1, 2, 3]] * ROUNDS,
                            [1] * (ROUNDS + 1)),
    "error replies to train": ("error-train", [1] * ROUNDS, [[0, 2, 3]] * ROUNDS,
                               [0] + [0] * ROUNDS),
    "silent after round 1": ("silent-late", [0, 1, 1], [[0, 1, 2, 3], [0, 2, 3], [0, 2, 3]],
                             [0, 0, 1, 1]),
}


@pytest.mark.parametrize("name", sorted(SILENT))
def test_a_node_that_does_not_reply_costs_one_timeout_and_is_counted(fake_grid, name,
                                                                     caplog):
    drops, rejected, delivered, dropped = SILENT[name]
    job = _job()
    honest = _honest(fake_grid, job)

    def fate(kind, group, pid):
        if pid != 1:
            return "ok"
        if drops == "error-train":
            return "error" if kind == "train" else "ok"
        if drops == "silent-late":
            late = group not in ("1", "eval-0", "eval-1", "handshake")
            return "drop" if late else "ok"
        return "drop" if kind in drops else "ok"

    with caplog.at_level(logging.WARNING):
        history, _ = _run(fake_grid, job, fate)
    _check_server_record(history, honest, job, rejected=rejected, delivered=delivered)
    assert "reply within round_timeout=0.3 s" in caplog.text or \
        "error reply: node crashed" in caplog.text
    if dropped is not None:
        rows = [history.initial, *history.records]
        assert [r.get("evaluations_dropped", 0) for r in rows] == dropped


def test_a_node_that_misses_the_first_handshake_is_asked_again(fake_grid):
    """A slow start is no refusal: node 1001 answers its second query (round 1) and
    trains from round 1 with its weight, as in the simulator."""
    job = _job()
    honest = _honest(fake_grid, job)
    queries = []

    def fate(kind, group, pid):
        if kind == "query" and pid == 1:
            queries.append(group)
            return "drop" if len(queries) == 1 else "ok"
        return "ok"

    history, _ = _run(fake_grid, job, fate)
    assert len(queries) == 2 and history.config["refused_nodes"] == {}
    _check_server_record(history, honest, job, rejected=[0] * ROUNDS,
                         delivered=[[0, 1, 2, 3]] * ROUNDS)
    torch.testing.assert_close(history.model, honest.model)


# -- nodes that claim another's partition ---------------------------------------------


def _claim(pid):
    return lambda kind, group: _node_set(partition_id=pid) if kind == "query" else "ok"


def test_two_nodes_claiming_one_partition_are_both_refused(fake_grid):
    """Node 2001 (holding partition 1's data) joins next to node 1001: the server cannot
    tell which is genuine, so neither trains; the others run."""
    job = _job()
    honest = _honest(fake_grid, job)
    history, grid = _run(fake_grid, job, nodes={2001: (1, None)})
    assert sorted(history.config["refused_nodes"]) == [1001, 2001]
    assert "partition_id=1" in history.config["refused_nodes"][2001]
    _check_server_record(history, honest, job, rejected=[1] * ROUNDS,
                         delivered=[[0, 2, 3]] * ROUNDS)
    assert not [n for kind, _, n in grid.sent if kind == "train" and n in (1001, 2001)]


def test_a_node_claiming_anothers_partition_in_its_reply_refuses_both(fake_grid):
    """Node 1003 answers the handshake with partition_id=1: clients 1 and 3 are left
    without a node; clients 0 and 2 train as before."""
    job = _job()
    honest = _honest(fake_grid, job)
    history, _ = _run(fake_grid, job, partitions=[0, 1, 2], nodes={1003: (3, _claim(1))})
    assert sorted(history.config["refused_nodes"]) == [1001, 1003]
    _check_server_record(history, honest, job, rejected=[2] * ROUNDS,
                         delivered=[[0, 2]] * ROUNDS)


def test_a_late_node_claiming_an_online_partition_is_refused_once(fake_grid):
    """After round 1 node 3001 joins claiming partition 2, whose node is online: it is
    refused (asked once, never again, never sent work) and changes nothing."""
    job = _job()
    honest = _honest(fake_grid, job)
    grid_of = {}

    def join(record, state):
        if record["round"] == 1:
            grid = grid_of["grid"]
            grid.nodes[3001] = Context(run_id=1, node_id=3001, state=RecordDict(),
                                       node_config={"partition-id": 2, "num-partitions": 4},
                                       run_config={})

    grid = fake_grid(job, range(4))
    grid_of["grid"] = grid
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        history = run_on_grid(grid, job, callback=join)
    assert list(history.config["refused_nodes"]) == [3001]
    _check_server_record(history, honest, job, rejected=[0] * ROUNDS,
                         delivered=[[0, 1, 2, 3]] * ROUNDS)
    torch.testing.assert_close(history.model, honest.model)
    assert [kind for kind, _, node in grid.sent if node == 3001] == ["query"]


def test_a_late_node_with_a_malformed_handshake_is_asked_once(fake_grid):
    job = _job()
    honest = _honest(fake_grid, job)
    grid = fake_grid(job, [0, 1, 2])

    def join(record, state):
        if record["round"] == 1:
            grid.nodes[3003] = Context(run_id=1, node_id=3003, state=RecordDict(),
                                       node_config={"partition-id": 3, "num-partitions": 4},
                                       run_config={})
            grid.fates[3003] = lambda kind, group: _node_set(weight=float("nan")) \
                if kind == "query" else "ok"

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        history = run_on_grid(grid, job, callback=join)
    assert list(history.config["refused_nodes"]) == [3003]
    _check_server_record(history, honest, job, rejected=[1] * ROUNDS,
                         delivered=[[0, 1, 2]] * ROUNDS)
    assert [kind for kind, _, node in grid.sent if node == 3003] == ["query"]


def test_an_accuracy_a_hair_above_one_from_rounding_is_an_honest_reply():
    # a node's accuracy is a weighted sum: 13 weights of 1/13 sum to 1.0000000000000002
    from fedsparse.flower.replies import evaluation

    node = {"weight": 0.5, "count": 13}

    def reply(accuracy):
        return RecordDict({"metrics": MetricRecord({"weight": 0.5, "num-examples": 13,
                                                    "objective": 0.1, "accuracy": accuracy})})

    assert evaluation(reply(1.0000000000000002), node, False)["accuracy"] > 1.0
    with pytest.raises(Refused, match="accuracy"):
        evaluation(reply(2.0), node, False)


def test_a_regression_nodes_accuracy_is_refused(fake_grid):
    """A least-squares problem has no accuracy: nodes that all report one (an honest
    ClientApp never does) must not put one in the history."""
    from fedsparse.flower.replies import evaluation

    node = {"weight": 0.5, "count": 13}
    reply = RecordDict({"metrics": MetricRecord({"weight": 0.5, "num-examples": 13,
                                                 "objective": 0.1, "accuracy": 0.9})})
    assert evaluation(reply, node, False)["accuracy"] == 0.9  # a classifier's is kept
    with pytest.raises(Refused, match="accuracy, but the problem is a regression"):
        evaluation(reply, node, False, classification=False)

    def claim_accuracy(content):
        content["metrics"]["accuracy"] = 0.99

    job = job_from_config({**JOB, "flower": {**JOB["flower"], "evaluate_every": 1}})
    grid = fake_grid(job, range(4), fate=lambda kind, group, pid:
                     claim_accuracy if kind == "evaluate" else "ok")
    history = run_on_grid(grid, job)
    assert history.column("accuracy") == [None] * job.rounds
    assert history.records[-1]["evaluations_dropped"] == 4
