"""Experiment trackers: what a run logs is read back with each tracker's own reader.

TensorBoard through its EventAccumulator, MLflow through its client on a local store
(SQLite, and the file store), W&B from the offline run's own record file. Each test
skips where its tracker (an optional extra) is not installed; nothing touches a network.
"""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import fedsparse as fs
from fedsparse.cli import main
from fedsparse.loggers import Logger, Tracking, flatten, resolve_loggers, split_record


@pytest.fixture
def tiny(tmp_path, tiny_toml):
    path = tmp_path / "tiny.toml"
    path.write_text(tiny_toml(rounds=4, seed=0))
    return path


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


def _summary_rows(out: Path) -> dict:
    return {r["dir"]: r for r in json.loads((out / "summary.json").read_text())["runs"]}


class Recorder(Logger):
    """A tracker that keeps what it is given (no extra needed)."""

    kind = "recorder"

    def __init__(self, fail_at: str | None = None):
        super().__init__("test")
        self.calls: list[tuple] = []
        self.fail_at = fail_at

    def _note(self, *call):
        if call[0] == self.fail_at:
            raise OSError("disk full")
        self.calls.append(call)

    def start(self, name, params):
        self._note("start", name, params)

    def log_metrics(self, metrics, step):
        self._note("metrics", step, metrics)

    def log_tags(self, tags):
        self._note("tags", tags)

    def log_summary(self, summary, step):
        self._note("summary", step, summary)

    def log_model(self, model):
        self._note("model", model)

    def finish(self, failed=False):
        self._note("finish", failed)


def _tiny_run():
    data = fs.data.shifted_gaussian(num_clients=4, samples_per_client=20, dim=30,
                                    sparsity=3, seed=0, dtype=torch.float64)
    algo = fs.algorithms.fed_iter_ht(sparsity=3, step_size=0.01, local_steps=2)
    return algo, fs.problems.least_squares(), data


# --- the shared rules (no tracker needed) ---------------------------------------------


def test_record_fields_split_into_metrics_and_device_tags():
    metrics, tags = split_record({"round": 3, "objective": 1.5, "bytes_up": 10,
                                  "delivered_clients": [0, 2], "accuracy": None,
                                  "compensated": True, "device": "cuda:0",
                                  "gpu": "NVIDIA H100", "other_text": "x"})
    assert metrics == {"objective": 1.5, "bytes_up": 10.0, "compensated": 1.0}
    assert tags == {"device": "cuda:0", "gpu": "NVIDIA H100"}


def test_flatten_params_to_dotted_names():
    flat = flatten({"algorithm": {"kind": "fed_ht", "step_size": 0.1}, "seed": 0,
                    "channel": None, "hidden": [100, 10]})
    assert flat == {"algorithm.kind": "fed_ht", "algorithm.step_size": 0.1, "seed": 0,
                    "channel": "None", "hidden": "[100, 10]"}


def test_simulate_logs_every_record_params_and_final_model():
    algo, problem, data = _tiny_run()
    rec = Recorder()
    history = fs.simulate(algo, problem, data, rounds=4, seed=0, loggers=[rec])
    kinds = [c[0] for c in rec.calls]
    assert kinds[0] == "start" and kinds[-1] == "finish" and rec.calls[-1][1] is False
    _, name, params = rec.calls[0]
    assert name == "fed_iter_ht-seed0"
    assert params["algorithm.step_size"] == 0.01 and params["algorithm.local_steps"] == 2
    assert params["seed"] == 0 and params["rounds"] == 4 and params["device"] == "cpu"
    steps = [(c[1], c[2]["objective"]) for c in rec.calls if c[0] == "metrics"]
    expected = [(0, history.initial["objective"])] + \
        [(r["round"], r["objective"]) for r in history.records]
    assert steps == expected
    (summary,) = [c for c in rec.calls if c[0] == "summary"]
    assert summary[1] == 4 and summary[2]["final/objective"] == history.final("objective")
    assert summary[2]["diverged"] == 0.0
    (model,) = [c[1] for c in rec.calls if c[0] == "model"]
    np.testing.assert_array_equal(model, history.model.numpy())
    assert ("tags", {"device": "cpu"}) in rec.calls


