"""A careless user at the command line: abbreviated flags, ``--force`` on folders holding
their own files, ``--flwr-home`` on a config that is not Flower's, ``--resume`` into a new
folder, Ctrl-C in the middle of a run.

Every case asserts two things: nothing the user wrote is lost or changed, and the message
says what happened and what to do (exit code 2 for a usage error, no traceback).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedsparse.cli import build_parser
from fedsparse.manifest import MANIFEST, read_manifest

HAS_FLWR = importlib.util.find_spec("flwr") is not None


@pytest.fixture
def tiny(tmp_path, tiny_toml):
    path = tmp_path / "tiny.toml"
    path.write_text(tiny_toml(rounds=3, claim="FedIter-HT needs fewer rounds than Fed-HT"))
    return path


def _tree(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under ``folder`` (the user's view of it)."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _user_project(folder: Path, config: Path) -> dict[str, str]:
    """A user's own project folder: their config (a copy of ``config``), their results,
    their data."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text(config.read_text())
    (folder / "results.csv").write_text("round,accuracy\n1,0.5\n")
    (folder / "data").mkdir(exist_ok=True)
    (folder / "data" / "clients.npz").write_bytes(b"\x93NUMPY precious")
    (folder / "README.md").write_text("# my project\n")
    (folder / "pyproject.toml").write_text('[project]\nname = "mine"\n')
    return _tree(folder)


# ---------------------------------------------------------------------------------------
# Abbreviated flags: argparse's prefix matching is off on every parser.


def _all_parsers(parser, path=("fedsparse",)):
    import argparse

    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _all_parsers(sub, (*path, name))


def test_no_parser_accepts_abbreviated_options():
    seen = []
    for path, parser in _all_parsers(build_parser()):
        assert parser.allow_abbrev is False, " ".join(path)
        seen.append(" ".join(path))
    assert "fedsparse data describe" in seen
    if HAS_FLWR:
        assert {"fedsparse flower app", "fedsparse flower demo"} <= set(seen)


ABBREVIATED = [
    (["run", "{tiny}", "--seed", "7"], ["--seed", "--seeds", "--set seed=7"]),
    (["run", "{tiny}", "--round", "2"], ["--round", "--rounds"]),
    (["run", "{tiny}", "--for"], ["--for", "--force"]),
    (["run", "{tiny}", "--qui"], ["--qui"]),
    (["run", "{tiny}", "--res"], ["--res"]),
    (["run", "{tiny}", "--o", "{tmp}/x"], ["--o"]),
    (["sweep", "{tiny}", "--grid", "seed=[0, 1]", "--met", "objective"], ["--met", "--metric"]),
    (["sweep", "{tiny}", "--grid", "seed=[0, 1]", "--seed", "2"], ["--seed", "--seeds"]),
    (["sweep", "{tiny}", "--gri", "seed=[0, 1]"], ["--gri", "--grid"]),
    (["list", "--al"], ["--al", "--all"]),
    (["data", "describe", "digits", "--labels", "3"], ["--labels", "--labels-per-client"]),
    (["data", "describe", "digits", "--part", "iid"], ["--part", "--partition"]),
    # another command's spelling of an option: the hint names this command's
    (["data", "write", "digits", "--out", "{tmp}/x", "--forc"], ["--forc", "--force"]),
    (["run", "{tiny}", "--overwrite"],
     ["--overwrite is not an option of this command; it says --force"]),
]
if HAS_FLWR:
    ABBREVIATED += [
        (["flower", "app", "{tiny}", "--out", "{tmp}/app", "--fo"], ["--fo", "--force"]),
        (["flower", "app", "{tiny}", "--out", "{tmp}/app", "--flwr", "{tmp}/h"], ["--flwr"]),
        (["flower", "demo", "--round", "2", "--out", "{tmp}/demo"], ["--round", "--rounds"]),
    ]


@pytest.mark.parametrize("argv,expected", ABBREVIATED,
                         ids=[" ".join(a[:1] + [x for x in a if x.startswith("--")])
                              for a, _ in ABBREVIATED])
def test_abbreviated_options_are_usage_errors(tiny, tmp_path, monkeypatch, argv, expected, cli):
    monkeypatch.chdir(tmp_path)  # where runs/NAME would go
    argv = [a.format(tiny=tiny, tmp=tmp_path) for a in argv]
    code, out, err = cli.run(argv)
    assert code == 2, (out, err)
    assert "unrecognized arguments" in err and "Traceback" not in err
    for text in expected:
        assert text in err, (text, err)
    # nothing ran: no output folder anywhere
    assert not (tmp_path / "x").exists() and not (tmp_path / "app").exists()
    assert not (tmp_path / "runs").exists() and not (tmp_path / "demo").exists()


# ---------------------------------------------------------------------------------------
# --force removes only what fedsparse wrote.


def test_force_on_a_users_project_folder_removes_nothing(tiny, tmp_path, cli):
    """The reported case: `fedsparse run proj/config.toml --out proj --force`."""
    proj = tmp_path / "proj"
    before = _user_project(proj, tiny)
    err = cli.refused(["run", str(proj / "config.toml"), "--out", str(proj), "--force",
                    "--quiet"], "fedsparse did not write", "manifest")
    assert "config.toml" in err and "results.csv" in err
    assert _tree(proj) == before
    cli.refused(["sweep", str(proj / "config.toml"), "--grid", "seed=[0, 1]", "--out", str(proj),
              "--force"], "fedsparse did not write")
    assert _tree(proj) == before


