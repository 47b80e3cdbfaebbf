"""Tong et al. 2022's cluster split: K-means clusters (or the labels) cut into equal
parts, each client taking parts of distinct clusters."""

from __future__ import annotations

import numpy as np

from ..._validation import ConfigError, check_int
from ._common import _finish, _labels

__all__ = ["partition_clusters"]


def _feasible(remaining: np.ndarray, clients_left: int, per_client: int) -> bool:
    """Can ``clients_left`` clients each take ``per_client`` distinct clusters when
    cluster k has ``remaining[k]`` parts? (Gale-Ryser for uniform row sums.)"""
    return int(np.minimum(remaining, clients_left).sum()) >= per_client * clients_left


def _check_enough_examples(n: int, num_clusters: int, ppc: int, *, labels: bool) -> None:
    """Refuse ``n`` examples too few for ``num_clusters`` clusters of ``ppc`` non-empty
    parts each, before K-means is run (whatever clusters it finds, they cannot all be
    large enough)."""
    if n >= num_clusters * ppc:
        return
    clusters = f"num_clusters={num_clusters}" + (" (the number of labels)" if labels else "")
    raise ConfigError(
        f"parts_per_cluster={ppc} x {clusters} needs at least {num_clusters * ppc} examples "
        f"(every cluster is cut into that many parts of at least one example); the data "
        f"have {n}. Allowed: a product of at most {n}: fewer parts per cluster"
        + ("" if labels else " or fewer clusters") + ", or more examples")


def _small_cluster(sizes: np.ndarray, ppc: int, num_clients: int, cpc: int,
                   classes: np.ndarray | None) -> ConfigError:
    """The error for a cluster (of K-means, or a label's where ``classes`` is given) with
    fewer than ``ppc`` examples: it names the smallest one, the clusters' sizes and the
    largest ``parts_per_cluster`` these clusters allow."""
    k, n = sizes.size, int(sizes.sum())
    c = int(np.argmin(sizes))
    smallest = int(sizes[c])
    which = f"K-means cluster {c}" if classes is None else \
        f"the cluster of label {classes[c].item()!r}"
    shown = np.sort(sizes)
    listed = ", ".join(map(str, shown[:10])) + (", ..." if k > 10 else "")
    advice = f"parts_per_cluster={smallest} or less" if smallest else \
        "no parts_per_cluster (a cluster is empty)"
    message = (f"parts_per_cluster={ppc} is invalid for these data: every cluster is cut "
               f"into that many parts of at least one example, but {which} has {smallest} "
               f"of the {n} examples (the {k} clusters' sizes, smallest first: {listed}). "
               f"Allowed here: {advice}")
    usable = k * min(smallest, num_clients)  # parts of distinct clusters the clients get
    if smallest and num_clients * cpc > usable:
        message += (f", and then num_clients={num_clients} x clusters_per_client={cpc} "
                    f"needs {num_clients * cpc} parts, more than the {usable} usable: fewer "
                    "clients too")
    if classes is None:
        return ConfigError(message + f"; or fewer clusters than num_clusters={k} (K-means "
                           "then makes larger ones), or more examples")
    return ConfigError(message + "; or more examples of that label")


