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

from __future__ import annotations

from numbers import Real

import numpy as np

from .._validation import ConfigError, check_int

__all__ = [
    "contiguous_groups",
    "describe_partition",
    "from_partitions",
    "partition_clusters",
    "partition_dirichlet",
    "partition_groups",
    "partition_iid",
    "partition_label_skew",
]


# ------------------------------------------------------------------------- checks


def _positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not np.isfinite(value) \
            or value <= 0:
        raise ConfigError(f"{name}={value!r} is invalid: must be a positive finite number")
    return float(value)


def _labels(y) -> tuple[np.ndarray, np.ndarray]:
    """(classes, codes): the sorted distinct labels and each example's class index."""
    if hasattr(y, "detach"):  # torch tensor
        y = y.detach().cpu().numpy()
    y = np.asarray(y)
    if y.ndim != 1:
        raise ConfigError(f"y has shape {y.shape}; expected a 1-D array of labels")
    if y.shape[0] == 0:
        raise ConfigError("y is empty; expected at least one label")
    classes, codes = np.unique(y, return_inverse=True)
    return classes, codes.reshape(-1).astype(np.int64)


def _finish(parts: list[np.ndarray]) -> list[np.ndarray]:
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def _largest_remainder(total: int, weights: np.ndarray, minimum: int = 0) -> np.ndarray:
    """Integer counts summing to ``total``, each >= ``minimum``, proportional to weights."""
    k = weights.shape[0]
    free = total - minimum * k
    share = weights / weights.sum() * free
    counts = np.floor(share).astype(np.int64)
    rest = free - int(counts.sum())
    if rest > 0:
        counts[np.argsort(-(share - counts), kind="stable")[:rest]] += 1
    return counts + minimum


def _allocate(codes: np.ndarray, holders: list[np.ndarray], client_weight: np.ndarray,
              num_clients: int, rng: np.random.Generator, what: str) -> list[np.ndarray]:
    """Give each class's examples to its holders, in shares proportional to their
    weights, at least one example each."""
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, who in enumerate(holders):
        idx = np.flatnonzero(codes == c)
        if who.size == 0:
            continue
        if idx.size < who.size:
            raise ConfigError(f"{what}: label index {c} has {idx.size} examples but "
                             f"{who.size} clients hold it; every holder needs at least one "
                             "example (use fewer clients or fewer labels per client)")
        idx = rng.permutation(idx)
        counts = _largest_remainder(idx.size, client_weight[who], minimum=1)
        for client, chunk in zip(who, np.split(idx, np.cumsum(counts)[:-1]), strict=True):
            parts[client].append(chunk)
    return [np.concatenate(p) if p else np.zeros(0, dtype=np.int64) for p in parts]


# ------------------------------------------------------------------- partitioners


def partition_iid(n, num_clients, seed=0) -> list[np.ndarray]:
    """A uniformly random split of ``n`` examples into ``num_clients`` parts.

    Parameters
    ----------
    n : int
        Number of examples (indices ``0 .. n-1``).
    num_clients : int
        Number of parts, 1 <= num_clients <= n; part sizes differ by at most one.
    seed : int or None

    Returns
    -------
    list of ``num_clients`` sorted int64 arrays partitioning ``range(n)``.
    """
    n = check_int("n", n, minimum=1)
    num_clients = check_int("num_clients", num_clients, minimum=1)
    if num_clients > n:
        raise ConfigError(f"num_clients={num_clients} is invalid: must be at most the number "
                         f"of examples n={n} (no client may be empty)")
    perm = np.random.default_rng(seed).permutation(n)
    return _finish(np.array_split(perm, num_clients))


def _cyclic_label_sets(num_sets: int, per_set: int, num_classes: int,
                       rng: np.random.Generator) -> np.ndarray:
    """(num_sets, per_set) class indices: set i takes classes perm[i*k .. i*k+k-1]
    cyclically, so the classes are covered as evenly as possible and each set is
    distinct within itself."""
    perm = rng.permutation(num_classes)
    pos = (np.arange(num_sets)[:, None] * per_set + np.arange(per_set)[None, :]) % num_classes
    return perm[pos]


