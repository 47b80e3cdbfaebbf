"""Weights & Biases: offline runs by default (``wandb sync`` uploads them later)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .._validation import fail
from .base import Logger, as_path

#: The modes ``wandb.init`` takes: the three :class:`WandbLogger` documents, then W&B's
#: own others (a shared run, and the old names of offline and online).
MODES = ("offline", "online", "disabled", "shared", "dryrun", "run")


class WandbLogger(Logger):
    """Log each run as a W&B run of the project ``experiment``.

    Parameters
    ----------
    dir : the folder W&B writes under (``DIR/wandb/``; default the working folder).
    experiment : the W&B project.
    mode : "offline" (default unless ``$WANDB_MODE`` says otherwise: nothing leaves the
        machine; ``wandb sync DIR/wandb/offline-run-*`` uploads later), "online" or
        "disabled" (or W&B's "shared", "dryrun", "run").

    Metrics go to the run's history at step = round, the hyper-parameters to its
    config, tags (device, GPU) and final values to its summary, and the final model to
    the run's files as ``model.npy``. System statistics, code and git state are not
    collected.
    """

    kind = "wandb"
    extra = "wandb"
    module = "wandb"
    package = "Weights & Biases (wandb)"

    def __init__(self, dir: str | Path = ".", experiment: str = "fedsparse",
                 mode: str | None = None) -> None:
        super().__init__(experiment)
        self.dir = as_path(dir)
        self.mode = mode or os.environ.get("WANDB_MODE") or "offline"
        if self.mode not in MODES:  # else a pydantic traceback from wandb.init, mid-run
            raise fail("mode" if mode else "$WANDB_MODE", self.mode,
                       "must be one of " + ", ".join(MODES))
        self._run = None

    def start(self, name: str, params: dict) -> None:
        import wandb

        self.dir.mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(silent=True, console="off", x_disable_stats=True,
                                  x_disable_meta=True, disable_git=True, save_code=False)
        self._run = wandb.init(project=self.experiment, name=name, dir=str(self.dir),
                               config=params, mode=self.mode, settings=settings,
                               reinit="create_new")

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self._run.log(metrics, step=step)

    def log_tags(self, tags: dict[str, str]) -> None:
        self._run.summary.update(tags)

    def log_summary(self, summary: dict[str, float], step: int) -> None:
        self._run.summary.update(summary)

    def log_model(self, model: np.ndarray) -> None:
        np.save(Path(self._run.dir) / "model.npy", model)  # the run's files are kept

    def finish(self, failed: bool = False) -> None:
        if self._run is not None:
            self._run.finish(exit_code=1 if failed else 0)
            self._run = None

    def __repr__(self) -> str:
        return f"WandbLogger(dir={str(self.dir)!r}, experiment={self.experiment!r}, " \
               f"mode={self.mode!r})"
