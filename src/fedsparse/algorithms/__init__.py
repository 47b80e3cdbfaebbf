"""Federated algorithms. Each builder returns an :class:`Algorithm`."""

from .base import Algorithm, ClientContext, weighted_mean
from .hard_thresholding import FederatedHardThresholding, distributed_iht, fed_ht, fed_iter_ht

#: Builders by name, as used in experiment configs (``algorithm.kind``).
REGISTRY = {
    "fed_ht": fed_ht,
    "fed_iter_ht": fed_iter_ht,
    "distributed_iht": distributed_iht,
}

__all__ = [
    "REGISTRY",
    "Algorithm",
    "ClientContext",
    "FederatedHardThresholding",
    "distributed_iht",
    "fed_ht",
    "fed_iter_ht",
    "weighted_mean",
]
