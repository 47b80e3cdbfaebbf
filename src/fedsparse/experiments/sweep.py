"""Grid search over any config field (the papers choose step sizes this way).

``run_sweep(config, {"algorithm.step_size": [1, 0.1, 0.01]}, metric="objective")`` runs
every run of the config at every grid point (optionally over seeds and in parallel
processes), compares the metric at the last round and writes

* ``sweep.csv``: one row per run and grid point (value null/empty when it diverged);
* ``best.json``: ``{run label: {"params": {field: value}, "value": best value}}``;
* ``sweep.png``: the metric against the swept value, one line per run;
* ``tuned.toml``: the config with each run's winning values, so ``fedsparse run
  tuned.toml`` reproduces the winners (not written when every point of every run
  diverged: there is no winner).

The direction follows the metric: accuracy-like metrics (names containing accuracy, f1,
precision or recall) are maximised, everything else (objective, errors, bytes) is
minimised; ``maximize=True/False`` overrides. A grid point where the run diverged (for
any seed) never wins; it is recorded as in :mod:`fedsparse.experiments.seeds`.

Each run (a run of the config at a grid point, for one seed) is kept in ``out`` as it
finishes, in ``finished.jsonl`` (:mod:`fedsparse.experiments.search_record`), so a
stopped sweep continues with ``resume=True`` (``fedsparse sweep ... --resume``): the
runs that finished are read back, not run again, and the files are those of a sweep that
was never stopped. It must be the same sweep: the same config, grid fields, metric and
seeds (another ``maximize`` or ``jobs`` is allowed: neither changes a run's result). The
grid's values may change: a stopped or finished sweep continued with more values runs
only the new points, and its files are those of a sweep of the new grid.
"""

from __future__ import annotations

import copy
import csv
import itertools
import json
import os
from collections.abc import Iterable
from pathlib import Path

import tomli_w

from .._validation import ConfigError, check_int, fail
from ..loggers import resolve_loggers
from .config import METRICS, RUN_KEYS, build_algorithm, build_problem, check_metric, resolve_runs
from .run_selection import apply_overrides, set_path
from .runner import _data, execute_run, recordable_metrics
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
from .workers import run_in_workers

#: The files a sweep writes into its output folder (the record of its finished runs as
#: they finish, the others at its end).
SWEEP_FILES = (RECORD, "sweep.csv", "best.json", "sweep.png", "tuned.toml")
#: Data sets built by a worker process of a parallel sweep, reused by its later points.
_WORKER_DATA: dict = {}


