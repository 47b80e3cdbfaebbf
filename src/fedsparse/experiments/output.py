"""The output folder of a run: never replace results silently, never leave a
half-written run unmarked, never remove or overwrite a file fedsparse did not write
(:mod:`fedsparse.manifest`).

:func:`prepare_output` makes a folder ready (refusing to mix, replace or remove results
unless told), :func:`output_guard` runs the block that writes into it and leaves either
nothing or a ``FAILED`` file saying what went wrong and how to go on.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import sys
import time
import traceback
from pathlib import Path

from .._validation import ConfigError, broken_link, expand_home, fail
from ..manifest import (
    BOOKKEEPING,
    MANIFEST,
    Manifest,
    colliding,
    describe,
    inventory,
    read_manifest,
    recording,
    remove_ours,
    start_manifest,
    write_manifest,
)
from ..manifest_file import broken_manifest
from .folder_lock import lock_folder

#: Written into every output folder a ``fedsparse run`` creates: the run's status (new,
#: running, done, failed) and how many attempts it took, in how many seconds. What
#: ``--force`` may remove is the manifest's to say (:mod:`fedsparse.manifest`), not this
#: marker's.
MARKER = ".fedsparse-run"
#: The marker and the file it is written to first, then renamed into place (a run killed
#: mid-write leaves the marker whole, which ``--resume`` needs to tell what ran there).
MARKERS = (MARKER, MARKER + ".tmp")
#: Written into the output folder when a run fails: the error and how to continue.
FAILED = "FAILED"
#: Files of a run folder (:meth:`History.save`, checkpoints).
RUN_FILES = ("history.jsonl", "history.csv", "model.npy", "checkpoint.pt", "config.json",
             "personal_models.npy")


def check_out_dir(out: str | Path, option: str = "--out") -> Path:
    """``out`` is a directory, or a path where one can be created and written to.

    Raises
    ------
    ConfigError
        when ``out`` is a file, lies under a file, or its nearest existing parent is not
        writable.
    """
    out = expand_home(option, out)
    if out.exists() and not out.is_dir():
        raise fail(option, str(out), "is a file; give a directory")
    parent = out.absolute()
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise fail(option, str(out), f"cannot be created: {str(parent)!r} is a file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise fail(option, str(out), f"cannot be written: {str(parent)!r} is not writable")
    return out


def _is_run_dir(path: Path) -> bool:
    return path.is_dir() and any((path / f).exists() for f in RUN_FILES)


def plot_names(config: dict) -> list[str]:
    """The plot files :func:`run_experiment` may write for ``config``."""
    plot = config.get("plot", {})
    return [f"{y}_vs_{x}.png" for y in dict.fromkeys([*plot.get("y", ["objective"]), "rel_error"])
            for x in plot.get("x", ["round", "bytes_total"])]


def output_patterns(config: dict, slugs: list[str]) -> list[str]:
    """Glob patterns (relative to the output folder) of every file :func:`run_experiment`
    writes for ``config`` with run folders ``slugs``: what ``--force`` and ``--resume``
    check against the files fedsparse did not write before anything starts."""
    names = ["config.toml", "summary.json", FAILED, *plot_names(config)]
    for slug in slugs:
        names += [f"{slug}/{f}" for f in RUN_FILES] + [f"{slug}/seed-*/{f}" for f in RUN_FILES]
    return names


def written_files(out: str | Path) -> list[str]:
    """Every file fedsparse wrote into ``out`` and that is there now, as its manifest
    records them (relative POSIX paths, sorted; the marker and the manifest, fedsparse's
    bookkeeping, are no results and not recorded): what a run's "wrote" line names."""
    out = Path(out)
    manifest = read_manifest(out) if out.is_dir() else None
    if manifest is None:
        return []
    return sorted(rel for rel in manifest.files
                  if rel not in (*MARKERS, *BOOKKEEPING) and (out / rel).is_file()
                  and not (out / rel).is_symlink())


