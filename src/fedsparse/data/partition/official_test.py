"""A data set's official test split dealt to the clients by label.

Mao et al. 2022 (SAFARI) evaluate the global model on "a small subset of each client's
data"; fedsparse reads that as: each client gets the test examples of its labels, split
evenly among the clients that hold each label, so that the union of the clients' test
splits is the whole official test split and training keeps every training image
(docs/decisions.md, SAFARI). :func:`deal_test_split` makes that assignment from the
clients' training labels.
"""

from __future__ import annotations

import numpy as np

from ..._validation import ConfigError

__all__ = ["deal_test_split"]


def deal_test_split(train_labels: list[np.ndarray], test_labels: np.ndarray, *, seed: int,
                    fraction: float = 1.0) -> list[np.ndarray]:
    """Each client's indices into the test split: for every label, its test examples
    (seeded shuffle) cut into as many near-equal parts as clients hold that label in
    training, in client order.

    Parameters
    ----------
    train_labels : per client, the labels of its training examples, (n_i,) each.
    test_labels : (m,) the labels of the test split.
    seed : draws the shuffle (a stream of its own, apart from the partition's).
    fraction : keep this share of each label's test examples (a subsampled run: the
        share of the training images it keeps), and never fewer than one per client
        holding the label.

    Returns
    -------
    list of (t_i,) int64 arrays, disjoint; a label no client holds gives none of its
    examples to anyone.

    Raises
    ------
    ConfigError
        naming a client whose labels have no test example left for it.
    """
    rng = np.random.default_rng([seed, 0x7E57])
    holders: dict = {}
    for i, labels in enumerate(train_labels):
        for label in np.unique(labels).tolist():
            holders.setdefault(label, []).append(i)
    dealt: list[list[np.ndarray]] = [[] for _ in train_labels]
    for label in sorted(holders):
        clients = holders[label]
        examples = rng.permutation(np.flatnonzero(test_labels == label))
        if fraction < 1.0:
            examples = examples[:min(examples.size,
                                     max(len(clients), round(examples.size * fraction)))]
        for client, share in zip(clients, np.array_split(examples, len(clients)),
                                 strict=True):
            dealt[client].append(share)
    out = [np.concatenate(d).astype(np.int64) if d else np.empty(0, np.int64) for d in dealt]
    empty = next((i for i, d in enumerate(out) if d.size == 0), None)
    if empty is not None:
        raise ConfigError(f"client {empty} holds labels "
                          f"{sorted(np.unique(train_labels[empty]).tolist())}, of which the "
                          "official test split has no example left for it (more clients "
                          "hold them than it has examples): use fewer clients, or "
                          'test_split="held_out"')
    return out
