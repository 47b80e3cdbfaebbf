"""The scale settings in experiment configs: ``eval_clients`` and ``client_state_memory``."""

import json

import numpy as np
import pytest

from fedsparse._validation import ConfigError
from fedsparse.cli import main
from fedsparse.experiments.config import load_config, resolve_runs
from fedsparse.flower.job import job_from_config

CONFIG = """
title = "personal, sampled"
[defaults]
rounds = 3
clients_per_round = 4
eval_clients = 5
client_state_memory = 0
problem = { kind = "softmax", num_classes = 3 }
data = { kind = "fedprox_synthetic", num_clients = 10, dim = 6, num_classes = 3 }
[[runs]]
label = "FedMac"
[runs.algorithm]
kind = "fedmac"
lam = 0.1
step_size = 0.05
personal_step_size = 0.05
local_steps = 2
batch_size = 5
"""


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "scale.toml"
    path.write_text(CONFIG)
    return path


def test_a_config_runs_with_a_sampled_evaluation_and_its_state_on_disk(config, tmp_path):
    out = tmp_path / "out"
    assert main(["run", str(config), "--out", str(out), "--quiet"]) == 0
    records = [json.loads(line) for line in
               (out / "fedmac" / "history.jsonl").read_text().splitlines()]
    assert {r["eval_clients"] for r in records} == {5}
    assert all(r["objective_se"] is not None and r["personal_accuracy"] is not None
               for r in records)
    personal = np.load(out / "fedmac" / "personal_models.npy")
    assert personal.shape == (10, 6 * 3)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["runs"][0]["params"]["eval_clients"] == 5


def test_a_resume_with_another_evaluation_sample_is_refused(config, tmp_path, capsys):
    # the records of a sampled evaluation are estimates on that sample: a resume may not
    # continue them on another one
    out = tmp_path / "out"
    assert main(["run", str(config), "--out", str(out), "--quiet"]) == 0
    config.write_text(CONFIG.replace("eval_clients = 5", "eval_clients = 7"))
    capsys.readouterr()
    assert main(["run", str(config), "--out", str(out), "--quiet", "--resume",
                 "--rounds", "4"]) == 2
    err = capsys.readouterr().err
    assert "belongs to another run" in err and "eval_clients: (5, 7)" in err


@pytest.mark.parametrize("line,message", [
    ("eval_clients = 0", r"runs\[0\]\.eval_clients=0 is invalid"),
    ("eval_clients = 2.5", r"runs\[0\]\.eval_clients=2\.5 is invalid"),
    ("client_state_memory = -1", r"runs\[0\]\.client_state_memory=-1 is invalid"),
    ("client_state_memory = \"lots\"", r"runs\[0\]\.client_state_memory='lots' is invalid"),
])
def test_bad_scale_settings_are_refused_by_name(config, line, message):
    text = CONFIG.replace("eval_clients = 5", line) if line.startswith("eval") else \
        CONFIG.replace("client_state_memory = 0", line)
    config.write_text(text)
    with pytest.raises(ConfigError, match=message):
        resolve_runs(load_config(config))


def test_a_flower_job_refuses_a_sampled_evaluation_and_ignores_the_state_budget(config):
    runs = load_config(config)
    with pytest.raises(ConfigError, match="eval_clients=5 is invalid: is a simulator setting"):
        job_from_config(runs, run=0)
    config.write_text(CONFIG.replace("eval_clients = 5\n", ""))
    job_from_config(load_config(config), run=0)  # client_state_memory: each node's own
