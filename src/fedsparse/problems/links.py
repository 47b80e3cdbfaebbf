"""Per-example losses of a linear predictor: the one place each linear loss is written.

A linear model scores example ``a_j`` by ``z_j = a_j . x`` (one score) or, for C classes,
``z_j = (a_j . x_1, ..., a_j . x_C)``; its loss is ``f_i(x) = sum_j w_j l(z_j, y_j)``
(Tong et al. 2022, appendix A.2). A *link* gives ``l`` and its first and second
derivatives in the score. :class:`~fedsparse.problems.linear.LinearProblem` builds its
loss, gradient (``X^T (w * l'(z))``), accuracy and per-example metrics from it, and the
restricted solves of Jeong et al. 2024 (:mod:`fedsparse.problems.restricted`) their
loss, gradient and Hessian; none of them knows which loss it is computing.

Conventions shared by every link (``w`` optional everywhere: None means weight 1):

* ``z`` is (..., n) scores for a single-score link (``outputs == 1``) and (..., n, C)
  logits for a C-class link; ``y`` (..., n) float labels; ``w`` (..., n) example weights.
* :meth:`Link.value` and :meth:`Link.derivative` return ``w * l`` (..., n) and
  ``w * dl/dz`` (the shape of ``z``); their sums over ``n`` are a client's loss and,
  through the features, its gradient.
* :meth:`Link.curvature` is ``w * d2l/dz2`` (..., n) for a single score; a C-class link
  returns the class probabilities ``p`` (..., n, C), its Hessian in the logits being
  ``diag(p) - p p^T`` (the weights are applied by the caller).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .._validation import ConfigError
from .base import check_labels


class Link:
    """The per-example loss ``l(z, y)`` of a linear score ``z`` and its derivatives.

    Attributes
    ----------
    name : the problem's name in configs and histories (``"least_squares"``, ...).
    task : ``"regression"`` or ``"classification"`` (decides which metrics are recorded).
    outputs : scores per example: 1, or the number of classes C.
    curvature_bound : an upper bound on ``||d2l/dz2||`` over all ``z`` and ``y`` (enters
        the smoothness constant ``L_i = curvature_bound * lambda_max(A_i^T W_i A_i)``).
    quadratic : True if ``l`` is quadratic in ``z`` (its restricted minimiser is a linear
        least-squares solution, found without iterating).
    """

    name = "link"
    task = "regression"
    outputs = 1
    curvature_bound = 1.0
    quadratic = False

    def value(self, z, y, w=None) -> torch.Tensor:  # pragma: no cover - interface
        """``w_j l(z_j, y_j)``: (..., n)."""
        raise NotImplementedError

    def total(self, z, y, w=None) -> torch.Tensor:
        """``sum_j w_j l(z_j, y_j)`` over the examples: (...)."""
        return self.value(z, y, w).sum(-1)

    def derivative(self, z, y, w=None) -> torch.Tensor:  # pragma: no cover - interface
        """``w_j dl/dz (z_j, y_j)``: the shape of ``z``."""
        raise NotImplementedError

    def curvature(self, z, y, w=None) -> torch.Tensor:  # pragma: no cover - interface
        """``w_j d2l/dz2``: (..., n); a C-class link: the probabilities (..., n, C)."""
        raise NotImplementedError

    def correct(self, z, y) -> torch.Tensor | None:
        """(..., n) bool: the prediction of score ``z`` is the label ``y``; None for
        regression."""
        return None

    def check_data(self, data) -> None:
        """Raise a clear :class:`~fedsparse.ConfigError` for labels this loss cannot read."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def check_link_outputs(link: Link, y: torch.Tensor) -> None:
    """Call ``link``'s methods once, on zero scores for the labels ``y`` (1, k), and
    refuse an output of another type, shape or dtype than its convention's, or a
    non-finite one: a custom link's mistake is named here, not as an index error inside
    numpy or a NaN objective that no divergence check sees (the model stays finite).

    The curvature is called only where the link defines it (only FedGradMP's restricted
    solves use it), and ``correct`` only for a classification link.
    """
    from ..contract import returned  # the contract module imports the algorithms

    z = torch.zeros(*y.shape, *((link.outputs,) if link.outputs > 1 else ()),
                    dtype=y.dtype, device=y.device)
    w = torch.ones_like(y)
    expected = {"value": y.shape, "derivative": z.shape}
    if type(link).curvature is not Link.curvature:
        expected["curvature"] = z.shape if link.outputs > 1 else y.shape
    for method, shape in expected.items():
        out = getattr(link, method)(z, y, w)
        what = f"{type(link).__name__}.{method}"
        if not isinstance(out, torch.Tensor) or out.shape != shape or out.dtype != z.dtype:
            raise ConfigError(f"{what} returned {returned(out)} for {tuple(z.shape)} "
                              f"{z.dtype} scores; it must return a {tuple(shape)} {z.dtype} "
                              "tensor (the conventions of fedsparse.problems.links)")
        if not bool(torch.isfinite(out).all()):
            raise ConfigError(f"{what} returned non-finite values (NaN or inf) at zero "
                              "scores; a link's loss and derivatives must be finite there")
    if link.task == "classification":
        out = link.correct(z, y)
        if not isinstance(out, torch.Tensor) or out.shape != y.shape or out.dtype != torch.bool:
            raise ConfigError(f"{type(link).__name__}.correct returned {returned(out)} for "
                              f"{tuple(z.shape)} scores; a classification link must return a "
                              f"{tuple(y.shape)} torch.bool tensor")


