"""Liu et al. 2023 (FedMac) experiments: Table 1 rows and Figures 2-6.

Each experiment is one command, ``fedsparse run NAME [--quick]``, and runs the TOML
config ``NAME-runs`` (``fedsparse show NAME-runs``; the same runs take ``fedsparse run
NAME-runs --seeds 3`` or ``fedsparse sweep``), with three things the generic runner
does not do:

* every simulation runs on one thread (:func:`one_thread`): these rounds are many small
  tensor operations, and torch's default intra-op threads make them several times
  slower on a shared machine whose cores are busy;
* the models are evaluated every ``eval_every`` rounds (and at the last), since on
  Fashion-MNIST an evaluation of the global model and of the 20 personalised models on
  all 70,000 examples costs more than the round itself;
* Table 1 rows end with the GM/PM table beside the paper's numbers, the figures with
  their plots.

The reported metric is the paper's (after Huang et al. 2021): the **maximum over the
evaluated rounds** of the mean test accuracy (micro-averaged over all clients' test
examples), for the global model (GM, ``test_accuracy``) and the personalised models
(PM, ``personal_test_accuracy``), then mean and standard deviation over seeds
(:func:`fedsparse.experiments.seeds.seed_stats`); the last round's value beside it.
Replicate k adds k to the run seed and the data seed (:mod:`.seeds`).

Which model is which: FedAvg and FedProx have only a GM; HeurFedAMP and Per-FedAvg only
a PM (HeurFedAMP has no global model; Per-FedAvg's GM is its meta-model, not reported
by the paper); pFedMe and FedMac both.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .._validation import fail
from ..algorithms.personalized import fedmac_bits
from ..history import History
from ..simulate import DivergenceError, simulate
from .config import (
    DTYPES,
    apply_overrides,
    build_algorithm,
    build_channel,
    build_data,
    build_problem,
    load_config,
    resolve_runs,
)
from .registry import CONFIG_DIR, register_experiment
from .seeds import (
    device_fields,
    divergence,
    mean_history,
    seed_stats,
    strict_json,
    with_seed,
)

#: Liu et al. 2023, Table 1: best mean test accuracy (%) per data set and (method, model).
PAPER_TABLE1 = {
    "mnist": {("FedAvg", "GM"): 96.8603, ("FedProx", "GM"): 96.8564,
              ("HeurFedAMP", "PM"): 98.4425, ("Per-FedAvg", "PM"): 98.1474,
              ("pFedMe", "GM"): 96.8698, ("pFedMe", "PM"): 98.9223,
              ("FedMac", "GM"): 96.8964, ("FedMac", "PM"): 98.9547},
    "fmnist": {("FedAvg", "GM"): 85.6949, ("FedProx", "GM"): 85.6569,
               ("HeurFedAMP", "PM"): 99.1756, ("Per-FedAvg", "PM"): 99.3051,
               ("pFedMe", "GM"): 84.9582, ("pFedMe", "PM"): 99.2327,
               ("FedMac", "GM"): 85.7958, ("FedMac", "PM"): 99.3698},
    "cifar100": {("FedAvg", "GM"): 85.7712, ("FedProx", "GM"): 86.0150,
                 ("HeurFedAMP", "PM"): 90.4033, ("Per-FedAvg", "PM"): 89.7828,
                 ("pFedMe", "GM"): 84.9512, ("pFedMe", "PM"): 90.1374,
                 ("FedMac", "GM"): 86.5691, ("FedMac", "PM"): 90.8987},
    "synthetic": {("FedAvg", "GM"): 84.6333, ("FedProx", "GM"): 84.5475,
                  ("HeurFedAMP", "PM"): 84.2741, ("Per-FedAvg", "PM"): 88.7006,
                  ("pFedMe", "GM"): 83.5622, ("pFedMe", "PM"): 87.4969,
                  ("FedMac", "GM"): 84.8889, ("FedMac", "PM"): 89.0583},
}
#: The paper's Table 1 columns, in its order: (method label, model).
COLUMNS = (("FedAvg", "GM"), ("FedProx", "GM"), ("HeurFedAMP", "PM"), ("Per-FedAvg", "PM"),
           ("pFedMe", "GM"), ("pFedMe", "PM"), ("FedMac", "GM"), ("FedMac", "PM"))
#: Record field of each model's mean test accuracy.
FIELD = {"GM": "test_accuracy", "PM": "personal_test_accuracy"}
#: Liu et al. 2023, Figure 3 (MNIST): points by which the FedMac PM beats each model.
PAPER_FIG3_GAPS = {("FedMac", "GM"): 1.79, ("pFedMe", "PM"): 0.55, ("pFedMe", "GM"): 2.29,
                   ("Per-FedAvg", "PM"): 0.75, ("HeurFedAMP", "PM"): 0.13,
                   ("FedProx", "GM"): 1.96, ("FedAvg", "GM"): 1.92}


@contextlib.contextmanager
def one_thread():
    """Run the block with torch on one intra-op thread, then restore the setting.

    A round here is thousands of small tensor operations on (S, P) or (b, 784) tensors;
    with torch's threads spread over cores that other processes also use, each
    operation waits for a busy core, and on a loaded 2-core machine a FedMac round on
    MNIST took 6 s with two threads and 0.35 s with one.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass
class RunResult:
    """One run of a config over seeds.

    Attributes
    ----------
    label, panel, slug : the run's names in the config.
    mean : History of the mean over the seeds that did not diverge (``seeds`` holds
        every seed's History).
    stats : :func:`fedsparse.experiments.seeds.seed_stats` of ``mean``: ``best`` and
        ``final`` mean/std/n per metric.
    errors : one divergence message per diverged seed.
    """

    label: str
    panel: str
    slug: str
    mean: History
    stats: dict
    errors: list[str] = field(default_factory=list)