def test_force_on_a_folder_marked_by_an_older_fedsparse_removes_nothing(tiny, tmp_path, cli):
    """A status marker alone (no manifest of the files) does not make files fedsparse's."""
    out = tmp_path / "old"
    before = _user_project(out, tiny)
    (out / ".fedsparse-run").write_text('{"status": "done"}\n')
    cli.refused(["run", str(tiny), "--out", str(out), "--force", "--quiet"], "manifest")
    assert {k: v for k, v in _tree(out).items() if k != ".fedsparse-run"} == before


def test_every_output_folder_has_a_manifest_of_its_files(tiny, tmp_path, cli):
    out = tmp_path / "out"
    assert cli.run(["run", str(tiny), "--out", str(out), "--quiet"])[0] == 0
    manifest = read_manifest(out)
    files = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert set(manifest.files) == files - {MANIFEST, ".fedsparse-run"}
    assert {"fed-ht", "fediter-ht"} <= manifest.dirs and manifest.folder_created
    assert all(len(h) == 64 for h in manifest.files.values())


def test_force_keeps_user_files_next_to_fedsparse_output_and_says_so(tiny, tmp_path, cli):
    out = tmp_path / "out"
    assert cli.run(["run", str(tiny), "--out", str(out), "--quiet"])[0] == 0
    old_summary = (out / "summary.json").read_text()
    (out / "notes.txt").write_text("what I saw")
    (out / "analysis").mkdir()
    (out / "analysis" / "fit.py").write_text("print(1)")
    (out / "fed-ht" / "my-plot.png").write_bytes(b"PNG mine")
    mine = {k: v for k, v in _tree(out).items()
            if k in ("notes.txt", "analysis/fit.py", "fed-ht/my-plot.png")}
    code, printed, err = cli.run(["run", str(tiny), "--out", str(out), "--force", "--quiet",
                               "--rounds", "2", "--only", "FedIter-HT"])
    assert code == 0, err
    assert {k: v for k, v in _tree(out).items() if k in mine} == mine
    # the earlier run's own files are gone, the new run's are there
    assert not (out / "fed-ht" / "history.jsonl").exists()
    assert (out / "summary.json").read_text() != old_summary
    assert "kept" in printed and "notes.txt" in printed and "analysis/" in printed
    assert "fed-ht/my-plot.png" in printed


def test_force_keeps_a_file_the_user_changed_and_refuses_to_overwrite_it(tiny, tmp_path, cli):
    out = tmp_path / "out"
    assert cli.run(["run", str(tiny), "--out", str(out), "--quiet"])[0] == 0
    edited = out / "fed-ht" / "history.csv"
    edited.write_text(edited.read_text() + "my,own,row\n")
    before = _tree(out)
    # the new run would rewrite fed-ht/history.csv: refused before anything is removed
    err = cli.refused(["run", str(tiny), "--out", str(out), "--force", "--quiet"],
                   "fed-ht/history.csv", "changed")
    assert _tree(out) == before
    # a run that does not write it: the changed file is kept, the rest replaced
    code, printed, err = cli.run(["run", str(tiny), "--out", str(out), "--force", "--quiet",
                               "--only", "FedIter-HT", "--set", "label=Other"])
    assert code == 0, err
    assert edited.read_text().endswith("my,own,row\n")
    assert not (out / "fed-ht" / "history.jsonl").exists()
    assert "fed-ht/history.csv" in printed and "changed" in printed


def test_force_refuses_when_a_user_folder_stands_where_the_run_writes(tiny, tmp_path, cli):
    out = tmp_path / "out"
    assert cli.run(["run", str(tiny), "--out", str(out), "--quiet", "--only", "Fed-HT"])[0] == 0
    (out / "fediter-ht").mkdir()
    (out / "fediter-ht" / "history.jsonl").write_text("mine\n")
    before = _tree(out)
    cli.refused(["run", str(tiny), "--out", str(out), "--force", "--quiet"], "fediter-ht")
    assert _tree(out) == before


def test_force_never_follows_a_link_out_of_the_folder(tiny, tmp_path, cli):
    out = tmp_path / "out"
    assert cli.run(["run", str(tiny), "--out", str(out), "--quiet"])[0] == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "history.jsonl").write_text("not fedsparse's\n")
    import shutil

    shutil.rmtree(out / "fed-ht")
    (out / "fed-ht").symlink_to(elsewhere, target_is_directory=True)
    cli.refused(["run", str(tiny), "--out", str(out), "--force", "--quiet"], "fed-ht")
    assert (elsewhere / "history.jsonl").read_text() == "not fedsparse's\n"


def test_a_forged_manifest_cannot_remove_files_outside_the_folder(tiny, tmp_path, cli):
    out = tmp_path / "out"
    assert cli.run(["run", str(tiny), "--out", str(out), "--quiet"])[0] == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    sha = hashlib.sha256(b"keep me").hexdigest()
    with open(out / MANIFEST, "a") as fh:
        for path in ("../victim.txt", str(victim), "fed-ht/../../victim.txt"):
            fh.write(json.dumps({"file": path, "sha256": sha}) + "\n")
    code, _, err = cli.run(["run", str(tiny), "--out", str(out), "--force", "--quiet"])
    assert code == 0, err
    assert victim.read_text() == "keep me"


