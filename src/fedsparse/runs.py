"""Read what ``fedsparse run`` wrote back into Python.

>>> import fedsparse as fs
>>> runs = fs.load_run("runs/fedht-default")        # {label: History}
>>> runs["FedIter-HT"].to_pandas()                   # doctest: +SKIP
>>> runs["FedIter-HT"].plot("objective", x="bytes_total")   # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path, PurePath

from ._validation import ConfigError, fail, shown
from .history import History, read_json_object


def load_run(directory: str | Path) -> dict[str, History]:
    """The Histories of a ``fedsparse run`` output folder, by run label.

    Parameters
    ----------
    directory : the folder given to ``fedsparse run --out`` (holding ``summary.json``,
        ``config.toml`` and one sub-folder per run with ``history.jsonl``), or a folder
        holding one ``history.jsonl`` itself: the output of ``fedsparse flower demo`` or
        of a Flower job's ``flower.out_dir``.

    Returns
    -------
    dict[str, History]
        ``{label: History}`` in the order of the config's runs; where one label appears
        in several panels, the key is ``"panel / label"``. Each History's ``config`` holds
        the run's hyper-parameters (summary.json ``params``) plus ``label``, ``panel``,
        ``diverged`` and ``diverged_round``. A run made with ``--seeds`` is the mean over
        its seeds, with the per-seed Histories in ``History.seeds``.
        Without a summary.json (a run that did not finish), every sub-folder holding a
        ``history.jsonl`` is read, keyed by folder name; a folder that holds a
        ``history.jsonl`` itself (a Flower run) gives ``{folder name: History}``.

    Raises
    ------
    ConfigError
        when ``directory`` does not exist or holds no run.
    """
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise fail("directory", str(directory), "must be a folder written by fedsparse run")
    summary_path = directory / "summary.json"
    summary = read_json_object(summary_path) if summary_path.exists() else {}
    rows = [row for row in summary_rows(directory, summary) if "dir" in row]
    if not rows and (directory / "history.jsonl").is_file():
        return {directory.resolve().name: History.load(directory)}
    if not rows:  # unfinished, or a Python experiment whose summary is its own table
        found = {p.name: _load(p) for p in sorted(directory.iterdir())
                 if (p / "history.jsonl").exists()}
        if not found:
            raise fail("directory", str(directory), "holds neither a summary.json that "
                       "lists its runs nor a history.jsonl, nor run folders with one: it is "
                       "not a fedsparse run folder")
        return found
    labels = [r["label"] for r in rows]
    out: dict[str, History] = {}
    for row in rows:
        key = row["label"] if labels.count(row["label"]) == 1 else \
            f"{row.get('panel', '')} / {row['label']}"
        history = _load(directory / row["dir"], row.get("seeds"))
        history.config = {**row.get("params", {}), "label": row["label"],
                          "panel": row.get("panel", ""), "diverged": row.get("diverged"),
                          "diverged_round": row.get("diverged_round"),
                          **({"seeds": history.config["seeds"],
                              "diverged_seeds": history.config["diverged_seeds"]}
                             if history.seeds else {})}
        out[key] = history
    return out


def summary_rows(directory: Path, summary: dict) -> list[dict]:
    """The ``runs`` of a run folder's ``summary.json`` that are objects (none where
    ``runs`` is not a list: a Python experiment's own table), each checked to name its own
    sub-folder: a ``dir`` (where given) that is a relative path inside ``directory`` (an
    edited or foreign summary must not point the reader at another run's files), a string
    label, a string panel and an object of params where given, a panel and label that no
    other run has (:func:`load_run` keys the runs by them) and whole-number seeds.

    Raises
    ------
    ConfigError
        naming summary.json, the entry and what is allowed.
    """
    where = directory / "summary.json"
    rows = summary.get("runs", [])
    if not isinstance(rows, list):  # a Python experiment's own table (scale-million's)
        return []
    seen: dict[tuple, int] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or "dir" not in row:
            continue  # a Python experiment's own table: its rows name no folder
        folder = row["dir"]
        if not isinstance(folder, str) or not folder or PurePath(folder).is_absolute() \
                or ".." in PurePath(folder).parts:
            raise ConfigError(f"{where}: runs[{i}].dir={folder!r} is invalid: must be the "
                              f"name of a folder inside {directory}")
        if not isinstance(row.get("label"), str):
            raise ConfigError(f"{where}: runs[{i}].label={row.get('label')!r} is invalid: "
                              "must be a string")
        if not isinstance(row.get("panel", ""), str):
            raise ConfigError(f"{where}: runs[{i}].panel={shown(row['panel'])} is invalid: "
                              "must be a string")
        if not isinstance(row.get("params", {}), dict):
            raise ConfigError(f"{where}: runs[{i}].params={shown(row['params'])} is invalid: "
                              "must be an object of the run's parameters")
        key = (row.get("panel", ""), row["label"])
        if key in seen:
            raise ConfigError(f"{where}: runs[{i}] is invalid: it shares panel and label "
                              f"{key!r} with runs[{seen[key]}]; a run folder's runs have "
                              "one each")
        seen[key] = i
        seeds = row.get("seeds")
        listed = seeds.get("seeds", []) if isinstance(seeds, dict) else None
        if seeds is not None and not (isinstance(listed, list) and all(
                isinstance(s, int) and not isinstance(s, bool) for s in listed)):
            raise ConfigError(f"{where}: runs[{i}].seeds is invalid: must be an object "
                              "whose seeds are a list of whole numbers")
    return [row for row in rows if isinstance(row, dict)]


def _load(run_dir: Path, seeds: dict | None = None) -> History:
    """One run folder; with ``seeds`` (summary.json's entry) its ``seed-<s>`` folders too."""
    history = History.load(run_dir)
    if seeds:
        history.seeds = []
        for s in seeds.get("seeds", []):
            h = History.load(run_dir / f"seed-{s}")
            h.config = {"seed": s}
            history.seeds.append(h)
        history.config = {"seeds": seeds.get("seeds", []),
                          "diverged_seeds": seeds.get("diverged_seeds", [])}
    return history