def wrote_line(out: str | Path, first: list[str] = ()) -> str:
    """``wrote OUT/ : a.png, summary.json, table.txt; 12 files in run-a/, run-b/``: the
    files fedsparse wrote into ``out`` (:func:`written_files`), those directly in it by
    name (``first``, e.g. the plots, in their order, then the others by name), and those
    in folders counted, with the folders named."""
    files = written_files(out)
    top = [f for f in files if "/" not in f]
    names = [f for f in dict.fromkeys(first) if f in top] + \
        [f for f in top if f not in set(first)]
    folders = sorted({f.split("/", 1)[0] for f in files if "/" in f})
    inside = len(files) - len(top)
    text = f"wrote {out}/ : " + (", ".join(names) or "no file directly in it")
    if folders:
        text += (f"; {inside} file{'s' if inside != 1 else ''} in "
                 + ", ".join(f + "/" for f in folders))
    return text


def has_output(out: Path) -> bool:
    """``out`` holds anything besides fedsparse's bookkeeping."""
    return bool(_entries(Path(out)))


def _entries(out: Path) -> list[Path]:
    """What ``out`` holds besides fedsparse's bookkeeping (marker and manifest)."""
    if not out.is_dir():
        return []
    return [p for p in out.iterdir() if p.name not in (*MARKERS, *BOOKKEEPING)]


def _describe(out: Path, limit: int = 6) -> str:
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in _entries(out))
    more = f", ... ({len(names)} entries)" if len(names) > limit else ""
    failed = " -- a FAILED run (see its FAILED file)" if (out / FAILED).exists() else ""
    return ", ".join(names[:limit]) + more + failed


def _why_kept(inv, paths: list[str]) -> str:
    changed = set(inv.changed)
    return describe([p + (" (changed since fedsparse wrote it)" if p in changed else
                          " (not written by fedsparse)") for p in paths])


