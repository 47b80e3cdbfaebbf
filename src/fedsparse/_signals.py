"""Stop signals, handled where a command can clean up after itself.

``kill``, a batch scheduler or a container runtime stops a process with SIGTERM, whose
default is to die at once: no ``finally`` runs, no folder is marked. Within
:func:`sigterm_raises` the signal raises an exception instead, which the code around
the block handles like any other.

Within :func:`stop_signals_deferred` (a file being written) Ctrl-C and SIGTERM wait
until the block ends: an exception raised inside a writer's own code can leave it in a
state whose clean-up raises another error, which would replace the interruption. Where
that happens anyway (in a library's code), :func:`as_interrupted` turns the error back
into the Ctrl-C it unwound from.
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


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_signals_deferred():
    """While the block runs, SIGINT and SIGTERM are held; once it ends the earlier
    handlers are back and each signal that arrived is raised again, so it acts as it would
    have (``KeyboardInterrupt``, the exception of :func:`sigterm_raises`, or the default).
    Outside the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    previous = {}
    for signum in _STOP_SIGNALS:
        handler = signal.getsignal(signum)
        if handler is not None:  # None: set outside Python, and could not be put back
            previous[signum] = signal.signal(signum, lambda s, _frame: arrived.append(s))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(arrived):
            signal.raise_signal(signum)


@contextlib.contextmanager
def stop_handlers_kept():
    """After the block, SIGINT's and SIGTERM's handlers are the ones it started with: a
    library that installs its own and leaves it (Ray's ``init`` sets a SIGTERM handler
    that exits the process) does not change how the caller's process stops. Outside the
    main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {signum: signal.getsignal(signum) for signum in _STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in before.items():
            if handler is not None:  # None: set outside Python, and could not be put back
                signal.signal(signum, handler)


def interruption(exc: BaseException) -> KeyboardInterrupt | None:
    """The ``KeyboardInterrupt`` that ``exc`` is or was raised while handling (along its
    ``__context__`` chain), else None: an error that code raises while unwinding from
    Ctrl-C (a writer left half-way, its clean-up failing) is the interruption."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        seen.add(id(exc))
        exc = exc.__context__
    return None


def as_interrupted(fn: Callable, *args):
    """``fn(*args)``, where an error raised while unwinding from Ctrl-C is raised again as
    the ``KeyboardInterrupt`` it unwound from (:func:`interruption`)."""
    try:
        return fn(*args)
    except Exception as exc:
        stop = interruption(exc)
        if stop is None:
            raise
        raise KeyboardInterrupt(*stop.args) from exc