@pytest.mark.parametrize("option", ["--force", "--resume"])
def test_a_folder_where_the_status_marker_goes_is_refused_before_removing(tiny, tmp_path,
                                                                          option, cli):
    """A folder named as the status marker: the run could not mark its status, so it is
    refused before --force removes the earlier results (which it did, then failed)."""
    out = tmp_path / "out"
    assert cli.run(["run", str(tiny), "--out", str(out), "--quiet"])[0] == 0
    (out / ".fedsparse-run").unlink()
    (out / ".fedsparse-run").mkdir()
    (out / ".fedsparse-run" / "notes.txt").write_text("mine\n")
    before = _tree(out)
    cli.refused(["run", str(tiny), "--out", str(out), option, "--quiet"],
                ".fedsparse-run/", "nothing was removed")
    assert _tree(out) == before


@pytest.mark.parametrize("damage", ["first", "last"])
def test_a_manifest_that_is_not_utf8_is_damaged_not_a_traceback(tiny, tmp_path, damage, cli):
    """Bytes that are no UTF-8 (a disk error, a bad copy) in the manifest: its header
    damaged, the folder is refused as one whose manifest is damaged; in another line, that
    line is skipped as a truncated one is (what it named is kept). Never a traceback."""
    out = tmp_path / "out"
    assert cli.run(["run", str(tiny), "--out", str(out), "--quiet"])[0] == 0
    lines = (out / MANIFEST).read_bytes().splitlines(keepends=True)
    at = 0 if damage == "first" else len(lines) - 1
    lines[at] = b"\xff\xfe" + lines[at]
    (out / MANIFEST).write_bytes(b"".join(lines))
    before = _tree(out)
    if damage == "first":
        cli.refused(["run", str(tiny), "--out", str(out), "--force", "--quiet"],
                    "damaged (no header)")
        assert _tree(out) == before
    else:
        damaged = read_manifest(out)
        (out / MANIFEST).write_bytes(b"".join(lines[:-1]))
        assert damaged == read_manifest(out)
        (out / MANIFEST).write_bytes(b"".join(lines))
    code, _, err = cli.run(["report", str(out)])
    assert "Traceback" not in err and code == 0, err


@pytest.mark.parametrize("key, value", [("attempts", "Infinity"), ("attempts", "1e400"),
                                        ("seconds", "1" + "0" * 400)])
def test_a_marker_with_a_number_beyond_float_or_int_is_not_a_traceback(tiny, tmp_path,
                                                                        key, value, cli):
    """An edited status marker whose ``attempts`` no int or ``seconds`` no float can hold
    counts as one that records none, as any other value it cannot read."""
    out = tmp_path / "out"
    assert cli.run(["run", str(tiny), "--out", str(out), "--quiet"])[0] == 0
    marker = (out / ".fedsparse-run").read_text()
    (out / ".fedsparse-run").write_text(marker.rstrip()[:-1] + f', "{key}": {value}}}')
    code, _, err = cli.run(["run", str(tiny), "--out", str(out), "--resume", "--quiet"])
    assert code == 0 and "Traceback" not in err, err
    assert json.loads((out / ".fedsparse-run").read_text())["attempts"] == 1


def test_a_run_never_overwrites_a_user_file_it_did_not_expect(tmp_path, python_experiment, cli):
    """A Python experiment writes whatever it writes: the user's file of the same name
    next to an earlier output is protected while it runs."""
    out = tmp_path / "out"
    assert cli.run(["run", python_experiment.name, "--out", str(out)])[0] == 0
    (out / "notes.txt").write_text("mine")
    python_experiment.writes = ["table.txt", "notes.txt"]
    err = cli.refused(["run", python_experiment.name, "--out", str(out), "--force"],
                   "notes.txt", "did not write")
    assert (out / "notes.txt").read_text() == "mine"
    assert "Traceback" not in err


def test_sweep_force_keeps_user_files(tmp_path, tiny, cli):
    out = tmp_path / "sweep"
    argv = ["sweep", str(tiny), "--grid", "algorithm.step_size=[0.01, 0.02]", "--rounds", "2",
            "--out", str(out)]
    assert cli.run(argv)[0] == 0
    (out / "notes.txt").write_text("mine")
    cli.refused(argv, "already holds", "--force")
    code, printed, err = cli.run([*argv, "--force"])
    assert code == 0, err
    assert (out / "notes.txt").read_text() == "mine" and "notes.txt" in printed
    assert (out / "sweep.csv").exists()


# ---------------------------------------------------------------------------------------
# flower app --force and --flwr-home.

needs_flwr = pytest.mark.skipif(not HAS_FLWR, reason="needs flwr")


@needs_flwr
def test_flower_app_force_never_overwrites_a_users_project(tiny, tmp_path, cli):
    proj = tmp_path / "proj"
    before = _user_project(proj, tiny)
    for argv in (["flower", "app", "fedht-default", "--run", "0", "--out", str(proj)],
                 ["flower", "app", "fedht-default", "--run", "0", "--out", str(proj),
                  "--force"]):
        code, _, err = cli.run(argv)
        assert code == 2 and "Traceback" not in err
        assert "README.md" in err or "not empty" in err, err
    assert _tree(proj) == before