def run_sweep(config: dict, grid: dict[str, list], *, out: str | Path | None = None,
              metric: str = "objective", maximize: bool | None = None,
              seeds: int | None = None, jobs: int = 1, log=print, loggers=None,
              resume: bool = False) -> dict:
    """Run every run of ``config`` at every point of ``grid``; pick the best point per run.

    Parameters
    ----------
    config : an experiment config (:mod:`fedsparse.experiments.config`).
    grid : {dotted field of a run (e.g. "algorithm.step_size"): list of values}; the
        points are every combination.
    out : folder for ``sweep.csv``, ``best.json``, ``sweep.png`` and ``tuned.toml``, and
        for ``finished.jsonl``, which keeps each run as it finishes.
    metric : record field compared at the last round.
    maximize : True to maximise, False to minimise; None = by the metric's name
        (accuracy, f1, precision, recall: maximised; the rest minimised).
    seeds : run each point over this many seeds (:func:`.seeds.with_seed`) and compare
        the mean; a point diverged if any seed diverged.
    jobs : grid points run in this many worker processes (spawned, at most one per
        CPU; each uses ``cpu_count // jobs`` torch threads). Every point is a function of
        its config and seeds only, so the results are those of a serial sweep.
    log : called with each progress line and the pivot table.
    loggers : experiment trackers (:func:`fedsparse.loggers.resolve_loggers`) that get
        every run at every point (and seed) as a run named ``<run>/<field>=<value>``,
        their files under ``out`` (a continued sweep logs only the runs it runs).
    resume : continue the sweep stopped (or extend the one finished) in ``out``: its
        finished runs are read back from ``finished.jsonl`` and not run again; the grid
        may hold other values of the same fields. Without it, a folder holding that
        record (a stopped or finished sweep) is refused.

    Returns
    -------
    dict
        ``rows`` (one per run and point: run, grid fields, metric value, diverged,
        diverged_round; with seeds also ``<metric>_std`` and ``n_seeds``), ``best``
        ({run: {"params", "value"}}), ``pivot`` (the printed table), ``metric``,
        ``maximize``, ``files`` (names written to ``out``).

    Raises
    ------
    ConfigError
        for an empty grid or value list, a field that cannot be set, a run that cannot
        be built at some point, or a metric the runs do not record (listing those they
        do); for a record of another sweep in ``out`` on ``resume``, naming what differs,
        and for a record there without ``resume``.
    """
    grid = _check_grid(grid)
    jobs = check_int("jobs", jobs, minimum=1)
    n_seeds = 1 if seeds is None else check_seeds(seeds)
    metric = check_metric("metric", metric)
    up = best_direction(metric, maximize)
    names = list(grid)
    points = [dict(zip(names, values, strict=True))
              for values in itertools.product(*(grid[n] for n in names))]
    base_runs = resolve_runs(config)
    keys = _run_keys(base_runs)
    cache: dict = {}
    point_runs = [_runs_at(config, point, cache, metric) for point in points]
    if seeds:
        check_replicates([run for runs in point_runs for run in runs], n_seeds,
                         kept=max(point_runs, key=lambda runs: sum(r["rounds"] for r in runs)))
    tasks = [(p, i, with_seed(run, k) if seeds else run)
             for p, runs in enumerate(point_runs) for i, run in enumerate(runs)
             for k in range(n_seeds)]
    record = SearchRecord(out, "sweep", {"config": config, "grid": grid,
                                         "metric": metric, "seeds": seeds},
                          resume=resume, results=SWEEP_FILES[1:], open_values="grid")
    run_keys = [{"point": points[p], "run": keys[i], "replicate": k % n_seeds}
                for k, (p, i, _) in enumerate(tasks)]
    trackers = resolve_loggers(loggers, out, experiment=Path(out or "sweep").absolute().name)
    for tracker in trackers:
        tracker.prepare()
    finished: dict[tuple[int, int], dict[int, dict]] = {}

    def done(k: int, res: dict) -> None:
        """A line for each (point, run) as soon as its seeds have all run, so that a long
        sweep shows its progress (in parallel, in the order the cells finish)."""
        p, i, _ = tasks[k]
        _check_recorded(res, metric, keys[i])
        if record.result(run_keys[k]) is None:
            record.add(run_keys[k], res)
        cell = finished.setdefault((p, i), {})
        cell[k] = res
        if len(cell) == n_seeds:  # every cell is n_seeds tasks
            row = _row(keys[i], points[p], metric, [cell[j] for j in sorted(cell)],
                       seeds is not None)
            log(_progress_line(row, points[p], metric))

    kept = {k: r for k in range(len(tasks)) if (r := record.result(run_keys[k])) is not None}
    if kept:
        log(f"continuing the sweep in {out}: {len(kept)} of {len(tasks)} runs finished "
            f"before, {len(tasks) - len(kept)} to run")
    for k, res in kept.items():
        done(k, res)
    todo = [k for k in range(len(tasks)) if k not in kept]
    _execute([tasks[k][2] for k in todo], metric, jobs, cache, trackers,
             lambda m, res: done(todo[m], res),
             tracked_runs(record, [run_keys[k] for k in todo], trackers))
    rows, best = [], {}
    for p, point in enumerate(points):
        for i, key in enumerate(keys):  # the seeds of a cell in task order, as they ran
            cell = finished[(p, i)]
            rows.append(_row(key, point, metric, [cell[j] for j in sorted(cell)],
                             seeds is not None))
    for i, key in enumerate(keys):
        cells = [(points[p], rows[p * len(keys) + i]) for p in range(len(points))]
        best[key] = _best(cells, metric, up, seeds is not None)
    pivot = pivot_table(rows, points, keys, metric, best, up)
    log(pivot)
    files = []
    if out is not None:
        files = _write(Path(out), config, rows, best, points, keys, names, metric, up,
                       n_seeds)
    return {"rows": rows, "best": best, "pivot": pivot, "metric": metric, "maximize": up,
            "files": files}


