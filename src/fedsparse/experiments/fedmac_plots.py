"""Plots of Liu et al. 2023's (FedMac) runs: accuracy against rounds with a band over
seeds, and the figure grids the figures share (matplotlib, imported when a plot is
drawn)."""

from __future__ import annotations

import math
from pathlib import Path

from ..history import History
from .fedmac_report import FIELD
from .fedmac_runs import RunResult


def plot_accuracy(results: dict[tuple[str, str], RunResult], path: Path, *,
                  title: str = "", metrics=("test_accuracy", "personal_test_accuracy"),
                  only: set | None = None) -> None:
    """Mean test accuracy (%) against rounds: one panel per model (GM, PM), one line per
    run; the mean over seeds with a ± std band.

    ``only``: the (label, "GM" or "PM") pairs to draw (default all), e.g. :data:`COLUMNS`
    so that HeurFedAMP's mean of the client models, which is not part of the method, is
    not drawn as a global model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = {"test_accuracy": "global model (GM)",
             "personal_test_accuracy": "personalised models (PM)"}
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.2 * len(metrics), 3.8), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        model = {v: k for k, v in FIELD.items()}.get(metric)
        for (panel, label), r in results.items():
            if only is not None and (label, model) not in only:
                continue
            xs, ys, sd = curve(r.mean, metric)
            if not xs:
                continue
            name = f"{panel}: {label}" if panel else label
            ax.plot(xs, ys, label=name, lw=1.2)
            if any(s is not None for s in sd):
                lo = [y - (s or 0) for y, s in zip(ys, sd, strict=True)]
                hi = [y + (s or 0) for y, s in zip(ys, sd, strict=True)]
                ax.fill_between(xs, lo, hi, alpha=0.2)
        ax.set_xlabel("round")
        ax.set_ylabel("mean test accuracy (%)")
        ax.set_title(names.get(metric, metric), fontsize=10)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    if title:
        fig.suptitle(title if len(title) < 110 else title[:107] + "...", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def curve(history: History, metric: str) -> tuple[list, list, list]:
    """(rounds, values in %, std in % or None) of the rounds where ``metric`` is
    recorded, round 0 included."""
    xs, ys, sd = [], [], []
    for r in [history.initial, *history.records]:
        v = r.get(metric)
        if isinstance(v, int | float) and math.isfinite(v):
            xs.append(r.get("round", 0))
            ys.append(100.0 * v)
            s = r.get(f"{metric}_std")
            sd.append(None if s is None else 100.0 * s)
    return xs, ys, sd


def column(history: History, metric: str) -> tuple[list[int], list[float]]:
    """(rounds, values) of the records (round >= 1) holding ``metric``."""
    xs, ys = [], []
    for r in history.records:
        v = r.get(metric)
        if isinstance(v, int | float) and math.isfinite(v):
            xs.append(int(r["round"]))
            ys.append(float(v))
    return xs, ys


def figure_grid(rows: int, cols: int):
    """(pyplot, figure, axes of shape (rows, cols)) of a new figure, drawn off screen."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    return plt, fig, axes


def finish_figure(plt, fig, axes, path: Path, title: str) -> None:
    """Grid and legend on every panel, ``title`` on top; save to ``path`` and close."""
    for ax in axes.flat:
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    fig.suptitle(title if len(title) < 120 else title[:117] + "...", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
