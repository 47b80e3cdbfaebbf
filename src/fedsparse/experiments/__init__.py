"""Named experiments (the papers' figures), the runner and sweeps."""

from __future__ import annotations

import importlib

#: Each public name's module, imported on first use: a Flower ClientApp, a process started
#: for every message, reads ``config`` and would otherwise import the runner and its plots
#: (matplotlib) too.
_PUBLIC = {"load_config": "config", "resolve_runs": "config",
           "list_experiments": "registry", "register_experiment": "registry",
           "run_experiment": "runner"}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
