"""Federated data: the dataset container, synthetic generators, loaders and partitioners."""

from .federated import ClientSplit, FederatedDataset, from_arrays
from .synthetic import fedht_simulation, fedprox_synthetic, shifted_gaussian

__all__ = [
    "ClientSplit",
    "FederatedDataset",
    "fedht_simulation",
    "fedprox_synthetic",
    "from_arrays",
    "shifted_gaussian",
]
