"""Tuning beyond grids: Optuna searches a config's fields for each run (``fedsparse tune``).

``run_tune(config, {"algorithm.step_size": parse_space("log(1e-4, 1e-1)")}, trials=20)``
runs one Optuna study per run of the config (as a sweep picks one winner per run): each
trial sets the fields to the sampler's values, runs the run (over ``seeds`` replicates,
as :mod:`.seeds` defines them, comparing the mean) and reports the metric at the last
round. The direction and the divergence rules are the sweep's
(:mod:`fedsparse.experiments.sweep`): accuracy-like metrics are maximised, the rest
minimised; a trial that diverged for any seed never wins. The output folder has the
sweep's layout:

* ``trials.csv``: one row per run and trial (value null/empty when it diverged);
* ``best.json``: ``{run: {"params": {field: value}, "value", "trial"}}``;
* ``tune.png``: the metric against the tried values, one line per run;
* ``tuned.toml``: the config with each run's best values (``fedsparse run tuned.toml``);
* ``tune.json``: the search itself (space, sampler and its seed, the start-up and
  refinement trial counts, metric, direction).

Diverging trials are pruned: a trial stops as soon as its model turns non-finite or its
objective grows past :data:`DIVERGE_FACTOR` times its round-1 value (the objectives here
are losses, bounded below, so such growth is divergence; it saves the rounds a
diverging run would spend before overflowing). ``trials.csv`` marks it ``pruned`` with
the round; the sampler is told it scored as the worst trial so far, so that it learns
where the runs diverge.

A tuning has three phases. The first quarter of the trials (2 to 10) are spread over
the space (a Latin hypercube, :func:`start_points`). The last trials refine the best
trial so far by a golden-section line search, one field at a time
(:mod:`fedsparse.experiments.refine`); they are the trials after the start-up divided
by the number of fields, so for one field every trial after the start-up refines. The
sampler (Optuna's TPE by default, or a Gaussian process) proposes the trials between,
and any refinement trial that has no step to take (the "random" sampler draws every
trial at random, as a baseline). On the default experiment (six runs,
the step size over log(1e-3, 10), nine trials per run) the refinement did better than
TPE alone at every run, over eight step ranges and three sampler seeds: a 9-point
tuning found a step at least as good as the README's 9-point grid in 24 of 24 tunings
for five of the runs (TPE alone: 6 to 21 of 24) and in 6 of 24 for the sixth, whose
grid point sits inside a sliver (0.058 to 0.060) of a flat plateau. Trials run in
batches of ``jobs``: the phases propose ``jobs`` trials per run, they run in parallel
processes, and their results are told in trial order. The proposals depend only on the
sampler's seed and the results told before, so a tuning is
repeatable for a given ``jobs`` (``jobs=1`` is Optuna's sequential search).

That is how a stopped tuning continues (``resume=True``, ``fedsparse tune ... --resume``):
each trial's runs are kept in ``finished.jsonl`` as they finish
(:mod:`fedsparse.experiments.search_record`); a continued tuning asks the sampler for
the same trials again and tells it the kept results instead of running them, so its
files are those of a tuning never stopped (Optuna's storage would keep the trials but
not the sampler's random state, and so not the trials after them). It must be the same
tuning: config, space, trials, metric, direction, seeds, jobs, sampler, its seed and
Optuna's version; a trial the sampler still proposes otherwise than recorded runs anew.

A stopped or finished tuning also continues with more trials (``--resume --trials 8``
after ``--trials 4``) where its trials are the first ones of a tuning of that many, and
then ends as that tuning, whose files it writes: with one field, every trial after the
start-up refines, so a tuning extends to any number of trials with the same start-up
count (a quarter of the trials, 2 to 10: 4 trials extend up to 11, and 40 or more to any
number); with ``jobs``, only where its last batch was whole. Elsewhere the number of
trials decides which of the first trials spread over the space or refine
(:func:`_plan`), so a tuning of more trials is another tuning, and is refused, saying
so: run it in another folder. Fewer trials than it ran are refused.
"""

from __future__ import annotations

import csv
import json
import math
import os
import warnings
from pathlib import Path

import tomli_w

