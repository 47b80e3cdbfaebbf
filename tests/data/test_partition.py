"""Partitioners: invariants, seeding, clear errors, description, from_partitions."""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsparse.data.partition import (
    describe_partition,
    from_partitions,
    partition_clusters,
    partition_dirichlet,
    partition_groups,
    partition_iid,
    partition_label_skew,
)


def labels(n=2000, classes=10, seed=0):
    return np.random.default_rng(seed).integers(0, classes, n)


def assert_disjoint(parts, n, *, complete=True):
    assert all(p.dtype == np.int64 and p.ndim == 1 for p in parts)
    allidx = np.concatenate(parts)
    assert np.unique(allidx).size == allidx.size, "an example was given to two clients"
    assert allidx.min() >= 0 and allidx.max() < n
    if complete:
        assert allidx.size == n, "an example was left out"


def same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


# ---------------------------------------------------------------------------- IID


def test_iid():
    parts = partition_iid(103, 10, seed=4)
    assert_disjoint(parts, 103)
    sizes = [p.size for p in parts]
    assert max(sizes) - min(sizes) <= 1
    assert same(parts, partition_iid(103, 10, seed=4))
    assert not same(parts, partition_iid(103, 10, seed=5))


@given(n=st.integers(1, 300), k=st.integers(1, 40), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=40, deadline=None)
def test_iid_property(n, k, seed):
    if k > n:
        with pytest.raises(ValueError, match="num_clients"):
            partition_iid(n, k, seed=seed)
        return
    parts = partition_iid(n, k, seed=seed)
    assert len(parts) == k
    assert_disjoint(parts, n)
    assert min(p.size for p in parts) >= 1


# ---------------------------------------------------------------------- label skew


@pytest.mark.parametrize("sizes", ["balanced", "power_law"])
def test_label_skew(sizes):
    y = labels()
    parts = partition_label_skew(y, num_clients=20, labels_per_client=2, sizes=sizes, seed=0)
    assert len(parts) == 20
    assert_disjoint(parts, y.size)
    d = describe_partition(parts, y)
    assert (d["labels_per_client"] == 2).all()
    assert d["duplicates"] == 0 and d["unassigned"] == 0
    # each label is held by num_clients * k / C = 4 clients
    assert ((d["histogram"] > 0).sum(axis=0) == 4).all()
    assert same(parts, partition_label_skew(y, 20, 2, sizes=sizes, seed=0))
    assert not same(parts, partition_label_skew(y, 20, 2, sizes=sizes, seed=1))
    s = d["sizes"]
    if sizes == "balanced":
        assert s.max() / s.min() < 1.5
    else:
        assert s.max() / s.min() > 4


def test_label_skew_uncovered_labels_left_out():
    y = labels()
    parts = partition_label_skew(y, num_clients=3, labels_per_client=2, seed=0)
    assert_disjoint(parts, y.size, complete=False)
    d = describe_partition(parts, y)
    assert (d["labels_per_client"] == 2).all()
    assert d["unassigned"] == y.size - sum(p.size for p in parts) > 0


def test_label_skew_errors():
    y = labels(classes=5)
    with pytest.raises(ValueError, match=r"labels_per_client=6 .*only 5 distinct"):
        partition_label_skew(y, 10, 6)
    with pytest.raises(ValueError, match=r"num_clients=0 .*at least 1"):
        partition_label_skew(y, 0, 2)
    with pytest.raises(ValueError, match="sizes='zipf'"):
        partition_label_skew(y, 10, 2, sizes="zipf")
    with pytest.raises(ValueError, match="power=-1"):
        partition_label_skew(y, 10, 2, sizes="power_law", power=-1)
    tiny = np.array([0, 0, 1, 1, 2])
    with pytest.raises(ValueError, match="every holder needs at least one example"):
        partition_label_skew(tiny, 10, 2)


@given(n=st.integers(20, 400), classes=st.integers(2, 8), clients=st.integers(1, 12),
       data=st.data())
@settings(max_examples=40, deadline=None)
def test_label_skew_property(n, classes, clients, data):
    seed = data.draw(st.integers(0, 1000))
    y = np.random.default_rng(seed).integers(0, classes, n)
    k = data.draw(st.integers(1, np.unique(y).size))
    sizes = data.draw(st.sampled_from(["balanced", "power_law"]))
    try:
        parts = partition_label_skew(y, clients, k, sizes=sizes, seed=seed)
    except ValueError as exc:
        assert "every holder needs at least one example" in str(exc)
        return
    present = np.unique(y).size
    assert_disjoint(parts, n, complete=clients * min(k, present) >= present)
    d = describe_partition(parts, y)
    assert (d["labels_per_client"] == min(k, present)).all()


