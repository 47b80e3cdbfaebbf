"""The page of a run folder: title and claim, verdicts, comparisons, the final values
of every run (mean ± std over seeds where it has seeds), curves, figures, every round,
the seeds and their spread, and the resolved config."""

from __future__ import annotations

import datetime
import json
import warnings
from pathlib import Path

import numpy as np

from .._validation import finite_number
from ..history import read_json_object, read_records
from ..runs import summary_rows
from .axes import band_halfwidth
from .html_parts import (
    COLORS,
    DASHES,
    _charts_html,
    _read_toml,
    _spans,
    cell,
    details,
    esc,
    figure_files,
    fmt,
    from_file,
    image,
    page,
    section,
    table,
)

__all__ = ["SUMMARY_FIELDS", "run_page"]

#: Final values shown in a run folder's table, in this order (those some run has).
SUMMARY_FIELDS = ("rounds", "objective", "rel_error", "support_f1", "accuracy",
                  "test_accuracy", "density", "bytes_total", "elapsed")
#: The style of each claim verdict's badge.
_VERDICT_CLASS = {"holds": "holds", "does not hold": "fails", "not tested here": "untested"}


def _records(run_dir: Path) -> list[dict]:
    path = run_dir / "history.jsonl"
    return read_records(path) if path.is_file() else []


def _numeric_fields(records: list[dict]) -> list[str]:
    names: dict[str, None] = {}
    for r in records:
        for k, v in r.items():
            if finite_number(v):
                names[k] = None
    return list(names)


def run_page(folder: Path) -> str:
    """The page of the run folder ``folder``; a value of another shape than fedsparse
    writes raises a ConfigError naming the file that holds it (``summary.json`` for the
    claims, tables and seeds, ``config.toml`` for the curves' ``[plot]`` table; a
    ``history.jsonl`` is checked line by line as it is read)."""
    where = folder / "summary.json"
    summary = read_json_object(where)
    config_text, config = _read_toml(folder / "config.toml")
    rows = summary_rows(folder, summary)
    title = summary.get("title") or config.get("title") or folder.name
    histories = {i: _records(folder / r["dir"]) for i, r in enumerate(rows) if "dir" in r}
    sections = []
    missing = [r for r in rows if "dir" in r and not (folder / r["dir"] / "history.jsonl")
               .is_file()]
    if missing:  # said on the page and to the reader, not left out without a word
        names = ", ".join(f"{r['label']} ({r['dir']}/)" for r in missing)
        warnings.warn(f"{folder}: no history.jsonl for {names}; the report shows their final "
                      "values from summary.json, without their curves and rounds",
                      stacklevel=2)
        sections.append(section("Missing histories", "<p class='note'>No history.jsonl for "
                                f"{esc(names)}: their curves and rounds are not shown.</p>",
                                "missing"))
    claim = summary.get("paper_claim") or config.get("paper_claim")
    if claim or summary.get("claims"):
        sections.append(section("The paper's claims", from_file(where, _claims_html, claim,
                                                                summary), "claims"))
    if rows:
        sections.append(section("Final values", from_file(where, _summary_table, rows),
                                "summary"))
    if summary.get("comparisons"):
        sections.append(section("Rounds to reach the reference", from_file(
            where, _comparisons_html, summary["comparisons"]), "comparisons"))
    # the runs' labels and panels are checked (summary_rows) and their records too
    # (read_records): what else the curves read is the config's [plot] table
    charts = from_file(folder / "config.toml", _charts, rows, histories, config)
    if charts:
        shaded = ("" if not any(s["band"] for c in charts for s in c["series"]) else
                  "<p class='note'>Shaded: " + _BAND_NOTES[_band(config)] + ".</p>")
        sections.append(section("Curves", shaded + _charts_html(charts), "curves"))
    pngs = figure_files(folder, summary.get("plots")) or figure_files(folder)
    if pngs:
        sections.append(section("Figures", '<div class="figures">' + "".join(
            image(p, p.stem.replace("_", " ")) for p in pngs) + "</div>", "figures"))
    if any(r.get("seeds") for r in rows):
        sections.append(section("Seeds and spread", from_file(where, _seeds_html, rows),
                                "seeds"))
    if histories:
        sections.append(section("Every round", _round_tables(rows, histories), "rounds"))
    if not rows:  # a Python experiment's own summary: show it as it is
        sections.append(section("Summary", "<pre>" + esc(json.dumps(summary, indent=2)) +
                                "</pre>", "summary"))
    if config_text:
        sections.append(section("Config", "<pre>" + esc(config_text) + "</pre>", "config"))
    meta = [("folder", folder.name), ("fedsparse", summary.get("fedsparse_version", "")),
            ("runs", str(len(rows)) if rows else ""),
            ("seeds", str(summary.get("seeds", "")) if summary.get("seeds", 1) != 1 else ""),
            ("device", from_file(where, _devices, summary, rows)),
            ("took", f"{summary['seconds']:.1f} s" if finite_number(summary.get("seconds"))
             else ""),
            ("report", datetime.datetime.now().isoformat(timespec="minutes"))]
    return page(title, config.get("description", ""), meta, sections, {"charts": charts})


