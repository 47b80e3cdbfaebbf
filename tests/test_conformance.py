"""One battery over every registered algorithm in the simulator (the Flower battery is in
tests/flower/test_server_faults.py): grouping invariance, undelivered rows ignored,
checkpoint/resume, byte counts against an independent count, and inputs never modified."""

import inspect

import pytest
import torch

import fedsparse as fs
from fedsparse.algorithms import REGISTRY, Algorithm, ClientContext, Cohort
from fedsparse.algorithms.base import payload_rows, weighted_mean
from fedsparse.channels import ScheduledChannel
from fedsparse.comm import payload_bytes
from fedsparse.rounds import sample_clients

VOLATILE = {"seconds", "elapsed"}


#: Arguments of the personalised algorithms (they need classes: softmax data).
PERSONAL = {
    "fedmac": dict(lam=0.5, step_size=0.05, personal_step_size=0.05, gamma=1e-3, gamma_w=1e-3,
                   local_steps=2, batch_size=6),
    "pfedme": dict(lam=0.5, step_size=0.05, personal_step_size=0.05, local_steps=2,
                   batch_size=6),
    "per_fedavg": dict(step_size=0.05, inner_step_size=0.05, local_steps=2, batch_size=6),
    "heur_fedamp": dict(lam=1.0, alpha_k=0.5, sigma=5.0, step_size=0.05, local_steps=2,
                        batch_size=6),
}


def _build(kind):
    if kind in PERSONAL:
        return REGISTRY[kind](**PERSONAL[kind])
    accepted = inspect.signature(REGISTRY[kind]).parameters
    wanted = {"sparsity": 4, "local_steps": 2, "batch_size": 6, "mu": 0.01, "step_size": 0.01,
              "density": 0.5,
              "client_lr": 0.01}
    return REGISTRY[kind](**{k: v for k, v in wanted.items() if k in accepted
                            and accepted[k].default not in (1,)})


class VisitCounter(Algorithm):
    """A stateful test algorithm: each client counts its visits and adds the count to the
    model it uploads, so any loss of client state shows in the model."""

    name = "visit_counter"
    stateful_clients = True
    client_metrics = ("mean_visits",)

    def init_clients(self, problem, clients, seed=0):
        return {"visits": torch.zeros(clients.shape[0], dtype=torch.float64)}

    def client_update(self, payload, ctx: ClientContext):
        visits = ctx.state["visits"] + 1
        x = payload_rows(payload, ctx.size) + visits[:, None].to(payload.dtype) * 1e-3
        return x, {"visits": visits}, {"mean_visits": float(visits.mean())}

    def aggregate(self, state, uploads, cohort):
        return {**state, "model": weighted_mean(uploads, cohort)}


@pytest.fixture(scope="module")
def datasets():
    return {"regression": fs.data.shifted_gaussian(num_clients=5, samples_per_client=20,
                                                   dim=30, sparsity=4, seed=3,
                                                   dtype=torch.float64),
            "classification": fs.data.fedprox_synthetic(num_clients=5, dim=12, num_classes=3,
                                                        seed=3, dtype=torch.float64)}


def _case(kind, datasets):
    """(problem, data) an algorithm is checked on: softmax for the personalised ones."""
    if kind.removeprefix("compensated_") in PERSONAL:
        return fs.problems.softmax(num_classes=3), datasets["classification"]
    return fs.problems.least_squares(), datasets["regression"]


@pytest.fixture(scope="module")
def data(datasets):
    return datasets["regression"]


ALGORITHMS = [*sorted(REGISTRY), "visit_counter", "compensated_fed_iter_ht"]


def _algorithm(kind):
    if kind == "visit_counter":
        return VisitCounter()
    if kind.startswith("compensated_"):
        return fs.algorithms.similarity_compensation(_build(kind.removeprefix("compensated_")))
    return _build(kind)


def _strip(records):
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in records]


@pytest.mark.parametrize("kind", ALGORITHMS)
def test_grouping_of_clients_does_not_change_the_history(kind, datasets):
    problem, data = _case(kind, datasets)
    runs = [fs.simulate(_algorithm(kind), problem, data, rounds=3, seed=1,
                        clients_per_round=4, client_batch=batch) for batch in (None, 1, 3)]
    for other in runs[1:]:
        assert torch.equal(other.model, runs[0].model)
        assert _strip(other.records) == _strip(runs[0].records)


@pytest.mark.parametrize("kind", ALGORITHMS)
def test_undelivered_rows_never_reach_the_model(kind, datasets):
    problem, data = _case(kind, datasets)
    algo = _algorithm(kind).bind(problem, data)
    state = algo.init(problem)
    clients = torch.arange(5)
    ctx = ClientContext(problem, data.train, clients, 0, 0, config=algo.client_config(state),
                        state=algo.init_clients(problem, clients))
    uploads, _, _ = algo.client_update(algo.broadcast(state, clients), ctx)
    delivered = torch.tensor([True, False, True, False, True])
    cohort = Cohort(0, clients, data.weights, delivered)
    poisoned = uploads.clone()
    poisoned[~delivered] = float("nan")
    clean = algo.aggregate(state, uploads, cohort)
    dirty = algo.aggregate(state, poisoned, cohort)
    assert torch.equal(algo.model(dirty), algo.model(clean))
    assert torch.isfinite(algo.model(dirty)).all()


