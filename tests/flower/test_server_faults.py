"""The ServerApp's round logic against an in-process grid: faults without processes.

``fake_grid`` (tests/flower/conftest.py) hands every message straight to the real
ClientApp and can drop replies (a timeout) or turn them into error replies, round by
round. It checks what the deployment
tests cannot pin down quickly: error replies and timeouts count as not delivered,
the model then equals the simulator's with exactly that delivery pattern, a round
with no reply warns and keeps the model, and the handshake's checks.
"""

import warnings

import pytest
import torch

flwr = pytest.importorskip("flwr")

from flwr.app import Context, RecordDict  # noqa: E402

import fedsparse as fs  # noqa: E402
from fedsparse.flower import job_from_config  # noqa: E402
from fedsparse.flower.server_app import FlowerRunError, run_on_grid  # noqa: E402
from fedsparse.simulate import sample_clients  # noqa: E402

pytestmark = pytest.mark.flower

JOB = {"rounds": 4, "seed": 2, "clients_per_round": 3,
       "data": {"kind": "fedht_simulation", "num_clients": 4, "samples_per_client": 16,
                "dim": 30, "support_size": 4},
       "problem": {"kind": "least_squares"},
       "algorithm": {"kind": "fed_iter_ht", "sparsity": 4, "local_steps": 2, "batch_size": 5,
                     "step_size": 0.003},
       "flower": {"round_timeout": 0.5, "wait_timeout": 0.0, "poll_interval": 0.05,
                  "evaluate_every": -1}}


class Replay:
    def __init__(self, delivered_clients):
        self.delivered_clients = delivered_clients

    def delivered(self, seed, round, clients):
        ok = set(self.delivered_clients[round])
        return torch.tensor([int(c) in ok for c in clients])


def _simulate(job, channel=None):
    return fs.simulate(job.build_algorithm(), job.build_problem(), job.build_data(),
                       rounds=job.rounds, seed=job.seed, clients_per_round=job.clients_per_round,
                       channel=channel)


def test_in_process_grid_matches_the_simulator(fake_grid):
    job = job_from_config(JOB)
    history = run_on_grid(fake_grid(job, range(4)), job)
    reference = _simulate(job)
    torch.testing.assert_close(history.model, reference.model, rtol=1e-5, atol=1e-7)
    assert history.column("bytes_up") == reference.column("bytes_up")
    assert history.column("bytes_down") == reference.column("bytes_down")


