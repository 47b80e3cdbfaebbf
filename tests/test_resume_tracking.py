"""A run resumed from its checkpoint continues its tracker runs (MLflow, TensorBoard, W&B).

Each test interrupts a run after a checkpoint (an exception raised from the callback, or
Ctrl-C on the command line), resumes it, and reads the trackers back with their own
readers: one MLflow run (one TensorBoard folder, one W&B run id whose offline folders
hold disjoint steps) holding every round once, with the values of an uninterrupted run;
W&B's online resume, which needs its server, with a stand-in ``wandb`` module. Each
test skips where its tracker (an optional extra) is not installed; nothing touches a
network.
"""

import importlib.machinery
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

import fedsparse as fs
from fedsparse.loggers import split_record

ROUNDS, EVERY, STOP = 8, 3, 5  # checkpoints at rounds 3 and 6; stopped at round 5
NAME = "fed_iter_ht-seed0"  # fs.simulate's name for the run in the trackers
#: Record fields that measure time: the one thing a recomputed round does not repeat.
TIMES = ("seconds", "elapsed")


class Stop(Exception):
    """The interruption."""


def _tiny_run():
    data = fs.data.shifted_gaussian(num_clients=4, samples_per_client=20, dim=30,
                                    sparsity=3, seed=0, dtype=torch.float64)
    algo = fs.algorithms.fed_iter_ht(sparsity=3, step_size=0.01, local_steps=2)
    return algo, fs.problems.least_squares(), data


def _simulate(loggers, **kwargs):
    algo, problem, data = _tiny_run()
    return fs.simulate(algo, problem, data, rounds=kwargs.pop("rounds", ROUNDS), seed=0,
                       loggers=loggers, **kwargs)


def _interrupted(loggers, ckpt: Path, at: int = STOP, resume: bool = False) -> list[dict]:
    """Run with checkpoints until the callback raises at round ``at``; the records seen."""
    seen = []

    def stop(record, state):
        seen.append(record)
        if record["round"] == at:
            raise Stop

    with pytest.raises(Stop):
        _simulate(loggers, checkpoint=ckpt, checkpoint_every=EVERY, callback=stop,
                  resume=resume)
    return seen


def _no_time(records):
    return [{k: v for k, v in r.items() if k not in TIMES} for r in records]


def _round_metrics(history) -> dict[str, dict[int, float]]:
    """{metric: {step: value}} of the records an uninterrupted run logs each round."""
    out: dict[str, dict[int, float]] = {}
    for record in [history.initial, *history.records]:
        metrics, _ = split_record(record)
        for key, value in metrics.items():
            out.setdefault(key, {})[int(record["round"])] = value
    return out


# --- MLflow -----------------------------------------------------------------------------


