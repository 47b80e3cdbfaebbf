"""The Problem interface: a loss, its gradient and optional capabilities.

Every method is batched over a leading client axis S and over (padded) examples:
``X`` is (S, b, d), ``y`` is (S, b) and ``w`` is (S, b) example weights (1/n_i on a
client's real or sampled examples, 0 on padding), so ``loss`` is each client's
weighted mean loss. ``params`` is (S, P), one model per client, or (P,), one model
shared by all.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import rng as rng_mod
from .._validation import ConfigError
from ..data.sparse_rows import SparseRows


class Problem:
    """Base class of the learning problems (least squares, logistic, softmax)."""

    name = "problem"
    #: Rows the flat parameter vector is cut into for per-block sparsity (softmax: classes).
    blocks = 1
    #: What an algorithm may ask of this problem (checked by the builders).
    capabilities: frozenset[str] = frozenset({"grad", "lipschitz"})
    #: "regression" or "classification": decides which metrics are recorded.
    task = "regression"

    def param_dim(self, feature_dim: int) -> int:
        """Length P of the flat parameter vector for ``feature_dim`` features."""
        return feature_dim * self.blocks

    def check_data(self, data) -> None:
        """Raise a clear error if the data set does not fit this problem (e.g. label set)."""

    def init_params(self, feature_dim: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
        """(P,) initial model of every algorithm: 0 for linear models (seed unused)."""
        return torch.zeros(self.param_dim(feature_dim), dtype=dtype)

    def loss(self, params, X, y, w) -> torch.Tensor:  # pragma: no cover - interface
        """(S,) weighted mean loss per client."""
        raise NotImplementedError

    def grad(self, params, X, y, w) -> torch.Tensor:  # pragma: no cover - interface
        """(S, P) gradient of each client's loss."""
        raise NotImplementedError

    def accuracy(self, params, X, y, w) -> torch.Tensor | None:
        """(S,) weighted accuracy per client, or None for regression."""
        return None

    def curvature_scale(self) -> float:
        """Bound on the second derivative of the per-example loss in the linear score."""
        return 1.0

    def l2(self) -> float:
        return 0.0

    def restricted_features(self, index: torch.Tensor, X: torch.Tensor
                            ) -> tuple[torch.Tensor, torch.Tensor]:
        """Features of the parameters ``index`` (S, k): ``Z`` (S, n, k) and class rows (S, k).

        The flat parameter ``q`` multiplies feature ``q % d`` in the score of class row
        ``q // d`` (one row unless ``blocks > 1``).
        """
        d = X.shape[-1]
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
        solves it to accuracy delta (``tol``). Requires the ``restricted_solve`` capability.

        Parameters
        ----------
        index : (S, k) int64 flat parameter positions per client (padded).
        valid : (S, k) bool, False on padding.
        X, y, w : (S, n, d), (S, n), (S, n) the client data and example weights.
        init : (S, k) starting coefficients (warm start for iterative methods) or None.
        method : "exact" (least squares: Cholesky with one refinement step, SVD-based
            lstsq where that is ill-conditioned; logistic/softmax: Newton to 1e-10),
            "newton" (damped Newton to ``tol``) or "gd" (gradient descent with step
            1/L_restricted until the step is at most ``tol``).
        tol, max_iter : stopping rule of the iterative methods.

        Returns
        -------
        coef : (S, k) minimiser's values at ``index`` (0 on padding).
        info : {"inner_iterations": mean iterations used over the clients}.
        """
        if "restricted_solve" not in self.capabilities:
            raise ConfigError(f"problem {self.name!r} has no restricted_solve capability")
        from .restricted import solve_restricted

        return solve_restricted(self, index, valid, X, y, w, init, method=method, tol=tol,
                                max_iter=max_iter)

    def lipschitz(self, X, w, iterations: int = 50) -> torch.Tensor:
        """(S,) smoothness constants L_i of each client's loss, by power iteration.

        ``L_i = curvature_scale * lambda_max(sum_j w_j z_j z_j^T) + l2``.
        """
        return self.curvature_scale() * gram_lambda_max(X, w, iterations) + self.l2()

    # Model-track additions: every problem, linear or neural, exposes its flat layout and
    # per-example metrics for chunked evaluation.

    #: True if loss/grad/accuracy are only called on small dense chunks gathered from a pooled
    #: data layout (neural problems); linear problems keep the padded (N, n_max, d) layout.
    pooled_ok = False

    def layout(self, feature_dim: int):
        """The :class:`~fedsparse.models.ParamLayout` of the flat vector: one dense tensor."""
        from ..models.layout import ParamLayout

        return ParamLayout.dense(self.param_dim(feature_dim))

    def example_metrics(self, params, X, y) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-example loss and correctness of one shared model on a chunk of examples.

        Each example is evaluated as a one-example client of weight 1, so that
        ``sum_j w_j loss_j`` equals :meth:`loss` whenever the weights sum to 1.

        Parameters
        ----------
        params : (P,) shared model; X : (n, *feature_shape); y : (n,) targets.

        Returns
        -------
        loss : (n,) per-example loss; correct : (n,) bool, or None for regression.
        """
        ones = torch.ones(X.shape[0], 1, dtype=params.dtype, device=params.device)
        loss = self.loss(params, X.unsqueeze(1), y.unsqueeze(1), ones)
        acc = self.accuracy(params, X.unsqueeze(1), y.unsqueeze(1), ones)
        return loss, None if acc is None else acc > 0.5