from .._validation import ConfigError, check_int, fail
from ..algorithms.wrapper import innermost_state
from ..history import History
from ..rounds import DivergenceError
from .config import check_metric, resolve_runs
from .refine import refine_count, refine_point
from .runner import execute_run
from .search_record import RECORD, SearchRecord
from .seeds import (
    best_direction,
    check_replicates,
    check_seeds,
    divergence,
    spread,
    strict_json,
    with_seed,
)
from .sweep import (
    _check_recorded,
    _run_keys,
    _runs_at,
    point_slug,
    tracked_runs,
    tuned_config,
)
from .tune_space import Space, check_space, start_points
from .tune_space import parse_space as parse_space  # (importable from here, as before)

#: A trial whose objective exceeds this multiple of its round-1 objective is pruned as
#: diverging.
DIVERGE_FACTOR = 1e3
#: The samplers ``sampler=`` takes (Optuna's TPE, Gaussian-process and random search).
SAMPLERS = ("tpe", "gp", "random")
#: Data sets built by a worker process, reused by its later trials.
_WORKER_DATA: dict = {}
#: The files a tuning writes into its output folder (the record of its finished runs as
#: they finish, the others at its end).
TUNE_FILES = (RECORD, "trials.csv", "best.json", "tune.json", "tune.png", "tuned.toml")


def require_optuna(option: str = "tune") -> None:
    import importlib.util

    if importlib.util.find_spec("optuna") is None:
        raise ConfigError(f"{option} needs Optuna, which is not installed: "
                          "pip install 'fedsparse[tune]'")


