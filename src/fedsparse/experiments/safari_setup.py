"""SAFARI (Mao et al. 2022) on Fashion-MNIST, the setup: the paper's split, models,
training and channel as config tables, the budgets, and the configs of its figures
(:mod:`fedsparse.experiments.safari` runs them).

The setup is the paper's (Section 5) where it can run on two CPU cores: 50 clients in
two groups of 25 (clients 0-24 hold labels 0-4, clients 25-49 labels 5-9, an equal share
of each label per client); Adam, lr 1e-3, fresh each round; batch 64; tau = 5 local
steps; 60% of the prunable weights pruned (``density = 0.4``) per layer; every link
succeeds with probability P, at least one client of each group arrives every round and
every upload of round 0 arrives.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._validation import check_choice, check_int, fail
from .config import resolve_runs

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
    test_split : ``"official"`` (the default: the clients train on all of their share,
        and the official 10,000 test images are dealt to them by label, each label's
        split evenly among the clients that hold it) or ``"held_out"`` (each client
        tests on :data:`TEST_FRACTION` of its share of the training images); see
        :func:`fedsparse.data.federated_real`.
    """

    rounds: int
    seeds: int
    max_examples: int | None = None
    model: str = "mlp"
    test_split: str = "official"

    def checked(self) -> Budget:
        check_int("rounds", self.rounds, minimum=1)
        check_int("seeds", self.seeds, minimum=1)
        check_int("max_examples", self.max_examples, minimum=NUM_CLIENTS * 4, allow_none=True)
        if self.model not in MODELS:
            raise fail("model", self.model, f"must be one of {', '.join(MODELS)}")
        check_choice("test_split", self.test_split, ("held_out", "official"))
        return self


#: The full runs (the times ``fedsparse list`` gives, on two shared cores): Figure 2 at
#: 50 rounds x 3 seeds; Figures 3-4 and 6-8 (26 runs between them) at 30 rounds x 2 seeds
#: and Figures 9-11 (9 runs) at 20 rounds x 2 seeds, so that all of them fit in well under
#: an hour on two shared cores. ``QUICK``: the ``--quick`` ones. All test on the official
#: test split dealt by label (:func:`data_table`).
FULL = Budget(rounds=50, seeds=3)
SWEEP = Budget(rounds=30, seeds=2)
FEDPROX = Budget(rounds=20, seeds=2)
#: Figure 2's asymmetric panel with the small CNN (215,370 parameters), about 11 times the
#: MLP's wall clock per round: one seed, 15 rounds on 12,000 images (about 2.5 minutes).
CNN = Budget(rounds=15, seeds=1, max_examples=12_000, model="cnn")
CNN_QUICK = Budget(rounds=2, seeds=1, max_examples=2_000, model="cnn")
QUICK = Budget(rounds=15, seeds=1, max_examples=12_000)


def data_table(budget: Budget) -> dict:
    """The paper's balanced two-group split of Fashion-MNIST (see the module docstring)."""
    table = {"kind": "federated_real", "dataset": "fashion_mnist", "partition": "groups",
             "num_clients": NUM_CLIENTS, "num_groups": NUM_GROUPS,
             "labels_per_group": LABELS_PER_GROUP, "contiguous": True,
             "test_fraction": TEST_FRACTION, "seed": 0,
             "flatten": budget.model == "mlp"}
    if budget.test_split == "official":  # no share held out: the official test images
        del table["test_fraction"]
        table["test_split"] = "official"
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