def gram_lambda_max(X, w, iterations: int = 50) -> torch.Tensor:
    """(S,) ``lambda_max(X_i^T diag(w_i) X_i)`` per client, by power iteration.

    Parameters
    ----------
    X : (S, n, d) features or :class:`SparseRows`; w : (S, n) example weights.
    """
    d = X.shape[-1]
    # the start is drawn on the CPU, as on every device, then placed with the data
    start = rng_mod.uniform(rng_mod.INIT, torch.arange(d)).to(X.dtype) + 0.5
    v = start.to(w.device).expand(X.shape[0], d).clone()
    lam = torch.zeros(X.shape[0], dtype=X.dtype, device=w.device)
    for _ in range(iterations):
        mv = gram_times(X, w, v)
        lam = torch.linalg.vector_norm(mv, dim=-1)
        v = mv / lam.clamp(min=torch.finfo(X.dtype).tiny)[:, None]
    return lam


def _use_numpy(*tensors: torch.Tensor) -> bool:
    # torch's CPU bmm is 5-10x slower than numpy's matmul (OpenBLAS gemv per client) for
    # these batched matrix-vector products (benchmarks/bench_fedht.py); the numpy path
    # shares memory with the tensors and is taken only where autograd is not needed.
    return all(t.device.type == "cpu" and not t.requires_grad for t in tensors)


