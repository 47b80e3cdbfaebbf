"""A stopped sweep keeps the runs it finished and continues with ``--resume``: the same
files as a sweep never stopped, the finished runs not run again, a sweep of other
settings refused by name."""

import json

import pytest

from fedsparse import ConfigError
from fedsparse.cli import main
from fedsparse.experiments import sweep
from fedsparse.experiments.config import load_config

GRID = {"algorithm.step_size": [1e-3, 0.05]}
FILES = ("sweep.csv", "best.json", "tuned.toml")
RECORD = "finished.jsonl"  # the runs a sweep finished, kept as they finish


@pytest.fixture
def tiny(tmp_path, tiny_toml):
    path = tmp_path / "tiny.toml"
    path.write_text(tiny_toml(rounds=2))
    return path


@pytest.fixture
def runs(count_runs):
    """The runs the sweep evaluates, counted; ``runs.stop_after = k`` stops the sweep
    (as Ctrl-C does) when run k + 1 starts."""
    return count_runs(sweep)


def _quiet(*_):
    pass


def _stopped(config, out, runs, k, **options):
    """A sweep into ``out`` stopped after ``k`` runs."""
    runs.count, runs.stop_after = 0, k
    with pytest.raises(KeyboardInterrupt):
        sweep.run_sweep(config, GRID, out=out, log=_quiet, **options)
    runs.count, runs.stop_after = 0, None


def test_a_stopped_sweep_continues_to_the_files_of_one_never_stopped(tiny, tmp_path, runs):
    # a stopped sweep kept nothing: every run started again from the first
    config = load_config(tiny)
    whole = sweep.run_sweep(config, GRID, out=tmp_path / "whole", seeds=2, log=_quiet)
    assert runs.count == 8  # 2 points x 2 runs x 2 seeds
    out = tmp_path / "stopped"
    _stopped(config, out, runs, 3, seeds=2)
    assert len((out / RECORD).read_text().splitlines()) == 1 + 3  # settings, 3 runs
    lines = []
    resumed = sweep.run_sweep(config, GRID, out=out, seeds=2, log=lines.append, resume=True)
    assert runs.count == 8 - 3  # the finished runs are read back, not run again
    assert "3 of 8 runs finished before, 5 to run" in lines[0]
    assert resumed["rows"] == whole["rows"] and resumed["best"] == whole["best"]
    for name in FILES:
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    # a finished sweep continued runs nothing and writes the same files again
    sweep.run_sweep(config, GRID, out=out, seeds=2, log=_quiet, resume=True)
    assert runs.count == 5


def test_a_line_cut_short_by_the_stop_is_dropped_and_its_run_runs_again(tiny, tmp_path,
                                                                        runs):
    config = load_config(tiny)
    whole = sweep.run_sweep(config, GRID, log=_quiet)
    out = tmp_path / "stopped"
    _stopped(config, out, runs, 2)
    text = (out / RECORD).read_text()
    last = text.splitlines()[-1]
    (out / RECORD).write_text(text[:-len(last) - 1] + last[:25])  # killed mid-write
    assert sweep.run_sweep(config, GRID, out=out, log=_quiet, resume=True)["rows"] == \
        whole["rows"]
    assert runs.count == 4 - 1
    assert all(json.loads(line) for line in (out / RECORD).read_text().splitlines())
    # a line damaged in the middle is no cut: refused, naming the file and the line
    lines = (out / RECORD).read_text().splitlines()
    lines[2] = lines[2][:-3]
    (out / RECORD).write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=f"line 3 of its {RECORD} is not a record"):
        sweep.run_sweep(config, GRID, out=out, log=_quiet, resume=True)


def _started(out, runs_trackers) -> None:
    """Append to the record of the sweep in ``out`` a "started" line per
    ``(key, trackers)``, as a hand edit would."""
    with open(out / RECORD, "a") as fh:
        for key, trackers in runs_trackers:
            fh.write(json.dumps({"started": key, "trackers": trackers}) + "\n")


