"""One self-contained HTML page per run or sweep folder (``fedsparse report DIR``).

The page needs nothing but a browser, offline: the figures are embedded PNGs, the
zoomable curves are inline SVG drawn by a small script in the page (``report.js``),
the data they draw are embedded JSON. A run folder's page shows the title and the
paper's claim, each claim's verdict, the comparisons, a table of every run's final
values (with mean ± std over seeds where the run has seeds), the curves, the figures,
every round of every run, the seeds and their spread, and the resolved config. A sweep
or tuning folder's page shows the metric against the swept values, every point (or
trial), the winners and ``tuned.toml``.

Every number in a table carries its exact value in ``data-value`` (what
``summary.json`` holds, as Python writes a float) beside the value shown, to 6
significant digits.
"""

from __future__ import annotations

import base64
import csv
import datetime
import html
import json
import math
import tomllib
from pathlib import Path

from .._validation import fail

#: The page's file name, written into the folder it describes.
PAGE = "report.html"
#: Matplotlib's default colours and the plots' line styles (:mod:`.plots`), so a curve
#: has the same colour and dash on the page as in the PNG figures.
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")
DASHES = ("", "7 4", "9 3 2 3", "2 3")
#: Final values shown in a run folder's table, in this order (those some run has).
SUMMARY_FIELDS = ("rounds", "objective", "rel_error", "support_f1", "accuracy",
                  "test_accuracy", "density", "bytes_total", "elapsed")
#: The style of each claim verdict's badge.
_VERDICT_CLASS = {"holds": "holds", "does not hold": "fails", "not tested here": "untested"}


# ---------------------------------------------------------------------------------------
# Finding folders


def kind_of(folder: Path) -> str | None:
    """"run" (a ``fedsparse run`` folder: summary.json), "sweep" (``sweep``: sweep.csv
    and best.json), "tune" (``tune``: trials.csv and best.json) or None."""
    if (folder / "best.json").is_file() and (folder / "trials.csv").is_file():
        return "tune"
    if (folder / "best.json").is_file() and (folder / "sweep.csv").is_file():
        return "sweep"
    if (folder / "summary.json").is_file():
        return "run"
    return None


def report_folders(path: str | Path) -> list[Path]:
    """``path`` itself if it is a run, sweep or tuning folder, else those directly inside
    it (a folder of runs such as ``runs/``), sorted."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise fail("DIR", str(path), "must be a folder written by fedsparse run, sweep or "
                   "tune (or a folder holding such folders)")
    if kind_of(path):
        return [path]
    found = sorted(p for p in path.iterdir() if p.is_dir() and kind_of(p))
    if not found:
        raise fail("DIR", str(path), "holds no summary.json, sweep.csv or trials.csv, nor "
                   "folders that do: it is not a fedsparse run, sweep or tuning folder")
    return found


def write_reports(path: str | Path) -> list[Path]:
    """Write ``report.html`` into each folder of :func:`report_folders`; the pages."""
    pages = []
    for folder in report_folders(path):
        page = folder / PAGE
        page.write_text(render(folder), encoding="utf-8")
        pages.append(page)
    return pages


def render(folder: str | Path) -> str:
    """The HTML page of one run, sweep or tuning folder."""
    folder = Path(folder)
    kind = kind_of(folder)
    if kind == "run":
        return run_page(folder)
    if kind in ("sweep", "tune"):
        return sweep_page(folder, kind)
    raise fail("DIR", str(folder), "is not a fedsparse run, sweep or tuning folder")


# ---------------------------------------------------------------------------------------
# Pieces of HTML


def esc(text) -> str:
    return html.escape(str(text), quote=True)


def fmt(value) -> str:
    """A number as shown: integers whole, floats to 6 significant digits."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}".replace(",", "\u2009")  # thin space between thousands
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    return str(value)