@needs_flwr
def test_flower_app_force_rewrites_only_its_own_unchanged_files(tmp_path, cli):
    app = tmp_path / "app"
    argv = ["flower", "app", "fedht-default", "--run", "0", "--out", str(app)]
    assert cli.run(argv)[0] == 0
    assert set(read_manifest(app).files) >= {"pyproject.toml", "README.md",
                                             "fedsparse_app/server_app.py"}
    (app / "data").mkdir()
    (app / "data" / "node0.npz").write_bytes(b"mine")
    err = cli.refused(argv, "--force")
    assert "overwrite=True" not in err
    code, printed, err = cli.run([*argv[:4], "2", *argv[5:], "--force"])
    assert code == 0, err
    assert (app / "data" / "node0.npz").read_bytes() == b"mine"
    assert 'kind = "fed_iter_ht"' in (app / "pyproject.toml").read_text()
    # a README the user edited is not overwritten
    (app / "README.md").write_text("# my notes on this job\n")
    cli.refused([*argv, "--force"], "README.md", "changed")
    assert (app / "README.md").read_text() == "# my notes on this job\n"


@needs_flwr
def test_flwr_home_never_edits_a_config_that_is_not_flowers(tmp_path, cli):
    home = tmp_path / "home"
    home.mkdir()
    unrelated = '[tool.black]\nline-length = 88\n# my comment\n'
    (home / "config.toml").write_text(unrelated)
    app = tmp_path / "app"
    cli.refused(["flower", "app", "fedht-default", "--run", "0", "--out", str(app),
              "--flwr-home", str(home)], "--flwr-home", "not a Flower configuration")
    assert (home / "config.toml").read_text() == unrelated
    assert not app.exists()
    (home / "config.toml").write_text("not = [valid")
    cli.refused(["flower", "app", "fedht-default", "--run", "0", "--out", str(app),
              "--flwr-home", str(home)], "--flwr-home")
    assert (home / "config.toml").read_text() == "not = [valid"


@needs_flwr
def test_flwr_home_merges_into_flowers_config_and_keeps_a_backup(tmp_path, cli):
    home = tmp_path / "home"
    home.mkdir()
    flower = ('# my Flower connections\n[superlink]\ndefault = "mine"\n\n'
              '[superlink.mine]\naddress = "10.1.1.1:9093"\ninsecure = true\n')
    (home / "config.toml").write_text(flower)
    code, printed, err = cli.run(["flower", "app", "fedht-default", "--run", "0", "--out",
                               str(tmp_path / "app"), "--flwr-home", str(home)])
    assert code == 0, err
    import tomllib

    merged = tomllib.loads((home / "config.toml").read_text())
    assert merged["superlink"]["default"] == "mine"
    assert merged["superlink"]["mine"]["address"] == "10.1.1.1:9093"
    assert "fedsparse-local" in merged["superlink"]
    backups = list(home.glob("config.toml.*"))
    assert [b.read_text() for b in backups] == [flower]
    assert backups[0].name in printed


# ---------------------------------------------------------------------------------------
# --resume into a new folder, Ctrl-C.


def test_resume_into_a_new_or_empty_folder_is_refused(tiny, tmp_path, cli):
    cli.refused(["run", str(tiny), "--out", str(tmp_path / "typo"), "--resume", "--quiet"],
             "--resume", "nothing to continue")
    assert not (tmp_path / "typo").exists()
    (tmp_path / "empty").mkdir()
    cli.refused(["run", str(tiny), "--out", str(tmp_path / "empty"), "--resume", "--quiet"],
             "nothing to continue")


def test_resume_refuses_a_run_whose_checkpoint_is_gone(tiny, tmp_path, cli):
    out = tmp_path / "out"
    assert cli.run(["run", str(tiny), "--out", str(out), "--quiet"])[0] == 0
    (run,) = [p.parent for p in out.glob("*/checkpoint.pt") if "iter" in p.parent.name]
    (run / "checkpoint.pt").unlink()
    history = (run / "history.jsonl").read_bytes()
    cli.refused(["run", str(tiny), "--out", str(out), "--resume", "--rounds", "5", "--quiet"],
                "holds the run's history but not its checkpoint.pt", "would start the run "
                "again from round 0", "--force")
    assert (run / "history.jsonl").read_bytes() == history


def _interrupt_second_run(monkeypatch):
    from fedsparse.experiments import runner

    real = runner.execute_run
    calls = []

    def interrupted(run, *args, **kwargs):
        calls.append(run["label"])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(run, *args, **kwargs)

    monkeypatch.setattr(runner, "execute_run", interrupted)
    return real


def test_ctrl_c_prints_the_exact_command_that_continues(tiny, tmp_path, monkeypatch, cli):
    out = tmp_path / "out"
    real = _interrupt_second_run(monkeypatch)
    code, _, err = cli.run(["run", str(tiny), "--out", str(out), "--quiet", "--rounds", "4",
                         "--set", "FedIter-HT:algorithm.step_size=0.02"])
    assert code == 130
    expected = shlex.join(["fedsparse", "run", str(tiny), "--out", str(out), "--quiet",
                           "--rounds", "4", "--set", "FedIter-HT:algorithm.step_size=0.02",
                           "--resume"])
    assert expected in err, err
    failed = (out / "FAILED").read_text()
    assert expected in failed and "..." not in failed and "DIR" not in failed
    # the interrupted run's files are in the manifest with their hashes
    assert all(read_manifest(out).files.values()) and "FAILED" in read_manifest(out).files
    # the command does what it says
    monkeypatch.setattr("fedsparse.experiments.runner.execute_run", real)
    code, _, err = cli.run(shlex.split(expected)[1:])
    assert code == 0, err
    assert not (out / "FAILED").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert [r["rounds"] for r in summary["runs"]] == [4, 4]


