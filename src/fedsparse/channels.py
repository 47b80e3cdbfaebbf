"""Channels decide which uploads reach the server.

A channel is any object with ``delivered(seed, round, clients) -> (S,) bool``; it may
also have ``check_clients(num_clients)``, which a run calls once before its first round
to refuse per-client arguments that do not have one entry per client. A run checks
every answer of ``delivered`` (:func:`checked_channel`), so a custom channel that
answers with the wrong shape or with probabilities instead of fates is named in a clear
error. Draws use the counter-based generator, so a client's fate in a round does not
depend on which other clients were sampled.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import torch

from . import rng
from ._validation import ConfigError, _is_bool, check_bool, fail

#: Per-client arguments longer than this are shown by length and digest in a channel's
#: repr (torch abbreviates longer tensors with "...", and a run's fingerprint, which
#: holds the repr, must tell any two of them apart).
SHOWN_ENTRIES = 1000


def _digest(values: torch.Tensor) -> str:
    """The first 12 hex digits of the SHA-1 of a tensor's bytes: its exact values in a
    repr or a fingerprint."""
    return hashlib.sha1(values.cpu().contiguous().numpy().tobytes()).hexdigest()[:12]


def _shown(values: torch.Tensor) -> str:
    """``values`` for a repr: in full up to :data:`SHOWN_ENTRIES` entries, else their
    number and a digest of their bytes."""
    if values.numel() <= SHOWN_ENTRIES:
        return repr(values.tolist())
    return f"<{values.numel()} values, sha1={_digest(values)}>"


def _callable_shown(fn) -> str:
    """A callable for a repr that is the same in every process (no memory address): its
    qualified name and a digest of its code, constants and captured values."""
    code = getattr(fn, "__code__", None)
    parts = [repr(getattr(fn, "__module__", None)), repr(getattr(fn, "__qualname__", None))]
    if code is not None:
        parts += [code.co_code.hex(), repr(code.co_consts)]
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            parts.append(_shown(value) if isinstance(value, torch.Tensor) else repr(value))
    name = getattr(fn, "__qualname__", type(fn).__name__)
    digest = hashlib.sha1("\0".join(parts).encode()).hexdigest()[:12]
    return f"<callable {name}, sha1={digest}>"


class PerfectChannel:
    """Every upload arrives."""

    def delivered(self, seed: int, round: int, clients: torch.Tensor) -> torch.Tensor:
        """(S,) bool, all True, for the (S,) sampled client ids ``clients``."""
        return torch.ones(clients.shape[0], dtype=torch.bool)

    def __repr__(self):
        return "PerfectChannel()"


def _probability_tensor(value, name: str) -> torch.Tensor:
    """Probabilities as a float64 tensor, each in [0, 1] (a clear error otherwise)."""
    if isinstance(value, (str, bytes)) or _is_bool(value):
        raise fail(name, value, "must be a number in [0, 1] or a sequence of them")
    try:
        if torch.as_tensor(value).dtype == torch.bool:  # True is no probability
            raise TypeError
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

    def check_clients(self, num_clients: int) -> None:
        """Per-client probabilities must be exactly one per client."""
        if not callable(self.probability) and self.probability.ndim == 1:
            _one_per_client("probability", self.probability.shape[0], "value", num_clients)

    def delivered(self, seed: int, round: int, clients: torch.Tensor) -> torch.Tensor:
        """(S,) bool, True where the upload of ``clients[s]`` (S,) arrives in ``round``."""
        return rng.uniform(seed, rng.CHANNEL, round, clients) < self._p(round, clients)

    def __repr__(self):
        # part of a checkpoint's fingerprint: every per-client value counts, and a
        # callable is named by its code, not by where it sits in memory
        if callable(self.probability):
            return f"BernoulliChannel({_callable_shown(self.probability)})"
        if self.probability.numel() > SHOWN_ENTRIES:
            return f"BernoulliChannel({_shown(self.probability)})"
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
        self.cycle = check_bool("cycle", cycle)

    def check_clients(self, num_clients: int) -> None:
        """The schedule must have exactly one column per client."""
        _one_per_client("delivered", self.schedule.shape[1], "column", num_clients)

    def check_rounds(self, rounds: int) -> None:
        """Without ``cycle``, the schedule must have a row for each of the run's rounds."""
        if not self.cycle and self.schedule.shape[0] < rounds:
            raise fail("delivered", f"{self.schedule.shape[0]} rows", f"needs a row for each "
                       f"of the run's {rounds} rounds, or cycle (repeat the rows)")

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
        return (f"ScheduledChannel(rounds={T}, clients={N}, sha1={_digest(self.schedule)}, "
                f"cycle={self.cycle})")


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
        self.channel = channel
        self.groups = _check_groups(groups)
        self.at_least_one_per_group = check_bool("at_least_one_per_group",
                                                 at_least_one_per_group)
        self.full_first_round = check_bool("full_first_round", full_first_round)

    def check_clients(self, num_clients: int) -> None:
        """One group id per client, and the base channel's own check."""
        _one_per_client("groups", self.groups.shape[0], "group id", num_clients)
        check = getattr(self.channel, "check_clients", None)
        if callable(check):
            check(num_clients)

    def check_rounds(self, rounds: int) -> None:
        check = getattr(self.channel, "check_rounds", None)
        if callable(check):
            check(rounds)

    def delivered(self, seed: int, round: int, clients: torch.Tensor) -> torch.Tensor:
        """(S,) bool for the sampled ``clients`` (S,)."""
        if clients.numel() and int(clients.max()) >= self.groups.shape[0]:
            raise fail("groups", f"{self.groups.shape[0]} group ids", f"needs one per client "
                       f"(client {int(clients.max())} has none)")
        if self.full_first_round and round == 0:
            return torch.ones(clients.shape[0], dtype=torch.bool)
        out = delivered_mask(self.channel, self.channel.delivered(seed, round, clients),
                             clients).clone()
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
        return (f"GroupChannel({self.channel!r}, groups={_shown(self.groups)}, "
                f"at_least_one_per_group={self.at_least_one_per_group}, "
                f"full_first_round={self.full_first_round})")


