"""Evaluation when the clients are too many to evaluate every round.

:func:`fedsparse.simulate` evaluates the global model on every client each round
(:func:`fedsparse.metrics.evaluate`). At 10^6 clients that reads the whole data set
every round and dominates the run. ``simulate(..., eval_clients=k)`` instead evaluates a
seeded sample of k clients, drawn once without replacement (the same clients every
round, so the curve's round-to-round changes are the model's, not the sample's), and
records *estimates* of the objective and accuracies with their standard errors.

The estimator is the ratio estimator of survey sampling (Cochran 1977, section 6.2):
with client weights ``p_i`` (for the test split, the test sizes) renormalised over the
sample, ``q_i = p_i / sum_{j in S} p_j``, the estimate of ``f = sum_i p_i f_i`` is
``R = sum_{i in S} q_i f_i`` (what :func:`~fedsparse.metrics.evaluate` computes on the
sampled clients) and its standard error is

    ``se(R) = sqrt((1 - k / N) * k / (k - 1) * sum_{i in S} q_i^2 (f_i - R)^2)``

(0 when k = N: the evaluation is then exact). Fields of the record: the usual
``objective``, ``accuracy``, ``test_objective``, ``test_accuracy`` hold the estimates,
``objective_se`` etc. their standard errors, and ``eval_clients`` the sample size.
Personalised models are evaluated on the same sample (estimates, no standard error).

Lazy data sets (:mod:`fedsparse.data.lazy`) evaluated on every client are read a chunk
of clients at a time, and the chunks' sums combined.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from . import rng
from .data.federated import FederatedDataset
from .data.lazy import LazyFederatedDataset, client_subset
from .metrics import client_means, evaluate, evaluate_personal
from .problems.base import Problem

__all__ = ["SE_FIELDS", "eval_sample", "make_evaluator"]

#: Counter of the evaluation sample's draw, apart from the round loop's streams
#: (:mod:`fedsparse.rng` numbers those 1..5).
EVAL_SAMPLE = 101
#: The standard-error fields a sampled evaluation adds to a record.
SE_FIELDS = ("objective_se", "accuracy_se", "test_objective_se", "test_accuracy_se")


def eval_sample(seed: int, num_clients: int, k: int) -> torch.Tensor:
    """(k,) ascending ids of the evaluation sample: uniform without replacement, a
    function of (seed, N, k) only."""
    if k >= num_clients:
        return torch.arange(num_clients)
    keys = rng.uniform(seed, EVAL_SAMPLE, torch.arange(num_clients))
    return torch.sort(torch.topk(keys, k, largest=False).indices).values


def ratio_se(values: torch.Tensor | None, q: torch.Tensor, estimate: float | None,
             population: int) -> float | None:
    """Standard error of the ratio estimate ``estimate = sum q_i values_i`` from a
    sample of k = len(q) of ``population`` clients (None without values; 0 for k = 1
    of 1)."""
    if values is None or estimate is None:
        return None
    k = int(q.shape[0])
    if k >= population:
        return 0.0
    if k < 2:
        return math.nan  # one client says nothing about the spread
    dev = q.to(torch.float64) * (values.to(torch.float64).cpu() - estimate)
    return math.sqrt((1 - k / population) * k / (k - 1) * float((dev * dev).sum()))


def _sampled(problem: Problem, sub: FederatedDataset, model: torch.Tensor, N: int,
             personal: torch.Tensor | None) -> dict:
    chunked = problem.chunked_evaluation(sub)
    # The chunked path of evaluate() is exactly q @ client_means: computed once here for
    # the estimate and its spread. The stacked path (linear problems) is cheap.
    out = evaluate(problem, _model_only(sub) if chunked else sub, model)
    q = sub.weights.to(torch.float64).cpu()
    splits = [("", sub.train, q)]
    out["test_objective_se"] = out["test_accuracy_se"] = None
    if sub.test is not None:
        tq = sub.test.counts.to(torch.float64).cpu()
        splits.append(("test_", sub.test, tq / tq.sum()))
    for prefix, split, weights in splits:
        with torch.no_grad():
            loss, acc = client_means(problem, split, model)
        loss, acc = loss.cpu(), (None if acc is None else acc.cpu())
        if chunked:
            out[f"{prefix}objective"] = float(weights @ loss)
            out[f"{prefix}accuracy"] = None if acc is None else float(weights @ acc)
        for name, values in (("objective", loss), ("accuracy", acc)):
            out[f"{prefix}{name}_se"] = ratio_se(values, weights, out[f"{prefix}{name}"], N)
    out["eval_clients"] = sub.num_clients
    if personal is not None:
        out.update(evaluate_personal(problem, sub, personal))
    return out


def _model_only(sub: FederatedDataset) -> FederatedDataset:
    """One client of ``sub``, no test split: for the fields of :func:`evaluate` that
    depend on the model alone (relative error, support scores, density)."""
    one = torch.zeros(1, dtype=torch.int64, device=sub.train.counts.device)
    return FederatedDataset(train=sub.train.select(one), weights=sub.weights[:1],
                            ground_truth=sub.ground_truth, name=sub.name)


def _combine(parts: list[tuple[dict, float, float]]) -> dict:
    """Chunks' evaluations ``(fields, test share, train share)`` into the whole data
    set's: objective and accuracy are sums over clients of p_i f_i (each chunk evaluated
    with its unnormalised p_i); the other metrics are means over examples, each chunk's
    weighted by its share of the test (or, personalised on train, training) examples."""
    out = dict(parts[0][0])
    sums = ("objective", "accuracy")
    by_test = ("test_objective", "test_accuracy", "personal_test_objective",
               "personal_test_accuracy")
    by_train = ("personal_objective", "personal_accuracy")
    for key in (*sums, *by_test, *by_train):
        if out.get(key) is None:
            continue
        if key in sums:
            out[key] = sum(p[key] for p, _, _ in parts)
        elif key in by_test:
            out[key] = sum(p[key] * test for p, test, _ in parts)
        else:
            out[key] = sum(p[key] * train for p, _, train in parts)
    return out


def _all_chunked(problem: Problem, data: LazyFederatedDataset, model: torch.Tensor,
                 personal: torch.Tensor | None) -> dict:
    chunks = data.chunks()
    tcounts = None if data.test is None else data.test.counts.to(torch.float64)
    ncounts = data.train.counts.to(torch.float64)
    parts = []
    for c in chunks:
        if len(chunks) == 1:  # everything at once: exactly the eager evaluation
            sub = data.subset(c, data.weights)
        else:
            sub = data.subset(c, data.weights[c.to(data.weights.device)])
        out = evaluate(problem, sub, model)
        if personal is not None:
            out.update(evaluate_personal(problem, sub, personal[c.to(personal.device)]))
        if len(chunks) == 1:
            return out
        share = 0.0 if tcounts is None else float(tcounts[c].sum() / tcounts.sum())
        parts.append((out, share, float(ncounts[c].sum() / ncounts.sum())))
    return _combine(parts)


def make_evaluator(problem: Problem, data: FederatedDataset, seed: int,
                   eval_clients: int | None) -> Callable[[torch.Tensor, torch.Tensor | None],
                                                         dict] | None:
    """``measure(model, personal) -> record fields`` for a sampled evaluation
    (``eval_clients``) or a lazy data set; None when the ordinary evaluation applies.

    The sampled clients are drawn once (:func:`eval_sample`) and, for lazy data,
    materialised once and kept.
    """
    if eval_clients is None:
        if not isinstance(data, LazyFederatedDataset):
            return None
        return lambda model, personal: _all_chunked(problem, data, model, personal)
    N = data.num_clients
    clients = eval_sample(seed, N, eval_clients)
    sub = client_subset(data, clients)

    def measure(model, personal):
        rows = None if personal is None else personal[clients.to(personal.device)]
        return _sampled(problem, sub, model, N, rows)

    return measure