def test_ctrl_c_with_the_default_folder_names_it(tmp_path, monkeypatch, tiny, cli):
    monkeypatch.chdir(tmp_path)
    _interrupt_second_run(monkeypatch)
    code, _, err = cli.run(["run", str(tiny), "--quiet", "--force"])
    assert code == 130
    command = shlex.join(["fedsparse", "run", str(tiny), "--quiet", "--resume", "--out",
                          "runs/tiny"])
    assert command in err and command in (tmp_path / "runs/tiny/FAILED").read_text()
    assert "--force" not in err.split("continue")[-1]


def _fail_second_run(monkeypatch, *, unwinding: bool):
    """The second run raises a RuntimeError, while unwinding from Ctrl-C or not."""
    from fedsparse.experiments import runner

    real = runner.execute_run
    calls = []

    def failing(run, *args, **kwargs):
        calls.append(run["label"])
        if len(calls) < 2:
            return real(run, *args, **kwargs)
        if not unwinding:
            raise RuntimeError("unexpected pos 64 vs 0")
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("unexpected pos 64 vs 0")  # noqa: B904 - as a C++ writer does

    monkeypatch.setattr(runner, "execute_run", failing)


def test_an_error_raised_while_unwinding_from_ctrl_c_is_the_interruption(
        tiny, tmp_path, monkeypatch, cli):
    # torch's archive writer, interrupted inside a save, once failed on its way out, and
    # its error replaced the Ctrl-C: exit 1 and a traceback instead of the continue command
    out = tmp_path / "out"
    _fail_second_run(monkeypatch, unwinding=True)
    code, _, err = cli.run(["run", str(tiny), "--out", str(out), "--quiet"])
    assert code == 130 and "Traceback" not in err and "RuntimeError" not in err
    command = shlex.join(["fedsparse", "run", str(tiny), "--out", str(out), "--quiet",
                          "--resume"])
    assert command in err
    failed = (out / "FAILED").read_text()
    assert failed.startswith("This run did not finish: interrupted") and command in failed
    assert "RuntimeError" not in failed


def test_an_error_of_its_own_is_not_an_interruption(tiny, tmp_path, monkeypatch, cli):
    out = tmp_path / "out"
    _fail_second_run(monkeypatch, unwinding=False)
    with pytest.raises(RuntimeError, match="unexpected pos"):
        cli.run(["run", str(tiny), "--out", str(out), "--quiet"])
    assert "RuntimeError: unexpected pos 64 vs 0" in (out / "FAILED").read_text()


def test_any_command_unwinding_from_ctrl_c_exits_as_interrupted(monkeypatch, cli):
    def listing(args):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise OSError("broken pipe") from None  # the context stays: __context__

    monkeypatch.setattr("fedsparse.cli.cmd_list", listing)
    code, _, err = cli.run(["list"])
    assert (code, err.strip()) == (130, "fedsparse: interrupted")


def test_ctrl_c_before_any_result_says_to_start_again(tiny, tmp_path, monkeypatch, cli):
    from fedsparse.experiments import runner

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "execute_run", interrupted)
    out = tmp_path / "out"
    code, _, err = cli.run(["run", str(tiny), "--out", str(out), "--quiet"])
    assert code == 130 and not out.exists()
    assert shlex.join(["fedsparse", "run", str(tiny), "--out", str(out), "--quiet"]) in err
    assert "--resume" not in err


def _stop_a_real_run(tiny, out, sig) -> tuple[int, str, str]:
    """Start a long run into ``out``, send it ``sig`` once its first checkpoint is written,
    and return (exit status, stderr, the command that continues it)."""
    argv = [sys.executable, "-m", "fedsparse.cli", "run", str(tiny), "--out", str(out),
            "--rounds", "100000", "--quiet"]
    # A shell starts a background job with SIGINT ignored and children inherit that
    # (Python then never raises KeyboardInterrupt): the run gets the default, as a
    # terminal's Ctrl-C would find it.
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 240
        while not (out / "fed-ht" / "checkpoint.pt").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    command = shlex.join(["fedsparse", "run", str(tiny), "--out", str(out), "--rounds",
                          "100000", "--quiet", "--resume"])
    return proc.returncode, err, command


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigint_to_a_real_run_prints_the_continue_command(tiny, tmp_path):
    out = tmp_path / "out"
    code, err, command = _stop_a_real_run(tiny, out, signal.SIGINT)
    assert code == 130, err
    assert command in err and "Traceback" not in err
    assert command in (out / "FAILED").read_text()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_marks_the_run_as_ctrl_c_does(tiny, tmp_path):
    # a batch scheduler or `kill` stops a run with SIGTERM: the folder is marked failed,
    # with the command that continues it
    out = tmp_path / "out"
    code, err, command = _stop_a_real_run(tiny, out, signal.SIGTERM)
    assert code == 130, err
    assert command in err and "Traceback" not in err
    assert command in (out / "FAILED").read_text()
    marker = json.loads((out / ".fedsparse-run").read_text())
    assert marker["status"] == "failed" and marker["attempts"] == 1


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_run_killed_with_sigkill_still_names_its_files_and_resumes(tiny, tmp_path, cli):
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "fedsparse.cli", "run", str(tiny), "--out", str(out),
            "--rounds", "100000", "--quiet"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        deadline = time.monotonic() + 240
        while not (out / "fed-ht" / "checkpoint.pt").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    # the manifest was written before the files were: it names them, without hashes
    assert "fed-ht/checkpoint.pt" in read_manifest(out).files
    (out / "notes.txt").write_text("mine")
    import torch

    done = torch.load(out / "fed-ht" / "checkpoint.pt", weights_only=False)["round"]
    code, _, err = cli.run(["run", str(tiny), "--out", str(out), "--rounds", str(done + 5),
                         "--quiet", "--resume"])
    assert code == 0, err
    assert (out / "notes.txt").read_text() == "mine"
    code, printed, err = cli.run(["run", str(tiny), "--out", str(out), "--rounds", "2", "--quiet",
                               "--force"])
    assert code == 0, err
    assert (out / "notes.txt").read_text() == "mine" and "notes.txt" in printed


