import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedsparse.cli import main


@pytest.fixture
def tiny(tmp_path, tiny_toml):
    path = tmp_path / "tiny.toml"
    path.write_text(tiny_toml(rounds=3, claim="FedIter-HT needs fewer rounds than Fed-HT",
                              compare=True))
    return path


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


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
    out = capsys.readouterr().out
    assert "fedht-default" in out
    # the config compares at rounds 30 and 60: with 4 rounds that is said, not skipped
    assert "no comparison at round 30" in out


def test_resume_continues_a_run(tmp_path):
    assert main(["run", "--out", str(tmp_path), "--rounds", "3", "--quiet"]) == 0
    assert main(["run", "--out", str(tmp_path), "--rounds", "5", "--resume", "--quiet"]) == 0
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    assert len((run_dir / "history.jsonl").read_text().splitlines()) == 6


def test_run_into_an_existing_folder_refuses_and_keeps_the_results(tiny, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(tiny), "--out", str(out), "--quiet"]) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["run", str(tiny), "--out", str(out), "--quiet", "--rounds", "2"]) == 2
    err = capsys.readouterr().err
    assert "--resume" in err and "--force" in err and "Traceback" not in err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_force_replaces_the_old_run_without_stale_folders(tiny, tmp_path):
    out = tmp_path / "out"
    assert main(["run", str(tiny), "--out", str(out), "--quiet"]) == 0
    assert {p.name for p in out.iterdir() if p.is_dir()} == {"fed-ht", "fediter-ht"}
    # a different config into the same folder: the old run folders must not survive
    assert main(["run", str(tiny), "--out", str(out), "--quiet", "--force", "--only",
                 "FedIter-HT", "--set", "label=Renamed", "--rounds", "2"]) == 0
    assert {p.name for p in out.iterdir() if p.is_dir()} == {"renamed"}
    summary = json.loads((out / "summary.json").read_text())
    assert [r["label"] for r in summary["runs"]] == ["Renamed"]
    assert len(_records(out / "renamed")) == 3


def test_force_refuses_a_folder_fedsparse_did_not_write(tiny, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("do not delete")
    assert main(["run", str(tiny), "--out", str(out), "--quiet", "--force"]) == 2
    assert "fedsparse did not write" in capsys.readouterr().err
    assert (out / "thesis.tex").read_text() == "do not delete"


def test_resume_refuses_run_folders_of_another_config(tiny, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(tiny), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["run", str(tiny), "--out", str(out), "--quiet", "--resume", "--set",
                 "FedIter-HT:label=Other"]) == 2
    err = capsys.readouterr().err
    assert "fediter-ht" in err and "mixed" in err
    assert main(["run", str(tiny), "--out", str(out), "--resume", "--force"]) == 2
    assert "exclude each other" in capsys.readouterr().err


def test_a_refused_resume_leaves_the_results_as_they_were(tiny, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(tiny), "--out", str(out), "--quiet"]) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    # another step size: the checkpoints belong to another run
    assert main(["run", str(tiny), "--out", str(out), "--quiet", "--resume", "--rounds", "5",
                 "--set", "algorithm.step_size=0.02"]) == 2
    assert "checkpoint" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert not (out / "FAILED").exists()


def test_label_prefixed_set_changes_one_run(tiny, tmp_path):
    out = tmp_path / "out"
    assert main(["run", str(tiny), "--out", str(out), "--quiet", "--rounds", "2",
                 "--set", "FedIter-HT:algorithm.step_size=0.02"]) == 0
    config = (out / "config.toml").read_text()
    assert config.count("step_size = 0.02") == 1 and config.count("step_size = 0.01") == 1


