"""What the command line says it did, in the user's own terms: an error whose bad value
came from an option names that option as typed (``--rounds=0``, ``--set seed=-1``,
``--clients=0``), not the config key or parameter it became, while a value from a config
file keeps its key; and the "wrote" line of a run names every file it wrote."""

from __future__ import annotations

import re
from pathlib import Path

import pytest


@pytest.fixture
def tiny(tmp_path, tiny_toml):
    path = tmp_path / "tiny.toml"
    path.write_text(tiny_toml(labels=("A", "B")))
    return path


# ---------------------------------------------------------------- options named as typed

#: (options after ``run|sweep|tune TINY``, what the error says); none says a config key.
RUN_OPTIONS = [
    (["run", "--rounds", "0"], "--rounds=0 is invalid: must be at least 1"),
    (["run", "--rounds", "-3"], "--rounds=-3 is invalid: must be at least 1"),
    (["run", "--seeds", "0"], "--seeds=0 is invalid: must be at least 1"),
    (["run", "--set", "rounds=0"], "--set rounds=0 is invalid: must be at least 1"),
    (["run", "--set=rounds=0"], "--set rounds=0 is invalid: must be at least 1"),
    (["run", "--set", "seed=-1"], "--set seed=-1 is invalid: must be at least 0"),
    (["run", "--set", "clients_per_round=0"],
     "--set clients_per_round=0 is invalid: must be at least 1"),
    (["run", "--set", "device=gpu"], "--set device=gpu is invalid: must be one of"),
    (["run", "--set", "dtype=float16"], "--set dtype=float16 is invalid: must be one of"),
    (["run", "--set", "data.seed=-1"], "--set data.seed=-1 is invalid: must be an integer"),
    (["run", "--set", "B:algorithm.step_size=-1"],
     "run 'B': --set B:algorithm.step_size=-1 is invalid: must be positive"),
    (["sweep", "--grid", "algorithm.step_size=[0.1]", "--rounds", "0"],
     "--rounds=0 is invalid: must be at least 1"),
    (["sweep", "--grid", "algorithm.step_size=[0.1]", "--seeds", "0"],
     "--seeds=0 is invalid: must be at least 1"),
    (["sweep", "--grid", "algorithm.step_size=[0.1]", "--jobs", "0"],
     "--jobs=0 is invalid: must be at least 1"),
    (["sweep", "--grid", "algorithm.step_size=[0.1]", "--set", "rounds=-4"],
     "--set rounds=-4 is invalid: must be at least 1"),
    (["sweep", "--grid", "rounds=[0, 1]"], "--grid rounds=0 is invalid: must be at least 1"),
    (["sweep", "--grid", "algorithm.step_size=[0.1]", "--metric", "nosuch"],
     "--metric='nosuch' is invalid: must be a recorded metric"),
    (["tune", "--param", "algorithm.step_size=log(1e-3, 1e-1)", "--metric", "nosuch"],
     "--metric='nosuch' is invalid: must be a recorded metric"),
    (["tune", "--param", "algorithm.step_size=log(1e-3, 1e-1)", "--trials", "0"],
     "--trials=0 is invalid: must be at least 1"),
    (["tune", "--param", "algorithm.step_size=log(1e-3, 1e-1)", "--jobs", "0"],
     "--jobs=0 is invalid: must be at least 1"),
    (["tune", "--param", "algorithm.step_size=log(1e-3, 1e-1)", "--sampler-seed", "-1"],
     "--sampler-seed=-1 is invalid: must be at least 0"),
    (["tune", "--param", "algorithm.step_size=log(1e-3, 1e-1)", "--rounds", "0"],
     "--rounds=0 is invalid: must be at least 1"),
]


@pytest.mark.parametrize("argv, expected", RUN_OPTIONS,
                         ids=[" ".join(a) for a, _ in RUN_OPTIONS])
def test_a_bad_option_value_names_the_option_as_typed(argv, expected, tiny, tmp_path, cli):
    out = tmp_path / "o"
    err = cli.refused([argv[0], str(tiny), *argv[1:], "--out", str(out)], expected)
    assert not re.search(r"runs\[\d+\]\.", err), err  # not the config key it became
    assert not out.exists()


@pytest.mark.parametrize("assignment", ["data.seed=-1", "B:algorithm.step_size=-1"])
def test_a_run_that_cannot_be_built_is_refused_before_it_starts(assignment, tiny, tmp_path,
                                                               cli):
    """Values that only building the data or the algorithm checks are refused before the
    "fedsparse run NAME -> OUT" line, as every other check is."""
    out = tmp_path / "o"
    code, stdout, err = cli.run(["run", str(tiny), "--set", assignment, "--out", str(out)])
    assert code == 2 and f"--set {assignment} is invalid" in err, err
    assert "->" not in stdout, stdout
    assert not out.exists()


