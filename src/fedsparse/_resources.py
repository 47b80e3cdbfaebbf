"""What a run or a data set needs, estimated before it starts, and the refusal of what
cannot fit or cannot end.

Two rules, both lower bounds, so that nothing that could run is refused:

* **Memory.** A data generator, the simulator and an algorithm add up the bytes their
  largest buffers need (``count x element size``, computed with Python integers, so no
  product overflows) and compare them with :func:`memory_limit`: the machine's physical
  memory, or less where a cgroup or an address-space limit caps the process. More than
  the limit is refused with the sizes that give it and the estimate, e.g.
  ``num_clients=1000000000 with samples_per_client=100 and dim=1000 needs about 1.1 PiB
  for the features; this machine has 23 GiB``. The round records a run keeps count
  too: every round appends a dict of at least 12 entries (at least
  :data:`RECORD_BYTES` in CPython), so ``rounds=10**12`` needs hundreds of TiB.
* **Work.** A run is a chain of sequential steps (every local step of every round, and
  the round itself); none completes in less than :data:`STEP_SECONDS` = 1 µs (the
  dispatch overhead of one torch operation is larger). A run whose chain at that rate
  would last longer than :data:`MAX_SECONDS` (a year) cannot end and is refused; one
  that would last longer than :data:`WARN_SECONDS` (a day) even at that rate starts with
  a warning (a misplaced power of ten in ``local_steps`` usually).

Integers beyond int64 are refused earlier, by :func:`fedsparse._validation.check_int`.
"""

from __future__ import annotations

import math
import os
import sys
import warnings

try:
    import resource
except ImportError:  # not on Windows: no process limits to read there
    resource = None

from ._validation import ConfigError, check_int

#: A lower bound on the bytes of one round's record (a dict of at least 12 entries).
RECORD_BYTES = 400
#: A lower bound on the time of one sequential step of a run (one torch operation).
STEP_SECONDS = 1e-6
#: The longest run (lower bound on its time) that is allowed to start: one year.
MAX_SECONDS = 365.25 * 24 * 3600
#: A run whose sequential steps take longer than this at STEP_SECONDS each starts with a
#: warning: a day at 1 µs a step is months at the speed of a real step.
WARN_SECONDS = 24 * 3600

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")


def format_bytes(n: float) -> str:
    """``n`` bytes in binary units, e.g. ``745 GiB``."""
    k = 0
    while n >= 1024 and k < len(_UNITS) - 1:
        n /= 1024
        k += 1
    return f"{n:.3g} {_UNITS[k]}" if n < 1000 else f"{n:.0f} {_UNITS[k]}"


def physical_memory() -> int:
    """Bytes of physical memory of the machine (0 where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _cgroup_limit() -> int | None:
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # "max" or a huge number: no limit
            return int(text)
    return None


def memory_limit() -> int:
    """Bytes this process can hold at most: the physical memory, or less where a cgroup
    or an address-space / data-segment limit (``ulimit -v``) caps it."""
    limits = [m for m in (physical_memory(), _cgroup_limit()) if m]
    for which in ("RLIMIT_AS", "RLIMIT_DATA"):
        if resource is not None and hasattr(resource, which):
            soft, _ = resource.getrlimit(getattr(resource, which))
            if soft != resource.RLIM_INFINITY:
                limits.append(soft)
    return min(limits) if limits else 1 << 62


def peak_memory() -> int | None:
    """Bytes of the most physical memory this process has held (its peak resident set);
    None where the system does not say (Windows).

    Linux answers with ``VmHWM`` of ``/proc/self/status``, not ``ru_maxrss``: a process
    started with :mod:`subprocess` (``vfork`` then ``exec``) inherits its parent's peak in
    ``ru_maxrss``, so a small script started from a large process would report the large
    one's memory. Elsewhere ``ru_maxrss`` (KiB on Linux, bytes on macOS).
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    if resource is None:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _describe_limit(limit: int) -> str:
    where = "this machine has" if limit == physical_memory() else "this process may use"
    return f"{where} {format_bytes(limit)}"


def _sizes_text(sizes: dict[str, int], blame: str | None) -> str:
    """``a=1 with b=2 and c=3``, the blamed size first (default: the largest)."""
    blame = blame or max(sizes, key=lambda k: sizes[k])
    rest = [f"{k}={v}" for k, v in sizes.items() if k != blame]
    text = f"{blame}={sizes[blame]}"
    if rest:
        text += " with " + (", ".join(rest[:-1]) + " and " if len(rest) > 1 else "") + rest[-1]
    return text


def check_memory(needs: dict[str, int], sizes: dict[str, int], *, blame: str | None = None,
                 hint: str = "") -> None:
    """Refuse what cannot fit in memory.

    Parameters
    ----------
    needs : {what: bytes} the buffers that are alive together, e.g.
        ``{"the features": N * n * d * 12}``.
    sizes : {parameter: value} the parameters that give those sizes (named in the error).
    blame : the parameter to name first (default: the largest value).
    hint : a sentence saying how to make it fit.

    Raises
    ------
    ConfigError
        naming the parameters and the estimate when the total exceeds
        :func:`memory_limit`.
    """
    total = sum(needs.values())
    limit = memory_limit()
    if total <= limit:
        return
    what = " and ".join(needs) if len(needs) <= 2 else ", ".join(needs)
    raise ConfigError(f"{_sizes_text(sizes, blame)} needs about {format_bytes(total)} for "
                      f"{what}; {_describe_limit(limit)}" + (f". {hint}" if hint else ""))


def check_rounds(rounds, clients: int = 1) -> int:
    """``rounds`` of a run, checked: an integer >= 1 whose round records fit in memory
    (each round keeps a record of at least :data:`RECORD_BYTES`, plus 8 bytes for each of
    the ``clients`` listed as delivered)."""
    rounds = check_int("rounds", rounds, minimum=1)
    check_memory({"the round records": rounds * (RECORD_BYTES + 8 * clients)},
                 {"rounds": rounds}, hint="A run keeps one record per round")
    return rounds


def check_work(steps: int, subject: str, *, what: str = "sequential steps",
               warn: bool = True) -> None:
    """Refuse a run whose ``steps`` sequential steps cannot end within a year even at
    :data:`STEP_SECONDS` each (a lower bound on a step's time).

    Parameters
    ----------
    steps : the number of sequential steps (a Python int: it may exceed int64).
    subject : what gives that many steps, naming the parameters (``"rounds=10 of
        fed_avg(local_steps=...)"``); the message starts with it.
    what : what the steps are.
    warn : also warn of a run that would take days (False for a lower bound that a later
        check, knowing the whole run, states exactly).
    """
    seconds = steps * STEP_SECONDS
    if seconds <= WARN_SECONDS or (not warn and seconds <= MAX_SECONDS):
        return
    if seconds <= MAX_SECONDS:
        warnings.warn(f"{subject} is {steps:.3g} {what}; even at 1 µs each (less than one "
                      f"torch operation takes) that is {seconds / 86400:.3g} days", RuntimeWarning,
                      stacklevel=3)
        return
    years = seconds / (365.25 * 24 * 3600)
    raise ConfigError(f"{subject} is {steps:.3g} {what}; at 1 µs each (less than one torch "
                      f"operation takes) that is more than {years:.3g} years, so the run "
                      "could not end")


def check_steps(**counts: int) -> None:
    """Refuse per-round step counts (e.g. ``local_steps``, ``inner_steps``) whose product
    alone, for one round, could not end within a year (see :func:`check_work`)."""
    check_work(math.prod(counts.values()), _sizes_text(counts, None),
               what="sequential steps in every round")