def quick_overrides(config: dict, *, rounds: int, examples: int | None = None,
                    size_scale: int | None = None) -> dict:
    """``config`` shortened for a quick run (a copy; ``config`` is not changed).

    Parameters
    ----------
    config : an experiment config.
    rounds : the number of rounds of every run.
    examples : real data (``federated_real``) is subsampled to this many images.
    size_scale : synthetic data (``fedprox_synthetic``) uses this client-size scale
        instead of Dinh et al. 2020's five-fold sizes.

    Returns
    -------
    dict
        the shortened config.
    """
    sets = []
    kind = config.get("defaults", {}).get("data", {}).get("kind")
    if examples is not None and kind == "federated_real":
        sets.append(("data.max_examples", examples))
    if size_scale is not None and kind == "fedprox_synthetic":
        sets.append(("data.size_scale", size_scale))
    return apply_overrides(config, sets, rounds)


#: Algorithms whose server averages the arrived uploads by the data set's client weights
#: p_i (renormalised among them). Liu et al. 2023 average 1/S for every method, so their
#: runs here get uniform client weights (:func:`uniform_weights`); FedMac, pFedMe,
#: Per-FedAvg and HeurFedAMP average uniformly by construction.
SIZE_WEIGHTED = ("fed_avg", "fed_prox")
#: Rounds between checkpoints of a run (what ``resume`` continues from).
CHECKPOINT_EVERY = 10


def uniform_weights(data):
    """``data`` with every client weight 1/N: an average over S arrived clients is then
    the plain mean 1/S of their models, as Liu et al. 2023 average."""
    n = data.weights.shape[0]
    return dataclasses.replace(data, weights=torch.full_like(data.weights, 1.0 / n))


def run_config(config: dict, out: str | Path, *, seeds: int = 1, first_seed: int = 0,
               eval_every: int = 1, log=print, log_every: int = 0, resume: bool = False,
               device=None, weighting: str = "uniform") -> None:
    """Simulate every run of ``config`` for replicates ``first_seed .. first_seed + seeds
    - 1``, on one thread, and save each replicate's history to ``out/<run>/seed-<s>/``.

    Replicates are the outer loop (every run of seed 0, then of seed 1, ...), so only
    one data set is held at a time and a partial run already has every method on the
    first seeds; more seeds can be added to the same ``out`` later with ``first_seed``.
    :func:`load_results` reads the runs back.

    Parameters
    ----------
    config : an experiment config (:func:`fedsparse.experiments.config.load_config`).
    out : output folder.
    seeds : number of replicates (replicate k adds k to the run and data seeds).
    first_seed : the first replicate's k.
    eval_every : evaluate every k rounds and at the last round.
    log : called with one line per finished run.
    log_every : also log every this many rounds (0: never).
    resume : continue every replicate from its checkpoint
        (``out/<run>/seed-<s>/checkpoint.pt``, saved every :data:`CHECKPOINT_EVERY`
        rounds and at the end); a finished one is read back, not run again. The
        histories are those of an uninterrupted run.
    device : where the rounds run ("cpu", "cuda", "cuda:N", "auto"; None: the CPU).
    weighting : how FedAvg and FedProx (:data:`SIZE_WEIGHTED`) average the arrived
        uploads: "uniform" (1/S, the paper's) or "size" (by client size, renormalised).
    """
    out = Path(out)
    runs = resolve_runs(config)
    if weighting not in ("uniform", "size"):
        raise fail("weighting", weighting, 'must be "uniform" or "size"')
    where = device_fields(device)["device"]
    data_key, data = None, None
    with one_thread():
        for k in range(first_seed, first_seed + seeds):
            for run in runs:
                seeded = with_seed(run, k)
                key = json.dumps([seeded["data"], seeded["dtype"]], sort_keys=True)
                if key != data_key:  # one data set in memory at a time
                    data_key, data = key, None
                    data = build_data(seeded["data"], DTYPES[seeded["dtype"]])
                run_data = data
                if weighting == "uniform" and seeded["algorithm"]["kind"] in SIZE_WEIGHTED:
                    run_data = uniform_weights(data)
                tic = time.perf_counter()
                name = f"{run['label']} seed {seeded['seed']}"

                def progress(record, state, name=name, tic=tic):
                    if log_every and record["round"] % log_every == 0:
                        log(f"  {name}: round {record['round']} "
                            f"({time.perf_counter() - tic:.0f} s)")

                folder = out / seeded["slug"]
                folder.mkdir(parents=True, exist_ok=True)
                try:
                    history = simulate(
                        build_algorithm(seeded["algorithm"]), build_problem(seeded["problem"]),
                        run_data, rounds=seeded["rounds"], seed=seeded["seed"],
                        clients_per_round=seeded.get("clients_per_round"),
                        channel=build_channel(seeded.get("channel")), eval_every=eval_every,
                        progress=False, callback=progress, device=where,
                        checkpoint=folder / "checkpoint.pt",
                        checkpoint_every=CHECKPOINT_EVERY, resume=resume)
                    error = None
                except DivergenceError as exc:
                    history, error = exc.history, str(exc)
                history.save(folder)
                if error:
                    (folder / "DIVERGED").write_text(error + "\n")
                log(f"  {name}: {seeded['rounds']} rounds in "
                    f"{time.perf_counter() - tic:.0f} s" + (f" -- {error}" if error else ""))


def load_results(config: dict, out: str | Path, *, save_mean: bool = True
                 ) -> dict[tuple[str, str], RunResult]:
    """The runs of ``config`` that :func:`run_config` saved in ``out``, over every
    replicate found there (``out/<run>/seed-<s>/``); the mean over them is saved to
    ``out/<run>/`` (unless not ``save_mean``). A run folder without replicates that
    holds a history itself (the TOML runner without ``--seeds``) is read as one seed.

    Returns
    -------
    {(panel, label): RunResult}, for the runs with at least one replicate.
    """
    out = Path(out)
    results = {}
    for run in resolve_runs(config):
        folders = sorted((out / run["slug"]).glob("seed-*"),
                         key=lambda p: int(p.name.removeprefix("seed-")))
        single = not folders and (out / run["slug"] / "history.jsonl").exists()
        if single:
            folders = [out / run["slug"]]
        histories, rounds, errors = [], [], []
        for folder in folders:
            if not (folder / "history.jsonl").exists():
                continue
            h = History.load(folder)
            h.config = {"seed": run["seed"] if single
                        else int(folder.name.removeprefix("seed-"))}
            error = (folder / "DIVERGED").read_text().strip() \
                if (folder / "DIVERGED").exists() else None
            histories.append(h)
            rounds.append(divergence(h, error))
            if error:
                errors.append(f"seed {h.config['seed']}: {error}")
        if not histories:
            continue
        mean = mean_history(histories, rounds)
        if save_mean:
            mean.save(out / run["slug"])
        results[(run["panel"], run["label"])] = RunResult(
            run["label"], run["panel"], run["slug"], mean, seed_stats(mean), errors)
    return results


