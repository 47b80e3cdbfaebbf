"""SAFARI (Mao et al. 2022) at the paper's own scale: ResNet-20, a GPU run per figure.

The experiments of :mod:`fedsparse.experiments.safari` run the 784-100-10 MLP for 20-50
rounds, what two CPU cores allow. These run the paper's network on the paper's split:

* ResNet-20 (He et al. 2016) with a one-channel stem (272,186 parameters), on all of
  Fashion-MNIST with 2 zero pixels around each image (32 x 32, the input size of the
  paper's CIFAR-10; CIFAR-10 itself is not installed here);
* 50 clients in two groups of 25 (labels 0-4 and 5-9, our choice of label sets), Adam
  1e-3 fresh each round, batch 64, tau = 5, alpha = 0.6 (density 0.4 per layer), P = 0.6
  and the public code's asymmetric channel;
* :data:`PAPER_ROUNDS` rounds (the public code runs 850); Figure 2 over 3 seeds, the
  others over 2.

Named experiments (``fedsparse run NAME --device cuda``):

* ``safari-paper-fig2`` - Figure 2 (MAG + FedAvg) at P = 0.6 and the asymmetric P, and
  Figure 5 (the distance record of each compensated run);
* ``safari-paper-fig3`` - Figure 3 (SynFlow + FedAvg);
* ``safari-paper-fig4`` - Figure 4 (FedSpa + FedAvg);
* ``safari-paper-fig8`` - Figure 8 (pruned fraction 0-0.8, MAG + FedAvg, compensation);
* ``safari-paper-fedprox`` - Figures 9-11 (MAG, SynFlow, FedSpa + FedProx) at P = 0.6.

Each takes ``--rounds`` and ``--seeds`` and resumes with ``--resume``: a run longer than
one sitting is continued, in as many calls as it needs, from its checkpoints (every 10
rounds), and ends with the summary of an uninterrupted run. ``--quick`` runs 2 rounds on
400 images, to check the set-up on a CPU.
"""

from __future__ import annotations

from .registry import register_experiment
from .safari import (
    ASYMMETRIC,
    PROBABILITY,
    PRUNER_NAMES,
    Budget,
    _budget,
    budget_seeds,
    fig2_config,
    pruners_config,
    run_safari,
    sparsity_config,
)

#: The paper-scale length (the public code: 850) and seeds. The clients train on all
#: 60,000 training images and test on the official 10,000, dealt to them by label, as the
#: CPU-scale runs do.
PAPER_ROUNDS = 300
PAPER = Budget(rounds=PAPER_ROUNDS, seeds=3, model="resnet20")
PAPER_2 = Budget(rounds=PAPER_ROUNDS, seeds=2, model="resnet20")
#: A set-up check: 2 rounds on 400 images. ResNet-20 is slow on a CPU: on two cores
#: shared with other jobs, one 2-round run of 50 clients on 2,000 images took about 10
#: minutes, so this checks the set-up, it measures nothing.
PAPER_QUICK = Budget(rounds=2, seeds=1, max_examples=400, model="resnet20")
#: Where the paper-scale runs go unless told: a GPU where there is one.
DEFAULT_DEVICE = "auto"


def _run(config_of, full: Budget, out, quick, rounds, seeds, resume, device, **kw) -> dict:
    budget = _budget(quick, full, rounds, seeds, quick_budget=PAPER_QUICK)
    return run_safari(config_of(budget), out, budget, resume=resume,
                      device=DEFAULT_DEVICE if device is None else device, **kw)


@register_experiment("safari-paper-fig2", paper="safari",
                     default_seeds=budget_seeds(PAPER, PAPER_QUICK),
                     description="Mao et al. 2022 Figs. 2 and 5 at the paper's scale: ResNet-20 "
                                 "on Fashion-MNIST 32 x 32, MAG + FedAvg, P = 0.6 and "
                                 "asymmetric P, 3 seeds (a GPU run)")
def safari_paper_fig2(out, *, quick: bool = False, rounds: int | None = None,
                      seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """MAG + FedAvg with ResNet-20: no drop, compensation and no compensation at P = 0.6
    and the asymmetric P, and the distance records (Figure 5). 300 rounds x 3 seeds."""
    return _run(fig2_config, PAPER, out, quick, rounds, seeds, resume, device,
                heatmaps=True)


@register_experiment("safari-paper-fig3", paper="safari",
                     default_seeds=budget_seeds(PAPER_2, PAPER_QUICK),
                     description="Mao et al. 2022 Fig. 3 at the paper's scale: ResNet-20, "
                                 "SynFlow + FedAvg, P = 0.6 and asymmetric P (a GPU run)")
def safari_paper_fig3(out, *, quick: bool = False, rounds: int | None = None,
                      seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """SynFlow + FedAvg with ResNet-20, otherwise as safari-paper-fig2. 300 rounds x 2
    seeds."""
    return _run(lambda b: pruners_config(b, pruners=("synflow",)), PAPER_2, out, quick,
                rounds, seeds, resume, device)


@register_experiment("safari-paper-fig4", paper="safari",
                     default_seeds=budget_seeds(PAPER_2, PAPER_QUICK),
                     description="Mao et al. 2022 Fig. 4 at the paper's scale: ResNet-20, "
                                 "FedSpa + FedAvg, P = 0.6 and asymmetric P (a GPU run)")
def safari_paper_fig4(out, *, quick: bool = False, rounds: int | None = None,
                      seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """FedSpa + FedAvg with ResNet-20, otherwise as safari-paper-fig2. 300 rounds x 2
    seeds."""
    return _run(lambda b: pruners_config(b, pruners=("fedspa",)), PAPER_2, out, quick,
                rounds, seeds, resume, device)


@register_experiment("safari-paper-fig8", paper="safari",
                     default_seeds=budget_seeds(PAPER_2, PAPER_QUICK),
                     description="Mao et al. 2022 Fig. 8 at the paper's scale: ResNet-20, "
                                 "pruned fraction 0-0.8, MAG + FedAvg with compensation "
                                 "(a GPU run)")
def safari_paper_fig8(out, *, quick: bool = False, rounds: int | None = None,
                      seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """MAG + FedAvg with compensation at P = 0.6, pruned fraction in {0, 0.2, 0.4, 0.6,
    0.7, 0.8}, ResNet-20. 300 rounds x 2 seeds."""
    return _run(sparsity_config, PAPER_2, out, quick, rounds, seeds, resume, device)


@register_experiment("safari-paper-fedprox", paper="safari",
                     default_seeds=budget_seeds(PAPER_2, PAPER_QUICK),
                     description="Mao et al. 2022 Figs. 9-11 at the paper's scale: ResNet-20, "
                                 "MAG, SynFlow and FedSpa + FedProx at P = 0.6 (a GPU run)")
def safari_paper_fedprox(out, *, quick: bool = False, rounds: int | None = None,
                         seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """MAG, SynFlow and FedSpa + FedProx (mu = 0.001) at P = 0.6, ResNet-20. 300 rounds x
    2 seeds."""
    return _run(lambda b: pruners_config(b, "fed_prox", tuple(PRUNER_NAMES), (PROBABILITY,)),
                PAPER_2, out, quick, rounds, seeds, resume, device)


__all__ = ["ASYMMETRIC", "PAPER", "PAPER_2", "PAPER_QUICK", "PAPER_ROUNDS"]