def _mlflow(store: Path, experiment: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    return client, client.search_runs([exp.experiment_id])


def _check_mlflow_run(client, run, full) -> None:
    """``run`` holds each round of ``full`` once, with its values (timings aside)."""
    assert run.info.status == "FINISHED"
    assert "stopped" not in run.data.tags
    for key, expected in _round_metrics(full).items():
        logged = client.get_metric_history(run.info.run_id, key)
        steps = [m.step for m in logged]
        assert sorted(steps) == sorted(expected), key  # each step once, none missing
        if key not in TIMES:
            assert {m.step: m.value for m in logged} == expected, key  # doubles, exact
    final = {k: v for k, v in run.data.metrics.items()
             if k.startswith("final/") and k[6:] not in TIMES}
    assert final == {f"final/{k}": v for k, v in split_record(full.records[-1])[0].items()
                     if k not in TIMES}


@pytest.fixture
def mlflow_env(monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def test_mlflow_resumed_run_continues_its_run_with_each_round_once(tmp_path, mlflow_env):
    store, ckpt = tmp_path / "store", tmp_path / "run.pt"
    full = _simulate(fs.loggers.MLflowLogger(store_dir=store, experiment="full"))
    seen = _interrupted(fs.loggers.MLflowLogger(store_dir=store, experiment="e"), ckpt)
    client, (stopped,) = _mlflow(store, "e")
    assert stopped.info.status == "FAILED" and "stopped" in stopped.data.tags

    resumed = _simulate(fs.loggers.MLflowLogger(store_dir=store, experiment="e"),
                        checkpoint=ckpt, checkpoint_every=EVERY, resume=True)
    # the rounds after the checkpoint are recomputed exactly as the interrupted attempt
    # computed them (which is why the run's values for them are kept, not logged again)
    assert _no_time(resumed.records[:STOP]) == _no_time(seen)
    assert _no_time(resumed.records) == _no_time(full.records)
    client, (run,) = _mlflow(store, "e")  # one run: the interrupted one, continued
    assert run.info.run_id == stopped.info.run_id and run.info.run_name == NAME
    _check_mlflow_run(client, run, full)
    _, (reference,) = _mlflow(store, "full")
    assert run.data.params == reference.data.params
    local = client.download_artifacts(run.info.run_id, "model.npy", str(tmp_path))
    np.testing.assert_array_equal(np.load(local), full.model.numpy())

    # a new run of the same name is a new MLflow run; so is a resume without a checkpoint
    _simulate(fs.loggers.MLflowLogger(store_dir=store, experiment="e"), rounds=2)
    _simulate(fs.loggers.MLflowLogger(store_dir=store, experiment="e"), rounds=2,
              checkpoint=tmp_path / "none.pt", resume=True)
    _, runs = _mlflow(store, "e")
    assert len(runs) == 3 and all(r.info.status == "FINISHED" for r in runs)


def test_mlflow_run_deleted_from_the_store_gets_a_new_run_with_every_round(tmp_path,
                                                                           mlflow_env):
    full = _simulate(None)
    store, ckpt = tmp_path / "store", tmp_path / "run.pt"
    _interrupted(fs.loggers.MLflowLogger(store_dir=store, experiment="e"), ckpt)
    client, (stopped,) = _mlflow(store, "e")
    client.delete_run(stopped.info.run_id)
    with pytest.warns(RuntimeWarning, match=f"MLflow run '{stopped.info.run_id}', which "
                      f"'{NAME}' logged to before it stopped, is not in experiment 'e'"):
        _simulate(fs.loggers.MLflowLogger(store_dir=store, experiment="e"),
                  checkpoint=ckpt, checkpoint_every=EVERY, resume=True)
    client, (run,) = _mlflow(store, "e")
    assert run.info.run_id != stopped.info.run_id
    _check_mlflow_run(client, run, full)  # rounds 0..3 from the checkpoint, then the rest


# --- TensorBoard --------------------------------------------------------------------------


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value)]} as TensorBoard's EventAccumulator reads the folder."""
    module = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    ea = module.EventAccumulator(str(folder), size_guidance={"scalars": 0})
    ea.Reload()
    return {tag: [(e.step, e.value) for e in ea.Scalars(tag)] for tag in ea.Tags()["scalars"]}


def _tensor_steps(folder: Path) -> dict[str, list[int]]:
    """{tag: steps} of everything in the folder (text, HParams, scalars) as TensorBoard's
    reader of plugin data (``--load_fast=false``) reads it."""
    from tensorboard.backend.event_processing import plugin_event_accumulator

    ea = plugin_event_accumulator.EventAccumulator(str(folder), size_guidance={"tensors": 0})
    ea.Reload()
    return {tag: [e.step for e in ea.Tensors(tag)] for tag in ea.Tags()["tensors"]}


def _check_tensorboard_folder(folder: Path, full) -> None:
    """``folder`` holds each round of ``full`` once, with its values (timings aside)."""
    scalars = _scalars(folder)
    for key, expected in _round_metrics(full).items():
        steps = [s for s, _ in scalars[key]]
        assert steps == sorted(expected), key  # each step once, in order, none missing
        if key not in TIMES:
            np.testing.assert_allclose([v for _, v in scalars[key]],
                                       [expected[s] for s in steps], rtol=1e-6,
                                       err_msg=key)  # TensorBoard keeps float32
    assert [s for s, _ in scalars["final/objective"]] == [ROUNDS]
    assert scalars["final/objective"][0][1] == pytest.approx(full.final("objective"),
                                                             rel=1e-6)
    tensors = _tensor_steps(folder)
    assert not tensors.get("tags/stopped/text_summary")  # discarded with its attempt
    assert tensors["params/text_summary"] == [0]  # once
    for tag in ("_hparams_/session_start_info", "_hparams_/session_end_info",
                "model/nonzero_weights", "final/objective"):
        assert tensors[tag] == [ROUNDS], tag
    for tag, steps in tensors.items():
        assert len(steps) == len(set(steps)), tag


