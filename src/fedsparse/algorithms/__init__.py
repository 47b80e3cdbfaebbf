"""Federated algorithms. Each builder returns an :class:`Algorithm`."""

from .base import Algorithm, ClientContext, weighted_mean
from .composite import FederatedComposite, fed_dual_avg, fed_mid
from .gradmp import FedGradMP, fed_grad_mp
from .hard_thresholding import FederatedHardThresholding, distributed_iht, fed_ht, fed_iter_ht

#: Builders by name, as used in experiment configs (``algorithm.kind``).
REGISTRY = {
    "fed_ht": fed_ht,
    "fed_iter_ht": fed_iter_ht,
    "distributed_iht": distributed_iht,
    "fed_grad_mp": fed_grad_mp,
    "fed_mid": fed_mid,
    "fed_dual_avg": fed_dual_avg,
}

__all__ = [
    "REGISTRY",
    "Algorithm",
    "ClientContext",
    "FedGradMP",
    "FederatedComposite",
    "FederatedHardThresholding",
    "distributed_iht",
    "fed_dual_avg",
    "fed_grad_mp",
    "fed_mid",
    "fed_ht",
    "fed_iter_ht",
    "weighted_mean",
]