def test_error_replies_and_timeouts_are_not_delivered(fake_grid):
    job = job_from_config(JOB)

    def fate(kind, group, pid):
        if kind != "train":
            return "ok"
        if group == "2" and pid in (0, 1):
            return "error"
        if group == "3" and pid in (1, 2, 3):
            return "drop"
        return "ok"

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a round may lose every upload
        history = run_on_grid(fake_grid(job, range(4), fate), job)
        delivered = history.column("delivered_clients")
    sampled = [sample_clients(job.seed, t, 4, 3).tolist() for t in range(job.rounds)]
    assert delivered[0] == sampled[0]
    assert delivered[1] == [c for c in sampled[1] if c not in (0, 1)]
    assert delivered[2] == [c for c in sampled[2] if c == 0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        reference = _simulate(job, Replay(delivered))
    torch.testing.assert_close(history.model, reference.model, rtol=1e-5, atol=1e-7)
    # Bytes up count what arrived: 3 uploads of a tau-sparse vector in round 1.
    assert history.records[0]["bytes_up"] == 3 * 4 * (1 + 4)


def test_a_round_with_no_reply_warns_and_keeps_the_model(fake_grid):
    job = job_from_config(JOB)
    models = []

    def fate(kind, group, pid):
        return "drop" if kind == "train" and group == "3" else "ok"

    with pytest.warns(RuntimeWarning, match="round 3: no upload was delivered"):
        history = run_on_grid(fake_grid(job, range(4), fate), job,
                              callback=lambda record, state: models.append(state["model"]))
    assert history.records[2]["delivered"] == 0 and history.records[2]["bytes_up"] == 0
    assert torch.equal(models[2], models[1])
    assert not torch.equal(models[3], models[2])


def test_clients_without_a_node_are_not_delivered(fake_grid):
    job = job_from_config(JOB)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        history = run_on_grid(fake_grid(job, [0, 2]), job)
    for record in history.records:
        assert set(record["delivered_clients"]) <= {0, 2}
    reference = _simulate(job, Replay(history.column("delivered_clients")))
    torch.testing.assert_close(history.model, reference.model, rtol=1e-5, atol=1e-7)


def test_a_run_whose_every_node_is_refused_stops_with_the_reasons(fake_grid):
    """Two nodes both claim partition 0: neither can be trusted with it, no node is left,
    and the error gives each node's reason. (With other nodes the run goes on without
    them: tests/flower/test_hostile_server.py.)"""
    job = job_from_config(JOB)
    grid = fake_grid(job, [0, 1])
    grid.nodes[1001].node_config["partition-id"] = 0
    with pytest.raises(FlowerRunError, match=r"no usable node: 2 connected.*node 1000: "
                       r"partition_id=0 is claimed by nodes \[1000, 1001\]"):
        run_on_grid(grid, job)
    with pytest.raises(FlowerRunError, match="no usable node: 0 connected"):
        run_on_grid(fake_grid(job, []), job)


def test_a_restarted_node_with_a_new_id_takes_its_client_back(fake_grid):
    job = job_from_config({**JOB, "clients_per_round": None})
    grid = fake_grid(job, range(4))

    def restart_node_one(record, state):
        if record["round"] == 1:  # node 1 goes away ...
            del grid.nodes[1001]
        if record["round"] == 2:  # ... and comes back as a new node
            grid.nodes[2001] = Context(run_id=1, node_id=2001, node_config={
                "partition-id": 1, "num-partitions": 4}, state=RecordDict(), run_config={})

    history = run_on_grid(grid, job, callback=restart_node_one)
    assert history.column("delivered_clients") == [[0, 1, 2, 3], [0, 2, 3], [0, 1, 2, 3],
                                                   [0, 1, 2, 3]]
    reference = _simulate(job, Replay(history.column("delivered_clients")))
    torch.testing.assert_close(history.model, reference.model, rtol=1e-5, atol=1e-7)


#: Personalised algorithms need classes (softmax data) and their own arguments.
PERSONAL = {
    "fedmac": dict(lam=0.5, step_size=0.05, personal_step_size=0.05, local_steps=2),
    "pfedme": dict(lam=0.5, step_size=0.05, personal_step_size=0.05, local_steps=2),
    "per_fedavg": dict(step_size=0.05, inner_step_size=0.05, local_steps=2),
    "heur_fedamp": dict(lam=1.0, alpha_k=0.5, sigma=5.0, step_size=0.05, local_steps=2),
}


def _registered_algorithms():
    from fedsparse.algorithms import REGISTRY

    return sorted(REGISTRY)


@pytest.mark.parametrize("kind", _registered_algorithms())
def test_every_registered_algorithm_runs_unchanged_over_the_grid(fake_grid, kind):
    import inspect

    from fedsparse.algorithms import REGISTRY

    # Only the arguments the builder takes, and only where its default is not pinned
    # (Distributed-IHT accepts local_steps but requires 1).
    accepted = inspect.signature(REGISTRY[kind]).parameters
    wanted = {"sparsity": 4, "local_steps": 2, "batch_size": 6, "mu": 0.01, "density": 0.5}
    algorithm = {"kind": kind, **{k: v for k, v in wanted.items() if k in accepted
                                  and accepted[k].default not in (1,)}}
    data = {"kind": "shifted_gaussian", "num_clients": 4, "samples_per_client": 20, "dim": 30,
            "sparsity": 4}
    problem = {"kind": "least_squares"}
    if kind in PERSONAL:  # personalised algorithms need classes
        algorithm = {"kind": kind, **PERSONAL[kind]}
        data = {"kind": "fedprox_synthetic", "num_clients": 4, "dim": 12, "num_classes": 3}
        problem = {"kind": "softmax", "num_classes": 3}
    job = job_from_config({**JOB, "clients_per_round": None, "algorithm": algorithm,
                           "data": data, "problem": problem})
    history = run_on_grid(fake_grid(job, range(4)), job)
    reference = _simulate(job)
    torch.testing.assert_close(history.model, reference.model, rtol=1e-5, atol=1e-7)
    for column in ("bytes_up", "bytes_down", "clients_sampled"):
        assert history.column(column) == reference.column(column), column


def _set_meta(key, value):
    def corrupt(content):
        content["upload.meta"][key] = value
    return corrupt


def _set_values(transform):
    def corrupt(content):
        from flwr.app import Array

        arrays = content["upload"]
        arrays["value"] = Array(transform(arrays["value"].numpy().copy()))
    return corrupt


def _sparse_index_out_of_range(content):
    from flwr.app import Array

    index = content["upload"]["index"].numpy().copy()
    index[0] = 30  # P = 30: one past the end
    content["upload"]["index"] = Array(index)


def _extra_array(content):
    from flwr.app import Array

    content["upload"]["junk"] = Array("bogus", (1,), "numpy.ndarray", b"")


CORRUPTIONS = {
    "wrong length": _set_meta("shape", [31]),
    "a list as the dtype": _set_meta("dtype", ["float32"]),
    "an extra array of no dtype": _extra_array,
    "lying shape metadata": _set_meta("nnz", [3]),
    "unknown encoding": _set_meta("encoding", "zip"),
    "index out of range": _sparse_index_out_of_range,
    "NaN values": _set_values(lambda v: v * float("nan")),
    "inf values": _set_values(lambda v: v + float("inf")),
    "values of another dtype": _set_values(lambda v: v.astype("float64")),
    "missing upload": lambda content: content.pop("upload"),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_a_malformed_or_nonfinite_reply_is_a_failed_upload_of_that_client(fake_grid, name):
    """Client 1's reply in round 2 is corrupted: only that upload is lost, the record
    counts it, and the model equals the simulator's with exactly that delivery pattern."""
    job = job_from_config({**JOB, "clients_per_round": None})

    def fate(kind, group, pid):
        return CORRUPTIONS[name] if kind == "train" and group == "2" and pid == 1 else "ok"

    history = run_on_grid(fake_grid(job, range(4), fate), job)
    assert history.column("rejected") == [0, 1, 0, 0]
    assert history.column("delivered_clients")[1] == [0, 2, 3]
    reference = _simulate(job, Replay(history.column("delivered_clients")))
    torch.testing.assert_close(history.model, reference.model, rtol=1e-5, atol=1e-7)


def test_upload_bytes_are_counted_from_the_data_not_the_declared_shape(fake_grid):
    """A node that re-declares its upload's array as 10^15 entries (the data unchanged)
    is counted by what it sent."""
    from flwr.app import Array

    job = job_from_config({**JOB, "clients_per_round": None})

    def inflate(content):
        value = content["upload"]["value"]
        content["upload"]["value"] = Array(value.dtype, (10**15,), value.stype, value.data)

    def fate(kind, group, pid):
        return inflate if kind == "train" and group == "2" and pid == 1 else "ok"

    history = run_on_grid(fake_grid(job, range(4), fate), job)
    honest = run_on_grid(fake_grid(job, range(4)), job)
    assert history.column("bytes_up") == honest.column("bytes_up")


def test_a_statistic_beyond_float32_refuses_that_node_only(fake_grid):
    job = job_from_config({**JOB, "clients_per_round": None,
                           "algorithm": {**JOB["algorithm"], "step_size": "auto"}})

    def huge(content):
        content["node"]["stat.lipschitz"] = 1e39

    def fate(kind, group, pid):
        return huge if kind == "query" and pid == 3 else "ok"

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        history = run_on_grid(fake_grid(job, range(4), fate), job)
    reasons = history.config["refused_nodes"]  # {node id: why}
    assert list(reasons) == [1003] and "stat.lipschitz=1e+39 is outside" in reasons[1003]
    assert all(3 not in d for d in history.column("delivered_clients"))


def test_max_update_norm_drops_uploads_far_from_the_broadcast(fake_grid):
    job = job_from_config({**JOB, "clients_per_round": None})
    assert run_on_grid(fake_grid(job, range(4)), job).column("rejected") == [0, 0, 0, 0]
    tight = job_from_config({**JOB, "clients_per_round": None,
                             "flower": {**JOB["flower"], "max_update_norm": 1e-12}})
    with pytest.warns(RuntimeWarning, match="no upload was delivered"):
        history = run_on_grid(fake_grid(tight, range(4)), tight)
    assert history.column("rejected") == [4, 4, 4, 4]
    assert torch.count_nonzero(history.model) == 0  # x_0 = 0 was kept


def test_an_auto_step_with_a_dictionary_is_bound_the_same_on_both_runtimes(fake_grid):
    """FedIter-HT with a dictionary and step_size="auto": the step is 1/max_i L_i of
    a -> f(A a), computed by each node on its own data and sent in the handshake."""
    job = job_from_config({**JOB, "clients_per_round": None, "algorithm": {
        "kind": "fed_iter_ht", "sparsity": 4, "local_steps": 2, "batch_size": 5,
        "step_size": "auto", "dictionary": {"kind": "gaussian", "atoms": 40, "seed": 1}}})
    steps = []
    history = run_on_grid(fake_grid(job, range(4)), job,
                          callback=lambda record, state: steps.append(state["step_size"]))
    problem, data = job.build_problem(), job.build_data()
    bound = job.build_algorithm().bind(problem, data)
    assert steps[0] == pytest.approx(bound.init(problem)["step_size"], rel=1e-6)
    reference = _simulate(job)
    torch.testing.assert_close(history.model, reference.model, rtol=1e-5, atol=1e-7)


#: FedMac with both sparsity terms (so rule Z zeroes entries and the "auto" encoding sends
#: sparse uploads and broadcasts), S = 2 of the 4 clients averaged; HeurFedAMP and
#: Per-FedAvg with 2 of 4 clients trained a round, so some clients have not trained yet
#: when they are evaluated.
PERSONAL_PARITY = {
    "fedmac": ({"kind": "fedmac", "lam": 0.5, "step_size": 0.05, "personal_step_size": 0.05,
                "gamma": 0.05, "gamma_w": 0.05, "rho": 0.01, "local_steps": 3,
                "batch_size": 5, "clients_per_round": 2}, None),
    "heur_fedamp": ({"kind": "heur_fedamp", "lam": 1.0, "alpha_k": 0.5, "sigma": 5.0,
                     "step_size": 0.05, "local_steps": 2, "batch_size": 5}, 2),
    "per_fedavg": ({"kind": "per_fedavg", "step_size": 0.05, "inner_step_size": 0.05,
                    "local_steps": 2, "batch_size": 5}, 2),
}


@pytest.mark.parametrize("kind", sorted(PERSONAL_PARITY))
def test_personalised_models_stay_on_the_nodes_and_match_the_simulator(fake_grid, kind):
    """The personalised models live in each ClientApp's state; the nodes' evaluate
    replies carry their accuracy, which the server micro-averages. The global model,
    the bytes, FedMac's bit cost and every round's GM and PM accuracies equal the
    simulator's."""
    algorithm, per_round = PERSONAL_PARITY[kind]
    job = job_from_config({
        **JOB, "rounds": 5, "clients_per_round": per_round, "algorithm": algorithm,
        "data": {"kind": "fedprox_synthetic", "num_clients": 4, "dim": 12, "num_classes": 3},
        "problem": {"kind": "softmax", "num_classes": 3},
        "flower": {**JOB["flower"], "evaluate_every": 1}})
    grid = fake_grid(job, range(4))
    history = run_on_grid(grid, job)
    reference = _simulate(job)
    torch.testing.assert_close(history.model, reference.model, rtol=1e-5, atol=1e-7)
    for column in ("bytes_up", "bytes_down", "clients_sampled", "delivered_clients"):
        assert history.column(column) == reference.column(column), column
    for column in ("test_accuracy", "personal_accuracy", "personal_test_accuracy",
                   "personal_objective", "personal_test_objective"):
        ours, theirs = history.column(column), reference.column(column)
        assert None not in ours and len(ours) == job.rounds, column
        assert ours == pytest.approx(theirs, rel=1e-5, abs=1e-7), column
    # The PM is not the GM: a test that compared the global model twice would pass too.
    assert history.column("personal_test_accuracy") != history.column("test_accuracy")
    # Every node holds its own personalised model, none of them at the server.
    stored = [ctx.state["fedsparse.client_state"] for ctx in grid.nodes.values()]
    assert len(stored) == 4
    if kind == "fedmac":
        assert history.column("fedmac_bits") == pytest.approx(reference.column("fedmac_bits"))
        assert min(history.column("upload_density")) < 1  # rule Z did zero entries
        assert history.records[-1]["bytes_up"] < 4 * 4 * reference.model.numel()


#: Round by round, which of the 4 clients' uploads arrive: client 3 never arrives after
#: round 0, clients 1 and 2 miss some rounds, so compensation substitutes for them.
SCHEDULE = [[1, 1, 1, 1], [1, 0, 1, 0], [0, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]]


@pytest.mark.parametrize("compensation,pruner", [(True, "magnitude"), (False, "magnitude"),
                                                 (True, "fedspa")])
def test_safari_runs_unchanged_over_flower_on_a_scheduled_channel(fake_grid, compensation, pruner):
    """SAFARI (masked Adam, sparse model uploads) with and without similarity
    compensation: the same lost uploads on both runtimes give the same model, bytes,
    and delivered clients as the simulator (FedSpa: the nodes anneal over the run's
    rounds, which the server sends with the payload)."""
    job = job_from_config({
        **JOB, "rounds": len(SCHEDULE), "clients_per_round": None,
        "algorithm": {"kind": "safari", "density": 0.5, "local_steps": 2, "batch_size": 5,
                      "step_size": 0.01, "compensation": compensation, "pruner": pruner},
        "channel": {"kind": "scheduled", "delivered": SCHEDULE}})
    history = run_on_grid(fake_grid(job, range(4)), job)
    reference = _simulate(job, channel=job.build_channel())
    torch.testing.assert_close(history.model, reference.model, rtol=1e-5, atol=1e-7)
    for column in ("bytes_up", "bytes_down", "delivered_clients"):
        assert history.column(column) == reference.column(column), column
    assert history.column("delivered_clients") == [
        [i for i, arrived in enumerate(row) if arrived] for row in SCHEDULE]
    # the lost uploads changed the model: a run on a perfect channel ends elsewhere
    perfect = _simulate(job_from_config({**job.to_dict(), "channel": None}))
    assert not torch.allclose(perfect.model, reference.model)


def test_the_flower_server_writes_the_simulators_per_round_schema(fake_grid, tmp_path):
    """Every round record has the same fields on both runtimes, and the saved files read
    back alike (``fs.load_run``/``History.load`` work on either)."""
    job = job_from_config({**JOB, "flower": {**JOB["flower"], "evaluate_every": 1}})
    history = run_on_grid(fake_grid(job, range(4)), job)
    reference = _simulate(job)
    assert set(history.initial) == set(reference.initial)
    assert history.initial["objective"] == pytest.approx(reference.initial["objective"])
    assert history.records[-1]["rel_error"] is None  # the server has no ground truth
    for ours, theirs in zip(history.records, reference.records, strict=True):
        assert set(ours) == set(theirs), set(ours) ^ set(theirs)
    history.save(tmp_path / "flower")
    reference.save(tmp_path / "sim")
    header = [(tmp_path / d / "history.csv").read_text().splitlines()[0] for d in ("flower", "sim")]
    assert header[0] == header[1]


def test_one_node_whose_statistic_sets_the_auto_step_is_named(fake_grid, caplog):
    job = job_from_config({**JOB, "clients_per_round": None,
                           "algorithm": {**JOB["algorithm"], "step_size": "auto"}})

    def inflate(content):
        content["node"]["stat.lipschitz"] = 1e30

    def fate(kind, group, pid):
        return inflate if kind == "query" and pid == 2 else "ok"

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        run_on_grid(fake_grid(job, range(4), fate), job)
    assert "client 2's lipschitz = 1e+30" in caplog.text
    assert "set by that one node" in caplog.text


def test_every_message_expires_once_its_reply_is_no_longer_awaited(fake_grid):
    """A node back from an outage must not be handed the queued messages of rounds
    already over (Flower keeps a message 12 hours unless told otherwise)."""
    from flwr.app.constants import DEFAULT_TTL

    from fedsparse.flower.messaging import TTL_MARGIN

    job = job_from_config({**JOB, "flower": {**JOB["flower"], "evaluate_every": 2}})
    grid = fake_grid(job, range(4))
    pushed = []
    push = grid.push_messages
    grid.push_messages = lambda messages: (pushed.extend(messages), push(messages))[1]
    run_on_grid(grid, job)
    assert {m.metadata.message_type for m in pushed} == {"query", "train", "evaluate"}
    assert {m.metadata.ttl for m in pushed} == {0.5 + TTL_MARGIN}
    assert 0.5 + TTL_MARGIN < DEFAULT_TTL
