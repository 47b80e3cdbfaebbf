"""Named experiments (the papers' figures), the runner and sweeps."""

from .config import load_config, resolve_runs
from .registry import list_experiments, register_experiment
from .runner import run_experiment

__all__ = ["list_experiments", "load_config", "register_experiment", "resolve_runs",
           "run_experiment"]
