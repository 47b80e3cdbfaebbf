"""What a sweep or a tuning has finished, kept on disk as it finishes, so that a stopped
search continues where it stopped (``fedsparse sweep ... --resume``, ``fedsparse tune
... --resume``; ``resume=True`` in Python).

The record is ``finished.jsonl`` in the search's output folder: JSON lines, the first
naming the search and its settings (the config, the grid or the space, the metric, the
seeds, ...), then one line per finished run: its key (the run, the grid point or the
trial and its values, the replicate) and what the search compares of it. Each line is
written whole, with one write, flushed and synced before the search goes on, so a
search stopped at any moment (Ctrl-C, ``kill -9``, a preempted machine) leaves every
earlier line intact; a last line cut short by the stop is dropped when the search
continues. Nothing is written before the first run finishes (or, with trackers, opens
them): a search stopped before then leaves no record, and starts again from nothing.

A search with experiment trackers (``--log``) also keeps, as each run opens its tracker
runs, what identifies them (a line ``{"started": key, "trackers": [...]}``, the
identities a checkpoint keeps: :meth:`fedsparse.loggers.Tracking.identities`; the
header is written before the first run starts). A search's runs keep no checkpoint, so a
run stopped mid-run is run again from round 0 when the search continues; it then
continues those tracker runs (:meth:`SearchRecord.trackers`) as ``fedsparse run
--resume`` continues a run's, rather than opening a second run of the same name in each
tracker. The record has no checksum, as a checkpoint has: a "started" line whose
trackers are not what fedsparse writes, or a tracker run named for two runs of the
search (one would be logged into the other's), is refused, naming the lines.

Continuing reads the record back and refuses one whose settings differ from the
search's, naming what differs (its results would be mixed with another search's). A run
whose key is in the record is not run again: its result is read back, so the search's
files are those of a search that was never stopped.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from .._validation import ConfigError, fail, shown

#: The record's file name in a search's output folder.
RECORD = "finished.jsonl"
#: Differences a refusal names before it says how many more there are.
_SHOWN = 4


def canonical(obj) -> str:
    """``obj`` as the record's JSON text with sorted keys: equal for a value and the
    value read back (a tuple reads back as a list, a TOML date as its text)."""
    return json.dumps(obj, sort_keys=True, default=repr)


class SearchRecord:
    """The finished runs of one search in ``out`` (nothing kept when ``out`` is None).

    Parameters
    ----------
    out : the search's output folder, or None (the results are returned only).
    kind : "sweep" or "tuning", as messages name the search.
    settings : what a continued search must share with the stopped one (JSON-able).
    resume : continue the search recorded in ``out``; otherwise a record there is refused.
    results : the files the search writes at its end: a folder holding any of them but no
        record is refused on ``resume`` (a search from a fedsparse that kept none: there
        is nothing to continue from, and they would be replaced).
    open_values : the name of a ``settings`` entry, a dict, whose values a continued
        search may change as long as its keys stay (a sweep's grid: other values of the
        same fields are other points, whose runs are run; the runs of the points it
        keeps are read back).
    may_change : {name of a ``settings`` entry: ``check(there, now)``}: the entry may
        differ where ``check`` returns None; otherwise it returns why not, which the
        refusal adds (a tuning's trials: more trials, whose first ones are those of
        the recorded tuning).

    Raises
    ------
    ConfigError
        naming ``out`` for a record of another search, a damaged record, a record there
        without ``resume``, or results but no record with ``resume``; naming ``resume``
        when ``out`` is None.
    """

    def __init__(self, out: str | Path | None, kind: str, settings: dict, *,
                 resume: bool = False, results: tuple[str, ...] = (),
                 open_values: str | None = None, may_change: dict | None = None) -> None:
        if not isinstance(resume, bool):
            raise fail("resume", resume, "must be True or False")
        if resume and out is None:
            raise fail("resume", resume, f"needs out, the folder of the stopped {kind}")
        self.kind = kind
        self.path = None if out is None else Path(out) / RECORD
        self.settings = json.loads(canonical(settings))
        self.open_values = open_values
        self.may_change = may_change or {}
        self._results: dict[str, dict] = {}
        #: {run key: the tracker runs it opened}, as :meth:`note_trackers` kept them.
        self._trackers: dict[str, list] = {}
        self._started = False  # the header line is in the file
        if self.path is None:
            return
        lines, length = self._read()
        if lines and not resume:
            raise fail("out", str(out), f"holds a {kind} that was stopped or finished (its "
                       f"record of finished runs, {RECORD}), which would be replaced; "
                       "continue it with resume=True (--resume on the command line), or "
                       "choose another folder")
        if resume:
            self._load(out, lines, results)
        if self.path.exists() and self.path.stat().st_size != length:
            with open(self.path, "r+b") as fh:  # a line cut short by a stop
                fh.truncate(length)

    def _load(self, out, lines: list[dict], results: tuple[str, ...]) -> None:
        """Read the record's ``lines`` back, refusing another search's (checked before
        anything in ``out`` changes)."""
        if not lines:
            found = [name for name in results if (Path(out) / name).exists()]
            if found:
                raise fail("out", str(out), f"holds the results of a {self.kind} "
                           f"({', '.join(found)}) but no record of its finished runs "
                           f"({RECORD}: a fedsparse that kept none wrote them): there is "
                           "nothing to continue from; replace them (--force, or remove "
                           "them) or choose another folder")
            return
        self._check_header(out, lines[0])
        owners: dict[tuple[str, str], tuple[int, str]] = {}  # a tracker run: its line, run
        for number, line in enumerate(lines[1:], start=2):
            if "started" in line:
                self._trackers[canonical(line.get("started"))] = \
                    self._checked_trackers(out, number, line, owners)
                continue
            if not isinstance(line.get("key"), dict) or not isinstance(line.get("result"), dict):
                raise self._damaged(out, number)
            self._results[canonical(line["key"])] = line["result"]
        self._started = True

    def _checked_trackers(self, out, number: int, line: dict,
                          owners: dict[tuple[str, str], tuple[int, str]]) -> list:
        """The tracker runs of the ``"started"`` line ``number``, checked: the runs a
        continued search reopens must be what :meth:`fedsparse.loggers.Tracking.identities`
        wrote, and each tracker run (in ``owners``: its first line and run key) one
        run's. The record, unlike a checkpoint, carries no checksum: a hand-edited or
        damaged line would otherwise have a run log into another run's tracker run (the
        trackers check only that the run is in the same experiment or project)."""
        from ..loggers.tracking import RUN_NAMED_BY, is_identity

        key, trackers = line["started"], line.get("trackers")
        if not isinstance(key, dict) or not isinstance(trackers, list) or \
                not all(is_identity(t) for t in trackers):
            raise fail("out", str(out), f"line {number} of its {RECORD} is not a record "
                       "fedsparse writes (changed since?): a \"started\" line names a run "
                       "(a dict) and its \"trackers\", a list of {\"kind\": ..., ...} of "
                       f"strings, so the {self.kind} cannot be continued; remove the line "
                       "(the run then opens new tracker runs), or replace the "
                       f"{self.kind} (--force, or remove it), or choose another folder")
        for entry in trackers:
            field = RUN_NAMED_BY.get(entry["kind"])
            if field is None or field not in entry:
                continue
            run = (entry["kind"], entry[field])
            first, owner = owners.setdefault(run, (number, canonical(key)))
            if owner != canonical(key):
                raise fail("out", str(out), f"lines {first} and {number} of its {RECORD} "
                           f"give two runs of the {self.kind} one {entry['kind']} run "
                           f"({field} {shown(entry[field])}), which fedsparse never does "
                           "(changed since?): continuing would log one run into the "
                           "other's; remove the line of the run that did not open it, or "
                           f"replace the {self.kind} (--force, or remove it), or choose "
                           "another folder")
        return trackers

    def _read(self) -> tuple[list[dict], int]:
        """The record's complete lines and their length in bytes (a last line without
        its newline was cut short by a stop, and is not counted)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return [], 0
        except OSError as exc:
            raise fail("out", str(self.path.parent), f"its {RECORD} cannot be read: "
                       f"{exc.strerror}") from None
        length = data.rfind(b"\n") + 1
        lines = []
        for number, text in enumerate(data[:length].splitlines(), start=1):
            try:
                line = json.loads(text)
            except ValueError:
                line = None
            if not isinstance(line, dict):
                raise self._damaged(self.path.parent, number)
            lines.append(line)
        return lines, length

    def _damaged(self, out, number: int) -> ConfigError:
        return fail("out", str(out), f"line {number} of its {RECORD} is not a record "
                    f"fedsparse writes (changed since?), so the {self.kind} cannot be "
                    "continued; replace it (--force, or remove it) or choose another folder")

    def _check_header(self, out, header: dict) -> None:
        if header.get("search") != self.kind or not isinstance(header.get("settings"), dict):
            raise fail("out", str(out), f"its {RECORD} records a "
                       f"{header.get('search', 'search')!s}, not a {self.kind}: continue it "
                       "with the command that started it, or replace it (--force, or remove it)")
        saved, now = header["settings"], self.settings
        open_entry = self.open_values
        if (open_entry is not None and isinstance(saved.get(open_entry), dict)
                and isinstance(now.get(open_entry), dict)
                and set(saved[open_entry]) == set(now[open_entry])):
            saved = {**saved, open_entry: now[open_entry]}  # other values: other points
        reasons = []
        for name, check in self.may_change.items():
            if name in saved and name in now and canonical(saved[name]) != canonical(now[name]):
                why = check(saved[name], now[name])
                if why is None:
                    saved = {**saved, name: now[name]}
                else:
                    reasons.append(why)
        differ = differences(saved, now)
        if differ:
            more = len(differ) - _SHOWN
            text = "; ".join(f"{path}: {canonical(old)} there, {canonical(new)} now"
                             for path, old, new in differ[:_SHOWN])
            text += f"; and {more} more" if more > 0 else ""
            why = "".join(f" ({reason})" for reason in reasons)
            raise fail("out", str(out), f"holds a {self.kind} of other settings ({text}), "
                       f"whose results this {self.kind} would mix with its own{why}; "
                       "continue it with the settings that started it, or replace it "
                       "(--force, or remove it), or choose another folder")

    def __len__(self) -> int:
        return len(self._results)

    def keys(self) -> list[dict]:
        """The keys of the runs whose results are recorded."""
        return [json.loads(key) for key in self._results]

    def result(self, key: dict) -> dict | None:
        """The result recorded for ``key``, or None if that run has not finished."""
        return self._results.get(canonical(key))

    def add(self, key: dict, result: dict) -> None:
        """Keep ``result`` of the run ``key``: one line, written and synced at once."""
        self._results[canonical(key)] = result
        self._append({"key": key, "result": result})

    def trackers(self, key: dict) -> list | None:
        """The tracker runs the run ``key`` opened in an earlier attempt of the search
        (:meth:`fedsparse.loggers.Tracking.identities`), or None if it opened none."""
        return self._trackers.get(canonical(key))

    def tracker_note(self, key: dict):
        """A ``note(identities)`` that keeps the tracker runs the run ``key`` opens (a
        function of this module: it may be called in a worker process); None where
        nothing is kept (no ``out``). Writes the record's header first, if not yet
        written, so that a worker's line follows it."""
        if self.path is None:
            return None
        self._append(None)
        return functools.partial(note_trackers, self.path, key)

    def _append(self, line: dict | None) -> None:
        """Append ``line`` (the header before it, if not yet written): one write, synced."""
        if self.path is None:
            return
        lines = [] if self._started else [{"search": self.kind, "settings": self.settings}]
        if line is not None:
            lines.append(line)
        if lines:
            _write_lines(self.path, lines)
        self._started = True


def note_trackers(path: Path, key: dict, identities: list) -> None:
    """Keep in the record ``path`` the tracker runs the run ``key`` opened (a line
    appended with one write: the lines of parallel workers do not mix)."""
    _write_lines(path, [{"started": key, "trackers": identities}])


def _write_lines(path: Path, lines: list[dict]) -> None:
    text = "".join(json.dumps(line, default=repr) + "\n" for line in lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def differences(old, new, path: str = "") -> list[tuple[str, object, object]]:
    """``(path, old value, new value)`` of every place where two JSON values differ:
    keys of dicts (``a.b``, or ``a['b.c']`` for a key with a dot) and indices of lists
    of equal length (``a[0]``) are followed."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in list(old) + [k for k in new if k not in old]:
            where = (f"{path}[{key!r}]" if "." in str(key) else f"{path}.{key}") if path \
                else str(key)
            found += differences(old.get(key), new.get(key), where) \
                if key in old and key in new else [(where, old.get(key), new.get(key))]
        return found
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for k, (a, b) in enumerate(zip(old, new, strict=True))
                for d in differences(a, b, f"{path}[{k}]")]
    return [] if canonical(old) == canonical(new) else [(path or "settings", old, new)]