def test_tensorboard_resumed_run_continues_its_folder_with_each_round_once(tmp_path):
    pytest.importorskip("tensorboard")
    full = _simulate(fs.loggers.TensorBoardLogger(tmp_path / "full"))
    log_dir, ckpt = tmp_path / "tb", tmp_path / "run.pt"
    _interrupted(fs.loggers.TensorBoardLogger(log_dir), ckpt)
    _simulate(fs.loggers.TensorBoardLogger(log_dir), checkpoint=ckpt, checkpoint_every=EVERY,
              resume=True)
    assert [p.name for p in log_dir.iterdir()] == [NAME]  # not a second folder
    _check_tensorboard_folder(log_dir / NAME, full)
    np.testing.assert_array_equal(np.load(log_dir / NAME / "model.npy"), full.model.numpy())
    # the same after the uninterrupted run's reader: it is the same as the resumed one
    assert _scalars(log_dir / NAME)["objective"] == _scalars(tmp_path / "full" / NAME)[
        "objective"]

    # a new run of the same name gets a folder of its own; so does a resume without a
    # checkpoint
    _simulate(fs.loggers.TensorBoardLogger(log_dir), rounds=2)
    _simulate(fs.loggers.TensorBoardLogger(log_dir), rounds=2,
              checkpoint=tmp_path / "none.pt", resume=True)
    assert sorted(p.name for p in log_dir.iterdir()) == [NAME, f"{NAME}-2", f"{NAME}-3"]


def test_tensorboard_folder_gone_gets_a_new_folder_with_every_round(tmp_path):
    pytest.importorskip("tensorboard")
    import shutil

    full = _simulate(None)
    log_dir, ckpt = tmp_path / "tb", tmp_path / "run.pt"
    _interrupted(fs.loggers.TensorBoardLogger(log_dir), ckpt)
    shutil.rmtree(log_dir / NAME)
    with pytest.warns(RuntimeWarning, match=f"the TensorBoard folder '{NAME}' that "
                      f"'{NAME}' logged to before it stopped is not in"):
        _simulate(fs.loggers.TensorBoardLogger(log_dir), checkpoint=ckpt,
                  checkpoint_every=EVERY, resume=True)
    assert [p.name for p in log_dir.iterdir()] == [NAME]
    _check_tensorboard_folder(log_dir / NAME, full)


def test_a_resume_without_the_trackers_leaves_their_runs_to_a_later_resume(tmp_path,
                                                                            mlflow_env):
    pytest.importorskip("tensorboard")
    full = _simulate(None)
    store, log_dir, ckpt = tmp_path / "store", tmp_path / "tb", tmp_path / "run.pt"

    def loggers():
        return [fs.loggers.MLflowLogger(store_dir=store, experiment="e"),
                fs.loggers.TensorBoardLogger(log_dir)]

    _interrupted(loggers(), ckpt)  # logged up to round 5, checkpoint at round 3
    _interrupted(None, ckpt, at=7, resume=True)  # rounds 4..7 not logged, checkpoint at 6
    _simulate(loggers(), checkpoint=ckpt, checkpoint_every=EVERY, resume=True)
    client, (run,) = _mlflow(store, "e")
    _check_mlflow_run(client, run, full)  # round 6 from the checkpoint, then 7 and 8
    assert [p.name for p in log_dir.iterdir()] == [NAME]
    _check_tensorboard_folder(log_dir / NAME, full)  # rewritten from round 5 on


# --- Weights & Biases ---------------------------------------------------------------------


