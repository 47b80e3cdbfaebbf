"""Federated partitioners: split one data set's examples among clients.

Every partitioner is seeded (``seed`` goes to :func:`numpy.random.default_rng`) and
returns a list of 1-D int64 index arrays, one per client, with no example given to
two clients. :func:`describe_partition` reports per-client sizes and the client x
label histogram (:func:`fedsparse.report.plot_partition` draws it), and
:func:`from_partitions` turns ``(X, y, parts)`` into a
:class:`~fedsparse.data.federated.FederatedDataset` with a per-client train/test split.

Splits
------
* :func:`partition_iid` - a uniformly random split into near-equal parts.
* :func:`partition_label_skew` - each client holds ``labels_per_client`` labels;
  each label's examples are shared (balanced or power-law) among its holders.
* :func:`partition_groups` - clients in groups; a group shares one label set.
* :func:`partition_dirichlet` - per-label Dirichlet(alpha) client shares.
* :func:`partition_clusters` - the split of Tong et al. 2022: K-means clusters (or the
  labels) cut into equal parts, each client taking parts of distinct clusters.

A bad argument, or a split that cannot be made, raises
:class:`~fedsparse._validation.ConfigError` (a :class:`ValueError`) saying why.
"""

from .build import from_partitions
from .clusters import partition_clusters
from .describe import describe_clients, describe_partition
from .splits import (
    contiguous_groups,
    partition_dirichlet,
    partition_groups,
    partition_iid,
    partition_label_skew,
)

__all__ = [
    "contiguous_groups",
    "describe_clients",
    "describe_partition",
    "from_partitions",
    "partition_clusters",
    "partition_dirichlet",
    "partition_groups",
    "partition_iid",
    "partition_label_skew",
]