def _pct(x: float | None) -> float | None:
    return None if x is None else 100.0 * x


def _stat(stats: dict, kind: str, metric: str) -> dict:
    s = stats[kind].get(metric, {"mean": None, "std": None, "n": 0})
    return {"mean": _pct(s["mean"]), "std": _pct(s["std"]), "n": s["n"]}


def format_stat(s: dict) -> str:
    """``"99.12 ± 0.05"`` (mean ± std over seeds, in %), ``"99.12"`` for one seed,
    ``"-"`` when not recorded."""
    if s["mean"] is None:
        return "-"
    return f"{s['mean']:.2f}" + ("" if s["std"] is None else f" ± {s['std']:.2f}")


def table_rows(results: dict[tuple[str, str], RunResult], paper: dict) -> list[dict]:
    """Table 1's cells from runs labelled as the paper's methods.

    Returns
    -------
    One dict per (method, model) of :data:`COLUMNS` that was run: ``method``, ``model``,
    ``best`` and ``last`` ({mean, std, n} in %, over seeds), ``paper`` (%), ``seeds``
    (each seed's best, %) and ``diverged`` (messages).
    """
    by_label = {label: r for (_, label), r in results.items()}
    rows = []
    for method, model in COLUMNS:
        r = by_label.get(method)
        if r is None:
            continue
        metric = FIELD[model]
        rows.append({"method": method, "model": model,
                     "best": _stat(r.stats, "best", metric),
                     "last": _stat(r.stats, "final", metric),
                     "paper": paper.get((method, model)),
                     "seeds": [_pct(h.best(metric)) for h in r.mean.seeds],
                     "diverged": r.errors})
    return rows


def format_table(rows: list[dict], title: str) -> str:
    """The GM/PM table as text: one line per (method, model)."""
    lines = [title, f"{'method':<11} {'model':<5} {'best over rounds':>18} "
                    f"{'last round':>16} {'paper':>8}"]
    for r in rows:
        paper = "-" if r["paper"] is None else f"{r['paper']:.2f}"
        lines.append(f"{r['method']:<11} {r['model']:<5} {format_stat(r['best']):>18} "
                     f"{format_stat(r['last']):>16} {paper:>8}"
                     + ("  (diverged: " + "; ".join(r["diverged"]) + ")" if r["diverged"]
                        else ""))
    return "\n".join(lines)


def _write_summary(out: Path, summary: dict) -> None:
    (out / "summary.json").write_text(json.dumps(strict_json(summary), indent=2,
                                                 allow_nan=False) + "\n")


def _report(out: Path, lines: list[str], log, **summary) -> dict:
    """Write a figure's text table (``table.txt``) and ``summary.json``, log the table,
    return the summary."""
    text = "\n".join(lines)
    (out / "table.txt").write_text(text + "\n")
    _write_summary(out, summary)
    log(text)
    return summary


def _config(name: str) -> dict:
    return load_config(CONFIG_DIR / f"{name}.toml")


# ---------------------------------------------------------------------------------------
# Table 1

#: Full and quick settings of each Table 1 row: (config, paper key, seeds, eval_every,
#: quick rounds, quick examples or synthetic size scale). The full runs are the paper's:
#: T = 800 (in the configs), 3 seeds ("at least 3 times").
TABLE1 = {
    "fedmac-table1-fmnist": ("fedmac-table1-fmnist-runs", "fmnist", 3, 4, 20, 6000),
    "fedmac-table1-mnist5k": ("fedmac-table1-mnist5k-runs", "mnist", 3, 4, 20, 2000),
    "fedmac-table1-synthetic": ("fedmac-table1-synthetic-runs", "synthetic", 3, 4, 20, 1),
    "fedmac-table1-vgg": ("fedmac-table1-vgg-runs", "cifar100", 3, 4, 10, 2000),
}
#: The data sets' names in titles.
DATA_NAMES = {"fmnist": "Fashion-MNIST", "mnist": "MNIST-5k (5,000-image MNIST subset)",
              "synthetic": "Synthetic(0.5, 0.5)",
              "cifar100": "CIFAR-100 row stand-in (FedMac's VGG on Fashion-MNIST padded to "
                          "32 x 32, N = 10, S = 2; the paper column is CIFAR-100's)"}