@pytest.fixture
def wandb_offline(monkeypatch, wandb_records):
    """W&B offline and quiet: the offline folders' reader (conftest's wandb_records)."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    return wandb_records


def _wandb_folders(root: Path, wandb_records) -> list[dict]:
    """Each offline run folder under ``root/wandb``, oldest first: its run id, exit code,
    {metric: {step: value}} and the summary updates and removals."""
    out = []
    for folder in sorted((root / "wandb").glob("offline-run-*")):
        found = wandb_records.finished_records(folder)
        (run,) = wandb_records.of_kind(found, "run")
        metrics: dict[str, dict[int, float]] = {}
        for history in wandb_records.of_kind(found, "history"):
            values = wandb_records.items(history.item)
            step = values.pop("_step")
            for key, value in values.items():
                if not key.startswith("_"):
                    assert step not in metrics.setdefault(key, {}), (key, step)  # once
                    metrics[key][step] = value
        summary, removed = {}, set()
        for update in wandb_records.of_kind(found, "summary"):
            summary.update(wandb_records.items(update.update))
            removed |= {"/".join(i.nested_key) or i.key for i in update.remove}
        (exit_record,) = wandb_records.of_kind(found, "exit")
        out.append({"folder": folder, "run_id": run.run_id, "name": run.display_name,
                    "exit": exit_record.exit_code, "metrics": metrics, "summary": summary,
                    "removed": removed})
    return out


def _check_wandb_steps(folders: list[dict], full) -> None:
    """Together, the folders hold each round of ``full`` once, with its values."""
    for key, expected in _round_metrics(full).items():
        steps = [s for f in folders for s in f["metrics"].get(key, {})]
        assert sorted(steps) == sorted(expected) and len(steps) == len(set(steps)), key
        if key not in TIMES:
            assert {s: v for f in folders for s, v in f["metrics"].get(key, {}).items()} \
                == expected, key


def test_wandb_offline_resumed_run_continues_its_run_with_each_round_once(tmp_path,
                                                                         wandb_offline):
    full = _simulate(None)
    root, ckpt = tmp_path / "w", tmp_path / "run.pt"
    _interrupted(fs.loggers.WandbLogger(root, experiment="e"), ckpt)
    _simulate(fs.loggers.WandbLogger(root, experiment="e"), checkpoint=ckpt,
              checkpoint_every=EVERY, resume=True)
    first, second = _wandb_folders(root, wandb_offline)
    # one W&B run: the resumed attempt's folder has the interrupted one's run id and
    # holds the rounds after those it logged (0..5), so that syncing both into the run
    # gives each round once
    assert first["run_id"] == second["run_id"] and second["name"] == NAME
    assert sorted(first["metrics"]["objective"]) == list(range(STOP + 1))
    assert sorted(second["metrics"]["objective"]) == list(range(STOP + 1, ROUNDS + 1))
    _check_wandb_steps([first, second], full)
    assert first["exit"] == 1 and "stopped" in first["summary"]
    assert second["exit"] == 0 and "stopped" in second["removed"]  # it went on
    assert second["summary"]["final/objective"] == full.final("objective")
    np.testing.assert_array_equal(np.load(second["folder"] / "files" / "model.npy"),
                                  full.model.numpy())
    assert not (root / "wandb" / "latest-run").exists()  # no links W&B would re-point

    # a new run of the same name is a new W&B run; so is a resume without a checkpoint
    _simulate(fs.loggers.WandbLogger(root, experiment="e"), rounds=2)
    _simulate(fs.loggers.WandbLogger(root, experiment="e"), rounds=2,
              checkpoint=tmp_path / "none.pt", resume=True)
    assert len({f["run_id"] for f in _wandb_folders(root, wandb_offline)}) == 3


def test_wandb_a_resume_without_it_leaves_its_run_to_a_later_resume(tmp_path,
                                                                      wandb_offline):
    full = _simulate(None)
    root, ckpt = tmp_path / "w", tmp_path / "run.pt"
    _interrupted(fs.loggers.WandbLogger(root, experiment="e"), ckpt)  # 0..5, ckpt at 3
    _interrupted(None, ckpt, at=7, resume=True)  # rounds 4..7 not logged, checkpoint at 6
    _simulate(fs.loggers.WandbLogger(root, experiment="e"), checkpoint=ckpt,
              checkpoint_every=EVERY, resume=True)
    first, second = _wandb_folders(root, wandb_offline)
    assert first["run_id"] == second["run_id"]
    assert sorted(second["metrics"]["objective"]) == list(range(STOP + 1, ROUNDS + 1))
    _check_wandb_steps([first, second], full)


def test_wandb_run_folder_gone_gets_a_new_run_with_every_round(tmp_path, wandb_offline):
    import shutil

    full = _simulate(None)
    root, ckpt = tmp_path / "w", tmp_path / "run.pt"
    _interrupted(fs.loggers.WandbLogger(root, experiment="e"), ckpt)
    (gone,) = _wandb_folders(root, wandb_offline)
    shutil.rmtree(gone["folder"])  # e.g. synced, then `wandb clean`
    with pytest.warns(RuntimeWarning, match=f"W&B run '{gone['run_id']}', which '{NAME}' "
                      "logged to before it stopped, has no folder in"):
        _simulate(fs.loggers.WandbLogger(root, experiment="e"), checkpoint=ckpt,
                  checkpoint_every=EVERY, resume=True)
    (run,) = _wandb_folders(root, wandb_offline)
    assert run["run_id"] != gone["run_id"]
    _check_wandb_steps([run], full)  # rounds 0..3 from the checkpoint, then the rest


class _FakeRun:
    """What WandbLogger uses of a W&B run, recording the calls."""

    def __init__(self, dir: Path, kwargs: dict, server_steps: int | None):
        self.id = kwargs.get("id") or "fresh123"
        self.dir = str(dir / "wandb" / f"run-20200101_000000-{self.id}" / "files")
        Path(self.dir).mkdir(parents=True, exist_ok=True)
        (Path(self.dir).parent / f"run-{self.id}.wandb").touch()
        self.resumed = server_steps is not None and "id" in kwargs
        self.starting_step = server_steps if self.resumed else 0
        self.logged: list[int] = []
        self.summary = _FakeSummary()

    def log(self, metrics, step):
        self.logged.append(step)

    def finish(self, exit_code=0):
        pass


class _FakeSummary(dict):
    removed: set

    def __delitem__(self, key):
        self.removed = {*getattr(self, "removed", set()), key}


@pytest.mark.parametrize("server_steps, expected", [
    (STOP + 1, list(range(STOP + 1, ROUNDS + 1))),  # the server holds 0..5: the rest
    (None, list(range(ROUNDS + 1))),  # the server lacks it: W&B starts it, every round
])
def test_wandb_online_resume_reopens_the_run_and_logs_what_the_server_lacks(
        tmp_path, monkeypatch, server_steps, expected):
    pytest.importorskip("wandb")
    inits, runs = [], []

    def init(**kwargs):
        inits.append(kwargs)
        runs.append(_FakeRun(Path(kwargs["dir"]), kwargs, server_steps))
        return runs[-1]

    fake = types.ModuleType("wandb")  # found by the extra's check, as the real one is
    fake.__spec__ = importlib.machinery.ModuleSpec("wandb", None)
    fake.init, fake.Settings = init, lambda **settings: settings
    monkeypatch.setitem(sys.modules, "wandb", fake)
    ckpt = tmp_path / "run.pt"
    _interrupted(fs.loggers.WandbLogger(tmp_path, mode="online"), ckpt)
    _simulate(fs.loggers.WandbLogger(tmp_path, mode="online"), checkpoint=ckpt,
              checkpoint_every=EVERY, resume=True)
    assert "id" not in inits[0]
    assert inits[1]["id"] == "fresh123" and inits[1]["resume"] == "allow"
    assert inits[1]["name"] == NAME and inits[1]["mode"] == "online"
    assert runs[1].logged == expected
    assert runs[1].summary.removed == {"stopped"}


# --- the command line ---------------------------------------------------------------------


def test_cli_resume_continues_the_mlflow_run_and_tensorboard_folder(tmp_path, cli,
                                                                   monkeypatch, tiny_toml):
    pytest.importorskip("mlflow")
    pytest.importorskip("tensorboard")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    from fedsparse.experiments import runner

    config, out = tmp_path / "tiny.toml", tmp_path / "out"
    config.write_text(tiny_toml(rounds=ROUNDS, checkpoint_every=EVERY, seed=0,
                                labels=("FedIter-HT",), algorithms=("fed_iter_ht",),
                                algorithm_per_run=True))
    argv = ["run", str(config), "--out", str(out), "--log", "mlflow", "--log",
            "tensorboard", "--quiet"]
    simulate = runner.simulate

    def interrupted(*args, **kwargs):  # Ctrl-C at round STOP
        def stop(record, state):
            if record["round"] == STOP:
                raise KeyboardInterrupt

        return simulate(*args, **kwargs, callback=stop)

    monkeypatch.setattr(runner, "simulate", interrupted)
    code, _, err = cli.run(argv)
    assert code == 130 and "--resume" in err, err
    monkeypatch.setattr(runner, "simulate", simulate)
    code, _, err = cli.run([*argv, "--resume"])
    assert code == 0, err

    (slug,) = [p.name for p in out.iterdir() if (p / "history.jsonl").exists()]
    records = [json.loads(line) for line in (out / slug / "history.jsonl").read_text()
               .splitlines()]
    assert [r["round"] for r in records] == list(range(ROUNDS + 1))  # round 0 included
    client, (run,) = _mlflow(out / "mlflow", "out")
    assert run.info.run_name == slug and run.info.status == "FINISHED"
    assert "stopped" not in run.data.tags
    logged = client.get_metric_history(run.info.run_id, "objective")
    assert sorted((m.step, m.value) for m in logged) == \
        [(r["round"], r["objective"]) for r in records]  # each round once
    assert [p.name for p in (out / "tensorboard").iterdir()] == [slug]
    scalars = _scalars(out / "tensorboard" / slug)
    assert [s for s, _ in scalars["objective"]] == [r["round"] for r in records]
    np.testing.assert_allclose([v for _, v in scalars["objective"]],
                               [r["objective"] for r in records], rtol=1e-6)


# --- a search's runs: sweep and tune -------------------------------------------------------
# A search's runs keep no checkpoint: a run stopped mid-run runs again from round 0 when
# the search continues, and continues the tracker runs its first attempt opened (kept in
# the search's finished.jsonl), as a run resumed from its checkpoint does.

SEARCH_ROUNDS, SEARCH_STOP = 6, 3  # the search's second run stopped at round 3


def _search(kind: str, config: dict, out: Path, loggers, resume: bool = False) -> dict:
    from fedsparse.experiments import sweep, tune

    if kind == "sweep":
        return sweep.run_sweep(config, {"algorithm.step_size": [0.01, 0.02]}, out=out,
                               loggers=loggers, resume=resume, log=lambda *_: None)
    return tune.run_tune(config, {"algorithm.step_size": "log(1e-3, 0.1)"}, trials=2,
                         out=out, loggers=loggers, resume=resume, log=lambda *_: None)


def _stopped_and_continued(kind: str, config: dict, out: Path, loggers, monkeypatch) -> str:
    """Run the search ``kind`` stopped (as Ctrl-C stops it) at round SEARCH_STOP of its
    second run, then continue it; the stopped run's name in the trackers."""
    from fedsparse.experiments import sweep, tune

    module = sweep if kind == "sweep" else tune
    execute_run, started = module.execute_run, []

    def stopping(run, out, **kwargs):
        started.append(run["slug"])
        if len(started) == 2:
            inner = kwargs.get("callback")

            def stop(record, state):
                if inner is not None:
                    inner(record, state)
                if record["round"] == SEARCH_STOP:
                    raise KeyboardInterrupt

            kwargs["callback"] = stop
        return execute_run(run, out, **kwargs)

    monkeypatch.setattr(module, "execute_run", stopping)
    with pytest.raises(KeyboardInterrupt):
        _search(kind, config, out, loggers)
    monkeypatch.setattr(module, "execute_run", execute_run)
    _search(kind, config, out, loggers, resume=True)
    return started[1]


