"""Reports: plots of run histories."""

from .plots import plot_panels

__all__ = ["plot_panels"]
