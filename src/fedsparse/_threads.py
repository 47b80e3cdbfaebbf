"""Keep numpy's BLAS and torch's thread pools from fighting over the cores."""

from __future__ import annotations

from contextlib import nullcontext


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
