"""Channels decide which uploads reach the server.

A channel is any object with ``delivered(seed, round, clients) -> (S,) bool``.
Draws use the counter-based generator, so a client's fate in a round does not depend
on which other clients were sampled.
"""

from __future__ import annotations

import hashlib
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


def _probability_tensor(value, name: str) -> torch.Tensor:
    """Probabilities as a float64 tensor, each in [0, 1] (a clear error otherwise)."""
    if isinstance(value, (str, bytes)) or isinstance(value, bool):
        raise fail(name, value, "must be a number in [0, 1] or a sequence of them")
    try:
        p = torch.as_tensor(value, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise fail(name, value, "must be a number in [0, 1] or a sequence of them") from None
    if not torch.isfinite(p).all() or (p < 0).any() or (p > 1).any():
        raise fail(name, value, "must lie in [0, 1]")
    return p


class BernoulliChannel:
    """Upload of client i in round t arrives with probability ``p_i^t``.

    Parameters
    ----------
    probability : a number in [0, 1] for every client and round; a sequence/tensor of
        N per-client probabilities; or a callable ``(round, clients) -> (S,)`` tensor
        for probabilities that vary per client and per round (checked every round:
        S values in [0, 1]). Unknown to the server.
    """

    def __init__(self, probability: float | torch.Tensor | Callable):
        if not callable(probability):
            p = _probability_tensor(probability, "probability")
            if p.ndim > 1:
                raise fail("probability", probability,
                           "must be one number or a 1-D sequence of per-client probabilities")
            probability = p
        self.probability = probability

    def _p(self, round: int, clients: torch.Tensor) -> torch.Tensor:
        if callable(self.probability):
            p = _probability_tensor(self.probability(round, clients),
                                    f"probability(round={round}, clients) result")
            if p.shape != (clients.shape[0],) and p.ndim != 0:
                raise fail(f"probability(round={round}, clients) result shape", tuple(p.shape),
                           f"must be ({clients.shape[0]},): one value per sampled client")
            return p.expand(clients.shape[0])
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


class ScheduledChannel:
    """A fixed delivery pattern: upload of client i in round t arrives iff
    ``delivered[t, i]`` -- to replay a recorded trace or test a known loss pattern.

    Parameters
    ----------
    delivered : (T, N) bool tensor/array; rounds past T repeat the schedule cyclically
        only if ``cycle=True``, else they are an error.
    cycle : repeat the schedule after its last round.
    """

    def __init__(self, delivered, *, cycle: bool = False):
        try:
            d = torch.as_tensor(delivered)
        except (TypeError, ValueError, RuntimeError):
            raise fail("delivered", type(delivered).__name__,
                       "must be a (rounds, clients) bool tensor or array") from None
        if d.ndim != 2 or d.shape[0] == 0 or d.shape[1] == 0:
            raise fail("delivered shape", tuple(d.shape), "must be (rounds, clients), both >= 1")
        if d.dtype != torch.bool:
            if d.is_floating_point() or d.is_complex() or not ((d == 0) | (d == 1)).all():
                raise fail("delivered dtype", str(d.dtype).removeprefix("torch."),
                           "must be bool (or 0/1 integers)")
            d = d.to(torch.bool)
        self.schedule = d
        self.cycle = bool(cycle)

    def delivered(self, seed: int, round: int, clients: torch.Tensor) -> torch.Tensor:
        """(S,) bool: row ``round`` of the schedule at the sampled ``clients``."""
        T, N = self.schedule.shape
        if round >= T and not self.cycle:
            raise fail("ScheduledChannel rounds", T, f"the run reached round {round + 1}; give "
                       "a schedule with a row per round, or cycle=True")
        if clients.numel() and int(clients.max()) >= N:
            raise fail("ScheduledChannel clients", N, f"the data set has client "
                       f"{int(clients.max())}; give a column per client")
        return self.schedule[round % T, clients]

    def __repr__(self):
        T, N = self.schedule.shape
        # Part of a checkpoint's fingerprint: the schedule's content, not only its shape.
        digest = hashlib.sha1(self.schedule.numpy().tobytes()).hexdigest()[:12]
        return f"ScheduledChannel(rounds={T}, clients={N}, sha1={digest}, cycle={self.cycle})"


class GroupChannel:
    """The experimental channel of Mao et al. 2022 (SAFARI): a base channel, plus

    * ``at_least_one_per_group``: if no sampled client of a group arrives in a round, one
      sampled member of that group, chosen uniformly (seeded), arrives anyway ("each group
      has at least one client each round");
    * ``full_first_round``: every upload of round 0 arrives, so the server's similarity
      record starts full (the public code's default).

    Parameters
    ----------
    channel : the base channel (e.g. :class:`BernoulliChannel`).
    groups : (N,) int group id of every client.
    """

    def __init__(self, channel, groups, *, at_least_one_per_group: bool = True,
                 full_first_round: bool = True):
        if not callable(getattr(channel, "delivered", None)):
            raise fail("channel", channel, "must be a channel with a delivered() method")
        try:
            g = torch.as_tensor(groups)
        except (TypeError, ValueError, RuntimeError):
            raise fail("groups", groups, "must be a sequence of integer group ids") from None
        if g.ndim != 1 or g.numel() == 0 or g.is_floating_point() or g.dtype == torch.bool:
            raise fail("groups", groups, "must be a 1-D sequence of integer group ids, one "
                       "per client")
        self.channel = channel
        self.groups = g.to(torch.int64)
        self.at_least_one_per_group = bool(at_least_one_per_group)
        self.full_first_round = bool(full_first_round)

    def delivered(self, seed: int, round: int, clients: torch.Tensor) -> torch.Tensor:
        """(S,) bool for the sampled ``clients`` (S,)."""
        if clients.numel() and int(clients.max()) >= self.groups.shape[0]:
            raise fail("groups", f"{self.groups.shape[0]} group ids", f"needs one per client "
                       f"(client {int(clients.max())} has none)")
        if self.full_first_round and round == 0:
            return torch.ones(clients.shape[0], dtype=torch.bool)
        out = self.channel.delivered(seed, round, clients).clone()
        if self.at_least_one_per_group:
            g = self.groups[clients]
            # A second draw of the channel's stream (counter 1) picks the forced member.
            keys = rng.uniform(seed, rng.CHANNEL, round, clients, 1)
            for group in torch.unique(g).tolist():
                members = g == group
                if not out[members].any():
                    out[torch.where(members, keys, torch.full_like(keys, 2.0)).argmin()] = True
        return out

    def __repr__(self):
        return (f"GroupChannel({self.channel!r}, groups={self.groups.tolist()}, "
                f"at_least_one_per_group={self.at_least_one_per_group}, "
                f"full_first_round={self.full_first_round})")


def safari_channel(probability, groups, *, at_least_one_per_group: bool = True,
                   full_first_round: bool = True) -> GroupChannel:
    """The channel of Mao et al. 2022's experiments.

    Parameters
    ----------
    probability : success probability P of every link (the paper: 0.6), a per-client
        sequence, a callable ``(round, clients) -> (S,)``, or ``"asymmetric"``: the public
        code's variant, P = 0.18 for the clients of group 0 and 0.6 for the others.
    groups : (N,) group id of every client.
    at_least_one_per_group, full_first_round : see :class:`GroupChannel`.
    """
    if isinstance(probability, str):
        if probability != "asymmetric":
            raise fail("probability", probability, 'must be a number in [0, 1], per-client '
                       'numbers, a callable or "asymmetric"')
        g = torch.as_tensor(groups)
        probability = torch.where(g == g.min(), 0.18, 0.6).to(torch.float64)
    return GroupChannel(BernoulliChannel(probability), groups,
                        at_least_one_per_group=at_least_one_per_group,
                        full_first_round=full_first_round)
