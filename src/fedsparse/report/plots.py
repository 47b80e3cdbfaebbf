"""Plots of run histories (PNG, matplotlib's Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..history import History  # noqa: E402

AXIS_LABELS = {
    "round": "communication round",
    "bytes_total": "cumulative bytes (up + down)",
    "bytes_up_total": "cumulative bytes up",
    "elapsed": "wall-clock seconds",
    "objective": "objective f(x)",
    "rel_error": "relative error ||x - x#|| / ||x#||",
    "accuracy": "train accuracy",
    "test_accuracy": "test accuracy",
    "support_f1": "support F1",
}


def plot_panels(panels: dict[str, dict[str, History]], *, y: str, x: str, path: str | Path,
                logy: bool = False, title: str = "", reference: float | None = None) -> bool:
    """One subplot per panel, one line per run; returns False if no run has the metric.

    Parameters
    ----------
    panels : {panel name: {run label: History}}.
    y, x : record fields for the axes; round 0 (the initial model) is included.
    path : PNG file to write (parent directories are created).
    logy : log-scale y axis (non-positive values are left out).
    title : figure title.
    reference : optional horizontal line (e.g. f* from a long centralised run).

    Returns
    -------
    bool
        True if the figure was written.
    """
    series = {p: {label: (h.column(x, with_initial=True), h.column(y, with_initial=True))
                  for label, h in runs.items()} for p, runs in panels.items()}
    if not any(v is not None for runs in series.values() for _, ys in runs.values() for v in ys):
        return False
    n = len(series)
    fig, axes = plt.subplots(1, n, figsize=(5.2 * n, 3.9), squeeze=False)
    for ax, (panel, runs) in zip(axes[0], series.items(), strict=True):
        for label, (xs, ys) in runs.items():
            pts = [(a, b) for a, b in zip(xs, ys, strict=True) if a is not None and b is not None
                   and (not logy or b > 0)]
            if pts:
                ax.plot(*zip(*pts, strict=True), label=label, linewidth=1.4)
        if reference is not None:
            ax.axhline(reference, color="k", linestyle=":", linewidth=1, label="f*")
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(AXIS_LABELS.get(x, x))
        ax.set_ylabel(AXIS_LABELS.get(y, y))
        if panel:
            ax.set_title(panel, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True
