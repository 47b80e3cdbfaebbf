"""TensorBoard: one event folder per run (``tensorboard --logdir DIR``)."""

from __future__ import annotations

import json
import re
import time
import warnings
from pathlib import Path

import numpy as np

from .base import Logger, as_path, safe_name

#: The seconds since the epoch in an event file's name (``events.out.tfevents.<s>.``).
_EVENT_TIME = re.compile(r"events\.out\.tfevents\.(\d+)\.")


class TensorBoardLogger(Logger):
    """Write each run to ``log_dir/<run name>/`` as TensorBoard event files.

    Every record field that is a number becomes a scalar at step = round; the
    hyper-parameters go to the HParams tab (with the final metrics beside them) and, as
    JSON, to the Text tab; tags (device, GPU) to the Text tab; the final model is saved
    as ``model.npy`` in the run's folder, its non-zero weights as a histogram. Tags,
    the HParams and the histogram are written at the step of the latest round.

    A run resumed from a checkpoint at round c writes into the folder the checkpoint
    names (not a new ``<run name>-2``), from step c on, with TensorBoard's
    ``purge_step=c``: what the interrupted attempt wrote at steps c and later (the rounds
    after the checkpoint, its final values, the reason it stopped) is discarded by
    TensorBoard, so that each step is shown once. Where that folder is gone, a warning
    says so and a new folder gets every round.

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
        #: Steps below this one are in the folder already (a resumed run's).
        self._keep_from = 0
        #: The latest step written (where tags, the HParams and the histogram go).
        self._step = 0

    def start(self, name: str, params: dict) -> None:
        self._open(_new_folder(self.log_dir / safe_name(name)), params, 0)

    def identity(self) -> dict[str, str] | None:
        if self._writer is None:
            return None
        try:
            folder = self.run_dir.relative_to(self.log_dir).as_posix()
        except ValueError:  # not under log_dir: nothing a resumed run may reopen
            return None
        # the latest step written: a resume from a later checkpoint (one written while
        # this tracker was off) rewrites the folder from there
        return {"folder": folder, "step": str(self._step)}

    def resume(self, name: str, params: dict, previous: dict[str, str] | None,
               step: int) -> None:
        folder = None if previous is None else _own_folder(self.log_dir, name,
                                                           previous.get("folder"))
        if folder is None:
            if previous is not None:
                warnings.warn(
                    f"the TensorBoard folder {previous.get('folder')!r} that {name!r} logged "
                    f"to before it stopped is not in {str(self.log_dir)!r}: the resumed "
                    "run is logged to a new folder, with every round from 0", RuntimeWarning,
                    stacklevel=2)
            self.start(name, params)
            return
        written = previous.get("step", "")
        if written.isascii() and written.isdigit() and int(written) < step:
            step = int(written)  # the rounds after it were not logged here
        _after_existing_events(folder)
        self._open(folder, params, step)

    def _open(self, folder: Path, params: dict, step: int) -> None:
        """Write to ``folder`` from ``step`` on, TensorBoard discarding what the folder
        holds at that step and after.

        The writer marks where it starts (a session start at ``step``) even in a new
        folder: TensorBoard's own reader takes only a *second* start in a folder as a
        restart whose later steps it discards, so the first attempt must write one."""
        from torch.utils.tensorboard import SummaryWriter

        self.run_dir = folder
        self._writer = SummaryWriter(str(folder), purge_step=step)
        self._params = params
        self._keep_from = self._step = step
        if step == 0:  # (a resumed run's are kept at step 0)
            self._writer.add_text("params", "```\n" + json.dumps(params, indent=2) + "\n```",
                                  0)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        if step < self._keep_from:
            return
        self._step = max(self._step, step)
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, step)

    def log_tags(self, tags: dict[str, str]) -> None:
        # at the latest step, not 0: a resumed run's purge then discards the tags the
        # interrupted attempt wrote after its checkpoint (why it stopped)
        for key, value in tags.items():
            self._writer.add_text(f"tags/{key}", value, self._step)

    def log_summary(self, summary: dict[str, float], step: int) -> None:
        from torch.utils.tensorboard.summary import hparams

        self._step = max(self._step, step)
        for key, value in summary.items():
            self._writer.add_scalar(key, value, step)
        experiment, start, end = hparams(self._params, {k: v for k, v in summary.items()})
        for proto in (experiment, start, end):
            self._writer.file_writer.add_summary(proto, self._step)

    def log_model(self, model: np.ndarray) -> None:
        np.save(self.run_dir / "model.npy", model)
        nonzero = model[model != 0]
        if nonzero.size:
            self._writer.add_histogram("model/nonzero_weights", nonzero, self._step)

    def finish(self, failed: bool = False) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._keep_from = self._step = 0

    def __repr__(self) -> str:
        return f"TensorBoardLogger(log_dir={str(self.log_dir)!r})"


def _own_folder(log_dir: Path, name: str, folder) -> Path | None:
    """``log_dir/folder`` if it exists and is a folder :meth:`TensorBoardLogger.start`
    makes for a run called ``name`` (``<name>`` or ``<name>-<k>``), else None: a
    checkpoint names the folder, and a hand-made or damaged one must not send the run's
    events anywhere else."""
    if not isinstance(folder, str):
        return None
    base = safe_name(name)
    if folder != base and not re.fullmatch(re.escape(base) + r"-[0-9]+", folder):
        return None
    path = log_dir / folder
    return path if path.is_dir() and not path.is_symlink() else None


def _after_existing_events(folder: Path) -> None:
    """Wait, if need be, until a new event file's name sorts after those in ``folder``.

    TensorBoard reads a folder's event files in the order of their names, which begin
    with the second they were created; the purge of a resumed run works only if its file
    is read last. A resume within the same second as the earlier attempt began waits for
    the next second (at most two seconds: a later file from a clock ahead of this one is
    not waited for)."""
    times = [int(m.group(1)) for p in folder.iterdir()
             if (m := _EVENT_TIME.match(p.name))]
    if times:
        wait = max(times) + 1 - time.time()
        if 0 < wait <= 2:
            time.sleep(wait)


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
