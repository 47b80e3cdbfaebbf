"""Keep numpy's BLAS and torch's thread pools from fighting over the cores."""

from __future__ import annotations

import contextlib
from contextlib import nullcontext

import torch


def single_threaded_blas():
    """Context in which numpy's BLAS runs on one thread.

    The problems hand batched matrix-vector products to numpy (faster than torch's CPU
    bmm for them), while torch runs the element-wise work on its own OpenMP threads.
    With both pools multi-threaded, OpenBLAS's spinning workers and torch's threads
    oversubscribe the cores and a round gets several times slower
    (benchmarks/bench_fedht.py shows both settings).
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl is a dependency
        return nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


@contextlib.contextmanager
def torch_threads(threads: int = 1):
    """Run the block with torch on ``threads`` intra-op threads, then restore the setting.

    A round of a small model is thousands of small tensor operations on (S, P) or
    (b, 784) tensors; with torch's threads spread over cores that other processes also
    use, each operation waits for a busy core, and on a loaded 2-core machine a FedMac
    round on MNIST took 6 s with two threads and 0.35 s with one (Liu et al. 2023's
    experiments run on one).
    """
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