def _client_sizes(num_clients: int, sizes: str, power: float,
                  rng: np.random.Generator) -> np.ndarray:
    if sizes == "balanced":
        return np.ones(num_clients)
    if sizes == "power_law":
        power = _positive("power", power)
        return rng.permutation(np.arange(1, num_clients + 1, dtype=np.float64) ** -power)
    raise ConfigError(f"sizes={sizes!r} is invalid: must be 'balanced' or 'power_law'")


def partition_label_skew(y, num_clients=20, labels_per_client=2, *, sizes="balanced",
                         power=1.0, seed=0) -> list[np.ndarray]:
    """Label skew: each client holds ``labels_per_client`` distinct labels.

    The labels are laid out over a seeded permutation of the classes cyclically
    (client ``i`` takes positions ``i*k .. i*k+k-1`` modulo the number of classes), so
    each label is held by as many clients as possible evenly. Each label's examples are
    shuffled and shared among the clients holding it: equally (``"balanced"``) or in
    proportion to client weights ``r ** -power``, where ``r`` is a random rank
    ``1 .. num_clients`` (``"power_law"``: the largest client has about
    ``num_clients ** power`` times the share of the smallest). Every holder gets at least
    one example of each of its labels; no example goes to two clients.

    If ``num_clients * labels_per_client`` is less than the number of classes, the
    labels that no client holds are left out (their examples are in no part);
    otherwise every example is assigned exactly once.

    Parameters
    ----------
    y : array-like, (n,)
        Labels (any sortable values).
    num_clients : int, default 20
    labels_per_client : int, default 2
        1 <= labels_per_client <= number of distinct labels.
    sizes : {"balanced", "power_law"}
    power : float, default 1.0
        Exponent of the power law (used with ``sizes="power_law"``).
    seed : int or None

    Returns
    -------
    list of ``num_clients`` sorted int64 index arrays.
    """
    classes, codes = _labels(y)
    num_clients = check_int("num_clients", num_clients, minimum=1)
    k = check_int("labels_per_client", labels_per_client, minimum=1)
    if k > classes.size:
        raise ConfigError(f"labels_per_client={k} is invalid: y has only {classes.size} distinct "
                         f"labels")
    rng = np.random.default_rng(seed)
    weight = _client_sizes(num_clients, sizes, power, rng)
    sets = _cyclic_label_sets(num_clients, k, classes.size, rng)
    holders = [np.flatnonzero((sets == c).any(axis=1)) for c in range(classes.size)]
    return _finish(_allocate(codes, holders, weight, num_clients, rng, "partition_label_skew"))


def contiguous_groups(num_clients, num_groups) -> np.ndarray:
    """Group ids of consecutive blocks of clients: (num_clients,) int64.

    Clients ``0 .. n_0 - 1`` are group 0, the next ``n_1`` group 1, ..., with block sizes
    differing by at most one (the first blocks are the larger): 50 clients in 2 groups
    give clients 0-24 group 0 and 25-49 group 1, the layout of Mao et al. 2022 (SAFARI).
    :func:`partition_groups` with ``contiguous=True`` and the ``safari`` channel of the
    experiment configs both use this rule, so they agree on who is in which group.
    """
    num_clients = check_int("num_clients", num_clients, minimum=1)
    num_groups = check_int("num_groups", num_groups, minimum=1)
    if num_groups > num_clients:
        raise ConfigError(f"num_groups={num_groups} is invalid: must be at most "
                          f"num_clients={num_clients} (no group may be empty)")
    groups = np.empty(num_clients, dtype=np.int64)
    for g, members in enumerate(np.array_split(np.arange(num_clients), num_groups)):
        groups[members] = g
    return groups