def scores(params: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """Linear scores ``X x``: (S, b) for params (S, d) or (d,)."""
    if isinstance(X, SparseRows):  # CSR client data: a segment sum over the non-zeros
        return X.scores(params)
    if params.ndim == 1:
        return X @ params
    if _use_numpy(params, X):
        with np.errstate(over="ignore", invalid="ignore"):  # divergence is caught by simulate
            return torch.from_numpy(np.matmul(X.numpy(), params.numpy()[..., None])[..., 0])
    return torch.bmm(X, params.unsqueeze(-1)).squeeze(-1)


def weighted_transpose(X: torch.Tensor, coef: torch.Tensor) -> torch.Tensor:
    """``X^T coef`` per client: (S, d) from X (S, b, d) and coef (S, b)."""
    if isinstance(X, SparseRows):
        return X.weighted_transpose(coef)
    if _use_numpy(X, coef):
        with np.errstate(over="ignore", invalid="ignore"):
            return torch.from_numpy(np.matmul(coef.numpy()[:, None, :], X.numpy())[:, 0])
    return torch.bmm(coef.unsqueeze(1), X).squeeze(1)


# Clients per fused block are chosen so that one block's rows stay in a core's cache
# between the forward and the transposed product (benchmarks/bench_fedht.py).
_FUSED_BLOCK_BYTES = 2 << 20


def linear_gradient(params: torch.Tensor, X: torch.Tensor, link) -> torch.Tensor:
    """``X_i^T link(X_i x_i, i)`` per client: the gradient shape of every linear model.

    ``link(z, rows)`` maps the scores ``z`` (s, b) of the clients ``rows`` (a slice of
    the client axis) to the per-example coefficients (s, b). On dense CPU data the two
    products run block by block over clients, so each block of ``X`` is read from
    memory once rather than twice; the result is the same as the unblocked products
    (each client's products are independent).

    Parameters
    ----------
    params : (S, d) or (d,) parameters.
    X : (S, b, d) client rows, or :class:`SparseRows`.
    """
    S = X.shape[0]
    if isinstance(X, SparseRows) or params.ndim == 1 or not _use_numpy(params, X):
        everyone = slice(0, S)
        return weighted_transpose(X, link(scores(params, X), everyone))
    per_client = max(1, X[0].numel() * X.element_size())
    step = max(1, _FUSED_BLOCK_BYTES // per_client)
    Xn, xn = X.numpy(), params.numpy()
    out = np.empty(xn.shape, dtype=np.result_type(Xn, xn))
    with np.errstate(over="ignore", invalid="ignore"):  # divergence is caught by simulate
        for start in range(0, S, step):
            rows = slice(start, min(start + step, S))
            z = torch.from_numpy(np.matmul(Xn[rows], xn[rows, :, None])[..., 0])
            coef = link(z, rows).numpy()
            out[rows] = np.matmul(coef[:, None, :], Xn[rows])[:, 0]
    return torch.from_numpy(out)


def gram_times(X: torch.Tensor, w: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``X^T diag(w) X v`` per client, for v (S, d)."""
    return weighted_transpose(X, w * scores(v, X))


def class_scores(W: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """Scores of C classes per example: (S, b, C) from class rows W (S, C, d)."""
    if isinstance(X, SparseRows):
        return X.class_scores(W)
    return torch.bmm(X, W.transpose(1, 2))


def class_weighted_transpose(X: torch.Tensor, coef: torch.Tensor) -> torch.Tensor:
    """``coef^T X`` per client: (S, C, d) from X (S, b, d) and coef (S, b, C)."""
    if isinstance(X, SparseRows):
        return X.class_weighted_transpose(coef)
    return torch.bmm(coef.transpose(1, 2), X)


def label_splits(data) -> list[tuple[str, torch.Tensor]]:
    """``[("train", labels), ("test", labels)]``: the real labels of each split of a
    :class:`~fedsparse.data.FederatedDataset` (no test entry when it has no test split)."""
    out = [("train", data.train.y[data.train.mask])]
    if getattr(data, "test", None) is not None:
        out.append(("test", data.test.y[data.test.mask]))
    return out


def check_labels(data, allowed: set, problem: str, allowed_text: str | None = None) -> None:
    """Refuse a label outside ``allowed``, naming the split it is in (train or test).

    Parameters
    ----------
    data : the federated data set; allowed : the allowed label values (floats).
    problem : the problem, as the message names it.
    allowed_text : how the message states the allowed labels (default: the sorted set).
    """
    for split, labels in label_splits(data):
        found = set(torch.unique(labels).tolist())
        if not found <= allowed:
            bad = sorted(found - allowed, key=lambda v: (v != v, v))[:5]  # NaN last
            raise ConfigError(f"{split} labels {bad} are invalid for {problem}: labels must be "
                              f"{allowed_text or f'in {sorted(allowed)}'}")


def check_dense_features(data, problem: str) -> None:
    """Refuse sparse (CSR) client features for a problem that computes on dense tensors."""
    for split, part in (("train", data.train), ("test", getattr(data, "test", None))):
        if part is not None and isinstance(part.X, SparseRows):
            raise ConfigError(
                f"{problem} computes on dense feature tensors, and the {split} split holds "
                f"sparse (CSR) client features {part.X!r}: give dense arrays to from_arrays, "
                "or use a linear problem (least_squares, logistic, softmax), which keeps "
                "CSR features sparse")