def test_a_diverged_run_is_logged_as_diverged_with_its_last_finite_model():
    algo, problem, data = _tiny_run()
    algo = fs.algorithms.fed_iter_ht(sparsity=3, step_size=1e3, local_steps=2)
    rec = Recorder()
    with pytest.raises(fs.DivergenceError) as err:
        fs.simulate(algo, problem, data, rounds=200, seed=0, loggers=[rec])
    (summary,) = [c[2] for c in rec.calls if c[0] == "summary"]
    assert summary["diverged"] == 1.0 and summary["diverged_round"] == err.value.round
    assert rec.calls[-1] == ("finish", False)  # diverged, not crashed
    assert any(c[0] == "tags" and "stopped" in c[1] for c in rec.calls)


def test_a_failing_tracker_is_dropped_with_a_warning_and_the_run_goes_on():
    algo, problem, data = _tiny_run()
    broken, fine = Recorder(fail_at="metrics"), Recorder()
    with pytest.warns(RuntimeWarning, match="recorder logging .* failed"):
        history = fs.simulate(algo, problem, data, rounds=3, seed=0, loggers=[broken, fine])
    assert len(history.records) == 3
    assert ("finish", True) in broken.calls or broken.calls[-1][0] != "metrics"
    assert sum(c[0] == "metrics" for c in fine.calls) == 4  # round 0 + 3 rounds


def test_a_user_callback_still_runs_beside_the_loggers():
    algo, problem, data = _tiny_run()
    seen = []
    fs.simulate(algo, problem, data, rounds=3, seed=0, loggers=[Recorder()],
                callback=lambda record, state: seen.append(record["round"]))
    assert seen == [1, 2, 3]


def test_tracking_without_loggers_logs_nothing_and_keeps_the_callback():
    seen = []
    t = Tracking([], "x", {}, lambda r, s: seen.append(r["round"]))
    t.callback({"round": 1, "objective": 1.0})
    t.close()
    assert seen == [1]


@pytest.mark.parametrize("bad, message", [
    ("neptune", "loggers='neptune' is invalid: must be one of tensorboard, mlflow, wandb"),
    (3, "must be a tracker name"),
])
def test_unknown_loggers_are_refused_by_name(bad, message):
    with pytest.raises(fs.ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve_loggers(bad if isinstance(bad, str) else [bad])


def test_a_missing_extra_is_named_and_nothing_is_written(tmp_path, tiny, monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mlflow" else real(name, *a))
    out = tmp_path / "out"
    assert main(["run", str(tiny), "--out", str(out), "--log", "mlflow"]) == 2
    err = capsys.readouterr().err
    assert "--log 'mlflow' needs MLflow, which is not installed" in err
    assert "pip install 'fedsparse[mlflow]'" in err
    assert not out.exists()
    algo, problem, data = _tiny_run()
    with pytest.raises(fs.ConfigError, match=r"pip install 'fedsparse\[mlflow\]'"):
        fs.simulate(algo, problem, data, rounds=2, loggers="mlflow")


def test_an_unknown_wandb_mode_is_refused_before_any_run(tmp_path, tiny, monkeypatch, capsys):
    with pytest.raises(fs.ConfigError, match="mode='ofline' is invalid: must be one of "
                                             "offline, online, disabled"):
        fs.loggers.WandbLogger(tmp_path, mode="ofline")
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "ofline")  # was a pydantic traceback from wandb.init
    out = tmp_path / "out"
    assert main(["run", str(tiny), "--out", str(out), "--log", "wandb"]) == 2
    err = capsys.readouterr().err
    assert "$WANDB_MODE='ofline' is invalid: must be one of offline, online" in err
    assert "Traceback" not in err and not out.exists()


def test_log_is_refused_for_a_python_experiment(tmp_path, capsys):
    assert main(["run", "fig6-libsvm", "--quick", "--out", str(tmp_path / "o"),
                 "--log", "tensorboard"]) == 2
    assert "--log: 'fig6-libsvm' is a Python experiment" in capsys.readouterr().err


# --- TensorBoard ------------------------------------------------------------------------


def _event_accumulator(path: Path):
    ea_module = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    ea = ea_module.EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0,
                                                              "histograms": 0})
    ea.Reload()
    return ea


