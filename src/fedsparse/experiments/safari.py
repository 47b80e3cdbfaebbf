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
MLP (79,510 parameters) rather than ResNet-20, which is far too slow here; the test set
is the union of per-client held-out subsets (1/6 of each client's share of the 60,000
training images: 10,000 images, 1,000 per label), which is how the paper evaluates.

Each experiment writes the runner's files (``config.toml``, which ``fedsparse run
OUT/config.toml --seeds N`` reruns, ``summary.json``, the runs' histories, the accuracy
and loss curves), plus ``safari.json``: per panel, each run's score (the mean test
accuracy of the last :data:`SCORE_ROUNDS` recorded rounds) over the seeds and the paired
differences between runs that share a seed (same initial model, partition, mini-batches
and channel draws).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from .._validation import ConfigError, check_int, fail
from ..algorithms.compensation import check_record, dense_record
from ..checkpoints import read_checkpoint
from ..history import History
from ..report.plots import plot_panels, plot_sweep, wrap
from .config import resolve_runs
from .registry import register_experiment
from .runner import run_experiment
from .seeds import device_fields, strict_json

#: Clients and groups of the paper's split, and the held-out share per client.
NUM_CLIENTS = 50
NUM_GROUPS = 2
LABELS_PER_GROUP = 5
TEST_FRACTION = 1 / 6
#: The models: the MLP of the CPU experiments here; the small CNN (about 30 times slower
#: per round on two cores); the paper's ResNet-20 with a one-channel stem on 32 x 32
#: images (:mod:`fedsparse.experiments.safari_paper`, a GPU run).
MODELS = {
    "mlp": {"kind": "mlp", "in_features": 784, "hidden": [100], "num_classes": 10},
    "cnn": {"kind": "cnn", "in_channels": 1, "num_classes": 10, "image_size": 28},
    "resnet20": {"kind": "resnet20", "in_channels": 1, "num_classes": 10},
}
#: Zero pixels around each 28 x 28 image per model: ResNet-20 reads 32 x 32 (CIFAR's size).
PAD = {"resnet20": 2}
#: The paper's local training (Section 5) and its 60% pruned.
TRAINING = {"step_size": 1e-3, "local_steps": 5, "batch_size": 64, "optimizer": "adam"}
DENSITY = 0.4
#: P of every link in the paper, and the public code's asymmetric variant.
PROBABILITY = 0.6
ASYMMETRIC = "asymmetric"
#: Pruner names in the labels.
PRUNER_NAMES = {"magnitude": "MAG", "synflow": "SynFlow", "fedspa": "FedSpa"}
AGGREGATOR_NAMES = {"fed_avg": "FedAvg", "fed_prox": "FedProx"}
#: The three runs of Figures 2-4.
NO_DROP, COMP, NO_COMP = "no drop", "compensation", "no compensation"
#: Figures 6-8's grids (the paper lists neither; these are five P values and its
#: sparsity range 0-0.8).
PROBABILITIES = (0.2, 0.4, 0.6, 0.8, 1.0)
PRUNED_FRACTIONS = (0.0, 0.2, 0.4, 0.6, 0.7, 0.8)
#: The runs the results page compares the others with: the no-drop run and compensation
#: (Figures 2-4), P = 1 (Figures 6-7) and the dense model (Figure 8).
REFERENCES = {NO_DROP, COMP, "P = 1", "pruned 0"}
#: A run's score: the mean test accuracy of its last this many recorded rounds (one
#: round's accuracy moves by a point or more from round to round).
SCORE_ROUNDS = 10
FASHION_DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"


@dataclass(frozen=True)
class Budget:
    """How long an experiment runs.

    Parameters
    ----------
    rounds : communication rounds T.
    seeds : replicates; replicate k adds k to the run seed and the data seed.
    max_examples : subsample Fashion-MNIST's 60,000 training images to this many first
        (None: all).
    model : a key of :data:`MODELS`.
    """

    rounds: int
    seeds: int
    max_examples: int | None = None
    model: str = "mlp"

    def checked(self) -> Budget:
        check_int("rounds", self.rounds, minimum=1)
        check_int("seeds", self.seeds, minimum=1)
        check_int("max_examples", self.max_examples, minimum=NUM_CLIENTS * 4, allow_none=True)
        if self.model not in MODELS:
            raise fail("model", self.model, f"must be one of {', '.join(MODELS)}")
        return self