@pytest.fixture
def search_config(tmp_path, tiny_toml):
    from fedsparse.experiments.config import load_config

    path = tmp_path / "tiny.toml"
    path.write_text(tiny_toml(rounds=SEARCH_ROUNDS))
    return load_config(path)


def _mlflow_runs(client, runs) -> dict[str, dict]:
    """{run name: {metric: {step: value}}} of an experiment's runs, each name once: the
    rounds' metrics (timings aside); the final values are MLflow's latest ones (an
    interrupted attempt's, logged at the round it stopped, are kept, as in any resume)."""
    out = {}
    for run in runs:
        assert run.info.run_name not in out, run.info.run_name  # one MLflow run a name
        assert run.info.status == "FINISHED" and "stopped" not in run.data.tags
        history = {}
        for key in run.data.metrics:
            logged = client.get_metric_history(run.info.run_id, key)
            steps = [m.step for m in logged]
            assert len(steps) == len(set(steps)), (run.info.run_name, key)  # each once
            if key not in TIMES and not key.startswith("final/") and key != "diverged":
                history[key] = {m.step: m.value for m in logged}
        history["final"] = {k: v for k, v in run.data.metrics.items()
                            if k.startswith("final/") and k[6:] not in TIMES}
        out[run.info.run_name] = history
    return out


