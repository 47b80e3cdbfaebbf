"""How much memory one vectorised call may use, and chunk sizes derived from it.

fedsparse runs the clients of a round stacked, and evaluates a model on many examples at
once. How many clients (or examples) go into one call is limited by memory only, and the
memory available depends on the device, so the limit is read from the device, never a
constant tuned for one machine:

* on a GPU, :func:`torch.cuda.mem_get_info` (free device memory) plus what torch's caching
  allocator holds but does not use, times :data:`GPU_FRACTION`: the rest stays free for
  the model, the algorithm's state and the allocator's fragmentation;
* on the CPU, the memory the system can give without swapping (``MemAvailable`` of
  ``/proc/meminfo``, or :mod:`psutil` where installed; the physical memory, or a cgroup's
  or ``ulimit``'s limit, where neither answers), times :data:`CPU_FRACTION`, at most
  :data:`CPU_CAP`: beyond a few GiB per call a CPU gains no speed (the work, not the call
  overhead, dominates), and a simulation should not take a shared machine's memory.

Every budget is at least :data:`MIN_BUDGET`, so a chunk of one client always runs (a
client that does not fit even then fails in torch with its own out-of-memory error).
Chunking never changes results: every per-client draw is keyed by the client id, and
each client's computation is independent of the others in its chunk.

Reading the budget synchronises nothing on a GPU (``cudaMemGetInfo`` is a host query);
callers still read it once per run or per shape, not per step.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from . import _resources
from ._validation import check_int, fail

#: Share of the free GPU memory one vectorised call may use.
GPU_FRACTION = 0.5
#: Share of the available RAM one vectorised call may use on the CPU.
CPU_FRACTION = 0.25
#: Most bytes one vectorised call uses on the CPU.
CPU_CAP = 4 << 30
#: Fewest bytes of any budget.
MIN_BUDGET = 64 << 20


def _available_ram() -> int:
    """Bytes of RAM available without swapping (0 where the system does not say)."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        try:
            return int(psutil.virtual_memory().available)
        except (OSError, AttributeError):  # pragma: no cover - psutil without the data
            pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _cgroup_free() -> int | None:
    """Bytes a cgroup (v2) still lets this process take, or None without a limit."""
    limit = _resources._cgroup_limit()
    if limit is None:
        return None
    try:
        with open("/sys/fs/cgroup/memory.current") as f:
            return max(0, limit - int(f.read().strip()))
    except (OSError, ValueError):
        return limit


def memory_budget(device: str | torch.device | None = None) -> int:
    """Bytes one vectorised call (a chunk of clients, or of evaluation examples) may use.

    Parameters
    ----------
    device : where the call runs: ``"cpu"``, ``"cuda"``, ``"cuda:N"``, a
        :class:`torch.device`, or None (the CPU).

    Returns
    -------
    int, at least :data:`MIN_BUDGET`: on a GPU, :data:`GPU_FRACTION` of its free memory
    (counting what torch's allocator has reserved but not allocated); on the CPU,
    :data:`CPU_FRACTION` of the available RAM (``MemAvailable``, capped by a cgroup's
    remaining memory and the process limit), at most :data:`CPU_CAP`.
    """
    try:
        device = torch.device("cpu" if device is None else device)
    except (RuntimeError, TypeError):
        raise fail("device", device, 'must be a torch device such as "cpu" or "cuda"') \
            from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise fail("device", str(device), "needs a CUDA GPU, and none is available")
        index = device.index if device.index is not None else torch.cuda.current_device()
        free, _total = torch.cuda.mem_get_info(index)
        cached = torch.cuda.memory_reserved(index) - torch.cuda.memory_allocated(index)
        return max(MIN_BUDGET, int((free + max(0, cached)) * GPU_FRACTION))
    return max(MIN_BUDGET, min(CPU_CAP, int(available_memory() * CPU_FRACTION)))


def available_memory() -> int:
    """Bytes of host memory this process can take now without swapping: ``MemAvailable``
    (or :mod:`psutil`), capped by a cgroup's remaining memory and the process limit
    (:func:`fedsparse._resources.memory_limit`, which answers alone where neither says)."""
    candidates = [m for m in (_available_ram(), _cgroup_free()) if m]
    limit = _resources.memory_limit()
    return min(candidates + [limit]) if candidates else limit


