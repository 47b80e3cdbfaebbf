"""Linear models: one per-example link drives loss, gradient and metrics (Tong et al. 2022, A.2).

:class:`LinearProblem` scores example ``a_j`` by ``z_j = a_j . x`` (one score) or by
``z_j = (a_j . x_1, ..., a_j . x_C)`` (C class rows one after another in the flat vector,
thresholded row by row: ``blocks = C``) and hands the scores to its
:class:`~fedsparse.problems.links.Link`, which alone knows the loss. Least squares,
logistic and softmax regression are the three links of :mod:`fedsparse.problems.links`;
the classes :class:`LeastSquares`, :class:`Logistic` and :class:`Softmax` only choose one.
"""

from __future__ import annotations

import torch

from .._validation import ConfigError, check_float, check_int
from ..data.sparse_rows import SparseRows
from .base import (
    Problem,
    class_scores,
    class_weighted_transpose,
    gram_lambda_max,
    linear_gradient,
    linear_gradient_rows,
    scores,
)
from .links import BinaryLogistic, Link, SoftmaxCrossEntropy, SquaredError, check_link_outputs


def _per_client(params: torch.Tensor, S: int) -> torch.Tensor:
    return params.expand(S, -1) if params.ndim == 1 else params


class LinearProblem(Problem):
    """``f_i(x) = sum_j w_j l(z_j, y_j) + (l2/2) ||x||^2`` for the scores ``z_j`` of a
    linear model and the per-example loss ``l`` of ``link``.

    Parameters
    ----------
    link : the per-example loss (:class:`~fedsparse.problems.links.Link`); its ``outputs``
        scores per example set the class rows ``blocks`` of the flat (C*d,) model.
    l2 : the ridge coefficient, >= 0.

    Notes
    -----
    Beyond the :class:`~fedsparse.problems.Problem` protocol, a linear problem provides
    what algorithms built on linear models use: :meth:`lipschitz` (``step_size="auto"``),
    :meth:`curvature_scale`, :meth:`l2` and the restricted solve of FedGradMP (Jeong et
    al. 2024): :meth:`restricted_features`, :meth:`restricted_metric`,
    :meth:`restricted_solve`.
    """

    capabilities = frozenset({"grad", "lipschitz", "restricted_solve"})

    def __init__(self, link: Link, l2: float = 0.0):
        if not isinstance(link, Link):
            raise ConfigError(f"link={link!r} is invalid: must be a fedsparse.problems.links.Link "
                              "(SquaredError(), BinaryLogistic(), SoftmaxCrossEntropy(C))")
        self.link = link
        self.name = link.name
        self.task = link.task
        self.blocks = link.outputs
        self._l2 = check_float("l2", l2, nonnegative=True)

    def __repr__(self) -> str:
        l2 = f", l2={self._l2}" if self._l2 else ""
        return f"{type(self).__name__}({self.link!r}{l2})"

    # ------------------------------------------------------------------ the Problem protocol
    def check_data(self, data) -> None:
        self.link.check_data(data)
        check_link_outputs(self.link, data.train.y[:1, :4])

    def _scores(self, params, X):
        """(S, b) scores, or (S, b, C) logits of C class rows."""
        if self.blocks == 1:
            return scores(params, X)
        W = _per_client(params, X.shape[0]).reshape(X.shape[0], self.blocks, -1)
        return class_scores(W, X)

    def _penalty(self, params):
        return 0.5 * self._l2 * (params * params).sum(-1)

    def loss(self, params, X, y, w):
        """(S,) ``sum_j w_j l(z_j, y_j)`` (+ the ridge term) per client."""
        loss = self.link.total(self._scores(params, X), y, w)
        if self._l2:
            loss = loss + self._penalty(params)
        return loss

    def grad(self, params, X, y, w):
        """(S, P) ``A_i^T (w * l'(z))`` (+ ``l2 x``) per client."""
        link = self.link
        if self.blocks == 1:
            g = linear_gradient(params, X, lambda z, rows: link.derivative(z, y[rows], w[rows]))
        else:
            coef = link.derivative(self._scores(params, X), y, w)
            g = class_weighted_transpose(X, coef).reshape(X.shape[0], -1)
        if self._l2:
            g = g + self._l2 * params
        return g

    def grad_rows(self, params, X, rows, y, w):
        """:meth:`grad` on the mini-batch ``rows`` (S, b) of the dense (S, n_max, d)
        features ``X`` (``y``, ``w`` the batch's), without copying the rows out first
        (:func:`~fedsparse.problems.base.linear_gradient_rows`); the same numbers as
        :meth:`grad` on the gathered rows. None where that path does not apply (class
        rows, autograd, other devices): then call :meth:`grad` on the gathered batch."""
        if self.blocks != 1:
            return None
        link = self.link
        g = linear_gradient_rows(params, X, rows,
                                 lambda z, r: link.derivative(z, y[r], w[r]))
        if g is not None and self._l2:
            g = g + self._l2 * params
        return g

    def accuracy(self, params, X, y, w):
        """(S,) ``sum_j w_j [prediction_j == y_j]`` per client; None for regression."""
        if self.task != "classification":
            return None
        return (w * self.link.correct(self._scores(params, X), y).to(X.dtype)).sum(-1)

    def example_metrics(self, params, X, y):
        """Per-example loss (n,) and correctness (n,) bool (None for regression) of one
        shared (P,) model on examples X (n, d).

        The ridge term is added to every example, so ``sum_j w_j loss_j`` equals
        :meth:`loss` for weights summing to 1.
        """
        z = X @ params if self.blocks == 1 else X @ params.reshape(self.blocks, -1).T
        loss = self.link.value(z, y)
        if self._l2:
            loss = loss + 0.5 * self._l2 * (params * params).sum()
        return loss, self.link.correct(z, y)

    # ------------------------------------------------------------------ linear models only
    def l2(self) -> float:
        """The ridge coefficient."""
        return self._l2

    def curvature_scale(self) -> float:
        """Bound on the second derivative of the per-example loss in the linear score."""
        return self.link.curvature_bound

    def lipschitz(self, X, w, iterations: int = 50) -> torch.Tensor:
        """(S,) smoothness constants L_i of each client's loss, by power iteration.

        ``L_i = curvature_scale * lambda_max(sum_j w_j z_j z_j^T) + l2``.
        """
        return self.curvature_scale() * gram_lambda_max(X, w, iterations) + self.l2()

    def restricted_features(self, index: torch.Tensor, X: torch.Tensor
                            ) -> tuple[torch.Tensor, torch.Tensor]:
        """Features of the parameters ``index`` (S, k): ``Z`` (S, n, k) and class rows (S, k).

        The flat parameter ``q`` multiplies feature ``q % d`` in the score of class row
        ``q // d`` (one row unless ``blocks > 1``).
        """
        d = X.shape[-1]
        if isinstance(X, SparseRows):
            Z = X.columns(index % d).to(index.device)
        else:
            Z = torch.gather(X, 2, (index % d).unsqueeze(1).expand(-1, X.shape[1], -1))
        return Z, torch.div(index, d, rounding_mode="floor")

    def restricted_metric(self, index: torch.Tensor, valid: torch.Tensor):
        """Gram matrix (S, k, k) of the restricted directions for the l2 term; None = identity."""
        return None

    def restricted_solve(self, index: torch.Tensor, valid: torch.Tensor, X: torch.Tensor,
                         y: torch.Tensor, w: torch.Tensor, init: torch.Tensor | None = None, *,
                         method: str = "exact", tol: float = 1e-10, max_iter: int = 100
                         ) -> tuple[torch.Tensor, dict]:
        """Minimise each client's loss over the parameters ``index`` (the others held at 0).

        Jeong et al. 2024 (FedGradMP), Alg. 1: ``b = argmin f_i(x), x in R(A_Gamma_hat)``; Alg. 2
        solves it to accuracy delta (``tol``).

        Parameters
        ----------
        index : (S, k) int64 flat parameter positions per client (padded).
        valid : (S, k) bool, False on padding.
        X, y, w : (S, n, d), (S, n), (S, n) the client data and example weights.
        init : (S, k) starting coefficients (warm start for iterative methods) or None.
        method : "exact" (a quadratic loss: Cholesky with one refinement step, SVD-based
            lstsq where that is ill-conditioned; otherwise Newton to 1e-10),
            "newton" (damped Newton to ``tol``) or "gd" (gradient descent with step
            1/L_restricted until the step is at most ``tol``).
        tol, max_iter : stopping rule of the iterative methods.

        Returns
        -------
        coef : (S, k) minimiser's values at ``index`` (0 on padding).
        info : {"inner_iterations": mean iterations used over the clients}.
        """
        from .restricted import solve_restricted

        return solve_restricted(self, index, valid, X, y, w, init, method=method, tol=tol,
                                max_iter=max_iter)


