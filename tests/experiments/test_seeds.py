"""Runs over seeds: seeding, mean and spread, divergence marks, summary and plots."""

import json
import math
import statistics

import pytest

import fedsparse as fs
from fedsparse import ConfigError
from fedsparse.cli import main
from fedsparse.experiments.config import load_config, resolve_runs
from fedsparse.experiments.runner import run_experiment
from fedsparse.experiments.seeds import divergence, mean_history, spread, strict_json, with_seed
from fedsparse.history import History

CONFIG = """
title = "tiny"
[defaults]
rounds = 4
problem = { kind = "least_squares" }
algorithm = { kind = "fed_iter_ht", sparsity = 3, local_steps = 2, step_size = 0.05 }
[defaults.data]
kind = "shifted_gaussian"
num_clients = 4
samples_per_client = 20
dim = 30
sparsity = 3
alpha = 0.0
exponent = 0.0
[[runs]]
label = "stable"
[[runs]]
label = "blows up"
algorithm = { step_size = 5000.0 }
"""


def _strict(text):
    def refuse(name):
        raise AssertionError(f"non-strict JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(CONFIG)
    return load_config(path)


def test_replicate_k_offsets_run_and_data_seeds(config):
    run = resolve_runs(config)[0]
    run["data"]["seed"] = 7
    r0, r2 = with_seed(run, 0), with_seed(run, 2)
    assert (r0["seed"], r0["data"]["seed"]) == (run["seed"], 7)  # replicate 0 = the run
    assert (r2["seed"], r2["data"]["seed"]) == (run["seed"] + 2, 9)
    assert r2["slug"] == f"{run['slug']}/seed-{run['seed'] + 2}"
    del run["data"]["seed"]  # the generator's default data seed (0) is offset too
    assert with_seed(run, 3)["data"]["seed"] == 3
    assert "seed" not in run["data"]  # the original is untouched


def test_spread_is_the_sample_std_of_finite_values():
    s = spread([1.0, 2.0, 4.0, None, math.inf])
    assert s["n"] == 3 and s["mean"] == pytest.approx(7 / 3)
    assert s["std"] == pytest.approx(statistics.stdev([1.0, 2.0, 4.0]))
    assert spread([3.0]) == {"mean": 3.0, "std": None, "n": 1}
    assert spread([]) == {"mean": None, "std": None, "n": 0}


def test_mean_history_leaves_out_diverged_seeds():
    def h(seed, values):
        return History(records=[{"round": t + 1, "objective": v, "bytes_total": 10 * (t + 1)}
                                for t, v in enumerate(values)], config={"seed": seed})

    mean = mean_history([h(0, [3.0, 1.0]), h(1, [5.0, 3.0]), h(2, [1e9])], [None, None, 2])
    assert [r["objective"] for r in mean.records] == [4.0, 2.0]
    assert mean.records[0]["objective_std"] == pytest.approx(math.sqrt(2))
    assert mean.records[0]["n_seeds"] == 2 and mean.records[0]["bytes_total"] == 10
    assert mean.config["diverged_seeds"] == [{"seed": 2, "round": 2}]
    assert len(mean.seeds) == 3


def test_divergence_round_from_the_error_or_a_non_finite_objective():
    h = History(records=[{"round": 1, "objective": 1.0}, {"round": 2, "objective": 2.0}])
    assert divergence(h, "round 3: the model became non-finite") == 3
    assert divergence(h, None) is None
    h.records.append({"round": 3, "objective": math.inf, "support_f1": 0.5})
    assert divergence(h, None, "support_f1") == 3  # a finite F1 does not hide it


def test_strict_json_replaces_non_finite_values():
    obj = {"a": [1.0, math.nan, {"b": -math.inf}], "c": (math.inf, 2)}
    assert json.dumps(strict_json(obj), allow_nan=False) == \
        '{"a": [1.0, null, {"b": null}], "c": [null, 2]}'


def test_run_over_seeds_writes_replicates_mean_and_spread(config, tmp_path):
    summary = run_experiment(config, tmp_path, seeds=3, progress=False, log=lambda *_: None)
    on_disk = _strict((tmp_path / "summary.json").read_text())
    assert on_disk["seeds"] == 3
    stable = next(r for r in on_disk["runs"] if r["label"] == "stable")
    stats = stable["seeds"]
    assert stats["n"] == 3 and stats["seeds"] == [0, 1, 2] and stats["diverged_seeds"] == []
    finals = [History.load(tmp_path / "stable" / f"seed-{s}").records[-1]["objective"]
              for s in range(3)]
    assert len(set(finals)) == 3  # the seeds drew different data
    assert stats["final"]["objective"]["mean"] == pytest.approx(statistics.mean(finals))
    assert stats["final"]["objective"]["std"] == pytest.approx(statistics.stdev(finals))
    assert stats["final"]["objective"]["n"] == 3
    assert stats["best"]["objective"]["mean"] <= stats["final"]["objective"]["mean"]
    assert stable["objective"] == pytest.approx(statistics.mean(finals))
    assert stable["params"]["algorithm"]["step_size"] == 0.05
    assert not stable["diverged"] and stable["diverged_round"] is None
    # every seed of the other run diverged: value null, marked, with its round
    blown = next(r for r in on_disk["runs"] if r["label"] == "blows up")
    assert blown["diverged"] is True and blown["objective"] is None
    assert isinstance(blown["diverged_round"], int)
    assert len(blown["seeds"]["diverged_seeds"]) == 3
    assert "objective_vs_round.png" in summary["plots"]
    # back from the folder: the mean, with each seed's history
    runs = fs.load_run(tmp_path)
    assert list(runs) == ["stable", "blows up"]
    assert [h.config["seed"] for h in runs["stable"].seeds] == [0, 1, 2]
    assert runs["stable"].records[-1]["objective"] == pytest.approx(statistics.mean(finals))
    df = runs["stable"].to_pandas(seeds=True)
    assert sorted(df["seed"].unique()) == [0, 1, 2]


def test_cli_run_seeds(tmp_path, capsys):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(CONFIG.split("[[runs]]\nlabel = \"blows up\"")[0])
    assert main(["run", str(cfg), "--seeds", "2", "--out", str(tmp_path / "o"), "--quiet"]) == 0
    summary = _strict((tmp_path / "o" / "summary.json").read_text())
    assert summary["runs"][0]["seeds"]["final"]["objective"]["n"] == 2
    assert main(["run", str(cfg), "--seeds", "0", "--out", str(tmp_path / "p")]) == 2
    assert "seeds=0 is invalid" in capsys.readouterr().err


def test_seeds_must_be_positive(config, tmp_path):
    with pytest.raises(ConfigError, match="seeds=0 is invalid"):
        run_experiment(config, tmp_path, seeds=0, progress=False)


def _seeded(seed, values, step=10):
    return History(records=[{"round": t + 1, "objective": v, "bytes_total": step * (t + 1)}
                            for t, v in enumerate(values)], config={"seed": seed})


def test_mean_history_is_as_long_as_the_shortest_kept_seed_and_averages_counters():
    mean = mean_history([_seeded(0, [3.0, 1.0, 2.0]), _seeded(1, [5.0, 3.0], step=20)],
                        [None, None])
    assert [r["round"] for r in mean.records] == [1, 2]  # the shorter seed's 2 rounds
    # bytes 10 and 20 at round 1 differ: their mean 15, not the first seed's 10
    assert mean.records[0]["bytes_total"] == 15.0


def test_a_non_finite_initial_objective_is_divergence_at_round_0():
    h = History(initial={"round": 0, "objective": math.inf},
                records=[{"round": 1, "objective": 1.0}])
    assert divergence(h, None) == 0


def test_report_row_takes_the_mean_final_value_and_the_first_divergence():
    from fedsparse.experiments.seeds import report_row

    a, b = _seeded(0, [3.0, 1.0, 2.0]), _seeded(1, [5.0, 3.0, 4.0])
    row = report_row({"label": "x", "objective": 9.0}, {}, mean_history([a, b], [None, None]),
                     None)
    # final values 2 and 4 (not the best ones, 1 and 3): mean 3
    assert row["objective"] == 3.0 and row["rounds"] == 3 and not row["diverged"]
    c, d = _seeded(2, [1e9]), _seeded(3, [1.0, 1.0, 1.0])
    gone = report_row({"label": "x", "objective": 9.0}, {},
                      mean_history([a, b, c, d], [None, None, 2, 4]), None)
    # seeds diverged at rounds 2 and 4: the first is 2; the longest seed ran 3 rounds
    assert gone["diverged_round"] == 2 and gone["rounds"] == 3
    assert gone["objective"] is None


def test_best_direction_follows_the_override_else_the_metric():
    from fedsparse.experiments.seeds import best_direction

    assert best_direction("objective", True) is True
    assert best_direction("test_accuracy", False) is False
    assert best_direction("test_accuracy", None) is True
    assert best_direction("objective", None) is False
