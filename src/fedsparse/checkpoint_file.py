"""Checkpoint files: written atomically with a checksum, read only once verified.

A checkpoint is saved with :func:`torch.save` and followed by one line,
``#fedsparse-checkpoint sha256=<hex>``, the SHA-256 of the archive before it. The archive
stays a plain PyTorch file (``torch.load`` reads it and ignores the line).

:func:`read_checkpoint` refuses a file whose bytes do not match their checksum (truncated,
edited, damaged on disk), an archive that is not a PyTorch archive of stored entries, and
a pickle that uses a container as a dict key or set member; it runs no code from the file
(``weights_only``). What the loaded object holds is checked by
:mod:`fedsparse.checkpoints`. Every refusal is a :class:`~fedsparse.ConfigError` naming the
file.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import pickletools
import re
import zipfile
from pathlib import Path

import torch

from ._signals import stop_signals_deferred
from ._validation import ConfigError

_TAG = b"\n#fedsparse-checkpoint sha256="
_TRAILER = re.compile(re.escape(_TAG) + rb"([0-9a-f]{64})\n")
_TRAILER_LEN = len(_TAG) + 64 + 1
_START_OVER = "it cannot be resumed: start the run over without --resume"


def _trailer(hexdigest: str) -> bytes:
    """The line that follows the archive: its SHA-256."""
    return _TAG + hexdigest.encode("ascii") + b"\n"


# ---------------------------------------------------------------------------- writing


def save_checkpoint(path: Path, payload: dict) -> None:
    """Write ``payload`` atomically, followed by its checksum.

    The file is written under a temporary name, flushed to disk and only then renamed
    over ``path``: a failed save leaves the previous checkpoint as it was, and a partial
    file never carries a matching checksum. Ctrl-C or SIGTERM during the save acts once it
    is complete (interrupted inside :func:`torch.save`, its archive writer raises an error
    of its own, which would replace the interruption).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with stop_signals_deferred():
        try:
            with open(tmp, "w+b") as fh:  # Python's open: fedsparse.manifest records it
                _write_with_checksum(payload, fh)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_directory(path.parent)


