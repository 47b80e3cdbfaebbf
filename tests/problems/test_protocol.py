"""The Problem protocol, the per-example links of the linear problems, and the one owner of
the data layout (``prepare``)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.problems import LinearProblem, Problem
from fedsparse.problems.links import BinaryLogistic, Link, SoftmaxCrossEntropy, SquaredError
from fedsparse.problems.protocol import LINEAR_ONLY
from fedsparse.problems.restricted import mask_to_index

F64 = torch.float64


def _scalar_links():
    return [SquaredError(), BinaryLogistic()]


@pytest.mark.parametrize("link", _scalar_links(), ids=repr)
def test_scalar_link_derivatives_are_those_of_its_value(link):
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, 5, generator=g, dtype=F64, requires_grad=True)
    y = (torch.rand(3, 5, generator=g, dtype=F64) > 0.5).to(F64)
    w = torch.rand(3, 5, generator=g, dtype=F64)
    first, = torch.autograd.grad(link.value(z, y, w).sum(), z, create_graph=True)
    torch.testing.assert_close(first, link.derivative(z.detach(), y, w))
    second, = torch.autograd.grad(first.sum(), z)
    torch.testing.assert_close(second, link.curvature(z.detach(), y, w))
    # unweighted forms are the weighted ones at w = 1
    ones = torch.ones_like(w)
    torch.testing.assert_close(link.value(z.detach(), y), link.value(z.detach(), y, ones))
    torch.testing.assert_close(link.derivative(z.detach(), y),
                               link.derivative(z.detach(), y, ones))
    # the curvature bound holds
    zz = torch.linspace(-30, 30, 601, dtype=F64)
    assert float(link.curvature(zz, torch.zeros_like(zz)).max()) <= link.curvature_bound + 1e-15


def test_a_logistic_score_of_exactly_zero_predicts_class_zero():
    # sigmoid(0) = 1/2 is no majority for class 1: z = 0 predicts 0, right for y = 0 and
    # wrong for y = 1; z = 1 > 0 predicts 1
    z = torch.tensor([0.0, 0.0, 1.0])
    y = torch.tensor([0.0, 1.0, 1.0])
    assert BinaryLogistic().correct(z, y).tolist() == [True, False, True]


def test_softmax_link_derivatives_are_those_of_its_value():
    link = SoftmaxCrossEntropy(4)
    g = torch.Generator().manual_seed(1)
    z = torch.randn(6, 4, generator=g, dtype=F64, requires_grad=True)
    y = torch.randint(0, 4, (6,), generator=g).to(F64)
    w = torch.rand(6, generator=g, dtype=F64)
    first, = torch.autograd.grad(link.value(z, y, w).sum(), z)
    torch.testing.assert_close(first, link.derivative(z.detach(), y, w))
    # Hessian of one example's loss in its logits: diag(p) - p p^T
    p = link.curvature(z.detach(), y)
    for j in range(3):
        H = torch.autograd.functional.hessian(lambda v, j=j: link.value(v, y[j:j + 1])[0],
                                              z.detach()[j:j + 1])
        torch.testing.assert_close(H.reshape(4, 4), torch.diag(p[j]) - torch.outer(p[j], p[j]))
    assert torch.equal(link.correct(z.detach(), y), z.detach().argmax(-1) == y.long())


def test_named_problems_are_linear_problems_of_their_link():
    cases = [(fs.problems.least_squares(), SquaredError, 1, "regression"),
             (fs.problems.logistic(l2=0.5), BinaryLogistic, 1, "classification"),
             (fs.problems.softmax(num_classes=4), SoftmaxCrossEntropy, 4, "classification")]
    for problem, link, blocks, task in cases:
        assert isinstance(problem, LinearProblem) and isinstance(problem.link, link)
        assert problem.name == problem.link.name and problem.blocks == blocks
        assert problem.task == task
        assert problem.curvature_scale() == problem.link.curvature_bound
    g = torch.Generator().manual_seed(2)
    X, w = torch.randn(3, 8, 5, generator=g, dtype=F64), torch.full((3, 8), 1 / 8, dtype=F64)
    y = torch.randint(0, 4, (3, 8), generator=g).to(F64)
    x = torch.randn(3, 20, generator=g, dtype=F64)
    generic = LinearProblem(SoftmaxCrossEntropy(4), l2=0.1)
    named = fs.problems.softmax(num_classes=4, l2=0.1)
    assert torch.equal(generic.loss(x, X, y, w), named.loss(x, X, y, w))
    assert torch.equal(generic.grad(x, X, y, w), named.grad(x, X, y, w))
    with pytest.raises(ConfigError, match="link="):
        LinearProblem("logistic")


class _ExpLink(Link):
    """``l(z, y) = e^z - y z`` (Poisson regression): a link the library does not ship."""

    name = "poisson"

    def value(self, z, y, w=None):
        v = torch.exp(z) - y * z
        return v if w is None else w * v

    def derivative(self, z, y, w=None):
        d = torch.exp(z) - y
        return d if w is None else w * d

    def curvature(self, z, y, w=None):
        return torch.exp(z) if w is None else w * torch.exp(z)


@pytest.mark.parametrize("method", ["exact", "newton", "gd"])
def test_restricted_solve_follows_any_link(method):
    """The restricted solvers know nothing of the loss: a new link minimises its own loss
    (the full gradient vanishes on the chosen coordinates)."""
    problem = LinearProblem(_ExpLink())
    g = torch.Generator().manual_seed(3)
    X = 0.3 * torch.randn(4, 30, 10, generator=g, dtype=F64)
    y = torch.poisson(torch.full((4, 30), 2.0), generator=g).to(F64)
    w = torch.full((4, 30), 1 / 30, dtype=F64)
    mask = torch.zeros(4, 10, dtype=torch.bool)
    mask[:, [1, 4, 7]] = True
    mask[2, 9] = True
    index, valid = mask_to_index(mask, 4)
    coef, info = problem.restricted_solve(index, valid, X, y, w, method=method, tol=1e-12,
                                          max_iter=5000)
    full = torch.zeros(4, 10, dtype=F64).scatter(1, index, coef * valid)
    grad = problem.grad(full, X, y, w)
    assert info["inner_iterations"] > 1  # iterated: not the quadratic closed form
    assert float((grad * mask).abs().max()) < 1e-7
    assert float((full * ~mask).abs().max()) == 0.0


class _HalfSquare(Link):
    """``l(z, y) = (z - y)^2 / 2`` written as a user would, curvature included."""

    name = "half_square"

    def value(self, z, y, w=None):
        v = 0.5 * (z - y) ** 2
        return v if w is None else w * v

    def derivative(self, z, y, w=None):
        return z - y if w is None else w * (z - y)

    def curvature(self, z, y, w=None):
        return torch.ones_like(z) if w is None else w * torch.ones_like(z)


class _Wrong(_HalfSquare):
    """:class:`_HalfSquare` with one method's output made wrong by ``mistake``."""

    def __init__(self, method, mistake):
        self.method, self.mistake = method, mistake

    def __getattribute__(self, name):
        attr = object.__getattribute__(self, name)
        if name == object.__getattribute__(self, "method"):
            return lambda *a: object.__getattribute__(self, "mistake")(attr(*a))
        return attr


