"""SAFARI (Mao et al. 2022) on Fashion-MNIST: the paper's Figures 2-8 as named experiments.

Each figure is one command, ``fedsparse run NAME`` (``--quick`` for a minutes-long version):

* ``safari-fmnist`` - Figure 2 (MAG + FedAvg: no drop vs compensation vs no
  compensation) at P = 0.6 (the paper) and at the public code's asymmetric P (0.18 for
  group 1, 0.6 for group 2), and Figure 5: the server's final distance record as a heat
  map, with the ratio of the mean within-group to the mean between-group distance;
* ``safari-fmnist-cnn`` - Figure 2's asymmetric panel and Figure 5 with the small CNN
  instead of the MLP, at a reduced budget (one seed, 15 rounds, 12,000 images);
* ``safari-pruners`` - Figures 3 and 4: the same three curves for SynFlow (Tanaka et al.
  2020) and FedSpa (Huang et al. 2022) with FedAvg;
* ``safari-fedprox`` - Figures 9-11: MAG, SynFlow and FedSpa with FedProx (Li et al. 2020);
* ``safari-probability`` - Figures 6 and 7: P in {0.2, 0.4, 0.6, 0.8, 1.0}, without and
  with compensation (MAG + FedAvg);
* ``safari-sparsity`` - Figure 8: pruned fraction in {0, 0.2, 0.4, 0.6, 0.7, 0.8} (MAG +
  FedAvg, compensation, P = 0.6).

The setup is the paper's (Section 5) where it can run on two CPU cores: 50 clients in
two groups of 25 (clients 0-24 hold labels 0-4, clients 25-49 labels 5-9, an equal share
of each label per client: ``partition = "groups"`` with ``contiguous = true``); Adam, lr
1e-3, fresh each round; batch 64; tau = 5 local steps; 60% of the prunable weights
pruned (``density = 0.4``) per layer; every link succeeds with probability P, at least
one client of each group arrives every round and every upload of round 0 arrives (the
public code's rule, so the distance record starts full). The model is the 784-100-10
MLP (79,510 parameters) rather than ResNet-20, which is far too slow here. The paper
tests on the union of per-client held-out subsets; here each client trains on all of its
share and the official 10,000 test images are dealt to the clients by label (each
label's 1,000 split evenly among the 25 clients that hold it), so the union is the whole
test split (:attr:`Budget.test_split`).

Each experiment writes the runner's files (``config.toml``, which ``fedsparse run
OUT/config.toml --seeds N`` reruns, ``summary.json``, the runs' histories, the accuracy
and loss curves), plus ``safari.json``: per panel, each run's score (the mean test
accuracy of the last :data:`SCORE_ROUNDS` recorded rounds) over the seeds and the paired
differences between runs that share a seed (same initial model, partition, mini-batches
and channel draws).

The modules: :mod:`.safari_setup` (the setup as config tables, the budgets, the
figures' configs), :mod:`.safari_analysis` (scores, differences, heat maps, figures and
tables) and this one (running them, the named experiments); every public name of the
first two is importable from here as well.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from .._validation import check_int
from ..history import read_json_object
from .registry import register_experiment
from .runner import run_experiment
from .safari_analysis import (
    MEASURES,
    analyse,
    curve_mean,
    distance_record,
    draw_figures,
    group_distance_ratio,
    heatmaps_analysis,
    jitter,
    markdown_rows,
    plot_heatmap,
    report_lines,
    score,
    seed_histories,
    sweep_plot,
)
from .safari_setup import (
    AGGREGATOR_NAMES,
    ASYMMETRIC,
    CNN,
    CNN_QUICK,
    COMP,
    DENSITY,
    FASHION_DEBIAN_DIR,
    FEDPROX,
    FIG2_CLAIM,
    FULL,
    LABELS_PER_GROUP,
    MODELS,
    NO_COMP,
    NO_DROP,
    NUM_CLIENTS,
    NUM_GROUPS,
    PAD,
    PROBABILITIES,
    PROBABILITY,
    PRUNED_FRACTIONS,
    PRUNER_NAMES,
    QUICK,
    REFERENCES,
    SCORE_ROUNDS,
    SWEEP,
    TEST_FRACTION,
    TRAINING,
    Budget,
    algorithm_table,
    channel_table,
    data_table,
    fig2_config,
    figure_panels,
    probability_config,
    pruners_config,
    sparsity_config,
    three_curves,
)
from .seeds import device_fields, strict_json


def fashion_available() -> bool:
    """True when Fashion-MNIST's IDX files are installed (Debian package or cache)."""
    from ..data import named

    places = [Path(FASHION_DEBIAN_DIR), named.data_home() / "fashion-mnist"]
    return any(named._find_idx_set(p) for p in places)