#: The full runs (the times ``fedsparse list`` gives, on two shared cores): Figure 2 at
#: 50 rounds x 3 seeds; Figures 3-4 and 6-8 (26 runs between them) at 30 rounds x 2 seeds
#: and Figures 9-11 (9 runs) at 20 rounds x 2 seeds, so that all of them fit in about an
#: hour of a shared core. ``QUICK``: the ``--quick`` ones.
FULL = Budget(rounds=50, seeds=3)
SWEEP = Budget(rounds=30, seeds=2)
FEDPROX = Budget(rounds=20, seeds=2)
#: Figure 2's asymmetric panel with the small CNN (215,370 parameters), about 23 times the
#: MLP's cost per round: one seed, 15 rounds on 12,000 images (about 9 minutes).
CNN = Budget(rounds=15, seeds=1, max_examples=12_000, model="cnn")
CNN_QUICK = Budget(rounds=2, seeds=1, max_examples=2_000, model="cnn")
QUICK = Budget(rounds=15, seeds=1, max_examples=12_000)


# ----------------------------------------------------------------------------- configs


def data_table(budget: Budget) -> dict:
    """The paper's balanced two-group split of Fashion-MNIST (see the module docstring)."""
    table = {"kind": "federated_real", "dataset": "fashion_mnist", "partition": "groups",
             "num_clients": NUM_CLIENTS, "num_groups": NUM_GROUPS,
             "labels_per_group": LABELS_PER_GROUP, "contiguous": True,
             "test_fraction": TEST_FRACTION, "seed": 0,
             "flatten": budget.model == "mlp"}
    if PAD.get(budget.model):
        table["pad"] = PAD[budget.model]
    if budget.max_examples is not None:
        table["max_examples"] = budget.max_examples
    return table


def channel_table(probability) -> dict:
    """The channel of the paper's experiments at success probability ``probability``
    (a number or ``"asymmetric"``), with the groups of :func:`data_table`."""
    return {"kind": "safari", "probability": probability, "num_clients": NUM_CLIENTS,
            "num_groups": NUM_GROUPS, "at_least_one_per_group": True,
            "full_first_round": True}


def algorithm_table(budget: Budget, *, pruner: str = "magnitude", aggregator: str = "fed_avg",
                    density: float = DENSITY, compensation: bool = True) -> dict:
    """SAFARI's sparse training with the paper's local training (FedSpa anneals over the
    run's own rounds, which the round loop sends; FedProx's mu is the public code's
    0.001)."""
    table = {"kind": "safari", "pruner": pruner, "density": density, **TRAINING,
             "aggregator": aggregator, "compensation": compensation, "payload": "model",
             "scope": "layer"}
    if aggregator == "fed_prox":
        table["mu"] = 0.001
    return table


def _base(budget: Budget, title: str, description: str, paper_claim: str) -> dict:
    return {"title": title, "description": description, "paper_claim": paper_claim,
            "defaults": {"rounds": budget.rounds, "seed": 0, "data": data_table(budget),
                         "problem": {"kind": "neural", "model": MODELS[budget.model]}},
            "runs": [],
            # the figures are drawn by draw_figures (the no-drop run in every panel)
            "plot": {"y": [], "x": ["round"]}}


def _channel_name(probability) -> str:
    if probability == ASYMMETRIC:
        return "asymmetric P (0.18 / 0.6)"
    return f"P = {probability:g}"


