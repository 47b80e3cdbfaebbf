"""The page of a sweep or tuning folder: the metric against the swept values, every
point (or trial), the winners and ``tuned.toml``."""

from __future__ import annotations

import csv
import datetime
from pathlib import Path

from .._validation import ConfigError, finite_number
from ..history import read_json_object
from .html_parts import (
    COLORS,
    DASHES,
    _charts_html,
    _read_toml,
    _spans,
    cell,
    esc,
    figure_files,
    fmt,
    from_file,
    image,
    page,
    section,
    table,
)

__all__ = ["sweep_page"]


#: What ``csv.DictReader`` puts in a row for the cells beyond the header's, and for
#: those a short row lacks.
_EXTRA, _MISSING = object(), object()


def _csv_rows(path: Path) -> list[dict]:
    """The rows of ``sweep.csv`` / ``trials.csv``, each cell parsed; a ConfigError names
    the file and the line of a row whose cells are not the header's."""
    rows = []
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh, restkey=_EXTRA, restval=_MISSING)
            for r in reader:
                n = len(r) - (_EXTRA in r) + len(r.get(_EXTRA, ())) \
                    - sum(v is _MISSING for v in r.values())
                if n != len(reader.fieldnames):
                    raise ConfigError(f"{path}, line {reader.line_num}: {n} cells where the "
                                      f"header has {len(reader.fieldnames)}; the file was "
                                      "not written by fedsparse or was edited since")
                rows.append({k: _parse_cell(v) for k, v in r.items()})
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a text file of comma-separated values ({exc})") from None
    except csv.Error as exc:
        raise ConfigError(f"{path}, line {reader.line_num}: not comma-separated values "
                          f"({exc})") from None
    return rows


def _parse_cell(text: str):
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def sweep_page(folder: Path, kind: str) -> str:
    """The page of the sweep or tuning folder ``folder``; a value of another shape than
    fedsparse writes raises a ConfigError naming the file that holds it (the file and the
    line for ``sweep.csv`` / ``trials.csv``; ``best.json`` for the winners, the swept
    fields and the curves' stars, read from the checked rows)."""
    where = folder / "best.json"
    best = read_json_object(where)
    rows = _csv_rows(folder / ("trials.csv" if kind == "tune" else "sweep.csv"))
    tuned_text, tuned = _read_toml(folder / "tuned.toml")
    info = read_json_object(folder / "tune.json") if (folder / "tune.json").is_file() else {}
    fields = from_file(where, _swept_fields, rows, best)
    metric = info.get("metric") or _metric_of(rows, fields)
    sections = [section("Winners", from_file(where, _best_html, best, metric), "best")]
    charts = from_file(where, _sweep_charts, rows, fields, metric, best)
    if charts:
        sections.append(section("Metric against the swept values", _charts_html(charts),
                                "curves"))
    pngs = figure_files(folder)
    if pngs:
        sections.append(section("Figures", '<div class="figures">' + "".join(
            image(p, p.stem) for p in pngs) + "</div>", "figures"))
    head = list(rows[0]) if rows else []
    body = ["<tr>" + "".join(cell(r.get(h), h) for h in head) + "</tr>" for r in rows]
    sections.append(section("Every trial" if kind == "tune" else "Every point",
                            table([h.replace("_", " ") for h in head], body, "points"),
                            "points"))
    if tuned_text:
        sections.append(section("tuned.toml", "<p class='note'><code>fedsparse run "
                                 f"{esc(folder.name)}/tuned.toml</code> reruns the winners."
                                 "</p><pre>" + esc(tuned_text) + "</pre>", "config"))
    what = "Tuning" if kind == "tune" else "Sweep"
    title = f"{what}: {tuned.get('short_title') or tuned.get('title') or folder.name}"
    up = info.get("maximize")
    meta = [("folder", folder.name), ("metric", metric or ""),
            ("direction", "" if up is None else ("maximised" if up else "minimised")),
            ("over", ", ".join(fields)), ("fedsparse", info.get("fedsparse_version", "")),
            ("sampler", info.get("sampler", "")),
            ("report", datetime.datetime.now().isoformat(timespec="minutes"))]
    return page(title, tuned.get("description", ""), meta, sections, {"charts": charts})


def _swept_fields(rows: list[dict], best: dict) -> list[str]:
    names: dict[str, None] = {}
    for b in best.values():
        for k in (b.get("params") or {}):
            names[k] = None
    if not names and rows:
        names.update({k: None for k in rows[0] if "." in k})
    return list(names)


def _metric_of(rows: list[dict], fields: list[str]) -> str | None:
    skip = {"run", "trial", "state", "diverged", "diverged_round", "n_seeds", "diverged_seeds",
            "pruned_round", *fields}
    for k in (rows[0] if rows else {}):
        if k not in skip and not k.endswith("_std"):
            return k
    return None


def _best_html(best: dict, metric: str | None) -> str:
    body = []
    for run, b in best.items():
        params = b.get("params")
        what = ", ".join(f"{k} = {v!r}" for k, v in params.items()) if params else \
            "every point diverged"
        std = f" ± {fmt(b['std'])} ({b.get('n')})" if b.get("std") is not None else ""
        body.append(f"<tr><th scope='row'>{esc(run)}</th><td>{esc(what)}</td>" +
                    cell(b.get("value"), "value")[:-5] + esc(std) + "</td>" +
                    (cell(b.get("trial"), "trial") if "trial" in b else "") + "</tr>")
    head = ["run", "best values", metric or "value"] + \
        (["trial"] if any("trial" in b for b in best.values()) else [])
    return table(head, body, "best")


def _sweep_charts(rows: list[dict], fields: list[str], metric: str | None,
                  best: dict) -> list[dict]:
    if not metric:
        return []
    charts = []
    for field in fields:
        xs = [r.get(field) for r in rows]
        if not all(finite_number(v) for v in xs):
            continue
        series = []
        for k, run in enumerate(dict.fromkeys(r.get("run") for r in rows)):
            pts = sorted([r[field], r[metric]] for r in rows
                         if r.get("run") == run and finite_number(r.get(metric)))
            if pts:
                star = (best.get(run) or {}).get("params") or {}
                starred = field in star and finite_number(best[run].get("value"))
                series.append({"name": str(run), "points": pts, "band": [],
                               "color": COLORS[k % len(COLORS)], "dash": DASHES[k % len(DASHES)],
                               "markers": True,
                               "star": [star[field], best[run]["value"]] if starred else None})
        if series:
            charts.append({"id": f"chart-{len(charts)}", "x": field, "y": metric,
                           "title": f"{metric} vs {field}", "series": series,
                           "logx": all(v > 0 for v in xs) and _spans(xs, 1.0),
                           "logy": False, "bytes": False})
    return charts