#: ``fedsparse flower app TINY --run 0 --set ...``: the same naming, and the data seed
#: checked before the project is written (the nodes build the data).
FLOWER_SETS = [("rounds=0", "--set rounds=0 is invalid: must be at least 1"),
               ("seed=-1", "--set seed=-1 is invalid: must be an integer from 0"),
               ("algorithm.step_size=-1", "--set algorithm.step_size=-1 is invalid: must be "
                                          "positive"),
               ("data.seed=-1", "--set data.seed=-1 is invalid: must be an integer from 0")]


@pytest.mark.parametrize("assignment, expected", FLOWER_SETS, ids=[a for a, _ in FLOWER_SETS])
def test_flower_app_names_a_bad_set_as_typed(assignment, expected, tiny, tmp_path, cli):
    pytest.importorskip("flwr")
    out = tmp_path / "app"
    cli.refused(["flower", "app", str(tiny), "--run", "0", "--set", assignment,
                 "--out", str(out)], expected)
    assert not out.exists()


SEARCH_ENDS = [
    (["sweep", "--grid", "algorithm=[1]"],
     "--grid algorithm=1 is invalid: [algorithm] is a table"),
    (["tune", "--param", "rounds=int(0, 3)"],
     "--param rounds=int(0, 3): at rounds=0: runs[0].rounds=0 is invalid: must be at least 1"),
    (["tune", "--param", "rounds=int(1, 3)", "--param", "seed=choice(0, -1)"],
     "--param seed=choice(0, -1): at rounds=1, seed=-1: runs[0].seed=-1 is invalid"),
    (["tune", "--param", "data.sparsity=int(1, 100)"],  # the data have dim = 30
     "--param data.sparsity=int(1, 100): run 'A' at data.sparsity=100: sparsity=100 is "
     "invalid: must be at most 30"),
]


@pytest.mark.parametrize("argv, expected", SEARCH_ENDS, ids=[" ".join(a) for a, _ in SEARCH_ENDS])
def test_every_value_a_search_may_try_is_checked_before_it_starts(argv, expected, tiny,
                                                                  tmp_path, cli):
    """A sweep's grid values and either end of a tune range (or any choice) pass the
    config's own checks before the first run: a trial that drew ``rounds=0`` late in a
    study would otherwise fail it after hours of trials."""
    if argv[0] == "tune":
        pytest.importorskip("optuna")
    out = tmp_path / "o"
    cli.refused([argv[0], str(tiny), *argv[1:], "--trials", "3", "--out", str(out)]
                if argv[0] == "tune" else [argv[0], str(tiny), *argv[1:], "--out", str(out)],
                expected)
    assert not out.exists()


@pytest.mark.parametrize("argv, expected", [
    (["fig6-libsvm", "--quick", "--rounds", "0"], "--rounds=0 is invalid: must be at least 1"),
    (["fedmac-table1-synthetic", "--quick", "--seeds", "-2"],
     "--seeds=-2 is invalid: must be at least 1"),
])
def test_a_python_experiments_options_are_named_as_typed(argv, expected, tmp_path, cli):
    cli.refused(["run", *argv, "--out", str(tmp_path / "o")], expected)
    assert not (tmp_path / "o").exists()


DATA_OPTIONS = [
    (["describe", "digits", "--clients", "0"], "--clients=0 is invalid: must be at least 1"),
    (["describe", "digits", "--clients", "5000"], "--clients=5000 is invalid: must be at most"),
    (["describe", "digits", "--seed", "-1"], "--seed=-1 is invalid: must be an integer from 0"),
    (["describe", "digits", "--max-examples", "0"], "--max-examples=0 is invalid"),
    (["describe", "digits", "--partition", "label_skew", "--labels-per-client", "99"],
     "--labels-per-client=99 is invalid: y has only 10 distinct labels"),
    (["describe", "digits", "--partition", "groups", "--groups", "0"],
     "--groups=0 is invalid: must be at least 1"),
    (["describe", "digits", "--partition", "dirichlet", "--alpha", "0"],
     "--alpha=0.0 is invalid: must be a positive"),
    (["describe", "digits", "--partition", "clusters", "--parts-per-cluster", "0"],
     "--parts-per-cluster=0 is invalid: must be at least 1"),
    (["write", "fedprox_synthetic", "--clients", "0"], "--clients=0 is invalid"),
    (["write", "fedprox_synthetic", "--seed", "-1"], "--seed=-1 is invalid"),
    (["write", "fedprox_synthetic", "--test-fraction", "1.5"],
     "--test-fraction=1.5 is invalid: must be in [0, 1)"),
    (["write", "digits", "--max-examples", "-5"], "--max-examples=-5 is invalid"),
]


@pytest.mark.parametrize("argv, expected", DATA_OPTIONS,
                         ids=[" ".join(a) for a, _ in DATA_OPTIONS])
def test_a_bad_data_option_names_the_option(argv, expected, tmp_path, cli):
    out = ["--out", str(tmp_path / "w")] if argv[0] == "write" else []
    err = cli.refused(["data", *argv, *out], expected)
    assert "Traceback" not in err and not (tmp_path / "w").exists()


