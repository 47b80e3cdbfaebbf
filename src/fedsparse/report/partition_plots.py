"""The client x label heat map of a federated split (PNG, no display needed).

What ``fedsparse data describe ... --plot FILE`` saves; the counts come from
:func:`fedsparse.data.partition.describe_partition`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..data.partition import describe_partition

__all__ = ["plot_histogram", "plot_partition"]


def plot_partition(parts, y, path, *, title=None):
    """Save a heat map of the client x label counts as a PNG.

    Parameters
    ----------
    parts : list of 1-D int arrays
    y : array-like, (n,)
    path : str or path-like
        Output file; parent directories are created.
    title : str, optional

    Returns
    -------
    pathlib.Path of the written file.
    """
    d = describe_partition(parts, y)
    return plot_histogram(d["histogram"], d["classes"], path, title=title)


def plot_histogram(hist, classes, path, *, title=None):
    """Save the heat map of an (N, C) client x label count ``hist`` (C ``classes``) as a
    PNG; see :func:`plot_partition`."""
    n_clients, n_labels = hist.shape
    fig = Figure(figsize=(max(4.0, 0.35 * n_labels + 2.5), max(3.0, min(12.0, 0.12 * n_clients
                                                                         + 2.0))))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(hist, aspect="auto", interpolation="nearest", cmap="viridis")
    fig.colorbar(im, ax=ax, label="examples")
    ax.set_xlabel("label")
    ax.set_ylabel("client")
    if n_labels <= 30:
        ax.set_xticks(np.arange(n_labels))
        ax.set_xticklabels([str(c) for c in classes])
    ax.set_title(title or f"{n_clients} clients x {n_labels} labels")
    fig.tight_layout()
    out = Path(os.fspath(path))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=100)
    return out
