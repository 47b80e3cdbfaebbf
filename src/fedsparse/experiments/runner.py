"""Run an experiment config: every run, its files, the plots and a summary.

The output folder is guarded (:mod:`.output`: :func:`prepare_output`,
:func:`output_guard`, importable from here as well): results already in it are never
replaced silently, and a run that fails leaves either nothing or a ``FAILED`` file
saying what went wrong.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from pathlib import Path

import tomli_w

from .. import __version__
from .._validation import ConfigError, fail
from ..channels import checked_channel
from ..data.lazy import LazyFederatedDataset
from ..devices import DEFAULT_DEVICE, device_info, devices_info, resolve_device
from ..history import History
from ..loggers import resolve_loggers, track_run
from ..metric_names import higher_is_better
from ..report.plots import plot_panels
from ..simulate import DivergenceError, simulate
from .claims import format_verdicts, rounds_to_reach, verdicts
from .config import (
    DTYPES,
    METRICS,
    build_algorithm,
    build_channel,
    build_data,
    build_problem,
    resolve_runs,
)
from .output import (
    FAILED,
    MARKER,
    RUN_FILES,
    check_out_dir,
    failed_text,
    has_output,
    output_guard,
    output_patterns,
    plot_names,
    prepare_output,
)
from .seeds import check_replicates, check_seeds, report_row, run_seeds, strict_json

__all__ = ["FAILED", "MARKER", "RUN_FILES", "check_out_dir", "check_runs_buildable",
           "data_key", "data_seed", "execute_run", "failed_text", "format_comparison",
           "has_output", "higher_is_better", "output_guard", "output_patterns", "plot_names",
           "prepare_output", "recordable_metrics", "rounds_to_reach", "run_device",
           "run_experiment", "tracked_params"]

#: The record fields of :data:`METRICS` that only some algorithms record (their
#: ``client_metrics`` and ``round_metric_names``).
_DIAGNOSTICS = {"inner_iterations", "compensated", "dropped", "mask_density"}
#: Metrics that only some runs record (the rest are recorded by every run).
_CONDITIONAL = {"accuracy", "test_objective", "test_accuracy", "rel_error",
                "support_precision", "support_recall", "support_f1", "personal_objective",
                "personal_accuracy", "personal_test_objective", "personal_test_accuracy"}


def data_seed(run: dict) -> int | None:
    """The data seed of a resolved run: ``data.seed``, or its generator's default (None for
    data read from files without a seed)."""
    from .seeds import _default_data_seed

    data = run.get("data", {})
    return data.get("seed", _default_data_seed(data.get("kind")))


def data_key(run: dict) -> str:
    """What identifies a resolved run's data set: runs with equal keys share one."""
    return json.dumps([run["data"], run["dtype"]], sort_keys=True)


def run_device(run: dict):
    """The torch device a resolved run computes on (its ``device``, default the CPU)."""
    return resolve_device(run.get("device", DEFAULT_DEVICE), "device")


def _data_on(run: dict, data_cache: dict, device):
    """The run's data on ``device``: built once (on the CPU) and moved once per device,
    so the runs of an experiment that share a data set share one copy on the GPU."""
    data = _data(run, data_cache)
    if device.type == "cpu":
        return data
    key = (data_key(run), str(device))
    if key not in data_cache:
        data_cache[key] = data.to_device(device)
    return data_cache[key]


