"""What ``--force`` may remove from an output folder, given its manifest.

:func:`inventory` sorts a folder's entries into fedsparse's unchanged files, the files
fedsparse wrote that were changed since and the user's entries; :func:`remove_ours`
removes the first, :func:`colliding` finds the entries a run would overwrite.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .manifest_file import BOOKKEEPING, Manifest, sha256

# ---------------------------------------------------------------------------------------
# What --force may remove.


@dataclass
class Inventory:
    """A folder's entries sorted by who wrote them (relative POSIX paths).

    Attributes
    ----------
    ours : files fedsparse wrote and nobody changed since (``--force`` removes them).
    changed : files fedsparse wrote that were changed (or replaced by a link) since.
    foreign : files, links and empty folders the manifest does not list (the user's).
    dirs : folders fedsparse created, deepest first.
    """

    ours: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)

    @property
    def kept(self) -> list[str]:
        """What ``--force`` keeps: the changed files and the user's entries."""
        return sorted(self.changed + self.foreign)


def inventory(folder: str | Path, manifest: Manifest, *,
              bookkeeping: Iterable[str] = ()) -> Inventory:
    """Sort every entry of ``folder`` into fedsparse's (unchanged), changed and the user's.

    A folder the manifest does not list and that holds nothing it lists is the user's as
    a whole ("name/"); links are never followed.

    Parameters
    ----------
    bookkeeping : further top-level names that are fedsparse's whatever their content
        (the run status marker).
    """
    folder = Path(folder)
    skip = BOOKKEEPING | set(bookkeeping)
    inv = Inventory()
    listed = set(manifest.files) | manifest.dirs
    for root, dirnames, filenames in os.walk(folder):
        rel_root = Path(root).relative_to(folder).as_posix()
        prefix = "" if rel_root == "." else rel_root + "/"
        descend = []
        for name in sorted(dirnames):
            rel = prefix + name
            if (Path(root) / name).is_symlink():
                (inv.changed if rel in manifest.dirs else inv.foreign).append(rel)
            elif rel in manifest.dirs or any(p.startswith(rel + "/") for p in listed):
                descend.append(name)
            else:
                inv.foreign.append(rel + "/")
        dirnames[:] = descend
        for name in sorted(filenames):
            rel = prefix + name
            if not prefix and name in skip:
                continue
            if rel not in manifest.files:
                inv.foreign.append(rel)
                continue
            full = Path(root) / name
            expected = manifest.files[rel]
            if not stat.S_ISREG(os.lstat(full).st_mode):
                inv.changed.append(rel)
            elif expected is None or sha256(full) == expected:
                inv.ours.append(rel)
            else:
                inv.changed.append(rel)
    inv.dirs = sorted((d for d in manifest.dirs if (folder / d).is_dir()
                       and not (folder / d).is_symlink()),
                      key=lambda d: d.count("/"), reverse=True)
    return inv


def remove_ours(folder: str | Path, inv: Inventory) -> None:
    """Remove the unchanged files fedsparse wrote and the folders it created that are then
    empty; everything else stays."""
    folder = Path(folder)
    for rel in inv.ours:
        (folder / rel).unlink(missing_ok=True)
    for rel in inv.dirs:
        with contextlib.suppress(OSError):  # not empty: it holds something kept
            (folder / rel).rmdir()


def colliding(paths: Iterable[str], patterns: Iterable[str]) -> list[str]:
    """The ``paths`` (relative POSIX; a folder may end in "/") that a run writing the glob
    ``patterns`` would overwrite or write into: a path matching a pattern, or a folder or
    link on the way to one."""
    patterns = [pat.split("/") for pat in patterns]
    hits = []
    for p in paths:
        parts = p.rstrip("/").split("/")
        if any(len(parts) <= len(pat) and all(fnmatch.fnmatchcase(a, b)
                                             for a, b in zip(parts, pat, strict=False))
               for pat in patterns):
            hits.append(p)
    return hits


def describe(paths: list[str], limit: int = 6) -> str:
    more = f", ... ({len(paths)} in all)" if len(paths) > limit else ""
    return ", ".join(paths[:limit]) + more