def partition_groups(y, num_clients, num_groups, labels_per_group, seed=0, *,
                     return_groups=False, contiguous=False):
    """Group split (SAFARI): clients in ``num_groups`` groups, each group one label set.

    Clients are dealt into groups at random with group sizes differing by at most one.
    Group ``g`` holds ``labels_per_group`` labels laid out cyclically over a seeded
    permutation of the classes (disjoint sets when ``num_groups * labels_per_group`` is
    at most the number of classes). Each label's examples are shared equally among all
    clients of the groups holding it. Labels held by no group are left out; otherwise
    every example is assigned exactly once.

    With ``contiguous=True`` nothing about the layout is random: the groups are
    consecutive blocks of clients (:func:`contiguous_groups`) and group ``g`` holds the
    sorted classes ``g*k .. g*k+k-1`` (cyclically). 50 clients, 2 groups and 5 labels per
    group give the balanced split of Mao et al. 2022's experiments: clients 0-24 hold
    labels 0-4 and clients 25-49 labels 5-9, each client an equal share of each of its
    labels (only which examples go to whom depends on the seed).

    Parameters
    ----------
    y : array-like, (n,)
    num_clients : int
    num_groups : int
        1 <= num_groups <= num_clients.
    labels_per_group : int
        1 <= labels_per_group <= number of distinct labels.
    seed : int or None
    return_groups : bool, default False
        Also return the (num_clients,) int64 group of each client.
    contiguous : bool, default False
        Consecutive blocks of clients and consecutive label sets (see above).

    Returns
    -------
    parts : list of ``num_clients`` sorted int64 index arrays
    groups : ndarray of int64, (num_clients,); only with ``return_groups=True``.
    """
    classes, codes = _labels(y)
    num_clients = check_int("num_clients", num_clients, minimum=1)
    num_groups = check_int("num_groups", num_groups, minimum=1)
    if num_groups > num_clients:
        raise ConfigError(f"num_groups={num_groups} is invalid: must be at most "
                         f"num_clients={num_clients} (no group may be empty)")
    k = check_int("labels_per_group", labels_per_group, minimum=1)
    if k > classes.size:
        raise ConfigError(f"labels_per_group={k} is invalid: y has only {classes.size} distinct "
                         "labels")
    if not isinstance(contiguous, (bool, np.bool_)):
        raise ConfigError(f"contiguous={contiguous!r} is invalid: must be True or False")
    rng = np.random.default_rng(seed)
    if contiguous:
        groups = contiguous_groups(num_clients, num_groups)
        pos = np.arange(num_groups)[:, None] * k + np.arange(k)[None, :]
        sets = pos % classes.size
    else:
        groups = np.empty(num_clients, dtype=np.int64)
        for g, members in enumerate(np.array_split(rng.permutation(num_clients), num_groups)):
            groups[members] = g
        sets = _cyclic_label_sets(num_groups, k, classes.size, rng)
    holders = [np.flatnonzero((sets[groups] == c).any(axis=1)) for c in range(classes.size)]
    parts = _finish(_allocate(codes, holders, np.ones(num_clients), num_clients, rng,
                              "partition_groups"))
    return (parts, groups) if return_groups else parts


def partition_dirichlet(y, num_clients=20, alpha=0.5, seed=0, min_size=1,
                        max_tries=1000) -> list[np.ndarray]:
    """Dirichlet label skew: each label's examples are split among all clients in
    proportions drawn from Dirichlet(alpha, ..., alpha).

    Small ``alpha`` gives each client few dominant labels; large ``alpha`` approaches
    an IID split. The draw is repeated (up to ``max_tries`` times) until every client
    has at least ``min_size`` examples. Every example is assigned exactly once.

    Parameters
    ----------
    y : array-like, (n,)
    num_clients : int, default 20
    alpha : float, default 0.5
        Concentration, > 0.
    seed : int or None
    min_size : int, default 1
        Minimum examples per client; ``num_clients * min_size`` must not exceed n.
    max_tries : int, default 1000

    Returns
    -------
    list of ``num_clients`` sorted int64 index arrays partitioning ``range(n)``.
    """
    classes, codes = _labels(y)
    n = codes.size
    num_clients = check_int("num_clients", num_clients, minimum=1)
    alpha = _positive("alpha", alpha)
    min_size = check_int("min_size", min_size, minimum=0)
    max_tries = check_int("max_tries", max_tries, minimum=1)
    if num_clients * min_size > n:
        raise ConfigError(f"min_size={min_size} is invalid: {num_clients} clients x {min_size} "
                         f"exceeds the {n} examples")
    rng = np.random.default_rng(seed)
    by_class = [np.flatnonzero(codes == c) for c in range(classes.size)]
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for idx in by_class:
            idx = rng.permutation(idx)
            share = rng.dirichlet(np.full(num_clients, alpha))
            cuts = (np.cumsum(share)[:-1] * idx.size).astype(np.int64)
            for client, chunk in enumerate(np.split(idx, cuts)):
                parts[client].append(chunk)
        out = [np.concatenate(p) for p in parts]
        if min(p.size for p in out) >= min_size:
            return _finish(out)
    raise ConfigError(f"partition_dirichlet: no draw in {max_tries} tries gave every one of "
                     f"{num_clients} clients at least min_size={min_size} examples with "
                     f"alpha={alpha}; lower min_size, raise alpha or use fewer clients")


