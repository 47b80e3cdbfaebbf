"""Figures of several runs and of sweeps (PNG, matplotlib's Agg backend: no display
needed); one run's curve, its axes and bands are drawn by :mod:`fedsparse.report.axes`.

What every figure does so a reader can read it:

* constrained layout and wrapped titles, so no title or label is clipped;
* each run its own colour, line style and marker (markers staggered between runs), so
  two identical curves both stay visible -- and the legend says "coincides with X" when
  a curve equals an earlier one;
* byte axes in B/KB/MB/GB (powers of 1000), on a log scale when the plotted values span
  :data:`BYTES_LOG_DECADES` decades or more; round axes with integer ticks;
* a mean over seeds drawn as its mean curve with a shaded band: ± one sample standard
  deviation (``band="std"``) or a 95% confidence interval of the mean (``band="ci95"``:
  ± t_{0.975, n-1} std / sqrt(n), Student's t over the n seeds that did not diverge),
  the legend saying which ("mean ± std over n seeds", "mean, 95% CI over n seeds").
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

from .._validation import finite_number  # noqa: E402
from ..history import History  # noqa: E402
from ..metric_names import best_direction  # noqa: E402

# One run's curve: drawn by .axes; its public names stay importable from here too.
from .axes import (  # noqa: E402
    AXIS_LABELS,
    BANDS,
    BYTES_LOG_DECADES,
    LINESTYLES,
    MARKERS,
    VALUE_LOG_DECADES,
    _seed_counts,
    _series,
    auto_log,
    axis_label,
    band_halfwidth,
    draw_history,
    format_bytes,
    is_bytes,
    line_style,
    seed_note,
    spans_decades,
    style_axis,
)

__all__ = [
    "AXIS_LABELS",
    "BANDS",
    "BYTES_LOG_DECADES",
    "COINCIDE_RTOL",
    "GRID_LOG_DECADES",
    "LINESTYLES",
    "MARKERS",
    "SHORT_NAMES",
    "SWEEP_LOG_DECADES",
    "VALUE_LOG_DECADES",
    "auto_log",
    "axis_label",
    "band_halfwidth",
    "draw_history",
    "format_bytes",
    "is_bytes",
    "line_style",
    "panels_figure",
    "plot_panels",
    "plot_sweep",
    "seed_note",
    "spans_decades",
    "style_axis",
    "sweep_figure",
    "title_of",
    "wrap",
]

#: Short names for titles ("objective vs communication round").
SHORT_NAMES = {"round": "round", "bytes_total": "bytes communicated", "rel_error":
               "relative error", "objective": "objective", "elapsed": "time"}
#: A sweep's numeric grid axis is drawn on a log scale from this many decades on
#: (step-size grids are usually geometric).
GRID_LOG_DECADES = 1.0
#: The same for a sweep's plot, whose runs may differ in scale (a regression run's
#: objective of 40 beside a classification run's 0.2).
SWEEP_LOG_DECADES = 1.0
#: Relative tolerance under which two curves count as coinciding.
COINCIDE_RTOL = 1e-6


def _save(fig, path) -> bool:
    """Write ``fig`` as a PNG at ``path`` and close it; False when there is no figure."""
    if fig is None:
        return False
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def _band_title(band: str, counts: set[int]) -> str | None:
    if not counts:
        return None
    what = "mean ± std" if band == "std" else "mean, 95% CI"
    return f"{what} over {'/'.join(map(str, sorted(counts)))} seeds"


def _coincides(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> bool:
    return a[0].shape == b[0].shape and a[0].size > 0 and \
        np.allclose(a[0], b[0], rtol=COINCIDE_RTOL, atol=0) and \
        np.allclose(a[1], b[1], rtol=COINCIDE_RTOL, atol=0)


def title_of(y: str, x: str) -> str:
    return f"{SHORT_NAMES.get(y, axis_label(y))} vs {SHORT_NAMES.get(x, axis_label(x))}"


def wrap(text: str, width_inches: float, fontsize: float) -> str:
    """Break ``text`` into lines that fit ``width_inches`` at ``fontsize`` points (an
    average character is about half the font size wide)."""
    chars = max(20, int(width_inches * 72 / (0.55 * fontsize)))
    return "\n".join(textwrap.wrap(text, chars)) if text else text


def plot_panels(panels: dict[str, dict[str, History]], *, y: str, x: str, path: str | Path,
                logy: bool = False, title: str = "", reference: float | None = None,
                reference_label: str = "f*", note: str = "", band: str = "std") -> bool:
    """One subplot per panel, one line per run, saved as a PNG (:func:`panels_figure`).

    Returns
    -------
    bool
        True if the figure was written; False if no run has the metric.
    """
    return _save(panels_figure(panels, y=y, x=x, logy=logy, title=title, reference=reference,
                               reference_label=reference_label, note=note, band=band), path)


def panels_figure(panels: dict[str, dict[str, History]], *, y: str, x: str,
                  logy: bool = False, title: str = "", reference: float | None = None,
                  reference_label: str = "f*", note: str = "", band: str = "std"):
    """The figure of :func:`plot_panels`: one subplot per panel, one line per run.

    Parameters
    ----------
    panels : {panel name: {run label: History}}; a History that is a mean over seeds
        (``History.seeds`` not empty) is drawn with a band.
    y, x : record fields for the axes; round 0 (the initial model) is included.
    logy : log-scale y axis (non-positive values are left out).
    title : figure title (wrapped to the figure width).
    reference : optional horizontal line (e.g. f* from a long centralised run).
    reference_label : its legend entry; say how it was obtained, e.g.
        "f* (2000 rounds of Distributed-IHT)".
    note : a line printed inside every panel (bottom left), e.g. how the f* of a gap
        plot f - f* was obtained.
    band : "std" (± one sample standard deviation) or "ci95" (95% confidence interval
        of the mean) for a mean over seeds.

    Returns
    -------
    matplotlib.figure.Figure or None
        None when no run has the metric; else the figure (close it after use).
    """
    series = {p: {label: _series(h, x, y, logy) for label, h in runs.items()}
              for p, runs in panels.items()}
    if not any(xs.size for runs in series.values() for xs, _, _ in runs.values()):
        return None
    n = len(series)
    width = 5.2 * n
    fig, axes = plt.subplots(1, n, figsize=(width, 4.2), squeeze=False, layout="constrained")
    for ax, (panel, runs) in zip(axes[0], series.items(), strict=True):
        drawn: list[tuple[str, tuple]] = []
        all_x, all_y = [], []
        for i, (label, (xs, ys, _)) in enumerate(runs.items()):
            if xs.size == 0:
                continue
            same = next((other for other, curve in drawn if _coincides(curve, (xs, ys))), None)
            text = label + (f" (coincides with {same})" if same else "")
            draw_history(ax, panels[panel][label], y=y, x=x, label=text, logy=logy,
                         band=band, style_axes=False, zorder=2 + i,
                         **line_style(i, xs.size, len(runs)))
            drawn.append((label, (xs, ys)))
            all_x.extend(xs.tolist())
            all_y.extend(ys.tolist())
        if reference is not None:
            ax.axhline(reference, color="k", linestyle=":", linewidth=1, label=reference_label)
            all_y.append(reference)
        style_axis(ax, x, all_x)
        style_axis(ax, y, all_y, which="y", log=True if logy else None)
        ax.set_title(wrap(panel or title_of(y, x), 5.2, 10), fontsize=10)
        ax.grid(alpha=0.3)
        legend_title = _band_title(band, _seed_counts(panels[panel]))
        ax.legend(fontsize=8, title=legend_title, title_fontsize=8)
        if note:  # under the axis label, where no curve can hide it
            ax.set_xlabel(ax.get_xlabel() + "\n" + wrap(note, 5.0, 9), fontsize=9)
    if title:
        fig.suptitle(wrap(title, width, 11), fontsize=11)
    return fig


def plot_sweep(table: dict[str, list[dict]], *, field: str, metric: str, path: str | Path,
               maximize: bool | None = None, title: str = "", ylabel: str | None = None
               ) -> bool:
    """:func:`sweep_figure` saved as a PNG; False (nothing written) when no point has a
    value."""
    return _save(sweep_figure(table, field=field, metric=metric, maximize=maximize,
                              title=title, ylabel=ylabel), path)


def sweep_figure(table: dict[str, list[dict]], *, field: str, metric: str,
                 maximize: bool | None = None, title: str = "", ylabel: str | None = None):
    """The metric against the swept value, one line per run (a sweep's pivot table).

    Parameters
    ----------
    table : {line label: [{"x": grid value, "value": float or None, "std": float or None,
        "diverged": bool}, ...]} in grid order.
    field : the swept config field (x-axis label).
    metric : the compared metric (y-axis label).
    maximize : direction of the metric (default: :func:`higher_is_better`); the best
        point of each line is starred.
    title : figure title.
    ylabel : the y-axis label (default: the metric "at the last round").

    Returns
    -------
    matplotlib.figure.Figure or None
        None when no point has a value.

    Notes
    -----
    A numeric grid is drawn on a log x axis when it spans :data:`GRID_LOG_DECADES`
    decades or more; otherwise (or for non-numeric values such as "auto") the points
    are evenly spaced categories. The values go on a log y axis when they are positive
    and span :data:`SWEEP_LOG_DECADES` or more (never for accuracy-like metrics).
    Diverged points are drawn as crosses on the top edge.
    """
    up = best_direction(metric, maximize)
    xs_all = [p["x"] for pts in table.values() for p in pts]
    numeric = all(finite_number(v) for v in xs_all)
    if not any(finite_number(p["value"]) for pts in table.values() for p in pts):
        return None
    categories = list(dict.fromkeys(repr(v) if not isinstance(v, str) else v for v in xs_all))
    log_y = not up and auto_log(metric, [p["value"] for pts in table.values() for p in pts],
                                SWEEP_LOG_DECADES)
    fig, ax = plt.subplots(figsize=(6.4, 4.4), layout="constrained")
    values = []
    diverged_label = "diverged"
    for i, (label, pts) in enumerate(table.items()):
        pos = [float(p["x"]) if numeric else
               categories.index(repr(p["x"]) if not isinstance(p["x"], str) else p["x"])
               for p in pts]
        ok = [(a, p) for a, p in zip(pos, pts, strict=True) if finite_number(p["value"])]
        style = line_style(i, max(len(pts), 1), len(table)) | {"markevery": None}
        if ok:
            a = np.array([q[0] for q in ok])
            v = np.array([q[1]["value"] for q in ok], dtype=float)
            s = np.array([q[1].get("std") or 0.0 for q in ok], dtype=float)
            order = np.argsort(a)
            (line,) = ax.plot(a[order], v[order], label=label, zorder=2 + i, **style)
            if np.any(s > 0):
                lo = np.maximum(v - s, v * 1e-3) if log_y else v - s  # cut at a log axis
                ax.fill_between(a[order], lo[order], (v + s)[order],
                                color=line.get_color(), alpha=0.18, linewidth=0)
            k = int(np.argmax(v) if up else np.argmin(v))
            ax.plot([a[k]], [v[k]], marker="*", markersize=13, color=line.get_color(),
                    markeredgecolor="k", linestyle="none", zorder=10)
            values.extend(v.tolist())
        bad = [a for a, p in zip(pos, pts, strict=True) if p.get("diverged")]
        if bad:  # at the top edge, in axes coordinates: a diverged point has no value
            ax.plot(bad, [0.97] * len(bad), marker="x", linestyle="none", color=style["color"],
                    markersize=8, transform=ax.get_xaxis_transform(), label=diverged_label,
                    clip_on=False)
            diverged_label = "_nolegend_"
    if numeric and all(v > 0 for v in xs_all) and spans_decades(xs_all, GRID_LOG_DECADES):
        ax.set_xscale("log")
    if not numeric:
        ax.set_xticks(range(len(categories)), categories)
    elif all(float(v).is_integer() for v in xs_all):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if is_bytes(metric):
        ax.yaxis.set_major_formatter(FuncFormatter(format_bytes))
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel(field)
    ax.set_ylabel(ylabel or f"{axis_label(metric)} at the last round")
    direction = "higher" if up else "lower"
    ax.set_title(wrap(title or f"{metric} vs {field} ({direction} is better, "
                      "star = best per run)", 5.6, 10), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig
