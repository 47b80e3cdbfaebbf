"""What every round records about the global model (docs/decisions.md, "Conventions").

Two evaluation paths give the same numbers (up to float64 round-off):

* linear problems on padded (or sparse) data evaluate every client at once with
  ``problem.loss_and_accuracy`` on the stacked (N, n_max, d) features;
* pooled data, and problems that declare ``pooled_ok`` (neural networks), walk the real
  examples in chunks of at most ``max_examples`` with ``problem.example_metrics`` and sum
  per-client losses and correct counts, so a CIFAR-sized test set never has all its
  logits (or padded rows) in memory at once.
"""

from __future__ import annotations

import torch

from ._validation import check_int, fail
from .client_store import PersonalModels
from .data.federated import ClientSplit, FederatedDataset
from .problems.base import Problem
from .sparsity import support_scores

#: Examples per chunk of the chunked evaluation (default of ``max_examples``).
DEFAULT_MAX_EXAMPLES = 8192


#: The global model's fields of a round record (:func:`evaluate` adds ``nnz`` and
#: ``density``); None where a field is not defined (no test split, no ground truth, a
#: regression problem's accuracy).
MODEL_FIELDS = ("objective", "accuracy", "test_objective", "test_accuracy", "rel_error",
                "support_precision", "support_recall", "support_f1")


def _split_metrics(problem: Problem, split: ClientSplit, model: torch.Tensor,
                   client_weights: torch.Tensor) -> tuple[float, float | None]:
    """Weighted objective and accuracy of ``model`` on one split (all clients at once)."""
    losses, acc = problem.loss_and_accuracy(model, split.X, split.y, split.mean_weights())
    objective = float(client_weights @ losses.to(torch.float64))
    accuracy = None if acc is None else float(client_weights @ acc.to(torch.float64))
    return objective, accuracy