def _hparams(ea) -> dict:
    from tensorboard.plugins.hparams import plugin_data_pb2

    content = ea.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    data = plugin_data_pb2.HParamsPluginData.FromString(content)
    out = {}
    for key, value in data.session_start_info.hparams.items():
        out[key] = getattr(value, value.WhichOneof("kind"))
    return out


def test_tensorboard_run_reads_back_records_params_and_model(tmp_path, tiny):
    pytest.importorskip("tensorboard")
    out = tmp_path / "out"
    assert main(["run", str(tiny), "--out", str(out), "--log", "tensorboard", "--quiet"]) == 0
    rows = _summary_rows(out)
    assert sorted(p.name for p in (out / "tensorboard").iterdir()) == sorted(rows)
    for slug, row in rows.items():
        ea = _event_accumulator(out / "tensorboard" / slug)
        logged = [(e.step, e.value) for e in ea.Scalars("objective")]
        records = _records(out / slug)
        assert [s for s, _ in logged] == [r["round"] for r in records]  # round 0 included
        np.testing.assert_allclose([v for _, v in logged], [r["objective"] for r in records],
                                   rtol=1e-6)  # TensorBoard keeps float32
        assert ea.Scalars("final/objective")[-1].value == pytest.approx(row["objective"],
                                                                          rel=1e-6)
        hp = _hparams(ea)
        assert hp["label"] == row["label"]
        assert hp["algorithm.kind"] == row["params"]["algorithm"]["kind"]
        assert hp["algorithm.step_size"] == pytest.approx(0.01)
        assert hp["rounds"] == 4
        np.testing.assert_array_equal(np.load(out / "tensorboard" / slug / "model.npy"),
                                      np.load(out / slug / "model.npy"))
    # the folder is still fedsparse's: --force may replace it
    assert main(["run", str(tiny), "--out", str(out), "--force", "--quiet"]) == 0
    assert not (out / "tensorboard").exists()


def test_tensorboard_sweep_logs_every_point_in_parallel_workers(tmp_path, tiny):
    pytest.importorskip("tensorboard")
    out = tmp_path / "sweep"
    assert main(["sweep", str(tiny), "--grid", "algorithm.step_size=[0.01, 0.001]",
                 "--out", str(out), "--log", "tensorboard", "--jobs", "2"]) == 0
    folders = sorted(str(p.relative_to(out / "tensorboard"))
                     for p in (out / "tensorboard").glob("*/*"))
    assert folders == ["fed-ht/step_size=0.001", "fed-ht/step_size=0.01",
                       "fediter-ht/step_size=0.001", "fediter-ht/step_size=0.01"]
    rows = {(r["run"], float(r["algorithm.step_size"])): float(r["objective"])
            for r in __import__("csv").DictReader(open(out / "sweep.csv"))}
    ea = _event_accumulator(out / "tensorboard" / "fed-ht" / "step_size=0.001")
    assert ea.Scalars("final/objective")[-1].value == pytest.approx(rows[("Fed-HT", 0.001)],
                                                                      rel=1e-6)


# --- MLflow -----------------------------------------------------------------------------


def _mlflow_runs(uri: str, experiment: str) -> dict:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    return client, {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}