def execute_run(run: dict, out: Path | None, *, data_cache: dict, resume: bool = False,
                progress: bool | None = None, loggers=None, callback=None,
                eval_every: int = 1, prepare_data=None, tracker_runs: list | None = None,
                note_trackers=None) -> tuple[History, str | None]:
    """Build and simulate one resolved run; returns (history, divergence message or None).

    ``loggers`` (:mod:`fedsparse.loggers`) track it under its folder name with its
    hyper-parameters; a search's run, which keeps no checkpoint, passes the tracker runs
    an earlier attempt of it opened (``tracker_runs``, that attempt's
    :meth:`fedsparse.loggers.Tracking.identities`), which the run continues from round 0,
    and ``note_trackers(identities)``, called once the trackers are open, to keep
    them. ``callback(record, state)`` is called after every round; the models
    are evaluated every ``eval_every`` rounds and at the last. ``prepare_data(run, data)``,
    if given, returns the data this run uses instead of the cached data set (which it
    must not change), e.g. the data with other client weights."""
    device = run_device(run)
    data = _data_on(run, data_cache, device)
    if prepare_data is not None:
        data = prepare_data(run, data)
    problem = build_problem(run["problem"])
    algorithm = build_algorithm(run["algorithm"])
    run_dir = None if out is None else out / run["slug"]
    checkpoint = None if run_dir is None else run_dir / "checkpoint.pt"
    if resume and run_dir is not None and (run_dir / "history.jsonl").exists() \
            and not checkpoint.exists():  # every run that wrote its history left one
        raise ConfigError(f"{run_dir} holds the run's history but not its checkpoint.pt "
                          "(deleted or moved): resuming would start the run again from "
                          "round 0. Restore the file, or start again (--force on the "
                          "command line)")
    tracking = track_run(loggers, run["slug"], tracked_params(run), callback)
    try:
        if tracking.loggers and (tracker_runs is not None or note_trackers is not None):
            # opened here, not by simulate (which then leaves them open as they are): a
            # stopped attempt's tracker runs are continued, each round logged in them once
            tracking.open(None if tracker_runs is None else 0, tracker_runs)
            if note_trackers is not None:
                note_trackers(tracking.identities())
        history = simulate(algorithm, problem, data, rounds=run["rounds"], seed=run["seed"],
                           clients_per_round=run.get("clients_per_round"),
                           channel=build_channel(run.get("channel")), checkpoint=checkpoint,
                           checkpoint_every=run.get("checkpoint_every", 10), resume=resume,
                           progress=progress, loggers=tracking, device=device,
                           eval_every=eval_every, eval_clients=run.get("eval_clients"),
                           client_state_memory=run.get("client_state_memory"))
        error = None
    except DivergenceError as exc:
        history, error = exc.history, str(exc)
    except BaseException as exc:
        tracking.close(None, exc)  # (simulate closes it, unless it failed before its rounds)
        raise
    if run_dir is not None:
        history.save(run_dir, overwrite=True)  # the output folder guards earlier runs
    return history, error


def tracked_params(run: dict) -> dict:
    """What a tracker records of a resolved run: its label, panel, hyper-parameters
    (summary.json's ``params``) and device."""
    from .seeds import PARAM_KEYS

    return {"label": run.get("label", ""), "panel": run.get("panel", ""),
            **{k: run[k] for k in (*PARAM_KEYS, "device") if k in run}}


def recordable_metrics(data, problem, algorithm=None) -> set[str]:
    """The record fields a run on ``data`` with ``problem`` (and ``algorithm``) can fill.

    Accuracy needs a classification problem, test metrics a test split, the relative
    error and support scores a ground truth, the ``personal_*`` metrics an algorithm with
    personalised models (one that overrides ``Algorithm.personalized``); the other fields
    of :data:`METRICS` are recorded by every run, and an algorithm's diagnostics by the
    algorithms that declare them.
    """
    from ..algorithms.base import Algorithm

    names = set(METRICS) - _CONDITIONAL
    classification = getattr(problem, "task", "") == "classification"
    test = getattr(data, "test", None) is not None
    if classification:
        names.add("accuracy")
    if test:
        names.add("test_objective")
        if classification:
            names.add("test_accuracy")
    if getattr(data, "ground_truth", None) is not None:
        names |= {"rel_error", "support_precision", "support_recall", "support_f1"}
    # an algorithm's own diagnostics: those it declares, never another algorithm's
    names -= _DIAGNOSTICS
    if algorithm is not None:
        names |= _DIAGNOSTICS & {*algorithm.client_metrics, *algorithm.round_metric_names}
    personal = getattr(type(algorithm), "personalized", None)
    if algorithm is not None and personal is not Algorithm.personalized:
        names.add("personal_objective")
        names |= {"personal_accuracy"} if classification else set()
        names |= {"personal_test_objective"} if test else set()
        names |= {"personal_test_accuracy"} if test and classification else set()
    return names