def _check_grid(grid) -> dict[str, list]:
    if not isinstance(grid, dict) or not grid:
        raise fail("grid", grid, "give at least one field with a list of values")
    checked = {}
    settable = sorted(RUN_KEYS - {"label", "panel"})
    for name, values in grid.items():
        if not isinstance(name, str) or name.split(".")[0] not in settable:
            raise fail("grid field", name, "must be a run field such as algorithm.step_size;"
                       " it starts with one of " + ", ".join(settable))
        listed = [] if isinstance(values, str | bytes | dict) or \
            not isinstance(values, Iterable) else list(values)
        if not listed:  # an empty list would run nothing and leave no row to write
            raise fail(f"grid[{name!r}]", values, "must be a non-empty list of values")
        checked[name] = listed
    return checked


def _run_keys(runs: list[dict]) -> list[str]:
    """Each run's name in the outputs: its label, or "panel / label" where labels repeat
    across panels."""
    labels = [r["label"] for r in runs]
    return [r["label"] if labels.count(r["label"]) == 1 else f"{r['panel']} / {r['label']}"
            for r in runs]


def _runs_at(config: dict, point: dict, cache: dict, metric: str) -> list[dict]:
    """The resolved runs at one grid point, each buildable and recording ``metric``
    (checked before anything runs)."""
    try:  # the point's values pass the checks of the config's own (rounds >= 1, ...)
        runs = resolve_runs(apply_overrides(config, point.items()))
    except ConfigError as exc:
        raise ConfigError(f"at {_point_text(point)}: {exc}") from None
    for run in runs:
        where = f"run {run['label']!r} at {_point_text(point)}"
        run["slug"] = f"{run['slug']}/{point_slug(point)}"  # the run's name in trackers
        try:
            data = _data(run, cache)
            problem = build_problem(run["problem"])
            algorithm = build_algorithm(run["algorithm"])
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        recorded = recordable_metrics(data, problem, algorithm)
        if metric not in recorded:
            raise fail("metric", metric, f"{where} does not record it; it records "
                       + ", ".join(m for m in METRICS if m in recorded))
    return runs