# ------------------------------------------------------------------------- groups


def test_groups():
    y = labels()
    parts, groups = partition_groups(y, num_clients=20, num_groups=5, labels_per_group=2,
                                     seed=3, return_groups=True)
    assert_disjoint(parts, y.size)
    assert np.bincount(groups).tolist() == [4] * 5
    hist = describe_partition(parts, y)["histogram"] > 0
    for g in range(5):
        members = hist[groups == g]
        assert (members == members[0]).all(), "a group must share one label set"
        assert members[0].sum() == 2
    # disjoint label sets when groups x labels <= classes
    assert (hist[np.unique(groups, return_index=True)[1]].sum(axis=0) == 1).all()
    assert same(parts, partition_groups(y, 20, 5, 2, seed=3))
    with pytest.raises(ValueError, match="num_groups=21"):
        partition_groups(y, 20, 21, 2)
    with pytest.raises(ValueError, match="labels_per_group=11"):
        partition_groups(y, 20, 2, 11)


# ---------------------------------------------------------------------- Dirichlet


def test_dirichlet():
    y = labels()
    parts = partition_dirichlet(y, num_clients=20, alpha=0.5, seed=0, min_size=10)
    assert_disjoint(parts, y.size)
    assert min(p.size for p in parts) >= 10
    assert same(parts, partition_dirichlet(y, 20, 0.5, seed=0, min_size=10))
    assert not same(parts, partition_dirichlet(y, 20, 0.5, seed=1, min_size=10))
    skewed = describe_partition(partition_dirichlet(y, 20, 0.05, seed=0), y)
    flat = describe_partition(partition_dirichlet(y, 20, 1000.0, seed=0), y)
    assert skewed["labels_per_client"].mean() < flat["labels_per_client"].mean()
    with pytest.raises(ValueError, match="alpha=0"):
        partition_dirichlet(y, 20, 0)
    with pytest.raises(ValueError, match="min_size=200"):
        partition_dirichlet(y, 20, 0.5, min_size=200)
    with pytest.raises(ValueError, match="no draw in 3 tries"):
        partition_dirichlet(y, 20, 0.01, min_size=90, max_tries=3)


@given(n=st.integers(10, 300), clients=st.integers(1, 10), alpha=st.floats(0.05, 50),
       seed=st.integers(0, 1000))
@settings(max_examples=30, deadline=None)
def test_dirichlet_property(n, clients, alpha, seed):
    y = np.random.default_rng(seed).integers(0, 4, n)
    parts = partition_dirichlet(y, clients, alpha, seed=seed, min_size=0)
    assert len(parts) == clients
    assert_disjoint(parts, n)


# ----------------------------------------------------------------------- clusters


def test_clusters_with_labels_paper_layout():
    y = np.repeat(np.arange(10), 100)
    parts = partition_clusters(None, num_clients=100, num_clusters=10, parts_per_cluster=20,
                               clusters_per_client=2, seed=0, labels=y)
    assert_disjoint(parts, y.size)  # 200 parts = 100 clients x 2: everything used
    d = describe_partition(parts, y)
    assert (d["labels_per_client"] == 2).all()
    assert (d["sizes"] == 10).all()
    # every cluster's 20 parts went to 20 different clients
    assert ((d["histogram"] > 0).sum(axis=0) == 20).all()
    assert same(parts, partition_clusters(None, 100, 10, 20, 2, seed=0, labels=y))
    assert not same(parts, partition_clusters(None, 100, 10, 20, 2, seed=1, labels=y))


@pytest.mark.parametrize("sparse", [False, True])
def test_clusters_kmeans(sparse):
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(0)
    centers = rng.normal(scale=10, size=(10, 5))
    truth = np.repeat(np.arange(10), 60)
    X = centers[truth] + rng.normal(size=(600, 5))
    if sparse:
        X = sp.csr_matrix(np.where(np.abs(X) > 1, X, 0))
    parts = partition_clusters(X, num_clients=100, num_clusters=10, parts_per_cluster=20,
                               clusters_per_client=2, seed=0)
    assert_disjoint(parts, 600)
    if not sparse:  # well-separated blobs: each client sees exactly two true clusters
        assert (describe_partition(parts, truth)["labels_per_client"] == 2).all()