def prepare_output(out: str | Path, *, resume: bool = False, force: bool = False,
                   slugs: list[str] | None = None, resumable: bool = True,
                   writes: list[str] | None = None, identity: dict | None = None,
                   log=print) -> bool:
    """Make ``out`` ready for a run, refusing to mix, silently replace or remove results.

    * a new or empty folder is used as is (``resume`` is refused there: nothing to
      continue, most likely a mistyped ``--out``);
    * a non-empty folder is refused, unless ``resume`` (continue its runs from their
      checkpoints: ``slugs`` are the run folders of the config, and a run folder of
      another config in ``out`` is refused, since its results would be mixed with the new
      ones) or ``force`` (replace the earlier output). Both apply only to a folder with
      fedsparse's manifest; ``force`` removes exactly the files the manifest lists, unchanged
      since fedsparse wrote them, and the folders it created once they are empty. The
      user's own files and folders, and files changed since, are kept and listed (``log``).
    * either way, the run is refused before anything is removed when a kept file lies
      where the run writes (``writes``, glob patterns, :func:`output_patterns`); while it
      runs, :func:`output_guard` refuses any write to a kept file.
    * the folder is held for this process (:func:`~.folder_lock.lock_folder`) before
      anything in it is read or removed: a folder another command is writing is refused;
    * ``identity`` (the experiment's name, its number of seeds, its quick form:
      :data:`IDENTITY`; a sweep's or a tuning's folder names :data:`SWEEP` or
      :data:`TUNING` as its experiment) is kept in the folder's marker; ``resume``
      refuses a folder whose marker names other values, since the continued runs would
      be mixed with or replace results of another experiment or seed count (or of a
      search, which only its own command continues); only a larger number of seeds is
      accepted (the earlier replicates continue, the new ones are added).

    Returns
    -------
    bool
        True if ``out`` did not exist before (a failure may then remove it entirely).

    Raises
    ------
    ConfigError
        naming ``--resume`` (if ``resumable``) and ``--force`` when
        ``out`` already holds results, naming the files fedsparse did not write when
        those options cannot apply.
    """
    out = check_out_dir(out)
    if resume and force:
        raise ConfigError("--resume and --force exclude each other: --resume continues the "
                          "runs in --out, --force replaces them")
    created = not out.exists()
    if not created:  # before anything is read or removed: one command at a time
        lock_folder(out)
        _check_bookkeeping(out)
    entries = _entries(out)
    if resume and not entries:
        raise fail("--resume", str(out), ("does not exist" if created else "is empty")
                   + ": nothing to continue there (check --out; without --resume a new run "
                   "starts there)")
    if entries:
        manifest = read_manifest(out)
        if manifest is None:
            if (out / MANIFEST).exists():
                why = (f"its manifest ({MANIFEST}) of the files fedsparse wrote there is "
                       "damaged (no header), so what is fedsparse's cannot be told apart")
            else:
                older = ("; its status marker is from an earlier fedsparse that kept no "
                         "manifest" if (out / MARKER).exists() else "")
                why = f"there is no manifest ({MANIFEST}) of files fedsparse wrote here{older}"
            raise fail("--out", str(out), f"holds files fedsparse did not write "
                       f"({_describe(out)}): {why}, so --resume and --force do not apply: "
                       "nothing was changed; choose an empty or new folder")
        if not (resume or force):
            how = ("continue them with --resume, replace them with --force"
                   if resumable else "replace them with --force")
            raise fail("--out", str(out), f"already holds results ({_describe(out)}); "
                       f"{how}, or choose another --out")
        if (out / MARKER).is_dir() and not (out / MARKER).is_symlink():
            # the run rewrites its status marker there: --force would otherwise remove
            # the earlier results first, then fail on the folder, leaving neither run
            raise fail("--out", str(out), f"holds a folder {MARKER}/, where fedsparse "
                       "keeps the status of its runs (fedsparse did not write it); nothing "
                       "was removed: move it out of the folder or choose another --out")
        inv = inventory(out, manifest, bookkeeping=set(MARKERS))
        blocked = colliding(inv.kept, writes or [])
        if blocked:
            raise fail("--out", str(out), "this run would write over what fedsparse did not "
                       f"write: {_why_kept(inv, blocked)}; nothing was removed: move them out "
                       "of the folder or choose another --out")
        if force:
            remove_ours(out, inv)
            for name in MARKERS:
                (out / name).unlink(missing_ok=True)
            # the folders fedsparse created and that remain (they hold a user's file) stay
            # fedsparse's: the new run writes into them, around the kept file
            write_manifest(out, Manifest(folder_created=manifest.folder_created,
                                         dirs={d for d in manifest.dirs
                                               if (out / d).is_dir()}))
            if inv.kept:
                log(f"--force: removed the earlier output fedsparse wrote in {out}; kept "
                    f"{_why_kept(inv, inv.kept)}")
        else:
            _check_same_identity(out, identity or {})
            stale = [] if slugs is None else sorted(
                p.name for p in out.iterdir() if _is_run_dir(p) and p.name not in slugs)
            if stale:
                raise fail("--resume", str(out), f"holds runs this config does not have "
                           f"({', '.join(stale)}), which would be mixed with its results; "
                           "use --force to replace them or choose another --out")
    try:
        out.mkdir(parents=True, exist_ok=True)
        lock_folder(out)
        start_manifest(out, folder_created=created)
        if not marker_info(out):  # an existing one keeps the earlier run's status (and
            # an older one without an identity stays without: it cannot be told)
            _write_marker(out, "new", **(identity or {}))
    except OSError as exc:
        raise fail("--out", str(out), f"cannot be written: {exc.strerror}") from None
    return created


def _check_bookkeeping(out: Path) -> None:
    """Refuse a folder whose manifest or status marker is a symbolic link that leads to
    no file (reading it failed with "Too many levels of symbolic links", or it read as
    missing), and one whose marker is a link to a file: every run rewrites its marker,
    and would write through the link into that file, wherever it is."""
    manifest, marker = out / MANIFEST, out / MARKER
    link = broken_link(manifest)
    if link:
        raise fail("--out", str(out), f"{broken_manifest(manifest, link)}, or choose another "
                   "--out")
    link = broken_link(marker)
    if link is None and marker.is_symlink() and not marker.is_dir():  # a folder: refused
        # by prepare_output, as one that is no link
        link = f"a symbolic link to {os.readlink(marker)!r}, which a run would write over"
    if link:
        raise fail("--out", str(out), f"{marker} is {link}; fedsparse keeps the status of "
                   "its runs there, in a file of its own: nothing was changed; remove the "
                   "link, or choose another --out")


