"""Liu et al. 2023 (FedMac) experiments: Figures 2-6 here, Table 1's rows in
:mod:`.fedmac_table1`.

Each experiment is one command, ``fedsparse run NAME [--quick]``, and runs the TOML
config ``NAME-runs`` (``fedsparse show NAME-runs``; the same runs take ``fedsparse run
NAME-runs --seeds 3`` or ``fedsparse sweep``) through :func:`.fedmac_runs.run_config`:
the shared runner on one thread, evaluating every ``eval_every`` rounds, replicate by
replicate. A figure then writes its plot, a text table and ``summary.json``.

The modules, one idea each: :mod:`.fedmac_runs` (the runs over seeds and reading them
back), :mod:`.fedmac_report` (the paper's numbers, the table cells and their text),
:mod:`.fedmac_plots` (the plots), :mod:`.fedmac_table1` (Table 1) and this one (the
figures). Their public names are importable from here as well.
"""

from __future__ import annotations

import time
from pathlib import Path

from .._threads import torch_threads
from ..algorithms.personalized import fedmac_bits
from ..history import History
from .config import resolve_runs
from .fedmac_plots import column, figure_grid, finish_figure, plot_accuracy
from .fedmac_report import (
    COLUMNS,
    FIELD,
    PAPER_FIG3_GAPS,
    PAPER_TABLE1,
    best_pct,
    dense_bits,
    final_pct,
    fmt,
    format_stat,
    format_table,
    seed_cells,
    table_rows,
    write_report,
)
from .fedmac_runs import (
    SIZE_WEIGHTED,
    RunResult,
    load_results,
    named_config,
    quick_overrides,
    run_config,
    uniform_weights,
)
from .fedmac_table1 import DATA_NAMES, TABLE1, runner_table, table1
from .registry import register_experiment
from .run_selection import apply_overrides
from .seeds import device_fields

#: Names kept from before the split (the results pages and the tests use them). The
#: runs' settings (``CHECKPOINT_EVERY``) are :mod:`.fedmac_runs`'s: set them there.
_config = named_config
_fmt = fmt
one_thread = torch_threads

__all__ = ["COLUMNS", "DATA_NAMES", "FIELD", "FIGURES", "FIGURE_SEEDS", "PAPER_FIG3_GAPS",
           "PAPER_TABLE1", "SIZE_WEIGHTED", "TABLE1", "RunResult", "dense_bits", "figure2",
           "figure3", "figure4", "figure6", "format_stat", "format_table", "load_results",
           "plot_accuracy", "quick_overrides", "run_config", "runner_table", "table1",
           "table_rows", "uniform_weights"]

#: Full and quick settings of each figure: (config, full eval_every, quick rounds, quick
#: examples). The full runs are the paper's T = 800 (in the configs), with
#: :data:`FIGURE_SEEDS` seeds; a quick one has one.
FIGURES = {
    "fedmac-fig2": ("fedmac-fig2-mnist5k-runs", 2, 10, 2000),
    "fedmac-fig3": ("fedmac-fig3-mnist5k-runs", 4, 10, 2000),
    "fedmac-fig4": ("fedmac-fig4-fmnist-runs", 5, 10, 4000),
    "fedmac-fig6": ("fedmac-fig6-mnist5k-runs", 2, 10, 2000),
}
#: Seeds of a figure's full run: two, so that each ordering is seen in more than one.
FIGURE_SEEDS = 2
#: How a figure's FedAvg and FedProx average (only Figure 3 runs them): 1/S, the paper's.
FIGURE_WEIGHTING = "uniform"


def figure_seeds(quick: bool) -> int:
    """The seeds a figure runs unless told: :data:`FIGURE_SEEDS`, one when ``quick``."""
    return 1 if quick else FIGURE_SEEDS


