"""Reports: plots of run histories and sweeps, and the label heat map of a federated split."""

from .partition_plots import plot_partition
from .plots import format_bytes, panels_figure, plot_panels, plot_sweep, sweep_figure

__all__ = ["format_bytes", "panels_figure", "plot_panels", "plot_partition", "plot_sweep",
           "sweep_figure"]