class LeastSquares(LinearProblem):
    """``f_i(x) = 1/(2 n_i) ||A_i x - y_i||^2`` (the link :class:`~.links.SquaredError`)."""

    def __init__(self):
        super().__init__(SquaredError())


class Logistic(LinearProblem):
    """``f_i(x) = 1/n_i sum_j [log(1 + exp(z_j.x)) - y01_j z_j.x] + (l2/2)||x||^2`` (the
    link :class:`~.links.BinaryLogistic`; labels in {0, 1} or {-1, 1})."""

    def __init__(self, l2: float = 0.0):
        super().__init__(BinaryLogistic(), l2)


class Softmax(LinearProblem):
    """Multinomial softmax regression with per-class sparsity (Tong et al. 2022, A.2).

    ``f_i(x) = 1/n_i sum_j -log softmax(z_j^T x_r)_{y_j} + (l2/2) sum_r ||x_r||^2`` (the
    link :class:`~.links.SoftmaxCrossEntropy`). The flat parameter vector holds the C class
    rows ``x_r`` (each of length d) one after another, and hard thresholding acts on each
    row (``blocks = C``).
    """

    def __init__(self, num_classes: int = 10, l2: float = 0.0):
        super().__init__(SoftmaxCrossEntropy(check_int("num_classes", num_classes, minimum=2)),
                         l2)


def least_squares() -> LeastSquares:
    """Sparse linear regression, ``f_i(x) = 1/(2 n_i)||A_i x - y_i||^2``."""
    return LeastSquares()


def logistic(l2: float = 0.0) -> Logistic:
    """Sparse binary logistic regression with optional ``(l2/2)||x||^2``."""
    return Logistic(l2=l2)


def softmax(num_classes: int = 10, l2: float = 0.0) -> Softmax:
    """Sparse multinomial softmax regression, per-class sparsity."""
    return Softmax(num_classes=num_classes, l2=l2)
