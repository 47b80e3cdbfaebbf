"""The federated dataset and its constructor: :class:`ClientSplit` and
:class:`FederatedDataset` (:mod:`fedsparse.data.dataset`), :func:`from_arrays`
(:mod:`fedsparse.data.assemble`), importable together from here."""

from .assemble import from_arrays
from .dataset import ClientSplit, FederatedDataset

__all__ = ["ClientSplit", "FederatedDataset", "from_arrays"]
