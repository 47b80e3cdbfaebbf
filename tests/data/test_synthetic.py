import re

import numpy as np
import pytest
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError


def test_fedht_simulation_shapes_seed_and_labels():
    a = fs.data.fedht_simulation("regression", num_clients=5, samples_per_client=20, dim=50,
                                 support_size=10, seed=3)
    b = fs.data.fedht_simulation("regression", num_clients=5, samples_per_client=20, dim=50,
                                 support_size=10, seed=3)
    assert a.train.X.shape == (5, 20, 50) and a.ground_truth is None
    assert torch.equal(a.train.X, b.train.X) and torch.equal(a.train.y, b.train.y)
    c = fs.data.fedht_simulation("classification", num_clients=5, samples_per_client=20, dim=50,
                                 support_size=10, seed=3)
    assert set(c.labels().tolist()) == {0.0, 1.0}
    # top 10 % of each client's examples are positive
    assert c.train.y.sum(1).tolist() == [2.0] * 5
    # within a client the covariance is diagonal j^-1.2: std 1 for j=1, 50^-0.6 = 0.096 for j=50
    X = a.train.X[0]
    assert X[:, 0].std() > 5 * X[:, 49].std()


def test_shifted_gaussian_truth_and_noiseless_targets():
    d = fs.data.shifted_gaussian(num_clients=4, samples_per_client=30, dim=40, sparsity=5,
                                 alpha=0.0, exponent=0.0, seed=1, dtype=torch.float64)
    x = d.ground_truth
    assert int((x != 0).sum()) == 5
    assert torch.allclose(torch.linalg.vector_norm(x), torch.tensor(1.0, dtype=torch.float64))
    for i in range(4):
        Xi, yi = d.train.client(i)
        assert torch.allclose(Xi @ x, yi)


def test_shifted_gaussian_scale_per_client():
    d = fs.data.shifted_gaussian(num_clients=3, samples_per_client=400, dim=50, sparsity=2,
                                 alpha=0.0, exponent=2.0, seed=0)
    stds = d.train.X.reshape(3, -1).std(1)
    # client i has variance 1 / i^2: std 1, 1/2, 1/3
    assert torch.allclose(stds, torch.tensor([1.0, 0.5, 1 / 3]), rtol=0.05)


def test_fedprox_synthetic():
    d = fs.data.fedprox_synthetic(0.5, 0.5, num_clients=6, seed=0)
    assert d.dim == 60 and d.test is not None
    assert set(d.labels().tolist()) <= set(map(float, range(10)))
    assert (d.train.counts + d.test.counts >= 50).all()
    assert torch.allclose(d.weights.sum(), torch.tensor(1.0, dtype=torch.float64))


def test_from_arrays_validation():
    good = [np.ones((3, 4)), np.ones((2, 4))]
    ys = [np.zeros(3), np.zeros(2)]
    d = fs.data.from_arrays(good, ys)
    assert d.weights.tolist() == [0.6, 0.4]
    assert d.train.mask.tolist() == [[True] * 3, [True, True, False]]
    with pytest.raises(ConfigError, match=r"train_xs\[1\].shape\[1\]=5"):
        fs.data.from_arrays([np.ones((3, 4)), np.ones((2, 5))], ys)
    with pytest.raises(ConfigError, match="at least one example"):
        fs.data.from_arrays([np.ones((3, 4)), np.ones((0, 4))], [np.zeros(3), np.zeros(0)])
    bad = np.ones((2, 4))
    bad[0, 1] = np.nan
    with pytest.raises(ConfigError, match="NaN/inf"):
        fs.data.from_arrays([np.ones((3, 4)), bad], ys)
    with pytest.raises(ConfigError, match=r"train_ys\[0\].shape"):
        fs.data.from_arrays(good, [np.zeros(2), np.zeros(2)])
    with pytest.raises(ConfigError, match="weights"):
        fs.data.from_arrays(good, ys, weights=[1.0, -1.0])
    with pytest.raises(ConfigError, match="xs"):
        fs.data.from_arrays([], [])