def _run_figure(name: str, out: str | Path, *, quick: bool, rounds: int | None,
                eval_every: int | None, log, log_every: int, seeds: int | None = None,
                resume: bool = False, device=None
                ) -> tuple[dict, dict[tuple[str, str], RunResult], int, int]:
    """(config, results, rounds, eval_every) of a figure's runs (:data:`FIGURE_SEEDS`
    seeds, one when ``quick``, unless ``seeds``); ``resume`` and ``device`` as for
    :func:`run_config`."""
    config_name, full_every, q_rounds, q_examples = FIGURES[name]
    config = named_config(config_name)
    if quick:
        config = quick_overrides(config, rounds=rounds or q_rounds, examples=q_examples)
        eval_every = eval_every or 1
    elif rounds is not None:
        config = apply_overrides(config, [], rounds)
    eval_every = eval_every or full_every
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = seeds or figure_seeds(quick)
    run_config(config, out, seeds=seeds, eval_every=eval_every, log=log,
               log_every=log_every, resume=resume, device=device, weighting=FIGURE_WEIGHTING)
    return config, load_results(config, out), resolve_runs(config)[0]["rounds"], eval_every


def _round_to_95pct_of_best(history: History) -> int | None:
    """First evaluated round at which the PM reaches 95% of its best accuracy."""
    xs, pm = column(history, "personal_test_accuracy")
    best = max(pm, default=None)
    return next((x for x, v in zip(xs, pm, strict=True) if v >= 0.95 * best), None) \
        if best else None


def _floor_round(rounds: list[int], density: list[float]) -> int | None:
    """First of ``rounds`` at which the non-zero fraction ``density`` is at the 50%
    floor (within half a point); the two lists as :func:`column` gives them."""
    return next((x for x, v in zip(rounds, density, strict=True) if v <= 0.505), None)


