"""Reports: plots of run histories and sweeps."""

from .plots import format_bytes, panels_figure, plot_panels, plot_sweep, sweep_figure

__all__ = ["format_bytes", "panels_figure", "plot_panels", "plot_sweep", "sweep_figure"]
