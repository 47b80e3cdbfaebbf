"""restricted_solve: exact and iterative restricted minimisation vs dense references."""

import numpy as np
import pytest
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.problems.base import Problem
from fedsparse.problems.restricted import mask_to_index, restricted_loss_grad

DT = torch.float64


def _data(S=4, n=30, d=12, classes=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(S, n, d, generator=g, dtype=DT)
    if classes is None:
        y = torch.randn(S, n, generator=g, dtype=DT)
    else:
        y = torch.randint(0, classes, (S, n), generator=g).to(DT)
    counts = torch.tensor([n - 3 * s for s in range(S)])     # uneven padding
    w = (torch.arange(n)[None] < counts[:, None]).to(DT) / counts[:, None]
    return X, y, w, counts


def _support(S, P, sizes, k, seed=1):
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(S, P, dtype=torch.bool)
    for s, m in enumerate(sizes):
        mask[s, torch.randperm(P, generator=g)[:m]] = True
    return mask_to_index(mask, k)


def test_mask_to_index_pads_and_keeps_order():
    mask = torch.tensor([[False, True, False, True], [True, False, False, False]])
    index, valid = mask_to_index(mask, 3)
    assert index[0, :2].tolist() == [1, 3] and valid[0].tolist() == [True, True, False]
    assert index[1, 0].item() == 0 and valid[1].tolist() == [True, False, False]
    assert all(len(set(r.tolist())) == 3 for r in index)     # distinct positions


def test_least_squares_exact_matches_numpy_lstsq_per_client():
    X, y, w, counts = _data()
    index, valid = _support(4, 12, [6, 4, 5, 2], 6)
    coef, info = fs.problems.least_squares().restricted_solve(index, valid, X, y, w)
    for s in range(4):
        n = int(counts[s])
        cols = index[s][valid[s]]
        ref, *_ = np.linalg.lstsq(X[s, :n][:, cols].numpy(), y[s, :n].numpy(), rcond=None)
        np.testing.assert_allclose(coef[s][valid[s]].numpy(), ref, rtol=1e-10, atol=1e-12)
        assert torch.all(coef[s][~valid[s]] == 0)
    assert info["inner_iterations"] == 1.0


def test_least_squares_exact_rank_deficient_falls_back_to_min_norm():
    X, y, w, _ = _data(S=2, n=4, d=10)
    w = torch.full_like(w, 0.25)
    index, valid = _support(2, 10, [8, 3], 8)
    coef, _ = fs.problems.least_squares().restricted_solve(index, valid, X, y, w)
    for s in range(2):
        cols = index[s][valid[s]]
        ref, *_ = np.linalg.lstsq(X[s][:, cols].numpy(), y[s].numpy(), rcond=None)
        np.testing.assert_allclose(coef[s][valid[s]].numpy(), ref, rtol=1e-8, atol=1e-10)


def test_least_squares_gradient_descent_reaches_tolerance():
    X, y, w, _ = _data()
    index, valid = _support(4, 12, [5, 5, 3, 4], 5)
    prob = fs.problems.least_squares()
    exact, _ = prob.restricted_solve(index, valid, X, y, w)
    gd, info = prob.restricted_solve(index, valid, X, y, w, method="gd", tol=1e-12,
                                     max_iter=5000)
    assert torch.allclose(gd, exact, atol=1e-8)
    assert info["inner_iterations"] > 1


def _restricted_grad(problem, coef, index, valid, X, y, w):
    full = torch.zeros(X.shape[0], problem.param_dim(X.shape[-1]), dtype=DT)
    full.scatter_(1, index, coef * valid)
    g = problem.grad(full, X, y, w)
    return torch.gather(g, 1, index) * valid


@pytest.mark.parametrize("problem,classes", [
    (fs.problems.logistic(), 2),
    (fs.problems.logistic(l2=0.1), 2),
    (fs.problems.softmax(num_classes=3, l2=0.05), 3),
])
@pytest.mark.parametrize("method", ["exact", "newton"])
def test_newton_reaches_restricted_optimum(problem, classes, method):
    X, y, w, _ = _data(classes=classes)
    P = problem.param_dim(X.shape[-1])
    index, valid = _support(4, P, [6, 3, 5, 4], 6)
    coef, info = problem.restricted_solve(index, valid, X, y, w, method=method, tol=1e-12)
    g = _restricted_grad(problem, coef, index, valid, X, y, w)
    assert g.abs().max() < 1e-8
    assert torch.all(coef[~valid] == 0)
    assert info["inner_iterations"] >= 1


def test_logistic_matches_scipy_reference():
    scipy_opt = pytest.importorskip("scipy.optimize")
    X, y, w, counts = _data(S=2, classes=2)
    prob = fs.problems.logistic(l2=0.01)
    index, valid = _support(2, 12, [4, 4], 4)
    coef, _ = prob.restricted_solve(index, valid, X, y, w)
    for s in range(2):
        n = int(counts[s])
        Z = X[s, :n][:, index[s]].numpy()
        t = y[s, :n].numpy()

        def f(c, Z=Z, t=t, n=n):
            z = Z @ c
            return (np.logaddexp(0, z) - t * z).sum() / n + 0.005 * c @ c

        ref = scipy_opt.minimize(f, np.zeros(4), method="BFGS", options={"gtol": 1e-12}).x
        np.testing.assert_allclose(coef[s].numpy(), ref, atol=1e-6)


def test_dictionary_problem_restricted_solve_matches_dense_reference():
    X, y, w, counts = _data(d=15)
    D = fs.sparsity.gaussian_dictionary(dim=15, atoms=20, seed=3)
    prob = fs.problems.DictionaryProblem(fs.problems.least_squares(), D)
    index, valid = _support(4, 20, [5, 6, 2, 4], 6)
    coef, _ = prob.restricted_solve(index, valid, X, y, w)
    for s in range(4):
        n = int(counts[s])
        cols = index[s][valid[s]]
        ref, *_ = np.linalg.lstsq((X[s, :n] @ D[:, cols]).numpy(), y[s, :n].numpy(), rcond=None)
        np.testing.assert_allclose(coef[s][valid[s]].numpy(), ref, rtol=1e-9, atol=1e-11)


def test_dictionary_problem_grad_is_chain_rule():
    X, y, w, _ = _data(d=6, classes=3)
    D = fs.sparsity.gaussian_dictionary(dim=6, atoms=4, seed=0)
    prob = fs.problems.DictionaryProblem(fs.problems.softmax(num_classes=3, l2=0.1), D)
    a = torch.randn(4, 12, dtype=DT, requires_grad=True)
    prob.loss(a, X, y, w).sum().backward()
    assert torch.allclose(prob.grad(a.detach(), X, y, w), a.grad, atol=1e-12)


class _NoRestricted(Problem):
    name = "plain"

    def loss(self, params, X, y, w):
        return fs.problems.least_squares().loss(params, X, y, w)

    def grad(self, params, X, y, w):
        return fs.problems.least_squares().grad(params, X, y, w)


def test_capability_error_is_clear():
    data = fs.data.shifted_gaussian(num_clients=3, samples_per_client=10, dim=8, sparsity=2)
    with pytest.raises(ConfigError, match="restricted_solve"):
        fs.simulate(fs.algorithms.fed_grad_mp(sparsity=2), _NoRestricted(), data, rounds=1,
                    progress=False)
    X, y, w, _ = _data()
    index, valid = _support(4, 12, [2, 2, 2, 2], 2)
    with pytest.raises(ConfigError, match="restricted_solve"):
        _NoRestricted().restricted_solve(index, valid, X, y, w)


def test_restricted_lipschitz_bounds_the_dictionary_l2_hessian():
    """With an l2 penalty on x = A a, the restricted Hessian is at most
    Z^T W Z / 4 + l2 * M (logistic), M the Gram of the chosen atoms: the step bound must
    cover that matrix, not just Z^T W Z / 4 + l2 * I."""
    from fedsparse.problems.restricted import restricted_lipschitz

    X, _, w, _ = _data(d=15)
    D = 3.0 * fs.sparsity.gaussian_dictionary(dim=15, atoms=20, seed=3)  # ||M|| well above 1
    prob = fs.problems.DictionaryProblem(fs.problems.logistic(l2=5.0), D)
    index, valid = _support(4, 20, [5, 6, 2, 4], 6)
    Z, _ = prob.restricted_features(index, X)
    Z = Z * valid.unsqueeze(1).to(Z.dtype)
    metric = prob.restricted_metric(index, valid)
    bound = restricted_lipschitz(prob, Z, w, valid, metric)
    gram = torch.bmm(Z.transpose(1, 2) * w.unsqueeze(1), Z)
    curvature = torch.linalg.matrix_norm(0.25 * gram + 5.0 * metric, ord=2)
    assert (torch.linalg.matrix_norm(metric, ord=2) > 2).all()
    assert (bound >= curvature).all()
    separate = 0.25 * torch.linalg.matrix_norm(gram, ord=2) + \
        5.0 * torch.linalg.matrix_norm(metric, ord=2)
    assert (bound <= 1.06 * separate).all()


def test_singular_systems_fall_back_to_least_squares():
    from fedsparse._linalg import solve_or_lstsq

    A = torch.tensor([[[1.0, 0.0], [0.0, 0.0]], [[2.0, 0.0], [0.0, 4.0]]], dtype=torch.float64)
    b = torch.tensor([[1.0, 1.0], [2.0, 4.0]], dtype=torch.float64)
    # the singular system gets its minimum-norm least-squares solution, the other is exact
    assert torch.equal(solve_or_lstsq(A, b), torch.tensor([[1.0, 0.0], [1.0, 1.0]],
                                                           dtype=torch.float64))


def test_fedgradmp_logistic_on_separable_float32_clients_runs():
    """30 examples per client and up to 30 restricted columns: the logistic restricted
    problem is separable, its float32 Hessian saturates to singular, and Newton must go on
    (before, torch.linalg.solve raised from inside LAPACK)."""
    data = fs.data.fedht_simulation("classification", seed=0, num_clients=10,
                                    samples_per_client=30, dim=50, support_size=10)
    history = fs.simulate(fs.algorithms.fed_grad_mp(sparsity=10, batch_size=8),
                          fs.problems.logistic(), data, rounds=3, seed=1)
    assert len(history.records) == 3 and torch.isfinite(history.model).all()


def test_newton_stops_where_float32_rounding_stops_the_loss_falling():
    # separable float32 clients: the minimiser lies at infinity and the loss soon stops
    # falling in float32; Newton stops there (every client ran out its 100 iterations
    # before: a step relative to the coefficients of 1e-10 is below float32's resolution)
    data = fs.data.fedht_simulation("classification", seed=0, num_clients=10,
                                    samples_per_client=30, dim=50, support_size=10)
    X, y = data.train.X, data.train.y
    w = torch.full(y.shape, 1 / y.shape[1])
    index, valid = torch.arange(10).repeat(10, 1), torch.ones(10, 10, dtype=torch.bool)
    prob = fs.problems.logistic()
    coef, info = prob.restricted_solve(index, valid, X, y, w)
    assert torch.isfinite(coef).all() and info["inner_iterations"] < 50
    Z, cls = prob.restricted_features(index, X)

    def loss(c):
        return restricted_loss_grad(prob, c, Z, cls, y, w, None)[0]

    assert (loss(coef) < loss(torch.zeros_like(coef))).all()
    again, _ = prob.restricted_solve(index, valid, X, y, w, init=coef)
    assert (loss(again) <= loss(coef)).all()


def test_mask_to_index_on_the_cpu_gives_the_stable_sorts_positions():
    # The CPU path reads the positions off flatnonzero; they must be the stable sort's,
    # padding included, for any number of True entries (more than k: the first k).
    g = torch.Generator().manual_seed(1)
    for _ in range(300):
        S, P = (int(v) for v in torch.randint(1, 12, (2,), generator=g))
        mask = torch.rand(S, P, generator=g) < float(torch.rand(1, generator=g))
        for k in range(1, P + 1):
            order = torch.sort((~mask).to(torch.int8), dim=-1, stable=True).indices[..., :k]
            index, valid = mask_to_index(mask, k)
            assert torch.equal(index, order)
            assert torch.equal(valid, torch.gather(mask, -1, order))