def _feasible(remaining: np.ndarray, clients_left: int, per_client: int) -> bool:
    """Can ``clients_left`` clients each take ``per_client`` distinct clusters when
    cluster k has ``remaining[k]`` parts? (Gale-Ryser for uniform row sums.)"""
    return int(np.minimum(remaining, clients_left).sum()) >= per_client * clients_left


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
        Every cluster needs at least this many examples.
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
        The parts cannot be assigned (too few parts, too few clusters, a cluster smaller
        than ``parts_per_cluster``).
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
        if n < num_clusters:
            raise ConfigError(f"X has {n} rows; K-means needs at least num_clusters="
                             f"{num_clusters}")
        km = KMeans(n_clusters=num_clusters, random_state=seed, n_init=n_init)
        codes = km.fit_predict(X).astype(np.int64)
    parts_of = []
    for c in range(num_clusters):
        idx = rng.permutation(np.flatnonzero(codes == c))
        if idx.size < ppc:
            raise ConfigError(f"cluster {c} has {idx.size} examples, fewer than "
                             f"parts_per_cluster={ppc}; lower parts_per_cluster or "
                             "num_clusters")
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


# ------------------------------------------------------------------- description


def describe_partition(parts, y=None) -> dict:
    """Per-client sizes and (with labels) the client x label histogram.

    Parameters
    ----------
    parts : list of 1-D int arrays, one per client.
    y : array-like, (n,), optional
        Labels of the whole data set.

    Returns
    -------
    dict with keys
        ``num_clients`` (int), ``sizes`` ((N,) int64), ``total`` (int, examples
        assigned), ``duplicates`` (int, examples in more than one part: 0 for a proper
        partition), and with ``y``: ``classes`` ((C,) the distinct labels),
        ``histogram`` ((N, C) int64 counts), ``labels_per_client`` ((N,) int64, labels
        with a nonzero count), ``unassigned`` (examples of ``y`` in no part) and
        ``table`` (str, a printable summary).
    """
    parts = [np.asarray(p, dtype=np.int64).reshape(-1) for p in parts]
    sizes = np.array([p.size for p in parts], dtype=np.int64)
    allidx = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    _, mult = np.unique(allidx, return_counts=True)
    out = {"num_clients": len(parts), "sizes": sizes, "total": int(sizes.sum()),
           "duplicates": int((mult > 1).sum())}
    header = f"{len(parts)} clients, {int(sizes.sum())} examples"
    if y is None:
        lines = [header] + [f"client {i:4d}: {s:7d}" for i, s in enumerate(sizes)]
        out["table"] = "\n".join(lines)
        return out
    classes, codes = _labels(y)
    if allidx.size and (allidx.min() < 0 or allidx.max() >= codes.size):
        raise ConfigError(f"parts hold indices outside 0..{codes.size - 1} (len(y)={codes.size})")
    hist = np.zeros((len(parts), classes.size), dtype=np.int64)
    for i, p in enumerate(parts):
        hist[i] = np.bincount(codes[p], minlength=classes.size)
    out.update(classes=classes, histogram=hist, labels_per_client=(hist > 0).sum(axis=1),
               unassigned=int(codes.size - np.unique(allidx).size))
    width = max(5, *(len(str(c)) + 1 for c in classes))
    head = "client   size " + "".join(f"{str(c):>{width}}" for c in classes)
    rows = [f"{i:6d} {s:6d} " + "".join(f"{v:>{width}d}" for v in h)
            for i, (s, h) in enumerate(zip(sizes, hist, strict=True))]
    out["table"] = "\n".join([header + f", {classes.size} labels, {out['unassigned']} "
                              "unassigned", head, *rows])
    return out