def three_curves(budget: Budget, pruner: str, aggregator: str, probabilities) -> list[dict]:
    """No drop (every upload arrives), and compensation and no compensation at each
    success probability of ``probabilities``.

    The no-drop run is shared by the channels: it sits in its own panel
    (``"<pruner> + <aggregator>, no drop"``) and :func:`figure_panels` adds it to every
    channel's panel for the plots and the paired differences.
    """
    prefix = f"{PRUNER_NAMES[pruner]} + {AGGREGATOR_NAMES[aggregator]}"
    runs = [{"label": NO_DROP, "panel": f"{prefix}, {NO_DROP}", "channel": {"kind": "perfect"},
             "algorithm": algorithm_table(budget, pruner=pruner, aggregator=aggregator,
                                          compensation=False)}]
    for probability in probabilities:
        for label, comp in ((COMP, True), (NO_COMP, False)):
            runs.append({"label": label, "panel": f"{prefix}, {_channel_name(probability)}",
                         "channel": channel_table(probability),
                         "algorithm": algorithm_table(budget, pruner=pruner,
                                                      aggregator=aggregator,
                                                      compensation=comp)})
    return runs


def figure_panels(config: dict, found: dict) -> dict[str, dict]:
    """``{panel: {label: found[slug]}}`` for the figures: every run of a perfect channel
    (the no-drop reference) is drawn in each panel of the same pruner and aggregator
    whose channel loses uploads, and not in a panel of its own; other runs as in the
    config.

    Parameters
    ----------
    config : the experiment config.
    found : ``{run slug: anything}`` (histories, scores, ...).
    """
    runs = resolve_runs(config)

    def key(run):
        a = run["algorithm"]
        return (a.get("pruner"), a.get("aggregator"), a.get("density"))

    refs = {key(r): r for r in runs if (r.get("channel") or {}).get("kind") == "perfect"}
    panels: dict[str, dict] = {}
    for run in runs:
        if run in refs.values():
            continue
        panel = panels.setdefault(run["panel"], {})
        ref = refs.get(key(run))
        if ref is not None and ref["label"] not in panel:
            panel[ref["label"]] = found[ref["slug"]]
        panel[run["label"]] = found[run["slug"]]
    return panels


FIG2_CLAIM = ("With compensation, accuracy and loss are the same as with no drop; without "
              "compensation the unreliable channel degrades convergence (Mao et al. 2022, "
              "Figs. 2-4, CIFAR-10, ResNet-20, 60% pruned, P = 0.6).")


def fig2_config(budget: Budget = FULL, probabilities=(PROBABILITY, ASYMMETRIC)) -> dict:
    """``safari-fmnist``: MAG + FedAvg at P = 0.6 and at the asymmetric P (one panel per
    entry of ``probabilities``)."""
    config = _base(budget, "Mao et al. 2022 Fig. 2 on Fashion-MNIST: MAG + FedAvg, no drop vs "
                   "compensation vs no compensation",
                   "50 clients in two label groups, 60% pruned per layer (MAG), Adam 1e-3, "
                   "tau = 5, batch 64; P = 0.6 on every link, and the public code's "
                   "asymmetric P (0.18 group 1, 0.6 group 2).", FIG2_CLAIM)
    config["runs"] += three_curves(budget, "magnitude", "fed_avg", probabilities)
    return config


def pruners_config(budget: Budget = FULL, aggregator: str = "fed_avg",
                   pruners=("synflow", "fedspa"), probabilities=(PROBABILITY, ASYMMETRIC)
                   ) -> dict:
    """``safari-pruners`` (SynFlow, FedSpa + FedAvg at P = 0.6 and the asymmetric P) and
    ``safari-fedprox`` (MAG, SynFlow, FedSpa + FedProx at P = 0.6): the three curves
    per pruner and channel."""
    names = ", ".join(PRUNER_NAMES[p] for p in pruners)
    figs = "Figs. 3-4" if aggregator == "fed_avg" else "Figs. 9-11"
    config = _base(budget, f"Mao et al. 2022 {figs} on Fashion-MNIST: {names} + "
                   f"{AGGREGATOR_NAMES[aggregator]}, no drop vs compensation vs none",
                   f"As safari-fmnist with the pruners {names} and the "
                   f"{AGGREGATOR_NAMES[aggregator]} aggregator.", FIG2_CLAIM)
    for pruner in pruners:
        config["runs"] += three_curves(budget, pruner, aggregator, probabilities)
    return config


