"""The :class:`Problem` protocol (defined in :mod:`.protocol`) and the batched linear algebra
of linear models: scores, transposed products, the fused gradient, power iteration, and
the label checks of the classification problems.

Shapes follow the protocol: ``X`` (S, b, d) dense or :class:`SparseRows`, ``w`` (S, b)
example weights, ``params`` (S, d) one model per client or (d,) shared.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import rng as rng_mod
from .._validation import ConfigError
from ..data.sparse_rows import SparseRows
from .protocol import Problem

__all__ = ["Problem", "check_dense_features", "check_labels", "class_scores",
           "class_weighted_transpose", "gram_lambda_max", "gram_times", "label_splits",
           "linear_gradient", "linear_gradient_rows", "scores", "weighted_transpose"]


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


# Clients per fused block are chosen so that one block's rows can stay in a core's cache
# between the forward and the transposed product (benchmarks/bench_fedht.py): a core's
# L2 where it holds 2 MiB, else the shared L3.
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
    Xn = X.numpy()
    return _blockwise_gradient(params.numpy(), max(1, _FUSED_BLOCK_BYTES // per_client),
                               lambda rows: Xn[rows], link, Xn.dtype)


def _blockwise_gradient(xn: np.ndarray, step: int, block_rows, link,
                        dtype: np.dtype) -> torch.Tensor:
    """The two products of a linear gradient, ``step`` clients at a time, so that each
    block's rows are read from memory once: ``block_rows(rows)`` gives the (s, b, d)
    features of the clients ``rows`` (a slice), ``xn`` is the (S, d) parameters."""
    S = xn.shape[0]
    out = np.empty(xn.shape, dtype=np.result_type(dtype, xn))
    with np.errstate(over="ignore", invalid="ignore"):  # divergence is caught by simulate
        for start in range(0, S, step):
            rows = slice(start, min(start + step, S))
            Xb = block_rows(rows)
            z = torch.from_numpy(np.matmul(Xb, xn[rows, :, None])[..., 0])
            coef = link(z, rows).numpy()
            out[rows] = np.matmul(coef[:, None, :], Xb)[:, 0]
    return torch.from_numpy(out)


def linear_gradient_rows(params: torch.Tensor, X: torch.Tensor, rows: torch.Tensor,
                         link) -> torch.Tensor | None:
    """:func:`linear_gradient` on the examples ``rows`` of each client of ``X``, without
    copying the mini-batch out first; None where that does not apply (then gather the
    rows and call :func:`linear_gradient`).

    A mini-batch drawn from a large local data set is cold in the cache: copying all its
    rows (``S * b * d`` values) and then reading them again costs about as much as the
    gradient. Here each block of clients gathers its rows into one small buffer, which
    the two products then read while it is in the cache. Each client's products are
    the same numpy calls on the same rows as after a full gather, so the result is
    identical.

    Parameters
    ----------
    params : (S, d) parameters.
    X : (S, n_max, d) dense CPU features (all of each client's examples).
    rows : (S, b) int64 positions in ``0 .. n_max - 1`` of each client's mini-batch.
    link : as for :func:`linear_gradient`.
    """
    if not isinstance(X, torch.Tensor) or X.ndim != 3 or params.ndim != 2 \
            or not _use_numpy(params, X, rows):
        return None
    S, n_max, d = X.shape
    b = rows.shape[1]
    flat = X.reshape(S * n_max, d)
    index = torch.arange(S)[:, None] * n_max + rows
    step = max(1, _FUSED_BLOCK_BYTES // max(1, b * d * X.element_size()))
    buffer = torch.empty(min(step, S) * b, d, dtype=X.dtype)

    def gathered(block: slice) -> np.ndarray:  # the block's drawn rows, into the buffer
        count = block.stop - block.start
        return torch.index_select(flat, 0, index[block].reshape(-1),
                                  out=buffer[:count * b]).numpy().reshape(count, b, d)

    return _blockwise_gradient(params.numpy(), step, gathered, link, buffer.numpy().dtype)


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
    :class:`~fedsparse.data.FederatedDataset` (no test entry when it has no test split);
    see :meth:`~fedsparse.data.FederatedDataset.split_labels`."""
    return data.split_labels()


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