def _write_with_checksum(payload: dict, fh) -> None:
    """The archive of ``payload``, then its checksum line, flushed to disk."""
    torch.save(payload, fh)
    size = fh.tell()
    fh.seek(0)
    digest = hashlib.sha256()
    while size > 0:
        chunk = fh.read(min(size, 1 << 24))
        digest.update(chunk)
        size -= len(chunk)
    fh.write(_trailer(digest.hexdigest()))
    fh.flush()
    os.fsync(fh.fileno())


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable (where the platform can open a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------- reading


def read_checkpoint(path: str | Path, *, map_location="cpu"):
    """The object saved in the checkpoint file ``path``, once its bytes are verified.

    Parameters
    ----------
    path : the checkpoint file.
    map_location : where the tensors are loaded (:func:`torch.load`'s argument); the
        default, the CPU, reads a checkpoint written on any device.

    Raises
    ------
    ConfigError
        naming the file: it cannot be opened, is empty, has no checksum line at its end
        (truncated, or not written by fedsparse), has bytes after it (appended data),
        does not match it (damaged), is not a PyTorch archive of stored entries, uses
        a container as a dict key or set member, or asks for anything but tensors and
        plain containers (``weights_only``).
    """
    path = Path(path)
    where = f"checkpoint {str(path)!r}"
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise ConfigError(f"{where} could not be read: {exc.strerror or exc}") from None
    with fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            raise ConfigError(f"{where} is empty; {_START_OVER}")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as whole:
            body = _verified_length(whole, size, where)
        if body == 0:
            raise ConfigError(f"{where} holds a checksum but no data; {_START_OVER}")
        with _Window(fh.fileno(), body, access=mmap.ACCESS_READ) as archive:
            _check_archive(archive, body, where)
    try:
        # The verified archive, memory-mapped: its tensors are read from the page cache
        # (a resume copies them once, into the run's buffers); the zip reader finds the
        # archive's directory before the checksum line.
        return torch.load(path, weights_only=True, mmap=True, map_location=map_location)
    except Exception as exc:  # noqa: BLE001 - whatever the archive holds, one message
        raise ConfigError(f"{where} could not be read ({_reason(exc)}); {_START_OVER}") \
            from None


class _Window(mmap.mmap):
    """The first bytes of a file, as a seekable file object (what :mod:`zipfile` reads)."""

    def seekable(self) -> bool:
        return True


def _reason(exc: Exception) -> str:
    """The line of a loading error that says what was wrong (torch's weights-only
    refusals put it after a paragraph of advice)."""
    text = str(exc)
    found = re.search(r"WeightsUnpickler error: ([^\n]*)", text)
    line = found.group(1) if found else (text.strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {line[:300]}" if line.strip() else type(exc).__name__


def _verified_length(data: mmap.mmap, size: int, where: str) -> int:
    """The length of the archive in ``data``, once the checksum line after it matches."""
    match = _TRAILER.fullmatch(data[max(size - _TRAILER_LEN, 0):])
    if match is None:
        at = data.rfind(_TAG)
        found = _TRAILER.match(data[at:at + _TRAILER_LEN]) if at >= 0 else None
        if found is not None:
            extra = size - at - _TRAILER_LEN
            raise ConfigError(f"{where} has {extra} bytes after its checksum: data were "
                              f"appended to it; {_START_OVER}")
        if at >= 0:
            raise ConfigError(f"{where} is truncated: its checksum line is cut off; "
                              f"{_START_OVER}")
        raise ConfigError(f"{where} has no fedsparse checksum at its end: it is truncated "
                          "(an interrupted copy?), or was not written by this version of "
                          f"fedsparse, so its content cannot be verified; {_START_OVER}")
    body = size - _TRAILER_LEN
    with memoryview(data) as view:
        digest = hashlib.sha256(view[:body]).hexdigest()
    if digest != match.group(1).decode("ascii"):
        raise ConfigError(f"{where} is corrupt: its {body} bytes do not match the SHA-256 "
                          f"checksum written with them (damaged on disk or in a copy); "
                          f"{_START_OVER}")
    return body


def _check_archive(archive: mmap.mmap, size: int, where: str) -> None:
    """Refuse anything but a zip archive of stored entries that fit the file (a
    compressed entry could declare, and make the reader allocate, any size), whose
    pickle uses no container as a dict key or set member (see :func:`_hashed_kinds`)."""
    try:
        with zipfile.ZipFile(archive) as zf:
            entries = zf.infolist()
            packed = [e.filename for e in entries if e.compress_type != zipfile.ZIP_STORED]
            pickles = [e for e in entries if e.filename.endswith("/data.pkl")]
            data = zf.read(pickles[0]) if not packed and len(pickles) == 1 and \
                sum(e.file_size for e in entries) <= size else None
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise ConfigError(f"{where} is not a PyTorch archive ({exc}); {_START_OVER}") from None
    if packed:
        raise ConfigError(f"{where} holds compressed entries ({', '.join(packed[:3])}); "
                          f"fedsparse stores its checkpoints uncompressed; {_START_OVER}")
    if len(pickles) != 1:
        raise ConfigError(f"{where} is not a PyTorch archive (it holds {len(pickles)} "
                          f"data.pkl entries); {_START_OVER}")
    if data is None:
        raise ConfigError(f"{where} declares entries larger than the file; {_START_OVER}")
    bad = _hashed_kinds(data)
    if bad:
        raise ConfigError(f"{where} is damaged: its pickle uses a {bad} as a dict key or set "
                          f"member (a checkpoint's keys are strings); {_START_OVER}")


_CONTAINERS = {pickletools.pytuple: "tuple", pickletools.pylist: "list",
               pickletools.pydict: "dict", pickletools.pyset: "set",
               pickletools.pyfrozenset: "frozenset"}


def _hashed_kinds(data: bytes) -> str | None:
    """The kind of the first container a pickle hashes (as a dict key or set member),
    found without unpickling it; None if there is none.

    A pickle stores a repeated object once, so a few KB can describe a tuple nested
    seven deep whose every level repeats one tuple; hashing it visits 16^7 tuples
    (torch's weights-only unpickler would spend minutes on it). The opcodes are played
    on a stack of kinds (:mod:`pickletools`' descriptions of each opcode).
    """
    stack: list = []
    marks: list[int] = []
    memo: dict = {}
    try:
        for op, arg, _ in pickletools.genops(data):
            name = op.name
            if name == "MARK":
                marks.append(len(stack))
                continue
            if name in ("SETITEM", "SETITEMS", "DICT", "ADDITEMS", "FROZENSET"):
                hashed = stack[-2:-1] if name == "SETITEM" else stack[marks[-1]:]
                if name in ("SETITEMS", "DICT"):
                    hashed = hashed[0::2]
                for kind in hashed:
                    if kind in _CONTAINERS:
                        return _CONTAINERS[kind]
            if name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
                memo[len(memo) if name == "MEMOIZE" else arg] = stack[-1]
                continue
            if name in ("GET", "BINGET", "LONG_BINGET"):
                stack.append(memo.get(arg, pickletools.anyobject))
                continue
            before = op.stack_before
            if pickletools.markobject in before:
                del stack[marks.pop():]
                before = before[:before.index(pickletools.markobject)]
            if before:
                del stack[-len(before):]
            stack.extend(op.stack_after)
    except (ValueError, IndexError):
        return None  # not a valid pickle: torch.load says so
    return None