def attempts_so_far(out: str | Path) -> tuple[int, float]:
    """(attempts, seconds): how many runs into ``out`` have ended (finished, failed or
    interrupted) and their wall clock in all, as its marker records; (0, 0.0) when none
    is recorded. A run continued with ``--resume`` thus keeps the time of every part."""
    try:
        return _recorded_attempts((Path(out) / MARKER).read_text())
    except OSError:  # no marker
        return 0, 0.0


def _recorded_attempts(marker: str | None) -> tuple[int, float]:
    """(attempts, seconds) in a marker's text; (0, 0.0) for none or one not ours."""
    try:
        info = json.loads(marker)
        return int(info.get("attempts", 0)), float(info.get("seconds", 0.0))
    except (ValueError, TypeError, AttributeError, OverflowError):  # OverflowError: an
        # edited marker's Infinity (no int) or a number of 400 digits (no float)
        return 0, 0.0


#: What a run folder's marker records of the experiment that writes it, for ``--resume``
#: to refuse another one (see :func:`prepare_output`).
IDENTITY = ("experiment", "seeds", "quick")


def marker_info(out: Path) -> dict:
    """The folder's marker as a dict ({} when there is none, or it is not ours)."""
    try:
        info = json.loads((out / MARKER).read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def more_seeds(old, new) -> bool:
    """More replicates of the same runs: the earlier seeds continue from their
    checkpoints and the new ones are added (how a long run is split by seed)."""
    return isinstance(old, int) and isinstance(new, int) and new > old


#: What a run folder's marker records as the experiment of a TOML config, which
#: ``--resume`` compares: not its file name (a renamed copy, or the run folder's own
#: config.toml, is the same experiment); the run folders' names tell its runs apart.
TOML_CONFIG = "a TOML config"

#: What a TOML experiment's marker records besides of the config it was started from:
#: the named experiment or the file's resolved path (``config``) and the SHA-256 of the
#: file's bytes (``config_sha256``). Recorded to say which config made the folder, not
#: compared by ``--resume`` (for the reasons of :data:`TOML_CONFIG`; a folder written
#: before they were recorded has neither).
SOURCE = ("config", "config_sha256")

#: What the marker of a ``fedsparse sweep`` and a ``fedsparse tune`` folder records as its
#: experiment, with the command that wrote it: only that command continues the search
#: (``--resume``), and a run continued there would be mixed with its results.
SWEEP, TUNING = "a sweep", "a tuning"
SEARCHES = {SWEEP: "fedsparse sweep", TUNING: "fedsparse tune"}


def said(key: str, value) -> str:
    """An identity value as a message names it: a named experiment quoted, a TOML
    config (:data:`TOML_CONFIG`), a sweep or a tuning (:data:`SEARCHES`) in plain words,
    no seeds as "none", ``quick`` as on/off."""
    if value == TOML_CONFIG or value in SEARCHES:
        return value
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value) if key == "seeds" else repr(value)