def _execute(runs: list[dict], metric: str, jobs: int, cache: dict, loggers, done,
             tracked: list[tuple]) -> None:
    """Every run (:func:`_evaluate`), ``done(k, result)`` called as run ``k`` finishes;
    ``tracked[k]`` is run ``k``'s ``(tracker_runs, note_trackers)``
    (:func:`tracked_runs`)."""
    if not runs:  # a continued sweep whose runs had all finished
        return
    if jobs == 1 or len(runs) == 1:
        for k, run in enumerate(runs):
            done(k, _evaluate(run, metric, cache, loggers, *tracked[k]))
        return
    jobs = min(jobs, len(runs))
    cache.clear()  # the workers build their own data; free the copies the checks built
    threads = max(1, (os.cpu_count() or 1) // jobs)
    run_in_workers(_evaluate, [(run, metric, None, loggers, *t)
                               for run, t in zip(runs, tracked, strict=True)],
                   jobs, threads, done)


def _evaluate(run: dict, metric: str, cache: dict | None = None, loggers=(),
              tracker_runs: list | None = None, note_trackers=None) -> dict:
    """Simulate one run (no files) and keep what the sweep compares; its trackers as
    :func:`.runner.execute_run` takes them."""
    history, error = execute_run(run, None, data_cache=_WORKER_DATA if cache is None else cache,
                                 progress=False, loggers=loggers, tracker_runs=tracker_runs,
                                 note_trackers=note_trackers)
    diverged = divergence(history, error, metric)
    return {"value": None if diverged is not None else history.final(metric),
            "diverged_round": diverged, "error": error, "seed": run.get("seed"),
            "recorded": history.recorded()}


def tracked_runs(record: SearchRecord, run_keys: list[dict], trackers) -> list[tuple]:
    """Each run's ``(tracker_runs, note_trackers)``: the tracker runs an earlier attempt
    of it opened, kept in ``record``, and the function that keeps those it opens now
    (a search's runs keep no checkpoint: a run stopped mid-run runs again from round 0,
    and so continues its tracker runs rather than open a second run of its name)."""
    if not trackers:
        return [(None, None)] * len(run_keys)
    return [(record.trackers(key), record.tracker_note(key)) for key in run_keys]


def _check_recorded(res: dict, metric: str, key: str) -> None:
    if res["diverged_round"] is None and res["value"] is None:
        raise fail("metric", metric, f"run {key!r} has no value of it at the last round; "
                   "it records " + ", ".join(res["recorded"]))


def _row(key: str, point: dict, metric: str, results: list[dict], with_seeds: bool) -> dict:
    gone = [r["diverged_round"] for r in results if r["diverged_round"] is not None]
    s = spread(r["value"] for r in results)
    row = {"run": key, **point, metric: None if gone else s["mean"]}
    if with_seeds:
        row[f"{metric}_std"] = None if gone else s["std"]
        row["n_seeds"] = len(results)
        row["diverged_seeds"] = len(gone)
    row["diverged"] = bool(gone)
    row["diverged_round"] = min(gone) if gone else None
    return row


def _best(cells: list[tuple[dict, dict]], metric: str, up: bool, with_seeds: bool) -> dict:
    ok = [(point, row) for point, row in cells if row[metric] is not None]
    if not ok:
        return {"params": None, "value": None, "diverged": True}
    # max/min keep the first of equal values: ties go to the earlier grid point
    pick = max if up else min
    point, row = pick(ok, key=lambda c: c[1][metric])
    best = {"params": dict(point), "value": row[metric]}
    if with_seeds:
        best.update(std=row[f"{metric}_std"], n=row["n_seeds"])
    return best


def point_slug(point: dict) -> str:
    """A grid point as a folder name: ``step_size=0.1,local_steps=5``."""
    return ",".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in point.items()).replace("/", "-")


def _point_text(point: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in point.items())


def _column_name(point: dict) -> str:
    if len(point) == 1:
        return f"{next(iter(point.values()))!r}"
    return ", ".join(f"{k.rsplit('.', 1)[-1]}={v!r}" for k, v in point.items())


def _progress_line(row: dict, point: dict, metric: str) -> str:
    value = "diverged at round " + str(row["diverged_round"]) if row["diverged"] \
        else f"{row[metric]:.6g}"
    return f"{row['run']} {_point_text(point)} -> {metric} = {value}"


