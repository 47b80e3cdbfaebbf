"""fedsparse: sparse federated learning on one vectorised core.

>>> import fedsparse as fs
>>> data = fs.data.shifted_gaussian(num_clients=10, dim=100, sparsity=5, seed=0)
>>> algo = fs.algorithms.fed_iter_ht(sparsity=5, step_size="auto", local_steps=5)
>>> history = fs.simulate(algo, fs.problems.least_squares(), data, rounds=20, seed=0)

The package imports its parts on first use, so ``fedsparse --help`` and ``--version``
answer without loading torch.
"""

from __future__ import annotations

import importlib
import sys
import types

from ._validation import ConfigError

__version__ = "0.1.0"

_SUBMODULES = ("algorithms", "channels", "comm", "data", "loggers", "metrics", "models",
               "problems", "rounds", "sparsity")
_NAMES = {"DivergenceError": "rounds", "History": "history", "load_run": "runs"}

__all__ = ["ConfigError", "DivergenceError", "History", "algorithms", "channels", "comm",
           "data", "load_run", "loggers", "metrics", "models", "problems", "simulate",
           "sparsity"]


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _NAMES:
        return getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
    raise AttributeError(f"module 'fedsparse' has no attribute {name!r}")


def __dir__():  # what tab completion offers: the API, not the imports behind it
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})


class _Package(types.ModuleType):
    """``fedsparse.simulate`` is the function, although a submodule has the same name:
    importing the submodule must not replace the attribute with the module."""

    @property
    def simulate(self):
        return importlib.import_module(".simulate", __name__).simulate

    @simulate.setter
    def simulate(self, value):  # the import system sets it; the property stays
        pass


sys.modules[__name__].__class__ = _Package
