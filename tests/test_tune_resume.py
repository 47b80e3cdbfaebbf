"""A stopped tuning keeps the trials it finished and continues with ``--resume``: the
sampler is asked for the same trials again and told the kept results, so the files are
those of a tuning never stopped, and a tuning of other settings is refused by name."""

import pytest

from fedsparse import ConfigError
from fedsparse.cli import main
from fedsparse.experiments import tune
from fedsparse.experiments.config import load_config

pytest.importorskip("optuna")

SPACE = {"algorithm.step_size": "log(1e-3, 1)"}
FILES = ("trials.csv", "best.json", "tune.json", "tuned.toml")
RECORD = "finished.jsonl"  # the runs a tuning finished, kept as they finish


@pytest.fixture
def tiny(tmp_path, tiny_toml):
    path = tmp_path / "tiny.toml"
    path.write_text(tiny_toml(rounds=3))
    return path


@pytest.fixture
def runs(count_runs):
    """The trials' runs, counted; ``runs.stop_after = k`` stops the tuning (as Ctrl-C
    does) when run k + 1 starts."""
    return count_runs(tune)


def _quiet(*_):
    pass


def test_a_stopped_tuning_keeps_its_trials_and_ends_as_one_never_stopped(tiny, tmp_path,
                                                                        runs):
    # a stopped tuning kept nothing, and could not be continued
    config = load_config(tiny)
    whole = tune.run_tune(config, SPACE, trials=5, out=tmp_path / "whole", log=_quiet)
    assert runs.count == 10  # 2 runs x 5 trials
    out = tmp_path / "stopped"
    runs.count, runs.stop_after = 0, 7  # in the refinement trials
    with pytest.raises(KeyboardInterrupt):
        tune.run_tune(config, SPACE, trials=5, out=out, log=_quiet)
    runs.count, runs.stop_after = 0, None
    assert len((out / RECORD).read_text().splitlines()) == 1 + 7
    lines = []
    resumed = tune.run_tune(config, SPACE, trials=5, out=out, log=lines.append, resume=True)
    assert runs.count == 10 - 7  # the finished trials are told, not run again
    assert "from the 7 runs it finished before" in lines[0]
    assert resumed["rows"] == whole["rows"] and resumed["best"] == whole["best"]
    for name in FILES:
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


@pytest.mark.parametrize("change, named", [
    ({"trials": 4}, "trials: 5 there, 4 now"),
    ({"sampler_seed": 1}, "sampler_seed: 0 there, 1 now"),
    ({"space": {"algorithm.step_size": "log(1e-3, 2)"}},
     r"space\['algorithm.step_size'\]: \"log\(0.001, 1.0\)\" there, \"log\(0.001, 2.0\)\" now"),
    ({"maximize": True}, "maximize: false there, true now"),
], ids=["trials", "sampler_seed", "space", "direction"])
def test_a_tuning_of_other_settings_is_refused_naming_what_differs(change, named, tiny,
                                                                   tmp_path, runs):
    config = load_config(tiny)
    out = tmp_path / "stopped"
    runs.stop_after = 1
    with pytest.raises(KeyboardInterrupt):
        tune.run_tune(config, SPACE, trials=5, out=out, log=_quiet)
    runs.count, runs.stop_after = 0, None
    options = {"space": SPACE, "trials": 5, **change}
    with pytest.raises(ConfigError, match=f"holds a tuning of other settings \\({named}\\)"):
        tune.run_tune(config, options.pop("space"), out=out, log=_quiet, resume=True,
                      **options)
    assert runs.count == 0