def cell(value, key: str = "", tag: str = "td") -> str:
    """A table cell; a number keeps its exact value in ``data-value``."""
    attrs = f' data-key="{esc(key)}"' if key else ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        attrs += f' data-value="{value!r}" class="num"'
    elif value is None:
        attrs += ' class="none"'
    return f"<{tag}{attrs}>{esc(fmt(value))}</{tag}>"


def table(head: list[str], rows: list[str], cls: str = "") -> str:
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    return (f'<div class="scroll"><table class="{cls}"><thead><tr>{th}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def image(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (f'<figure><img alt="{esc(alt)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{esc(path.name)}</figcaption></figure>")


def section(title: str, body: str, anchor: str) -> str:
    return f'<section id="{esc(anchor)}"><h2>{esc(title)}</h2>{body}</section>'


def details(summary: str, body: str, open_: bool = False) -> str:
    return f"<details{' open' if open_ else ''}><summary>{esc(summary)}</summary>{body}</details>"


def page(title: str, subtitle: str, meta: list[tuple[str, str]], sections: list[str],
         data: dict) -> str:
    nav = "".join(f'<a href="#{esc(a)}">{esc(t)}</a>' for a, t in _anchors(sections))
    facts = "".join(f"<span><b>{esc(k)}</b> {esc(v)}</span>" for k, v in meta if v)
    payload = json.dumps(data, allow_nan=False).replace("</", "<\\/")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="fedsparse">
<title>{esc(title)}</title>
<style>{_asset("report.css")}</style>
</head>
<body>
<header>
<h1>{esc(title)}</h1>
{f'<p class="lead">{esc(subtitle)}</p>' if subtitle else ''}
<p class="meta">{facts}</p>
<nav>{nav}</nav>
</header>
<main>
{''.join(sections)}
</main>
<footer>Written by fedsparse report. Self-contained: the page needs no network.</footer>
<script type="application/json" id="fedsparse-data">{payload}</script>
<script>{_asset("report.js")}</script>
</body>
</html>
"""


def _asset(name: str) -> str:
    """The page's style sheet or script, shipped beside this module."""
    return (Path(__file__).parent / name).read_text(encoding="utf-8")


def _anchors(sections: list[str]) -> list[tuple[str, str]]:
    out = []
    for s in sections:
        start = s.index('id="') + 4
        anchor = s[start:s.index('"', start)]
        h = s.index("<h2>") + 4
        out.append((html.unescape(anchor), html.unescape(s[h:s.index("</h2>")])))
    return out


# ---------------------------------------------------------------------------------------
# A run folder


