"""Replicates over seeds, their mean and spread, and how divergence is recorded.

``fedsparse run EXP --seeds n`` and ``fedsparse sweep ... --seeds n`` run every
configuration n times. Replicate k (k = 0..n-1) adds k to

* the run seed (``seed``: client sampling, channel drops, mini-batches, a neural
  model's initialisation), and
* the data seed (``data.seed``; every data generator of :data:`fedsparse.data.GENERATORS`
  takes one: it draws the synthetic problem, or the partition and subsample of a real
  data set),

so replicate 0 is exactly the configured run and ``--seeds 1`` changes nothing. A
replicate's files go to ``<run folder>/seed-<run seed>/``; the run folder itself holds
the mean over the replicates (:func:`mean_history`).

Divergence is recorded the same way everywhere (summary.json, sweep.csv, best.json): the
value of a diverged run is ``null``, with ``"diverged": true`` and ``"diverged_round"``,
the first round whose model (or compared metric) was not finite. A configuration run
over seeds counts as diverged when any of its seeds diverged; its spread statistics are
then taken over the seeds that did not (``n`` says how many).
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Callable, Iterator
from pathlib import Path

from .._resources import RECORD_BYTES, check_memory, check_work
from .._validation import check_int, check_seed
from ..history import History
from ..metric_names import best_direction as best_direction  # (sweep, tune, tests)

#: Record fields that describe the model at a round; a diverged run's are recorded as
#: null (the byte and time counters up to the divergence stay). The ``personal_*``
#: fields are those of the personalised models (FedMac and its baselines).
MODEL_METRICS = ("objective", "test_objective", "rel_error", "support_precision",
                 "support_recall", "support_f1", "accuracy", "test_accuracy", "density",
                 "nnz", "personal_objective", "personal_accuracy",
                 "personal_test_objective", "personal_test_accuracy")
#: The metrics whose best round means something (not density or nnz, which are
#: smallest at the all-zero initial model). The best test accuracy over rounds, then its
#: mean and spread over seeds, is the metric Liu et al. 2023 report (after Huang et al.
#: 2021), for the global and the personalised models alike.
BEST_METRICS = ("objective", "test_objective", "rel_error", "support_precision",
                "support_recall", "support_f1", "accuracy", "test_accuracy",
                "personal_objective", "personal_accuracy", "personal_test_objective",
                "personal_test_accuracy")
#: Keys of a resolved run that are its hyper-parameters (summary.json ``params``).
PARAM_KEYS = ("rounds", "seed", "clients_per_round", "dtype", "channel", "data", "problem",
              "algorithm", "eval_clients")


def check_seeds(seeds) -> int:
    """``seeds`` (the number of replicates) as an int >= 1."""
    return check_int("seeds", seeds, minimum=1)


def check_replicates(runs: list[dict], seeds: int, kept: list[dict] | None = None) -> None:
    """Refuse, before any run, ``seeds`` replicates of ``runs`` that cannot be made: more
    rounds in all than could end within a year, more round records than memory holds
    (every replicate's records of the runs ``kept`` together, by default all of ``runs``,
    are kept for their mean; a sweep keeps one point's at a time), or seeds that the last
    replicate would push past the largest seed (its run and data seeds are the first ones
    plus ``seeds - 1``)."""
    def rounds(some: list[dict]) -> int:
        return seeds * sum(int(run.get("rounds", 1)) for run in some)

    check_work(rounds(runs), f"seeds={seeds} replicates of {len(runs)} run(s)",
               what="rounds in all")
    check_memory({"the replicates' round records": rounds(kept or runs) * RECORD_BYTES},
                 {"seeds": seeds}, hint="Every replicate's records are kept for the mean "
                 "over seeds")
    for run in runs:
        last = with_seed(run, seeds - 1)
        check_seed(f"run {run['label']!r}: seed + seeds - 1", last["seed"])
        if last.get("data", {}).get("seed") is not None:
            check_seed(f"run {run['label']!r}: data.seed + seeds - 1", last["data"]["seed"])


def with_seed(run: dict, offset: int) -> dict:
    """A copy of the resolved ``run`` for replicate ``offset``: ``offset`` added to its run
    seed and its data seed, and its output folder ``<slug>/seed-<run seed>``."""
    run = copy.deepcopy(run)
    run["seed"] = int(run.get("seed", 0)) + offset
    data = run.get("data", {})
    base = data.get("seed", _default_data_seed(data.get("kind")))
    if base is not None:
        data["seed"] = int(base) + offset
    if "slug" in run:
        run["slug"] = f"{run['slug']}/seed-{run['seed']}"
    return run


def _default_data_seed(kind) -> int | None:
    """The ``seed`` default of the data generator ``kind`` (None if it takes no seed)."""
    from ..data import GENERATORS

    fn = GENERATORS.get(kind)
    if fn is None:
        return None
    param = inspect.signature(fn).parameters.get("seed")
    if param is None:
        return None
    return 0 if param.default is inspect.Parameter.empty else param.default


def divergence(history: History, error: str | None, metric: str = "objective") -> int | None:
    """The round at which a run diverged, or None.

    A run diverged when the simulator stopped it (``error``: the model or an upload
    became NaN/inf; the round is the one after the last recorded) or when the objective
    or ``metric`` is recorded as a non-finite number at some round (the first such
    round): a model whose loss overflows has diverged even if, say, its support F1 is
    still finite.
    """
    if error:
        last = history.records[-1]["round"] if history.records else 0
        return int(last) + 1
    for r in [history.initial, *history.records]:
        for name in dict.fromkeys(("objective", metric)):
            v = r.get(name)
            if _number(v) and not math.isfinite(v):
                return int(r.get("round", 0))
    return None


def spread(values) -> dict:
    """``{"mean", "std", "n"}`` of the finite numbers in ``values``; ``std`` is the sample
    standard deviation (ddof = 1), None for fewer than two values; ``mean`` None for
    none."""
    vals = [float(v) for v in values if _number(v) and math.isfinite(v)]
    n = len(vals)
    mean = math.fsum(vals) / n if n else None
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / (n - 1)) if n >= 2 else None
    return {"mean": mean, "std": std, "n": n}


def _number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def mean_history(histories: list[History], diverged: list[int | None]) -> History:
    """The round-by-round mean over the seeds that did not diverge.

    Parameters
    ----------
    histories : one History per seed (``config["seed"]`` = its run seed).
    diverged : per seed, the round it diverged at (None if it did not).

    Returns
    -------
    History
        ``records[t][f]`` = mean of numeric field f at round t over the n seeds kept,
        ``records[t][f + "_std"]`` its sample standard deviation (None for n = 1) and
        ``records[t]["n_seeds"]`` = n; rounds up to the shortest kept run. ``seeds`` =
        every per-seed History; ``config`` = ``{"seeds": [run seeds], "diverged_seeds":
        [{"seed", "round"}, ...]}``. No records when every seed diverged.
    """
    kept = [h for h, d in zip(histories, diverged, strict=True) if d is None]
    seeds = [h.config.get("seed", i) for i, h in enumerate(histories)]
    config = {"seeds": seeds, "diverged_seeds": [
        {"seed": s, "round": d} for s, d in zip(seeds, diverged, strict=True) if d is not None]}
    if not kept:
        return History(config=config, seeds=list(histories))
    length = min(len(h.records) for h in kept)
    initial = _mean_rows([h.initial for h in kept]) if all(h.initial for h in kept) else {}
    records = [_mean_rows([h.records[t] for h in kept]) for t in range(length)]
    return History(records=records, initial=initial, config=config, seeds=list(histories))


def _mean_rows(rows: list[dict]) -> dict:
    out: dict = {}
    for key in dict.fromkeys(k for r in rows for k in r):
        vals = [r.get(key) for r in rows]
        if key == "round":
            out["round"] = vals[0]
            continue
        if not all(_number(v) for v in vals):
            continue  # lists (delivered clients) and fields some rounds lack
        s = spread(vals)
        if s["n"] < len(vals):  # a non-finite value: no mean at this round
            s = {"mean": None, "std": None}
        elif all(isinstance(v, int) for v in vals) and len(set(vals)) == 1:
            s["mean"] = vals[0]  # counters every seed agrees on (bytes, clients) stay ints
        out[key] = s["mean"]
        out[f"{key}_std"] = s["std"]
    out["n_seeds"] = len(rows)
    return out


def seed_stats(mean: History, metrics=MODEL_METRICS) -> dict:
    """summary.json's ``seeds`` entry of a run over seeds.

    Returns
    -------
    {"n": seeds run, "seeds": [run seeds], "diverged_seeds": [{"seed", "round"}],
    "final": {metric: {"mean", "std", "n"}}, "best": {metric: {"mean", "std", "n"}}}
    over the seeds that did not diverge; "best" is each seed's best round (largest for
    accuracy-like metrics, smallest otherwise).
    """
    gone = {d["seed"] for d in mean.config.get("diverged_seeds", [])}
    kept = [h for h in mean.seeds if h.config.get("seed") not in gone]
    recorded = set().union(*(h.recorded() for h in kept)) if kept else set()
    names = [m for m in metrics if m in recorded]
    return {"n": len(mean.seeds), "seeds": mean.config.get("seeds", []),
            "diverged_seeds": mean.config.get("diverged_seeds", []),
            "final": {m: spread(h.final(m) for h in kept) for m in names},
            "best": {m: spread(h.best(m) for h in kept) for m in names if m in BEST_METRICS}}


def iter_replicates(runs: list[dict], seeds: int,
                    execute: Callable[[dict], tuple[History, str | None]], *,
                    first_seed: int = 0) -> Iterator[tuple[dict, History, str | None]]:
    """Run replicates ``first_seed .. first_seed + seeds - 1`` of every run in ``runs``
    (:func:`with_seed`) with ``execute``, replicate by replicate: every run of replicate
    k before any run of replicate k + 1.

    A generator, so that a caller that saves each replicate holds one at a time; a
    partial run then already has every run on the first replicates, and more can be
    added later with ``first_seed``.

    Parameters
    ----------
    runs : resolved runs (:func:`fedsparse.experiments.config.resolve_runs`).
    seeds : number of replicates.
    execute : ``execute(seeded run) -> (History, divergence message or None)``, e.g.
        :func:`fedsparse.experiments.runner.execute_run` with its output folder bound.
    first_seed : the first replicate's k.

    Yields
    ------
    (seeded run, its History with ``config["seed"]`` = its run seed, divergence message
    or None)
    """
    seeds = check_seeds(seeds)
    for k in range(first_seed, first_seed + seeds):
        for run in runs:
            seeded = with_seed(run, k)
            history, error = execute(seeded)
            history.config = {**history.config, "seed": seeded["seed"]}
            yield seeded, history, error


def average_seeds(histories: list[History], errors: list[str | None]
                  ) -> tuple[History, list[str]]:
    """The mean over replicates (:func:`mean_history`) and one message per diverged one.

    Parameters
    ----------
    histories : one History per replicate (``config["seed"]`` = its run seed).
    errors : per replicate, the divergence message or None.

    Returns
    -------
    (mean History, ["seed <s>: <message>" per replicate the simulator stopped])
    """
    rounds = [divergence(h, e) for h, e in zip(histories, errors, strict=True)]
    messages = [f"seed {h.config.get('seed')}: {e}"
                for h, e in zip(histories, errors, strict=True) if e]
    return mean_history(histories, rounds), messages


def run_seeds(run: dict, n: int, execute: Callable[[dict], tuple[History, str | None]],
              out: Path | None = None) -> tuple[History, str | None]:
    """Run replicates 0..n-1 of ``run`` (:func:`iter_replicates`) and average.

    Parameters
    ----------
    run : a resolved run (:func:`fedsparse.experiments.config.resolve_runs`).
    n : number of replicates.
    execute : ``execute(seeded run) -> (History, divergence message or None)``, e.g.
        :func:`fedsparse.experiments.runner.execute_run` with its output folder bound.
    out : if given, the mean is saved to ``out/<slug>/`` (:meth:`History.save`).

    Returns
    -------
    (mean History, message naming the diverged seeds or None)
    """
    done = list(iter_replicates([run], n, execute))
    mean, messages = average_seeds([h for _, h, _ in done], [e for _, _, e in done])
    if out is not None:
        mean.save(Path(out) / run["slug"], overwrite=True)
    return mean, ("; ".join(messages) or None)


def report_row(row: dict, run: dict, history: History, error: str | None) -> dict:
    """summary.json's row of one run, completed: its hyper-parameters and the divergence
    marks; for a mean over seeds, the ``seeds`` statistics with the row's metrics set to
    their means over the seeds.

    Parameters
    ----------
    row : the row so far ({label, panel, dir, rounds, metric: final value, ...}).
    run : the resolved run.
    history : its History (a mean over seeds when ``history.seeds``).
    error : the divergence message or None.

    Returns
    -------
    dict
        ``row`` with ``params``, ``diverged`` (bool), ``diverged_round`` and ``error``;
        the model metrics are null when the run diverged.
    """
    row = dict(row)
    row["params"] = {k: copy.deepcopy(run[k]) for k in PARAM_KEYS if k in run}
    if history.seeds:
        stats = seed_stats(history)
        gone = stats["diverged_seeds"]
        row["rounds"] = max((len(h.records) for h in history.seeds), default=0)
        for k, s in stats["final"].items():
            if k in row:
                row[k] = s["mean"]
        row["seeds"] = stats
        first = min((d["round"] for d in gone), default=None)
    else:
        first = divergence(history, error)
    row["diverged"] = first is not None
    row["diverged_round"] = first
    row["error"] = error
    if first is not None:
        for k in MODEL_METRICS:
            if k in row:
                row[k] = None
    return row


def strict_json(obj):
    """``obj`` with every non-finite float replaced by None (recursively through dicts,
    lists and tuples), so ``json.dumps(obj, allow_nan=False)`` succeeds: strict JSON has
    no NaN or Infinity, and a non-finite value means a diverged run, marked as such
    beside it."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [strict_json(v) for v in obj]
    return obj


def device_fields(device) -> dict:
    """``{"device": ..., "gpu": ...}`` of where a run computes, for its summary.json.

    Parameters
    ----------
    device : "cpu", "cuda", "cuda:N", "auto", a torch.device or None (the CPU).

    Raises
    ------
    ConfigError
        naming ``device`` for a value that is not a device, or a GPU this machine lacks
        (:func:`fedsparse.devices.resolve_device`).
    """
    from ..devices import device_info, resolve_device

    return device_info(resolve_device(device))
