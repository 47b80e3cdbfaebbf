"""The official test split dealt to the clients by label (``test_split="official"``):
each label's test examples split evenly among the clients that hold it in training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedsparse import ConfigError
from fedsparse.data import federated_real, from_partitions
from fedsparse.data.partition.official_test import deal_test_split
from fedsparse.experiments.safari_paper import PAPER, PAPER_QUICK
from fedsparse.experiments.safari_setup import FULL, QUICK, data_table

TRAIN = [np.array([0, 0, 1]), np.array([1, 2]), np.array([2])]
TEST = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2, 3])


def test_each_label_is_split_evenly_among_the_clients_holding_it():
    # label 0: client 0 alone (2); label 1: clients 0 and 1 (3 -> 2 + 1); label 2:
    # clients 1 and 2 (4 -> 2 + 2); label 3: held by nobody, given to nobody
    parts = deal_test_split(TRAIN, TEST, seed=0)
    assert [p.size for p in parts] == [4, 3, 2]
    assert [sorted(TEST[p].tolist()) for p in parts] == [[0, 0, 1, 1], [1, 2, 2], [2, 2]]
    every = np.concatenate(parts)
    assert np.unique(every).size == every.size == 9 and 9 not in every
    # seeded: the same seed deals the same examples, another seed others
    assert all(np.array_equal(a, b) for a, b in zip(parts, deal_test_split(TRAIN, TEST, seed=0),
                                                     strict=True))
    others = [deal_test_split(TRAIN, TEST, seed=s) for s in range(1, 6)]
    assert any(not np.array_equal(o[1], parts[1]) for o in others)


def test_a_subsampled_run_keeps_its_share_and_one_example_a_holder():
    parts = deal_test_split(TRAIN, TEST, seed=0, fraction=0.25)
    # label 0: max(1 holder, round(2 * 0.25) = 0) = 1; label 1: max(2, 1) = 2; label 2:
    # max(2, round(1.0)) = 2
    assert [sorted(TEST[p].tolist()) for p in parts] == [[0, 1], [1, 2], [2]]


def test_a_client_left_without_a_test_example_is_named():
    with pytest.raises(ConfigError, match=r"client 2 holds labels \[3\], of which the "
                       "official test split has no example left"):
        deal_test_split([np.array([3]), np.array([3]), np.array([3])], np.array([3, 3]),
                        seed=0)


def test_from_partitions_takes_a_test_split_of_its_own():
    X, y = np.arange(12.0).reshape(6, 2), np.array([0, 0, 1, 1, 2, 2])
    Xt, yt = -np.arange(8.0).reshape(4, 2), np.array([0, 1, 2, 2])
    data = from_partitions(X, y, [np.array([0, 1, 2]), np.array([3, 4, 5])],
                           test_fraction=0.0, test=(Xt, yt, [np.array([0, 1]),
                                                             np.array([2, 3])]))
    assert data.train.counts.tolist() == [3, 3] and data.test.counts.tolist() == [2, 2]
    with pytest.raises(ConfigError, match="test_fraction=0.2 is invalid: must be 0 with a "
                       "test split of its own"):
        from_partitions(X, y, [np.array([0, 1, 2]), np.array([3, 4, 5])], test_fraction=0.2,
                        test=(Xt, yt, [np.array([0]), np.array([1])]))
    with pytest.raises(ConfigError, match="must be disjoint"):
        from_partitions(X, y, [np.array([0, 1, 2]), np.array([3, 4, 5])], test_fraction=0.0,
                        test=(Xt, yt, [np.array([0, 1]), np.array([1, 2])]))


@pytest.mark.parametrize("kwargs,match", [
    ({"dataset": "digits"}, "test_split='official' is invalid: data set 'digits' has no "
                            "official test split"),
    ({"test_fraction": 0.2}, "test_fraction=0.2 is invalid: must be 0"),
    ({"scale": "maxabs"}, "scale='maxabs' is invalid"),
])
def test_official_is_refused_where_it_cannot_apply(kwargs, match):
    args = {"dataset": "fashion_mnist", "partition": "iid", "num_clients": 2,
            "test_split": "official", **kwargs}
    with pytest.raises(ConfigError, match=match):
        federated_real(**args)


DEBIAN = Path("/usr/share/datasets/fashion-mnist")


def test_safari_paper_scale_tests_on_the_official_split_of_fashion_mnist():
    # the CPU-scale runs test on the official split too, their --quick forms included
    for budget in (FULL, QUICK):
        assert data_table(budget)["test_split"] == "official"
        assert "test_fraction" not in data_table(budget)
    table = data_table(PAPER)
    assert table["test_split"] == "official" and "test_fraction" not in table
    assert PAPER_QUICK.test_split == "official"
    if not (DEBIAN / "t10k-images-idx3-ubyte.gz").is_file():
        pytest.skip("Fashion-MNIST is not installed; install it with "
                    "`apt-get install -y dataset-fashion-mnist`")
    args = {k: v for k, v in table.items() if k != "kind"}
    data = federated_real(**{**args, "flatten": True, "pad": 0})
    # all 60,000 training images train; the 10,000 test images are dealt, 1,000 per label
    # over the 25 clients of its group: 200 each, of the client's own labels
    assert int(data.train.counts.sum()) == 60_000 and data.test.counts.tolist() == [200] * 50
    for i in (0, 24, 25, 49):
        train = set(torch.unique(data.train.select(torch.tensor([i])).y).tolist())
        test = set(torch.unique(data.test.select(torch.tensor([i])).y).tolist())
        assert test == train == set(range(5) if i < 25 else range(5, 10)), i
