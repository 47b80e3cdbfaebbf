"""``fedsparse data ...``: look at a federated split before training on it.

``fedsparse data describe digits --partition label_skew --clients 20
--labels-per-client 2 --seed 0 --plot out.png`` prints every client's size and label
histogram (:func:`~fedsparse.data.partition.describe_partition`) and optionally saves
the client x label heat map (:func:`~fedsparse.report.partition_plots.plot_partition`).

``fedsparse data write digits --partition dirichlet --clients 50 --out DIR`` writes the
split in the on-disk format (:mod:`fedsparse.data.ondisk`) that training reads a client
at a time; ``fedsparse data write fedprox_synthetic --clients 1000000 --out DIR`` writes a
generated data set (drawn lazily, a chunk of clients at a time).
"""

from __future__ import annotations

import argparse

import numpy as np

from .real import DATASETS, PARTITIONS

__all__ = ["add_data_parser", "cmd_describe", "cmd_write"]

#: Generated data sets ``data write`` can write (drawn per client, lazily).
GENERATED = ("fedht_simulation", "fedprox_synthetic", "shifted_gaussian")


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
    from ..report.partition_plots import plot_partition
    from .partition import describe_partition
    from .real import _scale, load_named, make_partition

    X, y = load_named(args.dataset, path=args.path, seed=args.seed,
                      max_examples=args.max_examples)
    if args.partition == "clusters" and not args.by_labels:
        X = _scale(X, "maxabs")  # K-means on comparable feature ranges
    parts = make_partition(args.partition, X, y, num_clients=args.clients, seed=args.seed,
                           **_partition_kwargs(args))
    regression = args.dataset in ("diabetes", "e2006") or (
        y.dtype.kind == "f" and len(set(y[: 1000].tolist())) > 50)
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
    print(desc["table"])
    if args.plot:
        if regression:
            print("no plot: the targets are continuous (no labels to histogram)")
        else:
            out = plot_partition(parts, y, args.plot, title=f"{args.dataset}, {args.partition}, "
                                 f"{args.clients} clients")
            print(f"wrote {out}")
    return 0


def cmd_write(args) -> int:
    """Build the data set (a real one split among clients, or a generated one) and
    write it with :func:`~fedsparse.data.ondisk.write_federated`; returns the exit status."""
    from . import GENERATORS
    from .ondisk import write_federated

    if args.dataset in GENERATED:
        kw = {} if args.test_fraction is None else {"test_fraction": args.test_fraction}
        data = GENERATORS[args.dataset](num_clients=args.clients, seed=args.seed, lazy=True,
                                        **kw)
    else:
        from .real import federated_real

        data = federated_real(args.dataset, partition=args.partition, num_clients=args.clients,
                              path=args.path, seed=args.seed, max_examples=args.max_examples,
                              test_fraction=0.2 if args.test_fraction is None
                              else args.test_fraction, **_partition_kwargs(args))
    out = write_federated(data, args.out, overwrite=args.overwrite)
    print(f"wrote {data!r} to {out}")
    return 0


def _split_options(d) -> None:
    """The data set and partition options ``describe`` and ``write`` share."""
    d.add_argument("--path", help="file or directory for data sets read from disk")
    d.add_argument("--partition", choices=PARTITIONS, default="iid")
    d.add_argument("--clients", type=int, default=20, help="number of clients (default 20)")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--labels-per-client", type=int, default=2,
                   help="label_skew: labels per client; groups: labels per group")
    d.add_argument("--sizes", choices=("balanced", "power_law"), default=None,
                   help="label_skew client sizes")
    d.add_argument("--groups", type=int, default=5, help="groups: number of groups")
    d.add_argument("--alpha", type=float, default=0.5, help="dirichlet concentration")
    d.add_argument("--clusters", type=int, default=10, help="clusters: number of clusters")
    d.add_argument("--parts-per-cluster", type=int, default=20)
    d.add_argument("--clusters-per-client", type=int, default=2)
    d.add_argument("--by-labels", action="store_true",
                   help="clusters: use the labels as clusters (Tong et al. 2022 on MNIST)")
    d.add_argument("--max-examples", type=int, help="subsample first (seeded)")


def add_data_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``data`` (with its ``describe`` sub-command) to the ``fedsparse`` parser."""
    data = subparsers.add_parser("data", help="inspect real data sets and federated splits")
    sub = data.add_subparsers(dest="data_command", required=True)
    names = ", ".join(f"{k}{' (needs --path)' if v[0] else ''}" for k, v in DATASETS.items())
    d = sub.add_parser("describe", help="per-client sizes and label histograms of a split",
                       description=f"Data sets: {names}.")
    d.add_argument("dataset", choices=sorted(DATASETS), metavar="DATASET",
                   help="a named data set: " + ", ".join(sorted(DATASETS)))
    _split_options(d)
    d.add_argument("--plot", metavar="PNG", help="save the client x label heat map here")
    d.set_defaults(func=cmd_describe)
    w = sub.add_parser("write", help="write a split (or a generated data set) in the on-disk "
                       "format that training reads a client at a time",
                       description=f"Data sets: {names}; generated: {', '.join(GENERATED)}.")
    w.add_argument("dataset", choices=sorted(DATASETS) + list(GENERATED), metavar="DATASET",
                   help="a named data set or a generator: "
                   + ", ".join(sorted(DATASETS) + list(GENERATED)))
    w.add_argument("--out", required=True, help="directory to create")
    w.add_argument("--overwrite", action="store_true", help="replace an existing data set")
    w.add_argument("--test-fraction", type=float, default=None,
                   help="per-client held-out share (default 0.2 for real data, the "
                   "generator's own default otherwise)")
    _split_options(w)
    w.set_defaults(func=cmd_write)
    return data
