"""Lazy generated data: the same clients, the same history, as the eager data set."""

import pytest
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.data.lazy import LazyFederatedDataset
from fedsparse.models import mlp


def _records(history):
    return [{k: v for k, v in r.items() if k not in ("seconds", "elapsed")}
            for r in history.records]


def _same(a, b):
    assert _records(a) == _records(b)
    assert a.initial == b.initial
    assert a.config == b.config
    assert torch.equal(a.model, b.model)


GENERATORS = {
    "fedht": lambda **kw: fs.data.fedht_simulation(
        num_clients=100, samples_per_client=12, dim=20, support_size=4, test_fraction=0.25,
        seed=3, **kw),
    "fedht_cls": lambda **kw: fs.data.fedht_simulation(
        "classification", num_clients=100, samples_per_client=10, dim=20, support_size=4,
        seed=3, **kw),
    "fedprox": lambda **kw: fs.data.fedprox_synthetic(num_clients=100, dim=8, num_classes=3,
                                                      seed=2, **kw),
    "fedprox_iid": lambda **kw: fs.data.fedprox_synthetic(num_clients=100, dim=8,
                                                          num_classes=3, iid=True, seed=2,
                                                          **kw),
    "shifted": lambda **kw: fs.data.shifted_gaussian(
        num_clients=100, samples_per_client=6, dim=30, sparsity=3, test_fraction=0.3,
        seed=1, **kw),
}


@pytest.mark.parametrize("kind", sorted(GENERATORS))
def test_lazy_clients_equal_the_keyed_eager_ones(kind):
    eager = GENERATORS[kind](per_client_seed=True)
    lazy = GENERATORS[kind](lazy=True)
    assert isinstance(lazy, LazyFederatedDataset)
    assert not isinstance(eager, LazyFederatedDataset)
    assert repr(lazy) == repr(eager)
    assert lazy.layout == eager.layout
    assert torch.equal(lazy.weights, eager.weights)
    assert torch.equal(lazy.train.counts, eager.train.counts)
    clients = torch.tensor([97, 0, 41, 42])
    splits = [(lazy.train, eager.train)]
    if eager.test is not None:
        splits.append((lazy.test, eager.test))
    for lazy_split, eager_split in splits:
        got, want = lazy_split.select(clients), eager_split.select(clients)
        assert got.layout == want.layout and torch.equal(got.counts, want.counts)
        for s in range(len(clients)):
            for a, b in zip(got.client(s), want.client(s), strict=True):
                assert torch.equal(a, b)
        if got.layout == "padded":  # padded to the data set's n_max, like the eager one
            assert torch.equal(got.X, want.X) and torch.equal(got.y, want.y)
    if eager.ground_truth is not None:
        assert torch.equal(lazy.ground_truth, eager.ground_truth)


def test_per_client_seeding_is_a_different_data_set_and_the_default_is_unchanged():
    default = fs.data.shifted_gaussian(num_clients=5, samples_per_client=4, dim=10,
                                       sparsity=2, seed=1)
    again = fs.data.shifted_gaussian(num_clients=5, samples_per_client=4, dim=10,
                                     sparsity=2, seed=1, per_client_seed=False)
    keyed = fs.data.shifted_gaussian(num_clients=5, samples_per_client=4, dim=10,
                                     sparsity=2, seed=1, per_client_seed=True)
    assert torch.equal(default.train.X, again.train.X)
    assert not torch.equal(default.train.X, keyed.train.X)
    # client i of a keyed data set does not depend on how many clients there are
    more = fs.data.shifted_gaussian(num_clients=9, samples_per_client=4, dim=10,
                                    sparsity=2, seed=1, per_client_seed=True)
    assert torch.equal(more.train.X[:5], keyed.train.X)


def test_lazy_refuses_stream_seeding():
    with pytest.raises(ConfigError, match="per_client_seed"):
        fs.data.fedprox_synthetic(num_clients=5, lazy=True, per_client_seed=False)


@pytest.mark.parametrize("algorithm, dtype", [
    (lambda: fs.algorithms.fed_avg(step_size=0.01, local_steps=2, batch_size=4), None),
    (lambda: fs.algorithms.fed_iter_ht(sparsity=6, step_size="auto", local_steps=2), None),
    (lambda: fs.algorithms.fed_iter_ht(sparsity=6, step_size=0.005, local_steps=2),
     torch.float64),
])
def test_lazy_and_eager_give_the_same_history_linear(algorithm, dtype):
    eager = GENERATORS["fedht"](per_client_seed=True)
    lazy = GENERATORS["fedht"](lazy=True)
    ls = fs.problems.least_squares()
    for per_round, batch in ((None, None), (17, 5)):
        a = fs.simulate(algorithm(), ls, eager, rounds=3, seed=4, clients_per_round=per_round,
                        client_batch=batch, dtype=dtype)
        b = fs.simulate(algorithm(), ls, lazy, rounds=3, seed=4, clients_per_round=per_round,
                        client_batch=batch, dtype=dtype)
        _same(a, b)


def test_lazy_and_eager_give_the_same_history_mlp_on_pooled_data():
    eager = GENERATORS["fedprox"](per_client_seed=True)
    lazy = GENERATORS["fedprox"](lazy=True)
    assert eager.layout == lazy.layout == "pooled"  # log-normal sizes: padding would not pay
    problem = fs.problems.neural(mlp(8, (5,), 3))
    algo = fs.algorithms.fed_avg(step_size=0.05, local_steps=2, batch_size=8)
    a = fs.simulate(algo, problem, eager, rounds=2, seed=1, clients_per_round=10)
    b = fs.simulate(algo, problem, lazy, rounds=2, seed=1, clients_per_round=10)
    _same(a, b)


def test_lazy_evaluation_in_chunks_matches_the_whole(monkeypatch):
    import fedsparse.data.lazy as lazy_module

    eager = GENERATORS["fedprox"](per_client_seed=True)
    lazy = GENERATORS["fedprox"](lazy=True)
    problem = fs.problems.softmax()
    algo = fs.algorithms.fed_avg(step_size=0.01, local_steps=1, batch_size=4)
    a = fs.simulate(algo, problem, eager, rounds=2, seed=1, clients_per_round=10)
    monkeypatch.setattr(lazy_module, "CHUNK_BYTES", 1)  # one client per chunk
    assert len(lazy.chunks()) == 100  # what the evaluation reads
    b = fs.simulate(algo, problem, lazy, rounds=2, seed=1, clients_per_round=10)
    assert torch.equal(a.model, b.model)
    for ra, rb in zip(a.records, b.records, strict=True):
        for key in ("objective", "accuracy", "test_objective", "test_accuracy"):
            assert rb[key] == pytest.approx(ra[key], rel=1e-9, abs=1e-12)


def test_lazy_data_set_costs_its_counts_only():
    data = fs.data.fedprox_synthetic(num_clients=1_000_000, dim=60, lazy=True, seed=0)
    assert data.num_clients == 1_000_000
    assert int(data.train.counts.min()) >= 45  # 50 examples, 10 % held out
    split = data.train.select(torch.tensor([999_999, 3]))
    assert split.num_clients == 2 and split.feature_shape == (60,)
    with pytest.raises(ConfigError, match="labels"):
        data.labels()


def test_lazy_chunks_group_clients_by_size_with_the_same_result():
    lazy = GENERATORS["fedprox"](lazy=True)
    problem = fs.problems.neural(mlp(8, (5,), 3))
    algo = fs.algorithms.fed_avg(step_size=0.05, local_steps=2, batch_size=8)
    a = fs.simulate(algo, problem, lazy, rounds=2, seed=1, clients_per_round=12)
    b = fs.simulate(algo, problem, lazy, rounds=2, seed=1, clients_per_round=12,
                    client_batch=5)
    assert torch.allclose(a.model, b.model, rtol=1e-5, atol=1e-6)
    assert [r["delivered_clients"] for r in a.records] == \
        [r["delivered_clients"] for r in b.records]


def test_personal_metrics_of_lazy_data_in_chunks_and_sampled(monkeypatch):
    import fedsparse.data.lazy as lazy_module

    eager = GENERATORS["fedprox"](per_client_seed=True)
    lazy = GENERATORS["fedprox"](lazy=True)
    problem = fs.problems.softmax()

    def algo():
        return fs.algorithms.fedmac(lam=0.5, step_size=0.05, personal_step_size=0.05,
                                    local_steps=2, batch_size=4)

    a = fs.simulate(algo(), problem, eager, rounds=1, seed=1, clients_per_round=10)
    monkeypatch.setattr(lazy_module, "CHUNK_BYTES", 20_000)  # a few clients a chunk
    assert 1 < len(lazy.chunks()) < 100
    b = fs.simulate(algo(), problem, lazy, rounds=1, seed=1, clients_per_round=10)
    assert torch.equal(a.personal_models, b.personal_models)
    for key in ("personal_objective", "personal_accuracy", "personal_test_objective",
                "personal_test_accuracy"):
        # float32 sums over other groupings of clients: equal to round-off
        assert b.records[-1][key] == pytest.approx(a.records[-1][key], rel=1e-6)
    c = fs.simulate(algo(), problem, lazy, rounds=1, seed=1, clients_per_round=10,
                    eval_clients=30)
    assert c.records[-1]["personal_accuracy"] != a.records[-1]["personal_accuracy"]
    assert 0 <= c.records[-1]["personal_accuracy"] <= 1


def test_auto_layout_pools_only_when_padding_more_than_doubles_the_memory():
    from fedsparse.data.lazy import auto_pooled

    # counts 1, 1, 4: padded 3 * 4 = 12 rows, exactly twice the 6 real ones: not pooled
    assert not auto_pooled((3,), torch.tensor([1, 1, 4]), None)
    # counts 1, 1, 5: 15 padded rows, more than twice the 7 real ones
    assert auto_pooled((3,), torch.tensor([1, 1, 5]), None)


def test_a_lazy_subset_renormalises_its_weights():
    data = fs.data.fedprox_synthetic(num_clients=10, dim=8, num_classes=3, seed=2, lazy=True)
    sub = data.subset(torch.tensor([0, 3]))
    # p_0 and p_3 divided by p_0 + p_3
    want = data.weights[[0, 3]] / data.weights[[0, 3]].sum()
    assert torch.allclose(sub.weights, want) and float(sub.weights.sum()) == pytest.approx(1.0)


def test_a_client_id_equal_to_n_is_the_sources_missing_client():
    from fedsparse.data.lazy import ClientSource

    def read(i):
        return torch.zeros(2, 3), torch.zeros(2), None, None

    source = ClientSource(read, (torch.tensor([2, 2]), None), (3,), torch.float32, False,
                          missing=lambda i: ConfigError(f"client {i} is not in the folder"))
    data = LazyFederatedDataset.from_source(source, dtype=torch.float32, name="two")
    with pytest.raises(ConfigError, match="client 2 is not in the folder"):
        data.subset(torch.tensor([2]))  # ids 0..1: 2 = N is missing