def run_tune(config: dict, space: dict[str, Space | str], *, trials: int,
             out: str | Path | None = None, metric: str = "objective",
             maximize: bool | None = None, seeds: int | None = None, jobs: int = 1,
             sampler: str = "tpe", sampler_seed: int = 0, log=print, loggers=None,
             resume: bool = False) -> dict:
    """Search ``space`` for each run of ``config`` with Optuna; pick each run's best trial.

    Parameters
    ----------
    config : an experiment config (:mod:`fedsparse.experiments.config`).
    space : {dotted run field (e.g. "algorithm.step_size"): :class:`Space` or its text
        (:func:`parse_space`)}.
    trials : trials per run.
    out : folder for ``trials.csv``, ``best.json``, ``tune.png``, ``tuned.toml`` and
        ``tune.json``, and for ``finished.jsonl``, which keeps each trial's runs as they
        finish.
    metric : record field compared at the last round.
    maximize : True / False; None = by the metric's name (as in a sweep).
    seeds : run each trial over this many seeds and compare the mean.
    jobs : trials run in batches of this many, in parallel processes (at most one per
        CPU; the batches, and so the trials, are the same on any machine).
    sampler : "tpe" (default), "gp" or "random".
    sampler_seed : the sampler's seed (run i's study uses ``sampler_seed + i``).
    log : called with each trial's line and the final table.
    loggers : experiment trackers (:func:`fedsparse.loggers.resolve_loggers`) that get
        every trial as a run named ``<run>/trial-<k>`` (a continued tuning logs only
        the runs it runs; a run stopped mid-run runs again from round 0, in the tracker
        runs it opened: :mod:`.search_record`).
    resume : continue the tuning stopped in ``out``: the trials are asked again, and
        those whose runs finished are told their kept results, not run again. Without
        it, a folder holding that record (a stopped or finished tuning) is refused.

    Returns
    -------
    dict
        ``rows`` (one per run and trial: run, trial, fields, metric value, state,
        diverged, diverged_round; with seeds also ``<metric>_std``, ``n_seeds``),
        ``best`` ({run: {"params", "value", "trial"}}), ``metric``, ``maximize``,
        ``files``.

    Raises
    ------
    ConfigError
        for a missing Optuna, an empty space, a field that cannot be set, a metric the
        runs do not record, or an unknown sampler; for a record of another tuning in
        ``out`` on ``resume``, naming what differs, and for a record there without
        ``resume``.
    """
    require_optuna()
    import optuna

    space = check_space(space)
    trials = check_int("trials", trials, minimum=1)
    jobs = check_int("jobs", jobs, minimum=1)
    sampler_seed = check_int("sampler_seed", sampler_seed, minimum=0)
    n_seeds = 1 if seeds is None else check_seeds(seeds)
    metric = check_metric("metric", metric)
    if sampler not in SAMPLERS:
        raise fail("sampler", sampler, "must be one of " + ", ".join(SAMPLERS))
    up = best_direction(metric, maximize)
    keys = _run_keys(resolve_runs(config))
    cache: dict = {}
    start = {n: s.first() for n, s in space.items()}
    for name, s in space.items():  # a trial may draw either end of a range, any choice
        for value in s.ends():
            try:
                _runs_at(config, {**start, name: value}, cache, metric)
            except ConfigError as exc:
                raise ConfigError(f"space {name}={s}: {exc}") from None
    first = _runs_at(config, start, cache, metric)
    if seeds:
        check_replicates(first, n_seeds)
    # checked before the trackers prepare their folders: a refused resume leaves ``out``
    record = SearchRecord(out, "tuning", {
        "config": config, "space": {n: str(s) for n, s in space.items()}, "trials": trials,
        "metric": metric, "maximize": up, "seeds": seeds, "jobs": jobs, "sampler": sampler,
        "sampler_seed": sampler_seed, "optuna_version": optuna.__version__},
        resume=resume, results=TUNE_FILES[1:],
        may_change={"trials": lambda there, now: _extension(there, now, jobs, space, sampler)})
    # The header keeps the trials the tuning started with: one extended since (4, then 8)
    # and continued with fewer (6) would pass it, and rewrite the longer tuning's files.
    ran = max((k["trial"] for k in record.keys() if isinstance(k.get("trial"), int)),
              default=-1)
    if ran >= trials:
        raise fail("trials", trials, f"is fewer than the tuning in {out} ran (its "
                   f"{RECORD} holds trial {ran}'s results): a continued tuning may add "
                   f"trials, not remove them; continue it with --trials {ran + 1} or more, "
                   "or choose another folder")
    from ..loggers import resolve_loggers

    trackers = resolve_loggers(loggers, out, experiment=Path(out or "tune").absolute().name)
    for tracker in trackers:
        tracker.prepare()
    if len(record):
        log(f"continuing the tuning in {out} from the {len(record)} runs it finished before")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    studies = [optuna.create_study(direction="maximize" if up else "minimize",
                                   sampler=_sampler(sampler, sampler_seed + i, trials),
                                   study_name=key) for i, key in enumerate(keys)]
    if sampler != "random":
        for i, study in enumerate(studies):
            for point in start_points(space, min(_startup(trials), trials), sampler_seed + i):
                study.enqueue_trial(point)
    n_refine = refine_count(trials, _startup(trials), space) if sampler != "random" else 0
    rows: list[dict] = []
    done = 0
    while done < trials:
        batch = min(jobs, trials - done)
        asked = []  # (run index, trial, point, seeded runs)
        refining = max(0, done + batch - (trials - n_refine))  # this batch's last ones
        for i in range(len(keys)):
            pending: list[dict] = []
            for k in range(batch):
                if k >= batch - refining:
                    step = _refinement(space, rows, keys[i], metric, up, pending,
                                       done + k - (trials - n_refine))
                    if step is not None:
                        studies[i].enqueue_trial(step)
                trial = studies[i].ask()
                point = {name: s.suggest(trial, name) for name, s in space.items()}
                runs = _runs_at(config, point, cache, metric)
                run = runs[i]
                run["slug"] = f"{run['slug'].rsplit('/', 1)[0]}/trial-{trial.number}"
                pending.append(point)
                asked.append((i, trial, point, [with_seed(run, k) if seeds else run
                                                for k in range(n_seeds)]))
        tasks = [r for *_, replicates in asked for r in replicates]
        wheres = [_trial_where(space, keys[i], trial.number, point)
                  for i, trial, point, replicates in asked for _ in replicates]
        run_keys = [{"run": keys[i], "trial": trial.number, "point": point, "replicate": k}
                    for i, trial, point, replicates in asked for k in range(len(replicates))]
        results = _run_batch(record, run_keys, tasks, wheres, metric, jobs, cache, trackers)
        at = 0
        for i, trial, point, replicates in asked:
            res = results[at:at + len(replicates)]
            at += len(replicates)
            for r in res:
                _check_recorded(r, metric, keys[i])
            row = _tell(studies[i], trial, keys[i], point, metric, res, seeds is not None,
                        up)
            rows.append(row)
            log(_trial_line(row, point, metric))
        done += batch
    rows.sort(key=lambda r: (keys.index(r["run"]), r["trial"]))
    best = {key: _best(rows, key, metric, up, seeds is not None) for key in keys}
    table = best_table(best, metric, up, trials)
    log(table)
    files = []
    if out is not None:
        info = {"metric": metric, "maximize": up, "trials": trials, "jobs": jobs,
                "seeds": n_seeds, "sampler": sampler, "sampler_seed": sampler_seed,
                "startup_trials": min(_startup(trials), trials) if sampler != "random" else 0,
                "refine_trials": n_refine,
                "space": {n: str(s) for n, s in space.items()},
                "diverge_factor": DIVERGE_FACTOR, "optuna_version": optuna.__version__,
                "fedsparse_version": _version()}
        files = _write(Path(out), config, rows, best, keys, space, metric, up, info)
    return {"rows": rows, "best": best, "metric": metric, "maximize": up, "files": files,
            "table": table}