def _check_same_identity(out: Path, identity: dict) -> None:
    """Refuse to continue the runs in ``out`` as another experiment, seed count or form;
    more seeds than before is allowed (the marker then records the new count)."""
    recorded = marker_info(out)
    if not recorded and os.path.lexists(out / MARKER):
        # what ran there cannot be told: continuing would mix this command's runs with
        # whatever they are (a sweep's, another experiment's), as an intact marker refuses
        raise fail("--resume", str(out), f"has a damaged status marker {MARKER} (not the "
                   "JSON object fedsparse writes), so what ran there cannot be told and "
                   "this command's runs could be mixed with another's; use --force to "
                   "replace them, or choose another --out")
    search = recorded.get("experiment")
    if search in SEARCHES and identity.get("experiment") != search:
        raise fail("--resume", str(out), f"holds the results of {search} "
                   f"({SEARCHES[search]}), not what this command continues: its results "
                   f"would be mixed with them; continue it with {SEARCHES[search]} ... "
                   "--resume, use --force to replace them or choose another --out")
    differ = {k: (recorded[k], v) for k, v in identity.items()
              if k in IDENTITY and k in recorded and recorded[k] != v
              and not (k == "seeds" and more_seeds(recorded[k], v))}
    if not differ and more_seeds(recorded.get("seeds"), identity.get("seeds")):
        _record_seeds(out, recorded, identity["seeds"])
    if differ:
        source = f" ({recorded['config']})" if isinstance(recorded.get("config"), str) else ""
        changes = ", ".join(f"{k} {said(k, old)}{source if old == TOML_CONFIG else ''} "
                            f"there, {said(k, new)} now" for k, (old, new) in differ.items())
        raise fail("--resume", str(out), f"holds the runs of another experiment or setting "
                   f"({changes}), which this one would mix with or replace; continue them with "
                   "the command that started them, or use --force to replace them, or "
                   "choose another --out")


def _record_seeds(out: Path, recorded: dict, seeds: int) -> None:
    """Rewrite the marker ``recorded`` with ``seeds``, keeping the rest of it."""
    kept = {k: v for k, v in recorded.items() if k not in ("status", "time")}
    _write_marker(out, str(recorded.get("status", "new")), **{**kept, "seeds": seeds})


def record_default_seeds(out: Path, identity: dict, default: int) -> None:
    """Where the marker in ``out`` records the runs of ``identity``'s experiment and form
    without a number of seeds (written before the experiment declared that it runs
    ``default`` seeds unless told, which its runs then did), record ``default``."""
    recorded = marker_info(out)
    if (recorded.get("seeds", 0) is None
            and all(recorded.get(k) == identity.get(k) for k in ("experiment", "quick"))):
        _record_seeds(out, recorded, default)


def _write_marker(out: Path, status: str, **extra) -> None:
    kept = {k: v for k, v in marker_info(out).items() if k in IDENTITY or k in SOURCE}
    info = {"status": status, "time": datetime.datetime.now().isoformat(timespec="seconds"),
            **kept, **extra}
    _put_marker(out, json.dumps(info, indent=2) + "\n")


def _put_marker(out: Path, text: str) -> None:
    """Write the marker's ``text`` whole: into its temporary file, renamed into place."""
    tmp = out / MARKERS[1]
    tmp.write_text(text)
    os.replace(tmp, out / MARKER)


@contextlib.contextmanager
def output_guard(out: str | Path, *, created: bool, resume_command: str | None = None,
                 rerun_command: str | None = None):
    """Run a block that writes into ``out``: record what it writes in the manifest, refuse
    writes to files fedsparse did not write, and mark ``out`` done when the block succeeds.
    When it raises, remove what it wrote if that is nothing but bookkeeping, or else write
    ``out/FAILED`` with the error and how to go on; the block's own exception is what
    propagates, whatever happens while marking the folder.

    Parameters
    ----------
    created : ``out`` did not exist before the run (from :func:`prepare_output`): a
        failure before any result is written then removes the folder itself.
    resume_command : the exact command that continues the run (``... --resume``), or
        None if it cannot be resumed.
    rerun_command : the exact command that starts it again.
    """
    out = Path(out).expanduser()
    before = _snapshot(out)
    marker = (out / MARKER).read_text() if (out / MARKER).exists() else None
    attempts, seconds = _recorded_attempts(marker)
    tic = time.perf_counter()

    def timing() -> dict:  # this attempt added to the earlier ones
        return {"attempts": attempts + 1, "seconds": seconds + time.perf_counter() - tic}

    if not out.is_dir():
        yield out
        return
    start_manifest(out, folder_created=created)
    protect = inventory(out, read_manifest(out), bookkeeping=set(MARKERS)).kept
    with recording(out, protect=protect, ignore=set(MARKERS)) as written:
        _write_marker(out, "running", attempts=attempts, seconds=seconds)
        try:
            yield out
        except BaseException as exc:
            if isinstance(exc, MemoryError):  # free what the failed frames still hold,
                traceback.clear_frames(exc.__traceback__)  # so the folder can be marked
            try:
                if before and _snapshot(out) == before:
                    # refused before writing anything (e.g. a checkpoint of another run on
                    # --resume): the earlier results stay exactly as they were
                    if marker is not None:
                        _put_marker(out, marker)
                else:
                    _mark_failed(out, exc, created=created, written=written,
                                 resume_command=resume_command, rerun_command=rerun_command,
                                 timing=timing())
            except Exception as problem:  # out of memory, a full disk: the cause is exc
                reason = getattr(problem, "strerror", None) or problem
                print(f"fedsparse: note: could not mark {out} as failed ({reason})",
                      file=sys.stderr)
            raise
        (out / FAILED).unlink(missing_ok=True)
        _write_marker(out, "done", **timing())


