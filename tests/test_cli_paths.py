"""Paths as a user types them: a leading ``~`` or ``~USER`` in every option and config
field that names a file or folder is read the same way by every command, and one that
cannot be read (no such user) is a usage error naming the option, never a traceback.
"""

from __future__ import annotations

import pytest

from fedsparse import cli

#: A ``~USER`` no machine has: pathlib cannot expand it.
NO_USER = "~fedsparse-no-such-user"


@pytest.fixture
def tiny(tmp_path, tiny_toml):
    path = tmp_path / "tiny.toml"
    path.write_text(tiny_toml(rounds=2))
    return path


@pytest.mark.parametrize("argv,option", [
    (["run", "{tiny}", "--out", f"{NO_USER}/out"], "--out"),
    (["sweep", "{tiny}", "--grid", "seed=[0, 1]", "--out", f"{NO_USER}/out"], "--out"),
    (["report", f"{NO_USER}/runs"], "DIR"),
    (["run", "{tiny}", "--out", "{tmp}/out", "--set", f"data.path={NO_USER}/data"],
     "data.path"),
    (["data", "describe", "e2006", "--path", f"{NO_USER}/E2006.train"], "--path"),
    (["data", "describe", "digits", "--plot", f"{NO_USER}/split.png"], "--plot"),
    (["data", "write", "digits", "--out", f"{NO_USER}/data"], "--out"),
], ids=["run --out", "sweep --out", "report DIR", "run --set data.path",
        "data describe --path", "data describe --plot", "data write --out"])
def test_a_home_folder_of_no_user_is_a_usage_error_naming_the_option(
        argv, option, tiny, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # where a path read as typed would be written
    argv = [a.format(tiny=tiny, tmp=tmp_path) for a in argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "RuntimeError" not in err
    assert option in err and NO_USER in err and "no such user" in err


def test_data_write_reads_a_tilde_as_the_home_folder_as_a_config_does(
        tmp_path, monkeypatch, capsys):
    # `data write --out '~/x'` (quoted, or from a script) wrote a folder named `~` in the
    # working folder, while the `path = "~/x"` it prints for a config names $HOME/x
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    assert cli.main(["data", "write", "digits", "--clients", "3", "--out", "~/fed"]) == 0
    assert (home / "fed" / "index.json").is_file()
    assert not (work / "~").exists()
    assert f'path = "{home / "fed"}"' in capsys.readouterr().out
