"""Grid search over any config field (the papers choose step sizes this way)."""

from __future__ import annotations

import csv
import itertools
import json
import math
from collections.abc import Iterable
from pathlib import Path

from .._validation import fail
from .config import resolve_runs, set_path
from .runner import execute_run


def run_sweep(config: dict, grid: dict[str, list], *, out: str | Path | None = None,
              metric: str = "objective", log=print) -> dict:
    """Run every run of ``config`` at every point of ``grid``; pick the best point per run.

    Parameters
    ----------
    grid : {dotted field of a run (e.g. "algorithm.step_size"): list of values}.
    metric : record field compared at the last round; lower is better. A run that
        diverges, or ends with NaN, scores +inf.

    Returns
    -------
    {"rows": [...], "best": {run slug: {"point": {...}, metric: value}}}; with ``out``
    also written as ``sweep.csv`` and ``best.json``.
    """
    if not grid:
        raise fail("grid", grid, "give at least one field with a list of values")
    checked = {}
    for name, values in grid.items():
        listed = [] if isinstance(values, str | bytes | dict) or \
            not isinstance(values, Iterable) else list(values)
        if not listed:  # an empty list would run nothing and leave no row to write
            raise fail(f"grid[{name!r}]", values, "must be a non-empty list of values")
        checked[name] = listed
    grid = checked
    names = list(grid)
    rows, best = [], {}
    data_cache: dict = {}
    for values in itertools.product(*(grid[n] for n in names)):
        point = dict(zip(names, values, strict=True))
        for run in resolve_runs(config):
            for name, value in point.items():
                set_path(run, name, value)
            history, error = execute_run(run, None, data_cache=data_cache, progress=False)
            final = history.records[-1].get(metric) if history.records and not error else None
            score = math.inf if final is None or not math.isfinite(final) else final
            rows.append({"run": run["slug"], **point, metric: score, "diverged": bool(error)})
            log(f"{run['slug']} {point} -> {metric}={score:.6g}{' (diverged)' if error else ''}")
            if score < best.get(run["slug"], {}).get(metric, math.inf) or run["slug"] not in best:
                best[run["slug"]] = {"point": point, metric: score}
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "sweep.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        with open(out / "best.json", "w") as fh:
            json.dump(best, fh, indent=2, default=str)
    return {"rows": rows, "best": best}