def table1(name: str, out: str | Path, *, quick: bool = False, rounds: int | None = None,
           seeds: int | None = None, first_seed: int = 0, eval_every: int | None = None,
           log=print, log_every: int = 0, resume: bool = False, device=None,
           weighting: str = "uniform") -> dict:
    """Run a Table 1 row and print the GM/PM table beside the paper's numbers.

    Parameters
    ----------
    name : a key of :data:`TABLE1`.
    out : output folder: per-run histories, ``summary.json`` (the table, with each
        seed's best), ``table.txt`` and ``accuracy_vs_round.png``.
    quick : a few-minute version: :data:`TABLE1`'s quick rounds on a subsample (real
        data) or at the generator's own client sizes (synthetic), one seed, every round
        evaluated.
    rounds, seeds, eval_every : override the config's rounds, the number of seeds and
        the evaluation period.
    first_seed : the first replicate to run; the table is made of every replicate
        saved in ``out`` (so ``first_seed=1, seeds=2`` adds two seeds to a one-seed run).
    log : where the progress lines and the table go.
    log_every : also log every this many rounds of each run (0: never).
    resume, device, weighting : as for :func:`run_config`.

    Returns
    -------
    dict
        the summary written to ``summary.json`` (with ``rounds``, ``seeds``, ``device``,
        ``gpu``, ``wall_clock_s`` and ``weighting``).
    """
    config_name, paper_key, full_seeds, full_every, q_rounds, q_size = TABLE1[name]
    config = _config(config_name)
    if quick:
        config = quick_overrides(config, rounds=rounds or q_rounds, examples=q_size,
                                 size_scale=q_size)
        seeds, eval_every = seeds or 1, eval_every or 1
    elif rounds is not None:
        config = apply_overrides(config, [], rounds)
    seeds = seeds or full_seeds
    eval_every = eval_every or full_every
    where = device_fields(device)  # a bad device is refused before anything is written
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tic = time.perf_counter()
    run_config(config, out, seeds=seeds, first_seed=first_seed, eval_every=eval_every,
               log=log, log_every=log_every, resume=resume, device=device,
               weighting=weighting)
    results = load_results(config, out)
    seeds = max(len(r.mean.seeds) for r in results.values())
    T = resolve_runs(config)[0]["rounds"]
    rows = table_rows(results, PAPER_TABLE1[paper_key])
    title = (f"Liu et al. 2023, Table 1, {DATA_NAMES[paper_key]}"
             f"{' (quick: ' + str(T) + ' rounds on smaller data)' if quick else ''}: best mean "
             f"test accuracy over rounds (%), T = {T}, evaluated every {eval_every} "
             f"round(s), {seeds} seed(s){', mean ± std' if seeds > 1 else ''}")
    text = format_table(rows, title)
    (out / "table.txt").write_text(text + "\n")
    plot_accuracy(results, out / "accuracy_vs_round.png", title=config.get("title", ""),
                  only=set(COLUMNS))
    summary = {"title": config.get("title", ""), "experiment": name, "config": config_name,
               "quick": quick, "rounds": T, "seeds": seeds, "eval_every": eval_every,
               **where, "weighting": weighting, "table": rows,
               "wall_clock_s": time.perf_counter() - tic, "plots": ["accuracy_vs_round.png"]}
    _write_summary(out, summary)
    log(text)
    return summary


def runner_table(name: str, config: dict, out: str | Path) -> str | None:
    """The GM/PM table of a Table 1 row run as the TOML experiment ``name`` (e.g.
    ``fedsparse run fedmac-table1-fmnist-runs --rounds 100 --seeds 3``), from the
    histories the runner saved in ``out``; None for any other experiment.

    The runner evaluates every round, so "best" is the maximum over all rounds.
    """
    paper_key = {cfg: key for cfg, key, *_ in TABLE1.values()}.get(name)
    if paper_key is None:
        return None
    results = load_results(config, out, save_mean=False)
    if not results:
        return None
    seeds = max(len(r.mean.seeds) for r in results.values())
    T = resolve_runs(config)[0]["rounds"]
    return format_table(table_rows(results, PAPER_TABLE1[paper_key]),
                        f"Liu et al. 2023, Table 1, {DATA_NAMES[paper_key]}: best mean test "
                        f"accuracy over rounds (%), T = {T}, {seeds} seed(s)"
                        f"{', mean ± std' if seeds > 1 else ''}; FedAvg and FedProx average "
                        "by client size here (the Python experiment averages 1/S, as the "
                        "paper)")


def plot_accuracy(results: dict[tuple[str, str], RunResult], path: Path, *,
                  title: str = "", metrics=("test_accuracy", "personal_test_accuracy"),
                  only: set | None = None) -> None:
    """Mean test accuracy (%) against rounds: one panel per model (GM, PM), one line per
    run; the mean over seeds with a ± std band.

    ``only``: the (label, "GM" or "PM") pairs to draw (default all), e.g. :data:`COLUMNS`
    so that HeurFedAMP's mean of the client models, which is not part of the method, is
    not drawn as a global model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = {"test_accuracy": "global model (GM)",
             "personal_test_accuracy": "personalised models (PM)"}
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.2 * len(metrics), 3.8), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        model = {v: k for k, v in FIELD.items()}.get(metric)
        for (panel, label), r in results.items():
            if only is not None and (label, model) not in only:
                continue
            xs, ys, sd = _curve(r.mean, metric)
            if not xs:
                continue
            name = f"{panel}: {label}" if panel else label
            ax.plot(xs, ys, label=name, lw=1.2)
            if any(s is not None for s in sd):
                lo = [y - (s or 0) for y, s in zip(ys, sd, strict=True)]
                hi = [y + (s or 0) for y, s in zip(ys, sd, strict=True)]
                ax.fill_between(xs, lo, hi, alpha=0.2)
        ax.set_xlabel("round")
        ax.set_ylabel("mean test accuracy (%)")
        ax.set_title(names.get(metric, metric), fontsize=10)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    if title:
        fig.suptitle(title if len(title) < 110 else title[:107] + "...", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _curve(history: History, metric: str) -> tuple[list, list, list]:
    """(rounds, values in %, std in % or None) of the rounds where ``metric`` is
    recorded, round 0 included."""
    xs, ys, sd = [], [], []
    for r in [history.initial, *history.records]:
        v = r.get(metric)
        if isinstance(v, int | float) and math.isfinite(v):
            xs.append(r.get("round", 0))
            ys.append(100.0 * v)
            s = r.get(f"{metric}_std")
            sd.append(None if s is None else 100.0 * s)
    return xs, ys, sd


@register_experiment("fedmac-table1-fmnist", paper="fedmac",
                     description="Liu et al. 2023 Table 1, Fashion-MNIST row: GM/PM best mean "
                                 "test accuracy of FedMac, pFedMe, Per-FedAvg, HeurFedAMP, "
                                 "FedProx and FedAvg (20 clients, 2 labels each, the "
                                 "79,510-parameter DNN)")
def table1_fmnist(out: Path, *, quick: bool = False, rounds: int | None = None,
                  seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Table 1's Fashion-MNIST row (config ``fedmac-table1-fmnist-runs``): T = 800 rounds,
    3 seeds, accuracy evaluated every 4 rounds. ``quick``: 20 rounds on a 6,000-image
    subsample, every round."""
    return table1("fedmac-table1-fmnist", out, quick=quick, rounds=rounds, seeds=seeds,
                  resume=resume, device=device)


