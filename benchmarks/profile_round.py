"""Where one call of a round spends its time (``--profile`` of the speed benchmarks).

Prints torch.profiler's table of the call's operators, largest device (or CPU) time first,
then one line that tells a round bound by the host from one bound by the device: the call's
wall-clock time, the device's busy time (the sum of its kernels' times, on CUDA) and the
number of aten operators dispatched. On a GPU, a busy time well under the wall clock with
many operators means the host's dispatch (Python, autograd, vmap, kernel launches) sets
the pace, which fewer operators, CUDA graphs or ``torch.compile`` address; a busy time
near the wall clock means the kernels do, which TF32, channels-last or other kernels
address.
"""

from __future__ import annotations

import time

import torch


def sync(device: torch.device) -> None:
    """Wait for ``device``'s queued kernels (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_side_by_side(fns: dict, device, repeats: int) -> dict:
    """Best time of each function, the functions alternated in every repeat (so that a
    busy machine slows them alike)."""
    for fn in fns.values():  # warm-up (and cudnn.benchmark's search)
        fn()
    sync(device)
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            sync(device)
            tic = time.perf_counter()
            fn()
            sync(device)
            best[name] = min(best[name], time.perf_counter() - tic)
    return best


def profile_call(fn, device: torch.device, rows: int = 20) -> dict:
    """Profile one call of ``fn`` (after a warm-up call) and print what it spent.

    Returns
    -------
    dict with ``wall_s`` (the profiled call), ``device_busy_s`` (its kernels' total, None
    on the CPU) and ``aten_ops`` (aten operators dispatched, nested ones included).
    """
    from torch.profiler import ProfilerActivity, profile

    fn()  # warm-up outside the profile
    sync(device)
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        tic = time.perf_counter()
        fn()
        sync(device)
        wall = time.perf_counter() - tic
    averages = prof.key_averages()
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    print(averages.table(sort_by=key, row_limit=rows, max_name_column_width=60), flush=True)
    ops = sum(e.count for e in averages if e.key.startswith("aten::"))
    busy = None
    if cuda:  # kernels only: the CUDA-side events with no CPU operator of their own
        busy = sum(e.self_device_time_total for e in averages
                   if e.device_type == torch.autograd.DeviceType.CUDA) / 1e6
    text = f"profiled call: {wall * 1e3:.1f} ms wall clock (under the profiler), {ops:,} aten " \
           "operators"
    if busy is not None:
        text += f", device busy {busy * 1e3:.1f} ms ({busy / wall:.0%} of the wall clock)"
    print(text, flush=True)
    return {"wall_s": wall, "device_busy_s": busy, "aten_ops": ops}