def probability_digest(channel) -> str | None:
    """A digest of the exact probabilities of a Bernoulli channel (also as a group
    channel's base), or None for another channel. A checkpoint's fingerprint holds it
    beside the channel's repr, which prints them to four decimals (0.18 and 0.18001
    alike)."""
    while isinstance(channel, GroupChannel):
        channel = channel.channel
    p = channel.probability if isinstance(channel, BernoulliChannel) else None
    if not isinstance(p, torch.Tensor):
        return None
    return _digest(p)


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
    g = _check_groups(groups)
    if isinstance(probability, str):
        if probability != "asymmetric":
            raise fail("probability", probability, 'must be a number in [0, 1], per-client '
                       'numbers, a callable or "asymmetric"')
        # float64 from the start: the float32 of a bare torch.where would give 0.18000000715
        probability = torch.where(g == g.min(), torch.tensor(0.18, dtype=torch.float64),
                                  torch.tensor(0.6, dtype=torch.float64))
    base = BernoulliChannel(probability)
    if not callable(base.probability) and base.probability.ndim == 1:
        _one_per_client("probability", base.probability.shape[0], "value", g.shape[0],
                        "the clients in groups")
    return GroupChannel(base, g, at_least_one_per_group=at_least_one_per_group,
                        full_first_round=full_first_round)


def _check_groups(groups) -> torch.Tensor:
    """(N,) int64 group ids from a sequence of integers (a clear error otherwise)."""
    try:
        g = torch.as_tensor(groups)
    except (TypeError, ValueError, RuntimeError):
        raise fail("groups", groups, "must be a sequence of integer group ids") from None
    if g.ndim != 1 or g.numel() == 0 or g.is_floating_point() or g.is_complex() \
            or g.dtype == torch.bool:
        raise fail("groups", groups, "must be a non-empty 1-D sequence of integer group "
                   "ids, one per client")
    return g.to(torch.int64)


def _one_per_client(name: str, count: int, what: str, num_clients: int,
                    source: str = "the data set's clients") -> None:
    """Refuse ``count`` per-client entries (``what``: "value", "column", ...) for
    ``num_clients`` clients: a surplus entry would be ignored silently."""
    if count != num_clients:
        raise fail(name, f"{count} per-client {what}s", f"needs exactly one {what} for each "
                   f"of {source} ({num_clients})")


def delivered_mask(channel, out, clients: torch.Tensor) -> torch.Tensor:
    """A channel's answer for the (S,) sampled ``clients`` as an (S,) bool tensor.

    Bools, or the integers 0 and 1, are accepted; any other answer (another shape,
    probabilities, None) is a ConfigError that names the channel.
    """
    S = int(clients.shape[0])
    allowed = (f"it must return ({S},) bools (or 0/1 integers), one per sampled client, "
               "True where the upload arrives")
    try:
        d = torch.as_tensor(out).cpu()  # the round loop's masks live on the CPU
    except (TypeError, ValueError, RuntimeError):
        raise ConfigError(f"channel {channel!r}: delivered(seed, round, clients) returned "
                          f"{type(out).__name__}; {allowed}") from None
    if tuple(d.shape) != (S,):
        raise ConfigError(f"channel {channel!r}: delivered(seed, round, clients) returned "
                          f"shape {tuple(d.shape)} for {S} clients; {allowed}")
    if d.dtype != torch.bool:
        if d.is_floating_point() or d.is_complex() or not ((d == 0) | (d == 1)).all():
            raise ConfigError(f"channel {channel!r}: delivered(seed, round, clients) returned "
                              f"{str(d.dtype).removeprefix('torch.')} values "
                              f"{d[:5].tolist()}; {allowed}")
        d = d.to(torch.bool)
    return d


class CheckedChannel:
    """A run's channel with every answer checked (:func:`delivered_mask`); its repr is the
    channel's own, so checkpoint fingerprints do not change."""

    def __init__(self, channel):
        self.channel = channel

    def delivered(self, seed: int, round: int, clients: torch.Tensor) -> torch.Tensor:
        return delivered_mask(self.channel, self.channel.delivered(seed, round, clients),
                              clients)

    def __repr__(self):
        return repr(self.channel)


def checked_channel(channel, num_clients: int, rounds: int | None = None) -> CheckedChannel:
    """``channel`` for a run of ``num_clients`` clients (and ``rounds`` rounds): refused now
    if it has per-client arguments with more or fewer entries than clients (its
    ``check_clients``) or a schedule shorter than the run (its ``check_rounds``), and
    checked every round (:class:`CheckedChannel`)."""
    if not callable(getattr(channel, "delivered", None)):
        raise fail("channel", channel if isinstance(channel, str | int | float)
                   else f"<{type(channel).__name__}>", "must be a channel with a "
                   "delivered(seed, round, clients) method, e.g. "
                   "fs.channels.BernoulliChannel(0.8)")
    check = getattr(channel, "check_clients", None)
    if callable(check):
        check(num_clients)
    check = getattr(channel, "check_rounds", None)
    if rounds is not None and callable(check):
        check(rounds)
    return channel if isinstance(channel, CheckedChannel) else CheckedChannel(channel)