@pytest.mark.parametrize("kind", ["sweep", "tune"])
def test_a_continued_search_continues_the_mlflow_run_of_a_run_stopped_mid_run(
        kind, search_config, tmp_path, mlflow_env, monkeypatch):
    if kind == "tune":
        pytest.importorskip("optuna")
    _search(kind, search_config, tmp_path / "whole", "mlflow")
    stopped = _stopped_and_continued(kind, search_config, tmp_path / "out", "mlflow",
                                     monkeypatch)
    logged = _mlflow_runs(*_mlflow(tmp_path / "out" / "mlflow", "out"))
    # one MLflow run for the stopped run (not a failed one and a second of its name),
    # holding each round once, with the values of a search never stopped
    assert logged == _mlflow_runs(*_mlflow(tmp_path / "whole" / "mlflow", "whole"))
    assert sorted(logged[stopped]["objective"]) == list(range(SEARCH_ROUNDS + 1))


def test_a_continued_sweep_continues_the_tensorboard_folder_of_a_run_stopped_mid_run(
        search_config, tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    _search("sweep", search_config, tmp_path / "whole", "tensorboard")
    stopped = _stopped_and_continued("sweep", search_config, tmp_path / "out",
                                     "tensorboard", monkeypatch)

    def folders(root: Path) -> list[str]:
        return sorted(p.parent.relative_to(root).as_posix()
                      for p in root.rglob("events.out.tfevents.*"))

    root, whole = tmp_path / "out" / "tensorboard", tmp_path / "whole" / "tensorboard"
    assert sorted(set(folders(root))) == sorted(set(folders(whole)))  # not a "-2" folder
    for name in set(folders(root)):
        scalars = _scalars(root / name)
        steps = [s for s, _ in scalars["objective"]]
        assert steps == list(range(SEARCH_ROUNDS + 1)), name  # each round once
        assert scalars["objective"] == _scalars(whole / name)["objective"], name
        assert not _tensor_steps(root / name).get("tags/stopped/text_summary"), name
    assert stopped in folders(root)


def test_a_continued_sweep_continues_the_wandb_run_of_a_run_stopped_mid_run(
        search_config, tmp_path, monkeypatch, wandb_offline):
    stopped = _stopped_and_continued("sweep", search_config, tmp_path / "out", "wandb",
                                     monkeypatch)
    folders = _wandb_folders(tmp_path / "out", wandb_offline)
    by_name: dict[str, set] = {}
    for folder in folders:
        by_name.setdefault(folder["name"], set()).add(folder["run_id"])
    assert all(len(ids) == 1 for ids in by_name.values()), by_name  # one run a name
    first, second = [f for f in folders if f["name"] == stopped]
    # the continued attempt logs only the rounds the stopped one had not logged
    assert sorted(first["metrics"]["objective"]) == list(range(SEARCH_STOP + 1))
    assert sorted(second["metrics"]["objective"]) == list(range(SEARCH_STOP + 1,
                                                                 SEARCH_ROUNDS + 1))
    assert second["exit"] == 0 and "stopped" in second["removed"]