def client_means(problem: Problem, split: ClientSplit, model: torch.Tensor,
                 max_examples: int = DEFAULT_MAX_EXAMPLES
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Each client's mean loss and accuracy of one shared ``model``, chunked over examples.

    The real examples are read ``max_examples`` at a time (:meth:`ClientSplit.iter_chunks`)
    and ``problem.example_metrics`` gives every example's loss and correctness; the
    per-client sums are accumulated in float64 with one ``index_add_`` per chunk.

    Parameters
    ----------
    problem : provides ``example_metrics(params (P,), X (m, *feature_shape), y (m,))
        -> (loss (m,), correct (m,) bool or None)``.
    split : the clients' data, any layout.
    model : (P,) shared model.
    max_examples : most examples per chunk (bounds memory: activations of one chunk).

    Returns
    -------
    loss : (N,) float64 mean loss of every client.
    accuracy : (N,) float64 fraction of every client's examples classified correctly, or
        None when the problem has no accuracy (regression).
    """
    device = split.counts.device
    N = split.num_clients
    loss_sum = torch.zeros(N, dtype=torch.float64, device=device)
    correct_sum: torch.Tensor | None = torch.zeros(N, dtype=torch.float64, device=device)
    for owner, Xc, yc in split.iter_chunks(max_examples):
        Xc = problem.prepare_features(Xc)  # a linear model reads one vector of d features
        with torch.no_grad():  # metrics only: no graph kept alive across chunks
            loss, correct = problem.example_metrics(model, Xc, yc)
        loss_sum.index_add_(0, owner, loss.to(torch.float64))
        if correct is None:
            correct_sum = None
        elif correct_sum is not None:
            correct_sum.index_add_(0, owner, correct.to(torch.float64))
    n = split.counts.clamp(min=1).to(torch.float64)
    return loss_sum / n, (None if correct_sum is None else correct_sum / n)


def _chunked_split_metrics(problem: Problem, split: ClientSplit, model: torch.Tensor,
                           client_weights: torch.Tensor, max_examples: int
                           ) -> tuple[float, float | None]:
    """:func:`_split_metrics` from per-example metrics, chunked over the examples."""
    loss, acc = client_means(problem, split, model, max_examples)
    client_weights = client_weights.to(device=loss.device, dtype=torch.float64)
    objective = float(client_weights @ loss)
    return objective, (None if acc is None else float(client_weights @ acc))


def evaluate(problem: Problem, data: FederatedDataset, model: torch.Tensor, *,
             max_examples: int = DEFAULT_MAX_EXAMPLES) -> dict:
    """Objective ``f(x) = sum_i p_i f_i(x)`` on the full training data, and where defined:
    accuracy (p-weighted; the example-weighted mean when p_i = n_i / n), test objective and
    accuracy (weighted by test sizes), relative error and support precision/recall/F1
    against the ground truth, and the model's density (fraction of non-zeros).

    Linear problems on padded or sparse data are evaluated on all clients at once.
    Pooled data, and problems with ``pooled_ok`` (neural networks), are evaluated from
    per-example losses (``problem.example_metrics``) over chunks of at most
    ``max_examples`` examples, summed per client: memory is bounded by one chunk.

    Parameters
    ----------
    problem : the loss and accuracy.
    data : the federated data; ``data.weights`` (N,) are the p_i.
    model : (P,) global model.
    max_examples : examples per chunk of the chunked path (ignored by the other).

    Returns
    -------
    dict with ``objective``, ``accuracy``, ``test_objective``, ``test_accuracy``,
    ``rel_error``, ``support_precision``, ``support_recall``, ``support_f1`` (floats, or
    None where not defined), ``nnz`` (int) and ``density`` (float).
    """
    max_examples = check_int("max_examples", max_examples, minimum=1)
    if problem.chunked_evaluation(data):
        def metrics(split, weights):
            return _chunked_split_metrics(problem, split, model, weights, max_examples)
    else:
        def metrics(split, weights):
            return _split_metrics(problem, split, model, weights)
    out: dict = {}
    out["objective"], out["accuracy"] = metrics(data.train, data.weights)
    out["test_objective"] = out["test_accuracy"] = None
    if data.test is not None:
        tw = data.test.counts.to(torch.float64)
        out["test_objective"], out["test_accuracy"] = metrics(data.test, tw / tw.sum())
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


def _client_groups(counts: list[int], max_examples: int) -> list[tuple[int, int]]:
    """Consecutive client ranges [a, b) whose padded chunk (b - a) x max(counts[a:b])
    holds at most ``max_examples`` rows (a single larger client forms its own group)."""
    groups, a, longest = [], 0, 0
    for i, n in enumerate(counts):
        wider = max(longest, n)
        if i > a and (i + 1 - a) * wider > max_examples:
            groups.append((a, i))
            a, wider = i, n
        longest = wider
    groups.append((a, len(counts)))
    return groups


def _personal_split(problem: Problem, split: ClientSplit, models: torch.Tensor,
                    max_examples: int) -> tuple[float, float | None]:
    """Example-weighted mean loss and accuracy of client i's model on client i's data."""
    counts = split.counts
    loss_sum = torch.zeros((), dtype=torch.float64)
    correct_sum: torch.Tensor | None = torch.zeros((), dtype=torch.float64)
    for a, b in _client_groups(counts.tolist(), max_examples):
        # A slice of clients is a view of padded features (no copy of n_max rows), and
        # the group's own longest client sets the batch width, not the data set's n_max.
        part = split.select(slice(a, b))
        width = int(part.counts.max())
        index = torch.arange(width, device=counts.device).expand(b - a, width)
        Xc = problem.prepare_features(part.gather(index), batch_dims=2)
        yc, w = part.y[:, :width], part.mean_weights()[:, :width]
        n = part.counts.to(torch.float64)
        with torch.no_grad():
            loss, acc = problem.loss_and_accuracy(models[a:b], Xc, yc, w)
        loss = loss.to(torch.float64)
        loss_sum = loss_sum + (n.to(loss.device) * loss).sum().cpu()
        if acc is None:
            correct_sum = None
        elif correct_sum is not None:
            acc = acc.to(torch.float64)
            correct_sum = correct_sum + (n.to(acc.device) * acc).sum().cpu()
    total = float(counts.sum())
    return float(loss_sum) / total, (None if correct_sum is None else float(correct_sum) / total)


def evaluate_personal(problem: Problem, data: FederatedDataset, models: torch.Tensor, *,
                      max_examples: int = DEFAULT_MAX_EXAMPLES) -> dict:
    """Accuracy and objective of personalised models: client i's model on client i's data.

    Micro-averaged over all examples (each client weighted by its number of examples),
    the usual report of personalised federated learning (FedMac, Liu et al. 2023).
    Clients are processed in consecutive groups whose padded batch holds at most
    ``max_examples`` rows, with ``problem.loss_and_accuracy``.

    Parameters
    ----------
    problem : the loss and accuracy.
    data : the federated data (any layout).
    models : (N, P) one model per client, in client order: a tensor, or the
        :class:`~fedsparse.client_store.PersonalModels` of a store on disk (read a group
        of clients at a time).
    max_examples : most padded rows per group of clients (a client larger than that is
        evaluated alone).

    Returns
    -------
    dict with ``personal_objective`` (train), ``personal_accuracy`` (train),
    ``personal_test_objective`` and ``personal_test_accuracy`` (None without a test split),
    accuracies None for regression.
    """
    max_examples = check_int("max_examples", max_examples, minimum=1)
    N = data.num_clients
    if not isinstance(models, torch.Tensor | PersonalModels) or models.ndim != 2 \
            or models.shape[0] != N:
        raise fail("models.shape", tuple(getattr(models, "shape", ())),
                   f"must be (N, P) with N = {N} clients, one model per client")
    out = {}
    out["personal_objective"], out["personal_accuracy"] = _personal_split(
        problem, data.train, models, max_examples)
    out["personal_test_objective"] = out["personal_test_accuracy"] = None
    if data.test is not None:
        out["personal_test_objective"], out["personal_test_accuracy"] = _personal_split(
            problem, data.test, models, max_examples)
    return out
