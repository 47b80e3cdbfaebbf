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

from pathlib import Path

from .._validation import ConfigError, expand_home, fail
from .html_parts import (
    COLORS,
    DASHES,
    SHAPE_ERRORS,
    cell,
    details,
    esc,
    fmt,
    image,
    page,
    section,
    table,
)
from .run_page import SUMMARY_FIELDS, run_page
from .sweep_page import sweep_page

# The page's pieces stay importable from here, where they were first defined.
__all__ = ["COLORS", "DASHES", "PAGE", "SUMMARY_FIELDS", "cell", "details", "esc", "fmt",
           "image", "kind_of", "page", "render", "report_folders", "run_page", "section",
           "sweep_page", "table", "write_reports"]

#: The page's file name, written into the folder it describes.
PAGE = "report.html"


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
    path = expand_home("DIR", path)
    if not path.is_dir():
        raise fail("DIR", str(path), "must be a folder written by fedsparse run, sweep or "
                   "tune (or a folder holding such folders)")
    if kind_of(path):
        return [path]
    found = sorted(p for p in path.iterdir() if p.is_dir() and kind_of(p))
    if not found and (path / "FAILED").is_file():  # an interrupted or failed run
        raise ConfigError(f"{path} holds a run that did not finish, so it has no results "
                          "to report yet; its FAILED file says how to continue it:\n\n"
                          + (path / "FAILED").read_text(errors="replace")[:4000].strip())
    if not found:
        raise fail("DIR", str(path), "holds no summary.json, sweep.csv or trials.csv, nor "
                   "folders that do: it is not a fedsparse run, sweep or tuning folder")
    return found


def write_reports(path: str | Path, on_error=None) -> list[Path]:
    """Write ``report.html`` into each folder of :func:`report_folders`; the pages.

    A folder whose files cannot be read raises its ConfigError, or, with ``on_error``,
    is passed to ``on_error(folder, error)`` and skipped, so one damaged folder of many
    does not stop the others' pages."""
    pages = []
    for folder in report_folders(path):
        page = folder / PAGE
        try:
            if page.is_dir():
                raise ConfigError(f"{page} is a folder, where the report writes its page; "
                                  "rename or move that folder")
            text = render(folder)
            root = _manifest_root(page)  # before writing: a manifest it cannot read is
            # refused with the folder left as it was
        except ConfigError as exc:
            if on_error is None:
                raise
            on_error(folder, exc)
            continue
        page.write_text(text, encoding="utf-8")
        if root is not None:
            # in the manifest of the output folder it lies in, so that --force removes it
            # with the results it describes (a stale page would be kept beside new results)
            from ..manifest import record_files

            record_files(root, [page.relative_to(root).as_posix()])
        pages.append(page)
    return pages


def _manifest_root(page: Path) -> Path | None:
    """The output folder ``page`` lies in: the nearest folder above it with a manifest
    (:mod:`fedsparse.manifest`), or None."""
    from ..manifest import read_manifest

    for root in page.parents:
        if read_manifest(root) is not None:
            return root
    return None


def render(folder: str | Path) -> str:
    """The HTML page of one run, sweep or tuning folder."""
    folder = Path(folder)
    kind = kind_of(folder)
    if kind not in ("run", "sweep", "tune"):
        raise fail("DIR", str(folder), "is not a fedsparse run, sweep or tuning folder")
    try:
        return run_page(folder) if kind == "run" else sweep_page(folder, kind)
    except SHAPE_ERRORS as exc:
        if isinstance(exc, ConfigError):
            raise
        # a file of the right syntax but another shape (a copied or edited folder)
        raise ConfigError(f"{folder}: its files are not laid out as fedsparse writes them "
                          f"({type(exc).__name__}: {exc}); no report was written") from None