# ------------------------------------------------------------------ federated set


def from_partitions(X, y, parts, *, test_fraction=0.2, seed=0, dtype=None, name="partitioned"):
    """Build a :class:`~fedsparse.data.federated.FederatedDataset` from a partition.

    Each client's indices are shuffled with the seed and split: ``round(test_fraction
    * n_i)`` test examples, clipped to ``1 .. n_i - 1`` so that every client keeps at
    least one training and one test example (``test_fraction=0`` gives no test split).
    A SciPy sparse ``X`` stays sparse: each client receives its CSR row slice.

    Parameters
    ----------
    X : ndarray, torch.Tensor or scipy.sparse matrix, (n, d) or (n, *feature_shape)
        Dense examples keep their shape: images (n, C, H, W) reach ``from_arrays`` as
        per-client (n_i, C, H, W) arrays.
    y : array-like, (n,)
    parts : list of 1-D int arrays (e.g. from a partitioner)
    test_fraction : float in [0, 1), default 0.2
    seed : int or None
    dtype : torch.dtype, optional
        Passed on to ``from_arrays`` (its default when None).
    name : str
        Data set name used in reports.

    Returns
    -------
    FederatedDataset
    """
    from .federated import from_arrays
    from .sparse_rows import is_sparse_matrix

    if isinstance(test_fraction, bool) or not isinstance(test_fraction, Real) \
            or not 0 <= test_fraction < 1:
        raise ConfigError(f"test_fraction={test_fraction!r} is invalid: must be in [0, 1)")
    if len(parts) == 0:
        raise ConfigError("parts=[] is invalid: need at least one client")
    sparse = is_sparse_matrix(X)
    if sparse:
        X = X.tocsr()
    elif not hasattr(X, "detach"):
        X = np.asarray(X)
    if hasattr(y, "detach"):
        y = y.detach().cpu().numpy()
    y = np.asarray(y)
    n = X.shape[0]
    if y.shape != (n,):
        raise ConfigError(f"y has shape {y.shape}; expected ({n},), one target per row of X")
    rng = np.random.default_rng(seed)

    def rows(idx):
        if sparse:
            return X[idx]
        if hasattr(X, "detach"):
            import torch

            return X[torch.as_tensor(idx)]
        return X[idx]

    xs, ys, txs, tys = [], [], [], []
    for i, p in enumerate(parts):
        p = np.asarray(p, dtype=np.int64).reshape(-1)
        if p.size and (p.min() < 0 or p.max() >= n):
            raise ConfigError(f"parts[{i}] holds indices outside 0..{n - 1}")
        need = 2 if test_fraction > 0 else 1
        if p.size < need:
            raise ConfigError(f"parts[{i}] has {p.size} examples; each client needs at least "
                             f"{need} ({'one train and one test' if need == 2 else 'one'})")
        p = rng.permutation(p)
        n_test = 0
        if test_fraction > 0:
            n_test = int(min(max(round(test_fraction * p.size), 1), p.size - 1))
        train, test = p[n_test:], p[:n_test]
        xs.append(rows(train))
        ys.append(y[train])
        if n_test:
            txs.append(rows(test))
            tys.append(y[test])
    kwargs = {} if dtype is None else {"dtype": dtype}
    if test_fraction > 0:
        kwargs.update(test_xs=txs, test_ys=tys)
    return from_arrays(xs, ys, name=name, **kwargs)