def _read_json(path: Path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _records(run_dir: Path) -> list[dict]:
    path = run_dir / "history.jsonl"
    if not path.is_file():
        return []
    with open(path, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return [{k: (float(v) if v in ("inf", "-inf", "nan") else v) for k, v in r.items()}
            for r in rows]


def _number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _numeric_fields(records: list[dict]) -> list[str]:
    names: dict[str, None] = {}
    for r in records:
        for k, v in r.items():
            if _number(v):
                names[k] = None
    return list(names)


def run_page(folder: Path) -> str:
    summary = _read_json(folder / "summary.json")
    config_text = (folder / "config.toml").read_text(encoding="utf-8") \
        if (folder / "config.toml").is_file() else ""
    config = tomllib.loads(config_text) if config_text else {}
    rows = summary.get("runs") if isinstance(summary.get("runs"), list) else []
    rows = [r for r in rows if isinstance(r, dict)]
    title = summary.get("title") or config.get("title") or folder.name
    histories = {i: _records(folder / r["dir"]) for i, r in enumerate(rows)
                 if isinstance(r.get("dir"), str)}
    sections = []
    claim = summary.get("paper_claim") or config.get("paper_claim")
    if claim or summary.get("claims"):
        sections.append(section("The paper's claims", _claims_html(claim, summary), "claims"))
    if rows:
        sections.append(section("Final values", _summary_table(rows), "summary"))
    if summary.get("comparisons"):
        sections.append(section("Rounds to reach the reference", _comparisons_html(
            summary["comparisons"]), "comparisons"))
    charts = _charts(rows, histories, config)
    if charts:
        sections.append(section("Curves", _charts_html(charts), "curves"))
    pngs = [folder / p for p in summary.get("plots", []) if (folder / p).is_file()] or \
        sorted(folder.glob("*.png"))
    if pngs:
        sections.append(section("Figures", '<div class="figures">' + "".join(
            image(p, p.stem.replace("_", " ")) for p in pngs) + "</div>", "figures"))
    if any(r.get("seeds") for r in rows):
        sections.append(section("Seeds and spread", _seeds_html(rows), "seeds"))
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
            ("device", _devices(summary, rows)),
            ("took", f"{summary['seconds']:.1f} s" if _number(summary.get("seconds")) else ""),
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


def _charts(rows: list[dict], histories: dict[int, list[dict]], config: dict) -> list[dict]:
    """The curves of the run folder: for each y of ``[plot]`` (and rel_error, as the
    figures do) against each x, one chart per panel, one series per run."""
    plot = config.get("plot", {})
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
                        if _number(a) and _number(b):
                            pts.append([a, b])
                            sd = rec.get(f"{y}_std")
                            if _number(sd):
                                band.append([a, b - sd, b + sd])
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


def _spans(values, decades: float) -> bool:
    pos = [v for v in values if v > 0]
    return len(pos) >= 2 and math.log10(max(pos) / min(pos)) >= decades


def _charts_html(charts: list[dict]) -> str:
    help_ = ('<p class="note">Drag across a chart to zoom in, double-click to zoom out; '
             "hover for values; click a legend entry to hide or show its run.</p>")
    return help_ + '<div class="charts">' + "".join(
        f'<div class="chart" id="{esc(c["id"])}" data-x="{esc(c["x"])}" data-y="{esc(c["y"])}">'
        f'<noscript>Interactive charts need JavaScript; the figures below show the same '
        f"curves.</noscript></div>" for c in charts) + "</div>"


# ---------------------------------------------------------------------------------------
# A sweep or tuning folder


def _csv_rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return [{k: _parse_cell(v) for k, v in r.items()} for r in rows]


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
    best = _read_json(folder / "best.json")
    rows = _csv_rows(folder / ("trials.csv" if kind == "tune" else "sweep.csv"))
    tuned_text = (folder / "tuned.toml").read_text(encoding="utf-8") \
        if (folder / "tuned.toml").is_file() else ""
    tuned = tomllib.loads(tuned_text) if tuned_text else {}
    info = _read_json(folder / "tune.json") if (folder / "tune.json").is_file() else {}
    fields = _swept_fields(rows, best)
    metric = info.get("metric") or _metric_of(rows, fields)
    sections = [section("Winners", _best_html(best, metric), "best")]
    charts = _sweep_charts(rows, fields, metric, best)
    if charts:
        sections.append(section("Metric against the swept values", _charts_html(charts),
                                "curves"))
    pngs = sorted(folder.glob("*.png"))
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
        if not all(_number(v) for v in xs):
            continue
        series = []
        for k, run in enumerate(dict.fromkeys(r.get("run") for r in rows)):
            pts = sorted([r[field], r[metric]] for r in rows
                         if r.get("run") == run and _number(r.get(metric)))
            if pts:
                star = (best.get(run) or {}).get("params") or {}
                series.append({"name": str(run), "points": pts, "band": [],
                               "color": COLORS[k % len(COLORS)], "dash": DASHES[k % len(DASHES)],
                               "markers": True, "star": [star[field], best[run]["value"]]
                               if field in star and _number(best[run].get("value")) else None})
        if series:
            charts.append({"id": f"chart-{len(charts)}", "x": field, "y": metric,
                           "title": f"{metric} vs {field}", "series": series,
                           "logx": all(v > 0 for v in xs) and _spans(xs, 1.0),
                           "logy": False, "bytes": False})
    return charts
