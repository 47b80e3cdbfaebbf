"""fedsparse sweep: direction by metric, strict outputs, divergence, tuned config, --jobs."""

import csv
import json
import time
import tomllib

import pytest
import torch

from fedsparse import ConfigError
from fedsparse.cli import main
from fedsparse.experiments.config import load_config
from fedsparse.experiments.sweep import run_sweep
from fedsparse.experiments.workers import run_in_workers

REGRESSION = """
title = "tiny regression"
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
[[runs]]
label = "Fed-HT"
algorithm = { kind = "fed_ht", sparsity = 3, local_steps = 2 }
"""

CLASSIFICATION = """
title = "tiny classification"
[defaults]
rounds = 4
problem = { kind = "logistic" }
[defaults.data]
kind = "fedht_simulation"
task = "classification"
num_clients = 4
samples_per_client = 30
dim = 20
support_size = 4
alpha = 0.5
beta = 0.5
[[runs]]
label = "FedIter-HT"
algorithm = { kind = "fed_iter_ht", sparsity = 6, local_steps = 2 }
"""

STEPS = "algorithm.step_size=[1e-4, 0.05, 50]"


def _strict(text):
    def refuse(name):
        raise AssertionError(f"non-strict JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def regression(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(REGRESSION)
    return path


@pytest.fixture
def classification(tmp_path):
    path = tmp_path / "cls.toml"
    path.write_text(CLASSIFICATION)
    return path


def _quiet(*_):
    pass


def test_accuracy_is_maximised_and_the_override_minimises(classification):
    config = load_config(classification)
    grid = {"algorithm.step_size": [1e-5, 1.0, 3.0]}
    result = run_sweep(config, grid, metric="accuracy", log=_quiet)
    acc = {r["algorithm.step_size"]: r["accuracy"] for r in result["rows"]}
    assert acc[1.0] > acc[3.0]  # step 3 overshoots: near chance
    best = result["best"]["FedIter-HT"]
    # picking the smallest accuracy (step 3.0) was the old, wrong behaviour
    assert best["params"] == {"algorithm.step_size": 1.0}
    assert best["value"] == max(acc.values())
    assert result["maximize"] is True
    worst = run_sweep(config, grid, metric="accuracy", maximize=False, log=_quiet)
    assert worst["best"]["FedIter-HT"]["params"] == {"algorithm.step_size": 3.0}


def test_a_direction_that_is_not_a_bool_is_refused_before_any_run(classification,
                                                                   monkeypatch):
    """``bool("false")`` is True: taken as it is, a direction given as text would pick
    the worst point of a sweep, or the worst trial of a tuning, as the best."""
    import importlib.util

    import fedsparse.experiments.sweep as sweep
    from fedsparse.experiments.tune import run_tune

    tune = importlib.util.find_spec("optuna") is not None  # the [tune] extra

    def no_run(*args, **kwargs):
        raise AssertionError("nothing runs when the direction is refused")

    monkeypatch.setattr(sweep, "_execute", no_run)
    config = load_config(classification)
    for value in ("false", "no", 0, 1.0):
        with pytest.raises(ConfigError, match=rf"maximize={value!r} is invalid: must be True "
                                              "or False"):
            run_sweep(config, {"algorithm.step_size": [0.1, 1.0]}, maximize=value,
                      log=_quiet)
        if tune:
            with pytest.raises(ConfigError, match=rf"maximize={value!r} is invalid"):
                run_tune(config, {"algorithm.step_size": "log(0.01, 1)"}, trials=2,
                         maximize=value, log=_quiet)


def test_cli_outputs_are_strict_and_mark_divergence(regression, tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["sweep", str(regression), "--grid", STEPS, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "div@" in printed and "lower is better" in printed  # the pivot table
    best = _strict((out / "best.json").read_text())
    assert set(best) == {"FedIter-HT", "Fed-HT"}
    for entry in best.values():
        assert entry["params"] == {"algorithm.step_size": 0.05}
        assert isinstance(entry["value"], float)
    with open(out / "sweep.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 6  # 2 runs x 3 points
    blown = [r for r in rows if r["algorithm.step_size"] == "50"]
    assert len(blown) == 2
    for r in blown:  # null value, marked diverged with its round
        assert r["objective"] == "" and r["diverged"] == "True" and int(r["diverged_round"]) >= 1
    assert all(r["diverged"] == "False" and float(r["objective"]) > 0 for r in rows
               if r["algorithm.step_size"] != "50")
    assert (out / "sweep.png").stat().st_size > 0
    # a second sweep into the same folder is refused and leaves the first one's files;
    # --force replaces them
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert main(["sweep", str(regression), "--grid", "algorithm.step_size=[0.01]",
                 "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert main(["sweep", str(regression), "--grid", "algorithm.step_size=[0.01]",
                 "--out", str(out), "--force"]) == 0
    assert len(list(csv.DictReader(open(out / "sweep.csv")))) == 2


def test_tuned_config_reproduces_the_winners(regression, tmp_path):
    out = tmp_path / "s"
    result = run_sweep(load_config(regression), {"algorithm.step_size": [1e-4, 0.05, 50]},
                       out=out, log=_quiet)
    tuned = tomllib.loads((out / "tuned.toml").read_text())
    assert [r["algorithm"]["step_size"] for r in tuned["runs"]] == [0.05, 0.05]
    assert main(["run", str(out / "tuned.toml"), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    summary = _strict((tmp_path / "r" / "summary.json").read_text())
    for row in summary["runs"]:
        assert row["objective"] == pytest.approx(result["best"][row["label"]]["value"],
                                                 rel=1e-9)
        assert row["params"]["algorithm"]["step_size"] == 0.05


def test_unknown_or_unrecorded_metric_lists_the_recorded_ones(regression):
    config = load_config(regression)
    with pytest.raises(ConfigError, match=r"metric='acuracy' is invalid: .*accuracy"):
        run_sweep(config, {"algorithm.step_size": [0.05]}, metric="acuracy", log=_quiet)
    # least squares has no accuracy: the error lists what the run does record
    with pytest.raises(ConfigError, match=r"does not record it; it records .*objective.*"
                                          r"rel_error"):
        run_sweep(config, {"algorithm.step_size": [0.05]}, metric="accuracy", log=_quiet)


def test_bad_grid_is_a_config_error(regression, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default --out, runs/NAME-sweep, goes there
    config = load_config(regression)
    with pytest.raises(ConfigError, match="must be a non-empty list"):
        run_sweep(config, {"algorithm.step_size": []}, log=_quiet)
    with pytest.raises(ConfigError, match="must be a run field"):
        run_sweep(config, {"step_size": [0.1]}, log=_quiet)
    assert main(["sweep", str(regression), "--grid", STEPS, "--jobs", "0"]) == 2
    assert "jobs=0 is invalid" in capsys.readouterr().err


def test_parallel_jobs_give_the_serial_results(regression):
    config = load_config(regression)
    grid = {"algorithm.step_size": [0.01, 0.05], "algorithm.local_steps": [1, 2]}
    serial = run_sweep(config, grid, log=_quiet)
    lines = []
    parallel = run_sweep(config, grid, jobs=2, log=lines.append)
    assert parallel["rows"] == serial["rows"]
    assert parallel["best"] == serial["best"]
    # a progress line for each point and run, as its cell finished, then the table
    cells = len(parallel["rows"])
    assert sorted(lines[:cells]) == sorted(_progress_line(r, p) for r, p in _row_points(
        parallel["rows"], grid)) and lines[cells] == parallel["pivot"]


def _progress_line(row, point):
    from fedsparse.experiments import sweep

    return sweep._progress_line(row, point, "objective")


def _row_points(rows, grid):
    return [(r, {k: r[k] for k in grid}) for r in rows]


def test_a_sweep_reports_each_point_as_soon_as_its_seeds_have_run(regression, monkeypatch):
    # the lines were all printed after the last point had run: a long sweep said
    # nothing for hours, and a stopped one nothing at all
    from fedsparse.experiments import sweep

    events, evaluate = [], sweep._evaluate

    def counted(run, *args):
        events.append(f"ran seed {run['seed']}")
        return evaluate(run, *args)

    monkeypatch.setattr(sweep, "_evaluate", counted)
    grid = {"algorithm.step_size": [0.01, 0.05]}
    run_sweep(load_config(regression), grid, seeds=2, log=events.append)
    runs = len(load_config(regression)["runs"])
    ran = [e for e in events if e.startswith("ran")]
    assert len(ran) == 2 * 2 * runs
    # after the two seeds of each (point, run), its line, before the next cell runs
    for k in range(2 * runs):
        assert events[3 * k].startswith("ran") and events[3 * k + 1].startswith("ran")
        assert " -> objective = " in events[3 * k + 2]


def test_a_failed_or_stopped_parallel_sweep_does_not_run_its_queued_points_first():
    # the pool's own wind-down ran every queued call before the error (or a Ctrl-C or
    # SIGTERM, which end the wait the same way) went on: here 6 sleeps of 10 s on 2
    # workers, for a sweep of 100 points all of them, and then nothing was kept
    start = time.monotonic()
    with pytest.raises(ValueError, match="non-negative"):
        run_in_workers(time.sleep, [(-1,)] + [(10,)] * 6, 2, 1)
    assert time.monotonic() - start < 20


def test_workers_are_never_more_than_the_cpus(monkeypatch):
    # --jobs 100 on two cores would start 100 processes, each with its own torch
    import os
    from concurrent.futures import ProcessPoolExecutor

    from fedsparse.experiments import workers

    started = []

    class Counted(ProcessPoolExecutor):
        def __init__(self, *args, max_workers, **kwargs):
            started.append(max_workers)
            super().__init__(*args, max_workers=max_workers, **kwargs)

    monkeypatch.setattr(workers, "ProcessPoolExecutor", Counted)
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert run_in_workers(abs, [(-1,), (2,), (-3,)], 3, 1) == [1, 2, 3]
    assert started == [1]


def test_a_worker_s_progress_bars_hold_no_semaphore_a_stopped_worker_would_leak(monkeypatch):
    # a worker stopped by run_in_workers runs no clean-up: a multiprocessing lock it made
    # (tqdm's default, even for a disabled bar) is reported as leaked when fedsparse exits
    import multiprocessing.synchronize

    import tqdm.std
    from tqdm.auto import tqdm as bar

    from fedsparse.experiments.workers import _init_worker

    # a fresh worker's tqdm: no lock made yet
    monkeypatch.delattr(tqdm.std.TqdmDefaultWriteLock, "mp_lock", raising=False)
    for cls in bar.__mro__:
        if "_lock" in vars(cls):
            monkeypatch.delattr(cls, "_lock")
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    _init_worker(1)
    with bar(total=1, disable=True) as progress:  # as the round loop's
        locks = getattr(progress.get_lock(), "locks", [progress.get_lock()])
    assert not any(isinstance(lock, multiprocessing.synchronize.SemLock) for lock in locks)


def test_seeds_compare_means_and_a_diverging_seed_disqualifies(regression):
    result = run_sweep(load_config(regression), {"algorithm.step_size": [0.05, 50]},
                       seeds=2, log=_quiet)
    ok = [r for r in result["rows"] if r["algorithm.step_size"] == 0.05]
    for r in ok:
        assert r["n_seeds"] == 2 and r["objective_std"] > 0 and not r["diverged"]
    assert all(r["diverged"] and r["objective"] is None for r in result["rows"]
               if r["diverged_seeds"])
    for best in result["best"].values():
        assert best["params"] == {"algorithm.step_size": 0.05} and best["n"] == 2
    json.dumps(result["best"], allow_nan=False)


def test_the_table_shows_the_spread_over_seeds(regression):
    result = run_sweep(load_config(regression), {"algorithm.step_size": [0.01, 0.05]},
                       seeds=2, log=_quiet)
    lines = result["pivot"].splitlines()
    assert "± std over 2 seeds" in lines[0]
    row = next(line for line in lines if line.startswith("FedIter-HT"))
    std = next(r for r in result["rows"] if r["run"] == "FedIter-HT"
               and r["algorithm.step_size"] == 0.05)["objective_std"]
    assert f"±{std:.2g}" in row
    single = run_sweep(load_config(regression), {"algorithm.step_size": [0.05]}, log=_quiet)
    assert "±" not in single["pivot"]


def test_sweep_plot_uses_a_log_axis_for_values_of_different_scales():
    from fedsparse.report.plots import sweep_figure

    table = {"regression": [{"x": 0.1, "value": 40.0, "diverged": False},
                            {"x": 1.0, "value": 12.0, "diverged": False}],
             "classification": [{"x": 0.1, "value": 0.7, "diverged": False},
                                {"x": 1.0, "value": 0.2, "diverged": False}]}
    fig = sweep_figure(table, field="algorithm.step_size", metric="objective")
    assert fig.axes[0].get_yscale() == "log"
    close = {"a": [{"x": 0.1, "value": 0.5, "diverged": False},
                   {"x": 1.0, "value": 0.3, "diverged": False}]}
    assert sweep_figure(close, field="s", metric="objective").axes[0].get_yscale() == "linear"
    negative = {"a": [{"x": 0.1, "value": -40.0, "diverged": False},
                      {"x": 1.0, "value": 0.2, "diverged": False}]}
    assert sweep_figure(negative, field="s", metric="objective").axes[0].get_yscale() == \
        "linear"


def test_a_point_over_seeds_counts_every_seed_and_its_first_divergence():
    from fedsparse.experiments.sweep import _row

    results = [{"value": 1.0, "diverged_round": None}, {"value": None, "diverged_round": 5},
               {"value": None, "diverged_round": 3}]
    row = _row("run", {"algorithm.step_size": 0.1}, "objective", results, True)
    assert row["n_seeds"] == 3 and row["diverged_seeds"] == 2
    assert row["diverged_round"] == 3 and row["objective"] is None


def test_equal_values_go_to_the_earlier_grid_point():
    from fedsparse.experiments.sweep import _best

    cells = [({"s": 1}, {"objective": 3.0}), ({"s": 2}, {"objective": 2.0}),
             ({"s": 3}, {"objective": 2.0})]
    assert _best(cells, "objective", False, False) == {"params": {"s": 2}, "value": 2.0}
    cells = [({"s": 1}, {"acc": 0.5}), ({"s": 2}, {"acc": 0.5})]
    assert _best(cells, "acc", True, False)["params"] == {"s": 1}
