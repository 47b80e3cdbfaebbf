"""MLflow: runs in a tracking store (a local SQLite file by default, no server)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np

from .base import Logger, as_path

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
        self._client = None
        self.run_id: str | None = None

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
            self._client = MlflowClient(tracking_uri=self.tracking_uri)
        return self._client

    def _experiment_id(self) -> str:
        client = self._connect()
        found = client.get_experiment_by_name(self.experiment)
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
        from mlflow.entities import Param

        client = self._connect()
        run = client.create_run(self._experiment_id(), run_name=name)
        self.run_id = run.info.run_id
        items = [Param(k[:250], str(v)[:_PARAM_CHARS]) for k, v in params.items()]
        for i in range(0, len(items), _BATCH_PARAMS):
            client.log_batch(self.run_id, params=items[i:i + _BATCH_PARAMS])

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, v, now, step) for k, v in metrics.items()]
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

    def __repr__(self) -> str:
        return f"MLflowLogger(tracking_uri={self.tracking_uri!r}, experiment={self.experiment!r})"
