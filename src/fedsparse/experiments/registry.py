"""Named experiments: packaged TOML configs and registered Python functions.

A TOML experiment lives in ``experiments/configs/<name>.toml`` (see
:mod:`fedsparse.experiments.config` for its schema). A Python experiment is a function
``fn(out: Path, *, quick: bool = False) -> dict`` decorated with
:func:`register_experiment`; it writes its own files into ``out``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CONFIG_DIR = Path(__file__).parent / "configs"


@dataclass(frozen=True)
class PythonExperiment:
    name: str
    fn: Callable
    description: str
    paper: str


_PYTHON: dict[str, PythonExperiment] = {}


def register_experiment(name: str, *, description: str, paper: str = ""):
    """Decorator registering ``fn(out, *, quick=False) -> dict`` as a named experiment."""

    def decorate(fn):
        _PYTHON[name] = PythonExperiment(name, fn, description, paper)
        return fn

    return decorate


def _import_experiment_modules() -> None:
    # Modules in this package register their Python experiments on import.
    import fedsparse.experiments as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name not in {"registry", "config", "runner", "sweep"}:
            importlib.import_module(f"fedsparse.experiments.{info.name}")


def toml_experiments() -> dict[str, Path]:
    return {p.stem: p for p in sorted(CONFIG_DIR.glob("*.toml"))}


def python_experiments() -> dict[str, PythonExperiment]:
    _import_experiment_modules()
    return dict(_PYTHON)


def list_experiments() -> list[tuple[str, str]]:
    """(name, one-line description) of every named experiment, sorted by name."""
    from .config import load_config

    rows = [(name, load_config(path).get("title", "")) for name, path in toml_experiments().items()]
    rows += [(name, exp.description) for name, exp in python_experiments().items()]
    return sorted(rows)