def test_only_runs_the_named_runs(tiny, tmp_path):
    out = tmp_path / "out"
    assert main(["run", str(tiny), "--out", str(out), "--quiet", "--only", "Fed-HT"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert [r["label"] for r in summary["runs"]] == ["Fed-HT"]


def test_a_failed_run_is_marked_and_can_be_resumed(tiny, tmp_path, monkeypatch, capsys):
    from fedsparse.experiments import runner

    real = runner.execute_run
    calls = []

    def fail_on_second(run, *args, **kwargs):
        calls.append(run["label"])
        if len(calls) == 2:
            raise RuntimeError("disk on fire")
        return real(run, *args, **kwargs)

    monkeypatch.setattr(runner, "execute_run", fail_on_second)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="disk on fire"):
        main(["run", str(tiny), "--out", str(out), "--quiet"])
    failed = (out / "FAILED").read_text()
    assert "disk on fire" in failed and "--resume" in failed
    assert (out / "fed-ht" / "history.jsonl").exists()  # the finished run is kept
    capsys.readouterr()
    assert main(["run", str(tiny), "--out", str(out), "--quiet"]) == 2
    assert "FAILED" in capsys.readouterr().err  # the refusal says the folder holds a failure
    first = json.loads((out / ".fedsparse-run").read_text())
    assert (first["status"], first["attempts"]) == ("failed", 1) and first["seconds"] > 0
    monkeypatch.setattr(runner, "execute_run", real)
    assert main(["run", str(tiny), "--out", str(out), "--quiet", "--resume"]) == 0
    assert not (out / "FAILED").exists() and (out / "summary.json").exists()
    # the marker keeps both parts' time (the summary times only the resumed part)
    done = json.loads((out / ".fedsparse-run").read_text())
    assert (done["status"], done["attempts"]) == ("done", 2)
    assert done["seconds"] > first["seconds"]


def test_a_run_that_fails_before_writing_results_leaves_nothing(tiny, tmp_path, capsys):
    out = tmp_path / "new" / "out"
    # the data file is checked when the runs are built, after --out was prepared
    assert main(["run", str(tiny), "--out", str(out), "--quiet", "--set",
                 'data={kind = "libsvm_file", path = "missing.svm"}']) == 2
    err = capsys.readouterr().err
    assert "--set data.path=" in err
    assert not out.exists()


def test_comparison_says_not_reached_instead_of_round_none(tiny, tmp_path, capsys):
    out = tmp_path / "out"
    # with a 1e-6 step FedIter-HT barely moves, so it never reaches the objective Fed-HT
    # has after 3 rounds at its own step 0.01
    assert main(["run", str(tiny), "--out", str(out), "--quiet", "--set",
                 "FedIter-HT:algorithm.step_size=1e-6"]) == 0
    text = capsys.readouterr().out
    assert "not reached within 3 rounds" in text and "round None" not in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["comparisons"][0]["rounds_needed"] is None


def test_list_groups_by_paper_with_runtime_and_needs(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "fedht-fig1" in out and "fedht-fig3" in out and "(default)" in out
    assert "Tong et al. 2022" in out and "Jeong et al. 2024" in out
    assert "Paper 000" not in out and "Paper 002" not in out
    assert "RUNTIME" in out and "NEEDS" in out and "[video] extra" in out
    # the times were taken on a 2-core machine (docs/results/fedht.md, safari.md, scale.md
    # say so beside them), some with two threads: not on one core
    assert "as timed on a 2-core CPU machine" in out and "one CPU core" not in out
    # one Figure 6 family: the TOML bases of the Python experiments are not listed twice
    from fedsparse.experiments.registry import python_experiments, toml_experiments

    known = {*toml_experiments(), *python_experiments()}
    names = [line.split()[0] for line in out.splitlines()
             if line.startswith("  ") and line.split()[0] in known]
    assert "fig6-mnist5k" in names and "fedht-fig6-mnist5k" not in names
    from fedsparse.experiments.registry import INFO

    hidden = {n for n, info in INFO.items() if info.hidden}
    assert len(names) == len(set(names)) == len(known - hidden)
    assert main(["list", "--all"]) == 0
    assert "fedht-fig6-mnist5k" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["fedht-fig3", "fig6-mnist5k", "fig6-libsvm",
                                  "fedgradmp-fig2-video", "scale-million"])
def test_show_works_for_every_kind_of_experiment(name, capsys):
    assert main(["show", name]) == 0
    out = capsys.readouterr().out
    assert "Paper 00" not in out
    if name not in ("fedgradmp-fig2-video", "scale-million"):
        import tomllib

        body = "\n".join(line for line in out.splitlines() if not line.startswith("#"))
        assert tomllib.loads(body)["runs"]
    else:  # fixed in code: what it does in words, without the docstring's sections
        assert f"fixed in code (no config to edit; fedsparse run {name} takes --quick" in out
        assert "-------" not in out and "Returns" not in out
        assert "50 clients" in out if name == "fedgradmp-fig2-video" else "10^6" in out


def test_show_every_named_experiment():
    from fedsparse.experiments.registry import python_experiments, toml_experiments

    for name in [*toml_experiments(), *python_experiments()]:
        assert main(["show", name]) == 0, name


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("fedsparse 0.")


def test_help_imports_neither_torch_nor_flower():
    """``fedsparse --help`` needs only the parser: run cli.py under a bare ``fedsparse``
    package (the package ``__init__`` itself is outside the command line's control)."""
    src = Path(__file__).resolve().parents[1] / "src" / "fedsparse"
    code = (
        "import sys, types\n"
        f"pkg = types.ModuleType('fedsparse'); pkg.__path__ = [{str(src)!r}]\n"
        "pkg.__version__ = '0'\n"
        "sys.modules['fedsparse'] = pkg\n"
        "from fedsparse.cli import main\n"
        "for argv in (['--help'], ['run', '--help'], ['sweep', '--help'], ['--version']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'torch', 'numpy', 'matplotlib', 'flwr'})\n"
        "print('HEAVY', heavy)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(src.parent)}, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "HEAVY []" in res.stdout, res.stdout[-500:]
    assert "run a named experiment" in res.stdout


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
    assert best["FedIter-HT"]["params"]["algorithm.step_size"] == 0.05
    with open(tmp_path / "s" / "sweep.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 3
    blown = next(r for r in rows if float(r["algorithm.step_size"]) == 50)
    assert blown["diverged"] == "True" or not math.isfinite(float(blown["objective"]))


def test_bad_config_file(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("runs = [")
    assert main(["run", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "not valid TOML" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["fedht-fig1", "fedht-fig2", "fedht-fig3"])
def test_paper_configs_resolve(name):
    from fedsparse.cli import resolve_experiment
    from fedsparse.experiments.config import build_algorithm, resolve_runs

    _, config, _ = resolve_experiment(name)
    for run in resolve_runs(config):
        build_algorithm(run["algorithm"])


def test_every_packaged_config_passes_the_whole_config_check():
    from fedsparse.experiments.config import load_config, resolve_runs
    from fedsparse.experiments.registry import toml_experiments

    for name, path in toml_experiments().items():
        assert resolve_runs(load_config(path)), name


def test_a_run_whose_every_run_diverged_exits_1(tmp_path, tiny_toml, capsys):
    """Every run diverged: no result, so a script must see it in the status (it was 0);
    some diverged: results all the same, status 0 and a line naming them."""
    path = tmp_path / "tiny.toml"
    path.write_text(tiny_toml(rounds=5))
    big = "algorithm.step_size=1000.0"  # overflows within 5 rounds
    assert main(["run", str(path), "--out", str(tmp_path / "some"), "--quiet",
                 "--set", f"Fed-HT:{big}"]) == 0
    out = capsys.readouterr().out
    assert "note: 1 of 2 runs diverged: Fed-HT at round " in out
    for seeds in ([], ["--seeds", "2"]):
        assert main(["run", str(path), "--out", str(tmp_path / f"all{len(seeds)}"),
                     "--quiet", "--set", big, *seeds]) == 1
        err = capsys.readouterr().err
        assert "fedsparse: error: every run diverged (Fed-HT " in err and "; FedIter-HT " in err
        assert ("in 2 of 2 seeds" in err) == bool(seeds)
        assert (tmp_path / f"all{len(seeds)}" / "summary.json").is_file()  # kept, as written
