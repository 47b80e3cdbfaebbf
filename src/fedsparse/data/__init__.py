"""Federated data: the dataset container, synthetic generators, loaders and partitioners."""

from .federated import ClientSplit, FederatedDataset, from_arrays
from .loaders import DataFormatError, load_cifar, load_idx, load_leaf, load_libsvm, read_idx
from .named import (
    breast_cancer,
    data_home,
    diabetes,
    digits,
    e2006,
    fashion_mnist,
    mnist,
    mnist_5k,
    mnist_libsvm,
    rcv1,
)
from .ondisk import ondisk_data
from .partition import (
    describe_partition,
    from_partitions,
    partition_clusters,
    partition_dirichlet,
    partition_groups,
    partition_iid,
    partition_label_skew,
)
from .pooled import PooledRows
from .real import federated_real, libsvm_file
from .sparse_rows import SparseRows
from .synthetic import fedht_simulation, fedprox_synthetic, shifted_gaussian

#: Data set generators by name, as used in experiment configs (``data.kind``).
GENERATORS = {
    "fedht_simulation": fedht_simulation,
    "fedprox_synthetic": fedprox_synthetic,
    "shifted_gaussian": shifted_gaussian,
    "federated_real": federated_real,
    "libsvm_file": libsvm_file,
    "ondisk": ondisk_data,
}

__all__ = [
    "DataFormatError",
    "breast_cancer",
    "data_home",
    "diabetes",
    "digits",
    "e2006",
    "fashion_mnist",
    "load_cifar",
    "load_idx",
    "load_leaf",
    "load_libsvm",
    "mnist",
    "mnist_5k",
    "mnist_libsvm",
    "rcv1",
    "read_idx",
    "describe_partition",
    "from_partitions",
    "partition_clusters",
    "partition_dirichlet",
    "partition_groups",
    "partition_iid",
    "partition_label_skew",
    "GENERATORS",
    "ClientSplit",
    "FederatedDataset",
    "fedht_simulation",
    "fedprox_synthetic",
    "from_arrays",
    "shifted_gaussian",
    "federated_real",
    "libsvm_file",
    "ondisk_data",
    "PooledRows",
    "SparseRows",
]