# ---------------------------------------------------------------------------------------
# Errors that are not about the folder.


def test_out_of_memory_is_not_blamed_on_the_output_folder(tiny, tmp_path, monkeypatch, cli):
    from fedsparse.experiments import runner

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(runner, "execute_run", exhausted)
    out = tmp_path / "out"
    code, _, err = cli.run(["run", str(tiny), "--out", str(out), "--quiet"])
    assert code == 1
    assert "memory" in err.lower() and "Traceback" not in err
    assert str(out) not in err.split("error:")[1].split("\n")[0]


@pytest.mark.skipif(sys.platform != "linux", reason="an address-space cap (RLIMIT_AS)")
def test_a_run_too_large_for_memory_is_not_blamed_on_the_folder(tiny, tmp_path):
    """The reported case, under a 3 GiB address-space cap so it fails fast: a billion
    clients. (A generator that refuses the size up front is as good: exit code 2.)"""
    import resource

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))

    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "fedsparse.cli", "run", str(tiny), "--out",
                          str(out), "--quiet", "--set", "data.num_clients=1000000000"],
                         capture_output=True, text=True, timeout=600, preexec_fn=cap,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    err = res.stderr
    assert res.returncode in (1, 2), err
    assert "Traceback" not in err and "Cannot allocate memory" not in err, err
    assert "out of memory" in err or "num_clients" in err, err
    assert not out.exists()  # nothing was written: no folder left behind


def test_a_failure_while_marking_the_folder_keeps_the_real_error(tiny, tmp_path, monkeypatch, cli):
    """Out of memory, the system cannot even list the folder: the user still hears about
    the memory, not "Cannot allocate memory: '<out>'"."""
    import errno

    from fedsparse.experiments import output, runner

    def exhausted(*args, **kwargs):
        raise MemoryError

    def no_memory(out, *args, **kwargs):
        raise OSError(errno.ENOMEM, os.strerror(errno.ENOMEM), str(out))

    monkeypatch.setattr(runner, "execute_run", exhausted)
    monkeypatch.setattr(output, "_mark_failed", no_memory)
    out = tmp_path / "out"
    code, _, err = cli.run(["run", str(tiny), "--out", str(out), "--quiet"])
    assert code == 1 and "out of memory" in err.lower(), err
    assert f"Cannot allocate memory: '{out}'" not in err


def test_an_oserror_about_another_file_names_that_file(tiny, tmp_path, monkeypatch, cli):
    from fedsparse.experiments import runner

    def unreadable(*args, **kwargs):
        raise PermissionError(13, "Permission denied", "/data/clients.npz")

    monkeypatch.setattr(runner, "execute_run", unreadable)
    code, _, err = cli.run(["run", str(tiny), "--out", str(tmp_path / "out"), "--quiet"])
    assert code == 1 and "/data/clients.npz" in err and "--out" not in err


# ---------------------------------------------------------------------------------------
# Python experiments take the options of interface 1 (quick, rounds, seeds, resume, device).


class _Experiment:
    name = "test-python-experiment"

    def __init__(self):
        self.calls = []
        self.writes = ["table.txt"]

    def __call__(self, out, *, quick=False, rounds=None, seeds=None, resume=False,
                 device=None):
        self.calls.append({"quick": quick, "rounds": rounds, "seeds": seeds, "resume": resume,
                           "device": device})
        for name in self.writes:
            (Path(out) / name).write_text(f"rounds={rounds}\n")
        (Path(out) / "summary.json").write_text("{}")
        return {"plots": []}


@contextlib.contextmanager
def _registered(fn, name: str, **options):
    """``fn`` registered as the Python experiment ``name`` for the block."""
    from fedsparse.experiments import registry

    registry.register_experiment(name, description="a test experiment", **options)(fn)
    try:
        yield fn
    finally:
        registry._PYTHON.pop(name, None)


@pytest.fixture
def python_experiment():
    with _registered(_Experiment(), _Experiment.name) as exp:
        yield exp


def test_a_python_experiment_refuses_a_changed_output_before_computing(tmp_path,
                                                                       python_experiment, cli):
    out = tmp_path / "out"
    assert cli.run(["run", python_experiment.name, "--out", str(out)])[0] == 0
    (out / "table.txt").write_text("my edit")
    cli.refused(["run", python_experiment.name, "--out", str(out), "--force"], "table.txt")
    assert len(python_experiment.calls) == 1  # refused before it ran
    assert (out / "table.txt").read_text() == "my edit"