def probability_config(budget: Budget = FULL, probabilities=PROBABILITIES) -> dict:
    """``safari-probability``: every link at P, without (Fig. 6) and with (Fig. 7)
    compensation; MAG + FedAvg."""
    config = _base(budget, "Mao et al. 2022 Figs. 6-7 on Fashion-MNIST: success "
                   "probability P, without and with compensation",
                   "MAG + FedAvg, 60% pruned, P on every link (at least one client per "
                   "group per round).",
                   "Without compensation, convergence and accuracy suffer when P < 1; with "
                   "compensation they stay the same for every P (Mao et al. 2022, Figs. "
                   "6-7).")
    for comp, panel in ((False, "without compensation (Fig. 6)"),
                        (True, "with compensation (Fig. 7)")):
        for p in probabilities:
            config["runs"].append({"label": f"P = {p:g}", "panel": panel,
                                   "channel": channel_table(p),
                                   "algorithm": algorithm_table(budget, compensation=comp)})
    return config


def sparsity_config(budget: Budget = FULL, pruned=PRUNED_FRACTIONS) -> dict:
    """``safari-sparsity``: the pruned fraction alpha (density 1 - alpha), MAG + FedAvg
    with compensation at P = 0.6 (Fig. 8)."""
    config = _base(budget, "Mao et al. 2022 Fig. 8 on Fashion-MNIST: pruned fraction",
                   "MAG + FedAvg with compensation, P = 0.6; alpha = fraction of the "
                   "prunable weights pruned per layer (alpha = 0: dense).",
                   "The pruned fraction has little effect on accuracy and loss, especially "
                   "below 0.7 (Mao et al. 2022, Fig. 8).")
    for a in pruned:
        config["runs"].append({"label": f"pruned {a:g}",
                               "panel": "MAG + FedAvg, compensation, P = 0.6",
                               "channel": channel_table(PROBABILITY),
                               "algorithm": algorithm_table(budget, density=round(1 - a, 10))})
    return config


# ---------------------------------------------------------------------------- analysis


def score(history: History, last: int = SCORE_ROUNDS) -> float | None:
    """Mean test accuracy of the last ``last`` recorded rounds (None if there is none)."""
    values = [v for v in history.column("test_accuracy") if v is not None]
    if not values:
        return None
    tail = values[-last:]
    return float(sum(tail) / len(tail))


def curve_mean(history: History) -> float | None:
    """Mean test accuracy over all recorded rounds: higher when a run learns sooner."""
    values = [v for v in history.column("test_accuracy") if v is not None]
    return float(sum(values) / len(values)) if values else None


def _stats(values: list[float]) -> dict:
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return {"mean": None, "std": None, "n": 0, "values": []}
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if v.size > 1 else 0.0,
            "n": int(v.size), "values": [float(x) for x in v]}


