"""What fedsparse wrote into an output folder, so that ``--force`` removes that and nothing else.

Every folder the command line writes (``run``, ``sweep``, ``flower app``, ``flower demo``)
gets a manifest, ``.fedsparse-manifest``: JSON lines naming every file and folder
fedsparse created there, with the SHA-256 of each file as fedsparse left it. ``--force``
then removes exactly the files the manifest lists whose content is unchanged; a file the
user changed since, and any file or folder the manifest does not list, is kept and
reported, and a folder without a manifest is never emptied.

How writes are recorded: :func:`recording` installs (once per process) a Python audit hook
(:func:`sys.addaudithook`) that sees every ``open`` for writing, ``os.rename``/``os.replace``
and ``os.mkdir`` under the folder while the block runs, whoever the writer is (histories,
checkpoints, plots, an experiment's own tables). Each new path is appended to the manifest
*before* the file is created, so a run killed with SIGKILL still leaves a manifest that
names its files (without hashes: "written by fedsparse, content not verified"). When the
block ends, the manifest is rewritten with the hash of every file. The same hook refuses
(raises :class:`ProtectedFileError`) a write, rename or removal of a file that was in the
folder before the block and is not fedsparse's -- a user's file next to the output is
never overwritten.

Files written by other processes (a worker process) are not recorded: they count as the
user's, which is the safe side (kept, never removed). Writers that know exactly what they
wrote (the Flower app project, the Flower demo, whose history comes from the ServerApp's
process) list it with :func:`record_files`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ._validation import ConfigError

# the manifest file (fedsparse.manifest_file) and what --force may remove
# (fedsparse.manifest_inventory): their names stay importable from here
from .manifest_file import (  # noqa: F401
    BOOKKEEPING,
    MANIFEST,
    Manifest,
    read_manifest,
    sha256,
    start_manifest,
    write_manifest,
)
from .manifest_inventory import Inventory, colliding, describe, inventory, remove_ours  # noqa: F401


class ProtectedFileError(ConfigError):
    """fedsparse was about to overwrite, move or remove a file it did not write."""


# ---------------------------------------------------------------------------------------
# Recording writes while a block runs.

_ACTIVE: list[_Recorder] = []
_LOCK = threading.RLock()
_LOCAL = threading.local()
_HOOKED = False
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class _Recorder:
    """Journals the writes under one folder and refuses those to protected files."""

    def __init__(self, folder: Path, protect: set[str], ignore: set[str], journal):
        self.folder = folder
        self.roots = {os.path.abspath(folder), os.path.realpath(folder)}
        self.protect = {p.rstrip("/") for p in protect}
        self.ignore = BOOKKEEPING | ignore
        self.journal = journal
        self.files: set[str] = set()
        self.dirs: set[str] = set()

    def relative(self, path) -> str | None:
        try:
            text = os.fspath(path)
        except TypeError:  # a file descriptor
            return None
        if isinstance(text, bytes):
            text = os.fsdecode(text)
        full = os.path.abspath(text)
        for root in self.roots:
            if full.startswith(root + os.sep):
                rel = full[len(root) + 1:].replace(os.sep, "/")
                return None if rel in self.ignore else rel
        return None

    def protected(self, rel: str) -> bool:
        """``rel`` is a protected file or folder, or lies inside one."""
        return any(rel == p or rel.startswith(p + "/") for p in self.protect)

    def guard(self, rel: str, what: str) -> None:
        if self.protected(rel):
            raise ProtectedFileError(
                f"fedsparse was about to {what} {str(self.folder / rel)!r}, which it did not "
                "write (a file or folder that was there before this run, or was changed "
                f"since fedsparse wrote it): nothing was changed; move it out of "
                f"{str(self.folder)!r} or choose another output folder")

    def guard_tree(self, rel: str, what: str) -> None:
        """Refuse removing the folder ``rel`` ("" = the whole folder) if it holds or lies
        in something protected."""
        if rel:
            self.guard(rel, what)
        for p in sorted(self.protect):
            if not rel or p.startswith(rel + "/"):
                self.guard(p, what)

    def wrote(self, rel: str) -> None:
        if rel not in self.files:
            self.files.add(rel)
            self._journal({"file": rel})

    def made_dir(self, rel: str) -> None:
        if rel not in self.dirs:
            self.dirs.add(rel)
            self._journal({"dir": rel})

    def _journal(self, entry: dict) -> None:
        self.journal.write(json.dumps(entry) + "\n")
        self.journal.flush()  # to the OS before the file exists: survives a SIGKILL

    def event(self, name: str, args: tuple) -> None:
        if name == "open":
            path, mode, flags = args
            writing = any(c in mode for c in "wax+") if mode else bool(flags & _WRITE_FLAGS)
            rel = self.relative(path) if writing else None
            if rel is not None:
                self.guard(rel, "overwrite")
                self.wrote(rel)
        elif name == "os.rename":
            src, dst = self.relative(args[0]), self.relative(args[1])
            if src is not None:
                self.guard(src, "move")
            if dst is not None:
                self.guard(dst, "replace")
                self.wrote(dst)
        elif name == "os.mkdir":
            rel = self.relative(args[0])
            if rel is not None and not os.path.isdir(args[0]):
                self.made_dir(rel)
        elif name in ("os.remove", "os.rmdir"):
            rel = self.relative(args[0])
            if rel is not None:
                self.guard(rel, "remove")
        elif name == "shutil.rmtree":
            rel = self.relative(args[0])
            if rel is not None:
                self.guard_tree(rel, "remove")
            else:  # the folder itself, or a folder holding it
                target = os.path.abspath(os.fspath(args[0]))
                if any(r == target or r.startswith(target.rstrip(os.sep) + os.sep)
                       for r in self.roots):
                    self.guard_tree("", "remove")


_EVENTS = {"open", "os.rename", "os.mkdir", "os.remove", "os.rmdir", "shutil.rmtree"}


def _audit(name: str, args: tuple) -> None:
    if not _ACTIVE or name not in _EVENTS or getattr(_LOCAL, "busy", False):
        return
    _LOCAL.busy = True
    try:
        with _LOCK:
            for rec in list(_ACTIVE):
                rec.event(name, args)
    finally:
        _LOCAL.busy = False


def _install_hook() -> None:
    global _HOOKED
    with _LOCK:
        if not _HOOKED:  # an audit hook cannot be removed: one for the process, idle
            sys.addaudithook(_audit)  # (one list check) while no block is recording
            _HOOKED = True


@dataclass
class Recording:
    """What :func:`recording` saw: the files and folders written in the block."""

    files: set[str] = field(default_factory=set)
    dirs: set[str] = field(default_factory=set)


@contextlib.contextmanager
def recording(folder: str | Path, *, protect: Iterable[str] = (),
              ignore: Iterable[str] = ()) -> Iterator[Recording]:
    """Record in ``folder``'s manifest every file and folder this process writes under it
    while the block runs; refuse writes to the ``protect`` paths.

    The folder must exist and have a manifest (:func:`start_manifest`). On exit, also
    after an exception (whose place a failure here never takes), every recorded file
    still present gets its hash; files recorded but gone (a temporary file renamed) are
    dropped. If the folder or its manifest is gone (a run that failed before writing
    anything removes them), nothing is written.

    Parameters
    ----------
    protect : relative paths of files that must not be overwritten, moved or removed.
    ignore : top-level names of fedsparse's bookkeeping files not to record (a status
        marker rewritten outside the block).

    Raises
    ------
    ProtectedFileError
        from inside the block, at the write that would have touched a protected file.
    """
    folder = Path(folder)
    _install_hook()
    failed = False
    with open(folder / MANIFEST, "a") as journal:
        rec = _Recorder(folder, set(protect), set(ignore), journal)
        result = Recording(files=rec.files, dirs=rec.dirs)  # live: filled as it runs
        with _LOCK:
            _ACTIVE.append(rec)
        try:
            yield result
        except BaseException:
            failed = True
            raise
        finally:
            with _LOCK:
                _ACTIVE.remove(rec)
            if result.files or result.dirs:
                try:
                    finish(folder, result.files)
                except Exception:
                    if not failed:  # never in place of the block's own exception
                        raise


def finish(folder: str | Path, written: Iterable[str]) -> None:
    """Rewrite ``folder``'s manifest with the hash of each ``written`` file still there,
    dropping entries whose file or folder is gone."""
    folder = Path(folder)
    manifest = read_manifest(folder) if folder.is_dir() else None
    if manifest is None:
        return
    written = set(written)
    files = {}
    for rel, sha in manifest.files.items():
        full = folder / rel
        if not full.is_file() or full.is_symlink():
            continue
        files[rel] = sha256(full) if rel in written or sha is None else sha
    manifest.files = files
    manifest.dirs = {d for d in manifest.dirs if (folder / d).is_dir()}
    write_manifest(folder, manifest)


def record_files(folder: str | Path, paths: Iterable[str]) -> None:
    """Add files this process has just written under ``folder`` to its manifest (for
    writers that know exactly what they wrote, such as the Flower app project)."""
    folder = Path(folder)
    manifest = read_manifest(folder) or Manifest()
    for rel in paths:
        manifest.files[rel] = sha256(folder / rel)
        parent = rel.rpartition("/")[0]
        while parent:
            manifest.dirs.add(parent)
            parent = parent.rpartition("/")[0]
    write_manifest(folder, manifest)