def _snapshot(out: Path) -> dict:
    """{file: (size, modification time)} of everything in ``out`` but the bookkeeping
    (marker, manifest)."""
    if not out.is_dir():
        return {}
    skip = {*(out / m for m in MARKERS), *(out / b for b in BOOKKEEPING)}
    return {p: (st.st_size, st.st_mtime_ns) for p in out.rglob("*")
            if p.is_file() and p not in skip for st in [p.stat()]}


#: Files a failed run may have written that are no results (a run that wrote only these
#: leaves no trace).
_NO_RESULTS = {"config.toml", FAILED}


def failed_text(what: str, *, resume_command: str | None, rerun_command: str | None) -> str:
    """The ``FAILED`` file's text: what went wrong and the exact command to go on with."""
    where = f"(from the folder {os.getcwd()})"
    if resume_command:
        how = (f"The runs that finished are complete; the others may be partial. Continue "
               f"(a run from its checkpoints, a sweep or tuning from the runs it finished) "
               f"with\n\n    {resume_command}\n\n{where}, or start "
               "over by writing --force instead of --resume.\n")
    elif rerun_command:
        how = f"Start it again with\n\n    {rerun_command}\n\n{where}.\n"
    else:
        how = ("The runs that finished are complete; the others may be partial. Continue "
               "with the same command and --resume, or start over with --force.\n")
    return f"This run did not finish: {what}\n\n{how}"


def _what(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    if isinstance(exc, MemoryError):
        return "out of memory (MemoryError)"
    return f"{type(exc).__name__}: {exc}"


def _mark_failed(out: Path, exc: BaseException, *, created: bool, written=None,
                 resume_command: str | None = None, rerun_command: str | None = None,
                 timing: dict | None = None) -> None:
    """Write ``out/FAILED`` (the error, the command that goes on) and mark the folder
    failed, with ``timing`` (attempts and seconds so far); or, when the block wrote
    nothing but bookkeeping (``written``: what :func:`fedsparse.manifest.recording` saw;
    None = judge by what the folder holds), remove that and, if the run created the
    folder, the folder."""
    if not out.is_dir():
        return
    files = set(written.files) if written is not None else set()
    results = bool(files - _NO_RESULTS) if written is not None else \
        any(p.name not in _NO_RESULTS for p in _entries(out))  # unknown: what is there
    if not results:  # no result written yet: leave no trace
        for rel in files:
            (out / rel).unlink(missing_ok=True)
        for rel in sorted(written.dirs if written is not None else (),
                          key=lambda d: d.count("/"), reverse=True):
            with contextlib.suppress(OSError):
                (out / rel).rmdir()
        if _entries(out):  # the user's files (or an earlier run's): the folder stays
            _write_marker(out, "failed", error=_what(exc), **(timing or {}))
            return
        for name in (*MARKERS, *BOOKKEEPING):  # the folder is empty again
            (out / name).unlink(missing_ok=True)
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()
        return
    what = _what(exc)
    detail = "" if isinstance(exc, ConfigError | KeyboardInterrupt | MemoryError) else \
        "\n" + "".join(traceback.format_exception(exc))
    (out / FAILED).write_text(failed_text(what, resume_command=resume_command,
                                          rerun_command=rerun_command) + detail)
    _write_marker(out, "failed", error=what, **(timing or {}))