def test_clusters_partial_use_and_errors():
    y = np.repeat(np.arange(4), 30)
    parts = partition_clusters(None, num_clients=5, num_clusters=4, parts_per_cluster=3,
                               clusters_per_client=2, labels=y, seed=2)
    assert_disjoint(parts, y.size, complete=False)
    assert (describe_partition(parts, y)["labels_per_client"] == 2).all()
    with pytest.raises(ValueError, match="cannot assign parts"):
        partition_clusters(None, 7, 4, 3, 2, labels=y)
    with pytest.raises(ValueError, match="clusters_per_client=5"):
        partition_clusters(None, 2, 4, 3, 5, labels=y)
    with pytest.raises(ValueError, match="pass num_clusters=4"):
        partition_clusters(None, 2, 10, 3, 2, labels=y)
    with pytest.raises(ValueError, match=r"parts_per_cluster=3 is invalid for these data: .* "
                       r"the cluster of label 3 has 2 of the 92 examples .* Allowed here: "
                       r"parts_per_cluster=2 or less"):
        partition_clusters(None, 2, 4, 3, 2, labels=np.r_[y[:90], [3, 3]])


def test_clusters_on_a_few_hundred_examples_say_what_the_defaults_need():
    """The defaults (10 clusters x 20 parts) on a few hundred examples: fewer than 200 are
    refused before K-means, naming both parameters and the count; with enough examples
    a K-means cluster below 20 is named, with its size and the parts_per_cluster it
    allows (and what that leaves for the clients)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 4))
    with pytest.raises(ValueError, match=r"parts_per_cluster=20 x num_clusters=10 needs at "
                       r"least 200 examples .*; the data have 150\. Allowed: a product of "
                       r"at most 150"):
        partition_clusters(X)
    with pytest.raises(ValueError, match=r"parts_per_cluster=20 x num_clusters=10 \(the "
                       r"number of labels\) needs at least 200 examples"):
        partition_clusters(None, 10, labels=np.arange(150) % 10)
    # 300 examples, one far-off cluster of 5 points
    X = np.r_[rng.normal(size=(295, 4)), rng.normal(100.0, 1.0, size=(5, 4))]
    with pytest.raises(ValueError) as caught:
        partition_clusters(X, seed=0)
    message = str(caught.value)
    assert message.startswith("parts_per_cluster=20 is invalid for these data")
    assert re.search(r"K-means cluster \d+ has 5 of the 300 examples \(the 10 clusters' "
                     r"sizes, smallest first: 5, ", message)
    assert "Allowed here: parts_per_cluster=5 or less, and then num_clients=100 x " \
        "clusters_per_client=2 needs 200 parts, more than the 50 usable" in message
    assert "fewer clusters than num_clusters=10" in message
    # what it allows works
    parts = partition_clusters(X, num_clients=25, parts_per_cluster=5, seed=0)
    assert len(parts) == 25 and all(p.size >= 2 for p in parts)


@given(clusters=st.integers(2, 6), ppc=st.integers(1, 6), cpc=st.integers(1, 3),
       clients=st.integers(1, 20), seed=st.integers(0, 1000))
@settings(max_examples=40, deadline=None)
def test_clusters_property(clusters, ppc, cpc, clients, seed):
    y = np.repeat(np.arange(clusters), ppc + 2)
    possible = cpc <= clusters and clients * cpc <= clusters * min(ppc, clients)
    if not possible:
        with pytest.raises(ValueError):
            partition_clusters(None, clients, clusters, ppc, cpc, labels=y, seed=seed)
        return
    parts = partition_clusters(None, clients, clusters, ppc, cpc, labels=y, seed=seed)
    assert_disjoint(parts, y.size, complete=clients * cpc == clusters * ppc)
    assert (describe_partition(parts, y)["labels_per_client"] == cpc).all()


# ------------------------------------------------------------------- description


def test_describe():
    y = np.array(["cat", "dog", "cat", "eel", "dog"])
    parts = [np.array([0, 1]), np.array([2, 3, 4])]
    d = describe_partition(parts, y)
    assert d["sizes"].tolist() == [2, 3] and d["total"] == 5
    assert d["classes"].tolist() == ["cat", "dog", "eel"]
    assert d["histogram"].tolist() == [[1, 1, 0], [1, 1, 1]]
    assert "dog" in d["table"] and "2 clients" in d["table"]
    assert describe_partition([np.array([0, 0])])["duplicates"] == 1
    with pytest.raises(ValueError, match="outside"):
        describe_partition([np.array([9])], y)


# ---------------------------------------------------------------- from_partitions


def test_from_partitions_dense():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 6)).astype(np.float32)
    y = rng.integers(0, 3, 200)
    parts = partition_iid(200, 8, seed=0)
    data = from_partitions(X, y, parts, test_fraction=0.2, seed=0)
    assert data.num_clients == 8 and data.dim == 6
    assert data.train.counts.tolist() == [20] * 8
    assert data.test.counts.tolist() == [5] * 8
    # every training row of client 0 is one of its own examples
    Xi, yi = data.train.client(0)
    own = X[parts[0]]
    assert all(np.any(np.all(np.isclose(own, r.numpy()), axis=1)) for r in Xi)
    again = from_partitions(X, y, parts, test_fraction=0.2, seed=0)
    assert np.array_equal(again.train.X.numpy(), data.train.X.numpy())
    notest = from_partitions(X, y, parts, test_fraction=0)
    assert notest.test is None and notest.train.counts.sum() == 200


def test_from_partitions_small_clients_and_errors():
    X = np.arange(10.0).reshape(5, 2)
    y = np.arange(5.0)
    data = from_partitions(X, y, [np.array([0, 1]), np.array([2, 3, 4])], test_fraction=0.9)
    assert data.train.counts.tolist() == [1, 1] and data.test.counts.tolist() == [1, 2]
    with pytest.raises(ValueError, match=r"parts\[1\] has 1 examples"):
        from_partitions(X, y, [np.array([0, 1]), np.array([2])])
    with pytest.raises(ValueError, match="test_fraction=1"):
        from_partitions(X, y, [np.arange(5)], test_fraction=1)
    with pytest.raises(ValueError, match="outside"):
        from_partitions(X, y, [np.array([0, 7])])


def test_from_partitions_sparse_matches_dense():
    rng = np.random.default_rng(1)
    dense = np.where(rng.random((60, 8)) < 0.3, rng.normal(size=(60, 8)), 0.0)
    y = rng.integers(0, 2, 60)
    parts = partition_iid(60, 4, seed=0)
    ref = from_partitions(dense, y, parts, seed=0)
    got = from_partitions(sp.csr_matrix(dense), y, parts, seed=0)
    gx = got.train.X
    gx = gx.to_dense() if getattr(gx, "is_sparse", False) or gx.layout != ref.train.X.layout \
        else gx
    np.testing.assert_allclose(np.asarray(gx), ref.train.X.numpy())


def test_shares_and_descriptions_by_hand():
    from fedsparse.data.partition._common import _largest_remainder

    # 7 in shares 3.5, 2.1, 1.4: floors 3, 2, 1 and the spare to the largest remainder
    assert _largest_remainder(7, np.array([0.5, 0.3, 0.2])).tolist() == [4, 2, 1]
    # power law with power 1: weights 1, 1/2, 1/3 (6 : 3 : 2) over the ranks, whatever the
    # seed; one example each, then 107 in shares 58.4, 29.2, 19.5 -> 58, 29, 20
    parts = partition_label_skew(np.zeros(110, dtype=int), num_clients=3,
                                 labels_per_client=1, sizes="power_law", power=1.0, seed=0)
    assert sorted(len(p) for p in parts) == [21, 30, 59]
    # example 1 held twice, example 2 by nobody; an example held three times is one
    # duplicated example
    overlap = describe_partition([np.array([0, 1]), np.array([1])], np.array([0, 0, 1]))
    assert (overlap["unassigned"], overlap["duplicates"]) == (1, 1)
    thrice = describe_partition([np.array([0]), np.array([0]), np.array([0, 1])],
                                np.array([0, 1]))
    assert (thrice["unassigned"], thrice["duplicates"]) == (0, 1)


def test_from_partitions_refuses_an_example_given_twice():
    """An index listed twice (in one part or in two) could put one example in a training
    split and a test split at once; it is refused, naming the part and the example."""
    X = np.arange(20.0).reshape(10, 2)
    y = np.arange(10.0)
    with pytest.raises(ValueError, match=r"parts\[0\].*example 1 more than once"):
        from_partitions(X, y, [np.array([0, 1, 1, 2]), np.array([3, 4])], test_fraction=0.5)
    with pytest.raises(ValueError, match=r"parts\[1\].*example 2, which parts\[0\] holds"):
        from_partitions(X, y, [np.array([0, 1, 2]), np.array([2, 3, 4])], test_fraction=0)
