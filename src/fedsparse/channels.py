"""Channels decide which uploads reach the server.

A channel is any object with ``delivered(seed, round, clients) -> (S,) bool``.
Draws use the counter-based generator, so a client's fate in a round does not depend
on which other clients were sampled.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import rng
from ._validation import fail


class PerfectChannel:
    """Every upload arrives."""

    def delivered(self, seed: int, round: int, clients: torch.Tensor) -> torch.Tensor:
        """(S,) bool, all True, for the (S,) sampled client ids ``clients``."""
        return torch.ones(clients.shape[0], dtype=torch.bool)

    def __repr__(self):
        return "PerfectChannel()"


class BernoulliChannel:
    """Upload of client i in round t arrives with probability ``p_i^t``.

    Parameters
    ----------
    probability : a number in [0, 1] for every client and round; a sequence/tensor of
        N per-client probabilities; or a callable ``(round, clients) -> (S,)`` tensor
        for probabilities that vary per client and per round. Unknown to the server.
    """

    def __init__(self, probability: float | torch.Tensor | Callable):
        if not callable(probability):
            p = torch.as_tensor(probability, dtype=torch.float64)
            if not torch.isfinite(p).all() or (p < 0).any() or (p > 1).any():
                raise fail("probability", probability, "must lie in [0, 1]")
            if p.ndim > 1:
                raise fail("probability", probability,
                           "must be one number or a 1-D sequence of per-client probabilities")
            probability = p
        self.probability = probability

    def _p(self, round: int, clients: torch.Tensor) -> torch.Tensor:
        if callable(self.probability):
            return torch.as_tensor(self.probability(round, clients), dtype=torch.float64)
        p = self.probability
        if p.ndim == 0:
            return p.expand(clients.shape[0])
        if clients.numel() and int(clients.max()) >= p.shape[0]:
            raise fail("probability", f"{p.shape[0]} per-client values", f"needs one value for "
                       f"each of the data set's clients (client {int(clients.max())} has none)")
        return p[clients]

    def delivered(self, seed: int, round: int, clients: torch.Tensor) -> torch.Tensor:
        """(S,) bool, True where the upload of ``clients[s]`` (S,) arrives in ``round``."""
        return rng.uniform(seed, rng.CHANNEL, round, clients) < self._p(round, clients)

    def __repr__(self):
        return f"BernoulliChannel({self.probability!r})"
