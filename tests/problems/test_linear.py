import pytest
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError


def _batch(S=3, b=7, d=5, dtype=torch.float64, classes=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(S, b, d, generator=g, dtype=dtype)
    if classes is None:
        y = torch.randn(S, b, generator=g, dtype=dtype)
    else:
        y = torch.randint(0, classes, (S, b), generator=g).to(dtype)
    # uneven padding: client s has b - s real examples
    counts = torch.tensor([b - s for s in range(S)])
    w = (torch.arange(b)[None, :] < counts[:, None]).to(dtype) / counts[:, None]
    return X, y, w


def _autograd(problem, params, X, y, w):
    p = params.clone().requires_grad_(True)
    problem.loss(p, X, y, w).sum().backward()
    return p.grad


@pytest.mark.parametrize("problem,classes", [
    (fs.problems.least_squares(), None),
    (fs.problems.logistic(), 2),
    (fs.problems.logistic(l2=0.3), 2),
    (fs.problems.softmax(num_classes=4), 4),
    (fs.problems.softmax(num_classes=4, l2=0.1), 4),
])
def test_gradient_matches_autograd(problem, classes):
    X, y, w = _batch(classes=classes)
    P = problem.param_dim(X.shape[-1])
    params = torch.randn(X.shape[0], P, dtype=torch.float64)
    assert torch.allclose(problem.grad(params, X, y, w), _autograd(problem, params, X, y, w),
                          atol=1e-12)


def test_logistic_accepts_minus_one_plus_one_labels():
    X, y, w = _batch(classes=2)
    pm = 2 * y - 1
    p = torch.randn(3, 5, dtype=torch.float64)
    lg = fs.problems.logistic()
    assert torch.allclose(lg.loss(p, X, y, w), lg.loss(p, X, pm, w))
    assert torch.allclose(lg.grad(p, X, y, w), lg.grad(p, X, pm, w))


def test_least_squares_by_hand():
    X = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]])
    y = torch.tensor([[1.0, 1.0]])
    w = torch.tensor([[0.5, 0.5]])
    x = torch.tensor([3.0, 1.0])
    # residuals (2, 1): f = 1/(2*2) (4 + 1) = 1.25; grad = 1/2 (A^T r) = (1, 1)
    assert torch.allclose(fs.problems.least_squares().loss(x, X, y, w), torch.tensor([1.25]))
    assert torch.allclose(fs.problems.least_squares().grad(x[None], X, y, w),
                          torch.tensor([[1.0, 1.0]]))


def test_shared_params_equal_per_client_params():
    X, y, w = _batch(classes=4)
    sm = fs.problems.softmax(num_classes=4)
    p = torch.randn(20, dtype=torch.float64)
    assert torch.allclose(sm.loss(p, X, y, w), sm.loss(p.expand(3, -1), X, y, w))


def test_lipschitz_matches_the_largest_hessian_eigenvalue():
    X, y, w = _batch(d=6)
    L = fs.problems.least_squares().lipschitz(X, w, iterations=300)
    for s in range(3):
        H = X[s].T @ torch.diag(w[s]) @ X[s]
        assert torch.allclose(L[s], torch.linalg.eigvalsh(H).max(), rtol=1e-6)
    Llog = fs.problems.logistic(l2=0.5).lipschitz(X, w, iterations=300)
    assert torch.allclose(Llog, 0.25 * L + 0.5, rtol=1e-6)


def test_accuracy():
    X = torch.tensor([[[1.0], [-1.0], [2.0], [0.0]]])
    y = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    w = torch.tensor([[1 / 3, 1 / 3, 1 / 3, 0.0]])  # last row is padding
    acc = fs.problems.logistic().accuracy(torch.tensor([1.0]), X, y, w)
    assert torch.allclose(acc, torch.tensor([2 / 3]))


def test_label_checks():
    data = fs.data.from_arrays([torch.ones(2, 3)], [torch.tensor([0.0, 5.0])])
    with pytest.raises(ConfigError, match="labels"):
        fs.problems.softmax(num_classes=3).check_data(data)
    with pytest.raises(ConfigError, match="labels"):
        fs.problems.logistic().check_data(data)
    with pytest.raises(ConfigError, match="num_classes=1"):
        fs.problems.softmax(num_classes=1)


def test_a_float32_least_squares_loss_past_the_largest_float_is_inf_not_halved_back():
    # a diverging run is flagged by a non-finite objective: the sum overflows to inf
    # before the factor 1/2, as it always has (halving first would stay just finite)
    X = torch.ones(1, 2, 1)
    params = torch.tensor([1.5e19])
    y, w = torch.zeros(1, 2), torch.ones(1, 2)
    loss = fs.problems.least_squares().loss(params, X, y, w)
    assert torch.isinf(loss).all()
    # each example's half-loss (1.1e38) is finite: only the order of sum and 1/2 decides
    halves = fs.problems.least_squares().link.value(params * X[..., 0], y, w)
    assert torch.isfinite(halves).all() and torch.isfinite(halves.sum(-1)).all()