def check_runs_buildable(config: dict, runs: list[dict], data_cache: dict) -> None:
    """Build every run's data, problem and algorithm, and check the metrics that
    ``[plot]`` names are recorded by some run, and those of ``[compare]`` and
    ``[[claims]]`` by the runs they compare -- before any run starts, so a mistake in the
    last run does not surface hours later.

    Raises
    ------
    ConfigError
        naming the run and the table that cannot be built, or the metric no run records.
    """
    recorded: dict[str, set[str]] = {}
    for run in runs:
        try:
            data = _data(run, data_cache)
            problem = build_problem(run["problem"])
            # the labels against the loss, as the run will check them at its start
            problem.check_data(data.probe() if isinstance(data, LazyFederatedDataset)
                               else data)
            algorithm = build_algorithm(run["algorithm"])
            channel = build_channel(run.get("channel"))
            if channel is not None:
                try:  # per-client arguments against the data's clients, now, not at its turn
                    checked_channel(channel, data.num_clients, run["rounds"])
                except ConfigError as exc:
                    raise ConfigError(f"channel: {exc}") from None
            cpr = run.get("clients_per_round")
            if cpr is not None and cpr > data.num_clients:
                raise fail("clients_per_round", cpr, "must be at most the number of clients "
                           f"{data.num_clients}")
        except ConfigError as exc:
            raise ConfigError(f"run {run['label']!r}: {exc}") from None
        recorded[run["label"]] = recorded.get(run["label"], set()) | \
            recordable_metrics(data, problem, algorithm)
    every = set().union(*recorded.values())
    plot = config.get("plot", {})
    for axis in ("y", "x"):
        for name in plot.get(axis, []):
            if name not in every:
                raise fail(f"plot.{axis}", name, "no run records it; these runs record "
                           + ", ".join(m for m in METRICS if m in every))
    for i, claim in enumerate(config.get("claims", [])):
        metric = claim.get("metric", "objective")
        for label in claim.get("runs") or [claim[k] for k in ("run", "reference")]:
            if metric not in recorded.get(label, {metric}):  # (labels: check_claim_labels)
                raise fail(f"claims[{i}].metric", metric, f"the run {label!r} does not record "
                           "it; it records " + ", ".join(m for m in METRICS
                                                         if m in recorded[label]))
    compare = config.get("compare")
    if compare:
        metric = compare.get("metric", "objective")
        ref = recorded[compare["reference"]]
        if metric not in ref:
            raise fail("compare.metric", metric, f"the reference run "
                       f"{compare['reference']!r} does not record it; it records "
                       + ", ".join(m for m in METRICS if m in ref))


def _data(run: dict, data_cache: dict):
    key = data_key(run)
    if key not in data_cache:
        data_cache[key] = build_data(run["data"], DTYPES[run["dtype"]])
    return data_cache[key]


def _comparisons(config: dict, panels: dict[str, dict[str, History]],
                 notes: list[str] | None = None) -> list[dict]:
    """``[compare] reference = LABEL, at_rounds = [...], metric = "objective"``: in each panel,
    how many rounds every other run needs to reach the reference run's value at those rounds.

    A round the reference did not run (a shorter ``--rounds``, or a divergence) is not
    compared; ``notes`` receives one line saying so."""
    notes = [] if notes is None else notes
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
            if at > len(ref.records):  # a shorter run (--rounds), or the reference diverged
                notes.append(f"  {f'[{panel}] ' if panel else ''}no comparison at round "
                             f"{at}: {spec['reference']} ran {len(ref.records)} rounds")
                continue
            target = ref.records[at - 1].get(metric)
            if target is None:
                continue
            for label, h in runs.items():
                if label != spec["reference"]:
                    rows.append({"panel": panel, "reference": spec["reference"],
                                 "reference_round": at, "metric": metric, "target": target,
                                 "run": label, "rounds_run": len(h.records),
                                 "rounds_needed": rounds_to_reach(h, target, metric)})
    return rows


def format_comparison(c: dict) -> str:
    """One line: the round a run reaches the reference's value, or that it does not."""
    metric = c.get("metric", "objective")
    what = f"{c['reference']}'s round-{c['reference_round']} {metric} {c['target']:.4g}"
    where = f"  [{c['panel']}] " if c["panel"] else "  "
    if c["rounds_needed"] is None:
        return (f"{where}{c['run']} does not reach {what}: not reached within "
                f"{c.get('rounds_run', '?')} rounds")
    return f"{where}{c['run']} reaches {what} at round {c['rounds_needed']}"