@pytest.mark.parametrize("method", ["value", "derivative", "curvature"])
@pytest.mark.parametrize("mistake,message", [
    (lambda out: out.sum(-1), r"returned a \(1,\) torch.float64 tensor .* must return a "
                              r"\(1, 4\) torch.float64"),
    (lambda out: out.float(), r"returned a \(1, 4\) torch.float32 tensor"),
    (lambda out: out.tolist(), r"returned a list"),
    (lambda out: out * float("nan"), r"returned non-finite values \(NaN or inf\) at zero scores"),
], ids=["shape", "dtype", "type", "nan"])
def test_a_custom_link_of_wrong_outputs_is_named_before_the_first_round(method, mistake,
                                                                        message):
    # unchecked, a wrong shape failed inside numpy, a float32 derivative was cast back
    # silently, and a NaN loss was recorded as the objective with the model still finite
    data = fs.data.shifted_gaussian(num_clients=3, samples_per_client=10, dim=6, sparsity=2,
                                    seed=0, dtype=F64)
    algorithm = fs.algorithms.fed_grad_mp(sparsity=2)  # its solves use the curvature
    assert len(fs.simulate(algorithm, LinearProblem(_HalfSquare()), data, rounds=1).records) == 1
    with pytest.raises(ConfigError, match=rf"_Wrong\.{method} {message}"):
        fs.simulate(algorithm, LinearProblem(_Wrong(method, mistake)), data, rounds=1)


