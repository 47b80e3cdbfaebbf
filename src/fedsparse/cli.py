"""The ``fedsparse`` command line.

Importing this module is cheap: torch and the experiment machinery are imported inside
the command functions, and the parsers of the optional ``data`` and ``flower`` commands
are only built when one of them runs, so ``fedsparse --help`` answers at once.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import select
import sys
import warnings
from pathlib import Path

from ._signals import as_interrupted
from ._validation import ConfigError, DataFormatError
from .cli_commands import cmd_list, cmd_report, cmd_show, cmd_sweep, cmd_tune
from .cli_common import (
    DEFAULT_EXPERIMENT,
    folder,
    leaf_parser,
    name_typed_options,
    parse_value,
    resolve_experiment,
    unknown_options,
)
from .cli_run import _apply_overrides as _apply_overrides  # (tests import it from here)
from .cli_run import cmd_run
from .experiments.folder_lock import release_folder_locks

__all__ = ["DEFAULT_EXPERIMENT", "build_parser", "main", "resolve_experiment"]

#: The ``--set`` parser under its earlier name here.
_parse_value = parse_value


def _assignment(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    if not key.strip():
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE, got {text!r} (no FIELD)")
    return key.strip(), parse_value(value)


def _grid(text: str) -> tuple[str, list]:
    key, value = _assignment(text)
    values = list(value) if isinstance(value, list | tuple) else [value]
    return key, values


class _Parser(argparse.ArgumentParser):
    """An argument parser that takes options only as written in full.

    argparse's default prefix matching would read ``--seed 7`` as ``--seeds 7`` (seven
    replicates) and ``--for`` as ``--force``; here an unknown option is a usage error that
    names the options it resembles. Every sub-command's parser is of this class
    (``add_subparsers`` gives sub-parsers their parent's class), the optional ``data``
    and ``flower`` commands included.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def _param(text: str) -> tuple[str, str]:
    if "=" not in text or not text.split("=", 1)[0].strip():
        raise argparse.ArgumentTypeError(f"expected FIELD=SPACE, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


#: The parameters of ``run_sweep`` and ``run_tune`` that an option of ``sweep`` and
#: ``tune`` gives and that their errors name: the error names the option instead
#: (:func:`fedsparse.cli_common.name_typed_options`).
_SEARCH_OPTION_NAMES = {"metric": "--metric", "seeds": "--seeds", "out": "--out"}

#: The trackers ``--log`` takes (fedsparse.loggers.KINDS, without importing it).
LOG_KINDS = ("tensorboard", "mlflow", "wandb")


def _add_log_option(parser) -> None:
    parser.add_argument("--log", action="append", choices=LOG_KINDS, metavar="TRACKER",
                        help="also log every run to an experiment tracker: tensorboard, "
                        "mlflow or wandb (offline unless WANDB_MODE says otherwise); "
                        "repeatable; its files go to --out (needs pip install "
                        "'fedsparse[TRACKER]')")


def _add_device_option(parser) -> None:
    parser.add_argument("--device", metavar="DEVICE",
                        help="where every run computes: cpu (the default: the numbers the "
                        "results pages pin are CPU results), cuda, cuda:N, or auto (a GPU "
                        "where there is one); overrides the config's device")


def _version() -> str:
    from . import __version__

    return __version__


def _add_search_overrides(parser, point: str, search: str, default_out: str) -> None:
    """``--set``, ``--rounds`` and ``--out`` of a search (``sweep``, ``tune``) whose
    ``point`` is a grid point or a trial and whose ``search`` varies fields."""
    parser.add_argument("--set", action="append", type=_assignment, metavar="FIELD=VALUE",
                        help=f"set a config field for every {point} (repeatable)")
    parser.add_argument("--rounds", type=int, help="override the number of rounds of every "
                        f"run (not with {search} over rounds)")
    parser.add_argument("--out", type=folder, help=f"output directory (default {default_out})")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``fedsparse`` parser.

    Parameters
    ----------
    only : the command about to run. The optional commands (``data``, ``flower``) import
        torch or Flower to build their parsers, so only that one is built in full; the
        others get a one-line placeholder for ``--help``. None builds them all.
    """
    parser = _Parser(prog="fedsparse", description="Sparse federated learning.")
    parser.add_argument("--version", action="version", version=f"fedsparse {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run a named experiment or a TOML config",
                         description="Run a named experiment (fedsparse list) or a TOML "
                                     "config; results go to --out (default runs/NAME).")
    run.add_argument("experiment", nargs="?", help=f"name or path (default {DEFAULT_EXPERIMENT})")
    run.add_argument("--out", type=folder, help="output directory (default runs/NAME); must "
                     "be new or empty unless --resume or --force")
    run.add_argument("--set", action="append", type=_assignment, metavar="FIELD=VALUE",
                     help="override a run field, e.g. algorithm.step_size=0.01, or one run's "
                     "with LABEL:algorithm.step_size=0.01 (repeatable); VALUE is TOML; a "
                     "table VALUE is merged into the table, or replaces it if it names "
                     "another kind, e.g. 'data={kind = \"ondisk\", path = \"DIR\"}'")
    run.add_argument("--only", action="append", metavar="LABEL",
                     help="run only this run of a multi-run experiment (repeatable)")
    run.add_argument("--rounds", type=int, help="override the number of rounds of every run")
    run.add_argument("--resume", action="store_true",
                     help="continue the runs in --out from their checkpoints (refused where "
                     "--out holds no earlier run)")
    run.add_argument("--force", action="store_true",
                     help="replace an earlier run in --out: first removes the files fedsparse "
                     "wrote there (its manifest lists them), unless changed since; your own "
                     "files stay, and a folder fedsparse did not write is refused")
    run.add_argument("--quick", action="store_true",
                     help="Python experiments only: the same steps at a reduced scale (fewer "
                     "rounds, clients or seeds), to check that everything runs; its numbers "
                     "do not reproduce the paper's. How long each takes: fedsparse list")
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    run.add_argument("--seeds", type=int, metavar="N",
                     help="run every run N times, replicate k adding k to its run seed and "
                     "data.seed; plots show mean ± std, summary.json mean, std and n")
    run.add_argument("--band", choices=("std", "ci95"),
                     help="with --seeds: shade ± one std (default) or the 95%% confidence "
                     "interval of the mean (Student's t)")
    _add_log_option(run)
    _add_device_option(run)
    run.set_defaults(func=cmd_run, option_names={"seeds": "--seeds"})

    lst = sub.add_parser("list", help="list the named experiments: paper, runtime, needs")
    lst.add_argument("--all", action="store_true",
                     help="also the TOML configs that serve Python experiments")
    lst.set_defaults(func=cmd_list)

    show = sub.add_parser("show", help="print a named experiment's parameters (TOML)")
    show.add_argument("experiment")
    show.set_defaults(func=cmd_show)

    sweep = sub.add_parser("sweep", help="grid search over config fields",
                           description="Run every run of a TOML experiment at every point "
                           "of the --grid; writes sweep.csv, best.json, sweep.png and "
                           "tuned.toml (fedsparse run tuned.toml reruns the winners). Each "
                           "run is kept in finished.jsonl as it finishes: --resume "
                           "continues a stopped sweep.")
    sweep.add_argument("experiment")
    sweep.add_argument("--grid", action="append", type=_grid, metavar="FIELD=[V1, V2]",
                       help="e.g. algorithm.step_size=[1, 0.1, 0.01] (repeatable; required)")
    sweep.add_argument("--metric", default="objective",
                       help="last-round field compared (default objective); accuracy, f1, "
                       "precision and recall are maximised, the rest minimised")
    direction = sweep.add_mutually_exclusive_group()
    direction.add_argument("--maximize", dest="maximize", action="store_const", const=True,
                           help="pick the largest value of --metric")
    direction.add_argument("--minimize", dest="maximize", action="store_const", const=False,
                           help="pick the smallest value of --metric")
    sweep.add_argument("--seeds", type=int, metavar="N",
                       help="run each point over N seeds and compare the mean")
    sweep.add_argument("--jobs", type=int, default=1, metavar="N",
                       help="run grid points in N processes, at most one per CPU (same results "
                       "as serial)")
    _add_search_overrides(sweep, "grid point", "a grid", "runs/NAME-sweep")
    sweep.add_argument("--quiet", action="store_true",
                       help="no line per grid point (the table and the files are printed)")
    sweep.add_argument("--resume", action="store_true",
                       help="continue the sweep stopped in --out, or extend a finished one: "
                       "the runs it finished are kept (finished.jsonl), the others run (the "
                       "same config, --grid fields, --metric and --seeds, refused otherwise; "
                       "other --grid values are new points)")
    sweep.add_argument("--force", action="store_true",
                       help="replace an earlier sweep or run in --out (only the files "
                       "fedsparse wrote there, unless changed since; your own files stay)")
    _add_log_option(sweep)
    _add_device_option(sweep)
    sweep.set_defaults(func=cmd_sweep, option_names=_SEARCH_OPTION_NAMES)

    tune = sub.add_parser("tune", allow_abbrev=False,
                          help="search config fields with Optuna (needs fedsparse[tune])",
                          description="Tune fields of every run of a "
                          "TOML experiment with Optuna: one study per run, --trials trials "
                          "each; writes trials.csv, best.json, tune.json (the search's "
                          "settings), tune.png and tuned.toml "
                          "(fedsparse run tuned.toml reruns the winners). The trials "
                          "start spread over the space, the sampler proposes the next "
                          "and the last refine the best so far by a golden-section line "
                          "search. Trials that diverge are pruned. Each trial's runs are "
                          "kept in finished.jsonl as they finish: --resume continues a "
                          "stopped tuning.")
    tune.add_argument("experiment")
    tune.add_argument("--param", action="append", type=_param, metavar="FIELD=SPACE",
                      help="a field and its values: log(LOW, HIGH), uniform(LOW, HIGH), "
                      "int(LOW, HIGH), logint(LOW, HIGH), choice(A, B, ...) or [A, B, ...]; "
                      "e.g. 'algorithm.step_size=log(1e-4, 1e-1)' (repeatable; required)")
    tune.add_argument("--trials", type=int, default=20, metavar="N",
                      help="trials per run (default 20)")
    tune.add_argument("--metric", default="objective",
                      help="last-round field compared (default objective); accuracy, f1, "
                      "precision and recall are maximised, the rest minimised")
    direction = tune.add_mutually_exclusive_group()
    direction.add_argument("--maximize", dest="maximize", action="store_const", const=True,
                           help="pick the largest value of --metric")
    direction.add_argument("--minimize", dest="maximize", action="store_const", const=False,
                           help="pick the smallest value of --metric")
    tune.add_argument("--seeds", type=int, metavar="N",
                      help="run each trial over N seeds and compare the mean")
    tune.add_argument("--jobs", type=int, default=1, metavar="N",
                      help="run N trials at once, in up to N processes (at most one per "
                      "CPU; the sampler proposes N at a time; repeatable for a given N)")
    tune.add_argument("--sampler", choices=("tpe", "gp", "random"), default="tpe",
                      help="Optuna's sampler between the start and the refinement "
                      "(default tpe; random: every trial at random, no phases)")
    tune.add_argument("--sampler-seed", type=int, default=0, metavar="S",
                      help="the sampler's seed (default 0: the same trials every time)")
    _add_search_overrides(tune, "trial", "a --param", "runs/NAME-tune")
    tune.add_argument("--quiet", action="store_true",
                      help="no line per trial (the table and the files are printed)")
    tune.add_argument("--resume", action="store_true",
                      help="continue the tuning stopped in --out: the trials it finished "
                      "are kept (finished.jsonl), the rest of --trials run (the same "
                      "settings; refused otherwise)")
    tune.add_argument("--force", action="store_true",
                      help="replace the results of an earlier run in --out")
    _add_log_option(tune)
    _add_device_option(tune)
    tune.set_defaults(func=cmd_tune, option_names=_SEARCH_OPTION_NAMES)

    report = sub.add_parser("report", allow_abbrev=False,
                            help="write an HTML page of a run, sweep or tuning folder",
                            description="Write report.html into DIR (a folder "
                            "that fedsparse run, sweep or tune wrote), or into each such "
                            "folder directly inside DIR: one self-contained page with the "
                            "claims and verdicts, the final values, zoomable curves, the "
                            "figures, every round, the seeds and the config. It needs no "
                            "network to be read.")
    report.add_argument("dir", metavar="DIR", help="a run, sweep or tuning folder, or a "
                        "folder of them (e.g. runs/)")
    report.set_defaults(func=cmd_report)

    _add_optional_parsers(sub, only)
    return parser


def _add_optional_parsers(sub, only: str | None = None) -> None:
    """Sub-commands that live with optional parts of the package (see build_parser)."""
    if only in (None, "data"):
        from .data.cli import add_data_parser

        add_data_parser(sub)
    else:
        sub.add_parser("data", help="inspect real data sets and federated splits")
    if importlib.util.find_spec("flwr") is None:
        flower = sub.add_parser("flower", help="run fedsparse jobs on Flower (needs pip "
                                "install 'fedsparse[flower]', not installed)")
        flower.set_defaults(func=_no_flower)
    elif only in (None, "flower"):
        from .flower.cli import add_flower_parser

        add_flower_parser(sub)
    else:
        sub.add_parser("flower", help="run fedsparse jobs on Flower")


def _no_flower(args) -> int:
    raise ConfigError("`fedsparse flower` needs Flower, which is not installed: "
                      "pip install 'fedsparse[flower]'")


def _command_of(argv: list[str]) -> str:
    return next((a for a in argv if not a.startswith("-")), "")


_PACKAGE = str(Path(__file__).parent)


def _warning_printer(previous):
    """A ``warnings.showwarning`` that prints fedsparse's own warnings as a command line's
    lines (``fedsparse: warning: ...``), not as Python does (a source path and line), and
    passes another library's to ``previous``."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if str(filename).startswith(_PACKAGE):
            print(f"fedsparse: warning: {message}", file=file or sys.stderr)
        else:
            previous(message, category, filename, lineno, file, line)

    return show


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(only=_command_of(argv))
    args, extra = parser.parse_known_args(argv)
    if extra:  # exits with status 2, naming the options the user may have meant
        leaf = leaf_parser(parser, argv)
        leaf.error(unknown_options(leaf, extra, argv))
    args.argv = argv  # the exact command, for the messages that say how to go on
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _warning_printer(warnings.showwarning)
            return as_interrupted(args.func, args)
    except ConfigError as exc:  # named as typed where an option gave the bad value
        try:
            message = name_typed_options(str(exc), args)
        except Exception:  # never a traceback in place of the error itself
            message = str(exc)
        print(f"fedsparse: error: {message}", file=sys.stderr)
        return 2
    except DataFormatError as exc:  # a damaged or foreign data file, named in the message
        print(f"fedsparse: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        print("fedsparse: error: out of memory (MemoryError): the run needs more memory "
              "than this machine has; make it smaller (fewer data.num_clients or "
              "samples, a smaller data.dim or model, fewer --seeds)", file=sys.stderr)
        return 1
    except BrokenPipeError as exc:
        if not _stdout_closed():
            print(f"fedsparse: error: {exc}", file=sys.stderr)
            return 1
        # The reader of the output went away (`fedsparse list | head`): stop quietly, as
        # the standard tools do, with their status (128 + SIGPIPE); the output still
        # buffered goes nowhere instead of failing again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:  # a file that vanished, a full disk: say so, no traceback
        print(f"fedsparse: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fedsparse: interrupted", file=sys.stderr)
        return 130
    finally:  # the output folder is free for the next command, in this process too
        release_folder_locks()


def _stdout_closed() -> bool:
    """Whether the standard output is a pipe whose reader has gone (poll reports an
    error on it; where poll is missing, Windows, a broken pipe is taken to be it)."""
    if not hasattr(select, "poll"):
        return True
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):  # no file descriptor (a test's captured output)
        return False


if __name__ == "__main__":
    sys.exit(main())
