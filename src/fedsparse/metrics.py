"""What every round records about the global model (SPEC.md section 4)."""

from __future__ import annotations

import torch

from .data.federated import ClientSplit, FederatedDataset
from .problems.base import Problem
from .sparsity import support_scores


def _split_metrics(problem: Problem, split: ClientSplit, model: torch.Tensor,
                   client_weights: torch.Tensor) -> tuple[float, float | None]:
    """Weighted objective and accuracy of ``model`` on one split."""
    w = split.mean_weights()
    losses = problem.loss(model, split.X, split.y, w).to(torch.float64)
    objective = float(client_weights @ losses)
    acc = problem.accuracy(model, split.X, split.y, w)
    accuracy = None if acc is None else float(client_weights @ acc.to(torch.float64))
    return objective, accuracy


def evaluate(problem: Problem, data: FederatedDataset, model: torch.Tensor) -> dict:
    """Objective ``f(x) = sum_i p_i f_i(x)`` on the full training data, and where defined:
    accuracy (p-weighted; the example-weighted mean when p_i = n_i / n), test objective and
    accuracy (weighted by test sizes), relative error and support precision/recall/F1
    against the ground truth, and the model's density (fraction of non-zeros).

    Parameters
    ----------
    problem : the loss and accuracy.
    data : the federated data; ``data.weights`` (N,) are the p_i.
    model : (P,) global model.

    Returns
    -------
    dict with ``objective``, ``accuracy``, ``test_objective``, ``test_accuracy``,
    ``rel_error``, ``support_precision``, ``support_recall``, ``support_f1`` (floats, or
    None where not defined), ``nnz`` (int) and ``density`` (float).
    """
    out: dict = {}
    out["objective"], out["accuracy"] = _split_metrics(problem, data.train, model, data.weights)
    out["test_objective"] = out["test_accuracy"] = None
    if data.test is not None:
        tw = data.test.counts.to(torch.float64)
        out["test_objective"], out["test_accuracy"] = _split_metrics(
            problem, data.test, model, tw / tw.sum())
    out["rel_error"] = None
    out.update({"support_precision": None, "support_recall": None, "support_f1": None})
    if data.ground_truth is not None:
        truth = data.ground_truth.to(model.dtype)
        out["rel_error"] = float(torch.linalg.vector_norm(model - truth)
                                 / torch.linalg.vector_norm(truth).clamp(min=1e-300))
        out.update(support_scores(model, truth))
    nnz = int((model != 0).sum())
    out["nnz"] = nnz
    out["density"] = nnz / model.numel()
    return out