@register_experiment("fedmac-table1-mnist5k", paper="fedmac",
                     description="Liu et al. 2023 Table 1, MNIST row on the 5,000-image MNIST "
                                 "subset: GM/PM best mean test accuracy of the six methods")
def table1_mnist5k(out: Path, *, quick: bool = False, rounds: int | None = None,
                  seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Table 1's MNIST row on MNIST-5k (config ``fedmac-table1-mnist5k-runs``): T = 800,
    3 seeds, evaluated every 4 rounds. ``quick``: 20 rounds on 2,000 images."""
    return table1("fedmac-table1-mnist5k", out, quick=quick, rounds=rounds, seeds=seeds,
                  resume=resume, device=device)


@register_experiment("fedmac-table1-synthetic", paper="fedmac",
                     description="Liu et al. 2023 Table 1, Synthetic row: Synthetic(0.5, 0.5), "
                                 "100 clients, the 1,430-parameter DNN; GM/PM best mean test "
                                 "accuracy of the six methods")
def table1_synthetic(out: Path, *, quick: bool = False, rounds: int | None = None,
                  seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Table 1's Synthetic row (config ``fedmac-table1-synthetic-runs``): T = 800, 3
    seeds, evaluated every 4 rounds. ``quick``: 20 rounds at the generator's own client
    sizes (not Dinh et al. 2020's five-fold ones)."""
    return table1("fedmac-table1-synthetic", out, quick=quick, rounds=rounds, seeds=seeds,
                  resume=resume, device=device)


@register_experiment("fedmac-table1-vgg", paper="fedmac",
                     description="Liu et al. 2023 Table 1, CIFAR-100 row stand-in: FedMac's VGG "
                                 "on Fashion-MNIST padded to 32 x 32, N = 10, S = 2; GM/PM "
                                 "best mean test accuracy of the six methods")
def table1_vgg(out: Path, *, quick: bool = False, rounds: int | None = None,
               seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """The CIFAR-100 row's stand-in (config ``fedmac-table1-vgg-runs``; CIFAR-100 is not
    installed here): T = 800, 3 seeds, evaluated every 4 rounds; a GPU run.
    ``quick``: 10 rounds on 2,000 images."""
    return table1("fedmac-table1-vgg", out, quick=quick, rounds=rounds, seeds=seeds,
                  resume=resume, device=device)


# ---------------------------------------------------------------------------------------
# Figures 2-6

#: Full and quick settings of each figure: (config, full eval_every, quick rounds, quick
#: examples). One seed each.
FIGURES = {
    "fedmac-fig2": ("fedmac-fig2-mnist5k-runs", 2, 10, 2000),
    "fedmac-fig3": ("fedmac-fig3-mnist5k-runs", 4, 10, 2000),
    "fedmac-fig4": ("fedmac-fig4-fmnist-runs", 5, 10, 4000),
    "fedmac-fig6": ("fedmac-fig6-mnist5k-runs", 2, 10, 2000),
}


def _run_figure(name: str, out: str | Path, *, quick: bool, rounds: int | None,
                eval_every: int | None, log, log_every: int, seeds: int | None = None,
                resume: bool = False, device=None
                ) -> tuple[dict, dict[tuple[str, str], RunResult], int, int]:
    """(config, results, rounds, eval_every) of a figure's runs (one seed unless
    ``seeds``); ``resume`` and ``device`` as for :func:`run_config`."""
    config_name, full_every, q_rounds, q_examples = FIGURES[name]
    config = _config(config_name)
    if quick:
        config = quick_overrides(config, rounds=rounds or q_rounds, examples=q_examples)
        eval_every = eval_every or 1
    elif rounds is not None:
        config = apply_overrides(config, [], rounds)
    eval_every = eval_every or full_every
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    run_config(config, out, seeds=seeds or 1, eval_every=eval_every, log=log,
               log_every=log_every, resume=resume, device=device)
    return config, load_results(config, out), resolve_runs(config)[0]["rounds"], eval_every


def _best(r: RunResult, metric: str) -> float | None:
    """``metric``'s best over rounds (mean over seeds), in %."""
    return _stat(r.stats, "best", metric)["mean"]


def _final(r: RunResult, metric: str) -> float | None:
    """``metric``'s last-round value (mean over seeds), in %."""
    return _stat(r.stats, "final", metric)["mean"]


def _column(history: History, metric: str) -> tuple[list[int], list[float]]:
    """(rounds, values) of the records (round >= 1) holding ``metric``."""
    xs, ys = [], []
    for r in history.records:
        v = r.get(metric)
        if isinstance(v, int | float) and math.isfinite(v):
            xs.append(int(r["round"]))
            ys.append(float(v))
    return xs, ys


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _figure_grid(rows: int, cols: int):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    return plt, fig, axes


def _finish(plt, fig, axes, path: Path, title: str) -> None:
    for ax in axes.flat:
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    fig.suptitle(title if len(title) < 120 else title[:117] + "...", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def figure2(out: str | Path, *, quick: bool = False, rounds: int | None = None,
            eval_every: int | None = None, log=print, log_every: int = 0,
            seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Figure 2: FedMac's R sweep and beta sweep on MNIST-5k (one seed).

    Writes ``fig2.png`` (per panel: GM and PM test accuracy and the training loss of
    the GM against rounds), ``table.txt`` and ``summary.json``: per run the best and
    last GM and PM test accuracy (%), the last training loss and the first round at
    which the PM reaches 95% of its best accuracy (how fast it converges).

    Parameters
    ----------
    out, quick, rounds, eval_every, log, log_every, seeds, resume, device : as for
        :func:`table1` (one seed unless ``seeds``).

    Returns
    -------
    dict
        the summary written to ``summary.json``.
    """
    tic, where = time.perf_counter(), device_fields(device)
    config, results, T, every = _run_figure("fedmac-fig2", out, quick=quick, rounds=rounds,
                                            eval_every=eval_every, log=log,
                                            log_every=log_every, seeds=seeds, resume=resume,
                                            device=device)
    n_seeds = max((len(r.mean.seeds) for r in results.values()), default=0)
    out = Path(out)
    rows = []
    for (panel, label), r in results.items():
        xs, pm = _column(r.mean, "personal_test_accuracy")
        best_pm = max(pm) if pm else None
        reach = next((x for x, v in zip(xs, pm, strict=True) if v >= 0.95 * best_pm), None) \
            if best_pm else None
        rows.append({"panel": panel, "label": label,
                     "gm_best": _best(r, "test_accuracy"), "gm_last": _final(r, "test_accuracy"),
                     "pm_best": _best(r, "personal_test_accuracy"),
                     "pm_last": _final(r, "personal_test_accuracy"),
                     "loss_last": r.stats["final"].get("objective", {}).get("mean"),
                     "pm_rounds_to_95pct_of_best": reach})
    plt, fig, axes = _figure_grid(2, 3)
    for i, panel in enumerate(["R", "beta"]):
        for (p, label), r in results.items():
            if p != panel:
                continue
            for j, metric in enumerate(("test_accuracy", "personal_test_accuracy",
                                        "objective")):
                xs, ys = _column(r.mean, metric)
                scale = 1.0 if metric == "objective" else 100.0
                axes[i, j].plot(xs, [scale * y for y in ys], label=label, lw=1.1)
        axes[i, 0].set_ylabel(f"{panel} sweep")
    for j, name in enumerate(("GM test accuracy (%)", "PM test accuracy (%)",
                              "training loss (GM)")):
        axes[0, j].set_title(name, fontsize=10)
        axes[1, j].set_xlabel("round")
    _finish(plt, fig, axes, out / "fig2.png", config.get("title", ""))
    lines = [f"Liu et al. 2023, Figure 2 on MNIST-5k: T = {T}, {n_seeds} seed(s), evaluated every "
             f"{every} round(s)",
             f"{'run':<16} {'GM best':>8} {'GM last':>8} {'PM best':>8} {'PM last':>8} "
             f"{'loss last':>10} {'PM: round to 95% of best':>25}"]
    for r in rows:
        lines.append(f"{r['panel'] + ': ' + r['label']:<16} {_fmt(r['gm_best']):>8} "
                     f"{_fmt(r['gm_last']):>8} {_fmt(r['pm_best']):>8} "
                     f"{_fmt(r['pm_last']):>8} {_fmt(r['loss_last'], 4):>10} "
                     f"{str(r['pm_rounds_to_95pct_of_best']):>25}")
    return _report(out, lines, log, title=config.get("title", ""), experiment="fedmac-fig2",
                   quick=quick, rounds=T, seeds=n_seeds, **where,
                   wall_clock_s=time.perf_counter() - tic, eval_every=every, runs=rows,
                   plots=["fig2.png"])


def figure3(out: str | Path, *, quick: bool = False, rounds: int | None = None,
            eval_every: int | None = None, log=print, log_every: int = 0,
            seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Figure 3: the six methods on MNIST-5k with Table 3's hyper-parameters (one seed).

    Writes ``accuracy_vs_round.png`` (GM and PM test accuracy against rounds),
    ``table.txt`` and ``summary.json``: the Table 1 style cells and the gap, in points,
    by which the FedMac PM's best accuracy exceeds each other model's, beside the
    paper's gaps (full MNIST).

    Parameters
    ----------
    out, quick, rounds, eval_every, log, log_every, seeds, resume, device : as for
        :func:`table1` (one seed unless ``seeds``).

    Returns
    -------
    dict
        the summary written to ``summary.json``.
    """
    tic, where = time.perf_counter(), device_fields(device)
    config, results, T, every = _run_figure("fedmac-fig3", out, quick=quick, rounds=rounds,
                                            eval_every=eval_every, log=log,
                                            log_every=log_every, seeds=seeds, resume=resume,
                                            device=device)
    n_seeds = max((len(r.mean.seeds) for r in results.values()), default=0)
    out = Path(out)
    rows = table_rows(results, {})
    best = {(r["method"], r["model"]): r["best"]["mean"] for r in rows}
    ours = best.get(("FedMac", "PM"))
    gaps = [{"method": m, "model": k, "gap": None if ours is None or best.get((m, k)) is None
             else ours - best[(m, k)], "paper_gap": g} for (m, k), g in PAPER_FIG3_GAPS.items()]
    plot_accuracy(results, out / "accuracy_vs_round.png", title=config.get("title", ""),
                  only=set(COLUMNS))
    lines = [format_table(rows, f"Liu et al. 2023, Figure 3 on MNIST-5k (Table 3 "
                                f"hyper-parameters): best mean test accuracy (%), T = {T}, "
                                f"{n_seeds} seed(s), evaluated every {every} round(s)"),
             "", "FedMac PM best minus each model's best (points): ours / paper"]
    for g in gaps:
        lines.append(f"  {g['method']:<11} {g['model']}: {_fmt(g['gap']):>6} / "
                     f"{g['paper_gap']:.2f}")
    return _report(out, lines, log, title=config.get("title", ""), experiment="fedmac-fig3",
                   quick=quick, rounds=T, seeds=n_seeds, **where,
                   wall_clock_s=time.perf_counter() - tic, eval_every=every, table=rows, gaps=gaps,
                   plots=["accuracy_vs_round.png"])


def dense_bits(dim: int) -> float:
    """The paper's cost of one client and round without sparsity: ``2 * 64 * d`` bits
    (upload and broadcast, no index matrix; Liu et al. 2023, Section 5.5)."""
    return 2.0 * 64 * dim


def figure4(out: str | Path, *, quick: bool = False, rounds: int | None = None,
            eval_every: int | None = None, log=print, log_every: int = 0,
            seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Figures 4 and 5: FedMac against the modified pFedMe under sparsity on
    Fashion-MNIST (one seed).

    Writes ``fig4.png`` (PM and GM test accuracy; the non-zero fraction of the PMs, of
    the uploads and of the GM; the accumulated cost per client against rounds) and
    ``table.txt`` / ``summary.json`` with, per method: best and last accuracies, the last
    non-zero fractions, the first round at which the mean PM non-zero fraction is at the
    50% floor (within 0.5 point), and the accumulated cost per client after 200 rounds
    (or the last) relative to the dense ``2 * 64 * d`` bits a round, twice: with the bits
    fedsparse records (``fedmac_bits_total``: non-zero fractions of what is sent, the
    uploads w_i and the broadcast) and with the paper's formula at the PMs' non-zero
    fraction (``2 * 64 s d + 2 (1 - s) d + d`` with s = ``personal_density``).

    Parameters
    ----------
    out, quick, rounds, eval_every, log, log_every, seeds, resume, device : as for
        :func:`table1` (one seed unless ``seeds``).

    Returns
    -------
    dict
        the summary written to ``summary.json``.
    """
    tic, where = time.perf_counter(), device_fields(device)
    config, results, T, every = _run_figure("fedmac-fig4", out, quick=quick, rounds=rounds,
                                            eval_every=eval_every, log=log,
                                            log_every=log_every, seeds=seeds, resume=resume,
                                            device=device)
    n_seeds = max((len(r.mean.seeds) for r in results.values()), default=0)
    out = Path(out)
    rows = []
    plt, fig, axes = _figure_grid(1, 3)
    at = min(200, T)
    for (_, label), r in results.items():
        h = r.mean
        xs, pm_density = _column(h, "personal_density")
        _, up_density = _column(h, "upload_density")
        gx, gm_density = _column(h, "model_density")
        dim = None
        if h.seeds and h.seeds[0].model is not None:
            dim = int(h.seeds[0].model.numel())
        dim = dim or 79510
        floor_round = next((x for x, v in zip(xs, pm_density, strict=True) if v <= 0.505),
                           None)
        # accumulated cost per client up to round `at`
        recorded = {int(rec["round"]): rec.get("fedmac_bits_total") for rec in h.records}
        formula = [fedmac_bits(dim, s, s) for s in pm_density]
        formula_total = sum(formula[:at])
        rows.append({
            "label": label,
            "pm_best": _best(r, "personal_test_accuracy"),
            "pm_last": _final(r, "personal_test_accuracy"),
            "gm_best": _best(r, "test_accuracy"), "gm_last": _final(r, "test_accuracy"),
            "pm_density_last": pm_density[-1] if pm_density else None,
            "upload_density_last": up_density[-1] if up_density else None,
            "gm_density_last": gm_density[-1] if gm_density else None,
            "pm_floor_round": floor_round, "cost_round": at,
            "recorded_cost_ratio": None if recorded.get(at) is None
            else recorded[at] / (at * dense_bits(dim)),
            "formula_cost_ratio": formula_total / (at * dense_bits(dim))})
        px, pacc = _column(h, "personal_test_accuracy")
        axes[0, 0].plot(px, [100 * v for v in pacc], label=f"{label} PM", lw=1.1)
        qx, gacc = _column(h, "test_accuracy")
        axes[0, 0].plot(qx, [100 * v for v in gacc], label=f"{label} GM", lw=0.8, ls="--")
        axes[0, 1].plot(xs, pm_density, label=f"{label} PM", lw=1.1)
        axes[0, 1].plot(xs, up_density, label=f"{label} uploads w_i", lw=0.8, ls=":")
        axes[0, 1].plot(gx, gm_density, label=f"{label} GM", lw=0.8, ls="--")
        rx = sorted(k for k, v in recorded.items() if v is not None)
        axes[0, 2].plot(rx, [recorded[k] / 1e6 for k in rx], label=f"{label} (recorded)",
                        lw=1.1)
        cum, acc = [], 0.0
        for b in formula:
            acc += b
            cum.append(acc / 1e6)
        axes[0, 2].plot(xs, cum, label=f"{label} (formula, s = PM)", lw=0.8, ls="--")
    if rows:
        axes[0, 2].plot(list(range(1, T + 1)), [t * dense_bits(dim) / 1e6
                                                 for t in range(1, T + 1)],
                        label="dense 2 x 64 d a round", color="grey", lw=0.8)
    axes[0, 0].set_title("test accuracy (%)", fontsize=10)
    axes[0, 1].set_title("non-zero fraction", fontsize=10)
    axes[0, 2].set_title("accumulated cost per client (Mbit)", fontsize=10)
    for ax in axes[0]:
        ax.set_xlabel("round")
    _finish(plt, fig, axes, out / "fig4.png", config.get("title", ""))
    lines = [f"Liu et al. 2023, Figures 4-5 on Fashion-MNIST: T = {T}, {n_seeds} seed(s), accuracy "
             f"evaluated every {every} round(s)",
             f"{'method':<16} {'PM best':>8} {'PM last':>8} {'GM best':>8} {'PM nnz':>7} "
             f"{'up nnz':>7} {'GM nnz':>7} {'floor at':>9} {'cost/dense':>11} "
             f"{'formula':>8}"]
    for r in rows:
        lines.append(f"{r['label']:<16} {_fmt(r['pm_best']):>8} "
                     f"{_fmt(r['pm_last']):>8} {_fmt(r['gm_best']):>8} "
                     f"{_fmt(r['pm_density_last'], 3):>7} {_fmt(r['upload_density_last'], 3):>7} "
                     f"{_fmt(r['gm_density_last'], 3):>7} {str(r['pm_floor_round']):>9} "
                     f"{_fmt(r['recorded_cost_ratio'], 3):>11} "
                     f"{_fmt(r['formula_cost_ratio'], 3):>8}")
    lines.append(f"(cost after {at} rounds, relative to 2 x 64 d bits a round)")
    return _report(out, lines, log, title=config.get("title", ""), experiment="fedmac-fig4",
                   quick=quick, rounds=T, seeds=n_seeds, **where,
                   wall_clock_s=time.perf_counter() - tic, eval_every=every, runs=rows,
                   plots=["fig4.png"])


def figure6(out: str | Path, *, quick: bool = False, rounds: int | None = None,
            eval_every: int | None = None, log=print, log_every: int = 0,
            seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Figure 6: FedMac's gamma_w sweep on MNIST-5k (one seed).

    Writes ``fig6.png`` (GM and PM test accuracy; the non-zero fraction of the GM and
    of the PMs, against rounds), ``table.txt`` and ``summary.json``: per gamma_w the
    best and last accuracies, the last non-zero fractions and the first round at which
    the GM is at the 50% floor (within 0.5 point).

    Parameters
    ----------
    out, quick, rounds, eval_every, log, log_every, seeds, resume, device : as for
        :func:`table1` (one seed unless ``seeds``).

    Returns
    -------
    dict
        the summary written to ``summary.json``.
    """
    tic, where = time.perf_counter(), device_fields(device)
    config, results, T, every = _run_figure("fedmac-fig6", out, quick=quick, rounds=rounds,
                                            eval_every=eval_every, log=log,
                                            log_every=log_every, seeds=seeds, resume=resume,
                                            device=device)
    n_seeds = max((len(r.mean.seeds) for r in results.values()), default=0)
    out = Path(out)
    rows = []
    plt, fig, axes = _figure_grid(1, 3)
    for (_, label), r in results.items():
        h = r.mean
        gx, gm_density = _column(h, "model_density")
        px, pm_density = _column(h, "personal_density")
        rows.append({"label": label,
                     "gm_best": _best(r, "test_accuracy"), "gm_last": _final(r, "test_accuracy"),
                     "pm_best": _best(r, "personal_test_accuracy"),
                     "pm_last": _final(r, "personal_test_accuracy"),
                     "gm_density_last": gm_density[-1] if gm_density else None,
                     "pm_density_last": pm_density[-1] if pm_density else None,
                     "gm_floor_round": next((x for x, v in zip(gx, gm_density, strict=True)
                                             if v <= 0.505), None)})
        for j, metric in enumerate(("test_accuracy", "personal_test_accuracy")):
            xs, ys = _column(h, metric)
            axes[0, j].plot(xs, [100 * v for v in ys], label=label, lw=1.1)
        axes[0, 2].plot(gx, gm_density, label=f"{label} GM", lw=1.1)
        axes[0, 2].plot(px, pm_density, label=f"{label} PM", lw=0.8, ls="--")
    for j, name in enumerate(("GM test accuracy (%)", "PM test accuracy (%)",
                              "non-zero fraction")):
        axes[0, j].set_title(name, fontsize=10)
        axes[0, j].set_xlabel("round")
    _finish(plt, fig, axes, out / "fig6.png", config.get("title", ""))
    lines = [f"Liu et al. 2023, Figure 6 on MNIST-5k: T = {T}, {n_seeds} seed(s), accuracy "
             f"evaluated every {every} round(s)",
             f"{'run':<16} {'GM best':>8} {'GM last':>8} {'PM best':>8} {'PM last':>8} "
             f"{'GM nnz':>7} {'PM nnz':>7} {'GM floor at':>12}"]
    for r in rows:
        lines.append(f"{r['label']:<16} {_fmt(r['gm_best']):>8} "
                     f"{_fmt(r['gm_last']):>8} {_fmt(r['pm_best']):>8} "
                     f"{_fmt(r['pm_last']):>8} {_fmt(r['gm_density_last'], 3):>7} "
                     f"{_fmt(r['pm_density_last'], 3):>7} {str(r['gm_floor_round']):>12}")
    return _report(out, lines, log, title=config.get("title", ""), experiment="fedmac-fig6",
                   quick=quick, rounds=T, seeds=n_seeds, **where,
                   wall_clock_s=time.perf_counter() - tic, eval_every=every, runs=rows,
                   plots=["fig6.png"])


@register_experiment("fedmac-fig2", paper="fedmac",
                     description="Liu et al. 2023 Figure 2 on MNIST-5k: FedMac with R in "
                                 "{5, 10, 20, 30} and beta in {1, 1.5, 2}")
def fig2(out: Path, *, quick: bool = False, rounds: int | None = None,
                  seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Figure 2 (config ``fedmac-fig2-mnist5k-runs``): 200 rounds, one seed, evaluated
    every 2 rounds. ``quick``: 10 rounds on 2,000 images."""
    return figure2(out, quick=quick, rounds=rounds, seeds=seeds, resume=resume,
                   device=device)


@register_experiment("fedmac-fig3", paper="fedmac",
                     description="Liu et al. 2023 Figure 3 on MNIST-5k: convergence of the "
                                 "six methods with Table 3's hyper-parameters, and the FedMac "
                                 "PM's lead over each")
def fig3(out: Path, *, quick: bool = False, rounds: int | None = None,
                  seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Figure 3 (config ``fedmac-fig3-mnist5k-runs``): 800 rounds, one seed, evaluated
    every 4 rounds. ``quick``: 10 rounds on 2,000 images."""
    return figure3(out, quick=quick, rounds=rounds, seeds=seeds, resume=resume,
                   device=device)


@register_experiment("fedmac-fig4", paper="fedmac",
                     description="Liu et al. 2023 Figures 4-5 on Fashion-MNIST: FedMac against "
                                 "the modified pFedMe under sparsity: accuracy, non-zero "
                                 "fraction, communication cost")
def fig4(out: Path, *, quick: bool = False, rounds: int | None = None,
                  seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Figures 4 and 5 (config ``fedmac-fig4-fmnist-runs``): 300 rounds, one seed,
    accuracy evaluated every 5 rounds (non-zero fractions and bits every round).
    ``quick``: 10 rounds on 4,000 images."""
    return figure4(out, quick=quick, rounds=rounds, seeds=seeds, resume=resume,
                   device=device)


@register_experiment("fedmac-fig6", paper="fedmac",
                     description="Liu et al. 2023 Figure 6 on MNIST-5k: FedMac with gamma_w in "
                                 "{0, 1e-6, 1e-5, 1e-4}: sparsity against rounds")
def fig6(out: Path, *, quick: bool = False, rounds: int | None = None,
                  seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Figure 6 (config ``fedmac-fig6-mnist5k-runs``): 200 rounds, one seed, evaluated
    every 2 rounds. ``quick``: 10 rounds on 2,000 images."""
    return figure6(out, quick=quick, rounds=rounds, seeds=seeds, resume=resume,
                   device=device)