def test_a_classification_link_must_say_which_predictions_are_correct():
    class Scores(_HalfSquare):
        task = "classification"

        def correct(self, z, y):
            return (z > 0).to(z.dtype)

    data = fs.data.shifted_gaussian(num_clients=3, samples_per_client=10, dim=6, sparsity=2,
                                    seed=0, dtype=F64)
    with pytest.raises(ConfigError, match=r"Scores\.correct returned a \(1, 4\) "
                       r"torch.float64 tensor .* must return a \(1, 4\) torch.bool"):
        fs.simulate(fs.algorithms.fed_avg(), LinearProblem(Scores()), data, rounds=1)


def test_a_network_has_no_linear_methods_and_says_so():
    problem = fs.problems.neural(nn.Linear(2, 3))
    for name in LINEAR_ONLY:
        assert not hasattr(problem, name), name
    with pytest.raises(ConfigError, match="no restricted_solve.*linear problems"):
        problem.restricted_solve  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        problem.nonexistent  # noqa: B018
    data = fs.data.fedprox_synthetic(num_clients=3, dim=4, num_classes=3, seed=0, dtype=F64)
    net = fs.problems.neural(nn.Linear(4, 3), dtype=F64)
    with pytest.raises(ConfigError, match="step_size='auto'.*Lipschitz"):
        fs.simulate(fs.algorithms.fed_avg(step_size="auto", local_steps=1), net, data,
                    rounds=1, progress=False)
    with pytest.raises(ConfigError, match="fed_grad_mp needs the problem capabilities"):
        fs.simulate(fs.algorithms.fed_grad_mp(sparsity=2), net, data, rounds=1,
                    progress=False)
    with pytest.raises(ConfigError, match="a dictionary needs a linear problem"):
        fs.problems.DictionaryProblem(net, torch.eye(4, dtype=F64))


def test_prepare_owns_the_data_layout():
    images = fs.data.from_arrays(
        *_image_clients(), layout="pooled", dtype=F64)
    linear, net = fs.problems.logistic(), fs.problems.neural(
        nn.Sequential(nn.Flatten(), nn.Linear(6, 2)), dtype=F64)
    flat = linear.prepare(images)
    assert flat.layout == "padded" and flat.train.X.shape[2:] == (6,)
    assert linear.prepare(flat) is flat  # already in its layout
    assert net.prepare(images) is images
    assert linear.chunked_evaluation(images) and net.chunked_evaluation(flat)
    assert not linear.chunked_evaluation(flat)
    chunk = torch.zeros(5, 1, 2, 3)
    assert linear.prepare_features(chunk).shape == (5, 6)
    assert linear.prepare_features(torch.zeros(2, 5, 1, 2, 3), batch_dims=2).shape == (2, 5, 6)
    assert net.prepare_features(chunk) is chunk
    assert isinstance(net, Problem) and not isinstance(net, LinearProblem)


def _image_clients():
    g = torch.Generator().manual_seed(4)
    X = [torch.randn(n, 1, 2, 3, generator=g, dtype=F64).numpy() for n in (3, 5)]
    y = [torch.randint(0, 2, (n,), generator=g).numpy() for n in (3, 5)]
    return X, y