def figure2(out: str | Path, *, quick: bool = False, rounds: int | None = None,
            eval_every: int | None = None, log=print, log_every: int = 0,
            seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Figure 2: FedMac's R sweep and beta sweep on MNIST-5k.

    Writes ``fig2.png`` (per panel: GM and PM test accuracy and the training loss of
    the GM against rounds), ``table.txt`` and ``summary.json``: per run the best and
    last GM and PM test accuracy (%), the last training loss and the first round at
    which the PM reaches 95% of its best accuracy (how fast it converges): the means
    over seeds, and each seed's in ``per_seed``.

    Parameters
    ----------
    out, quick, rounds, eval_every, log, log_every, seeds, resume, device : as for
        :func:`table1` (:data:`FIGURE_SEEDS` seeds, one when ``quick``, unless ``seeds``).

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
        rows.append({"panel": panel, "label": label,
                     "gm_best": best_pct(r, "test_accuracy"),
                     "gm_last": final_pct(r, "test_accuracy"),
                     "pm_best": best_pct(r, "personal_test_accuracy"),
                     "pm_last": final_pct(r, "personal_test_accuracy"),
                     "loss_last": r.stats["final"].get("objective", {}).get("mean"),
                     "pm_rounds_to_95pct_of_best": _round_to_95pct_of_best(r.mean),
                     "per_seed": seed_cells(
                         r, loss_last=lambda h: h.final("objective"),
                         pm_rounds_to_95pct_of_best=_round_to_95pct_of_best)})
    plt, fig, axes = figure_grid(2, 3)
    for i, panel in enumerate(["R", "beta"]):
        for (p, label), r in results.items():
            if p != panel:
                continue
            for j, metric in enumerate(("test_accuracy", "personal_test_accuracy",
                                        "objective")):
                xs, ys = column(r.mean, metric)
                scale = 1.0 if metric == "objective" else 100.0
                axes[i, j].plot(xs, [scale * y for y in ys], label=label, lw=1.1)
        axes[i, 0].set_ylabel(f"{panel} sweep")
    for j, name in enumerate(("GM test accuracy (%)", "PM test accuracy (%)",
                              "training loss (GM)")):
        axes[0, j].set_title(name, fontsize=10)
        axes[1, j].set_xlabel("round")
    finish_figure(plt, fig, axes, out / "fig2.png", config.get("title", ""))
    lines = [f"Liu et al. 2023, Figure 2 on MNIST-5k: T = {T}, {n_seeds} seed(s), evaluated every "
             f"{every} round(s)",
             f"{'run':<16} {'GM best':>8} {'GM last':>8} {'PM best':>8} {'PM last':>8} "
             f"{'loss last':>10} {'PM: round to 95% of best':>25}"]
    for r in rows:
        lines.append(f"{r['panel'] + ': ' + r['label']:<16} {fmt(r['gm_best']):>8} "
                     f"{fmt(r['gm_last']):>8} {fmt(r['pm_best']):>8} "
                     f"{fmt(r['pm_last']):>8} {fmt(r['loss_last'], 4):>10} "
                     f"{str(r['pm_rounds_to_95pct_of_best']):>25}")
    return write_report(out, lines, log, title=config.get("title", ""), experiment="fedmac-fig2",
                        quick=quick, rounds=T, seeds=n_seeds, **where,
                        wall_clock_s=time.perf_counter() - tic, eval_every=every,
                        weighting=FIGURE_WEIGHTING, runs=rows,
                        plots=["fig2.png"])


def figure3(out: str | Path, *, quick: bool = False, rounds: int | None = None,
            eval_every: int | None = None, log=print, log_every: int = 0,
            seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Figure 3: the six methods on MNIST-5k with Table 3's hyper-parameters.

    Writes ``accuracy_vs_round.png`` (GM and PM test accuracy against rounds),
    ``table.txt`` and ``summary.json``: the Table 1 style cells and the gap, in points,
    by which the FedMac PM's best accuracy exceeds each other model's, beside the
    paper's gaps (full MNIST).

    Parameters
    ----------
    out, quick, rounds, eval_every, log, log_every, seeds, resume, device : as for
        :func:`table1` (:data:`FIGURE_SEEDS` seeds, one when ``quick``, unless ``seeds``).

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
        lines.append(f"  {g['method']:<11} {g['model']}: {fmt(g['gap']):>6} / "
                     f"{g['paper_gap']:.2f}")
    return write_report(out, lines, log, title=config.get("title", ""), experiment="fedmac-fig3",
                        quick=quick, rounds=T, seeds=n_seeds, **where,
                        wall_clock_s=time.perf_counter() - tic, eval_every=every,
                        weighting=FIGURE_WEIGHTING, table=rows,
                        gaps=gaps, plots=["accuracy_vs_round.png"])


def figure4(out: str | Path, *, quick: bool = False, rounds: int | None = None,
            eval_every: int | None = None, log=print, log_every: int = 0,
            seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Figures 4 and 5: FedMac against the modified pFedMe under sparsity on
    Fashion-MNIST (each seed's accuracies and floor round in a row's ``per_seed``).

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
        :func:`table1` (:data:`FIGURE_SEEDS` seeds, one when ``quick``, unless ``seeds``).

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
    plt, fig, axes = figure_grid(1, 3)
    at = min(200, T)
    for (_, label), r in results.items():
        h = r.mean
        xs, pm_density = column(h, "personal_density")
        _, up_density = column(h, "upload_density")
        gx, gm_density = column(h, "model_density")
        dim = None
        if h.seeds and h.seeds[0].model is not None:
            dim = int(h.seeds[0].model.numel())
        dim = dim or 79510
        # accumulated cost per client up to round `at`
        recorded = {int(rec["round"]): rec.get("fedmac_bits_total") for rec in h.records}
        formula = [fedmac_bits(dim, s, s) for s in pm_density]
        formula_total = sum(formula[:at])
        rows.append({
            "label": label,
            "pm_best": best_pct(r, "personal_test_accuracy"),
            "pm_last": final_pct(r, "personal_test_accuracy"),
            "gm_best": best_pct(r, "test_accuracy"), "gm_last": final_pct(r, "test_accuracy"),
            "pm_density_last": pm_density[-1] if pm_density else None,
            "upload_density_last": up_density[-1] if up_density else None,
            "gm_density_last": gm_density[-1] if gm_density else None,
            "pm_floor_round": _floor_round(xs, pm_density), "cost_round": at,
            "recorded_cost_ratio": None if recorded.get(at) is None
            else recorded[at] / (at * dense_bits(dim)),
            "formula_cost_ratio": formula_total / (at * dense_bits(dim)),
            "per_seed": seed_cells(
                r, pm_floor_round=lambda seed: _floor_round(*column(seed, "personal_density")))})
        px, pacc = column(h, "personal_test_accuracy")
        axes[0, 0].plot(px, [100 * v for v in pacc], label=f"{label} PM", lw=1.1)
        qx, gacc = column(h, "test_accuracy")
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
    finish_figure(plt, fig, axes, out / "fig4.png", config.get("title", ""))
    lines = [f"Liu et al. 2023, Figures 4-5 on Fashion-MNIST: T = {T}, {n_seeds} seed(s), accuracy "
             f"evaluated every {every} round(s)",
             f"{'method':<16} {'PM best':>8} {'PM last':>8} {'GM best':>8} {'PM nnz':>7} "
             f"{'up nnz':>7} {'GM nnz':>7} {'floor at':>9} {'cost/dense':>11} "
             f"{'formula':>8}"]
    for r in rows:
        lines.append(f"{r['label']:<16} {fmt(r['pm_best']):>8} "
                     f"{fmt(r['pm_last']):>8} {fmt(r['gm_best']):>8} "
                     f"{fmt(r['pm_density_last'], 3):>7} {fmt(r['upload_density_last'], 3):>7} "
                     f"{fmt(r['gm_density_last'], 3):>7} {str(r['pm_floor_round']):>9} "
                     f"{fmt(r['recorded_cost_ratio'], 3):>11} "
                     f"{fmt(r['formula_cost_ratio'], 3):>8}")
    lines.append(f"(cost after {at} rounds, relative to 2 x 64 d bits a round)")
    return write_report(out, lines, log, title=config.get("title", ""), experiment="fedmac-fig4",
                        quick=quick, rounds=T, seeds=n_seeds, **where,
                        wall_clock_s=time.perf_counter() - tic, eval_every=every,
                        weighting=FIGURE_WEIGHTING, runs=rows,
                        plots=["fig4.png"])


def figure6(out: str | Path, *, quick: bool = False, rounds: int | None = None,
            eval_every: int | None = None, log=print, log_every: int = 0,
            seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Figure 6: FedMac's gamma_w sweep on MNIST-5k (each seed's accuracies and floor
    round in a row's ``per_seed``).

    Writes ``fig6.png`` (GM and PM test accuracy; the non-zero fraction of the GM and
    of the PMs, against rounds), ``table.txt`` and ``summary.json``: per gamma_w the
    best and last accuracies, the last non-zero fractions and the first round at which
    the GM is at the 50% floor (within 0.5 point).

    Parameters
    ----------
    out, quick, rounds, eval_every, log, log_every, seeds, resume, device : as for
        :func:`table1` (:data:`FIGURE_SEEDS` seeds, one when ``quick``, unless ``seeds``).

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
    plt, fig, axes = figure_grid(1, 3)
    for (_, label), r in results.items():
        h = r.mean
        gx, gm_density = column(h, "model_density")
        px, pm_density = column(h, "personal_density")
        rows.append({"label": label,
                     "gm_best": best_pct(r, "test_accuracy"),
                     "gm_last": final_pct(r, "test_accuracy"),
                     "pm_best": best_pct(r, "personal_test_accuracy"),
                     "pm_last": final_pct(r, "personal_test_accuracy"),
                     "gm_density_last": gm_density[-1] if gm_density else None,
                     "pm_density_last": pm_density[-1] if pm_density else None,
                     "gm_floor_round": _floor_round(gx, gm_density),
                     "per_seed": seed_cells(
                         r, gm_floor_round=lambda seed: _floor_round(
                             *column(seed, "model_density")))})
        for j, metric in enumerate(("test_accuracy", "personal_test_accuracy")):
            xs, ys = column(h, metric)
            axes[0, j].plot(xs, [100 * v for v in ys], label=label, lw=1.1)
        axes[0, 2].plot(gx, gm_density, label=f"{label} GM", lw=1.1)
        axes[0, 2].plot(px, pm_density, label=f"{label} PM", lw=0.8, ls="--")
    for j, name in enumerate(("GM test accuracy (%)", "PM test accuracy (%)",
                              "non-zero fraction")):
        axes[0, j].set_title(name, fontsize=10)
        axes[0, j].set_xlabel("round")
    finish_figure(plt, fig, axes, out / "fig6.png", config.get("title", ""))
    lines = [f"Liu et al. 2023, Figure 6 on MNIST-5k: T = {T}, {n_seeds} seed(s), accuracy "
             f"evaluated every {every} round(s)",
             f"{'run':<16} {'GM best':>8} {'GM last':>8} {'PM best':>8} {'PM last':>8} "
             f"{'GM nnz':>7} {'PM nnz':>7} {'GM floor at':>12}"]
    for r in rows:
        lines.append(f"{r['label']:<16} {fmt(r['gm_best']):>8} "
                     f"{fmt(r['gm_last']):>8} {fmt(r['pm_best']):>8} "
                     f"{fmt(r['pm_last']):>8} {fmt(r['gm_density_last'], 3):>7} "
                     f"{fmt(r['pm_density_last'], 3):>7} {str(r['gm_floor_round']):>12}")
    return write_report(out, lines, log, title=config.get("title", ""), experiment="fedmac-fig6",
                        quick=quick, rounds=T, seeds=n_seeds, **where,
                        wall_clock_s=time.perf_counter() - tic, eval_every=every,
                        weighting=FIGURE_WEIGHTING, runs=rows,
                        plots=["fig6.png"])


@register_experiment("fedmac-fig2", paper="fedmac", default_seeds=figure_seeds,
                     description="Liu et al. 2023 Figure 2 on MNIST-5k: FedMac with R in "
                                 "{5, 10, 20, 30} and beta in {1, 1.5, 2}")
def fig2(out: Path, *, quick: bool = False, rounds: int | None = None,
         seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Figure 2 (config ``fedmac-fig2-mnist5k-runs``): 800 rounds, two seeds, evaluated
    every 2 rounds. ``quick``: 10 rounds on 2,000 images."""
    return figure2(out, quick=quick, rounds=rounds, seeds=seeds, resume=resume,
                   device=device)


@register_experiment("fedmac-fig3", paper="fedmac", default_seeds=figure_seeds,
                     description="Liu et al. 2023 Figure 3 on MNIST-5k: convergence of the "
                                 "six methods with Table 3's hyper-parameters, and the FedMac "
                                 "PM's lead over each")
def fig3(out: Path, *, quick: bool = False, rounds: int | None = None,
         seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Figure 3 (config ``fedmac-fig3-mnist5k-runs``): 800 rounds, two seeds, evaluated
    every 4 rounds. ``quick``: 10 rounds on 2,000 images."""
    return figure3(out, quick=quick, rounds=rounds, seeds=seeds, resume=resume,
                   device=device)


@register_experiment("fedmac-fig4", paper="fedmac", default_seeds=figure_seeds,
                     description="Liu et al. 2023 Figures 4-5 on Fashion-MNIST: FedMac against "
                                 "the modified pFedMe under sparsity: accuracy, non-zero "
                                 "fraction, communication cost")
def fig4(out: Path, *, quick: bool = False, rounds: int | None = None,
         seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Figures 4 and 5 (config ``fedmac-fig4-fmnist-runs``): 800 rounds, two seeds,
    accuracy evaluated every 5 rounds (non-zero fractions and bits every round).
    ``quick``: 10 rounds on 4,000 images."""
    return figure4(out, quick=quick, rounds=rounds, seeds=seeds, resume=resume,
                   device=device)


@register_experiment("fedmac-fig6", paper="fedmac", default_seeds=figure_seeds,
                     description="Liu et al. 2023 Figure 6 on MNIST-5k: FedMac with gamma_w in "
                                 "{0, 1e-6, 1e-5, 1e-4}: sparsity against rounds")
def fig6(out: Path, *, quick: bool = False, rounds: int | None = None,
         seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Figure 6 (config ``fedmac-fig6-mnist5k-runs``): 800 rounds, two seeds, evaluated
    every 2 rounds. ``quick``: 10 rounds on 2,000 images."""
    return figure6(out, quick=quick, rounds=rounds, seeds=seeds, resume=resume,
                   device=device)
