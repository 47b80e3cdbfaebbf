"""Splits by labels or at random: iid, label skew, label groups, Dirichlet shares.

Every partitioner is seeded (``seed`` goes to :func:`numpy.random.default_rng`) and
returns a list of 1-D int64 index arrays, one per client, with no example given to two
clients.
"""

from __future__ import annotations

import numpy as np

from ..._validation import ConfigError, check_int
from ._common import _allocate, _finish, _labels, _positive

__all__ = [
    "contiguous_groups",
    "partition_dirichlet",
    "partition_groups",
    "partition_iid",
    "partition_label_skew",
]


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