def test_mlflow_local_store_reads_back_records_params_and_model(tmp_path, tiny, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = tmp_path / "out"
    assert main(["run", str(tiny), "--out", str(out), "--log", "mlflow", "--quiet",
                 "--seeds", "2"]) == 0
    client, runs = _mlflow_runs(f"sqlite:///{out / 'mlflow' / 'mlflow.db'}", "out")
    rows = _summary_rows(out)
    assert sorted(runs) == sorted(f"{slug}/seed-{s}" for slug in rows for s in (0, 1))
    for slug, row in rows.items():
        for s in (0, 1):
            run = runs[f"{slug}/seed-{s}"]
            assert run.info.status == "FINISHED"
            records = _records(out / slug / f"seed-{s}")
            history = client.get_metric_history(run.info.run_id, "objective")
            assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == \
                [(r["round"], r["objective"]) for r in records]  # exact: MLflow keeps doubles
            assert run.data.metrics["final/objective"] == records[-1]["objective"]
            assert run.data.params["seed"] == str(s)
            assert run.data.params["algorithm.kind"] == row["params"]["algorithm"]["kind"]
            assert run.data.tags["device"] if "device" in row["params"] else True
            local = client.download_artifacts(run.info.run_id, "model.npy", str(tmp_path))
            np.testing.assert_array_equal(np.load(local), np.load(out / slug / f"seed-{s}"
                                                                  / "model.npy"))
        assert row["seeds"]["final"]["objective"]["mean"] == pytest.approx(
            np.mean([runs[f"{slug}/seed-{s}"].data.metrics["final/objective"] for s in (0, 1)]))


def test_a_tracking_uri_mlflow_cannot_open_is_named(tmp_path, tiny, monkeypatch, capsys):
    pytest.importorskip("mlflow")
    algo, problem, data = _tiny_run()
    logger = fs.loggers.MLflowLogger(tracking_uri="bogus://x")
    with pytest.raises(fs.ConfigError, match="tracking_uri='bogus://x' is invalid: MLflow "
                                             "cannot open it: .*unsupported URI"):
        fs.simulate(algo, problem, data, rounds=2, seed=0, loggers=logger)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "bogus://x")  # was MLflow's traceback
    out = tmp_path / "out"
    assert main(["run", str(tiny), "--out", str(out), "--log", "mlflow"]) == 2
    err = capsys.readouterr().err
    assert "$MLFLOW_TRACKING_URI='bogus://x' is invalid: MLflow cannot open it" in err
    assert "Traceback" not in err and not out.exists()


def test_mlflow_file_store_through_the_python_api(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 asks to opt in
    uri = (tmp_path / "mlruns").as_uri()
    algo, problem, data = _tiny_run()
    logger = fs.loggers.MLflowLogger(tracking_uri=uri, experiment="api")
    history = fs.simulate(algo, problem, data, rounds=3, seed=0, loggers=logger)
    client, runs = _mlflow_runs(uri, "api")
    run = runs["fed_iter_ht-seed0"]
    values = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id,
                                                                        "objective"))
    assert values == [(0, history.initial["objective"])] + \
        [(r["round"], r["objective"]) for r in history.records]
    assert run.data.params["algorithm.step_size"] == "0.01"
    assert run.data.tags["device"] == "cpu"


# --- Weights & Biases -------------------------------------------------------------------


def test_wandb_offline_run_holds_records_config_and_model(tmp_path, monkeypatch,
                                                         wandb_records):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    algo, problem, data = _tiny_run()
    logger = fs.loggers.WandbLogger(tmp_path, experiment="fedsparse-test")
    assert logger.mode == "offline"
    history = fs.simulate(algo, problem, data, rounds=3, seed=0, loggers=logger)
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    records = wandb_records.finished_records(run_dir)
    kinds = [r.WhichOneof("record_type") for r in records]
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.display_name == "fed_iter_ht-seed0" and run.project == "fedsparse-test"
    config = wandb_records.items(run.config.update)
    assert config["algorithm.step_size"] == 0.01 and config["rounds"] == 3
    steps = {}
    for r in records:
        if r.WhichOneof("record_type") == "history":
            items = wandb_records.items(r.history.item)
            if "objective" in items:
                steps[items["_step"]] = items["objective"]
    assert steps == {0: history.initial["objective"],
                     **{r["round"]: r["objective"] for r in history.records}}
    summary = {}
    for r in records:
        if r.WhichOneof("record_type") == "summary":
            summary.update(wandb_records.items(r.summary.update))
    assert summary["final/objective"] == history.final("objective")
    assert summary["device"] == "cpu"
    assert "exit" in kinds
    np.testing.assert_array_equal(np.load(run_dir / "files" / "model.npy"),
                                  history.model.numpy())