def jitter(history: History) -> float | None:
    """Mean |change| of the test accuracy from one round to the next over the second half
    of the run: how much the curve shakes once it has left the start."""
    values = [v for v in history.column("test_accuracy") if v is not None]
    tail = np.asarray(values[len(values) // 2:], dtype=float)
    return float(np.abs(np.diff(tail)).mean()) if tail.size > 1 else None


#: What :func:`analyse` reports per run: name -> function of one seed's history.
MEASURES = {"score": score, "curve_mean": curve_mean, "jitter": jitter}


def seed_histories(out: Path, run: dict, seeds: int) -> list[History]:
    """The per-seed histories of ``run`` written by :func:`run_experiment` with seeds."""
    return [History.load(out / run["slug"] / f"seed-{run['seed'] + k}") for k in range(seeds)]


def analyse(config: dict, out: Path, seeds: int) -> dict:
    """Per figure panel (:func:`figure_panels`): each run's :data:`MEASURES` over the
    seeds, and for every pair of runs the per-seed differences of their scores and curve
    means -- a paired comparison: runs with the same seed share the model's
    initialisation, the partition, the mini-batches and the channel draws."""
    measured = {}
    for run in resolve_runs(config):
        hists = seed_histories(out, run, seeds)
        measured[run["slug"]] = {name: _stats([fn(h) for h in hists])
                                 for name, fn in MEASURES.items()} | {"dir": run["slug"]}
    panels: dict[str, dict] = {}
    for panel, runs in figure_panels(config, measured).items():
        entry = panels[panel] = {"runs": runs, "differences": {}}
        labels = list(runs)
        for i, a in enumerate(labels):
            for b in labels[i + 1:]:
                entry["differences"][f"{a} - {b}"] = {
                    name: _stats([x - y for x, y in zip(runs[a][name]["values"],
                                                        runs[b][name]["values"],
                                                        strict=True)])
                    for name in ("score", "curve_mean")}
    return panels


def draw_figures(config: dict, out: Path, title: str) -> list[str]:
    """Test accuracy and test loss against rounds, one panel per figure panel
    (:func:`figure_panels`), each run its mean over the seeds with a ± std band."""
    means = {run["slug"]: History.load(out / run["slug"]) for run in resolve_runs(config)}
    panels = figure_panels(config, means)
    written = []
    for y in ("test_accuracy", "test_objective"):
        name = f"{y}_vs_round.png"
        if plot_panels(panels, y=y, x="round", path=out / name, title=title):
            written.append(name)
    return written


def group_distance_ratio(distances: torch.Tensor, groups) -> dict:
    """Mean distance between clients of the same group, of different groups, and their
    ratio (below 1: the record sees the groups), over the measured pairs u != v.

    Parameters
    ----------
    distances : (N, N) the server's distance record, +inf where never measured.
    groups : (N,) group id of each client.
    """
    d = torch.as_tensor(distances, dtype=torch.float64)
    g = torch.as_tensor(np.asarray(groups))
    same = g[:, None] == g[None, :]
    off = ~torch.eye(d.shape[0], dtype=torch.bool)
    ok = torch.isfinite(d) & off
    within = d[ok & same]
    between = d[ok & ~same]
    if within.numel() == 0 or between.numel() == 0:
        return {"within": None, "between": None, "ratio": None,
                "measured_pairs": int(ok.sum()) // 2}
    w, b = float(within.mean()), float(between.mean())
    return {"within": w, "between": b, "ratio": w / b, "measured_pairs": int(ok.sum()) // 2}


def distance_record(checkpoint: Path, num_clients: int = NUM_CLIENTS) -> torch.Tensor:
    """The server's final distance record from a run's checkpoint, as the (N, N) matrix
    (+inf where never measured; the state keeps only the measured pairs). The file is
    verified as a resume would verify it (:func:`fedsparse.checkpoints.read_checkpoint`)."""
    ckpt = read_checkpoint(checkpoint)
    state = ckpt.get("state", {}) if isinstance(ckpt, dict) else {}
    if "similarity" not in state:
        raise ConfigError(f"checkpoint {str(checkpoint)!r} holds no distance record (was "
                          "the run compensated?)")
    check_record(state["similarity"], num_clients)
    return dense_record(state["similarity"], num_clients)


def plot_heatmap(distances: torch.Tensor, path: Path, *, title: str) -> None:
    """The distance record as an image (never-measured pairs and the diagonal blank)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = torch.as_tensor(distances, dtype=torch.float64).clone()
    d[~torch.isfinite(d)] = float("nan")
    d.fill_diagonal_(float("nan"))
    fig, ax = plt.subplots(figsize=(5.6, 4.8), layout="constrained")
    im = ax.imshow(d.numpy(), cmap="viridis", interpolation="nearest")
    fig.colorbar(im, ax=ax, label="||x_u - x_v||_2 (last round both arrived)")
    ax.set_xlabel("client v")
    ax.set_ylabel("client u")
    ax.set_title(wrap(title, 5.0, 10), fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _heatmaps(config: dict, out: Path, seeds: int) -> dict:
    """Figure 5 from every compensated run of ``config``: the seed-0 heat map and the
    within/between ratio of every seed."""
    from ..data.partition import contiguous_groups

    groups = contiguous_groups(NUM_CLIENTS, NUM_GROUPS)
    result = {}
    for run in resolve_runs(config):
        if not run["algorithm"].get("compensation"):
            continue
        per_seed = []
        for k in range(seeds):
            folder = out / run["slug"] / f"seed-{run['seed'] + k}"
            record = distance_record(folder / "checkpoint.pt")
            per_seed.append(group_distance_ratio(record, groups))
            if k == 0:
                name = f"distances-{run['slug']}.png"
                plot_heatmap(record, out / name, title=f"Final distance record, "
                             f"{run['panel']} (seed {run['seed']})")
        result[run["panel"]] = {"image": name, "per_seed": per_seed,
                                "ratio": _stats([r["ratio"] for r in per_seed])}
    return result


def _sweep_plot(config: dict, analysis: dict, out: Path, field: str, value_of, name: str,
                title: str) -> str | None:
    """Score against the swept value, one line per panel (mean ± std over seeds)."""
    table: dict[str, list[dict]] = {}
    for run in resolve_runs(config):
        s = analysis[run["panel"]]["runs"][run["label"]]["score"]
        table.setdefault(run["panel"] or "score", []).append(
            {"x": value_of(run), "value": s["mean"], "std": s["std"], "diverged": False})
    ok = plot_sweep(table, field=field, metric="test_accuracy", path=out / name, title=title,
                    ylabel=f"test accuracy (mean of the last {SCORE_ROUNDS} rounds)")
    return name if ok else None


# ------------------------------------------------------------------------------ running


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
        summary = json.loads((out / "summary.json").read_text())
    summary["plots"] = [p for p in summary.get("plots", [])
                        if not p.startswith(("test_", "distances-", "score_vs_"))]
    summary["plots"] += draw_figures(config, out, config.get("title", ""))
    analysis = {"budget": {"rounds": budget.rounds, "seeds": budget.seeds,
                           "max_examples": budget.max_examples, "model": budget.model},
                "measures": {
                    "score": f"mean test accuracy of the last {SCORE_ROUNDS} rounds",
                    "curve_mean": "mean test accuracy over all rounds",
                    "jitter": "mean |round-to-round change| of the test accuracy over the "
                              "second half of the run"},
                "panels": analyse(config, out, budget.seeds)}
    if heatmaps:
        analysis["distances"] = _heatmaps(config, out, budget.seeds)
        summary["plots"] += [v["image"] for v in analysis["distances"].values()]
    if sweep is not None:
        field, value_of, name, title = sweep
        if _sweep_plot(config, analysis["panels"], out, field, value_of, name, title):
            summary["plots"].append(name)
    with open(out / "safari.json", "w") as fh:
        json.dump(analysis, fh, indent=2)
    with open(out / "summary.json", "w") as fh:  # again, with the plots drawn here
        json.dump(strict_json(summary), fh, indent=2, default=str, allow_nan=False)
    for line in report_lines(analysis):
        log(line)
    summary["safari"] = analysis
    return summary


def _fmt(s: dict, scale: float = 100.0) -> str:
    if s.get("mean") is None:
        return "n/a"
    return f"{s['mean'] * scale:.2f} ± {s['std'] * scale:.2f} (n={s['n']})"


def report_lines(analysis: dict) -> list[str]:
    """The analysis as printable lines (accuracies and differences in points of %)."""
    lines = []
    for panel, entry in analysis["panels"].items():
        lines.append(f"[{panel or 'runs'}] mean ± std over seeds, in %: score (last "
                     f"{SCORE_ROUNDS} rounds) / curve mean / jitter")
        for label, r in entry["runs"].items():
            lines.append(f"  {label}: {_fmt(r['score'])} / {_fmt(r['curve_mean'])} / "
                         f"{_fmt(r['jitter'])}")
        for pair, d in entry["differences"].items():
            if pair.startswith((NO_DROP, COMP)):
                lines.append(f"  {pair}: score {_fmt(d['score'])}, curve mean "
                             f"{_fmt(d['curve_mean'])}")
    for panel, d in analysis.get("distances", {}).items():
        lines.append(f"[{panel}] within-group / between-group mean distance: "
                     f"{_fmt(d['ratio'], 1.0)}")
    return lines


def _pm(s: dict) -> str:
    """``mean ± std`` in points of % (two decimals), as the results page prints it."""
    if s.get("mean") is None:
        return "n/a"
    return f"{s['mean'] * 100:.2f} ± {s['std'] * 100:.2f}"


def markdown_rows(analysis: dict) -> dict[str, list[str]]:
    """The analysis as the Markdown table rows of the results page (each cell in points of
    %, mean ± std over the seeds); the pins test re-runs an experiment and looks for these
    rows on the page.

    Returns
    -------
    ``{"runs": [...], "differences": [...], "distances": [...]}``: rows ``| panel | run |
    score | curve mean | jitter |``; rows ``| panel | pair | score | curve mean |`` for
    the pairs (paired by seed) with a run of :data:`REFERENCES`; and rows ``| panel |
    within / between distance (per seed) | mean ± std |``.
    """
    rows: dict[str, list[str]] = {"runs": [], "differences": [], "distances": []}
    for panel, entry in analysis["panels"].items():
        for label, r in entry["runs"].items():
            rows["runs"].append(f"| {panel} | {label} | {_pm(r['score'])} | "
                                f"{_pm(r['curve_mean'])} | {_pm(r['jitter'])} |")
        for pair, d in entry["differences"].items():
            if set(pair.split(" - ")) & REFERENCES:
                rows["differences"].append(f"| {panel} | {pair} | {_pm(d['score'])} | "
                                           f"{_pm(d['curve_mean'])} |")
    for panel, d in analysis.get("distances", {}).items():
        per_seed = ", ".join(f"{r['ratio']:.3f}" for r in d["per_seed"])
        rows["distances"].append(f"| {panel} | {per_seed} | {d['ratio']['mean']:.3f} ± "
                                 f"{d['ratio']['std']:.3f} |")
    return rows


def _budget(quick: bool, full: Budget = FULL, rounds: int | None = None,
            seeds: int | None = None, quick_budget: Budget = QUICK) -> Budget:
    """The full or quick budget with ``rounds`` and ``seeds`` in place of its own where
    given (the command line's ``--rounds`` and ``--seeds``)."""
    budget = quick_budget if quick else full
    check_int("rounds", rounds, minimum=1, allow_none=True)
    check_int("seeds", seeds, minimum=1, allow_none=True)
    return replace(budget, rounds=rounds or budget.rounds, seeds=seeds or budget.seeds)


#: What every SAFARI experiment function takes beyond ``out`` and ``quick``: ``rounds``
#: and ``seeds`` replace its budget's, ``resume`` continues an interrupted run from its
#: checkpoints, ``device`` is where the rounds run (see :func:`run_safari`).


@register_experiment("safari-fmnist", paper="safari",
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
                     description="Mao et al. 2022 Figs. 3-4 on Fashion-MNIST: SynFlow and "
                                 "FedSpa + FedAvg, no drop vs compensation vs none")
def safari_pruners(out, *, quick: bool = False, rounds: int | None = None,
                  seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """SynFlow (100 scoring iterations) and FedSpa + FedAvg, otherwise as safari-fmnist.
    Full: 30 rounds x 2 seeds; --quick: 15 rounds, 1 seed, 12,000 images."""
    budget = _budget(quick, SWEEP, rounds, seeds)
    return run_safari(pruners_config(budget), out, budget, resume=resume, device=device)


@register_experiment("safari-fedprox", paper="safari",
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


__all__ = ["ASYMMETRIC", "Budget", "CNN", "FEDPROX", "FULL", "QUICK", "SWEEP", "analyse",
           "fig2_config", "group_distance_ratio", "markdown_rows", "probability_config",
           "pruners_config", "run_safari", "score", "sparsity_config"]
