"""Command lines whose parts do not fit together: a ``--force`` pointed at a folder
that is no data set, a ``--resume`` of another experiment or seed count, an option the
chosen partition does not take, a field given twice, a channel that does not fit the data,
damaged files under ``fedsparse report``. Each is refused with exit code 2, a message
naming what does not fit, and nothing lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture
def tiny(tmp_path, tiny_toml):
    path = tmp_path / "tiny.toml"
    path.write_text(tiny_toml(rounds=3, labels=("A", "B")))
    return path


# -------------------------------------------------------------------- data write --force

def _write(out, *extra):
    return ["data", "write", "fedprox_synthetic", "--clients", "3", "--out", str(out), *extra]


def test_overwrite_never_deletes_a_folder_that_is_no_data_set(tmp_path, cli):
    thesis = tmp_path / "d" / "thesis.tex"
    thesis.parent.mkdir()
    thesis.write_text("years of work")
    cli.refused(_write(thesis.parent, "--force"), "--out=", "not a data set",
             "nothing was deleted")
    assert thesis.read_text() == "years of work"
    cli.refused(_write(thesis.parent), "--out=", "already exists", "--force")
    plain = tmp_path / "f.txt"
    plain.write_text("mine")
    cli.refused(_write(plain, "--force"), "is a file")
    assert plain.read_text() == "mine"


def test_overwrite_replaces_an_earlier_data_set_but_not_files_added_to_it(tmp_path, cli):
    out = tmp_path / "set"
    assert cli.run(_write(out))[0] == 0
    assert cli.run(_write(out, "--force", "--seed", "1"))[0] == 0
    (out / "notes.txt").write_text("mine")
    cli.refused(_write(out, "--force"), "notes.txt", "nothing was deleted")
    assert (out / "notes.txt").read_text() == "mine"


def test_data_write_and_describe_take_force_and_their_earlier_overwrite(tmp_path, cli):
    """--force, as run, sweep and tune spell it; the earlier --overwrite still works, with
    a warning, and is no longer offered by --help."""
    out = tmp_path / "set"
    assert cli.run(_write(out))[0] == 0
    code, _, err = cli.run(_write(out, "--overwrite", "--seed", "1"))
    assert code == 0 and "--overwrite is deprecated: it is called --force now" in err
    plot = tmp_path / "split.png"
    plot.write_text("x")
    describe = ["data", "describe", "digits", "--clients", "4", "--plot", str(plot)]
    cli.refused(describe, "the file exists", "add --force to replace it")
    assert cli.run(describe + ["--force"])[0] == 0
    for command in ("write", "describe"):
        code, text, _ = cli.run(["data", command, "--help"])
        assert code == 0 and "--force" in text and "--overwrite" not in text


@pytest.mark.parametrize("argv, expected", [
    (["data", "describe", "digits", "--clients", "5", "--alpha", "0.01"],
     "--alpha applies to --partition dirichlet, not 'iid'"),
    (["data", "describe", "digits", "--partition", "dirichlet", "--by-labels"],
     "--by-labels applies to --partition clusters"),
    (["data", "describe", "diabetes", "--partition", "label_skew", "--clients", "5"],
     "'diabetes' is a regression data set"),
])
def test_data_options_that_do_not_apply_are_refused(argv, expected, cli):
    cli.refused(argv, expected)


def test_a_generator_refuses_the_options_of_real_data(tmp_path, cli):
    cli.refused(_write(tmp_path / "g", "--partition", "dirichlet", "--max-examples", "10"),
             "--partition, --max-examples", "is generated")
    cli.refused(_write(tmp_path / "g", "--alpha", "0"), "--alpha: ", "is generated")  # 0 is given
    assert not (tmp_path / "g").exists()


def test_data_write_does_not_offer_the_sparse_libsvm_sets(tmp_path, cli):
    cli.refused(["data", "write", "libsvm", "--path", "x.svm", "--out", str(tmp_path / "w")],
             "invalid choice: 'libsvm'")


def test_describe_plot_into_a_folder_is_a_usage_error(tmp_path, cli):
    cli.refused(["data", "describe", "digits", "--clients", "3", "--plot", str(tmp_path)],
             "--plot=", "is a folder")


# ---------------------------------------------------------------- run --resume

def test_resume_with_another_seed_count_is_refused_and_keeps_the_results(tiny, tmp_path, cli):
    out = tmp_path / "r"
    assert cli.run(["run", str(tiny), "--out", str(out), "--quiet", "--seeds", "2"])[0] == 0
    before = (out / "summary.json").read_bytes()
    cli.refused(["run", str(tiny), "--out", str(out), "--quiet", "--resume"],
             "--resume=", "seeds 2 there, none now")
    cli.refused(["run", str(tiny), "--out", str(out), "--quiet", "--resume", "--seeds", "1"],
             "seeds 2 there, 1 now")
    assert (out / "summary.json").read_bytes() == before
    code, _, err = cli.run(["run", str(tiny), "--out", str(out), "--quiet", "--resume",
                         "--seeds", "2"])
    assert code == 0, err
    # more seeds add replicates (how a long run is split by seed); the marker then says 3
    code, _, err = cli.run(["run", str(tiny), "--out", str(out), "--quiet", "--resume",
                         "--seeds", "3"])
    assert code == 0, err
    assert json.loads((out / "summary.json").read_text())["seeds"] == 3
    assert (out / "a" / "seed-2").is_dir()
    marker = json.loads((out / ".fedsparse-run").read_text())
    assert marker["seeds"] == 3 and marker["attempts"] == 3
    cli.refused(["run", str(tiny), "--out", str(out), "--quiet", "--resume", "--seeds", "2"],
             "seeds 3 there, 2 now")


def test_resume_takes_the_config_by_content_not_by_file_name(tiny, tmp_path, cli):
    out = tmp_path / "o"
    assert cli.run(["run", str(tiny), "--out", str(out), "--quiet"])[0] == 0
    # the run folder's own resolved config.toml is the same experiment
    code, _, err = cli.run(["run", str(out / "config.toml"), "--out", str(out), "--quiet",
                         "--resume", "--rounds", "5"])
    assert code == 0, err
    # with --seeds 1 a run writes seed folders and a mean: not the run without --seeds
    cli.refused(["run", str(tiny), "--out", str(out), "--quiet", "--resume", "--seeds", "1"],
             "seeds none there, 1 now")


def test_seeds_1_on_a_run_without_seeds_says_why_and_what_to_type(tiny, tmp_path, cli):
    """Without --seeds each run's files lie in its folder; with --seeds 1 they go to
    seed-0/ and a mean beside it (the trees differ): --resume refuses to mix the two,
    says so, and gives the command that continues the run as it was started."""
    out = tmp_path / "o"
    assert cli.run(["run", str(tiny), "--out", str(out), "--quiet"])[0] == 0
    assert (out / "a" / "checkpoint.pt").is_file()
    err = cli.refused(["run", str(tiny), "--out", str(out), "--quiet", "--resume", "--seeds",
                       "1"], "started without --seeds (seeds none there, 1 now)",
                      f"({out.as_posix()}/a/checkpoint.pt)", "--seeds 1 included",
                      f"{out.as_posix()}/a/seed-0/", "another layout",
                      "Continue them as they were started, without --seeds:")
    typed = err.split(":\n  ", 1)[1].splitlines()[0]
    assert typed == f"fedsparse run {tiny} --out {out} --quiet --resume"
    code, _, err = cli.run(typed.split()[1:])  # and that command continues it
    assert code == 0, err
    # the other way round: a run with --seeds 1 is continued with --seeds 1
    seeded = tmp_path / "s"
    assert cli.run(["run", str(tiny), "--out", str(seeded), "--quiet", "--seeds", "1"])[0] == 0
    assert (seeded / "a" / "seed-0" / "checkpoint.pt").is_file()
    err = cli.refused(["run", str(tiny), "--out", str(seeded), "--quiet", "--resume"],
                      "started with --seeds 1 (seeds 1 there, none now)", "another layout")
    assert err.split(":\n  ", 1)[1].splitlines()[0] == \
        f"fedsparse run {tiny} --out {seeded} --quiet --seeds 1 --resume"


def test_a_marker_without_an_identity_is_left_as_it_is(tiny, tmp_path, cli):
    """A folder of an earlier fedsparse (no identity in its marker) resumes as before, and
    a refused resume does not stamp its own identity into it."""
    out = tmp_path / "o"
    assert cli.run(["run", str(tiny), "--out", str(out), "--quiet"])[0] == 0
    marker = out / ".fedsparse-run"
    old = {k: v for k, v in json.loads(marker.read_text()).items()
           if k not in ("experiment", "seeds", "quick")}
    marker.write_text(json.dumps(old))
    other = tmp_path / "other.toml"
    other.write_text(tiny.read_text().replace("dim = 30", "dim = 40"))
    cli.refused(["run", str(other), "--out", str(out), "--quiet", "--resume"], "another run")
    assert "experiment" not in json.loads(marker.read_text())
    code, _, err = cli.run(["run", str(tiny), "--out", str(out), "--quiet", "--resume"])
    assert code == 0, err


def test_resume_of_a_toml_run_as_a_python_experiment_is_refused(tiny, tmp_path, cli):
    out = tmp_path / "m"
    assert cli.run(["run", str(tiny), "--out", str(out), "--quiet"])[0] == 0
    before = sorted(p.name for p in out.iterdir())
    cli.refused(["run", "fig6-libsvm", "--quick", "--out", str(out), "--resume"],
             f"experiment a TOML config ({tiny.resolve()}) there, 'fig6-libsvm' now")
    assert sorted(p.name for p in out.iterdir()) == before


def test_a_toml_run_folder_records_the_config_it_was_started_from(tiny, tmp_path, cli):
    """Its file (resolved) or name and the SHA-256 of its bytes, beside the "a TOML config"
    --resume compares: a renamed or annotated copy still continues the runs, and so
    does a folder written before the file was recorded."""
    import hashlib

    out = tmp_path / "o"
    assert cli.run(["run", str(tiny), "--out", str(out), "--quiet"])[0] == 0
    marker = out / ".fedsparse-run"
    started = {"experiment": "a TOML config", "config": str(tiny.resolve()),
               "config_sha256": hashlib.sha256(tiny.read_bytes()).hexdigest()}
    assert started.items() <= json.loads(marker.read_text()).items()
    copy = tmp_path / "copy.toml"
    copy.write_bytes(tiny.read_bytes() + b"# a note\n")
    code, _, err = cli.run(["run", str(copy), "--out", str(out), "--quiet", "--resume",
                            "--rounds", "4"])
    assert code == 0, err
    assert started.items() <= json.loads(marker.read_text()).items()  # where it started
    earlier = {k: v for k, v in json.loads(marker.read_text()).items()
               if k not in ("config", "config_sha256")}
    marker.write_text(json.dumps(earlier))
    code, _, err = cli.run(["run", str(tiny), "--out", str(out), "--quiet", "--resume",
                            "--rounds", "5"])
    assert code == 0, err
    named = tmp_path / "n"
    assert cli.run(["run", "fedht-default", "--rounds", "1", "--out", str(named),
                    "--quiet"])[0] == 0
    assert json.loads((named / ".fedsparse-run").read_text())["config"] == "fedht-default"


# ---------------------------------------------------------------- checks before any run

def test_a_channel_that_does_not_fit_the_data_is_refused_before_the_first_run(tiny, tmp_path, cli):
    out = tmp_path / "c"
    cli.refused(["run", str(tiny), "--out", str(out), "--quiet", "--set",
              'B:channel={kind="bernoulli", probability=[0.5, 0.5]}'],
             "run 'B': channel: probability=", "(4)")
    assert not out.exists()  # run A never started
    cli.refused(["run", str(tiny), "--out", str(out), "--quiet", "--set",
              'B:channel={kind="scheduled", delivered=[[true, true, true, true]]}'],
             "run 'B': channel: delivered='1 rows'", "3 rounds")
    assert not out.exists()


def test_the_last_replicate_seed_is_checked_before_the_first_runs(tiny, tmp_path, cli):
    out = tmp_path / "s"
    cli.refused(["run", str(tiny), "--out", str(out), "--quiet", "--seeds", "2", "--set",
              "seed=9223372036854775807"], "seed + seeds - 1=9223372036854775808")
    assert not out.exists()


def test_a_diagnostic_no_run_records_cannot_be_plotted(tiny, tmp_path, cli):
    config = tmp_path / "plot.toml"
    config.write_text(tiny.read_text() + '[plot]\ny = ["compensated"]\n')
    cli.refused(["run", str(config), "--out", str(tmp_path / "p"), "--quiet"],
             "plot.y='compensated'", "no run records it")


def test_a_claim_on_a_misspelt_panel_is_refused(tiny, tmp_path, cli):
    config = tmp_path / "claims.toml"
    config.write_text(tiny.read_text().replace('label = "A"', 'label = "A"\npanel = "Simulation I"')
                      .replace('label = "B"', 'label = "B"\npanel = "Simulation I"')
                      + '[[claims]]\nkind = "reaches"\ntext = "A reaches B"\nrun = "A"\n'
                      'reference = "B"\nreference_round = 3\nwithin = 3\n'
                      'panel = "Simulaton I"\n')
    cli.refused(["run", str(config), "--out", str(tmp_path / "o"), "--quiet"],
             "claims[0].panel='Simulaton I'", "'Simulation I'")


def test_only_leaves_out_the_claims_of_panels_it_leaves_out(tmp_path, cli):
    runs = [f"Simulation I (regression)/{label}"
            for label in ("Fed-HT", "FedIter-HT", "Distributed-IHT")]
    code, text, err = cli.run(["run", "fedht-fig3", "--out", str(tmp_path / "o"), "--quiet",
                            "--rounds", "1", *[a for r in runs for a in ("--only", r)]])
    assert code == 0, err
    assert "are not tested here" in text


def test_flower_values_are_checked_where_the_config_is_read(tiny, tmp_path, cli):
    cli.refused(["run", str(tiny), "--out", str(tmp_path / "o"), "--quiet", "--set",
              "flower.round_timeout=-5"], "flower.round_timeout=-5", "positive")
    cli.refused(["run", str(tiny), "--out", str(tmp_path / "o"), "--quiet", "--set",
              "flower.out_dir=3"], "flower.out_dir=3", "string")


def test_band_needs_two_seeds(tiny, tmp_path, cli):
    cli.refused(["run", str(tiny), "--out", str(tmp_path / "o"), "--seeds", "1", "--band",
              "ci95"], "--band ci95", "N >= 2")


# ---------------------------------------------------------------- sweep and tune

def test_a_field_given_twice_is_refused(tiny, tmp_path, cli):
    cli.refused(["sweep", str(tiny), "--out", str(tmp_path / "s"), "--rounds", "2",
              "--grid", "algorithm.sparsity=[2, 3]", "--grid", "algorithm.sparsity=[4]"],
             "--grid algorithm.sparsity is given twice")
    cli.refused(["tune", str(tiny), "--out", str(tmp_path / "t"), "--rounds", "2", "--trials",
              "2", "--param", "algorithm.sparsity=int(2,5)", "--param",
              "algorithm.sparsity=int(6,8)"], "--param algorithm.sparsity is given twice")


def test_a_searched_field_that_is_also_fixed_is_refused(tiny, tmp_path, cli):
    cli.refused(["sweep", str(tiny), "--out", str(tmp_path / "s"), "--rounds", "3",
                 "--grid", "rounds=[2, 5]"],
                "--grid rounds and --rounds both give rounds", "drop one")
    cli.refused(["sweep", str(tiny), "--out", str(tmp_path / "s"), "--set",
                 "algorithm.sparsity=2", "--grid", "algorithm.sparsity=[3, 4]"],
                "--grid algorithm.sparsity and --set algorithm.sparsity both give")
    cli.refused(["tune", str(tiny), "--out", str(tmp_path / "t"), "--rounds", "2",
                 "--param", "rounds=int(2,5)"], "--param rounds and --rounds both give")
    assert not (tmp_path / "s").exists() and not (tmp_path / "t").exists()


def test_a_sweep_where_every_point_diverged_names_no_winner(tiny, tmp_path, cli):
    out = tmp_path / "s"
    code, text, err = cli.run(["sweep", str(tiny), "--out", str(out), "--rounds", "2",
                            "--grid", "algorithm.step_size=[1e30, 1e35]"])
    assert code == 0, err
    assert "there is no winner" in text and "reruns the winners" not in text
    assert not (out / "tuned.toml").exists()
    assert all(b["params"] is None for b in json.loads((out / "best.json").read_text())
               .values())


# ---------------------------------------------------------------- report

def _damage(folder: Path, how: str) -> None:
    if how == "bad json":
        (folder / "summary.json").write_text("{bad")
    elif how == "list":
        (folder / "summary.json").write_text("[]")
    elif how == "bad toml":
        (folder / "config.toml").write_text("x = [")
    elif how == "bad history":
        next(folder.rglob("history.jsonl")).write_text("{nope\n")
    elif how == "page folder":
        (folder / "report.html").mkdir()


@pytest.mark.parametrize("how, expected", [
    ("bad json", "summary.json: not valid JSON"), ("list", "holds a JSON list"),
    ("bad toml", "config.toml: not valid TOML"), ("bad history", "line 1: not valid JSON"),
    ("page folder", "report.html is a folder, where the report writes its page")])
def test_report_names_the_damaged_file_and_still_writes_the_others(tiny, tmp_path, how,
                                                                   expected, cli):
    runs = tmp_path / "runs"
    for name in ("good", "bad"):
        assert cli.run(["run", str(tiny), "--out", str(runs / name), "--quiet"])[0] == 0
    _damage(runs / "bad", how)
    code, text, err = cli.run(["report", str(runs)])
    assert code == 2 and "Traceback" not in err
    assert expected in err and "no report for 1 folder(s)" in err
    assert (runs / "good" / "report.html").is_file()
    assert not (runs / "bad" / "report.html").is_file()


def test_a_damaged_manifest_is_named_as_damaged(tiny, tmp_path, cli):
    out = tmp_path / "o"
    assert cli.run(["run", str(tiny), "--out", str(out), "--quiet"])[0] == 0
    (out / ".fedsparse-manifest").write_text("garbage")
    cli.refused(["run", str(tiny), "--out", str(out), "--force"], "is damaged")
    assert (out / "summary.json").is_file()


def test_force_keeps_a_users_file_inside_a_run_folder_and_replaces_the_rest(tiny, tmp_path, cli):
    out = tmp_path / "f"
    assert cli.run(["run", str(tiny), "--out", str(out), "--quiet"])[0] == 0
    (out / "a" / "notes.txt").write_text("mine")
    code, text, err = cli.run(["run", str(tiny), "--out", str(out), "--quiet", "--force"])
    assert code == 0, err
    assert (out / "a" / "notes.txt").read_text() == "mine"
    assert (out / "a" / "checkpoint.pt").is_file() and "notes.txt" in text + err
    code, _, err = cli.run(["run", str(tiny), "--out", str(out), "--quiet", "--force"])
    assert code == 0, err  # and again


@pytest.mark.parametrize("marker, summary, expected", [
    ({"status": "done", "experiment": "fedmac-fig3"}, {}, "a run of 'fedmac-fig3'"),
    ({"status": "done", "quick": True}, {}, "--quick run"),
    ({"status": "done"}, {"quick": True}, "--quick run"),
    ({"status": "interrupted"}, {}, "'interrupted', not finished"),
])
def test_results_pages_collect_takes_only_a_finished_full_run_of_that_experiment(
        tmp_path, marker, summary, expected, capsys):
    from fedsparse.report import results_pages

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / ".fedsparse-run").write_text(json.dumps(marker))
    (folder / "summary.json").write_text(json.dumps({"rounds": 800, "seeds": 2, **summary}))
    assert results_pages.main(["collect", "fedmac-fig2", str(folder)]) == 2
    assert expected in capsys.readouterr().err
    assert results_pages.main(["collect", "fedmac-fig2", str(tmp_path / "none")]) == 2
    assert "no summary.json" in capsys.readouterr().err


def test_wandb_over_a_folder_it_wrote_resumes_and_is_forced(tiny, tmp_path, cli,
                                                            monkeypatch):
    """W&B's links to its latest run, which it re-points by removing them, are not made:
    the output guard refused that on --resume and --force (and so did --log wandb)."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "w"
    argv = ["run", str(tiny), "--out", str(out), "--quiet", "--log", "wandb"]
    ids = []
    for flag in ((), ("--resume",), ("--force",)):
        code, _, err = cli.run([*argv, *flag])
        assert code == 0, (flag, err)
        (out / "keep.txt").write_text("x")  # a file of the user's: kept
        assert not (out / "wandb" / "latest-run").exists()
        ids.append({p.name.rpartition("-")[2] for p in (out / "wandb").glob("offline-run-*")
                    if any(p.glob("run-*.wandb"))})
    assert ids[0] and ids[1] == ids[0]  # --resume continues the W&B runs
    assert ids[2] - ids[0]  # --force starts new ones
    assert (out / "keep.txt").read_text() == "x"


