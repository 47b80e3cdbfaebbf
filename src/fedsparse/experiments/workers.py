"""Calls run in worker processes, as ``fedsparse sweep --jobs`` and ``tune --jobs`` run
their points: spawned, never more than the CPUs, stopped at once on an error, Ctrl-C or
SIGTERM."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed

__all__ = ["run_in_workers"]


def run_in_workers(fn, calls: list[tuple], workers: int, threads: int, done=None) -> list:
    """``[fn(*args) for args in calls]``, in ``workers`` spawned processes of ``threads``
    torch threads each, but never more processes than CPUs: more cannot run faster, and
    each holds its own torch and data (``--jobs 100`` on two cores would start 100).
    ``done(k, result)`` is called in this process as call ``k`` finishes.

    On the first error, or Ctrl-C or SIGTERM while waiting, the calls not started are
    cancelled and the workers stopped before it propagates: a pool left to wind down by
    itself runs every queued call first (a stopped sweep of 100 points would run them
    all, then keep nothing).
    """
    # spawn, not fork: a forked child inherits torch's thread pool in an undefined state
    context = multiprocessing.get_context("spawn")
    workers = min(workers, os.cpu_count() or 1)
    with ProcessPoolExecutor(max_workers=workers, mp_context=context,
                             initializer=_init_worker, initargs=(threads,)) as pool:
        futures = [pool.submit(fn, *args) for args in calls]
        try:
            if done is not None:
                index = {f: k for k, f in enumerate(futures)}
                for f in as_completed(futures):
                    done(index[f], f.result())
            return [f.result() for f in futures]
        except BaseException:
            # Python 3.14's terminate_workers(), by hand: 3.11 has no public way
            for process in list((getattr(pool, "_processes", None) or {}).values()):
                process.terminate()
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _init_worker(threads: int) -> None:
    import threading

    import torch
    from tqdm.auto import tqdm  # the round loop's bar

    torch.set_num_threads(threads)
    # a thread lock for tqdm's (disabled) bars, not its default cross-process one: a
    # worker stopped by run_in_workers leaves no semaphore for Python to report as leaked
    tqdm.set_lock(threading.RLock())
