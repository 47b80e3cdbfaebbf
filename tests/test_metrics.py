"""Evaluation: the chunked per-example path against the all-clients path, and personal
(per-client model) evaluation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.metrics import evaluate, evaluate_personal
from fedsparse.problems.base import Problem

F64 = torch.float64
KEYS = {"objective", "accuracy", "test_objective", "test_accuracy", "rel_error",
        "support_precision", "support_recall", "support_f1", "nnz", "density"}


class TinyImageSoftmax(Problem):
    """A linear softmax over flattened images that declares ``pooled_ok`` like a neural
    problem, and records the chunk sizes ``example_metrics`` is called with."""

    name = "tiny"
    task = "classification"
    pooled_ok = True

    def __init__(self, num_classes: int, features: int):
        self.C, self.F = num_classes, features
        self.chunks: list[int] = []

    def param_dim(self, feature_dim):
        return self.C * feature_dim

    def _logits(self, params, X):
        S, b = X.shape[:2]
        W = (params.expand(S, -1) if params.ndim == 1 else params).reshape(S, self.C, self.F)
        return torch.einsum("sbf,scf->sbc", X.reshape(S, b, -1), W)

    def loss(self, params, X, y, w):
        z = self._logits(params, X)
        nll = torch.logsumexp(z, -1) - z.gather(-1, y.long()[..., None])[..., 0]
        return (w * nll).sum(-1)

    def accuracy(self, params, X, y, w):
        return (w * (self._logits(params, X).argmax(-1) == y.long()).to(w.dtype)).sum(-1)

    def example_metrics(self, params, X, y):
        self.chunks.append(X.shape[0])
        z = X.reshape(X.shape[0], -1) @ params.reshape(self.C, self.F).T
        nll = F.cross_entropy(z, y.long(), reduction="none")
        return nll, z.argmax(-1) == y.long()


class LinearLogistic(type(fs.problems.logistic())):
    """The library's logistic regression with its per-example metrics spelled out here
    (so the test does not depend on another module's version of them)."""

    pooled_ok = False

    def example_metrics(self, params, X, y):
        z = X @ params
        # The l2 term rides on every example, so the mean over a client is its loss.
        penalty = 0.5 * self.l2() * (params * params).sum()
        return F.softplus(z) - (y > 0).to(z.dtype) * z + penalty, (z > 0) == (y > 0)


class PooledLogistic(LinearLogistic):
    pooled_ok = True


class LinearLeastSquares(type(fs.problems.least_squares())):
    pooled_ok = False

    def example_metrics(self, params, X, y):
        r = X @ params - y
        return 0.5 * r * r, None


def arrays(sizes, feature_shape, seed, classes):
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((n, *feature_shape)) for n in sizes]
    ys = [rng.integers(0, classes, n).astype(float) for n in sizes]
    return xs, ys