def pivot_table(rows: list[dict], points: list[dict], keys: list[str], metric: str,
                best: dict, up: bool) -> str:
    """The sweep as text: one line per run, one column per grid point, ``*`` on each run's
    best point, ``div@r`` where the run diverged at round r; over seeds each cell is
    ``mean±std`` (sample standard deviation)."""
    n_seeds = max((r.get("n_seeds", 1) for r in rows), default=1)
    header = ["run"] + [_column_name(p) for p in points]
    table = [header]
    for i, key in enumerate(keys):
        line = [key]
        for p in range(len(points)):
            row = rows[p * len(keys) + i]
            if row["diverged"]:
                line.append(f"div@{row['diverged_round']}")
                continue
            mark = "*" if best[key]["params"] == points[p] else ""
            std = row.get(f"{metric}_std") if n_seeds > 1 else None
            line.append(f"{row[metric]:.4g}" + (f"±{std:.2g}" if std is not None else "")
                        + mark)
        table.append(line)
    widths = [max(len(r[c]) for r in table) for c in range(len(header))]
    fields = ", ".join(points[0]) if points else ""
    spread_note = f", mean ± std over {n_seeds} seeds" if n_seeds > 1 else ""
    title = (f"{metric} at the last round by {fields}{spread_note} ({'higher' if up else 'lower'}"
             " is better; * = best per run, div@r = diverged at round r)")
    lines = ["  ".join(cell.rjust(w) if c else cell.ljust(w) for c, (cell, w) in
                       enumerate(zip(r, widths, strict=True))) for r in table]
    return "\n".join([title, *lines])


def _write(out: Path, config: dict, rows, best, points, keys, names, metric, up,
           n_seeds) -> list[str]:
    from ..report.plots import plot_sweep

    out.mkdir(parents=True, exist_ok=True)
    with open(out / "sweep.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in r.items()} for r in rows)
    with open(out / "best.json", "w") as fh:
        json.dump(strict_json(best), fh, indent=2, allow_nan=False)
    files = ["sweep.csv", "best.json"]
    if plot_sweep(_plot_table(rows, points, keys, names, metric), field=_plot_field(points,
                  names), metric=metric, path=out / "sweep.png", maximize=up,
                  title=_plot_title(config, metric, up, n_seeds)):
        files.append("sweep.png")
    if any(b["params"] is not None for b in best.values()):  # else there is no winner
        with open(out / "tuned.toml", "wb") as fh:
            tomli_w.dump(tuned_config(config, best, keys, metric, up), fh)
        files.append("tuned.toml")
    return files


def _plot_field(points: list[dict], names: list[str]) -> str:
    """The field on the sweep plot's x axis: the first numeric one (else the first)."""
    for name in names:
        if all(isinstance(p[name], int | float) and not isinstance(p[name], bool)
               for p in points):
            return name
    return names[0]


def _plot_table(rows, points, keys, names, metric) -> dict[str, list[dict]]:
    field = _plot_field(points, names)
    others = [n for n in names if n != field]
    table: dict[str, list[dict]] = {}
    for p, point in enumerate(points):
        for i, key in enumerate(keys):
            row = rows[p * len(keys) + i]
            rest = ", ".join(f"{n.rsplit('.', 1)[-1]}={point[n]!r}" for n in others)
            label = f"{key} ({rest})" if rest else key
            table.setdefault(label, []).append({
                "x": point[field], "value": row[metric], "std": row.get(f"{metric}_std"),
                "diverged": row["diverged"]})
    return table


def _plot_title(config: dict, metric: str, up: bool, n_seeds: int) -> str:
    what = config.get("short_title") or config.get("title") or "sweep"
    spread_note = f"; mean ± std over {n_seeds} seeds" if n_seeds > 1 else ""
    return (f"{what}: {metric} at the last round ({'higher' if up else 'lower'} is better, "
            f"star = best{spread_note})")


def tuned_config(config: dict, best: dict, keys: list[str], metric: str, up: bool) -> dict:
    """``config`` with each run's winning grid values set on the run itself; a run
    whose every point diverged keeps its values."""
    tuned = copy.deepcopy(config)
    for key, run in zip(keys, tuned["runs"], strict=True):
        for name, value in (best[key]["params"] or {}).items():
            set_path(run, name, value)
    fields = sorted({n for b in best.values() for n in (b["params"] or {})})
    note = (f"Tuned by fedsparse sweep over {', '.join(fields) or 'nothing'} "
            f"({metric} at the last round, {'maximised' if up else 'minimised'}).")
    tuned["description"] = f"{config.get('description', '')} {note}".strip()
    return tuned