def items_per_chunk(item_bytes: int, budget: int, *, at_most: int | None = None) -> int:
    """How many items of ``item_bytes`` each fit in ``budget`` bytes: at least 1, and at
    most ``at_most`` (the number of items there are) when given."""
    item_bytes = check_int("item_bytes", item_bytes, minimum=0)
    budget = check_int("budget", budget, minimum=1)
    count = max(1, budget // max(1, item_bytes))
    if at_most is not None:
        count = min(count, check_int("at_most", at_most, minimum=1))
    return count


def client_chunk(client_bytes: int, device: str | torch.device | None = None, *,
                 clients: int | None = None, share: float = 1.0) -> int:
    """Clients per vectorised call: as many as fit in ``share`` of :func:`memory_budget`.

    Parameters
    ----------
    client_bytes : estimated peak bytes of one client in the call (its parameters,
        gradients and optimizer state, and its activations: examples x activation size).
    device : where the call runs.
    clients : the number of clients there are (the chunk is at most that); None: no cap.
    share : the fraction of the budget these clients may take (the rest is left to work
        running at the same time, e.g. the problem's own chunks inside an algorithm's).
    """
    if not 0 < share <= 1:
        raise fail("share", share, "must be in (0, 1]")
    return items_per_chunk(client_bytes, max(1, int(memory_budget(device) * share)),
                           at_most=clients)


def eval_chunk(example_bytes: int, device: str | torch.device | None = None, *,
               examples: int | None = None) -> int:
    """Examples per evaluation call: as many as fit in :func:`memory_budget`.

    Parameters
    ----------
    example_bytes : estimated peak bytes of one example (input plus the activations of a
        forward pass without gradients).
    device : where the evaluation runs.
    examples : the number of examples there are (the chunk is at most that).
    """
    return items_per_chunk(example_bytes, memory_budget(device), at_most=examples)


# glibc's mallopt parameters (malloc.h), and the thresholds set on leaving: those glibc's
# own dynamic adjustment reaches once programs free large blocks (an mmap threshold of at
# most 32 MiB on 64-bit systems, and a trim threshold twice that). mallopt cannot switch
# the dynamic adjustment back on, and its 128 KiB starting point would make later code pay
# the very page faults this context avoids.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_AFTER_TRIM, _AFTER_MMAP = 64 << 20, 32 << 20
# While a run keeps its freed buffers: blocks up to this size come from the heap (a glibc
# that refuses so high a threshold gets its own largest, 32 MiB on 64-bit systems), and
# up to _KEEP_FREE bytes of freed heap stay with the process (mallopt takes a C int).
_KEEP_BELOW, _KEEP_BELOW_FALLBACK = 1 << 30, 32 << 20
_KEEP_FREE = (1 << 31) - 1
_keeping = [0]  # depth of nested keep_freed_memory() contexts


def _glibc():
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt  # noqa: B018 - glibc only: other C libraries have no mallopt
        libc.malloc_trim  # noqa: B018
        return libc
    except (OSError, AttributeError, TypeError):
        return None


@contextmanager
def keep_freed_memory():
    """Context in which the C allocator keeps freed blocks for reuse (glibc only).

    A round allocates fresh (S, P) buffers at every local step (gradients, updates, the
    batched products' results) and frees them at the end of the step. glibc serves large
    blocks (above 128 KiB, a threshold it raises by itself up to 32 MiB) with ``mmap`` and
    returns them to the system on ``free``, so every step pays the page faults of touching
    fresh memory again: a FedAvg round of the 100-client MLP of
    ``benchmarks/bench_models.py`` took 1.3-2x as long without this context as with it (2
    CPU cores, 1 or 2 threads). Inside it, blocks below 1 GiB come from the heap and freed
    memory is kept, so a step reuses the previous step's pages. On exit the thresholds are
    set to those glibc's own adjustment reaches (mmap above 32 MiB, trim above 64 MiB) and
    the kept memory is returned to the system (``malloc_trim``). Nested contexts act
    once; elsewhere than glibc
    (macOS, Windows, musl) nothing changes. Results never depend on it.
    """
    libc = _glibc() if _keeping[0] == 0 else None
    if libc is not None:
        if not libc.mallopt(_M_MMAP_THRESHOLD, _KEEP_BELOW):
            libc.mallopt(_M_MMAP_THRESHOLD, _KEEP_BELOW_FALLBACK)
        libc.mallopt(_M_TRIM_THRESHOLD, _KEEP_FREE)
    _keeping[0] += 1
    try:
        yield
    finally:
        _keeping[0] -= 1
        if libc is not None:
            libc.mallopt(_M_TRIM_THRESHOLD, _AFTER_TRIM)
            libc.mallopt(_M_MMAP_THRESHOLD, _AFTER_MMAP)
            libc.malloc_trim(0)
