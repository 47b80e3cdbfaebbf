"""The paper-scale experiments are set up as the papers run them (the runs themselves
need a GPU): SAFARI's ResNet-20 on 32 x 32 Fashion-MNIST for 300 rounds, FedMac's
Table 1 rows at T = 800 over 3 seeds, and the CIFAR-100 row's VGG stand-in."""

from __future__ import annotations

import pytest

from fedsparse.experiments import fedmac as M
from fedsparse.experiments import safari_paper as SP
from fedsparse.experiments.config import resolve_runs
from fedsparse.experiments.registry import INFO, python_experiments

PAPER = {"safari-paper-fig2": (3, {"magnitude"}, 5), "safari-paper-fig3": (2, {"synflow"}, 5),
         "safari-paper-fig4": (2, {"fedspa"}, 5), "safari-paper-fig8": (2, {"magnitude"}, 6),
         "safari-paper-fedprox": (2, {"magnitude", "synflow", "fedspa"}, 9)}


@pytest.fixture
def captured(monkeypatch):
    calls = []

    def fake(config, out, budget, **kw):
        calls.append((config, budget, kw))
        return {}

    monkeypatch.setattr(SP, "run_safari", fake)
    return calls


@pytest.mark.parametrize("name", sorted(PAPER))
def test_safari_paper_experiments_are_the_papers_setting(name, captured, tmp_path):
    seeds, pruners, n_runs = PAPER[name]
    python_experiments()[name].fn(tmp_path)
    config, budget, kw = captured[-1]
    runs = resolve_runs(config)
    assert (budget.rounds, budget.seeds, budget.model) == (300, seeds, "resnet20")
    assert len(runs) == n_runs and kw["device"] == "auto" and kw["resume"] is False
    for run in runs:
        assert run["rounds"] == 300
        assert run["problem"]["model"] == {"kind": "resnet20", "in_channels": 1,
                                           "num_classes": 10}
        d, a = run["data"], run["algorithm"]
        assert (d["dataset"], d["num_clients"], d["pad"], d["flatten"]) == \
            ("fashion_mnist", 50, 2, False) and "max_examples" not in d
        assert (a["optimizer"], a["step_size"], a["batch_size"], a["local_steps"]) == \
            ("adam", 1e-3, 64, 5)
        assert a["pruner"] in pruners
        if name != "safari-paper-fig8":
            assert a["density"] == 0.4  # alpha = 0.6
    assert INFO[name].gpu and INFO[name].runtime == "days"
    # split into shorter calls: one seed, more rounds, on a named device, resumed
    python_experiments()[name].fn(tmp_path, rounds=850, seeds=1, resume=True,
                                  device="cpu")
    _, budget, kw = captured[-1]
    assert (budget.rounds, budget.seeds, kw["resume"], kw["device"]) == (850, 1, True, "cpu")


@pytest.mark.parametrize("name", sorted(M.TABLE1))
def test_fedmac_table1_rows_are_800_rounds_3_seeds(name):
    config_name, _, seeds, *_ = M.TABLE1[name]
    assert seeds == 3
    assert {r["rounds"] for r in resolve_runs(M._config(config_name))} == {800}


def test_pad_puts_zero_pixels_around_images():
    from fedsparse._validation import ConfigError
    from fedsparse.data.real import federated_real

    data = federated_real("digits", partition="iid", num_clients=4, flatten=False, pad=2,
                          test_fraction=0.0)
    x = data.train.X[0]  # client 0's images
    assert tuple(x.shape[-2:]) == (12, 12)  # 8 x 8 digits, 2 zero pixels on every side
    assert float(x[..., :2, :].abs().sum()) == 0.0 and float(x[..., -2:].abs().sum()) == 0.0
    with pytest.raises(ConfigError, match="pad"):
        federated_real("digits", partition="iid", num_clients=4, pad=2)
