"""The scale-million experiment: registered with the shared signature, and it runs."""

import inspect
import json

import pytest

from fedsparse.experiments.registry import python_experiments


def test_scale_million_is_registered_with_the_shared_signature():
    exp = python_experiments()["scale-million"]
    params = inspect.signature(exp.fn).parameters
    assert list(params)[1:] == ["quick", "rounds", "seeds", "resume", "device"]
    assert all(params[k].default in (None, False) for k in list(params)[1:])


@pytest.mark.slow
def test_scale_million_quick_runs_and_writes_its_summary(tmp_path):
    exp = python_experiments()["scale-million"]
    summary = exp.fn(tmp_path, quick=True, rounds=1)
    assert summary["num_clients"] == 10_000 and summary["clients_per_round"] == 100
    run = summary["runs"]["0"]
    assert run["eval_clients"] == 1000 and run["objective_se"] > 0
    assert json.loads((tmp_path / "summary.json").read_text())["rounds"] == 1
    assert (tmp_path / "seed0").is_dir()
