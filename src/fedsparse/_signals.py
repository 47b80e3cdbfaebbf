"""SIGTERM as an exception, so that a stopped command cleans up after itself.

``kill``, a batch scheduler or a container runtime stops a process with SIGTERM, whose
default is to die at once: no ``finally`` runs, no folder is marked. Within
:func:`sigterm_raises` the signal raises an exception instead, which the code around
the block handles like any other.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable


@contextlib.contextmanager
def sigterm_raises(exception: Callable[[int], BaseException]):
    """While the block runs, SIGTERM raises ``exception(signum)`` in the main thread; the
    earlier handler is back afterwards. Outside the main thread (where no handler can be
    set) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise exception(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