def test_a_value_from_the_config_file_keeps_its_key(tiny, tmp_path, cli):
    text = tiny.read_text()
    tiny.write_text(text.replace("rounds = 2", "rounds = 0"))
    # a --set of another field with the same value is not taken for the culprit
    err = cli.refused(["run", str(tiny), "--out", str(tmp_path / "o"), "--set", "seed=0"],
                      "runs[0].rounds=0 is invalid: must be at least 1")
    assert "--set" not in err and "--rounds" not in err
    tiny.write_text(text.replace("step_size = 0.01", "step_size = -1.0"))
    err = cli.refused(["run", str(tiny), "--out", str(tmp_path / "o"), "--set",
                       "A:algorithm.step_size=0.1"], "run 'B': step_size=-1.0 is invalid")
    assert "--set" not in err


# ---------------------------------------------------------------- the "wrote" line

def _wrote(text: str, out: Path) -> tuple[set[str], set[str], int]:
    """(files named directly in ``out``, folders named, files counted in them) of the
    "wrote OUT/ : a, b; N files in x/, y/" line."""
    line = next(x for x in text.splitlines() if x.startswith(f"wrote {out}/ : "))
    named, _, folders = line.split(" : ", 1)[1].partition("; ")
    count, _, listed = folders.partition(" in ")
    return (set(named.split(", ")), {f.rstrip("/") for f in listed.split(", ") if f},
            int(count.split()[0]) if count else 0)


def _on_disk(out: Path) -> tuple[set[str], set[str], int]:
    """What ``out`` holds, as :func:`_wrote` reads it, without fedsparse's bookkeeping."""
    bookkeeping = {".fedsparse-run", ".fedsparse-manifest"}
    top = {p.name for p in out.iterdir() if p.is_file() and p.name not in bookkeeping}
    folders = {p.name for p in out.iterdir() if p.is_dir()}
    inside = sum(1 for d in folders for p in (out / d).rglob("*") if p.is_file())
    return top, folders, inside


@pytest.mark.parametrize("argv", [
    ["fedmac-table1-synthetic", "--quick", "--rounds", "1"],  # its table.txt
    ["TINY"],  # its config.toml
])
def test_the_wrote_line_names_every_file_the_run_wrote(argv, tiny, tmp_path, cli):
    out = tmp_path / "o"
    argv = [str(tiny) if a == "TINY" else a for a in argv]
    code, text, err = cli.run(["run", *argv, "--out", str(out), "--quiet"])
    assert code == 0, err
    assert _wrote(text, out) == _on_disk(out)


@pytest.mark.slow  # about 30 s each: a SAFARI run and a K-SVD dictionary
@pytest.mark.parametrize("name", ["safari-fmnist-cnn", "fedgradmp-fig2-video"])
def test_the_wrote_line_of_other_python_experiments(name, tmp_path, cli):
    out = tmp_path / "o"
    code, text, err = cli.run(["run", name, "--quick", "--rounds", "1", "--out", str(out),
                               "--quiet"])
    assert code == 0, err
    assert _wrote(text, out) == _on_disk(out)


def test_a_folder_named_like_an_experiment_does_not_hide_it(cli, tmp_path, monkeypatch):
    """``--out fedht-default`` makes a folder of that name in the working directory; the
    next ``fedsparse run fedht-default --out fedht-default --resume`` must still find the
    named experiment, not read the folder as a config file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fedht-default").mkdir()
    code, out, err = cli.run(["show", "fedht-default"])
    assert code == 0, err
    assert "[[runs]]" in out
    (tmp_path / "no-such-experiment").mkdir()
    cli.refused(["run", "no-such-experiment"], "is neither a config file nor a named",
                "'no-such-experiment' here is a folder, not a config file")


@pytest.mark.parametrize("command", [["sweep", "--grid", "algorithm.step_size=[0.01, 0.1]"],
                                     ["tune", "--param", "algorithm.step_size=log(0.01, 0.1)",
                                      "--trials", "2"]])
def test_quiet_searches_print_the_table_without_a_line_per_point(command, tiny, tmp_path, cli):
    """``--quiet`` (as ``run`` takes it) was refused by sweep and tune with a suggestion of
    --set or --out."""
    if command[0] == "tune":
        pytest.importorskip("optuna")
    argv = [command[0], str(tiny), *command[1:], "--out", str(tmp_path / "o")]
    code, loud, err = cli.run(argv)
    assert code == 0, err
    code, quiet, err = cli.run([*argv[:-1], str(tmp_path / "q"), "--quiet"])
    assert code == 0, err
    # a line per point (2 runs x 2 points or trials): "A ... -> objective = 0.83"
    assert sum(" -> objective = " in line for line in loud.splitlines()) == 4, loud
    assert " -> objective = " not in quiet
    table = "lower is better"  # the pivot's or the best trials' heading
    assert table in loud and table in quiet and "reruns the winners" in quiet
