"""Counter-based random numbers.

Every random choice in a run (mini-batches, client sampling, dropped uploads) is a
pure function of ``(seed, stream, round, client, ...)``, computed by hashing the
counters with SplitMix64. That makes a run reproducible whatever the order or the
grouping in which clients are processed, lets a resumed run continue bit-for-bit,
and vectorises: one call draws the keys of every client at once.
"""

from __future__ import annotations

import torch

# Streams keep independent uses of the same (seed, round, client) apart.
BATCH, CLIENT_SAMPLE, CHANNEL, INIT, ALGORITHM = 1, 2, 3, 4, 5

_U64 = 1 << 64
_MASK = _U64 - 1


def _signed(c: int) -> int:
    return c - _U64 if c >= 1 << 63 else c


_GOLDEN = _signed(0x9E3779B97F4A7C15)
_M1 = _signed(0xBF58476D1CE4E5B9)
_M2 = _signed(0x94D049BB133111EB)


def _shift_right(z: torch.Tensor, k: int) -> torch.Tensor:
    # torch's >> on int64 is arithmetic; SplitMix64 needs the logical shift.
    return (z >> k) & ((1 << (64 - k)) - 1)


def _mix(z: torch.Tensor) -> torch.Tensor:
    z = z + _GOLDEN
    z = (z ^ _shift_right(z, 30)) * _M1
    z = (z ^ _shift_right(z, 27)) * _M2
    return z ^ _shift_right(z, 31)


def _mix_int(z: int) -> int:
    """:func:`_mix` of one unsigned 64-bit Python int (the same bits)."""
    z = (z + _GOLDEN) & _MASK
    z = ((z ^ (z >> 30)) * _M1) & _MASK
    z = ((z ^ (z >> 27)) * _M2) & _MASK
    return z ^ (z >> 31)


def _is_int64(c) -> bool:
    return isinstance(c, int) and -(1 << 63) <= c < 1 << 63


def hash_counters(*counters) -> torch.Tensor:
    """Hash integer counters (ints or int64 tensors, broadcast together) to int64 keys.

    The keys lie on the device of the tensor counters (the CPU if there are none); the
    integer arithmetic is exact, so every device gives the same keys. The leading Python
    ints (seed, stream, round) are hashed in Python: the same bits without a dozen tensor
    operations each, which a round's every mini-batch draw would otherwise dispatch. The
    key they fold to, and any int after a tensor, enter the tensor arithmetic as scalars:
    on a GPU, a copy to the device would make the host wait for the device's queue."""
    device = next((c.device for c in counters if isinstance(c, torch.Tensor)),
                  torch.device("cpu"))
    h, first = 0, 0
    for c in counters:
        if not _is_int64(c):
            break  # a tensor (or an int torch would refuse): the tensor path from here
        h, first = _mix_int(h ^ (c & _MASK)), first + 1
    if first == len(counters):
        return torch.tensor(_signed(h), dtype=torch.int64, device=device)
    key: torch.Tensor | int = _signed(h)
    for c in counters[first:]:
        if isinstance(key, int) or not _is_int64(c):
            c = torch.as_tensor(c, dtype=torch.int64, device=device)
        key = _mix(key ^ c)
    return key


def uniform(*counters) -> torch.Tensor:
    """Uniform float64 numbers in [0, 1), one per broadcast element of the counters."""
    h = hash_counters(*counters)
    return _shift_right(h, 11).to(torch.float64) * (1.0 / (1 << 53))


def choose_without_replacement(keys: torch.Tensor, valid: torch.Tensor, k: int) -> tuple[
        torch.Tensor, torch.Tensor]:
    """Pick ``k`` positions per row uniformly without replacement among ``valid`` ones.

    Parameters
    ----------
    keys : (..., n) float64 uniform keys, a row along the last axis.
    valid : (..., n) bool, broadcast with ``keys``; rows with fewer than ``k`` valid
        positions take them all.
    k : how many to pick.

    Returns
    -------
    index : (..., k) int64 positions (ascending key order).
    picked : (..., k) bool, False where a row had fewer than ``k`` valid positions.
    """
    keys = torch.where(valid, keys, torch.full_like(keys, 2.0))
    vals, index = torch.topk(keys, k, dim=-1, largest=False, sorted=True)
    return index, vals < 2.0