class SquaredError(Link):
    """``l(z, y) = (z - y)^2 / 2``: ``l' = z - y``, ``l'' = 1``.

    Tong et al. 2022's appendix A.2 writes ``1/B ||Y - Zx||^2`` (no 1/2); the factor only
    rescales the step size: a step ``gamma`` there is ``2 gamma`` here.
    """

    name = "least_squares"
    quadratic = True

    def value(self, z, y, w=None):
        r = z - y
        return 0.5 * r * r if w is None else 0.5 * (w * r * r)

    def total(self, z, y, w=None):
        r = z - y
        # halved after the sum, as this loss has always been: halving first would keep a
        # float32 sum just under overflow finite, and a diverging run unflagged
        return 0.5 * (r * r if w is None else w * r * r).sum(-1)

    def derivative(self, z, y, w=None):
        return z - y if w is None else w * (z - y)

    def curvature(self, z, y, w=None):
        return torch.ones_like(z) if w is None else w


class BinaryLogistic(Link):
    """``l(z, y) = log(1 + e^z) - [y > 0] z``: ``l' = sigma(z) - [y > 0]``,
    ``l'' = sigma(z)(1 - sigma(z)) <= 1/4``.

    Labels may be {0, 1} or {-1, 1} (``y > 0`` is the positive class). Tong et al. 2022,
    appendix A.2, with the sign of its printed loss corrected.
    """

    name = "logistic"
    task = "classification"
    curvature_bound = 0.25

    def value(self, z, y, w=None):
        v = F.softplus(z) - (y > 0).to(z.dtype) * z
        return v if w is None else w * v

    def derivative(self, z, y, w=None):
        d = torch.sigmoid(z) - (y > 0).to(z.dtype)
        return d if w is None else w * d

    def curvature(self, z, y, w=None):
        p = torch.sigmoid(z)
        return p * (1 - p) if w is None else w * p * (1 - p)

    def correct(self, z, y):
        return (z > 0) == (y > 0)

    def check_data(self, data):
        found = set(torch.unique(data.labels()).tolist())
        allowed = {-1.0, 1.0} if -1.0 in found else {0.0, 1.0}
        check_labels(data, allowed, "logistic", "in {0, 1} or in {-1, 1} (one of the two sets)")


class SoftmaxCrossEntropy(Link):
    """``l(z, y) = -log softmax(z)_y`` for logits ``z`` (C,): ``l' = p - e_y`` and
    ``l'' = diag(p) - p p^T``, ``p = softmax(z)``; ``||l''|| <= 1/2``.

    Multinomial softmax regression (Tong et al. 2022, appendix A.2); labels are the class
    indices 0, ..., C-1 stored as floats.
    """

    name = "softmax"
    task = "classification"
    curvature_bound = 0.5  # ||diag(p) - p p^T|| <= 1/2 for a probability vector p

    def __init__(self, num_classes: int):
        self.outputs = num_classes

    def value(self, z, y, w=None):
        logp = torch.log_softmax(z, -1).gather(-1, y.long().unsqueeze(-1)).squeeze(-1)
        return -logp if w is None else -(w * logp)

    def derivative(self, z, y, w=None):
        d = torch.softmax(z, -1)
        d.scatter_add_(-1, y.long().unsqueeze(-1), -torch.ones_like(y).unsqueeze(-1))
        return d if w is None else d * w.unsqueeze(-1)

    def curvature(self, z, y, w=None):
        return torch.softmax(z, -1)

    def correct(self, z, y):
        return z.argmax(-1) == y.long()

    def check_data(self, data):
        check_labels(data, {float(c) for c in range(self.outputs)},
                     f"softmax with num_classes={self.outputs}")

    def __repr__(self) -> str:
        return f"SoftmaxCrossEntropy(num_classes={self.outputs})"