def _devices(summary: dict, rows: list[dict]) -> str:
    seen = []
    for src in [summary, *rows, *(r.get("params", {}) for r in rows)]:
        device = src.get("device") if isinstance(src, dict) else None
        if device:
            text = str(device) + (f" ({src['gpu']})" if src.get("gpu") else "")
            if text not in seen:
                seen.append(text)
    return ", ".join(seen)


def _claims_html(claim: str | None, summary: dict) -> str:
    out = f'<p class="claim">{esc(claim)}</p>' if claim else ""
    for c in summary.get("claims", []):
        verdict = c.get("verdict", "")
        badge = f'<span class="verdict {_VERDICT_CLASS.get(verdict, "")}">{esc(verdict)}</span>'
        lines = "".join(f"<li><b>{esc(d[0]) + ':' if d[0] else ''}</b> {esc(d[1])}: "
                        f"{esc(d[2])}</li>" for d in c.get("details", []) if len(d) >= 3)
        out += f'<div class="claimbox">{badge}<p>{esc(c.get("text", ""))}</p><ul>{lines}</ul></div>'
    return out


def _summary_table(rows: list[dict]) -> str:
    fields = [f for f in SUMMARY_FIELDS if any(r.get(f) is not None for r in rows)]
    panels = any(r.get("panel") for r in rows)
    head = (["panel"] if panels else []) + ["run"] + [f.replace("_", " ") for f in fields] \
        + ["diverged"]
    body = []
    for r in rows:
        stats = (r.get("seeds") or {}).get("final", {})
        cells = [cell(r.get("panel", ""), "panel")] if panels else []
        cells.append(f'<th scope="row" data-key="label">{esc(r.get("label", ""))}</th>')
        for f in fields:
            cells.append(_stat_cell(r.get(f), stats.get(f), f))
        gone = r.get("diverged")
        text = f"at round {r.get('diverged_round')}" if gone else "no"
        cells.append(f'<td data-key="diverged" class="{"bad" if gone else ""}">{esc(text)}</td>')
        body.append(f'<tr data-run="{esc(r.get("dir", ""))}">{"".join(cells)}</tr>')
    note = ("<p class='note'>With seeds: mean ± sample std over the seeds that did not "
            "diverge (n).</p>" if any(r.get("seeds") for r in rows) else "")
    return table(head, body, "summary") + note


def _stat_cell(value, stat: dict | None, key: str) -> str:
    if not stat or stat.get("std") is None or value is None:
        return cell(value, key)
    std = stat["std"]
    if abs(std) <= 1e-12 * abs(value):  # equal in every seed up to rounding
        std = 0
    return (f'<td data-key="{esc(key)}" data-value="{value!r}" class="num">{esc(fmt(value))}'
            f' <span class="pm" data-std="{stat["std"]!r}">± {esc(fmt(std))} '
            f'({stat.get("n", "")})</span></td>')


def _comparisons_html(comparisons: list[dict]) -> str:
    head = ["panel", "run", "reference", "its round", "metric", "target", "rounds needed"]
    body = []
    for c in comparisons:
        need = c.get("rounds_needed")
        body.append("<tr>" + cell(c.get("panel", "")) + cell(c.get("run")) +
                    cell(c.get("reference")) + cell(c.get("reference_round")) +
                    cell(c.get("metric", "objective")) + cell(c.get("target"), "target") +
                    (cell(need, "rounds_needed") if need is not None else
                     f'<td class="bad">not within {esc(c.get("rounds_run", "?"))}</td>') +
                    "</tr>")
    return table(head, body)


