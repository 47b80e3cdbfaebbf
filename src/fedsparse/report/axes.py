"""One run's curve on a matplotlib axes: axis labels and scales, line styles, and
the band of a mean over seeds.

What :meth:`fedsparse.history.History.plot` draws with, and what the multi-run figures
of :mod:`fedsparse.report.plots` build on. A history here is anything with
``column(name, with_initial=True)``, ``seeds`` and ``config`` (a
:class:`~fedsparse.history.History`); this module does not import the run record,
which draws through it.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

from .._validation import finite_number
from ..metric_names import higher_is_better

__all__ = [
    "AXIS_LABELS",
    "BANDS",
    "BYTES_LOG_DECADES",
    "LINESTYLES",
    "MARKERS",
    "VALUE_LOG_DECADES",
    "auto_log",
    "axis_label",
    "band_halfwidth",
    "draw_history",
    "format_bytes",
    "is_bytes",
    "line_style",
    "seed_note",
    "spans_decades",
    "style_axis",
]


class RunHistory(Protocol):
    """What drawing needs of a run's record (:class:`~fedsparse.history.History` has it)."""

    seeds: list
    config: dict

    def column(self, name: str, *, with_initial: bool = False) -> list: ...


#: Axis labels of the record fields (any other field: its name with spaces).
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
#: A byte axis is drawn on a log scale when its positive values span this many decades.
BYTES_LOG_DECADES = 3.0
#: A metric axis (objective, error; not accuracy-like) whose values are all positive is
#: drawn on a log scale from this many decades on, where a linear one would flatten all
#: but the largest values (:meth:`History.plot`, e.g. an objective falling to 1e-25).
VALUE_LOG_DECADES = 2.0
#: Line styles and markers, combined with the colour cycle: the i-th curve of a panel
#: gets colour i, LINESTYLES[i % 4] and MARKERS[i % 8].
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_UNITS = ((1e9, "GB"), (1e6, "MB"), (1e3, "KB"))


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
    finite = [float(v) for v in values if finite_number(v)]
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
        # labelled too, not all eight, which would overlap; within half a decade (0.35 to
        # 0.69: three minor ticks, perhaps no major one) every tick is
        axis.set_major_formatter(FuncFormatter(_plain))
        minor = NullFormatter() if spans_decades(values, 2.0) else \
            FuncFormatter(_plain_2_5 if spans_decades(values, 0.5) else _plain)
        axis.set_minor_formatter(minor)


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



def _series(history: RunHistory, x: str, y: str, logy: bool = False):
    """(xs, ys, stds) arrays of the rounds where x and y are both finite numbers (round 0
    included); stds holds ``y_std`` for a mean over seeds, else None."""
    xs = history.column(x, with_initial=True)
    ys = history.column(y, with_initial=True)
    ss = history.column(f"{y}_std", with_initial=True) if history.seeds else [None] * len(ys)
    keep = [(a, b, s) for a, b, s in zip(xs, ys, ss, strict=True)
            if finite_number(a) and finite_number(b) and (not logy or b > 0)]
    if not keep:
        return np.empty(0), np.empty(0), None
    a, b, s = zip(*keep, strict=True)
    stds = np.array([v if finite_number(v) else 0.0 for v in s], dtype=float) \
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



def seed_note(history: RunHistory) -> str:
    """"" for a single run; " (k of n seeds diverged)" when some seeds of a mean did."""
    diverged = history.config.get("diverged_seeds") or []
    if not history.seeds or not diverged:
        return ""
    return f" ({len(diverged)} of {len(history.seeds)} seeds diverged)"


def draw_history(ax, history: RunHistory, *, y: str, x: str = "round", label: str = "",
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



def _seed_counts(runs: dict[str, RunHistory]) -> set[int]:
    return {len(h.seeds) - len(h.config.get("diverged_seeds") or []) for h in runs.values()
            if h.seeds}
