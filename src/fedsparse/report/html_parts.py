"""The pieces every report page is built from: escaping and number formatting, table
cells that keep a number's exact value, sections, the page itself (its style sheet and
script shipped beside this module), and the chart data both kinds of page embed."""

from __future__ import annotations

import base64
import html
import json
import math
import tomllib
from pathlib import Path, PurePath

from .._validation import ConfigError

__all__ = ["COLORS", "DASHES", "cell", "details", "esc", "figure_files", "fmt", "image",
           "page", "section", "table"]


#: Matplotlib's default colours and the plots' line styles (:mod:`.plots`), so a curve
#: has the same colour and dash on the page as in the PNG figures.
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")
DASHES = ("", "7 4", "9 3 2 3", "2 3")


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


def figure_files(folder: Path, listed=None) -> list[Path]:
    """The PNG figures a page embeds: ``listed`` (summary.json's ``plots``: names of
    files in ``folder``), else every ``*.png`` directly in ``folder``; a listed file that
    is not there is left out.

    A page embeds the bytes of each file, and a folder is often received from someone
    else: a name that leads out of ``folder`` (an absolute path, ``..``, a link to a file
    elsewhere) would copy that file, whatever it is, into the page one then shares.

    Raises
    ------
    ConfigError
        naming summary.json, the entry and what is allowed, for a listed name that is
        not a string naming a file inside ``folder``.
    """
    if listed is None:
        found = sorted(folder.glob("*.png"))
    else:
        where = folder / "summary.json"
        if not isinstance(listed, list):
            raise ConfigError(f"{where}: plots={listed!r} is invalid: must be a list of the "
                              "names of the figures in the folder")
        found = []
        for i, name in enumerate(listed):
            if not isinstance(name, str) or not name or PurePath(name).is_absolute() \
                    or ".." in PurePath(name).parts:
                raise ConfigError(f"{where}: plots[{i}]={name!r} is invalid: must be the "
                                  f"name of a figure inside {folder}")
            if (folder / name).is_file():
                found.append(folder / name)
    root = folder.resolve()
    for path in found:  # a link out of the folder: refused as a name out of it is
        if not path.resolve().is_relative_to(root):
            raise ConfigError(f"{path} is invalid: it links to {path.resolve()}, outside "
                              f"{folder}; a page embeds only the figures inside its folder")
    return found


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


def _read_toml(path: Path) -> tuple[str, dict]:
    """A TOML file of the folder as (text, table) (("", {}) when there is none), with a
    ConfigError naming it."""
    if not path.is_file():
        return "", {}
    try:
        text = path.read_text(encoding="utf-8")
        return text, tomllib.loads(text)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None


#: What a value of another shape than fedsparse writes (a hand-edited or foreign file)
#: raises where a page reads it.
SHAPE_ERRORS = (ValueError, TypeError, AttributeError, KeyError, IndexError, ArithmeticError)


def from_file(path: Path, build, *args):
    """``build(*args)``, the part of a page read from the file ``path``; a value there of
    another shape than fedsparse writes raises a ConfigError naming that file (not only
    its folder, which holds several), the exception's words kept."""
    try:
        return build(*args)
    except SHAPE_ERRORS as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{path}: not laid out as fedsparse writes it "
                          f"({type(exc).__name__}: {exc}); it was edited or not written "
                          "by fedsparse, and no report was written") from None


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