@pytest.mark.parametrize("trackers", [
    {"kind": "mlflow", "run_id": "0123"},
    [{"kind": "mlflow", "run_id": 123}],
    [{"run_id": "0123"}],
    ["mlflow"],
], ids=["not-a-list", "a-number", "no-kind", "a-name"])
def test_a_started_line_of_other_trackers_than_fedsparse_writes_is_refused_naming_it(
        trackers, tiny, tmp_path, runs):
    # the record has no checksum: what the trackers would be handed is checked first
    config = load_config(tiny)
    out = tmp_path / "stopped"
    _stopped(config, out, runs, 1)
    key = json.loads((out / RECORD).read_text().splitlines()[1])["key"]
    _started(out, [({**key, "run": "FedIter-HT"}, trackers)])
    with pytest.raises(ConfigError, match=f"line 3 of its {RECORD} is not a record fedsparse "
                       r"writes \(changed since\?\): a \"started\" line names a run"):
        sweep.run_sweep(config, GRID, out=out, log=_quiet, resume=True)
    assert runs.count == 0


def test_one_tracker_run_given_to_two_runs_is_refused_naming_both_lines(tiny, tmp_path,
                                                                          runs):
    config = load_config(tiny)
    out = tmp_path / "stopped"
    _stopped(config, out, runs, 1)
    finished = json.loads((out / RECORD).read_text().splitlines()[1])["key"]
    key, other = {**finished, "run": "FedIter-HT"}, {**finished, "point": {
        "algorithm.step_size": GRID["algorithm.step_size"][1]}}  # two runs not finished
    mlflow, folder = {"kind": "mlflow", "run_id": "0123"}, {"kind": "tensorboard",
                                                            "folder": "a", "step": "0"}
    # a run stopped twice: its second attempt names the runs its first opened
    _started(out, [(key, [mlflow]), (other, [folder]), (key, [mlflow])])
    with pytest.raises(KeyboardInterrupt):  # accepted (stopped again, as it runs)
        runs.stop_after = 0
        sweep.run_sweep(config, GRID, out=out, log=_quiet, resume=True)
    runs.stop_after = None
    _started(out, [(other, [{**folder, "step": "2"}, mlflow])])  # key's MLflow run
    with pytest.raises(ConfigError, match=f"lines 3 and 6 of its {RECORD} give two runs of "
                       "the sweep one mlflow run \\(run_id '0123'\\), which fedsparse never "
                       "does .*would log one run into the other's"):
        sweep.run_sweep(config, GRID, out=out, log=_quiet, resume=True)
    assert runs.count == 0


@pytest.mark.parametrize("change, named", [
    ({"grid": {"algorithm.step_size": [1e-3, 0.05], "seed": [0, 1]}},
     r"grid.seed: null there, \[0, 1\] now"),
    ({"metric": "rel_error"}, r'metric: "objective" there, "rel_error" now'),
    ({"seeds": 2}, "seeds: null there, 2 now"),
    ({"rounds": 3}, r"config.defaults.rounds: 2 there, 3 now"),
], ids=["grid-field", "metric", "seeds", "config"])
def test_a_sweep_of_other_settings_is_refused_naming_what_differs(change, named, tiny,
                                                                  tmp_path, runs):
    config = load_config(tiny)
    out = tmp_path / "stopped"
    _stopped(config, out, runs, 1)
    before = (out / RECORD).read_bytes()
    if "rounds" in change:
        config["defaults"]["rounds"] = change.pop("rounds")
    options = {"grid": GRID, "metric": "objective", **change}
    with pytest.raises(ConfigError, match=f"holds a sweep of other settings \\({named}\\)"):
        sweep.run_sweep(config, options.pop("grid"), out=out, log=_quiet, resume=True,
                        **options)
    assert runs.count == 0 and (out / RECORD).read_bytes() == before


