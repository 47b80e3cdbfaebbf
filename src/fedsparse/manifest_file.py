"""The manifest file of an output folder: its entries, read and written.

``.fedsparse-manifest`` holds JSON lines: a header, one line per folder fedsparse created
and one per file it wrote, with the SHA-256 of the file as fedsparse left it (none when
the writer was stopped before it could record it). :mod:`fedsparse.manifest` records the
writes; :mod:`fedsparse.manifest_inventory` says what ``--force`` may remove.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ._validation import ConfigError, broken_link

#: The manifest's file name (no extension: Flower leaves it out of an app's FAB).
MANIFEST = ".fedsparse-manifest"
_VERSION = 1


# ---------------------------------------------------------------------------------------
# Reading and writing the manifest.


@dataclass
class Manifest:
    """The parsed manifest of one folder.

    Attributes
    ----------
    folder_created : fedsparse created the folder itself (a failure that wrote nothing
        may then remove it).
    files : {relative POSIX path: SHA-256 hex, or None when fedsparse started writing it
        but was stopped before it could record the hash (a killed run)}.
    dirs : relative paths of the folders fedsparse created inside.
    """

    folder_created: bool = False
    files: dict[str, str | None] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)


def read_manifest(folder: str | Path) -> Manifest | None:
    """The manifest of ``folder``, or None if it has none (fedsparse did not write it).

    Lines that are not valid entries (a truncated last line, a path leaving the folder)
    are ignored: what they would have named is then kept, never removed.

    Raises
    ------
    ConfigError
        naming the manifest when it is a symbolic link that loops back to itself (a link
        to no file reads as no manifest, as a missing one).
    """
    path = Path(folder) / MANIFEST
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    except OSError:
        link = broken_link(path)
        if link is None:
            raise
        raise ConfigError(f"{broken_manifest(path, link)}, or use another folder") from None
    manifest = Manifest()
    header = False
    for line in data.splitlines():
        try:  # bytes: a line that is not UTF-8 (damaged on disk) is skipped as the others
            entry = json.loads(line)
        except ValueError:  # not JSON, or not UTF-8 (UnicodeDecodeError)
            continue
        if not isinstance(entry, dict):
            continue
        if "fedsparse_manifest" in entry:
            header = True
            manifest.folder_created = entry.get("folder_created") is True
        elif _safe_relative(entry.get("dir")):
            manifest.dirs.add(entry["dir"])
        elif _safe_relative(entry.get("file")):
            sha = entry.get("sha256")
            manifest.files[entry["file"]] = sha if isinstance(sha, str) else None
    return manifest if header else None


def broken_manifest(path: Path, link: str) -> str:
    """What is wrong with the manifest ``path``, a symbolic link ``link`` describes
    (:func:`fedsparse._validation.broken_link`), and what to do about it."""
    return (f"{path} is {link}, where fedsparse keeps the list of the files it wrote in "
            f"{path.parent}, so they cannot be told apart from others there; nothing was "
            "changed: put the folder's manifest back in place of the link")


def _safe_relative(rel) -> bool:
    """A relative path inside the folder: no absolute path, no ``..``, not the manifest."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel:
        return False
    parts = rel.split("/")
    return all(p not in ("", ".", "..") for p in parts) and rel != MANIFEST


def write_manifest(folder: str | Path, manifest: Manifest) -> None:
    """Write ``manifest`` into ``folder`` (atomically: a temporary file, then a rename)."""
    folder = Path(folder)
    lines = [{"fedsparse_manifest": _VERSION, "folder_created": manifest.folder_created}]
    lines += [{"dir": d} for d in sorted(manifest.dirs)]
    lines += [{"file": f, **({"sha256": h} if h else {})}
              for f, h in sorted(manifest.files.items())]
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text("".join(json.dumps(e) + "\n" for e in lines))
    os.replace(tmp, folder / MANIFEST)


def start_manifest(folder: str | Path, *, folder_created: bool) -> None:
    """Give a folder fedsparse is about to write into an empty manifest (if it has none)."""
    if read_manifest(folder) is None:
        write_manifest(folder, Manifest(folder_created=folder_created))


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


#: Bookkeeping files of fedsparse's own that never count as the user's.
BOOKKEEPING = {MANIFEST, MANIFEST + ".tmp"}
