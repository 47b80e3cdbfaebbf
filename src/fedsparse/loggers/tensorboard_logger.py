"""TensorBoard: one event folder per run (``tensorboard --logdir DIR``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .base import Logger, as_path, safe_name


class TensorBoardLogger(Logger):
    """Write each run to ``log_dir/<run name>/`` as TensorBoard event files.

    Every record field that is a number becomes a scalar at step = round; the
    hyper-parameters go to the HParams tab (with the final metrics beside them) and, as
    JSON, to the Text tab; tags (device, GPU) to the Text tab; the final model is saved
    as ``model.npy`` in the run's folder, its non-zero weights as a histogram.

    Parameters
    ----------
    log_dir : the folder ``tensorboard --logdir`` reads (default ``runs/tensorboard``).
    experiment : a name kept for symmetry with the other trackers (TensorBoard groups
        runs by folder).
    """

    kind = "tensorboard"
    extra = "tensorboard"
    module = "tensorboard"
    package = "TensorBoard"

    def __init__(self, log_dir: str | Path = "runs/tensorboard",
                 experiment: str = "fedsparse") -> None:
        super().__init__(experiment)
        self.log_dir = as_path(log_dir)
        self._writer = None
        self._params: dict = {}

    def start(self, name: str, params: dict) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.run_dir = _new_folder(self.log_dir / safe_name(name))
        self._writer = SummaryWriter(str(self.run_dir))
        self._params = params
        self._writer.add_text("params", "```\n" + json.dumps(params, indent=2) + "\n```", 0)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, step)

    def log_tags(self, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self._writer.add_text(f"tags/{key}", value, 0)

    def log_summary(self, summary: dict[str, float], step: int) -> None:
        from torch.utils.tensorboard.summary import hparams

        for key, value in summary.items():
            self._writer.add_scalar(key, value, step)
        experiment, start, end = hparams(self._params, {k: v for k, v in summary.items()})
        for proto in (experiment, start, end):
            self._writer.file_writer.add_summary(proto)

    def log_model(self, model: np.ndarray) -> None:
        np.save(self.run_dir / "model.npy", model)
        nonzero = model[model != 0]
        if nonzero.size:
            self._writer.add_histogram("model/nonzero_weights", nonzero, 0)

    def finish(self, failed: bool = False) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __repr__(self) -> str:
        return f"TensorBoardLogger(log_dir={str(self.log_dir)!r})"


def _new_folder(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3``, ... if it exists: two runs of the same name
    (a rerun, a parallel worker) never write into one event folder."""
    candidate, k = path, 1
    while True:
        try:
            candidate.mkdir(parents=True, exist_ok=False)
            return candidate
        except FileExistsError:
            k += 1
            candidate = path.with_name(f"{path.name}-{k}")