def _skip(out: Path) -> dict:
    msg = ("skipped: Fashion-MNIST is not installed. Install it with `apt-get install -y "
           "dataset-fashion-mnist` (or put the IDX files in $FEDSPARSE_DATA/fashion-mnist).")
    print(msg)
    out.mkdir(parents=True, exist_ok=True)
    summary = {"skipped": msg, "plots": []}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def run_safari(config: dict, out, budget: Budget, *, heatmaps: bool = False,
               sweep: tuple | None = None, log=print, resume: bool = False,
               device=None) -> dict:
    """Run ``config`` over ``budget.seeds`` seeds, then (:func:`finish_safari`) draw the
    figures and write ``safari.json`` (scores, paired differences, Figure 5's ratios with
    ``heatmaps``).

    Parameters
    ----------
    config : an experiment config (e.g. :func:`fig2_config`).
    out : output folder.
    budget : rounds, seeds, subsample and model (already in ``config``; the seeds are
        used here).
    heatmaps : draw Figure 5 from every compensated run.
    sweep : ``(field, value_of(run), file name, title)`` for a score-vs-value plot.
    resume : continue the runs saved in ``out`` from their checkpoints (an interrupted
        run then ends with the summary of an uninterrupted one).
    device : where the rounds run ("cpu", "cuda", "cuda:N", "auto"; None: the CPU).

    Returns
    -------
    The runner's summary with ``safari`` (the analysis) and the extra plots added, and
    the run's ``rounds``, ``seeds``, ``device``, ``gpu`` and ``wall_clock_s``.
    """
    budget = budget.checked()
    out = Path(out)
    where = device_fields(device)  # a bad device is refused before anything runs
    if not fashion_available():
        return _skip(out)
    tic = time.perf_counter()
    if device is not None:
        config = {**config, "defaults": {**config["defaults"], "device": where["device"]}}
    summary = run_experiment(config, out, progress=False, log=log, seeds=budget.seeds,
                             resume=resume)
    summary.update(rounds=budget.rounds, **where)
    summary["wall_clock_s"] = time.perf_counter() - tic
    return finish_safari(config, out, budget, summary, heatmaps=heatmaps, sweep=sweep,
                         log=log)


def finish_safari(config: dict, out, budget: Budget, summary: dict | None = None, *,
                  heatmaps: bool = False, sweep: tuple | None = None, log=print) -> dict:
    """The figures, ``safari.json`` and ``summary.json`` of runs already saved under
    ``out`` by :func:`run_safari` (to redraw or re-analyse without running again).

    Parameters as :func:`run_safari`; ``summary`` is the runner's summary (default: read
    from ``out/summary.json``).
    """
    out = Path(out)
    if summary is None:
        summary = read_json_object(out / "summary.json")
    summary["plots"] = [p for p in summary.get("plots", [])
                        if not p.startswith(("test_", "distances-", "score_vs_"))]
    summary["plots"] += draw_figures(config, out, config.get("title", ""))
    analysis = {"budget": {"rounds": budget.rounds, "seeds": budget.seeds,
                           "max_examples": budget.max_examples, "model": budget.model,
                           "test_split": budget.test_split},
                "measures": {
                    "score": f"mean test accuracy of the last {SCORE_ROUNDS} rounds",
                    "curve_mean": "mean test accuracy over all rounds",
                    "jitter": "mean |round-to-round change| of the test accuracy over the "
                              "second half of the run"},
                "panels": analyse(config, out, budget.seeds)}
    if heatmaps:
        analysis["distances"] = heatmaps_analysis(config, out, budget.seeds)
        summary["plots"] += [v["image"] for v in analysis["distances"].values()]
    if sweep is not None:
        field, value_of, name, title = sweep
        if sweep_plot(config, analysis["panels"], out, field, value_of, name, title):
            summary["plots"].append(name)
    with open(out / "safari.json", "w") as fh:
        json.dump(analysis, fh, indent=2)
    with open(out / "summary.json", "w") as fh:  # again, with the plots drawn here
        json.dump(strict_json(summary), fh, indent=2, default=str, allow_nan=False)
    for line in report_lines(analysis):
        log(line)
    summary["safari"] = analysis
    return summary


