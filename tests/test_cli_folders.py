"""Output folders that one command wrote and another is pointed at: what a search
(``sweep``, ``tune``) wrote is never taken for runs to continue, and a folder another
command is writing is refused.
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedsparse import cli
from fedsparse.experiments import output
from fedsparse.manifest import MANIFEST


@pytest.fixture
def tiny(tmp_path, tiny_toml):
    path = tmp_path / "tiny.toml"
    path.write_text(tiny_toml(rounds=2))
    return path


def _tree(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


SEARCHES = [(["sweep", "--grid", "seed=[0, 1]"], "a sweep (fedsparse sweep)")]
if importlib.util.find_spec("optuna") is not None:
    SEARCHES.append((["tune", "--param", "seed=[0, 1]", "--trials", "2"],
                     "a tuning (fedsparse tune)"))


@pytest.mark.parametrize("search,named", SEARCHES, ids=[s[0][0] for s in SEARCHES])
def test_run_resume_refuses_a_search_folder(search, named, tiny, tmp_path, capsys):
    # the marker of a search's folder named no experiment, so --resume found nothing to
    # refuse and wrote the runs among the search's results
    out = tmp_path / "search"
    command, *options = search
    assert cli.main([command, str(tiny), *options, "--out", str(out), "--quiet"]) == 0
    before = _tree(out)
    capsys.readouterr()
    assert cli.main(["run", str(tiny), "--out", str(out), "--resume", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"holds the results of {named}" in err and "--force" in err
    assert _tree(out) == before
    # --force replaces them, as it says
    assert cli.main(["run", str(tiny), "--out", str(out), "--force", "--quiet"]) == 0
    assert (out / "summary.json").is_file() and not (out / "best.json").exists()


@pytest.mark.parametrize("damage", [b"", b'{"status": "done", "exper', b"[1, 2]", b"\xff"],
                         ids=["empty", "cut short", "a list", "no UTF-8"])
def test_run_resume_refuses_a_folder_whose_marker_is_damaged(damage, tiny, tmp_path, capsys):
    # a damaged marker read as none, which --resume took for an earlier fedsparse's that
    # kept no identity: the runs were written among a sweep's results
    out = tmp_path / "search"
    assert cli.main(["sweep", str(tiny), "--grid", "seed=[0, 1]", "--out", str(out),
                     "--quiet"]) == 0
    (out / ".fedsparse-run").write_bytes(damage)
    before = _tree(out)
    capsys.readouterr()
    assert cli.main(["run", str(tiny), "--out", str(out), "--resume", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "has a damaged status marker .fedsparse-run (not the JSON object fedsparse " \
           "writes), so what ran there cannot be told" in err and "--force" in err
    assert _tree(out) == before


def test_a_run_killed_while_writing_its_marker_leaves_it_whole(tiny, tmp_path, monkeypatch):
    # written in place, the marker of a run killed mid-write was cut short, and --resume
    # refuses a damaged marker (what ran there cannot be told)
    out = tmp_path / "run"
    assert cli.main(["run", str(tiny), "--out", str(out), "--quiet"]) == 0
    marker = (out / ".fedsparse-run").read_bytes()
    write_text = Path.write_text

    def killed_midway(self, text, *args, **kwargs):
        write_text(self, text[:len(text) // 2], *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        output._write_marker(out, "running")
    monkeypatch.undo()
    assert (out / ".fedsparse-run").read_bytes() == marker
    assert cli.main(["run", str(tiny), "--out", str(out), "--resume", "--quiet"]) == 0
    assert not (out / ".fedsparse-run.tmp").exists()


def _running(out: Path, tiny_toml, tmp_path) -> subprocess.Popen:
    """A real ``fedsparse run`` of many rounds writing into ``out``, once its manifest is
    there (it holds the folder from then on)."""
    config = tmp_path / "long.toml"
    config.write_text(tiny_toml(rounds=10**6, labels=("A",), algorithms=("fed_ht",)))
    proc = subprocess.Popen([sys.executable, "-m", "fedsparse", "run", str(config), "--out",
                             str(out), "--quiet"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (out / "a").is_dir():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the first run did not start: {proc.communicate()[1]}")
        time.sleep(0.1)
    return proc


@pytest.mark.parametrize("option", ["--force", "--resume"])
def test_a_folder_another_command_is_writing_is_refused(option, tiny, tiny_toml, tmp_path,
                                                        capsys):
    # a second --force removed the running run's files, a second --resume wrote the same
    # checkpoints; either way one of them died on a file the other had renamed
    out = tmp_path / "busy"
    first = _running(out, tiny_toml, tmp_path)
    try:
        manifest = (out / MANIFEST).read_bytes()
        capsys.readouterr()
        assert cli.main(["run", str(tiny), "--out", str(out), option, "--quiet"]) == 2
        assert "is in use: another fedsparse command is writing there" in \
            capsys.readouterr().err
        assert (out / MANIFEST).read_bytes() == manifest and (out / "a").is_dir()
        assert first.poll() is None  # the first run goes on
    finally:
        first.kill()  # the system drops its hold with the process, even on SIGKILL
        first.wait()
    assert cli.main(["run", str(tiny), "--out", str(out), "--force", "--quiet"]) == 0
    # this process let go of the folder when its command ended
    other = subprocess.run([sys.executable, "-m", "fedsparse", "run", str(tiny), "--out",
                            str(out), "--force", "--quiet"], capture_output=True, text=True)
    assert other.returncode == 0, other.stderr


@pytest.mark.parametrize("command", [["report"], ["run", "--resume"], ["run", "--force"]])
def test_a_manifest_that_is_a_symbolic_link_loop_is_named(command, tiny, tmp_path, capsys):
    # reading it failed with "[Errno 40] Too many levels of symbolic links" (exit 1); the
    # report wrote its page first
    out = tmp_path / "out"
    assert cli.main(["run", str(tiny), "--out", str(out), "--quiet"]) == 0
    (out / MANIFEST).unlink()
    (out / MANIFEST).symlink_to(MANIFEST)
    before = _tree(out)
    capsys.readouterr()
    name, *options = command
    argv = [name, str(out)] if name == "report" else [name, str(tiny), "--out", str(out),
                                                      *options, "--quiet"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"{out / MANIFEST} is a symbolic link that loops back to itself" in err, err
    assert "nothing was changed" in err and "Errno" not in err
    assert _tree(out) == before and (out / MANIFEST).is_symlink()


@pytest.mark.parametrize("target", [".fedsparse-run", "nowhere", "../precious.txt"],
                         ids=["a loop", "to nothing", "to a file"])
@pytest.mark.parametrize("option", ["--resume", "--force", None])
def test_a_status_marker_that_is_a_symbolic_link_is_refused(target, option, tiny, tmp_path,
                                                            capsys):
    # a loop was "a damaged status marker" on --resume, "cannot be written: Too many
    # levels of symbolic links" without a name in an otherwise empty folder; a run there
    # wrote its marker through a link to a file, out of the folder
    (tmp_path / "precious.txt").write_text("mine\n")
    out = tmp_path / "out"
    if option is None:  # a folder with nothing else, where a new run starts
        out.mkdir()
    else:
        assert cli.main(["run", str(tiny), "--out", str(out), "--quiet"]) == 0
        (out / ".fedsparse-run").unlink()
    (out / ".fedsparse-run").symlink_to(target)
    before = _tree(out)
    capsys.readouterr()
    assert cli.main(["run", str(tiny), "--out", str(out), *([option] if option else []),
                     "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{out / '.fedsparse-run'} is a symbolic link" in err, err
    assert ("loops back to itself" if target == ".fedsparse-run" else repr(target)) in err
    assert "nothing was changed" in err and "Errno" not in err
    assert _tree(out) == before and (out / ".fedsparse-run").is_symlink()
    assert (tmp_path / "precious.txt").read_text() == "mine\n"


@pytest.mark.parametrize("target,said", [("loop.toml", "that loops back to itself"),
                                         ("nowhere.toml", "to 'nowhere.toml', where there "
                                          "is no file")])
def test_a_config_that_is_a_symbolic_link_to_no_file_says_so(target, said, tmp_path, capsys):
    # it said "config file ... does not exist", of a link the user can see with ls
    config = tmp_path / "loop.toml"
    config.symlink_to(target)
    assert cli.main(["run", str(config), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"config file {str(config)!r} is a symbolic link {said}" in err, err
