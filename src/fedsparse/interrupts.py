"""Ctrl-C that a run cannot lose.

Python turns SIGINT into a KeyboardInterrupt raised wherever the main thread happens to
be; raised inside a finaliser (``__del__``, a weakref callback, garbage collection) it is
printed as "Exception ignored" and dropped, and a long run goes on as if never
interrupted. The command line routes SIGINT through :func:`_on_sigint`, which also
records it; the round loop calls :func:`check` at every round, so a dropped interrupt
still stops the run within a round.
"""

from __future__ import annotations

import contextlib
import signal
import threading

_requested = threading.Event()


def _on_sigint(signum, frame) -> None:
    _requested.set()
    signal.default_int_handler(signum, frame)  # raises KeyboardInterrupt, as Python would


@contextlib.contextmanager
def recorded_interrupts():
    """Context in which SIGINT is recorded as well as raised (main thread only; a
    handler someone else installed is left alone)."""
    ours = (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    _requested.clear()
    if ours:
        signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        if ours:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        _requested.clear()


def check() -> None:
    """Raise KeyboardInterrupt if a Ctrl-C was recorded (and, it seems, dropped)."""
    if _requested.is_set():
        _requested.clear()
        raise KeyboardInterrupt