def _version() -> str:
    from .. import __version__

    return __version__


def _sampler(kind: str, seed: int, trials: int):
    import optuna

    startup = _startup(trials)
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if kind == "gp":
        # a run is a deterministic function of its config and seeds: no noise to model
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup,
                                             deterministic_objective=True)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup)


def _refinement(space: dict[str, Space], rows: list[dict], key: str, metric: str, up: bool,
                pending: list[dict], k: int) -> dict | None:
    """The ``k``-th refinement trial's point (:func:`.refine.refine_point`), moving the
    ordered fields in turn from the ``k``-th on; None where none has a step to take."""
    tried = [({n: r[n] for n in space}, None if r[metric] is None
              else _score(r[metric], up) * (-1 if up else 1)) for r in rows if r["run"] == key]
    fields = [n for n, s in space.items() if s.kind != "choice"]
    for j in range(len(fields)):
        point = refine_point(space, tried, fields[(k + j) % len(fields)], pending)
        if point is not None:
            return point
    return None


def _plan(trials: int, jobs: int, space: dict[str, Space], sampler: str) -> list[tuple]:
    """What decides each trial of a tuning of ``trials`` trials besides the results told
    before it: the sampler's start-up count, the trial's batch (its first trial and
    size), whether it is a start-up point (and how many there are: they spread over the
    space together) and its refinement index (None: the sampler proposes it)."""
    startup = _startup(trials) if sampler != "random" else 0
    spread = min(startup, trials)
    n_refine = refine_count(trials, startup, space) if sampler != "random" else 0
    plan = []
    for k in range(trials):
        first = k - k % jobs
        refine = k - (trials - n_refine) if k >= trials - n_refine else None
        plan.append((startup, first, min(jobs, trials - first),
                     spread if k < spread else None, refine))
    return plan


def _extension(there: object, now: int, jobs: int, space: dict[str, Space],
               sampler: str) -> str | None:
    """None where a tuning recorded with ``there`` trials may continue with ``now``:
    more trials, the first ``there`` of which are asked as the recorded tuning asked
    them (:func:`_plan`), so that its kept results are told and its files are those of
    a tuning of ``now`` trials; else why not."""
    if not isinstance(there, int) or isinstance(there, bool):
        return None if there == now else "its number of trials is not one fedsparse writes"
    if now < there:
        return "a continued tuning may add trials, not remove them"
    if _plan(now, jobs, space, sampler)[:there] == _plan(there, jobs, space, sampler):
        return None
    return (f"its {there} trials are not the first {there} of a tuning of {now}, which "
            "spreads another number of trials over the space first, refines the best so "
            f"far from another trial on or batches its last trials otherwise: a tuning of "
            f"{now} trials is a new tuning")


