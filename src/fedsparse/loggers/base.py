"""What every experiment tracker does, and the per-run bookkeeping they share.

A :class:`Logger` tracks one run at a time: :meth:`Logger.start` with the run's name and
hyper-parameters, :meth:`Logger.log_metrics` once per round, then :meth:`Logger.finish`
with the final model. :class:`Tracking` drives any number of loggers through one run, so
the simulator and the experiment runner share the rules: which record fields are
metrics (numbers) and which are tags (text such as ``device`` and ``gpu``), what goes
into the final summary, and that a tracker failing in the middle of a long run costs
its log, not the run.

A run that resumes from a checkpoint continues its tracker runs: every checkpoint
remembers them (:meth:`Tracking.identities`, each logger's :meth:`Logger.identity`), and
the resumed run reopens them (:meth:`Logger.resume`) and logs only the rounds a tracker
does not hold yet.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from .._validation import ConfigError

#: Record fields logged as text tags, not metrics, when a record or the run carries them.
TAG_FIELDS = ("device", "gpu")
#: The tag saying why a run stopped early (a divergence or an error).
STOPPED_TAG = "stopped"
#: At most this many tracker runs are read from a checkpoint (a damaged or hostile file
#: could list millions).
_MAX_REMEMBERED = 64


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
        """Several rounds at once (``(step, metrics)`` in order): the records a resumed
        run takes from its checkpoint. The default calls :meth:`log_metrics` for each."""
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


class Tracking:
    """One run tracked by several loggers.

    Parameters
    ----------
    loggers : the loggers (possibly none: then every method does nothing).
    name : the run's name in the trackers (e.g. a run folder, ``panel-label/seed-1``).
    params : its hyper-parameters (nested dicts are flattened to dotted names).
    callback : a ``callback(record, state)`` to call after logging each round.

    The trackers' runs are opened by :meth:`open` (the simulator calls it once it knows
    whether the run resumes from a checkpoint), else by the first round logged or by
    :meth:`close`. Use :meth:`callback` as the simulator's callback, then :meth:`close`
    once.
    """

    def __init__(self, loggers: Iterable[Logger], name: str, params: dict,
                 callback: Callable | None = None) -> None:
        self.loggers = list(loggers)
        self.name = name
        self.params = params
        self.user_callback = callback
        self.tags: dict[str, str] = {}
        self.closed = False
        self.opened = False
        #: Tracker runs the checkpoint remembers that no logger of this run continues
        #: (a resume without that tracker): kept in later checkpoints, for a later resume.
        self._unclaimed: list[dict[str, str]] = []

    def open(self, resume_from: int | None = None, previous=None) -> None:
        """Start every logger's run; nothing happens when the runs are open already.

        Parameters
        ----------
        resume_from : the round of the checkpoint the run resumes from; None for a run
            that starts at round 0 (a new tracker run each).
        previous : the tracker runs the checkpoint remembers (:meth:`identities` when it
            was saved): each logger continues the first one of its kind
            (:meth:`Logger.resume`). Entries that are not dicts of strings are ignored.

        Raises
        ------
        Exception
            what a logger's ``start`` or ``resume`` raised (the loggers started before
            it are closed as failed, and no logger is used afterwards).
        """
        if self.opened:
            return
        self.opened = True
        flat = flatten(self.params)
        remembered = remembered_runs(previous)
        started = []
        try:
            for logger in self.loggers:
                if resume_from is None:
                    logger.start(self.name, flat)
                else:
                    mine = next((r for r in remembered if r.get("kind") == logger.kind), None)
                    if mine is not None:  # two loggers of one kind: each its own run
                        remembered.remove(mine)
                    logger.resume(self.name, flat, mine, int(resume_from))
                started.append(logger)
        except BaseException:
            for logger in started:
                _quietly(logger.finish, True)
            self.loggers = []  # none of them holds an open run now
            raise
        self._unclaimed = remembered if resume_from is not None else []
        tags = {k: str(self.params[k]) for k in TAG_FIELDS if self.params.get(k) is not None}
        self._tag(tags)

    def identities(self) -> list[dict[str, str]]:
        """The open tracker runs as a checkpoint remembers them: ``{"kind": ..., ...}``
        per logger that can reopen its run (:meth:`Logger.identity`), then those the
        checkpoint this run resumed from remembers that none of its loggers continues."""
        out = []
        for logger in self.loggers if self.opened and not self.closed else ():
            try:
                ident = logger.identity()
            except Exception:  # a tracker's own failure must not fail a checkpoint
                ident = None
            if ident:
                out.append({**{str(k): str(v) for k, v in ident.items()},
                            "kind": logger.kind})
        return out + [dict(r) for r in self._unclaimed]

    def log_past(self, initial: dict | None, records: list[dict]) -> None:
        """Log the records a resumed run takes from its checkpoint (round 0 and rounds
        ``1 .. len(records)``), without the callback: a tracker whose run was reopened
        keeps what it holds of them, a new tracker run receives them all."""
        self.open()
        steps = []
        tags: dict[str, str] = {}
        for record in ([initial] if initial else []) + list(records):
            metrics, found = split_record(record)
            steps.append((int(record.get("round", 0)), metrics))
            tags.update(found)
        for logger in list(self.loggers):
            self._call(logger, logger.log_steps, steps)
        self._tag(tags)

    def callback(self, record: dict, state=None) -> None:
        """Log one round's record (and call the wrapped callback)."""
        self.open()
        if self.loggers:
            metrics, tags = split_record(record)
            step = int(record.get("round", 0))
            for logger in list(self.loggers):
                self._call(logger, logger.log_metrics, metrics, step)
            self._tag(tags)
        if self.user_callback is not None:
            self.user_callback(record, state)

    def add_callback(self, callback: Callable | None) -> Tracking:
        """Also call ``callback(record, state)`` after each round (after any earlier one)."""
        if callback is not None:
            first = self.user_callback
            self.user_callback = callback if first is None else \
                (lambda record, state: (first(record, state), callback(record, state)))
        return self

    def log_initial(self, record: dict) -> None:
        """Log the round-0 record (the initial model's metrics), without the callback."""
        self.open()
        metrics, tags = split_record(record)
        for logger in list(self.loggers):
            self._call(logger, logger.log_metrics, metrics, 0)
        self._tag(tags)

    def close(self, history=None, error: BaseException | str | None = None) -> None:
        """Log the summary and the final model of ``history``, then end the run.

        Parameters
        ----------
        history : the run's History (its last record gives ``final/<metric>``; its
            ``model`` is logged; ``device`` / ``gpu`` in its config become tags).
        error : why the run stopped early (a divergence message or an exception): the
            run is marked diverged (a :class:`fedsparse.DivergenceError`) or failed.
        """
        if self.closed:
            return
        try:  # a run that failed before its rounds is still logged, as failed
            self.open()
        except Exception:  # the tracker cannot start either: nothing to close
            pass
        self.closed = True
        diverged = _is_divergence(error)
        failed = error is not None and not diverged
        summary: dict[str, float] = {}
        tags: dict[str, str] = {}
        step = 0
        if history is not None:
            last = history.records[-1] if history.records else history.initial
            step = int(last.get("round", 0)) if last else 0
            metrics, _ = split_record(last or {})
            summary = {f"final/{k}": v for k, v in metrics.items()}
            tags.update({k: str(history.config[k]) for k in TAG_FIELDS
                         if history.config.get(k) is not None})
        if error is not None:
            summary["diverged"] = float(diverged)
            if diverged:
                summary["diverged_round"] = float(getattr(error, "round", step + 1) or step + 1)
            tags[STOPPED_TAG] = str(error)[:500] or type(error).__name__
        else:
            summary["diverged"] = 0.0
        self._tag(tags)
        model = None if history is None or history.model is None else \
            history.model.detach().cpu().numpy()
        for logger in list(self.loggers):
            self._call(logger, logger.log_summary, summary, step)
            if model is not None:
                self._call(logger, logger.log_model, model)
        for logger in self.loggers:
            _quietly(logger.finish, failed)

    def _tag(self, tags: dict[str, str]) -> None:
        new = {k: v for k, v in tags.items() if self.tags.get(k) != v}
        if not new:
            return
        self.tags.update(new)
        for logger in list(self.loggers):
            self._call(logger, logger.log_tags, new)

    def _call(self, logger: Logger, method, *args) -> None:
        """A tracker that fails mid-run is dropped with a warning: the run and its own
        files go on."""
        try:
            method(*args)
        except Exception as exc:  # any tracker error: keep the run alive
            warnings.warn(f"{logger.kind} logging of {self.name!r} failed and is switched "
                          f"off for this run ({type(exc).__name__}: {exc}); the run goes "
                          "on and its own files are complete", RuntimeWarning, stacklevel=3)
            self.loggers.remove(logger)
            _quietly(logger.finish, True)


def remembered_runs(value) -> list[dict[str, str]]:
    """The tracker runs a checkpoint remembers (its ``"trackers"`` entry): the dicts of
    strings with a ``kind`` among ``value``; anything else (a damaged or hand-made
    entry) is left out, and its tracker starts a new run."""
    if not isinstance(value, list | tuple):
        return []
    return [dict(v) for v in value[:_MAX_REMEMBERED]
            if isinstance(v, dict) and isinstance(v.get("kind"), str)
            and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())]


def _is_divergence(error) -> bool:
    if error is None:
        return False
    if isinstance(error, str):  # the runner's divergence message
        return True
    from ..rounds import DivergenceError

    return isinstance(error, DivergenceError)


def _quietly(fn, *args) -> None:
    try:
        fn(*args)
    except Exception:  # closing a tracker that already failed: nothing more to do
        pass


def as_path(path) -> Path:
    return Path(path).expanduser()