def _budget(quick: bool, full: Budget = FULL, rounds: int | None = None,
            seeds: int | None = None, quick_budget: Budget = QUICK) -> Budget:
    """The full or quick budget with ``rounds`` and ``seeds`` in place of its own where
    given (the command line's ``--rounds`` and ``--seeds``)."""
    budget = quick_budget if quick else full
    check_int("rounds", rounds, minimum=1, allow_none=True)
    check_int("seeds", seeds, minimum=1, allow_none=True)
    return replace(budget, rounds=rounds or budget.rounds, seeds=seeds or budget.seeds)


def budget_seeds(full: Budget, quick_budget: Budget = QUICK):
    """``quick -> seeds`` of an experiment with these budgets, unless told (as
    :func:`_budget` picks them)."""
    return lambda quick: _budget(quick, full, quick_budget=quick_budget).seeds


@register_experiment("safari-fmnist", paper="safari",
                     default_seeds=budget_seeds(FULL),
                     description="Mao et al. 2022 Figs. 2 and 5 on Fashion-MNIST: MAG + "
                                 "FedAvg, no drop vs compensation vs no compensation at "
                                 "P = 0.6 and asymmetric P; the final distance record")
def safari_fmnist(out, *, quick: bool = False, rounds: int | None = None,
                  seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """MAG + FedAvg, 60% pruned, 50 clients in two label groups, MLP 784-100-10: no drop,
    compensation and no compensation at P = 0.6 and at the asymmetric P (0.18 / 0.6);
    the distance record of each compensated run as a heat map (Figure 5).
    Full: 50 rounds x 3 seeds on all 60,000 images; --quick: 15 rounds, 1 seed, 12,000
    images."""
    budget = _budget(quick, FULL, rounds, seeds)
    return run_safari(fig2_config(budget), out, budget, heatmaps=True, resume=resume,
                      device=device)


@register_experiment("safari-fmnist-cnn", paper="safari",
                     default_seeds=budget_seeds(CNN, CNN_QUICK),
                     description="Mao et al. 2022 Figs. 2 and 5 on Fashion-MNIST with the "
                                 "small CNN: MAG + FedAvg at the asymmetric P, one seed")
def safari_fmnist_cnn(out, *, quick: bool = False, rounds: int | None = None,
                      seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """safari-fmnist's asymmetric panel (no drop, compensation, no compensation, the
    distance record) with the small CNN instead of the MLP, at a reduced budget: 15
    rounds, 1 seed, 12,000 images; --quick: 2 rounds, 2,000 images."""
    budget = _budget(quick, CNN, rounds, seeds, quick_budget=CNN_QUICK)
    return run_safari(fig2_config(budget, probabilities=(ASYMMETRIC,)), out, budget,
                      heatmaps=True, resume=resume, device=device)


@register_experiment("safari-pruners", paper="safari",
                     default_seeds=budget_seeds(SWEEP),
                     description="Mao et al. 2022 Figs. 3-4 on Fashion-MNIST: SynFlow and "
                                 "FedSpa + FedAvg, no drop vs compensation vs none")
def safari_pruners(out, *, quick: bool = False, rounds: int | None = None,
                   seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """SynFlow (100 scoring iterations) and FedSpa + FedAvg, otherwise as safari-fmnist.
    Full: 30 rounds x 2 seeds; --quick: 15 rounds, 1 seed, 12,000 images."""
    budget = _budget(quick, SWEEP, rounds, seeds)
    return run_safari(pruners_config(budget), out, budget, resume=resume, device=device)


@register_experiment("safari-fedprox", paper="safari",
                     default_seeds=budget_seeds(FEDPROX),
                     description="Mao et al. 2022 Figs. 9-11 on Fashion-MNIST: MAG, SynFlow "
                                 "and FedSpa + FedProx (mu = 0.001), no drop vs compensation "
                                 "vs none")
def safari_fedprox(out, *, quick: bool = False, rounds: int | None = None,
                   seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """MAG, SynFlow and FedSpa + FedProx (mu = 0.001) at P = 0.6 (the paper's channel; the
    asymmetric one is left out for time), otherwise as safari-fmnist.
    Full: 20 rounds x 2 seeds; --quick: 15 rounds, 1 seed, 12,000 images."""
    budget = _budget(quick, FEDPROX, rounds, seeds)
    return run_safari(pruners_config(budget, "fed_prox", tuple(PRUNER_NAMES), (PROBABILITY,)),
                      out, budget, resume=resume, device=device)


@register_experiment("safari-probability", paper="safari",
                     default_seeds=budget_seeds(SWEEP),
                     description="Mao et al. 2022 Figs. 6-7 on Fashion-MNIST: success "
                                 "probability P in {0.2, ..., 1.0}, without and with "
                                 "compensation")
def safari_probability(out, *, quick: bool = False, rounds: int | None = None,
                       seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """MAG + FedAvg, 60% pruned, P in {0.2, 0.4, 0.6, 0.8, 1.0} on every link, without and
    with compensation; plus the score against P. Full: 30 rounds x 2 seeds; --quick:
    15 rounds, 1 seed, 12,000 images."""
    budget = _budget(quick, SWEEP, rounds, seeds)
    return run_safari(probability_config(budget), out, budget, resume=resume, device=device,
                      sweep=("success probability P", lambda r: r["channel"]["probability"],
                             "score_vs_probability.png",
                             "Test accuracy against P (MAG + FedAvg, 60% pruned)"))


@register_experiment("safari-sparsity", paper="safari",
                     default_seeds=budget_seeds(SWEEP),
                     description="Mao et al. 2022 Fig. 8 on Fashion-MNIST: pruned fraction "
                                 "0-0.8, MAG + FedAvg with compensation")
def safari_sparsity(out, *, quick: bool = False, rounds: int | None = None,
                    seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """MAG + FedAvg with compensation at P = 0.6, pruned fraction in {0, 0.2, 0.4, 0.6, 0.7,
    0.8}; plus the score against the pruned fraction. Full: 30 rounds x 2 seeds;
    --quick: 15 rounds, 1 seed, 12,000 images."""
    budget = _budget(quick, SWEEP, rounds, seeds)
    return run_safari(sparsity_config(budget), out, budget, resume=resume, device=device,
                      sweep=("pruned fraction alpha",
                             lambda r: round(1 - r["algorithm"]["density"], 10),
                             "score_vs_pruned.png",
                             "Test accuracy against the pruned fraction (MAG + FedAvg, "
                             "compensation, P = 0.6)"))


__all__ = ["AGGREGATOR_NAMES", "ASYMMETRIC", "Budget", "CNN", "CNN_QUICK", "COMP", "DENSITY",
           "FASHION_DEBIAN_DIR", "FEDPROX", "FIG2_CLAIM", "FULL", "LABELS_PER_GROUP", "MEASURES",
           "MODELS", "NO_COMP", "NO_DROP", "NUM_CLIENTS", "NUM_GROUPS", "PAD", "PROBABILITIES",
           "PROBABILITY", "PRUNED_FRACTIONS", "PRUNER_NAMES", "QUICK", "REFERENCES",
           "SCORE_ROUNDS", "SWEEP", "TEST_FRACTION", "TRAINING", "algorithm_table", "analyse",
           "channel_table", "curve_mean", "data_table", "distance_record", "draw_figures",
           "fashion_available", "fig2_config", "figure_panels", "finish_safari",
           "group_distance_ratio", "jitter", "markdown_rows", "plot_heatmap",
           "probability_config", "pruners_config", "report_lines", "run_safari", "score",
           "seed_histories", "sparsity_config", "three_curves"]
