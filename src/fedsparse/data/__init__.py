"""Federated data: the dataset container, synthetic generators, loaders and partitioners."""

from .federated import ClientSplit, FederatedDataset, from_arrays
from .synthetic import fedht_simulation, fedprox_synthetic, shifted_gaussian

#: Data set generators by name, as used in experiment configs (``data.kind``).
GENERATORS = {
    "fedht_simulation": fedht_simulation,
    "fedprox_synthetic": fedprox_synthetic,
    "shifted_gaussian": shifted_gaussian,
}

__all__ = [
    "GENERATORS",
    "ClientSplit",
    "FederatedDataset",
    "fedht_simulation",
    "fedprox_synthetic",
    "from_arrays",
    "shifted_gaussian",
]
