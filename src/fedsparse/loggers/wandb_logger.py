"""Weights & Biases: offline runs by default (``wandb sync`` uploads them later)."""

from __future__ import annotations

import json
import os
import re
import time
import warnings
from datetime import datetime
from pathlib import Path

import numpy as np

from .._validation import fail
from .base import STOPPED_TAG, Logger, as_path

#: The modes ``wandb.init`` takes: the three :class:`WandbLogger` documents, then W&B's
#: own others (a shared run, and the old names of offline and online).
MODES = ("offline", "online", "disabled", "shared", "dryrun", "run")
#: The modes whose runs are kept only on this machine until ``wandb sync``.
_OFFLINE = ("offline", "dryrun")
#: In each of a run's folders (``DIR/wandb/<mode>-<time>-<id>/``, beside W&B's own
#: files, not uploaded): the latest step the attempt that wrote the folder logged.
STEP_FILE = "fedsparse-step.json"
#: A run id a checkpoint may name (W&B's are 8 letters and digits; ids are part of a
#: folder's name, so nothing else is taken from a checkpoint).
_RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: The start time in a run folder's name (``offline-run-<YYYYmmdd_HHMMSS>-<id>``).
_FOLDER_TIME = re.compile(r".*-(\d{8}_\d{6})-")


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
    collected, and W&B's links to the latest run (``DIR/wandb/latest-run``,
    ``debug.log``) are not made.

    A run resumed from a checkpoint continues the W&B run the checkpoint names: the same
    run id, with W&B's ``resume="allow"``, and its ``stopped`` summary entry removed.
    Each round is logged once:

    - offline (the default), W&B cannot reopen a run (its history is in the earlier
      attempt's folder, which W&B does not read): the resumed attempt writes a new
      folder with the same run id, ``DIR/wandb/offline-run-<time>-<id>``, holding only
      the rounds after the last one the earlier attempts logged (each attempt's folder
      records it in ``fedsparse-step.json``). The folders hold disjoint steps; sync them
      in the order they were written, into one run (``wandb sync --id <id> FOLDER ...``;
      the W&B run then holds every round once). Where no folder of that run is left in
      ``DIR/wandb`` (removed after a sync, another ``dir``), a warning says so and a
      new run gets every round.
    - online, W&B reopens the run on its server and says where its history ends (its
      ``starting_step``): only the later rounds are logged (the rounds recomputed after
      the checkpoint are the same as those the interrupted attempt logged); where the
      server does not hold the run, W&B starts it afresh under that id and it gets every
      round.

    W&B keeps every value logged (it has no way to remove a step): rounds an
    interrupted attempt logged after its checkpoint are kept, never rewritten.
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
        #: Steps up to this one are in the run already (a resumed run's); -1: none.
        self._held = -1
        #: The latest step logged by this attempt (-1: none yet).
        self._step = -1

    def start(self, name: str, params: dict) -> None:
        self._init(name, params)

    def _init(self, name: str, params: dict, run_id: str | None = None) -> None:
        import wandb

        self.dir.mkdir(parents=True, exist_ok=True)
        # no links (DIR/wandb/latest-run, debug.log): W&B re-points them at each run by
        # removing them, which an output folder's guard refuses on --resume and --force
        settings = wandb.Settings(silent=True, console="off", x_disable_stats=True,
                                  x_disable_meta=True, disable_git=True, save_code=False,
                                  symlink=False)
        extra = {} if run_id is None else {"id": run_id, "resume": "allow"}
        self._run = wandb.init(project=self.experiment, name=name, dir=str(self.dir),
                               config=params, mode=self.mode, settings=settings,
                               reinit="create_new", **extra)
        self._held, self._step = -1, -1

    def identity(self) -> dict[str, str] | None:
        if self._run is None or self.mode == "disabled":
            return None
        return {"run_id": str(self._run.id), "step": str(self._step)}

    def resume(self, name: str, params: dict, previous: dict[str, str] | None,
               step: int) -> None:
        run_id = None if previous is None else previous.get("run_id")
        if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
            self.start(name, params)
            return
        folders = self._folders(run_id)
        if self.mode in _OFFLINE and not folders:
            warnings.warn(
                f"W&B run {run_id!r}, which {name!r} logged to before it stopped, has no "
                f"folder in {str(self.dir / 'wandb')!r} (removed after a sync, or another "
                "dir): the resumed run is logged to a new W&B run, with every round from 0",
                RuntimeWarning, stacklevel=2)
            self.start(name, params)
            return
        _after_folders(folders)  # a new folder, never the earlier attempt's
        held = _held_steps(folders, previous.get("step", ""), step)
        try:
            self._init(name, params, run_id)
        except Exception as exc:  # e.g. a server that refuses the id (a deleted run)
            warnings.warn(
                f"W&B run {run_id!r}, which {name!r} logged to before it stopped, cannot "
                f"be continued ({type(exc).__name__}: {exc}): the resumed run is logged to "
                "a new W&B run, with every round from 0", RuntimeWarning, stacklevel=2)
            self.start(name, params)
            return
        if self.mode in _OFFLINE:
            self._held = held
        elif self._run.resumed:  # W&B's server holds the run's steps below starting_step
            self._held = max(held, int(self._run.starting_step) - 1)
        # (an online run the server does not hold starts afresh: it gets every round)
        del self._run.summary[STOPPED_TAG]  # it was stopped; now it goes on

    def _folders(self, run_id: str) -> list[Path]:
        """This run's folders under ``DIR/wandb`` (one per attempt), oldest first."""
        root = self.dir / "wandb"
        if not root.is_dir():
            return []
        return sorted((p for p in root.iterdir()
                       if p.name.endswith("-" + run_id) and p.is_dir()
                       and not p.is_symlink() and (p / f"run-{run_id}.wandb").is_file()),
                      key=lambda p: p.name)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.log_steps([(step, metrics)])

    def log_steps(self, steps: list[tuple[int, dict[str, float]]]) -> None:
        latest = self._step
        for step, metrics in steps:
            if step > self._held:
                self._run.log(metrics, step=step)
                latest = max(latest, step)
        if latest > self._step:
            self._step = latest
            self._note_step()

    def _note_step(self) -> None:
        """Record the latest step logged in this attempt's folder (for a resume)."""
        if self.mode == "disabled":
            return
        folder = Path(self._run.dir).parent
        tmp = folder / (STEP_FILE + ".tmp")
        tmp.write_text(json.dumps({"step": self._step}))
        os.replace(tmp, folder / STEP_FILE)

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
        self._held, self._step = -1, -1

    def __repr__(self) -> str:
        return f"WandbLogger(dir={str(self.dir)!r}, experiment={self.experiment!r}, " \
               f"mode={self.mode!r})"


def _held_steps(folders: list[Path], remembered: str, step: int) -> int:
    """The latest step the earlier attempts logged: the largest their folders record,
    else (no readable record) the step the checkpoint remembers, at most its round."""
    found = []
    for folder in folders:
        try:
            value = json.loads((folder / STEP_FILE).read_text())["step"]
        except (OSError, ValueError, TypeError, KeyError):  # none, or cut short
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            found.append(value)
    if found:
        return max(found)
    if remembered.isascii() and remembered.isdigit():
        return min(int(remembered), step)
    return -1


def _after_folders(folders: list[Path]) -> None:
    """Wait, if need be, until the second W&B names a new folder by is later than the
    latest of ``folders``: W&B names a run's folder by the second it starts and the run
    id, and a resumed attempt started within the same second would write into the
    earlier attempt's folder (at most two seconds: a folder from a clock ahead of this one
    is not waited for)."""
    stamps = [m.group(1) for p in folders if (m := _FOLDER_TIME.match(p.name))]
    if not stamps:
        return
    latest = datetime.strptime(max(stamps), "%Y%m%d_%H%M%S").timestamp()
    wait = latest + 1 - time.time()
    if 0 < wait <= 2:
        time.sleep(wait)
