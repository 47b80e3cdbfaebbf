import json

import pytest

from fedsparse.cli import main


def test_default_experiment_writes_histories_plots_and_summary(tmp_path, capsys):
    assert main(["run", "--out", str(tmp_path), "--rounds", "4", "--quiet"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert len(summary["runs"]) == 6
    assert {"objective_vs_round.png", "objective_vs_bytes_total.png"} <= set(summary["plots"])
    for run in summary["runs"]:
        d = tmp_path / run["dir"]
        assert (d / "history.csv").exists() and (d / "model.npy").exists()
        assert len((d / "history.jsonl").read_text().splitlines()) == 5  # round 0 + 4 rounds
    assert (tmp_path / "config.toml").exists()
    assert "fedht-default" in capsys.readouterr().out


def test_resume_continues_a_run(tmp_path):
    assert main(["run", "--out", str(tmp_path), "--rounds", "3", "--quiet"]) == 0
    assert main(["run", "--out", str(tmp_path), "--rounds", "5", "--resume", "--quiet"]) == 0
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    assert len((run_dir / "history.jsonl").read_text().splitlines()) == 6


def test_list_show_and_errors(capsys, tmp_path):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "fedht-fig1" in out and "fedht-fig3" in out and "(default)" in out
    assert main(["show", "fedht-fig3"]) == 0
    assert "[[runs]]" in capsys.readouterr().out
    assert main(["run", "no-such-experiment", "--out", str(tmp_path)]) == 2
    assert "neither a config file nor a named experiment" in capsys.readouterr().err
    assert main(["run", "--out", str(tmp_path), "--set", "algorithm.sparsity=5000"]) == 2
    assert "sparsity=5000 is invalid" in capsys.readouterr().err


def test_sweep_picks_the_best_step_size(tmp_path, capsys):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text("""
title = "tiny"
[defaults]
rounds = 5
problem = { kind = "least_squares" }
[defaults.data]
kind = "shifted_gaussian"
num_clients = 4
samples_per_client = 20
dim = 30
sparsity = 3
alpha = 0.0
exponent = 0.0
[[runs]]
label = "FedIter-HT"
algorithm = { kind = "fed_iter_ht", sparsity = 3, local_steps = 2 }
""")
    assert main(["sweep", str(cfg), "--grid", "algorithm.step_size=[1e-4, 0.05, 50]",
                 "--out", str(tmp_path / "s")]) == 0
    best = json.loads((tmp_path / "s" / "best.json").read_text())
    assert best["fediter-ht"]["point"]["algorithm.step_size"] == 0.05
    rows = (tmp_path / "s" / "sweep.csv").read_text().splitlines()
    assert len(rows) == 4 and rows[3].split(",")[2] == "inf"  # step 50 blows up


def test_bad_config_file(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("runs = [")
    assert main(["run", str(bad), "--out", str(tmp_path)]) == 2
    assert "not valid TOML" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["fedht-fig1", "fedht-fig2", "fedht-fig3"])
def test_paper_configs_resolve(name):
    from fedsparse.cli import resolve_experiment
    from fedsparse.experiments.config import build_algorithm, resolve_runs

    _, config, _ = resolve_experiment(name)
    for run in resolve_runs(config):
        build_algorithm(run["algorithm"])