def _startup(trials: int) -> int:
    """Start-up trials before a sampler models the results: Optuna's default of 10 would
    leave a small budget all start-up; a quarter of it (2 to 10) is."""
    return max(2, min(10, trials // 4))


class DivergenceGuard:
    """A ``callback(record, state)`` that stops a run whose objective grows past
    :data:`DIVERGE_FACTOR` times its round-1 value, by raising
    :class:`fedsparse.DivergenceError` (so it is recorded as any divergence is)."""

    def __init__(self, factor: float = DIVERGE_FACTOR) -> None:
        self.factor = factor
        self.records: list[dict] = []
        self.reference: float | None = None

    def __call__(self, record: dict, state) -> None:
        value = record.get("objective")
        if isinstance(value, int | float) and math.isfinite(value):
            if self.reference is None and value > 0:
                self.reference = float(value)
            elif self.reference is not None and value > self.factor * self.reference:
                raise DivergenceError(
                    f"round {record['round']}: the objective {value:.4g} grew past "
                    f"{self.factor:g} times its round-1 value {self.reference:.4g}: pruned "
                    "as diverging", History(records=list(self.records),
                                            model=innermost_state(state)["model"].detach().clone()),
                    record["round"])
        self.records.append(record)


def _evaluate(run: dict, metric: str, cache: dict | None = None, loggers=(),
              where: str = "", tracker_runs: list | None = None, note_trackers=None) -> dict:
    """Run one trial's replicate (no files), stopping it if it diverges. ``where`` names
    the trial in a refusal found only once it runs (a value its data set cannot take);
    the trackers are as :func:`.runner.execute_run` takes them."""
    guard = DivergenceGuard()
    try:
        history, error = execute_run(run, None, progress=False, loggers=loggers,
                                     data_cache=_WORKER_DATA if cache is None else cache,
                                     callback=guard, tracker_runs=tracker_runs,
                                     note_trackers=note_trackers)
    except ConfigError as exc:
        raise ConfigError(f"{where}{exc}") from None
    diverged = divergence(history, error, metric)
    return {"value": None if diverged is not None else history.final(metric),
            "diverged_round": diverged, "error": error, "seed": run.get("seed"),
            "recorded": history.recorded()}


def _run_batch(record: SearchRecord, run_keys: list[dict], runs: list[dict],
               wheres: list[str], metric: str, jobs: int, cache: dict, loggers) -> list[dict]:
    """A batch's results: those ``record`` kept, the others run (:func:`_execute`) and
    kept as each finishes."""
    results = [record.result(key) for key in run_keys]
    todo = [k for k, r in enumerate(results) if r is None]

    def finished(m: int, res: dict) -> None:
        results[todo[m]] = res
        record.add(run_keys[todo[m]], res)

    _execute([runs[k] for k in todo], metric, jobs, cache, loggers, [wheres[k] for k in todo],
             finished, tracked_runs(record, [run_keys[k] for k in todo], loggers))
    return results


def _execute(runs: list[dict], metric: str, jobs: int, cache: dict, loggers,
             wheres: list[str], done, tracked: list[tuple]) -> None:
    """Every run (:func:`_evaluate`), ``done(k, result)`` called as run ``k`` finishes;
    ``tracked[k]`` is run ``k``'s ``(tracker_runs, note_trackers)``
    (:func:`.sweep.tracked_runs`)."""
    if not runs:  # a batch whose runs had all finished before a resume
        return
    if jobs == 1 or len(runs) == 1:
        for k, (run, where) in enumerate(zip(runs, wheres, strict=True)):
            done(k, _evaluate(run, metric, cache, loggers, where, *tracked[k]))
        return
    threads = max(1, (os.cpu_count() or 1) // jobs)
    from .sweep import run_in_workers  # as the sweep: stopped at once by Ctrl-C or SIGTERM

    run_in_workers(_evaluate, [(run, metric, None, loggers, where, *t) for run, where, t
                               in zip(runs, wheres, tracked, strict=True)],
                   min(jobs, len(runs)), threads, done)


def _trial_where(space: dict, key: str, number: int, point: dict) -> str:
    """How a refusal names a trial: its space (``space NAME=SPACE``, which the command
    line names ``--param``), its run and its values."""
    spaces = ", ".join(f"space {n}={s}" for n, s in space.items())
    values = ", ".join(f"{n}={v!r}" for n, v in point.items())
    return f"{spaces}: run {key!r}, trial {number} at {values}: "


def _tell(study, trial, key: str, point: dict, metric: str, results: list[dict],
          with_seeds: bool, up: bool) -> dict:
    """Record a trial's row and tell the study its score (:func:`_score`)."""
    import optuna

    gone = [r["diverged_round"] for r in results if r["diverged_round"] is not None]
    s = spread(r["value"] for r in results)
    row = {"run": key, "trial": trial.number, **point, metric: None if gone else s["mean"]}
    if with_seeds:
        row[f"{metric}_std"] = None if gone else s["std"]
        row["n_seeds"] = len(results)
    row["state"] = "pruned" if gone else "complete"
    row["diverged"] = bool(gone)
    row["diverged_round"] = min(gone) if gone else None
    if not gone:
        study.tell(trial, _score(s["mean"], up))
        return row
    # A diverged trial stopped early. The sampler is told it scored as the worst trial so
    # far, so that it learns where the runs diverge (Optuna's samplers would otherwise
    # ignore it); before any trial completed it is told as pruned.
    told = [t.value for t in study.get_trials(deepcopy=False,
                                              states=(optuna.trial.TrialState.COMPLETE,))]
    if told:
        study.tell(trial, min(told) if up else max(told))
    else:
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    return row


def _score(value: float, up: bool) -> float:
    """What the sampler is told: the log of a positive minimised metric (losses span
    decades, and a model of the log is smoother), else the value itself. Monotone, so
    the best trial is the same."""
    return math.log(value) if not up and value > 0 else value


def _best(rows: list[dict], key: str, metric: str, up: bool, with_seeds: bool) -> dict:
    ok = [r for r in rows if r["run"] == key and r[metric] is not None]
    if not ok:
        return {"params": None, "value": None, "diverged": True}
    pick = max if up else min  # the first of equal values: the earlier trial
    row = pick(ok, key=lambda r: r[metric])
    fields = [k for k in row if k not in ("run", "trial", metric, f"{metric}_std", "n_seeds",
                                          "state", "diverged", "diverged_round")]
    best = {"params": {k: row[k] for k in fields}, "value": row[metric], "trial": row["trial"]}
    if with_seeds:
        best.update(std=row[f"{metric}_std"], n=row["n_seeds"])
    return best


def _trial_line(row: dict, point: dict, metric: str) -> str:
    value = f"pruned: diverged at round {row['diverged_round']}" if row["diverged"] \
        else f"{row[metric]:.6g}"
    return f"{row['run']} trial {row['trial']} {point_slug(point)} -> {metric} = {value}"


def best_table(best: dict, metric: str, up: bool, trials: int) -> str:
    """Each run's best trial as text."""
    lines = [f"best {metric} at the last round over {trials} trials per run "
             f"({'higher' if up else 'lower'} is better)"]
    width = max(map(len, best), default=0)
    for key, b in best.items():
        if b["params"] is None:
            lines.append(f"{key.ljust(width)}  every trial diverged")
            continue
        what = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v!r}"
                         for k, v in b["params"].items())
        lines.append(f"{key.ljust(width)}  {b['value']:.6g}  (trial {b['trial']}: {what})")
    return "\n".join(lines)


def _write(out: Path, config: dict, rows, best, keys, space, metric, up, info) -> list[str]:
    from ..report.plots import plot_sweep

    out.mkdir(parents=True, exist_ok=True)
    fieldnames = list(dict.fromkeys(k for r in rows for k in r))
    with open(out / "trials.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows({k: "" if r.get(k) is None else r.get(k) for k in fieldnames}
                         for r in rows)
    with open(out / "best.json", "w") as fh:
        json.dump(strict_json(best), fh, indent=2, allow_nan=False)
    with open(out / "tune.json", "w") as fh:
        json.dump(strict_json(info), fh, indent=2, allow_nan=False)
    files = ["trials.csv", "best.json", "tune.json"]
    field = next((n for n, s in space.items() if s.kind != "choice"), next(iter(space)))
    table = {key: [{"x": r[field], "value": r[metric], "std": r.get(f"{metric}_std"),
                    "diverged": r["diverged"]} for r in rows if r["run"] == key]
             for key in keys}
    title = (f"{config.get('short_title') or config.get('title') or 'tune'}: {metric} at "
             f"the last round, {info['trials']} trials per run ({info['sampler']} sampler, "
             f"{'higher' if up else 'lower'} is better, star = best)")
    if plot_sweep(table, field=field, metric=metric, path=out / "tune.png", maximize=up,
                  title=title):
        files.append("tune.png")
    tuned = tuned_config(config, best, keys, metric, up)
    note = (f"Tuned by fedsparse tune over {', '.join(f'{n} = {s}' for n, s in space.items())}"
            f" ({info['trials']} trials per run, {info['sampler']} sampler, seed "
            f"{info['sampler_seed']}; {metric} at the last round, "
            f"{'maximised' if up else 'minimised'}).")
    tuned["description"] = f"{config.get('description', '')} {note}".strip()
    if any(b["params"] is not None for b in best.values()):  # else there is no winner
        with open(out / "tuned.toml", "wb") as fh:
            tomli_w.dump(tuned, fh)
        files.append("tuned.toml")
    return files
