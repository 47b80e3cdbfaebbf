"""Experiment tracking: TensorBoard, MLflow and Weights & Biases, each an optional extra.

>>> import fedsparse as fs
>>> history = fs.simulate(algo, problem, data, rounds=50,
...                       loggers=["tensorboard"])            # doctest: +SKIP
>>> history = fs.simulate(algo, problem, data, rounds=50,
...                       loggers=[fs.loggers.MLflowLogger(experiment="mine")])  # doctest: +SKIP

``fedsparse run EXP --log tensorboard --log mlflow`` does the same for every run of an
experiment, with the trackers' files in the output folder (``tensorboard/``,
``mlflow/``, ``wandb/``). Every round's record (numbers as metrics at step = round),
the run's hyper-parameters, its device and GPU (when the run records them), the final
values and the final model go to each tracker. Install the tracker with its extra:
``pip install 'fedsparse[tensorboard]'`` (or ``[mlflow]``, ``[wandb]``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .._validation import fail
from .base import Logger, flatten, require, split_record
from .mlflow_logger import MLflowLogger
from .tensorboard_logger import TensorBoardLogger
from .tracking import Tracking
from .wandb_logger import WandbLogger

#: The trackers by the name ``--log`` and ``loggers=`` take.
KINDS: dict[str, type[Logger]] = {"tensorboard": TensorBoardLogger, "mlflow": MLflowLogger,
                                  "wandb": WandbLogger}
#: The folders the trackers write under a run's output folder (see :func:`make_logger`).
TRACKER_DIRS = ("tensorboard", "mlflow", "wandb")

__all__ = ["KINDS", "TRACKER_DIRS", "Logger", "MLflowLogger", "TensorBoardLogger", "Tracking",
           "WandbLogger", "check_installed", "flatten", "make_logger", "resolve_loggers",
           "split_record"]


def check_installed(kind: str, option: str = "loggers") -> None:
    """Raise a ConfigError naming ``pip install 'fedsparse[EXTRA]'`` when the tracker
    ``kind`` (a name of :data:`KINDS`) is not installed."""
    if kind not in KINDS:
        raise fail(option, kind, "must be one of " + ", ".join(KINDS))
    cls = KINDS[kind]
    require(kind, cls.package, cls.module, cls.extra, option)


def make_logger(kind: str, root: str | Path | None = None, *,
                experiment: str = "fedsparse") -> Logger:
    """The logger ``kind`` with its files under ``root``.

    Parameters
    ----------
    kind : "tensorboard", "mlflow" or "wandb".
    root : a folder (``fedsparse run`` gives its output folder): TensorBoard writes
        ``root/tensorboard/<run>/``, MLflow a SQLite store in ``root/mlflow/`` (unless
        ``$MLFLOW_TRACKING_URI`` names another store), W&B ``root/wandb/``. None: each
        tracker's usual place in the working folder (``runs/tensorboard``, ``mlruns``,
        ``wandb``).
    experiment : the experiment (MLflow) or project (W&B) name.
    """
    check_installed(kind)
    if root is None:
        return KINDS[kind](experiment=experiment)
    root = Path(root).expanduser()
    if kind == "tensorboard":
        return TensorBoardLogger(root / "tensorboard", experiment=experiment)
    if kind == "mlflow":
        return MLflowLogger(store_dir=root / "mlflow", experiment=experiment)
    return WandbLogger(root, experiment=experiment)


def resolve_loggers(loggers, root: str | Path | None = None, *, experiment: str = "fedsparse",
                    option: str = "loggers") -> list[Logger]:
    """``loggers`` as a list of :class:`Logger`: None, a tracker name, a Logger, or a list
    of those (names are built by :func:`make_logger` under ``root``).

    Raises
    ------
    ConfigError
        naming ``option`` for an unknown name, a missing extra, or a name given twice.
    """
    if loggers is None:
        return []
    items = [loggers] if isinstance(loggers, str | Logger) else loggers
    if not isinstance(items, Iterable):
        raise fail(option, loggers, "must be a tracker name (" + ", ".join(KINDS) +
                   "), a fedsparse.loggers.Logger or a list of them")
    out: list[Logger] = []
    names: set[str] = set()
    for item in items:
        if isinstance(item, str):
            if item in names:  # two of one tracker would write the same run twice
                raise fail(option, item, "is given twice")
            names.add(item)
            item = make_logger(_kind(item, option), root, experiment=experiment)
        elif isinstance(item, Logger):
            if item.kind in KINDS:  # a Logger of one's own needs no extra
                check_installed(item.kind, option)
        else:
            raise fail(option, item, "must be a tracker name (" + ", ".join(KINDS) +
                       ") or a fedsparse.loggers.Logger")
        out.append(item)
    return out


def _kind(name: str, option: str) -> str:
    if name not in KINDS:
        raise fail(option, name, "must be one of " + ", ".join(KINDS))
    check_installed(name, option)
    return name


def track_run(loggers: Iterable[Logger] | None, name: str, params: dict,
              callback=None) -> Tracking:
    """A :class:`Tracking` of one run (nothing is logged when ``loggers`` is empty)."""
    return Tracking(loggers or (), name, params, callback)
