"""What every experiment tracker does, and the per-run bookkeeping they share.

A :class:`Logger` tracks one run at a time: :meth:`Logger.start` with the run's name and
hyper-parameters, :meth:`Logger.log_metrics` once per round, then :meth:`Logger.finish`
with the final model. :class:`fedsparse.loggers.tracking.Tracking` drives any number of
loggers through one run with the rules defined here: which record fields are metrics
(numbers) and which are tags (text such as ``device`` and ``gpu``) and what goes into the
final summary.

A run that resumes from a checkpoint continues its tracker runs: every checkpoint
remembers them (``Tracking.identities``, each logger's :meth:`Logger.identity`), and
the resumed run reopens them (:meth:`Logger.resume`) and logs only the rounds a tracker
does not hold yet.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from .._validation import ConfigError

#: Record fields logged as text tags, not metrics, when a record or the run carries them.
TAG_FIELDS = ("device", "gpu")
#: The tag saying why a run stopped early (a divergence or an error).
STOPPED_TAG = "stopped"


class Logger:
    """Base class of an experiment tracker (TensorBoard, MLflow, Weights & Biases).

    Constructing a logger only stores its settings (it can be sent to a worker process);
    the tracker's package is imported by :meth:`start`. Subclasses set :attr:`kind`,
    :attr:`extra` (the ``fedsparse[...]`` extra that installs it) and :attr:`module`.

    Parameters
    ----------
    experiment : the experiment (project) the runs are grouped under.
    """

    kind = ""
    extra = ""
    #: The importable module that must be present.
    module = ""
    #: What to call the package in an error.
    package = ""

    def __init__(self, experiment: str = "fedsparse") -> None:
        self.experiment = str(experiment)

    # -- the tracker's side -----------------------------------------------------------
    def start(self, name: str, params: dict) -> None:
        """Open a run called ``name`` with the flat hyper-parameters ``params``
        ({dotted name: bool, int, float or str})."""
        raise NotImplementedError

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Numbers of one round (``step`` = rounds completed, 0 = the initial model)."""
        raise NotImplementedError

    def log_tags(self, tags: dict[str, str]) -> None:
        """Text facts of the run (device, GPU model, divergence message)."""
        raise NotImplementedError

    def log_summary(self, summary: dict[str, float], step: int) -> None:
        """The final values (``final/<metric>``, ``diverged``, ``diverged_round``)."""
        raise NotImplementedError

    def log_model(self, model: np.ndarray) -> None:
        """The final (P,) model (saved as ``model.npy``)."""
        raise NotImplementedError

    def finish(self, failed: bool = False) -> None:
        """Close the run; ``failed`` when it was stopped by an error."""
        raise NotImplementedError

    def prepare(self) -> None:
        """Create what parallel workers share (a database) before they start."""

    # -- resuming -----------------------------------------------------------------------
    def identity(self) -> dict[str, str] | None:
        """What a checkpoint remembers of the open run so that a resumed run can reopen
        it (:meth:`resume`): a small dict of strings, or None (the default: a resumed run
        starts a new tracker run)."""
        return None

    def resume(self, name: str, params: dict, previous: dict[str, str] | None,
               step: int) -> None:
        """Continue the run ``previous`` (an earlier :meth:`identity`) from round ``step``.

        A resumed run then logs the rounds of its checkpoint again (``0 .. step``) and
        recomputes the rounds after it exactly as the interrupted attempt did: a tracker
        that reopens its run logs each of them only where it does not hold it yet.

        Parameters
        ----------
        name, params : as for :meth:`start`.
        previous : the run the checkpoint names for this tracker, or None (it names
            none: the checkpoint was written without this tracker or by a version
            without tracker identities).
        step : the checkpoint's round; the resumed run's first new round is ``step + 1``.

        The default starts a new run (:meth:`start`), which then receives every round.
        """
        self.start(name, params)

    def log_steps(self, steps: list[tuple[int, dict[str, float]]]) -> None:
        """Rounds in order, ``(step, metrics)`` each: how every round reaches a logger
        (one at a time, or a resumed run's checkpointed rounds at once). The default calls
        :meth:`log_metrics` for each."""
        for step, metrics in steps:
            self.log_metrics(metrics, step)

    # -- shared -------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"{type(self).__name__}(experiment={self.experiment!r})"


def require(kind: str, package: str, module: str, extra: str, option: str = "loggers") -> None:
    """Raise a :class:`ConfigError` naming the extra to install when ``module`` is missing."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigError(f"{option} {kind!r} needs {package}, which is not installed: "
                          f"pip install 'fedsparse[{extra}]'")


def flatten(params: dict, prefix: str = "") -> dict[str, bool | int | float | str]:
    """Nested hyper-parameters as ``{"algorithm.step_size": 0.1, ...}``; lists and other
    values become their JSON (or ``repr``) text, None the text ``"None"``."""
    flat: dict = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, name + "."))
        elif isinstance(value, bool | int | str) or (isinstance(value, float)):
            flat[name] = value
        elif value is None:
            flat[name] = "None"
        else:
            try:
                flat[name] = json.dumps(value)
            except TypeError:
                flat[name] = repr(value)
    return flat


def split_record(record: dict) -> tuple[dict[str, float], dict[str, str]]:
    """(metrics, tags) of one round's record: numbers (bools as 0/1) are metrics, the
    text fields of :data:`TAG_FIELDS` tags; ``round`` (the step), lists (the delivered
    clients) and missing values are left out."""
    metrics, tags = {}, {}
    for key, value in record.items():
        if key == "round" or value is None:
            continue
        if isinstance(value, bool):
            metrics[key] = float(value)
        elif isinstance(value, int | float):
            metrics[key] = float(value)
        elif key in TAG_FIELDS and isinstance(value, str):
            tags[key] = value
    return metrics, tags


def safe_name(name: str) -> str:
    """``name`` usable as a folder path: letters, digits, ``.-_=,+`` and ``/`` between
    parts; never empty, never ``..``."""
    parts = [re.sub(r"[^A-Za-z0-9._=,+-]+", "-", p).strip("-.") for p in str(name).split("/")]
    return "/".join(p for p in parts if p) or "run"


def as_path(path) -> Path:
    return Path(path).expanduser()
