"""MLflow: runs in a tracking store (a local SQLite file by default, no server)."""

from __future__ import annotations

import os
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from .._validation import ConfigError
from .base import STOPPED_TAG, Logger, as_path

#: MLflow's limits per ``log_batch`` call.
_BATCH_METRICS, _BATCH_PARAMS = 1000, 100
#: MLflow's limit on a parameter value's length.
_PARAM_CHARS = 6000


class MLflowLogger(Logger):
    """Log each run as an MLflow run of the experiment ``experiment``.

    Metrics at step = round, the hyper-parameters as MLflow params, tags (device, GPU)
    as MLflow tags, the final values as ``final/<metric>`` metrics and the final model as
    the artifact ``model.npy``.

    Parameters
    ----------
    tracking_uri : where the runs go. Default: ``$MLFLOW_TRACKING_URI`` when set (a
        server, or any store MLflow knows), else a SQLite store in ``store_dir``
        (``mlflow ui --backend-store-uri sqlite:///STORE_DIR/mlflow.db`` shows it).
    store_dir : the local store's folder (default ``mlruns``): ``mlflow.db`` and the
        artifacts under ``artifacts/``.
    experiment : the MLflow experiment name (created if missing).

    Only the client (``mlflow-skinny``) is needed; nothing is sent over a network
    unless ``tracking_uri`` names a server.

    A run resumed from a checkpoint continues the MLflow run the checkpoint names (its
    run id): the run is marked running again, its ``stopped`` tag is removed, and each
    metric is logged only at the steps the run does not hold yet (MLflow cannot delete
    a metric's values; the rounds recomputed after the checkpoint are the same as those
    logged before). Where that run is not in the store (deleted, another tracking URI,
    another experiment), a warning says so and a new run gets every round.
    """

    kind = "mlflow"
    extra = "mlflow"
    module = "mlflow"
    package = "MLflow"

    def __init__(self, tracking_uri: str | None = None, store_dir: str | Path = "mlruns",
                 experiment: str = "fedsparse") -> None:
        super().__init__(experiment)
        self.store_dir = as_path(store_dir)
        self.tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or \
            f"sqlite:///{self.store_dir.absolute() / 'mlflow.db'}"
        #: Where the tracking URI came from, as a refusal names it.
        self._uri_from = "tracking_uri" if tracking_uri else "$MLFLOW_TRACKING_URI" \
            if os.environ.get("MLFLOW_TRACKING_URI") else "store_dir"
        self._client = None
        self.run_id: str | None = None
        #: {metric: steps} the reopened run already holds (None: a new run holds none).
        self._logged: dict[str, set[int]] | None = None

    @property
    def local(self) -> bool:
        return self.tracking_uri == f"sqlite:///{self.store_dir.absolute() / 'mlflow.db'}"

    def _connect(self):
        if self._client is None:
            import logging

            from mlflow.tracking import MlflowClient

            if self.local:
                self.store_dir.mkdir(parents=True, exist_ok=True)
                # the database set-up logs a line per migration step at INFO
                logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
                logging.getLogger("alembic").setLevel(logging.WARNING)
            try:
                self._client = MlflowClient(tracking_uri=self.tracking_uri)
            except Exception as exc:
                raise self._unusable(exc) from None
        return self._client

    def _unusable(self, exc: Exception) -> ConfigError:
        """The refusal of a store MLflow cannot open (an unknown scheme, a file store
        MLflow 3 refuses), naming the setting it came from instead of MLflow's traceback."""
        reason = " ".join(str(exc).split()) or type(exc).__name__
        if self._uri_from == "store_dir":
            return ConfigError(f"store_dir={str(self.store_dir)!r} is invalid: MLflow cannot "
                               f"open the tracking store {self.tracking_uri!r}: {reason}")
        return ConfigError(f"{self._uri_from}={self.tracking_uri!r} is invalid: MLflow cannot "
                           f"open it: {reason}")

    def _experiment_id(self) -> str:
        client = self._connect()
        try:
            found = client.get_experiment_by_name(self.experiment)
        except Exception as exc:
            raise self._unusable(exc) from None
        if found is not None:
            return found.experiment_id
        where = (self.store_dir.absolute() / "artifacts").as_uri() if self.local else None
        try:
            return client.create_experiment(self.experiment, artifact_location=where)
        except Exception:  # created meanwhile by a parallel worker
            found = client.get_experiment_by_name(self.experiment)
            if found is None:
                raise
            return found.experiment_id

    def prepare(self) -> None:
        self._experiment_id()
        self._client = None  # a fresh connection in each process

    def start(self, name: str, params: dict) -> None:
        client = self._connect()
        run = client.create_run(self._experiment_id(), run_name=name)
        self.run_id = run.info.run_id
        self._logged = None
        self._log_params(params)

    def identity(self) -> dict[str, str] | None:
        return None if self.run_id is None else {"run_id": self.run_id}

    def resume(self, name: str, params: dict, previous: dict[str, str] | None,
               step: int) -> None:
        run = None if previous is None else self._reopenable(previous.get("run_id"))
        if run is None:
            if previous is not None:
                warnings.warn(
                    f"MLflow run {previous.get('run_id')!r}, which {name!r} logged to before "
                    f"it stopped, is not in experiment {self.experiment!r} of "
                    f"{self.tracking_uri} (deleted, or another store): the resumed run is "
                    "logged to a new MLflow run, with every round from 0", RuntimeWarning,
                    stacklevel=2)
            self.start(name, params)
            return
        client = self._connect()
        self.run_id = run.info.run_id
        client.update_run(self.run_id, status="RUNNING")
        if STOPPED_TAG in run.data.tags:  # it was stopped; now it goes on
            client.delete_tag(self.run_id, STOPPED_TAG)
        # MLflow keeps every value logged and has no way to remove one: what the run
        # holds already is not logged again
        self._logged = {key: {m.step for m in client.get_metric_history(self.run_id, key)}
                        for key in run.data.metrics}
        # params cannot change once logged (a resumed run's device may differ: its tag
        # says which it is now)
        self._log_params({k: v for k, v in params.items()
                          if k[:250] not in run.data.params})

    def _reopenable(self, run_id):
        """The active run ``run_id`` of this logger's experiment, or None."""
        from mlflow.exceptions import MlflowException

        if not isinstance(run_id, str) or not run_id:
            return None
        try:
            run = self._connect().get_run(run_id)
        except MlflowException:  # not in this store
            return None
        if run.info.lifecycle_stage != "active" or \
                run.info.experiment_id != self._experiment_id():
            return None
        return run

    def _log_params(self, params: dict) -> None:
        from mlflow.entities import Param

        items = [Param(k[:250], str(v)[:_PARAM_CHARS]) for k, v in params.items()]
        for i in range(0, len(items), _BATCH_PARAMS):
            self._client.log_batch(self.run_id, params=items[i:i + _BATCH_PARAMS])

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.log_steps([(step, metrics)])

    def log_steps(self, steps: list[tuple[int, dict[str, float]]]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        held = self._logged or {}
        items = [Metric(k, v, now, step) for step, metrics in steps
                 for k, v in metrics.items() if step not in held.get(k, ())]
        for i in range(0, len(items), _BATCH_METRICS):
            self._client.log_batch(self.run_id, metrics=items[i:i + _BATCH_METRICS])

    def log_tags(self, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        self._client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    def log_summary(self, summary: dict[str, float], step: int) -> None:
        self.log_metrics(summary, step)

    def log_model(self, model: np.ndarray) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.npy"
            np.save(path, model)
            self._client.log_artifact(self.run_id, str(path))

    def finish(self, failed: bool = False) -> None:
        if self._client is not None and self.run_id is not None:
            self._client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")
        self.run_id = None
        self._logged = None

    def __repr__(self) -> str:
        return f"MLflowLogger(tracking_uri={self.tracking_uri!r}, experiment={self.experiment!r})"