def partition_clusters(X, num_clients=100, num_clusters=10, parts_per_cluster=20,
                       clusters_per_client=2, seed=0, labels=None, *, n_init=3):
    """Tong et al. 2022's cluster split.

    The examples are grouped into ``num_clusters`` clusters by K-means on the
    features (scikit-learn ``KMeans(num_clusters, random_state=seed, n_init=n_init)``;
    dense or CSR ``X``), or by ``labels`` when given (the paper does that for MNIST).
    Each cluster is shuffled and cut into ``parts_per_cluster`` near-equal parts. Each
    client then takes one unused part from each of ``clusters_per_client`` distinct
    clusters, chosen at random (weighted by the parts left, and never leaving the
    remaining clients without a valid choice). With the defaults, 10 clusters x 20
    parts = 200 parts = 100 clients x 2. Parts left over (when
    ``num_clients * clusters_per_client < num_clusters * parts_per_cluster``) are not
    used, so their examples are in no client.

    Parameters
    ----------
    X : array-like or scipy.sparse matrix, (n, d) or (n, *feature_shape)
        Features (only used for K-means, on the flattened examples; ignored when
        ``labels`` is given, may be None).
    num_clients : int, default 100
    num_clusters : int, default 10
        With ``labels``, must equal the number of distinct labels.
    parts_per_cluster : int, default 20
        Every cluster needs at least this many examples (so the data at least
        ``num_clusters * parts_per_cluster``); a K-means cluster may be smaller than
        the mean, and a run on a few hundred examples may need fewer parts or clusters
        than the defaults (the error names the smallest cluster and what it allows).
    clusters_per_client : int, default 2
    seed : int or None
    labels : array-like, (n,), optional
        Use these as the clusters instead of K-means.
    n_init : int, default 3
        K-means restarts.

    Returns
    -------
    list of ``num_clients`` sorted int64 index arrays.

    Raises
    ------
    ConfigError
        The parts cannot be assigned (too few parts, too few clusters, fewer examples
        than ``num_clusters * parts_per_cluster``, a cluster smaller than
        ``parts_per_cluster``).
    ImportError
        K-means needs scikit-learn (``pip install 'fedsparse[data]'``).
    """
    num_clients = check_int("num_clients", num_clients, minimum=1)
    num_clusters = check_int("num_clusters", num_clusters, minimum=1)
    ppc = check_int("parts_per_cluster", parts_per_cluster, minimum=1)
    cpc = check_int("clusters_per_client", clusters_per_client, minimum=1)
    if cpc > num_clusters:
        raise ConfigError(f"clusters_per_client={cpc} is invalid: must be at most "
                         f"num_clusters={num_clusters}")
    if num_clients * cpc > num_clusters * ppc or not _feasible(
            np.full(num_clusters, ppc), num_clients, cpc):
        raise ConfigError(f"cannot assign parts: {num_clients} clients x {cpc} clusters each "
                         f"need {num_clients * cpc} parts from distinct clusters, but "
                         f"{num_clusters} clusters x {ppc} parts_per_cluster give "
                         f"{num_clusters * ppc} (at most min(parts_per_cluster, num_clients) "
                         "usable per cluster)")
    rng = np.random.default_rng(seed)
    if labels is not None:
        classes, codes = _labels(labels)
        if classes.size != num_clusters:
            raise ConfigError(f"num_clusters={num_clusters} is invalid: labels has "
                             f"{classes.size} distinct values; pass num_clusters={classes.size}")
        n = codes.size
        if X is not None and X.shape[0] != n:
            raise ConfigError(f"X has {X.shape[0]} rows but labels has {n} entries")
        _check_enough_examples(n, num_clusters, ppc, labels=True)
    else:
        if X is None:
            raise ConfigError("X=None is invalid without labels: K-means needs the features")
        try:
            from sklearn.cluster import KMeans
        except ImportError:
            raise ImportError("partition_clusters needs scikit-learn for K-means; install it "
                              "with `pip install 'fedsparse[data]'` or pass labels=...") from None
        if hasattr(X, "detach"):
            X = X.detach().cpu().numpy()
        n = X.shape[0]
        if not hasattr(X, "tocsr"):
            # K-means clusters feature vectors: images (n, C, H, W) become (n, C*H*W) rows
            # for the clustering only; the parts index the original examples.
            X = np.asarray(X).reshape(n, -1)
        _check_enough_examples(n, num_clusters, ppc, labels=False)
        km = KMeans(n_clusters=num_clusters, random_state=seed, n_init=n_init)
        codes = km.fit_predict(X).astype(np.int64)
    sizes = np.bincount(codes, minlength=num_clusters)
    if int(sizes.min()) < ppc:
        raise _small_cluster(sizes, ppc, num_clients, cpc,
                             None if labels is None else classes)
    parts_of = []
    for c in range(num_clusters):
        idx = rng.permutation(np.flatnonzero(codes == c))
        parts_of.append(np.array_split(idx, ppc))
    remaining = np.full(num_clusters, ppc, dtype=np.int64)
    out = []
    for left in range(num_clients, 0, -1):
        choice = None
        for _ in range(20):
            cand = rng.choice(num_clusters, size=cpc, replace=False, p=remaining / remaining.sum())
            trial = remaining.copy()
            trial[cand] -= 1
            if _feasible(trial, left - 1, cpc):
                choice = cand
                break
        if choice is None:  # fall back to the fullest clusters, which keeps feasibility
            choice = np.argsort(-remaining, kind="stable")[:cpc]
        remaining[choice] -= 1
        out.append(np.concatenate([parts_of[c][int(remaining[c])] for c in choice]))
    return _finish(out)