def test_python_experiments_get_rounds_seeds_quick_and_resume(tmp_path, python_experiment, cli):
    out = tmp_path / "out"
    code, _, err = cli.run(["run", python_experiment.name, "--out", str(out), "--rounds", "7",
                         "--seeds", "3", "--quick"])
    assert code == 0, err
    assert python_experiment.calls[-1] == {"quick": True, "rounds": 7, "seeds": 3,
                                           "resume": False, "device": None}
    assert (out / "table.txt").read_text() == "rounds=7\n"
    code, _, err = cli.run(["run", python_experiment.name, "--out", str(out), "--rounds", "7",
                         "--seeds", "3", "--quick", "--resume"])
    assert code == 0, err
    assert python_experiment.calls[-1]["resume"] is True
    # resumed as another form (its default seeds, not quick): refused, nothing called
    cli.refused(["run", python_experiment.name, "--out", str(out), "--resume"],
             "seeds 3 there, none now", "quick on there, off now")
    assert len(python_experiment.calls) == 2


@pytest.fixture
def seeded_experiment():
    """A Python experiment that runs 3 seeds unless told (1 when quick)."""
    with _registered(_Experiment(), _Experiment.name,
                     default_seeds=lambda quick: 1 if quick else 3) as exp:
        yield exp


def test_resume_equates_no_seeds_with_the_experiments_own_number(tmp_path, seeded_experiment,
                                                                 cli):
    from fedsparse.experiments.output import marker_info

    exp, out = seeded_experiment, tmp_path / "out"
    run = ["run", exp.name, "--out", str(out)]
    assert cli.run(run)[0] == 0
    assert marker_info(out)["seeds"] == 3
    for more in (["--seeds", "3"], [], ["--seeds", "4"]):  # the same seeds, then one more
        code, _, err = cli.run([*run, "--resume", *more])
        assert code == 0, err
        assert exp.calls[-1]["seeds"] == (int(more[1]) if more else None)
    assert marker_info(out)["seeds"] == 4
    # now without --seeds would drop the fourth replicate
    err = cli.refused([*run, "--resume"], "leave replicate 3 out", "--seeds 4 --resume")
    assert len(exp.calls) == 4 and "Traceback" not in err
    # quick runs one seed unless told
    quick = tmp_path / "quick"
    assert cli.run(["run", exp.name, "--out", str(quick), "--quick"])[0] == 0
    assert cli.run(["run", exp.name, "--out", str(quick), "--quick", "--resume", "--seeds",
                    "1"])[0] == 0
    assert marker_info(quick)["seeds"] == 1 and len(exp.calls) == 6


def test_a_marker_from_before_default_seeds_reads_as_the_default(tmp_path, seeded_experiment,
                                                                 cli):
    from fedsparse.experiments.output import MARKER, marker_info

    exp, out = seeded_experiment, tmp_path / "out"
    assert cli.run(["run", exp.name, "--out", str(out)])[0] == 0
    marker = marker_info(out)
    (out / MARKER).write_text(json.dumps({**marker, "seeds": None}))  # as written before
    code, _, err = cli.run(["run", exp.name, "--out", str(out), "--resume", "--seeds", "3"])
    assert code == 0, err
    assert marker_info(out)["seeds"] == 3 and marker_info(out)["attempts"] == 2
    # a quick run's marker is not read as the full run's
    (out / MARKER).write_text(json.dumps({**marker, "seeds": None, "quick": True}))
    cli.refused(["run", exp.name, "--out", str(out), "--resume"], "quick on there")
    assert marker_info(out)["seeds"] is None


@pytest.mark.parametrize("declared", [lambda quick: 0, lambda quick: "3"])
def test_a_default_seeds_that_is_no_count_is_refused_before_the_run(tmp_path, declared, cli):
    with _registered(_Experiment(), _Experiment.name, default_seeds=declared) as exp:
        cli.refused(["run", exp.name, "--out", str(tmp_path / "o")],
                    f"{exp.name}: default_seeds(quick=False)", "integer" if declared(0) else
                    "at least 1")
    assert exp.calls == [] and not (tmp_path / "o").exists()


@pytest.mark.parametrize("opt", [["--set", "rounds=3"], ["--only", "x"],
                                 ["--seeds", "2", "--band", "ci95"]])
def test_python_experiments_refuse_what_they_cannot_take(tmp_path, python_experiment, opt, cli):
    cli.refused(["run", python_experiment.name, "--out", str(tmp_path / "o"), *opt],
             "Python experiment", opt[-2] if opt[0] == "--seeds" else opt[0])
    assert python_experiment.calls == [] and not (tmp_path / "o").exists()


def test_an_experiment_that_does_not_take_an_option_says_so(tmp_path, cli):
    def old_style(out, *, quick=False):
        return {}

    with _registered(old_style, "test-old-style"):
        cli.refused(["run", "test-old-style", "--out", str(tmp_path / "o"), "--rounds", "3"],
                 "--rounds", "test-old-style")
    assert not (tmp_path / "o").exists()


def test_the_declared_output_names_cover_every_file_a_run_writes(tiny, tmp_path, cli):
    """--force and --resume check kept files against output_patterns before anything
    runs: the patterns must name every file a run writes (with seeds too)."""
    from fnmatch import fnmatchcase

    from fedsparse.experiments.config import load_config, resolve_runs
    from fedsparse.experiments.runner import output_patterns

    out = tmp_path / "out"
    assert cli.run(["run", str(tiny), "--out", str(out), "--quiet", "--seeds", "2"])[0] == 0
    config = load_config(tiny)
    patterns = output_patterns(config, [r["slug"] for r in resolve_runs(config)])
    written = set(read_manifest(out).files)
    assert {"fed-ht/seed-1/history.jsonl", "summary.json"} <= written
    assert [f for f in written if not any(fnmatchcase(f, p) for p in patterns)] == []