def _seeds_html(rows: list[dict]) -> str:
    out = []
    for r in rows:
        s = r.get("seeds")
        if not s:
            continue
        gone = ", ".join(f"{d['seed']} (round {d['round']})" for d in s.get("diverged_seeds", []))
        body = []
        for m, st in s.get("final", {}).items():
            best = s.get("best", {}).get(m, {})
            body.append("<tr>" + f"<th scope='row'>{esc(m)}</th>" + cell(st.get("mean"), "mean")
                        + cell(st.get("std"), "std") + cell(st.get("n"), "n") +
                        cell(best.get("mean"), "best_mean") + cell(best.get("std"), "best_std")
                        + "</tr>")
        label = f"{r.get('panel') + ' / ' if r.get('panel') else ''}{r.get('label', '')}"
        out.append(f"<h3>{esc(label)}</h3><p>seeds {esc(', '.join(map(str, s.get('seeds', []))))}"
                   f"{'; diverged: ' + esc(gone) if gone else ''}</p>" +
                   table(["metric", "final mean", "std", "n", "best mean", "best std"], body))
    return "".join(out)


def _round_tables(rows: list[dict], histories: dict[int, list[dict]]) -> str:
    out = []
    for i, records in histories.items():
        if not records:
            continue
        r = rows[i]
        fields = [f for f in _numeric_fields(records) if not f.endswith("_std")]
        body = ["<tr>" + "".join(cell(rec.get(f), f) for f in fields) + "</tr>"
                for rec in records]
        label = f"{r.get('panel') + ' / ' if r.get('panel') else ''}{r.get('label', '')}"
        out.append(details(f"{label} ({len(records) - 1} rounds)", table(
            [f.replace("_", " ") for f in fields], body, "rounds"), open_=False)
            .replace("<details>", f'<details data-run="{esc(r.get("dir", ""))}">', 1))
    return "".join(out)


#: What the shading around a mean over seeds is, by the config's ``plot.band``.
_BAND_NOTES = {"std": "mean ± one sample standard deviation over the seeds that did not "
                      "diverge",
               "ci95": "95% confidence interval of the mean (Student's t) over the seeds "
                       "that did not diverge"}


def _band(config: dict) -> str:
    """The config's ``plot.band`` (the figures' band), "std" where it names none."""
    band = (config.get("plot") or {}).get("band", "std")
    return band if band in _BAND_NOTES else "std"


def _charts(rows: list[dict], histories: dict[int, list[dict]], config: dict) -> list[dict]:
    """The curves of the run folder: for each y of ``[plot]`` (and rel_error, as the
    figures do) against each x, one chart per panel, one series per run; a mean over
    seeds with the band its figures draw (``plot.band``: ± std or the 95% interval)."""
    plot = config.get("plot", {})
    band_kind = _band(config)
    ys = list(dict.fromkeys([*plot.get("y", ["objective"]), "rel_error", "test_accuracy"]))
    xs = plot.get("x", ["round", "bytes_total"])
    panels: dict[str, list[int]] = {}
    for i in histories:
        panels.setdefault(rows[i].get("panel", ""), []).append(i)
    charts = []
    for y in ys:
        for x in xs:
            for panel, members in panels.items():
                series = []
                for k, i in enumerate(members):
                    pts, band = [], []
                    for rec in histories[i]:
                        a, b = rec.get(x), rec.get(y)
                        if finite_number(a) and finite_number(b):
                            pts.append([a, b])
                            sd = rec.get(f"{y}_std")
                            if finite_number(sd):
                                n = rec.get("n_seeds")
                                half = float(band_halfwidth(
                                    np.array([sd]), n if finite_number(n) else 0,
                                    band_kind)[0])
                                band.append([a, b - half, b + half])
                    if pts:
                        series.append({"name": rows[i].get("label", ""), "points": pts,
                                       "band": band, "color": COLORS[k % len(COLORS)],
                                       "dash": DASHES[k % len(DASHES)]})
                if not series:
                    continue
                ys_all = [p[1] for s in series for p in s["points"]]
                charts.append({
                    "id": f"chart-{len(charts)}", "x": x, "y": y,
                    "title": f"{y.replace('_', ' ')} vs {x.replace('_', ' ')}"
                             + (f" — {panel}" if panel else ""),
                    "logy": bool(plot.get("logy")) and y not in ("accuracy", "test_accuracy")
                    and all(v > 0 for v in ys_all),
                    "logx": x.startswith("bytes") and _spans(
                        [p[0] for s in series for p in s["points"]], 3.0),
                    "bytes": x.startswith("bytes"), "series": series})
    return charts