def test_from_arrays_keeps_the_values_of_tensors_that_require_grad():
    # Features made by a torch pipeline may require grad: the data set keeps their
    # values, so no round's computation (nor the final model) joins the caller's graph
    xs = [torch.randn(6, 4, requires_grad=True) for _ in range(3)]
    ys = [torch.randn(6, requires_grad=True) for _ in range(3)]
    data = fs.data.from_arrays(xs, ys, ground_truth=torch.ones(4, requires_grad=True),
                               test_xs=xs, test_ys=ys)
    for t in (data.train.X, data.train.y, data.test.X, data.ground_truth):
        assert not t.requires_grad
    algo = fs.algorithms.fed_iter_ht(sparsity=2, step_size=0.01, local_steps=2)
    history = fs.simulate(algo, fs.problems.least_squares(), data, rounds=2)
    assert not history.model.requires_grad
    atoms = torch.randn(4, 6, requires_grad=True)
    assert not fs.sparsity.Dictionary(atoms).matrix.requires_grad


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_from_arrays_copies_every_array_it_is_given(kind):
    # a data set outlives the caller's arrays: writing into them later (to build the
    # next data set, say) must not change the values a run or its checkpoint sees
    # of the data set's dtype: an array of another one is converted, a copy anyway
    make = np.ones if kind == "numpy" else lambda shape: torch.ones(shape, dtype=torch.float64)
    xs, ys, truth = [make((3, 4))], [make(3)], make(4)
    data = fs.data.from_arrays(xs, ys, ground_truth=truth, dtype=torch.float64)
    xs[0][0, 0] = ys[0][0] = truth[0] = 5.0
    for t in (data.train.X, data.train.y, data.ground_truth):
        assert bool((t == 1).all())


def test_from_arrays_takes_sequences_of_clients_and_names_an_iterator():
    xs, ys = [np.ones((3, 4)), np.ones((2, 4))], [np.zeros(3), np.zeros(2)]
    # arrays and tensors of clients are sequences too
    assert fs.data.from_arrays(np.ones((2, 3, 4)), torch.zeros(2, 3)).num_clients == 2
    for kwargs, name, got in [
            (dict(xs=(x for x in xs), ys=ys), "xs", "generator"),
            (dict(xs=xs, ys=iter(ys)), "ys", "list_iterator"),
            (dict(xs=xs, ys=ys, test_xs=map(np.asarray, xs), test_ys=ys), "test_xs", "map"),
            (dict(xs=dict(enumerate(xs)), ys=ys), "xs", "dict")]:
        with pytest.raises(ConfigError, match=rf"^{name}='{got}' is invalid: must be a "
                           r"sequence with one array per client .*pass list\(\.\.\.\)"):
            fs.data.from_arrays(**kwargs)
    for weights, shown in [((w for w in (1.0, 2.0)), "'generator'"), (["a", "b"], "['a', 'b']")]:
        with pytest.raises(ConfigError, match=rf"^weights={re.escape(shown)} is invalid: must "
                           "be 2 finite positive numbers"):
            fs.data.from_arrays(xs, ys, weights=weights)


@pytest.mark.parametrize("make", [
    lambda tf: fs.data.fedht_simulation(num_clients=2, samples_per_client=10, dim=20,
                                        support_size=2, test_fraction=tf),
    lambda tf: fs.data.fedprox_synthetic(num_clients=2, test_fraction=tf),
    lambda tf: fs.data.shifted_gaussian(num_clients=2, samples_per_client=10, dim=20,
                                        sparsity=2, test_fraction=tf),
])
def test_generators_test_fraction(make):
    for bad in (1.0, 3, -0.1, float("nan"), "0.2"):
        with pytest.raises(ConfigError, match="test_fraction"):
            make(bad)
    # a small share still gives every client one test example (and keeps one to train)
    d = make(0.01)
    assert (d.test.counts == 1).all() and (d.train.counts >= 1).all()
    d = make(0.99)
    assert (d.train.counts == 1).all()
    assert make(0.0).test is None


def test_generator_test_split_needs_two_examples_per_client():
    with pytest.raises(ConfigError, match="test_fraction=0.5 is invalid: needs at least 2 "
                       "examples per client"):
        fs.data.shifted_gaussian(num_clients=2, samples_per_client=1, dim=5, sparsity=1,
                                 test_fraction=0.5)
    d = fs.data.shifted_gaussian(num_clients=2, samples_per_client=1, dim=5, sparsity=1)
    assert d.test is None and d.train.counts.tolist() == [1, 1]