def run_experiment(config: dict, out: str | Path, *, resume: bool = False,
                   progress: bool | None = None, log=print, seeds: int | None = None,
                   loggers=None, data_cache: dict | None = None) -> dict:
    """Run every run of ``config``, write its outputs under ``out``, return the summary.

    Writes ``out/<run>/history.{jsonl,csv}``, ``model.npy``, ``config.json``,
    ``checkpoint.pt`` (and ``personal_models.npy`` for personalised algorithms) per run,
    ``out/config.toml`` (the resolved config), ``out/<y>_vs_<x>.png`` and
    ``out/summary.json`` (strict JSON; each run's hyper-parameters under ``params``).
    With ``seeds=n`` every run is repeated over n seeds (:mod:`.seeds`): the replicates go
    to ``out/<run>/seed-<s>/``, ``out/<run>/`` holds their mean, the plots draw mean ± std
    and each summary row gets a ``seeds`` entry (mean, std and n of final and best values).
    Every summary row names its run seed (``seed``) and data seed (``data_seed``; with
    seeds, those of replicate 0).

    ``loggers`` (:func:`fedsparse.loggers.resolve_loggers`: tracker names or loggers)
    track every run (each seed) in the experiment named after ``out``, the trackers'
    files under ``out``. ``data_cache``: the data sets a caller already built for these
    runs (:func:`check_runs_buildable`'s cache), reused instead of built again.
    """
    if seeds is not None:
        check_seeds(seeds)
    out = Path(out)
    runs = resolve_runs(config)
    if seeds:
        check_replicates(runs, seeds)
    trackers = resolve_loggers(loggers, out, experiment=out.absolute().name)
    data_cache = {} if data_cache is None else data_cache
    check_runs_buildable(config, runs, data_cache)  # before hours of runs
    out.mkdir(parents=True, exist_ok=True)

    def write_config() -> None:
        with open(out / "config.toml", "wb") as fh:
            tomli_w.dump({k: v for k, v in config.items() if k != "runs"} | {
                "runs": [{k: v for k, v in r.items() if k != "slug"} for r in runs]}, fh)

    # first, so a crashed run leaves its config; but a resume keeps the config its
    # checkpoints belong to until its runs have been continued
    resuming = resume and (out / "config.toml").exists()
    if not resuming:
        write_config()
    panels: dict[str, dict[str, History]] = {}
    summary_runs = []
    devices = [run_device(r) for r in runs]
    tic = time.perf_counter()
    for run, device in zip(runs, devices, strict=True):
        if seeds:
            history, error = run_seeds(run, seeds, lambda r: execute_run(
                r, out, data_cache=data_cache, resume=resume, progress=progress,
                loggers=trackers), out)
        else:
            history, error = execute_run(run, out, data_cache=data_cache, resume=resume,
                                         progress=progress, loggers=trackers)
        panels.setdefault(run["panel"], {})[run["label"]] = history
        final = history.records[-1] if history.records else history.initial
        row = {"label": run["label"], "panel": run["panel"], "dir": run["slug"],
               "seed": run["seed"], "data_seed": data_seed(run),
               "rounds": len(history.records), "diverged": error, **device_info(device),
               **{k: final.get(k) for k in ("objective", "rel_error", "support_f1", "accuracy",
                                            "test_accuracy", "density", "bytes_total",
                                            "elapsed")}}
        row = report_row(row, run, history, error)  # params, divergence marks, seed stats
        summary_runs.append(row)
        if error:
            warnings.warn(f"{run['slug']}: {error}", RuntimeWarning, stacklevel=2)
        log(_format_row(row))
    if resuming:
        write_config()
    plot = config.get("plot", {})
    plots = []
    # rel. error is plotted wherever a ground truth makes it defined
    for y in dict.fromkeys([*plot.get("y", ["objective"]), "rel_error"]):
        for x in plot.get("x", ["round", "bytes_total"]):
            path = out / f"{y}_vs_{x}.png"
            if plot_panels(panels, y=y, x=x, path=path, logy=plot.get("logy", False),
                           title=config.get("title", ""), band=plot.get("band", "std")):
                plots.append(path.name)
    notes: list[str] = []
    summary = {"title": config.get("title", ""), "paper_claim": config.get("paper_claim", ""),
               "runs": summary_runs, "comparisons": _comparisons(config, panels, notes),
               "claims": verdicts(config.get("claims", []), panels),
               "plots": plots, "seconds": time.perf_counter() - tic, "seeds": seeds or 1,
               **devices_info(devices), "fedsparse_version": __version__}
    with open(out / "summary.json", "w") as fh:
        json.dump(strict_json(summary), fh, indent=2, default=_json_default, allow_nan=False)
    for c in summary["comparisons"]:
        log(format_comparison(c))
    for note in notes:
        log(note)
    for line in format_verdicts(summary["paper_claim"], summary["claims"],
                                stated=config.get("claims")):
        log(line)
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
