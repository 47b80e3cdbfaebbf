"""Every registered Python experiment takes the shared options (quick, rounds, seeds,
resume, device), and an interrupted SAFARI or FedMac run resumed from its checkpoints
ends with the summary of an uninterrupted run."""

from __future__ import annotations

import inspect
import json

import pytest

from fedsparse._validation import ConfigError
from fedsparse.experiments import fedmac as M
from fedsparse.experiments import fedmac_runs
from fedsparse.experiments import runner as R
from fedsparse.experiments import safari as S
from fedsparse.experiments.config import resolve_runs
from fedsparse.experiments.registry import python_experiments

SHARED = ("quick", "rounds", "seeds", "resume", "device")
#: Fields that measure the machine, not the run.
TIMING = {"seconds", "elapsed", "wall_clock_s", "ksvd_seconds", "fedsparse_version"}

needs_fashion = pytest.mark.skipif(not S.fashion_available(),
                                   reason="Fashion-MNIST is not installed")


def test_every_python_experiment_takes_the_shared_options():
    for name, exp in python_experiments().items():
        params = inspect.signature(exp.fn).parameters
        missing = [p for p in SHARED if p not in params]
        assert not missing, f"{name} does not take {missing}"
        assert all(params[p].default in (None, False) for p in SHARED), name


def _strip(value):
    """``value`` without the timing fields (a resumed run's clock differs)."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


class Stop(Exception):
    """Raised by the patched simulate after a given number of rounds."""


def _interrupting(simulate, after: int):
    """``simulate`` that raises :class:`Stop` once ``after`` rounds have run in all."""
    done = [0]

    def patched(*args, **kwargs):
        inner = kwargs.get("callback")

        def callback(record, state):
            if inner is not None:
                inner(record, state)
            done[0] += 1
            if done[0] >= after:
                raise Stop(f"stopped after {after} rounds")

        kwargs["callback"] = callback
        return simulate(*args, **kwargs)

    return patched


@pytest.mark.slow  # three tiny SAFARI runs with their figures: about 45 s of CPU
@needs_fashion
def test_safari_resumes_to_the_uninterrupted_summary(tmp_path, monkeypatch):
    budget = S.Budget(rounds=4, seeds=2, max_examples=400)
    config = S.sparsity_config(budget, pruned=(0.0, 0.6))
    config["defaults"]["checkpoint_every"] = 2
    whole = S.run_safari(config, tmp_path / "whole", budget, log=lambda *_: None)
    assert whole["device"] == "cpu" and whole["gpu"] is None and whole["rounds"] == 4
    assert whole["wall_clock_s"] > 0

    monkeypatch.setattr(R, "simulate", _interrupting(R.simulate, after=11))
    with pytest.raises(Stop):  # in the second run's first seed, after its checkpoint
        S.run_safari(config, tmp_path / "cut", budget, log=lambda *_: None)
    monkeypatch.undo()
    second = resolve_runs(config)[1]["slug"]
    assert (tmp_path / "cut" / second / "seed-0" / "checkpoint.pt").exists()
    assert not (tmp_path / "cut" / "safari.json").exists()
    S.run_safari(config, tmp_path / "cut", budget, log=lambda *_: None, resume=True)
    for name in ("summary.json", "safari.json"):
        a = json.loads((tmp_path / "whole" / name).read_text())
        b = json.loads((tmp_path / "cut" / name).read_text())
        assert _strip(a) == _strip(b), name


def test_fedmac_resumes_to_the_uninterrupted_summary(tmp_path, monkeypatch):
    monkeypatch.setattr(fedmac_runs, "CHECKPOINT_EVERY", 2)
    kw = {"quick": True, "rounds": 4, "seeds": 2, "log": lambda *_: None}
    whole = M.table1("fedmac-table1-synthetic", tmp_path / "whole", **kw)
    assert whole["device"] == "cpu" and whole["gpu"] is None
    assert whole["rounds"] == 4 and whole["seeds"] == 2 and whole["weighting"] == "uniform"

    original = R.simulate
    monkeypatch.setattr(R, "simulate", _interrupting(original, after=27))
    with pytest.raises(Stop):  # seed 1 (after 6 methods x 4 rounds), round 3 of FedAvg
        M.table1("fedmac-table1-synthetic", tmp_path / "cut", **kw)
    monkeypatch.setattr(R, "simulate", original)
    M.table1("fedmac-table1-synthetic", tmp_path / "cut", resume=True, **kw)
    a = json.loads((tmp_path / "whole" / "summary.json").read_text())
    b = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert _strip(a) == _strip(b)
    assert len(a["table"]) == 8 and all(len(r["seeds"]) == 2 for r in a["table"])


def test_fedmac_baselines_average_uniformly_unless_asked(tmp_path):
    config = M.quick_overrides(M._config("fedmac-table1-synthetic-runs"), rounds=2,
                               size_scale=1)
    config = {**config, "runs": [r for r in config["runs"] if r["label"] == "FedAvg"]}
    results = {}
    for weighting in ("uniform", "size"):
        M.run_config(config, tmp_path / weighting, weighting=weighting, log=lambda *_: None)
        results[weighting] = M.load_results(config, tmp_path / weighting)
    a = results["uniform"][("", "FedAvg")].mean.records[-1]["test_accuracy"]
    b = results["size"][("", "FedAvg")].mean.records[-1]["test_accuracy"]
    assert a != b  # Synthetic(0.5, 0.5)'s clients differ in size: the weights matter
    with pytest.raises(ConfigError, match="weighting"):
        M.run_config(config, tmp_path / "x", weighting="sizes")


def test_bad_device_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match="device"):
        M.table1("fedmac-table1-synthetic", tmp_path / "t", quick=True, rounds=1,
                 device="tpu", log=lambda *_: None)
    assert not (tmp_path / "t").exists()