def test_the_recorder_refuses_every_way_of_touching_a_protected_file(tmp_path):
    import shutil

    from fedsparse.manifest import ProtectedFileError, recording, start_manifest

    folder = tmp_path / "out"
    (folder / "mine").mkdir(parents=True)
    (folder / "notes.txt").write_text("mine")
    (folder / "mine" / "data.npz").write_bytes(b"mine")
    start_manifest(folder, folder_created=False)
    attempts = [
        lambda: (folder / "notes.txt").write_text("x"),
        lambda: open(folder / "notes.txt", "a"),
        lambda: os.open(folder / "notes.txt", os.O_WRONLY | os.O_TRUNC),
        lambda: os.replace(folder / "new.txt", folder / "notes.txt"),
        lambda: os.rename(folder / "notes.txt", folder / "moved.txt"),
        lambda: os.remove(folder / "notes.txt"),
        lambda: (folder / "mine" / "other.npz").write_bytes(b"x"),  # inside the user's folder
        lambda: shutil.rmtree(folder / "mine"),
        lambda: shutil.rmtree(folder),
    ]
    with recording(folder, protect=["notes.txt", "mine/"]) as written:
        (folder / "new.txt").write_text("fedsparse's")
        for attempt in attempts:
            with pytest.raises(ProtectedFileError, match="did not write"):
                attempt()
        (folder / "sub").mkdir()
        (folder / "sub" / "history.jsonl").write_text("{}")
    assert (folder / "notes.txt").read_text() == "mine"
    assert (folder / "mine" / "data.npz").read_bytes() == b"mine"
    assert not (folder / "mine" / "other.npz").exists()
    assert written.files == {"new.txt", "sub/history.jsonl"} and written.dirs == {"sub"}
    manifest = read_manifest(folder)
    assert set(manifest.files) == {"new.txt", "sub/history.jsonl"}
    assert manifest.files["new.txt"] == hashlib.sha256(b"fedsparse's").hexdigest()
    # outside a recording block nothing is refused or recorded
    (folder / "notes.txt").write_text("edited by the user")


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX pipe")
def test_output_piped_to_a_reader_that_stops_early_ends_quietly(monkeypatch, capsys):
    # `fedsparse list | head -1`: the reader closes the pipe before fedsparse writes
    read, write = os.pipe()
    os.close(read)
    done = subprocess.run([sys.executable, "-m", "fedsparse", "list"], stdout=write,
                          stderr=subprocess.PIPE, text=True, timeout=120)
    os.close(write)
    assert done.stderr == ""
    assert done.returncode == 141  # 128 + SIGPIPE, as the standard tools end
    # a broken pipe that is not the output's is still an error
    from fedsparse import cli

    def broken(func, args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "as_interrupted", broken)
    assert cli.main(["list"]) == 1
    assert "fedsparse: error: [Errno 32] Broken pipe" in capsys.readouterr().err


@pytest.mark.parametrize("argv,expected", [
    (["run", ""], ["experiment='' is invalid", "leave it out for the default"]),
    (["sweep", "", "--grid", "seed=[0, 1]"], ["experiment='' is invalid"]),
    (["run", "x" * 5000], ["experiment='xxxx", "(5000 characters)", "at most 255 bytes"]),
    (["run", "fedht-default", "--seeds", "99999999999999"],
     ["--seeds 99999999999999 is 1e+14 rounds in all", "could not end"]),
    (["run", "fedht-default", "--seeds", "100000000", "--rounds", "10"],
     ["--seeds=100000000 needs about", "replicates' round records"]),
    (["sweep", "fedht-default", "--seeds", "100000000", "--grid", "seed=[0, 1]"],
     ["--seeds=100000000 needs about"]),
    # --set reaches the runs' fields only: a key of the config itself is named as such
    (["run", "fedht-default", "--set", "title='x'"],
     ["--set='title' is invalid: 'title' is a key of the config itself",
      "fedsparse show NAME > my.toml"]),
    (["run", "fedht-default", "--set", "defaults.rounds=2"],
     ["--set='defaults.rounds' is invalid: 'defaults' is a key of the config itself"]),
    (["run", "fedht-default", "--set", ".rounds=2"],
     ["--set='.rounds' is invalid: must be dotted names"]),
    (["sweep", "fedht-default", "--grid", "algorithm.step_size=[]"],
     ["--grid algorithm.step_size=[] is invalid: must be a non-empty list"]),
    (["sweep", "fedht-default", "--grid", "x=[1]"],
     ["--grid x is invalid: must be a run field"]),
])
def test_an_experiment_that_cannot_run_is_refused_before_its_folder_is_made(argv, expected,
                                                                            tmp_path, cli):
    out = tmp_path / "out"
    cli.refused([*argv, "--out", str(out)], *expected)
    assert not out.exists()


def test_many_seeds_are_warned_of_once_with_the_runs_counted(tmp_path, capsys):
    # the early check of --seeds (before the config is read) counted one round a
    # replicate and warned of days beside the run's own, exact warning
    from fedsparse import cli as real_cli

    out = tmp_path / "out"
    assert real_cli.main(["run", "fedht-default", "--seeds", "99999999999", "--rounds", "1",
                          "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "replicates of 6 run(s) is 6e+11 rounds" in err