def test_a_finished_tuning_continued_with_more_trials_runs_only_the_new_ones(tiny, tmp_path,
                                                                           runs):
    # one field, 4 then 8 trials: the same 2 start-up points, every later trial refines,
    # so the first 4 trials of a tuning of 8 are those of the tuning of 4
    config = load_config(tiny)
    whole = tune.run_tune(config, SPACE, trials=8, out=tmp_path / "whole", log=_quiet)
    out = tmp_path / "extended"
    tune.run_tune(config, SPACE, trials=4, out=out, log=_quiet)
    runs.count = 0
    extended = tune.run_tune(config, SPACE, trials=8, out=out, log=_quiet, resume=True)
    assert runs.count == 2 * (8 - 4)  # the 4 trials of each run are told, not run again
    assert extended["rows"] == whole["rows"] and extended["best"] == whole["best"]
    for name in FILES:
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_a_tuning_extended_then_continued_with_fewer_trials_is_refused(tiny, tmp_path, runs):
    # the header keeps the 4 trials it started with; the record holds the 8 it ran
    config = load_config(tiny)
    out = tmp_path / "extended"
    tune.run_tune(config, SPACE, trials=4, out=out, log=_quiet)
    tune.run_tune(config, SPACE, trials=8, out=out, log=_quiet, resume=True)
    files = {name: (out / name).read_bytes() for name in FILES}
    runs.count = 0
    with pytest.raises(ConfigError, match=r"trials=6 is invalid: is fewer than the tuning in "
                       r".* ran \(its finished.jsonl holds trial 7's results\): a continued "
                       r"tuning may add trials, not remove them; continue it with --trials 8"):
        tune.run_tune(config, SPACE, trials=6, out=out, log=_quiet, resume=True)
    assert runs.count == 0
    assert {name: (out / name).read_bytes() for name in FILES} == files


@pytest.mark.parametrize("space, trials", [
    ({**SPACE, "algorithm.local_steps": "int(1, 4)"}, 8),  # 2 fields: refinement later
    (SPACE, 12),  # 3 start-up points, not 2
], ids=["two-fields", "start-up"])
def test_more_trials_whose_first_ones_differ_are_refused_saying_why(space, trials, tiny,
                                                                    tmp_path, runs):
    config = load_config(tiny)
    out = tmp_path / "four"
    tune.run_tune(config, space, trials=4, out=out, log=_quiet)
    runs.count = 0
    with pytest.raises(ConfigError, match=f"trials: 4 there, {trials} now.*its 4 trials are "
                       f"not the first 4 of a tuning of {trials}, which spreads another "
                       "number of trials over the space first, refines the best so far "
                       "from another trial on or batches its last trials otherwise"):
        tune.run_tune(config, space, trials=trials, out=out, log=_quiet, resume=True)
    assert runs.count == 0


def test_more_trials_extend_a_tuning_whose_batches_they_keep():
    space = tune.check_space(SPACE)
    # with --jobs 2, a tuning of 4 ran two whole batches: 8 trials add two more
    assert tune._extension(4, 8, 2, space, "tpe") is None
    # with --jobs 3, its last trial ran alone; a tuning of 8 runs it with two others
    assert "batches its last trials otherwise" in tune._extension(4, 8, 3, space, "tpe")
    # the random sampler has no start-up or refinement: only the batches matter
    assert tune._extension(4, 40, 1, space, "random") is None


def test_the_command_line_continues_a_stopped_tuning(tiny, tmp_path, runs, capsys):
    command = ["tune", str(tiny), "--param", "algorithm.step_size=log(1e-3, 1)",
               "--trials", "4", "--quiet"]
    assert main([*command, "--out", str(tmp_path / "whole")]) == 0
    out = tmp_path / "stopped"
    runs.count, runs.stop_after = 0, 3
    assert main([*command, "--out", str(out)]) == 130
    runs.count, runs.stop_after = 0, None
    assert "--resume" in (out / "FAILED").read_text()
    capsys.readouterr()
    assert main([*command, "--out", str(out)]) == 2
    assert "continue them with --resume" in capsys.readouterr().err
    # a sweep does not continue a tuning's folder
    assert main(["sweep", str(tiny), "--grid", "seed=[0, 1]", "--out", str(out),
                 "--resume"]) == 2
    assert "holds the results of a tuning (fedsparse tune)" in capsys.readouterr().err
    assert main([*command, "--out", str(out), "--resume"]) == 0
    assert runs.count == 8 - 3
    for name in FILES:
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
