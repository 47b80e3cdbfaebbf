"""Checks and allocation rules the partitioners and the description share."""

from __future__ import annotations

from numbers import Real

import numpy as np

from ..._validation import ConfigError


def _positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not np.isfinite(value) \
            or value <= 0:
        raise ConfigError(f"{name}={value!r} is invalid: must be a positive finite number")
    return float(value)


def _labels(y) -> tuple[np.ndarray, np.ndarray]:
    """(classes, codes): the sorted distinct labels and each example's class index."""
    if hasattr(y, "detach"):  # torch tensor
        y = y.detach().cpu().numpy()
    y = np.asarray(y)
    if y.ndim != 1:
        raise ConfigError(f"y has shape {y.shape}; expected a 1-D array of labels")
    if y.shape[0] == 0:
        raise ConfigError("y is empty; expected at least one label")
    classes, codes = np.unique(y, return_inverse=True)
    return classes, codes.reshape(-1).astype(np.int64)


def _finish(parts: list[np.ndarray]) -> list[np.ndarray]:
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def _largest_remainder(total: int, weights: np.ndarray, minimum: int = 0) -> np.ndarray:
    """Integer counts summing to ``total``, each >= ``minimum``, proportional to weights."""
    k = weights.shape[0]
    free = total - minimum * k
    share = weights / weights.sum() * free
    counts = np.floor(share).astype(np.int64)
    rest = free - int(counts.sum())
    if rest > 0:
        counts[np.argsort(-(share - counts), kind="stable")[:rest]] += 1
    return counts + minimum


def _allocate(codes: np.ndarray, holders: list[np.ndarray], client_weight: np.ndarray,
              num_clients: int, rng: np.random.Generator, what: str) -> list[np.ndarray]:
    """Give each class's examples to its holders, in shares proportional to their
    weights, at least one example each."""
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, who in enumerate(holders):
        idx = np.flatnonzero(codes == c)
        if who.size == 0:
            continue
        if idx.size < who.size:
            raise ConfigError(f"{what}: label index {c} has {idx.size} examples but "
                             f"{who.size} clients hold it; every holder needs at least one "
                             "example (use fewer clients or fewer labels per client)")
        idx = rng.permutation(idx)
        counts = _largest_remainder(idx.size, client_weight[who], minimum=1)
        for client, chunk in zip(who, np.split(idx, np.cumsum(counts)[:-1]), strict=True):
            parts[client].append(chunk)
    return [np.concatenate(p) if p else np.zeros(0, dtype=np.int64) for p in parts]
