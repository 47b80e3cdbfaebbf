"""``fedsparse data ...``: look at a federated split before training on it.

``fedsparse data describe digits --partition label_skew --clients 20
--labels-per-client 2 --seed 0 --plot out.png`` prints every client's size and label
histogram (:func:`~fedsparse.data.partition.describe_partition`) and optionally saves
the client x label heat map (:func:`~fedsparse.report.partition_plots.plot_histogram`).

``fedsparse data write digits --partition dirichlet --clients 50 --out DIR`` writes the
split in the on-disk format (:mod:`fedsparse.data.ondisk`) that training reads a client
at a time (a config's ``data = {kind = "ondisk", path = "DIR"}``); ``fedsparse data
write fedprox_synthetic --clients 1000000 --out DIR`` writes a generated data set (drawn
lazily, a chunk of clients at a time), and ``fedsparse data describe ondisk --path DIR``
describes a written folder.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np

from .._validation import ConfigError, check_seed, expand_home
from ..cli_common import folder
from .real import DATASETS, PARTITIONS, READS_PATH

__all__ = ["add_data_parser", "cmd_describe", "cmd_write"]

#: ``data describe``'s name for a folder written by ``data write``.
ONDISK = "ondisk"
#: Generated data sets ``data write`` can write (drawn per client, lazily).
GENERATED = ("fedht_simulation", "fedprox_synthetic", "shifted_gaussian")
#: Named data sets read as sparse (CSR) features, which the on-disk format (dense
#: memory-mapped arrays) does not hold: ``data write`` does not offer them.
SPARSE = ("e2006", "libsvm", "mnist_libsvm", "rcv1")


#: Partition options: their defaults and the partitions that take them (an option given
#: for another partition is refused, not ignored).
_PARTITION_OPTIONS = {
    "labels_per_client": (2, ("label_skew", "groups")), "sizes": (None, ("label_skew",)),
    "groups": (5, ("groups",)), "alpha": (0.5, ("dirichlet",)),
    "clusters": (10, ("clusters",)), "parts_per_cluster": (20, ("clusters",)),
    "clusters_per_client": (2, ("clusters",)), "by_labels": (False, ("clusters",)),
}


#: The parameters of the loaders, partitions and generators that the options set, by the
#: name their errors give them: the command line names the option instead (the
#: ``option_names`` of :func:`fedsparse.cli_common.name_typed_options`).
OPTION_NAMES = {
    "num_clients": "--clients", "seed": "--seed", "path": "--path",
    "partition": "--partition", "max_examples": "--max-examples",
    "test_fraction": "--test-fraction", "labels_per_client": "--labels-per-client",
    "labels_per_group": "--labels-per-client", "num_groups": "--groups", "alpha": "--alpha",
    "num_clusters": "--clusters", "parts_per_cluster": "--parts-per-cluster",
    "clusters_per_client": "--clusters-per-client", "scale": "--scale",
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _given(value) -> bool:
    """An option the user gave: a value (0 included) or a set flag (``--by-labels``)."""
    return value is not None and value is not False


def _expand_paths(args) -> None:
    """``--out``, ``--path`` and ``--plot`` with a leading ``~`` replaced by the home
    folder, as ``fedsparse run --out`` and a config's ``data.path`` read it: written as
    typed, ``data write --out '~/x'`` would make a folder named ``~`` here, which the
    ``path = "~/x"`` it prints for a config does not name."""
    for name in ("out", "path", "plot"):
        value = getattr(args, name, None)
        if value is not None:
            setattr(args, name, str(expand_home(_flag(name), value)))


def _check_given(args, generated: bool = False, offered=DATASETS) -> None:
    """Refuse options that do not apply (to the data set, to the chosen partition, or to
    a generator), then fill in the defaults of those not given. ``offered``: the named
    data sets the command takes (named when ``--path`` is refused)."""
    if args.dataset == ONDISK:
        given = [n for n in ("clients", "seed", "partition", "max_examples", "scale",
                             *_PARTITION_OPTIONS) if _given(getattr(args, n))]
        if given:
            raise ConfigError(f"{', '.join(map(_flag, given))}: a folder written by "
                              "fedsparse data write is split among its clients already, so "
                              "there is nothing to draw, subsample or partition")
        if args.path is None:
            raise ConfigError("ondisk needs --path DIR, the folder fedsparse data write "
                              "wrote")
        return
    if args.clients is None:
        args.clients = 20
    if args.seed is None:
        args.seed = 0
    if generated:
        given = [n for n in ("path", "partition", "max_examples", "scale",
                             *_PARTITION_OPTIONS) if _given(getattr(args, n))]
        if given:
            raise ConfigError(f"{', '.join(map(_flag, given))}: {args.dataset!r} is generated "
                              "(its clients drawn from the seed), so there is nothing to "
                              "read, subsample or partition")
    elif args.path is not None and args.dataset not in READS_PATH:
        raise ConfigError(f"--path applies to the data sets read from disk "
                          f"({', '.join(sorted(READS_PATH & set(offered)))}), not "
                          f"{args.dataset!r}, which comes with its library")
    elif args.path is None and DATASETS[args.dataset][0]:
        # before the loader, whose refusal names its parameter as "--path=None is invalid"
        raise ConfigError(_needs_path(args.dataset))
    if args.partition is None:
        args.partition = "iid"
    for name, (default, partitions) in _PARTITION_OPTIONS.items():
        value = getattr(args, name)
        if _given(value) and args.partition not in partitions:
            raise ConfigError(f"{_flag(name)} applies to --partition "
                              f"{' or '.join(partitions)}, not {args.partition!r}")
        if value is None:
            setattr(args, name, default)


def _needs_path(dataset: str) -> str:
    """What a data set read only from the user's file says when ``--path`` is missing:
    the option, the file it reads and the formats it takes."""
    what = DATASETS[dataset][1].replace(" (path)", "")
    return (f"data set {dataset!r} needs --path FILE, the file it reads: {what} (text, "
            "plain or gzip/bzip2/xz-compressed)")


def _take_force(args) -> None:
    """``args.force`` set where the earlier spelling ``--overwrite`` was given: taken still
    (scripts written for it keep working), hidden from ``--help`` and warned about, since
    ``fedsparse run``, ``sweep`` and ``tune`` call replacing what is there ``--force``."""
    if args.overwrite:
        warnings.warn("--overwrite is deprecated: it is called --force now, as in fedsparse "
                      "run; --overwrite still works, for now", FutureWarning, stacklevel=2)
        args.force = True


def _partition_kwargs(args) -> dict:
    """Only the options the chosen partitioner takes, so defaults never leak across."""
    kw: dict = {}
    if args.partition == "label_skew":
        kw["labels_per_client"] = args.labels_per_client
        if args.sizes is not None:
            kw["sizes"] = args.sizes
    elif args.partition == "groups":
        kw["num_groups"] = args.groups
        kw["labels_per_group"] = args.labels_per_client
    elif args.partition == "dirichlet":
        kw["alpha"] = args.alpha
    elif args.partition == "clusters":
        kw.update(num_clusters=args.clusters, parts_per_cluster=args.parts_per_cluster,
                  clusters_per_client=args.clusters_per_client, by_labels=args.by_labels)
    return kw


def cmd_describe(args) -> int:
    """Load, partition, print the description; returns the exit status."""
    from .partition import describe_partition
    from .real import REGRESSION, _scale, load_named, make_partition

    _expand_paths(args)
    _take_force(args)
    _check_given(args)
    if args.plot and Path(args.plot).is_dir():
        raise ConfigError(f"--plot={args.plot!r} is invalid: it is a folder; give the PNG "
                          "file to write, e.g. --plot split.png")
    if args.plot and Path(args.plot).exists() and not args.force:
        raise ConfigError(f"--plot={args.plot!r} is invalid: the file exists; give a new "
                          "name, or add --force to replace it")
    if args.dataset == ONDISK:
        return _describe_ondisk(args)
    check_seed("--seed", args.seed)  # NumPy's own refusal would name no parameter
    X, y = load_named(args.dataset, path=args.path, seed=args.seed,
                      max_examples=args.max_examples)
    # scaled as federated_real scales (a config's scale, write's --scale): K-means sees
    # the features training gets, so the split described is the one trained on
    X = _scale(X, args.scale)
    parts = make_partition(args.partition, X, y, num_clients=args.clients, seed=args.seed,
                           dataset=args.dataset,
                           **_partition_kwargs(args))
    regression = args.dataset in REGRESSION or _continuous(y)
    desc = describe_partition(parts, None if regression else y)
    sizes = desc["sizes"]
    kind = "sparse" if hasattr(X, "nnz") else "dense"
    print(f"{args.dataset}: {X.shape[0]} examples x {X.shape[1]} features ({kind}); "
          f"partition {args.partition} (seed {args.seed})")
    print(f"client sizes: min {sizes.min()}, median {np.median(sizes):g}, max {sizes.max()}, "
          f"total {desc['total']}, duplicates {desc['duplicates']}")
    if not regression:
        lpc = desc["labels_per_client"]
        print(f"labels per client: min {lpc.min()}, max {lpc.max()}; "
              f"unassigned examples: {desc['unassigned']}")
    return _table_and_plot(desc, args.plot, f"{args.dataset}, {args.partition}, "
                           f"{args.clients} clients")


def _table_and_plot(desc: dict, plot: str | None, title: str) -> int:
    """Print a description's table and, with ``--plot``, save its client x label heat
    map (from the histogram it holds; none for continuous targets); the exit status."""
    from ..report.partition_plots import plot_histogram

    print(desc["table"])
    if plot:
        if "histogram" not in desc:
            print("no plot: the targets are continuous (no labels to histogram)")
        else:
            out = plot_histogram(desc["histogram"], desc["classes"], plot, title=title)
            print(f"wrote {out}")
    return 0


def _continuous(y: np.ndarray) -> bool:
    """Whether float targets ``y`` are a regression's (over 50 values among the first
    1,000), not labels."""
    return y.dtype.kind == "f" and len(set(y[:1000].tolist())) > 50


def _describe_ondisk(args) -> int:
    """``data describe ondisk --path DIR``: the written folder's clients, read from its
    index and labels (the features stay on disk)."""
    from .ondisk import open_federated
    from .partition import describe_clients

    data = open_federated(args.path)  # checks the folder, naming any damaged file
    labels = dict(data.source.read.labels())
    y = labels["train"]  # stored in the features' dtype
    regression = _continuous(y)
    if not regression and np.array_equal(y, np.round(y)):
        y = y.astype(np.int64)  # class labels, printed as 3 rather than 3.0
    desc = describe_clients(data.train.counts.numpy(), None if regression else y)
    sizes = desc["sizes"]
    test = f", {sum(len(v) for k, v in labels.items() if k != 'train'):,} test examples" \
        if len(labels) > 1 else ""
    print(f"{args.path}: {data.name}, {desc['num_clients']:,} clients, {desc['total']:,} "
          f"training examples{test}; features {tuple(data.feature_shape)}")
    print(f"client sizes: min {sizes.min()}, median {np.median(sizes):g}, max {sizes.max()}")
    if not regression:
        lpc = desc["labels_per_client"]
        print(f"labels per client: min {lpc.min()}, max {lpc.max()}")
    return _table_and_plot(desc, args.plot, f"{data.name}, {desc['num_clients']} clients")


def cmd_write(args) -> int:
    """Build the data set (a real one split among clients, or a generated one) and
    write it with :func:`~fedsparse.data.ondisk.write_federated`; returns the exit status."""
    from . import GENERATORS
    from .ondisk import check_target, write_federated

    _expand_paths(args)
    _take_force(args)
    _check_given(args, generated=args.dataset in GENERATED, offered=set(DATASETS) - set(SPARSE))
    check_seed("--seed", args.seed)  # NumPy's own refusal would name no parameter
    check_target(Path(args.out), args.force, ("--out", "--force"))  # before the build
    if args.dataset in GENERATED:
        kw = {} if args.test_fraction is None else {"test_fraction": args.test_fraction}
        data = GENERATORS[args.dataset](num_clients=args.clients, seed=args.seed, lazy=True,
                                        **kw)
    else:
        from .real import federated_real

        data = federated_real(args.dataset, partition=args.partition, num_clients=args.clients,
                              path=args.path, seed=args.seed, max_examples=args.max_examples,
                              scale=args.scale, test_fraction=0.2 if args.test_fraction is None
                              else args.test_fraction, **_partition_kwargs(args))
    out = write_federated(data, args.out, overwrite=args.force)
    print(f"wrote {data!r} to {out}")
    print(f'train on it: data = {{kind = "ondisk", path = "{out}"}} in an experiment config')
    return 0


def _split_options(d) -> None:
    """The data set and partition options ``describe`` and ``write`` share."""
    d.add_argument("--path", help="file or directory for data sets read from disk")
    d.add_argument("--partition", choices=PARTITIONS, default=None, help="default iid")
    d.add_argument("--clients", type=int, default=None, help="number of clients (default 20)")
    d.add_argument("--seed", type=int, default=None, help="default 0")
    d.add_argument("--labels-per-client", type=int, default=None,
                   help="label_skew: labels per client; groups: labels per group (default 2)")
    d.add_argument("--sizes", choices=("balanced", "power_law"), default=None,
                   help="label_skew client sizes")
    d.add_argument("--groups", type=int, default=None,
                   help="groups: number of groups (default 5)")
    d.add_argument("--alpha", type=float, default=None,
                   help="dirichlet concentration (default 0.5)")
    d.add_argument("--clusters", type=int, default=None,
                   help="clusters: number of clusters (default 10)")
    d.add_argument("--parts-per-cluster", type=int, default=None, help="default 20")
    d.add_argument("--clusters-per-client", type=int, default=None, help="default 2")
    d.add_argument("--by-labels", action="store_true",
                   help="clusters: use the labels as clusters (Tong et al. 2022 on MNIST)")
    d.add_argument("--max-examples", type=int, help="subsample first (seeded)")
    d.add_argument("--scale", choices=("maxabs", "standard"), default=None,
                   help="scale the feature columns first, as a config's data.scale does "
                   "(the clusters partition runs K-means on the scaled features); default "
                   "none")


def add_data_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``data`` (with its ``describe`` sub-command) to the ``fedsparse`` parser."""
    data = subparsers.add_parser("data", help="inspect real data sets and federated splits")
    sub = data.add_subparsers(dest="data_command", required=True)
    names = ", ".join(f"{k}{' (needs --path)' if v[0] else ''}" for k, v in DATASETS.items())
    d = sub.add_parser("describe", help="per-client sizes and label histograms of a split",
                       description=f"Data sets: {names}; or {ONDISK} --path DIR, a folder "
                       "written by fedsparse data write.")
    d.add_argument("dataset", choices=[*sorted(DATASETS), ONDISK], metavar="DATASET",
                   help="a named data set: " + ", ".join(sorted(DATASETS))
                   + f"; or {ONDISK} (with --path)")
    _split_options(d)
    d.add_argument("--plot", metavar="PNG", help="save the client x label heat map here")
    d.add_argument("--force", action="store_true", help="replace an existing --plot file")
    d.add_argument("--overwrite", action="store_true", help=argparse.SUPPRESS)  # deprecated
    d.set_defaults(func=cmd_describe, option_names=OPTION_NAMES)
    dense = sorted(set(DATASETS) - set(SPARSE))
    w = sub.add_parser("write", help="write a split (or a generated data set) in the on-disk "
                       "format that training reads a client at a time",
                       description=f"Data sets: {', '.join(d for d in DATASETS if d in dense)}"
                       f"; generated: {', '.join(GENERATED)}. Not the LibSVM sets "
                       f"({', '.join(SPARSE)}): their features are sparse, which the on-disk "
                       "format does not hold. A config trains on the written folder with "
                       'data = {kind = "ondisk", path = "OUT"}.')
    w.add_argument("dataset", choices=dense + list(GENERATED), metavar="DATASET",
                   help="a named data set with dense features or a generator: "
                   + ", ".join(dense + list(GENERATED)) + " (the LibSVM sets "
                   + ", ".join(SPARSE) + " are sparse, which the on-disk format does not "
                   "hold)")
    w.add_argument("--out", required=True, type=folder, help="directory to create")
    w.add_argument("--force", action="store_true", help="replace an earlier data set written "
                   "there (and nothing else: a folder holding other files is refused)")
    w.add_argument("--overwrite", action="store_true", help=argparse.SUPPRESS)  # deprecated
    w.add_argument("--test-fraction", type=float, default=None,
                   help="per-client held-out share (default 0.2 for real data, the "
                   "generator's own default otherwise)")
    _split_options(w)
    w.set_defaults(func=cmd_write, option_names=OPTION_NAMES)
    return data
