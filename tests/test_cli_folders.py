"""Output folders that one command wrote and another is pointed at: what a search
(``sweep``, ``tune``) wrote is never taken for runs to continue.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import pytest

from fedsparse import cli


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
