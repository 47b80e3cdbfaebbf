"""One command at a time in an output folder: an advisory lock on the folder itself.

Two commands writing into one folder at once destroy each other's work: a second
``--force`` removes the files of a run still writing them, a second ``--resume`` writes
the same checkpoints, and either dies on a file the other renamed. :func:`lock_folder`
takes an exclusive ``flock`` on the folder (never blocking: a second command is refused
at once, naming the folder) and holds it until :func:`release_folder_locks`, which the
command line calls when a command ends. The operating system drops the lock of a process
that dies, even by ``kill -9``, so a killed run can always be resumed.

Where ``flock`` does not exist (Windows) or the file system refuses it (some network
file systems), no lock is taken: the folder works as before, unguarded.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .._validation import fail

#: The folders this process holds, by real path: a second lock of the same folder in the
#: same process (a test, a notebook) reuses the first, since two flocks of one process on
#: two descriptors of a folder exclude each other.
_HELD: dict[str, int] = {}


def lock_folder(out: Path, option: str = "--out") -> None:
    """Hold ``out`` (an existing folder) for this process, or refuse it, naming
    ``option``, when another process holds it."""
    try:
        import fcntl
    except ImportError:  # Windows
        return
    key = os.path.realpath(out)
    if key in _HELD:
        return
    fd = os.open(key, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise fail(option, str(out), "is in use: another fedsparse command is writing there "
                   f"now; wait until it ends (or stop it), or choose another {option}") from None
    except OSError:  # a file system without flock: unguarded, as before
        os.close(fd)
        return
    _HELD[key] = fd


def release_folder_locks() -> None:
    """Let go of every folder this process holds."""
    while _HELD:
        os.close(_HELD.popitem()[1])


@contextmanager
def folder_held(out: Path, option: str) -> Iterator[None]:
    """:func:`lock_folder` for the block only (a Flower ServerApp's ``flower.out_dir``):
    released at its end unless this process held the folder before."""
    held = os.path.realpath(out) in _HELD
    lock_folder(out, option)
    try:
        yield
    finally:
        fd = None if held else _HELD.pop(os.path.realpath(out), None)
        if fd is not None:
            os.close(fd)
