"""Run an experiment config: every run, its files, the plots and a summary."""

from __future__ import annotations

import json
import math
import time
import warnings
from pathlib import Path

import tomli_w

from .._validation import fail
from ..history import History
from ..report.plots import plot_panels
from ..simulate import DivergenceError, simulate
from .config import (
    DTYPES,
    build_algorithm,
    build_channel,
    build_data,
    build_problem,
    resolve_runs,
)


def _data_key(run: dict) -> str:
    return json.dumps([run["data"], run["dtype"]], sort_keys=True)


def execute_run(run: dict, out: Path | None, *, data_cache: dict, resume: bool = False,
                progress: bool | None = None) -> tuple[History, str | None]:
    """Build and simulate one resolved run; returns (history, divergence message or None)."""
    key = _data_key(run)
    if key not in data_cache:
        data_cache[key] = build_data(run["data"], DTYPES[run["dtype"]])
    data = data_cache[key]
    problem = build_problem(run["problem"])
    algorithm = build_algorithm(run["algorithm"])
    run_dir = None if out is None else out / run["slug"]
    checkpoint = None if run_dir is None else run_dir / "checkpoint.pt"
    try:
        history = simulate(algorithm, problem, data, rounds=run["rounds"], seed=run["seed"],
                           clients_per_round=run.get("clients_per_round"),
                           channel=build_channel(run.get("channel")), checkpoint=checkpoint,
                           checkpoint_every=run.get("checkpoint_every", 10), resume=resume,
                           progress=progress)
        error = None
    except DivergenceError as exc:
        history, error = exc.history, str(exc)
    if run_dir is not None:
        history.save(run_dir)
    return history, error


def rounds_to_reach(history: History, target: float, metric: str = "objective") -> int | None:
    """First round whose ``metric`` is at most ``target`` (None if never)."""
    for r in history.records:
        v = r.get(metric)
        if v is not None and v <= target:
            return r["round"]
    return None


def _comparisons(config: dict, panels: dict[str, dict[str, History]]) -> list[dict]:
    """``[compare] reference = LABEL, at_rounds = [...], metric = "objective"``: in each panel,
    how many rounds every other run needs to reach the reference run's value at those rounds."""
    spec = config.get("compare")
    if not spec:
        return []
    metric = spec.get("metric", "objective")
    rows = []
    for panel, runs in panels.items():
        ref = runs.get(spec["reference"])
        if ref is None:
            continue
        for at in spec.get("at_rounds", [len(ref.records)]):
            if at > len(ref.records):
                continue
            target = ref.records[at - 1][metric]
            for label, h in runs.items():
                if label != spec["reference"]:
                    rows.append({"panel": panel, "reference": spec["reference"],
                                 "reference_round": at, "target": target, "run": label,
                                 "rounds_needed": rounds_to_reach(h, target, metric)})
    return rows


def run_experiment(config: dict, out: str | Path, *, resume: bool = False,
                   progress: bool | None = None, log=print) -> dict:
    """Run every run of ``config``, write its outputs under ``out``, return the summary.

    Writes ``out/<run>/history.{jsonl,csv}``, ``model.npy`` and ``checkpoint.pt`` per run,
    ``out/config.toml`` (the resolved config), ``out/<y>_vs_<x>.png`` and
    ``out/summary.json``.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs = resolve_runs(config)
    if config.get("compare") and "reference" not in config["compare"]:  # before hours of runs
        raise fail("compare.reference", None, "must name the label of the run to compare with")
    with open(out / "config.toml", "wb") as fh:
        tomli_w.dump({k: v for k, v in config.items() if k != "runs"} | {
            "runs": [{k: v for k, v in r.items() if k != "slug"} for r in runs]}, fh)
    panels: dict[str, dict[str, History]] = {}
    summary_runs = []
    data_cache: dict = {}
    tic = time.perf_counter()
    for run in runs:
        history, error = execute_run(run, out, data_cache=data_cache, resume=resume,
                                     progress=progress)
        panels.setdefault(run["panel"], {})[run["label"]] = history
        final = history.records[-1] if history.records else history.initial
        row = {"label": run["label"], "panel": run["panel"], "dir": run["slug"],
               "rounds": len(history.records), "diverged": error,
               **{k: final.get(k) for k in ("objective", "rel_error", "support_f1", "accuracy",
                                            "test_accuracy", "density", "bytes_total",
                                            "elapsed")}}
        summary_runs.append(row)
        if error:
            warnings.warn(f"{run['slug']}: {error}", RuntimeWarning, stacklevel=2)
        log(_format_row(row))
    plot = config.get("plot", {})
    plots = []
    # rel. error is plotted wherever a ground truth makes it defined
    for y in dict.fromkeys([*plot.get("y", ["objective"]), "rel_error"]):
        for x in plot.get("x", ["round", "bytes_total"]):
            path = out / f"{y}_vs_{x}.png"
            if plot_panels(panels, y=y, x=x, path=path, logy=plot.get("logy", False),
                           title=config.get("title", "")):
                plots.append(path.name)
    summary = {"title": config.get("title", ""), "paper_claim": config.get("paper_claim", ""),
               "runs": summary_runs, "comparisons": _comparisons(config, panels),
               "plots": plots, "seconds": time.perf_counter() - tic}
    with open(out / "summary.json", "w") as fh:
        json.dump(summary, fh, indent=2, default=_json_default)
    for c in summary["comparisons"]:
        log(f"  [{c['panel']}] {c['run']} reaches {c['reference']}'s round-"
            f"{c['reference_round']} objective {c['target']:.4g} at round {c['rounds_needed']}")
    return summary


def _json_default(v):
    return None if isinstance(v, float) and not math.isfinite(v) else str(v)


def _format_row(row: dict) -> str:
    parts = [f"{(row['panel'] + ' / ') if row['panel'] else ''}{row['label']}:",
             f"rounds={row['rounds']}"]
    for k in ("objective", "rel_error", "accuracy", "test_accuracy", "density"):
        if row.get(k) is not None:
            parts.append(f"{k}={row[k]:.4g}")
    parts.append(f"bytes={row['bytes_total']}")
    if row["diverged"]:
        parts.append("DIVERGED")
    return " ".join(parts)
