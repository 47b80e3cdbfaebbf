"""The run's trackers together: :class:`Tracking` opens every logger's run (or reopens
the ones a checkpoint names), logs each round's record to all of them and closes them;
a tracker that fails in the middle of a long run costs its log, not the run."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable

from .base import STOPPED_TAG, TAG_FIELDS, Logger, flatten, split_record

#: At most this many tracker runs are read from a checkpoint (a damaged or hostile file
#: could list millions).
_MAX_REMEMBERED = 64


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
        """Log the records a run holds before its first new round, without the callback:
        the initial model's (round 0) and, for a run resumed from a checkpoint, rounds
        ``1 .. len(records)``; a tracker whose run was reopened keeps what it holds of
        them, a new tracker run receives them all."""
        self.open()
        self._log(([initial] if initial else []) + list(records))

    def callback(self, record: dict, state=None) -> None:
        """Log one round's record (and call the wrapped callback)."""
        self.open()
        self._log([record])
        if self.user_callback is not None:
            self.user_callback(record, state)

    def add_callback(self, callback: Callable | None) -> Tracking:
        """Also call ``callback(record, state)`` after each round (after any earlier one)."""
        if callback is not None:
            first = self.user_callback
            self.user_callback = callback if first is None else \
                (lambda record, state: (first(record, state), callback(record, state)))
        return self

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

    def _log(self, records: list[dict]) -> None:
        """Each record's numbers at step = its round, to every logger; its text as tags."""
        if not self.loggers:
            return
        steps = []
        tags: dict[str, str] = {}
        for record in records:
            metrics, found = split_record(record)
            steps.append((int(record.get("round", 0)), metrics))
            tags.update(found)
        for logger in list(self.loggers):
            self._call(logger, logger.log_steps, steps)
        self._tag(tags)

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


#: The entry of each tracker's identity (:meth:`Logger.identity`) that names its run:
#: no two runs share it (an MLflow run id, a W&B run id, a TensorBoard folder).
RUN_NAMED_BY = {"mlflow": "run_id", "wandb": "run_id", "tensorboard": "folder"}


def remembered_runs(value) -> list[dict[str, str]]:
    """The tracker runs a checkpoint remembers (its ``"trackers"`` entry): the dicts of
    strings with a ``kind`` among ``value``; anything else (a damaged or hand-made
    entry) is left out, and its tracker starts a new run."""
    if not isinstance(value, list | tuple):
        return []
    return [dict(v) for v in value[:_MAX_REMEMBERED] if is_identity(v)]


def is_identity(value) -> bool:
    """Whether ``value`` is a tracker run as :meth:`Tracking.identities` keeps one: a
    dict of strings with a ``kind``."""
    return isinstance(value, dict) and isinstance(value.get("kind"), str) \
        and all(isinstance(k, str) and isinstance(x, str) for k, x in value.items())


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
