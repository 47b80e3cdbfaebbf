"""Least squares, binary logistic and multinomial softmax regression (Tong et al. 2022, A.2)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .._validation import check_float, check_int
from .base import (
    Problem,
    check_labels,
    class_scores,
    class_weighted_transpose,
    linear_gradient,
    scores,
)


def _per_client(params: torch.Tensor, S: int) -> torch.Tensor:
    return params.expand(S, -1) if params.ndim == 1 else params


class LeastSquares(Problem):
    """``f_i(x) = 1/(2 n_i) ||A_i x - y_i||^2``.

    Tong et al. 2022's appendix A.2 writes ``1/B ||Y - Zx||^2`` (no 1/2); the factor only
    rescales the step size: a step ``gamma`` there is ``2 gamma`` here.
    """

    name = "least_squares"
    capabilities = frozenset({"grad", "lipschitz", "restricted_solve"})

    def loss(self, params, X, y, w):
        r = scores(params, X) - y
        return 0.5 * (w * r * r).sum(-1)

    def grad(self, params, X, y, w):
        return linear_gradient(params, X, lambda z, rows: w[rows] * (z - y[rows]))

    def example_metrics(self, params, X, y):
        """``0.5 (z_j.x - y_j)^2`` per example (n,) of one shared model; no correctness."""
        r = X @ params - y
        return 0.5 * r * r, None


class Logistic(Problem):
    """``f_i(x) = 1/n_i sum_j [log(1 + exp(z_j.x)) - y01_j z_j.x] + (l2/2)||x||^2``.

    Labels may be {0, 1} or {-1, 1} (``y > 0`` is the positive class).
    Tong et al. 2022, appendix A.2, with the sign of its printed loss corrected.
    """

    name = "logistic"
    task = "classification"
    capabilities = frozenset({"grad", "lipschitz", "restricted_solve"})

    def __init__(self, l2: float = 0.0):
        self._l2 = check_float("l2", l2, nonnegative=True)

    def l2(self):
        return self._l2

    def curvature_scale(self):
        return 0.25

    def check_data(self, data):
        found = set(torch.unique(data.labels()).tolist())
        allowed = {-1.0, 1.0} if -1.0 in found else {0.0, 1.0}
        check_labels(data, allowed, "logistic (labels in {0, 1} or {-1, 1})")

    def loss(self, params, X, y, w):
        z = scores(params, X)
        loss = (w * (F.softplus(z) - (y > 0).to(z.dtype) * z)).sum(-1)
        if self._l2:
            loss = loss + 0.5 * self._l2 * (params * params).sum(-1)
        return loss

    def grad(self, params, X, y, w):
        y01 = (y > 0).to(params.dtype)
        g = linear_gradient(params, X, lambda z, rows: w[rows] * (torch.sigmoid(z) - y01[rows]))
        if self._l2:
            g = g + self._l2 * params
        return g

    def accuracy(self, params, X, y, w):
        return (w * ((scores(params, X) > 0) == (y > 0)).to(X.dtype)).sum(-1)

    def example_metrics(self, params, X, y):
        """Per-example loss (n,) consistent with :meth:`loss` and correctness (n,) bool.

        The l2 term is added to every example, so ``sum_j w_j loss_j`` equals :meth:`loss`
        for weights summing to 1.
        """
        z = X @ params
        loss = F.softplus(z) - (y > 0).to(z.dtype) * z
        if self._l2:
            loss = loss + 0.5 * self._l2 * (params * params).sum()
        return loss, (z > 0) == (y > 0)


class Softmax(Problem):
    """Multinomial softmax regression with per-class sparsity (Tong et al. 2022, A.2).

    ``f_i(x) = 1/n_i sum_j -log softmax(z_j^T x_r)_{y_j} + (l2/2) sum_r ||x_r||^2``.
    The flat parameter vector holds the C class rows ``x_r`` (each of length d) one
    after another, and hard thresholding acts on each row (``blocks = C``).
    """

    name = "softmax"
    task = "classification"
    capabilities = frozenset({"grad", "lipschitz", "restricted_solve"})

    def __init__(self, num_classes: int = 10, l2: float = 0.0):
        self.blocks = check_int("num_classes", num_classes, minimum=2)
        self._l2 = check_float("l2", l2, nonnegative=True)

    def l2(self):
        return self._l2

    def curvature_scale(self):
        # ||diag(p) - p p^T|| <= 1/2 for a probability vector p.
        return 0.5

    def check_data(self, data):
        check_labels(data, {float(c) for c in range(self.blocks)},
                     f"softmax with num_classes={self.blocks}")

    def _logits(self, params, X):
        W = _per_client(params, X.shape[0]).reshape(X.shape[0], self.blocks, -1)
        return class_scores(W, X)

    def loss(self, params, X, y, w):
        logits = self._logits(params, X)
        nll = torch.logsumexp(logits, -1) - logits.gather(-1, y.long().unsqueeze(-1)).squeeze(-1)
        loss = (w * nll).sum(-1)
        if self._l2:
            loss = loss + 0.5 * self._l2 * (params * params).sum(-1)
        return loss

    def grad(self, params, X, y, w):
        logits = self._logits(params, X)
        coef = torch.softmax(logits, -1)
        coef.scatter_add_(-1, y.long().unsqueeze(-1), -torch.ones_like(y).unsqueeze(-1))
        g = class_weighted_transpose(X, coef * w.unsqueeze(-1)).reshape(X.shape[0], -1)
        if self._l2:
            g = g + self._l2 * params
        return g

    def accuracy(self, params, X, y, w):
        pred = self._logits(params, X).argmax(-1)
        return (w * (pred == y.long()).to(X.dtype)).sum(-1)

    def example_metrics(self, params, X, y):
        """Per-example loss (n,) consistent with :meth:`loss` and correctness (n,) bool.

        The l2 term is added to every example, so ``sum_j w_j loss_j`` equals :meth:`loss`
        for weights summing to 1.
        """
        logits = X @ params.reshape(self.blocks, -1).T
        labels = y.long()
        loss = torch.logsumexp(logits, -1) - logits.gather(-1, labels[:, None])[:, 0]
        if self._l2:
            loss = loss + 0.5 * self._l2 * (params * params).sum()
        return loss, logits.argmax(-1) == labels


def least_squares() -> LeastSquares:
    """Sparse linear regression, ``f_i(x) = 1/(2 n_i)||A_i x - y_i||^2``."""
    return LeastSquares()


def logistic(l2: float = 0.0) -> Logistic:
    """Sparse binary logistic regression with optional ``(l2/2)||x||^2``."""
    return Logistic(l2=l2)


def softmax(num_classes: int = 10, l2: float = 0.0) -> Softmax:
    """Sparse multinomial softmax regression, per-class sparsity."""
    return Softmax(num_classes=num_classes, l2=l2)