@pytest.mark.filterwarnings("ignore:round .* no upload was delivered")
@pytest.mark.parametrize("kind", ALGORITHMS)
def test_checkpoint_and_resume_give_the_uninterrupted_history(kind, datasets, tmp_path):
    problem, data = _case(kind, datasets)
    channel = ScheduledChannel(torch.rand(6, 5, generator=torch.Generator().manual_seed(0))
                               > 0.3)
    kw = dict(rounds=6, seed=2, clients_per_round=3, channel=channel)
    whole = fs.simulate(_algorithm(kind), problem, data, **kw)
    ckpt = tmp_path / "run.pt"
    fs.simulate(_algorithm(kind), problem, data,
                **{**kw, "rounds": 3}, checkpoint=ckpt, checkpoint_every=1)
    resumed = fs.simulate(_algorithm(kind), problem, data, **kw,
                          checkpoint=ckpt, resume=True)
    assert torch.equal(resumed.model, whole.model)
    assert _strip(resumed.records) == _strip(whole.records)


@pytest.mark.parametrize("kind", ALGORITHMS)
def test_bytes_are_the_encoded_payloads(kind, datasets):
    problem, data = _case(kind, datasets)
    history = fs.simulate(_algorithm(kind), problem, data, rounds=2, seed=0,
                          clients_per_round=3)
    # An independent replay of round 1: the same binding, the same sampled clients.
    algo = _algorithm(kind).bind(problem, data)
    state = algo.init(problem)
    clients = sample_clients(0, 0, 5, 3)
    payload = algo.broadcast(state, clients)
    ctx = ClientContext(problem, data.train.select(clients), clients, 0, 0,
                        config=algo.client_config(state),
                        state=algo.init_clients(problem, clients))
    uploads, _, _ = algo.client_update(payload, ctx)
    first = history.records[0]
    assert first["bytes_up"] == int(payload_bytes(uploads, algo.upload_encoding).sum())
    sent = payload_bytes(payload, algo.broadcast_encoding)  # one payload, or one per client
    assert first["bytes_down"] == (3 * int(sent) if payload.ndim == 1 else int(sent.sum()))
    assert history.records[1]["bytes_total"] == sum(
        r["bytes_up"] + r["bytes_down"] for r in history.records)


def test_client_state_is_updated_in_place_for_the_sampled_clients_only(data):
    history = fs.simulate(VisitCounter(), fs.problems.least_squares(), data, rounds=4, seed=0,
                          clients_per_round=2)
    sampled = [set(sample_clients(0, t, 5, 2).tolist()) for t in range(4)]
    # each sampled client's count = the rounds it was sampled in so far
    expected = [sum(sum(c in s for s in sampled[: t + 1]) for c in sampled[t]) / 2
                for t in range(4)]
    assert history.column("mean_visits") == expected


def _snapshot(value):
    """A deep copy of the tensors in nested dicts, lists and dataclass-like objects."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _snapshot(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_snapshot(v) for v in value]
    if type(value).__module__.startswith("fedsparse.data"):  # a split, pooled rows
        return {k: _snapshot(v) for k, v in vars(value).items()
                if isinstance(v, torch.Tensor | dict | list | tuple)
                or type(v).__module__.startswith("fedsparse.data")}
    return value


def _unchanged(before, after, what: str) -> None:
    now = _snapshot(after)
    if isinstance(before, torch.Tensor):
        assert torch.equal(before, now), f"{what} was modified in place"
    elif isinstance(before, dict):
        assert before.keys() == now.keys(), f"{what}: entries changed"
        for k in before:
            _unchanged(before[k], after[k] if isinstance(after, dict) else getattr(after, k),
                       f"{what}[{k!r}]")
    elif isinstance(before, list):
        for i, (b, a) in enumerate(zip(before, after, strict=True)):
            _unchanged(b, a, f"{what}[{i}]")


@pytest.mark.parametrize("kind", ALGORITHMS)
def test_an_algorithm_never_modifies_its_inputs(kind, datasets):
    """Updates are computed into new tensors: the broadcast, the clients' state rows, their
    data, the server state and the uploads are what the caller still holds afterwards
    (the round loop reuses them: a screened upload, a checkpointed state)."""
    problem, data = _case(kind, datasets)
    algo = _algorithm(kind).bind(problem, data)
    state = algo.init(problem)
    clients = torch.arange(5)
    rows = algo.init_clients(problem, clients)
    for t in range(2):  # the second round starts from non-zero state
        payload = algo.broadcast(state, clients)
        ctx = ClientContext(problem, data.train, clients, t, 0, state=rows,
                            config={**algo.client_config(state), "total_rounds": 2})
        before = _snapshot({"payload": payload, "rows": rows, "data": data.train,
                            "config": ctx.config})
        uploads, new_rows, _ = algo.client_update(payload, ctx)
        _unchanged(before, {"payload": payload, "rows": rows, "data": data.train,
                            "config": ctx.config}, f"{kind} client_update")
        cohort = Cohort(t, clients, data.weights, torch.tensor([True, True, False, True,
                                                                 True]))
        before = _snapshot({"state": state, "uploads": uploads, "weights": cohort.weights})
        new_state = algo.aggregate(state, uploads, cohort)
        _unchanged(before, {"state": state, "uploads": uploads, "weights": cohort.weights},
                   f"{kind} aggregate")
        state, rows = new_state, (new_rows if new_rows is not None else rows)


def test_the_input_check_notices_an_update_in_place(datasets):
    state = {"model": torch.ones(3), "inner": {"record": torch.zeros(2)}}
    before = _snapshot({"state": state, "data": datasets["regression"].train})
    state["inner"]["record"].add_(1)
    with pytest.raises(AssertionError, match=r"\['state'\]\['inner'\]\['record'\] was "
                                             "modified in place"):
        _unchanged(before, {"state": state, "data": datasets["regression"].train}, "x")