def test_relative_file_paths_are_saved_absolute_so_resume_works_from_anywhere(
        tmp_path, monkeypatch, cli):
    """A relative ``data.path`` and dictionary ``path`` are read against the working
    directory; the saved config names the same files, so the run folder's config resumes
    from another directory."""
    import numpy as np

    from fedsparse.experiments.config import load_config

    work = tmp_path / "work"
    work.mkdir()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 6))
    lines = [f"{x[:3].sum():.4f} " + " ".join(f"{j + 1}:{v:.4f}" for j, v in enumerate(x))
             for x in X]
    (work / "d.svm").write_text("\n".join(lines) + "\n")
    np.save(work / "D.npy", np.eye(6))
    (work / "e.toml").write_text(
        '[defaults]\nrounds = 2\n'
        '[defaults.data]\nkind = "libsvm_file"\npath = "d.svm"\npartition = "iid"\n'
        'num_clients = 2\n[defaults.problem]\nkind = "least_squares"\n'
        '[defaults.algorithm]\nkind = "fed_iter_ht"\nsparsity = 3\nstep_size = 0.01\n'
        'dictionary = {kind = "file", path = "D.npy"}\n[[runs]]\nlabel = "a"\n')
    monkeypatch.chdir(work)
    code, _, err = cli.run(["run", "e.toml", "--out", "out", "--quiet"])
    assert code == 0, err
    saved = load_config(work / "out" / "config.toml")["runs"][0]
    assert saved["data"]["path"] == str(work / "d.svm")
    assert saved["algorithm"]["dictionary"]["path"] == str(work / "D.npy")
    monkeypatch.chdir(tmp_path)
    code, _, err = cli.run(["run", "work/out/config.toml", "--out", "work/out", "--quiet",
                            "--resume", "--rounds", "3"])
    assert code == 0, err
    assert json.loads((work / "out" / "summary.json").read_text())["runs"][0]["rounds"] == 3


def test_labels_that_do_not_fit_a_later_runs_loss_are_refused_before_any_run(
        tiny, tmp_path, cli):
    out = tmp_path / "o"
    cli.refused(["run", str(tiny), "--out", str(out), "--quiet", "--set",
                 'B:problem.kind="logistic"'], "run 'B'", "labels", "are invalid for logistic")
    assert not out.exists()  # run A did not start either
