"""Plots of run histories and sweeps (PNG, matplotlib's Agg backend: no display needed).

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

import math
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter  # noqa: E402

from ..history import History, higher_is_better  # noqa: E402

AXIS_LABELS = {
    "round": "communication round",
    "bytes_total": "cumulative bytes (up + down)",
    "bytes_up_total": "cumulative bytes up",
    "bytes_down_total": "cumulative bytes down",
    "bytes_up": "bytes up per round",
    "bytes_down": "bytes down per round",
    "elapsed": "wall-clock seconds",
    "objective": "objective f(x)",
    "test_objective": "test objective",
    "rel_error": "relative error ||x - x#|| / ||x#||",
    "accuracy": "train accuracy",
    "test_accuracy": "test accuracy",
    "support_f1": "support F1",
    "support_precision": "support precision",
    "support_recall": "support recall",
    "density": "model density (nonzero fraction)",
    "nnz": "nonzeros of the model",
}
#: Short names for titles ("objective vs communication round").
SHORT_NAMES = {"round": "round", "bytes_total": "bytes communicated", "rel_error":
               "relative error", "objective": "objective", "elapsed": "time"}
#: A byte axis is drawn on a log scale when its positive values span this many decades.
BYTES_LOG_DECADES = 3.0
#: A sweep's numeric grid axis is drawn on a log scale from this many decades on
#: (step-size grids are usually geometric).
GRID_LOG_DECADES = 1.0
#: A metric axis (objective, error; not accuracy-like) whose values are all positive is
#: drawn on a log scale from this many decades on, where a linear one would flatten all
#: but the largest values (:meth:`History.plot`, e.g. an objective falling to 1e-25).
VALUE_LOG_DECADES = 2.0
#: The same for a sweep's plot, whose runs may differ in scale (a regression run's
#: objective of 40 beside a classification run's 0.2).
SWEEP_LOG_DECADES = 1.0
#: Line styles and markers, combined with the colour cycle: the i-th curve of a panel
#: gets colour i, LINESTYLES[i % 4] and MARKERS[i % 8].
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
#: Relative tolerance under which two curves count as coinciding.
COINCIDE_RTOL = 1e-6
_UNITS = ((1e9, "GB"), (1e6, "MB"), (1e3, "KB"))



def _save(fig, path) -> bool:
    """Write ``fig`` as a PNG at ``path`` and close it; False when there is no figure."""
    if fig is None:
        return False
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True

def axis_label(name: str) -> str:
    return AXIS_LABELS.get(name, name.replace("_", " "))


def is_bytes(name: str) -> bool:
    return name.startswith("bytes")


def format_bytes(value: float, _pos=None) -> str:
    """``1500000 -> "1.5 MB"`` (powers of 1000); a tick formatter for byte axes."""
    if value == 0:
        return "0"
    for scale, unit in _UNITS:
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} B"


def spans_decades(values, decades: float) -> bool:
    """True if the positive finite ``values`` span at least ``decades`` powers of ten."""
    pos = [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    return len(pos) >= 2 and math.log10(max(pos) / min(pos)) >= decades


def auto_log(metric: str, values, decades: float = VALUE_LOG_DECADES) -> bool:
    """True when ``metric``'s ``values`` (None and non-finite ones ignored) are all positive
    and span ``decades`` or more, and the metric is not accuracy-like."""
    finite = [float(v) for v in values if _finite(v)]
    return (not higher_is_better(metric) and bool(finite) and min(finite) > 0
            and spans_decades(finite, decades))


def style_axis(ax, name: str, values, *, which: str = "x", log: bool | None = None) -> None:
    """Label an axis for the record field ``name``: integer ticks for rounds, KB/MB/GB and
    (when ``values`` span decades) a log scale for bytes.

    Parameters
    ----------
    ax : matplotlib axes.
    name : record field on that axis.
    values : the values plotted on it (decide the log scale of a byte axis).
    which : "x" or "y".
    log : force (True) or forbid (False) a log scale; None = automatic for bytes.
    """
    axis = ax.xaxis if which == "x" else ax.yaxis
    set_scale = ax.set_xscale if which == "x" else ax.set_yscale
    (ax.set_xlabel if which == "x" else ax.set_ylabel)(axis_label(name))
    if log is None:
        log = is_bytes(name) and spans_decades(values, BYTES_LOG_DECADES)
    if log:
        set_scale("log")
    if name == "round":
        axis.set_major_locator(MaxNLocator(integer=True))
    if is_bytes(name):
        axis.set_major_formatter(FuncFormatter(format_bytes))
        if log:  # the log scale's minor labels would repeat units in between
            axis.set_minor_formatter(NullFormatter())
    elif log:
        # plain numbers (0.4, 20) rather than 4 x 10^-1; on an axis spanning less than
        # two decades (one or two major labels) the minor ticks at 2 and 5 x 10^k are
        # labelled too, not all eight, which would overlap
        axis.set_major_formatter(FuncFormatter(_plain))
        narrow = not spans_decades(values, 2.0)
        axis.set_minor_formatter(FuncFormatter(_plain_2_5) if narrow else NullFormatter())


def _plain_2_5(value: float, _pos=None) -> str:
    """:func:`_plain` for 2 and 5 x 10^k, "" for the other minor ticks of a log axis."""
    if value <= 0:
        return ""
    mantissa = value / 10 ** math.floor(math.log10(value) + 1e-9)
    return _plain(value) if any(abs(mantissa - m) < 1e-6 for m in (2, 5)) else ""


def _plain(value: float, _pos=None) -> str:
    return f"{value:.3g}"


def line_style(i: int, n_points: int, n_curves: int) -> dict:
    """Keyword arguments of ``ax.plot`` for the i-th curve of a panel.

    The markers of curve i start ``i`` steps into a period shared by all curves, so
    curves that lie on top of each other show their markers side by side.
    """
    every = max(1, n_points // 8)
    return {"color": f"C{i % 10}", "linestyle": LINESTYLES[i % len(LINESTYLES)],
            "marker": MARKERS[i % len(MARKERS)], "markersize": 4.5,
            "markevery": (min(every - 1, i * max(1, every // max(1, n_curves))), every),
            "linewidth": 1.5}


def _series(history: History, x: str, y: str, logy: bool = False):
    """(xs, ys, stds) arrays of the rounds where x and y are both finite numbers (round 0
    included); stds holds ``y_std`` for a mean over seeds, else None."""
    xs = history.column(x, with_initial=True)
    ys = history.column(y, with_initial=True)
    ss = history.column(f"{y}_std", with_initial=True) if history.seeds else [None] * len(ys)
    keep = [(a, b, s) for a, b, s in zip(xs, ys, ss, strict=True)
            if _finite(a) and _finite(b) and (not logy or b > 0)]
    if not keep:
        return np.empty(0), np.empty(0), None
    a, b, s = zip(*keep, strict=True)
    stds = np.array([v if _finite(v) else 0.0 for v in s], dtype=float) \
        if history.seeds else None
    return np.asarray(a, dtype=float), np.asarray(b, dtype=float), stds


#: The bands a mean over seeds can be drawn with.
BANDS = ("std", "ci95")


def band_halfwidth(stds: np.ndarray, n: int, band: str) -> np.ndarray:
    """Half-width of the band around a mean of ``n`` seeds with sample std ``stds``:
    the std itself, or the 95% Student-t confidence interval of the mean."""
    if band == "std":
        return stds
    if band != "ci95":
        raise ValueError(f"band={band!r} is invalid: must be one of {', '.join(BANDS)}")
    if n < 2:
        return np.zeros_like(stds)
    from scipy.stats import t

    return t.ppf(0.975, n - 1) * stds / math.sqrt(n)


def _band_title(band: str, counts: set[int]) -> str | None:
    if not counts:
        return None
    what = "mean ± std" if band == "std" else "mean, 95% CI"
    return f"{what} over {'/'.join(map(str, sorted(counts)))} seeds"


def _finite(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def seed_note(history: History) -> str:
    """"" for a single run; " (k of n seeds diverged)" when some seeds of a mean did."""
    diverged = history.config.get("diverged_seeds") or []
    if not history.seeds or not diverged:
        return ""
    return f" ({len(diverged)} of {len(history.seeds)} seeds diverged)"


def draw_history(ax, history: History, *, y: str, x: str = "round", label: str = "",
                 band: str | None = "std", logy: bool = False, style_axes: bool = True,
                 **kwargs) -> bool:
    """Draw one history (or a mean over seeds with its band, see :data:`BANDS`; None
    draws no band) on ``ax``.

    Returns
    -------
    bool
        True if anything was drawn.
    """
    xs, ys, stds = _series(history, x, y, logy)
    if xs.size == 0:
        return False
    kw = line_style(0, xs.size, 1) | kwargs
    (line,) = ax.plot(xs, ys, label=label + seed_note(history), **kw)
    if band and stds is not None and np.any(stds > 0):
        (n,) = _seed_counts({"": history}) or {0}
        half = band_halfwidth(stds, n, band)
        lo, hi = ys - half, ys + half
        if logy:  # a band reaching below zero is cut at the axis, not dropped
            lo = np.maximum(lo, ys * 1e-3)
        ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.18, linewidth=0)
    if style_axes:
        style_axis(ax, x, xs)
        style_axis(ax, y, ys, which="y", log=True if logy else None)
    return True


def _coincides(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> bool:
    return a[0].shape == b[0].shape and a[0].size > 0 and \
        np.allclose(a[0], b[0], rtol=COINCIDE_RTOL, atol=0) and \
        np.allclose(a[1], b[1], rtol=COINCIDE_RTOL, atol=0)


def _seed_counts(runs: dict[str, History]) -> set[int]:
    return {len(h.seeds) - len(h.config.get("diverged_seeds") or []) for h in runs.values()
            if h.seeds}


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
    up = higher_is_better(metric) if maximize is None else maximize
    xs_all = [p["x"] for pts in table.values() for p in pts]
    numeric = all(_finite(v) for v in xs_all)
    if not any(_finite(p["value"]) for pts in table.values() for p in pts):
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
        ok = [(a, p) for a, p in zip(pos, pts, strict=True) if _finite(p["value"])]
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
