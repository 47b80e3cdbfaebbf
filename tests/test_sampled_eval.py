"""simulate(..., eval_clients=k): a seeded sample of clients, estimates and standard errors."""

import math

import pytest
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.metrics import client_means, evaluate
from fedsparse.sampled_eval import SE_FIELDS, eval_sample


@pytest.fixture(scope="module")
def data():
    return fs.data.fedprox_synthetic(num_clients=60, dim=8, num_classes=3, seed=5)


def _run(data, **kw):
    algo = fs.algorithms.fed_avg(step_size=0.01, local_steps=2, batch_size=4)
    return fs.simulate(algo, fs.problems.softmax(), data, rounds=2, seed=3,
                       clients_per_round=10, **kw)


def test_the_sample_is_seeded_and_without_replacement():
    a = eval_sample(7, 1000, 50)
    assert torch.equal(a, eval_sample(7, 1000, 50))
    assert not torch.equal(a, eval_sample(8, 1000, 50))
    assert a.unique().numel() == 50 and torch.all(a[1:] > a[:-1])
    assert torch.equal(eval_sample(7, 10, 10), torch.arange(10))


def test_sampled_evaluation_is_deterministic_and_records_its_standard_errors(data):
    a, b = _run(data, eval_clients=20), _run(data, eval_clients=20)
    strip = [{k: v for k, v in r.items() if k not in ("seconds", "elapsed")}
             for r in a.records]
    assert strip == [{k: v for k, v in r.items() if k not in ("seconds", "elapsed")}
                     for r in b.records]
    for record in (a.initial, *a.records):
        assert record["eval_clients"] == 20
        for key in SE_FIELDS:
            assert record[key] > 0
    full = _run(data)
    assert torch.equal(full.model, a.model)  # evaluation never changes the training
    assert "objective_se" not in full.records[-1]
    # the estimate is within a few standard errors of the whole population's value
    for key in ("objective", "test_accuracy"):
        est, se, true = a.records[-1][key], a.records[-1][f"{key}_se"], full.records[-1][key]
        assert est != true and abs(est - true) < 4 * se


def test_the_standard_error_is_the_ratio_estimators(data):
    h = _run(data, eval_clients=15)
    problem = fs.problems.softmax()
    clients = eval_sample(3, 60, 15)
    p = data.weights[clients]
    q = p / p.sum()
    sub = fs.data.FederatedDataset(train=data.train.select(clients), weights=q,
                                   test=data.test.select(clients))
    loss, _ = client_means(problem, sub.train, h.model)
    R = evaluate(problem, sub, h.model)["objective"]
    assert h.records[-1]["objective"] == pytest.approx(R, rel=1e-6)  # float32 paths
    k, N = 15, 60
    se = math.sqrt((1 - k / N) * k / (k - 1) * float(((q * (loss - R)) ** 2).sum()))
    assert h.records[-1]["objective_se"] == pytest.approx(se, rel=1e-5)
    # the test split's estimate weighs the sampled clients by their test example counts,
    # normalised over the sample (not by the training weights q)
    tq = sub.test.counts.to(torch.float64)
    tq = tq / tq.sum()
    test_loss, _ = client_means(problem, sub.test, h.model)
    Rt = h.records[-1]["test_objective"]
    se_t = math.sqrt((1 - k / N) * k / (k - 1)
                     * float(((tq * (test_loss.double() - Rt)) ** 2).sum()))
    assert h.records[-1]["test_objective_se"] == pytest.approx(se_t, rel=1e-6)


def test_every_client_is_the_exact_evaluation(data):
    a, full = _run(data, eval_clients=60), _run(data)
    for ra, rf in zip(a.records, full.records, strict=True):
        assert ra["objective_se"] == 0.0 and ra["test_accuracy_se"] == 0.0
        assert ra["objective"] == pytest.approx(rf["objective"], rel=1e-12)
        assert ra["test_accuracy"] == pytest.approx(rf["test_accuracy"], rel=1e-12)


def test_sampled_evaluation_of_lazy_data():
    lazy = fs.data.fedprox_synthetic(num_clients=60, dim=8, num_classes=3, seed=5, lazy=True)
    eager = fs.data.fedprox_synthetic(num_clients=60, dim=8, num_classes=3, seed=5,
                                      per_client_seed=True)
    a, b = _run(lazy, eval_clients=12), _run(eager, eval_clients=12)
    assert a.records[-1]["objective"] == b.records[-1]["objective"]
    assert a.records[-1]["objective_se"] == b.records[-1]["objective_se"]


@pytest.mark.parametrize("bad", [0, 61, 2.5, True])
def test_eval_clients_is_checked(data, bad):
    with pytest.raises(ConfigError, match="eval_clients"):
        _run(data, eval_clients=bad)
