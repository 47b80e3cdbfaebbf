"""What a problem checks in a data set before any training: the labels of each split (the
error says which split holds the bad label) and the feature layout it can compute on."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError


def _data(train_label, test_label, dense=True):
    gen = np.random.default_rng(0)
    xs = [gen.normal(size=(4, 3)) for _ in range(2)]
    if not dense:
        xs = [sp.csr_matrix(x) for x in xs]
    ys = [np.array([0.0, 1.0, 2.0, train_label]), np.array([0.0, 1.0, 2.0, 1.0])]
    tys = [np.array([0.0, test_label]), np.array([1.0, 2.0])]
    return fs.data.from_arrays(xs, ys, test_xs=[x[:2] for x in xs], test_ys=tys)


@pytest.mark.parametrize("problem", [
    fs.problems.softmax(num_classes=3),
    fs.problems.neural(torch.nn.Linear(3, 3)),
], ids=["softmax", "neural"])
@pytest.mark.parametrize("train,test,split", [(4.0, 1.0, "train"), (1.0, 4.0, "test"),
                                              (1.0, 1.5, "test"), (-1.0, 0.0, "train")])
def test_a_bad_label_names_its_split(problem, train, test, split):
    bad = train if split == "train" else test
    with pytest.raises(ConfigError, match=rf"^{split} labels \[{bad}\] are invalid for "):
        problem.check_data(_data(train, test))


def test_logistic_labels_name_their_split_too():
    data = _data(1.0, 0.0)
    with pytest.raises(ConfigError, match=r"^train labels \[2.0\] are invalid for logistic: "
                                          r"labels must be in \{0, 1\} or in \{-1, 1\}"):
        fs.problems.logistic().check_data(data)


def test_good_labels_pass_every_problem():
    for problem in (fs.problems.softmax(num_classes=3),
                    fs.problems.neural(torch.nn.Linear(3, 3))):
        problem.check_data(_data(1.0, 2.0))


def test_a_neural_problem_refuses_csr_features_clearly():
    data = _data(1.0, 2.0, dense=False)
    problem = fs.problems.neural(torch.nn.Linear(3, 3))
    with pytest.raises(ConfigError, match=r"dense feature tensors.*sparse \(CSR\) client "
                                          r"features SparseRows"):
        problem.check_data(data)
    with pytest.raises(ConfigError, match="CSR"):
        fs.simulate(fs.algorithms.fed_avg(step_size=0.1, local_steps=1), problem, data,
                    rounds=1)
    # the linear problems keep CSR features sparse and run on them
    h = fs.simulate(fs.algorithms.fed_avg(step_size=0.1, local_steps=1),
                    fs.problems.softmax(num_classes=3), data, rounds=1)
    assert len(h.records) == 1