def test_a_kept_sweep_is_never_replaced_without_resume(tiny, tmp_path, runs):
    config = load_config(tiny)
    out = tmp_path / "stopped"
    _stopped(config, out, runs, 1)
    with pytest.raises(ConfigError, match="holds a sweep that was stopped or finished"):
        sweep.run_sweep(config, GRID, out=out, log=_quiet)
    # results without a record (an older fedsparse) cannot be continued, nor replaced
    (out / RECORD).unlink()
    (out / "sweep.csv").write_text("run\n")
    with pytest.raises(ConfigError, match="no record of its finished runs"):
        sweep.run_sweep(config, GRID, out=out, log=_quiet, resume=True)
    with pytest.raises(ConfigError, match="resume=True is invalid: needs out"):
        sweep.run_sweep(config, GRID, log=_quiet, resume=True)


def test_the_command_line_continues_a_stopped_sweep(tiny, tmp_path, runs, capsys):
    command = ["sweep", str(tiny), "--grid", "algorithm.step_size=[1e-3, 0.05]", "--quiet"]
    assert main([*command, "--out", str(tmp_path / "whole")]) == 0
    out = tmp_path / "stopped"
    runs.count, runs.stop_after = 0, 2
    assert main([*command, "--out", str(out)]) == 130
    runs.count, runs.stop_after = 0, None
    err = capsys.readouterr().err
    assert "--resume" in err and "--resume" in (out / "FAILED").read_text()
    # without --resume the stopped sweep is refused, as any earlier output is
    assert main([*command, "--out", str(out)]) == 2
    assert "continue them with --resume" in capsys.readouterr().err
    # another config (here --rounds) is refused by name, the folder left as it was
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert main([*command, "--out", str(out), "--resume", "--rounds", "3"]) == 2
    assert "--out=" in (err := capsys.readouterr().err)
    assert "config.runs[0].rounds: 2 there, 3 now" in err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    # fedsparse run does not continue a sweep's folder: it names the command that does
    assert main(["run", str(tiny), "--out", str(out), "--resume", "--quiet"]) == 2
    assert "continue it with fedsparse sweep ... --resume" in capsys.readouterr().err
    assert runs.count == 0
    assert main([*command, "--out", str(out), "--resume"]) == 0
    assert runs.count == 4 - 2
    assert not (out / "FAILED").exists()
    for name in FILES:
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_a_stopped_sweep_continues_in_parallel_workers(tiny, tmp_path, runs, monkeypatch):
    # --jobs changes no run's result: a serial sweep may continue in two processes
    config = load_config(tiny)
    whole = sweep.run_sweep(config, GRID, log=_quiet)
    out = tmp_path / "stopped"
    _stopped(config, out, runs, 1)
    monkeypatch.setattr(sweep, "_evaluate", runs.original)
    handed = []
    in_workers = sweep.run_in_workers

    def counted(fn, calls, *args):
        handed.extend(calls)
        return in_workers(fn, calls, *args)

    monkeypatch.setattr(sweep, "run_in_workers", counted)
    resumed = sweep.run_sweep(config, GRID, out=out, log=_quiet, jobs=2, resume=True)
    assert len(handed) == 4 - 1 and resumed["rows"] == whole["rows"]
    assert len((out / RECORD).read_text().splitlines()) == 1 + 4


def test_a_sweep_continued_with_other_grid_values_runs_only_the_new_points(tiny, tmp_path,
                                                                          runs):
    """A finished sweep extended by a value (and one dropped): only the new point's runs
    run, and the files are those of a sweep of the new grid never stopped."""
    config = load_config(tiny)
    wider = {"algorithm.step_size": [0.05, 0.02]}  # 1e-3 dropped, 0.02 added
    sweep.run_sweep(config, wider, out=tmp_path / "whole", log=_quiet)
    out = tmp_path / "extended"
    sweep.run_sweep(config, GRID, out=out, log=_quiet)
    runs.count = 0
    sweep.run_sweep(config, wider, out=out, log=_quiet, resume=True)
    assert runs.count == 2  # the tiny config's two runs at step size 0.02, not all four
    for name in FILES:
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