def dataset(layout, feature_shape=(6,), classes=2, sizes=(5, 1, 8, 3, 2, 7), weights=None,
            ground_truth=None):
    xs, ys = arrays(sizes, feature_shape, 0, classes)
    txs, tys = arrays([max(1, n // 2) for n in sizes], feature_shape, 1, classes)
    return fs.data.from_arrays(xs, ys, test_xs=txs, test_ys=tys, dtype=F64, layout=layout,
                               weights=weights, ground_truth=ground_truth)


def reference(problem, data, model):
    """The definition, client by client: sum_i p_i mean_j loss_ij (test: by test sizes)."""
    out = {}
    for key, split, p in (("", data.train, data.weights),
                          ("test_", data.test, data.test.counts.to(F64) / data.test.counts.sum())):
        losses, accs = [], []
        for i in range(data.num_clients):
            X, y = split.client(i)
            X = torch.as_tensor(np.asarray(X)).reshape(1, X.shape[0], *data.feature_shape)
            w = torch.full((1, X.shape[1]), 1.0 / X.shape[1], dtype=F64)
            losses.append(float(problem.loss(model, X, y[None], w)[0]))
            acc = problem.accuracy(model, X, y[None], w)
            accs.append(None if acc is None else float(acc[0]))
        p = p.to(F64).numpy()
        out[key + "objective"] = float(p @ np.array(losses))
        out[key + "accuracy"] = None if accs[0] is None else float(p @ np.array(accs))
    return out


def assert_metrics_close(got, want, keys=("objective", "accuracy", "test_objective",
                                          "test_accuracy")):
    for k in keys:
        if want[k] is None:
            assert got[k] is None, k
        else:
            assert got[k] == pytest.approx(want[k], rel=1e-12, abs=1e-14), k


@pytest.mark.parametrize("layout", ["pooled", "padded"])
def test_chunked_evaluation_does_not_depend_on_the_chunk_size(layout):
    data = dataset(layout, feature_shape=(1, 2, 3), classes=3)
    problem = TinyImageSoftmax(3, 6)
    model = torch.linspace(-1, 1, 18, dtype=F64)
    small = evaluate(problem, data, model, max_examples=3)
    assert max(problem.chunks) <= 3 and len(problem.chunks) > 2
    problem.chunks.clear()
    large = evaluate(problem, data, model, max_examples=10**6)
    assert len(problem.chunks) == 2  # one chunk per split: every example at once
    assert set(small) == set(large) == KEYS
    assert_metrics_close(small, large)
    assert_metrics_close(large, reference(problem, data, model))
    assert 0 < large["accuracy"] < 1 and large["nnz"] == 18


def test_chunked_path_equals_the_padded_path_of_a_linear_problem():
    truth = torch.tensor([1.0, 0, 0, -2.0, 0, 0.5], dtype=F64)
    weights = [1, 2, 3, 1, 1, 2]  # p_i not proportional to n_i: weighting is per client
    padded = dataset("padded", weights=weights, ground_truth=truth)
    pooled = dataset("pooled", weights=weights, ground_truth=truth)
    assert padded.layout == "padded" and pooled.layout == "pooled"
    model = torch.tensor([0.3, -0.2, 0.0, -1.0, 0.4, 0.0], dtype=F64)
    for problem in (LinearLogistic(), LinearLogistic(l2=0.1), LinearLeastSquares()):
        want = evaluate(problem, padded, model)  # the all-clients path
        assert_metrics_close(want, reference(problem, padded, model))
        got = evaluate(problem, pooled, model, max_examples=4)  # pooled data: chunked
        assert set(got) == set(want) == KEYS
        assert_metrics_close(got, want)
        for k in ("rel_error", "support_precision", "support_recall", "support_f1", "nnz",
                  "density"):
            assert got[k] == want[k]
    assert want["accuracy"] is None and want["test_accuracy"] is None  # least squares
    # A problem that declares pooled_ok is evaluated chunked on padded data too.
    assert_metrics_close(evaluate(PooledLogistic(), padded, model, max_examples=4),
                         evaluate(LinearLogistic(), padded, model))


def test_the_padded_path_is_unchanged():
    data = dataset("padded")
    problem = fs.problems.logistic()
    model = torch.linspace(-1, 1, 6, dtype=F64)
    got = evaluate(problem, data, model)
    w = data.train.mean_weights()
    assert got["objective"] == float(data.weights @ problem.loss(model, data.train.X,
                                                                 data.train.y, w).to(F64))
    assert got["accuracy"] == float(data.weights @ problem.accuracy(model, data.train.X,
                                                                    data.train.y, w).to(F64))


def test_evaluate_argument_errors():
    data = dataset("pooled")
    with pytest.raises(ConfigError, match="max_examples=0"):
        evaluate(LinearLogistic(), data, torch.zeros(6, dtype=F64), max_examples=0)


@pytest.mark.parametrize("layout", ["pooled", "padded"])
@pytest.mark.parametrize("max_examples", [1, 9, 10**6])
def test_personal_evaluation_is_each_client_on_its_own_data(layout, max_examples):
    data = dataset(layout, feature_shape=(1, 2, 3), classes=3)
    problem = TinyImageSoftmax(3, 6)
    g = torch.Generator().manual_seed(0)
    models = torch.randn(data.num_clients, 18, generator=g, dtype=F64)
    got = evaluate_personal(problem, data, models, max_examples=max_examples)
    assert set(got) == {"personal_objective", "personal_accuracy", "personal_test_objective",
                        "personal_test_accuracy"}
    for prefix, split in (("personal_", data.train), ("personal_test_", data.test)):
        losses, correct = 0.0, 0.0
        for i in range(data.num_clients):
            X, y = split.client(i)
            loss, ok = problem.example_metrics(models[i], torch.as_tensor(np.asarray(X)), y)
            losses += float(loss.sum())
            correct += float(ok.sum())
        n = float(split.counts.sum())  # micro-average: every example counts once
        assert got[prefix + "objective"] == pytest.approx(losses / n, rel=1e-12)
        assert got[prefix + "accuracy"] == pytest.approx(correct / n, rel=1e-12)
    # One model shared by every client: the shared model's example average, which is
    # evaluate's objective when p_i = n_i / n (the default weights).
    one = evaluate_personal(problem, data, models[0].expand(data.num_clients, -1),
                            max_examples=max_examples)
    ref = evaluate(problem, data, models[0])
    assert one["personal_objective"] == pytest.approx(ref["objective"], rel=1e-12)
    assert one["personal_test_accuracy"] == pytest.approx(ref["test_accuracy"], rel=1e-12)


def test_personal_evaluation_groups_clients_into_bounded_batches():
    calls = []

    class Recording(TinyImageSoftmax):
        def loss(self, params, X, y, w):
            calls.append(tuple(X.shape[:2]))
            return super().loss(params, X, y, w)

    data = dataset("pooled", feature_shape=(1, 2, 3), classes=3)  # sizes 5, 1, 8, 3, 2, 7
    problem = Recording(3, 6)
    evaluate_personal(problem, data, torch.zeros(6, 18, dtype=F64), max_examples=10)
    train = calls[:4]
    # Consecutive groups of at most 10 padded rows, each as wide as its longest client;
    # the client of 8 examples travels alone.
    assert train == [(2, 5), (1, 8), (2, 3), (1, 7)]
    assert all(s * b <= 10 for s, b in calls)


def test_personal_evaluation_of_regression_and_errors():
    data = dataset("padded")
    models = torch.zeros(data.num_clients, 6, dtype=F64)
    got = evaluate_personal(LinearLeastSquares(), data, models)
    assert got["personal_accuracy"] is None and got["personal_test_accuracy"] is None
    ys = data.train.y[data.train.mask]
    assert got["personal_objective"] == pytest.approx(float(0.5 * (ys * ys).mean()), rel=1e-12)
    with pytest.raises(ConfigError, match=r"models.shape=\(5, 6\)"):
        evaluate_personal(LinearLeastSquares(), data, models[:5])
    no_test = fs.data.from_arrays(*arrays((3, 4), (6,), 0, 2), dtype=F64)
    got = evaluate_personal(LinearLogistic(), no_test, torch.zeros(2, 6, dtype=F64))
    assert got["personal_test_accuracy"] is None and got["personal_accuracy"] is not None


def test_support_and_error_against_the_ground_truth_by_hand():
    # x = (3, 0) against x* = (0, 4): ||x - x*|| / ||x*|| = 5 / 4; no support in common
    data = fs.data.from_arrays([torch.eye(2, dtype=F64)], [torch.zeros(2, dtype=F64)],
                               ground_truth=torch.tensor([0.0, 4.0], dtype=F64), dtype=F64)
    out = evaluate(fs.problems.least_squares(), data, torch.tensor([3.0, 0.0], dtype=F64))
    assert out["rel_error"] == pytest.approx(1.25, rel=1e-15)
    assert (out["support_precision"], out["support_recall"], out["support_f1"]) == (0, 0, 0)
    assert (out["nnz"], out["density"]) == (1, 0.5)
