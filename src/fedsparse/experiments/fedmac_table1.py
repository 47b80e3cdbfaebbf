"""Liu et al. 2023 (FedMac), Table 1: one command per row (``fedsparse run NAME
[--quick]``), its runs over seeds (:mod:`.fedmac_runs`) and the GM/PM table beside the
paper's numbers (:mod:`.fedmac_report`).

Each row runs the TOML config ``NAME-runs`` (``fedsparse show NAME-runs``; the same runs
take ``fedsparse run NAME-runs --seeds 3``, whose table :func:`runner_table` prints).
"""

from __future__ import annotations

import time
from pathlib import Path

from .config import resolve_runs
from .fedmac_plots import plot_accuracy
from .fedmac_report import COLUMNS, PAPER_TABLE1, format_table, table_rows, write_summary
from .fedmac_runs import load_results, named_config, quick_overrides, run_config
from .registry import register_experiment
from .run_selection import apply_overrides
from .seeds import device_fields

#: Full and quick settings of each Table 1 row: (config, paper key, seeds, eval_every,
#: quick rounds, quick examples or synthetic size scale). The full runs are the paper's:
#: T = 800 (in the configs), 3 seeds ("at least 3 times").
TABLE1 = {
    "fedmac-table1-fmnist": ("fedmac-table1-fmnist-runs", "fmnist", 3, 4, 20, 6000),
    "fedmac-table1-mnist5k": ("fedmac-table1-mnist5k-runs", "mnist", 3, 4, 20, 2000),
    "fedmac-table1-synthetic": ("fedmac-table1-synthetic-runs", "synthetic", 3, 4, 20, 1),
    "fedmac-table1-vgg": ("fedmac-table1-vgg-runs", "cifar100", 3, 4, 10, 2000),
}


def table1_seeds(name: str):
    """``quick -> seeds`` of the Table 1 row ``name`` unless told: its full seeds, one
    when quick."""
    return lambda quick: 1 if quick else TABLE1[name][2]


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
    config_name, paper_key, _, full_every, q_rounds, q_size = TABLE1[name]
    config = named_config(config_name)
    if quick:
        config = quick_overrides(config, rounds=rounds or q_rounds, examples=q_size,
                                 size_scale=q_size)
        eval_every = eval_every or 1
    elif rounds is not None:
        config = apply_overrides(config, [], rounds)
    seeds = seeds or table1_seeds(name)(quick)
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
    write_summary(out, summary)
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


@register_experiment("fedmac-table1-fmnist", paper="fedmac",
                     default_seeds=table1_seeds("fedmac-table1-fmnist"),
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
                     default_seeds=table1_seeds("fedmac-table1-mnist5k"),
                     description="Liu et al. 2023 Table 1, MNIST row on the 5,000-image MNIST "
                                 "subset: GM/PM best mean test accuracy of the six methods")
def table1_mnist5k(out: Path, *, quick: bool = False, rounds: int | None = None,
                   seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Table 1's MNIST row on MNIST-5k (config ``fedmac-table1-mnist5k-runs``): T = 800,
    3 seeds, evaluated every 4 rounds. ``quick``: 20 rounds on 2,000 images."""
    return table1("fedmac-table1-mnist5k", out, quick=quick, rounds=rounds, seeds=seeds,
                  resume=resume, device=device)


@register_experiment("fedmac-table1-synthetic", paper="fedmac",
                     default_seeds=table1_seeds("fedmac-table1-synthetic"),
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
                     default_seeds=table1_seeds("fedmac-table1-vgg"),
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
