"""The ``fedsparse`` command line.

Importing this module is cheap: torch and the experiment machinery are imported inside
the command functions, and the parsers of the optional ``data`` and ``flower`` commands
are only built when one of them runs, so ``fedsparse --help`` answers at once.
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import importlib.util
import json
import re
import sys
import tomllib
from pathlib import Path

from ._validation import ConfigError

DEFAULT_EXPERIMENT = "fedht-default"
#: A number TOML does not accept but a user types (".5", "1.", "1E3").
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _parse_value(text: str):
    """A ``--set`` value: a TOML value (``3``, ``0.1``, ``1e-3``, ``true``, ``"text"``,
    ``[1, 2]``, ``{kind = "bernoulli", probability = 0.5}``); anything else is the text
    itself as a string (``auto``, ``/path/to/file``)."""
    text = text.strip()
    if text in ("True", "False"):  # Python spelling of TOML's true/false
        return text == "True"
    try:
        doc = tomllib.loads(f"v = {text}")
    except tomllib.TOMLDecodeError:
        doc = None
    # a date, or a second line smuggling in more keys, is not a --set value: keep the text
    if doc is not None and len(doc) == 1 and not isinstance(
            doc["v"], datetime.date | datetime.time):
        return doc["v"]
    if _NUMBER.fullmatch(text):
        return float(text)
    return text


def _assignment(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    if not key.strip():
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE, got {text!r} (no FIELD)")
    return key.strip(), _parse_value(value)


def _grid(text: str) -> tuple[str, list]:
    key, value = _assignment(text)
    values = list(value) if isinstance(value, list | tuple) else [value]
    return key, values


def _suggest(name: str, known) -> str:
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def resolve_experiment(name_or_path: str | None) -> tuple[str, dict | None, object]:
    """(name, TOML config or None, Python experiment or None) for a name or a file path."""
    from .experiments.config import load_config
    from .experiments.registry import python_experiments, toml_experiments

    name = name_or_path or DEFAULT_EXPERIMENT
    if name.endswith(".toml") or "/" in name or Path(name).exists():
        return Path(name).stem, load_config(name), None  # says what is wrong with the path
    tomls, pythons = toml_experiments(), python_experiments()
    if name in tomls:
        return name, load_config(tomls[name]), None
    if name in pythons:
        return name, None, pythons[name]
    raise ConfigError(f"experiment {name!r} is neither a config file nor a named experiment."
                      f"{_suggest(name, [*tomls, *pythons])} `fedsparse list` shows them all.")


def _apply_overrides(config: dict, assignments, rounds) -> dict:
    """``config`` with ``--set`` (``FIELD=VALUE`` or ``LABEL:FIELD=VALUE``) and
    ``--rounds`` applied to every run (a copy)."""
    from .experiments.config import apply_overrides

    return apply_overrides(config, assignments or (), rounds)


def _python_only(name: str, python_exp, args) -> None:
    """Refuse the options a Python experiment would ignore."""
    from .experiments.registry import INFO, has_quick

    given = [opt for opt, on in (("--set", args.set), ("--rounds", args.rounds is not None),
                                 ("--only", args.only), ("--resume", args.resume),
                                 ("--seeds", args.seeds is not None),
                                 ("--band", args.band)) if on]
    if given:
        base = getattr(INFO.get(name), "config", None)
        hint = (f"; its runs are the TOML experiment {base!r}: fedsparse run {base} "
                f"{' '.join(given)} ... (without the f* reference)") if base else ""
        verb = "applies" if len(given) == 1 else "apply"
        raise ConfigError(f"{name!r} is a Python experiment: {', '.join(given)} {verb} to "
                          f"TOML experiments only{hint}")
    if args.quick and not has_quick(python_exp.fn):
        raise ConfigError(f"--quick: the Python experiment {name!r} has no quick form")


def _stamp_version(out: Path) -> None:
    """Record the fedsparse version in a Python experiment's summary.json (the TOML
    runner writes it itself)."""
    from . import __version__

    path = out / "summary.json"
    if not path.is_file():
        return
    summary = json.loads(path.read_text())
    if isinstance(summary, dict) and "fedsparse_version" not in summary:
        summary["fedsparse_version"] = __version__
        path.write_text(json.dumps(summary, indent=2))


def cmd_run(args) -> int:
    from .experiments.config import resolve_runs, select_runs
    from .experiments.runner import output_guard, prepare_output, run_experiment

    name, config, python_exp = resolve_experiment(args.experiment)
    out = Path(args.out or Path("runs") / name)
    _check_log(args)
    if python_exp is not None:
        _python_only(name, python_exp, args)
        if args.log:
            raise ConfigError(f"--log: {name!r} is a Python experiment, which writes its own "
                              "files; --log applies to TOML experiments (and fs.simulate("
                              "..., loggers=...) in Python)")
        created = prepare_output(out, force=args.force)
        print(f"fedsparse run {name} -> {out}")
        with output_guard(out, created=created):
            summary = python_exp.fn(out, quick=args.quick) if args.quick else python_exp.fn(out)
            _stamp_version(out)
    else:
        if args.quick:
            from .experiments.registry import has_quick, python_experiments

            quick = sorted(n for n, e in python_experiments().items() if has_quick(e.fn))
            raise ConfigError(f"--quick: {name!r} is a TOML experiment and has no quick form "
                              f"(the Python experiments {', '.join(quick)} have one); for a "
                              "shorter run give --rounds N")
        if args.only:  # by the config's own labels, before --set may change them
            compare = config.get("compare")
            config = select_runs(config, args.only)
            if compare and "compare" not in config:
                print(f"note: no comparison: the reference run {compare.get('reference')!r} "
                      "is not among the --only runs")
        config = _apply_overrides(config, args.set, args.rounds)
        if args.band:
            if not args.seeds:
                raise ConfigError(f"--band {args.band} draws the spread over seeds: give "
                                  "--seeds N (N >= 2) as well")
            config["plot"] = {**config.get("plot", {}), "band": args.band}
        runs = resolve_runs(config)  # every check before --out is touched
        created = prepare_output(out, resume=args.resume, force=args.force,
                                 slugs=[r["slug"] for r in runs])
        print(f"fedsparse run {name} -> {out}")
        with output_guard(out, created=created):
            summary = run_experiment(config, out, resume=args.resume,
                                     progress=False if args.quiet else None, seeds=args.seeds,
                                     loggers=args.log)
    print(f"wrote {out}/ : " + ", ".join([*summary.get("plots", []), "summary.json"]))
    return 0


def cmd_list(args) -> int:
    from .experiments.registry import INFO, PAPERS, experiment_rows

    rows = experiment_rows(include_hidden=args.all)
    bases = {info.config: name for name, info in INFO.items() if info.config}
    table = []
    for r in rows:
        kind = "Python, --quick" if r.quick else r.kind
        needs = ", ".join(n.short for n in r.needs) or "-"
        what = r.title + (" (default)" if r.name == DEFAULT_EXPERIMENT else "")
        if r.hidden and r.name in bases:
            what += f" [the runs of {bases[r.name]}]"
        table.append((r.paper, r.name, kind, r.runtime, needs, what))
    widths = [max(len(t[i]) for t in table) for i in range(1, 5)]
    heads = ("NAME", "TYPE", "RUNTIME", "NEEDS")
    widths = [max(w, len(h)) for w, h in zip(widths, heads, strict=True)]
    paper = None
    for row in table:
        if row[0] != paper:
            paper = row[0]
            print(("\n" if paper != table[0][0] else "") + PAPERS.get(paper, paper or "other"))
            print("  " + "  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True))
                  + "  WHAT")
        print("  " + "  ".join(c.ljust(w) for c, w in zip(row[1:5], widths, strict=True))
              + "  " + row[5])
    needs = {n.short: n for r in rows for n in r.needs}
    print("\nTOML experiments take --set, --rounds, --only, --resume and work with "
          "`fedsparse sweep`;\nPython experiments add steps a config cannot express and "
          "take --quick (a seconds-long version).\nRUNTIME: the full run, roughly, on one "
          "CPU core.")
    if needs:
        print("NEEDS:")
        w = max(map(len, needs))
        for short, need in needs.items():
            have = need.available()
            state = "" if have is None else ("  [installed]" if have else "  [missing]")
            print(f"  {short.ljust(w)}  {need.how}{state}")
    print("Parameters: fedsparse show NAME.  Run: fedsparse run NAME [--out DIR]."
          + ("" if args.all else "  Also the configs behind Python experiments: "
             "fedsparse list --all."))
    return 0


def cmd_show(args) -> int:
    from .experiments.registry import (
        name_papers,
        python_experiments,
        shown_config,
        toml_experiments,
    )

    name = args.experiment
    if name.endswith(".toml") or Path(name).is_file():
        if not Path(name).is_file():
            raise ConfigError(f"config file {name!r} does not exist")
        sys.stdout.write(name_papers(Path(name).read_text()))
        return 0
    known = [*toml_experiments(), *python_experiments()]
    if name not in known:
        raise ConfigError(f"experiment {name!r} is not a named experiment.{_suggest(name, known)}"
                          " `fedsparse list` shows them all.")
    header, text = shown_config(name)
    sys.stdout.write(header + text)
    return 0


def cmd_sweep(args) -> int:
    from .experiments.runner import output_guard, prepare_output
    from .experiments.sweep import run_sweep

    if not args.grid:  # before loading anything: a sweep without a grid runs nothing
        raise ConfigError("sweep needs at least one --grid FIELD=[V1, V2, ...], e.g. "
                          "--grid 'algorithm.step_size=[0.01, 0.1, 1]'")
    _check_log(args)
    name, config, _ = resolve_experiment(args.experiment)
    if config is None:
        raise ConfigError(f"experiment {name!r} is a Python experiment; sweeps need a TOML config")
    config = _apply_overrides(config, args.set, args.rounds)
    grid = dict(args.grid)
    out = Path(args.out or Path("runs") / f"{name}-sweep").expanduser()
    created = prepare_output(out, force=args.force, resumable=False)  # never replaced silently
    with output_guard(out, created=created):
        result = run_sweep(config, grid, out=out, metric=args.metric, maximize=args.maximize,
                           seeds=args.seeds, jobs=args.jobs, loggers=args.log)
    print(json.dumps(result["best"], indent=2))
    print(f"wrote {out}/ : {', '.join(result['files'])}; `fedsparse run {out}/tuned.toml"
          f"{f' --seeds {args.seeds}' if args.seeds else ''}` reruns the winners")
    return 0


def _param(text: str) -> tuple[str, str]:
    if "=" not in text or not text.split("=", 1)[0].strip():
        raise argparse.ArgumentTypeError(f"expected FIELD=SPACE, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


def cmd_tune(args) -> int:
    from .experiments.runner import output_guard, prepare_output
    from .experiments.tune import parse_space, require_optuna, run_tune

    if not args.param:
        raise ConfigError("tune needs at least one --param FIELD=SPACE, e.g. --param "
                          "'algorithm.step_size=log(1e-4, 1e-1)'")
    require_optuna("fedsparse tune")
    _check_log(args)
    space = {key: parse_space(text, f"--param {key}") for key, text in args.param}
    name, config, _ = resolve_experiment(args.experiment)
    if config is None:
        raise ConfigError(f"experiment {name!r} is a Python experiment; tuning needs a TOML "
                          "config")
    config = _apply_overrides(config, args.set, args.rounds)
    out = Path(args.out or Path("runs") / f"{name}-tune").expanduser()
    created = prepare_output(out, force=args.force, resumable=False)
    with output_guard(out, created=created):
        result = run_tune(config, space, trials=args.trials, out=out, metric=args.metric,
                          maximize=args.maximize, seeds=args.seeds, jobs=args.jobs,
                          sampler=args.sampler, sampler_seed=args.sampler_seed,
                          loggers=args.log)
    print(json.dumps(result["best"], indent=2))
    print(f"wrote {out}/ : {', '.join(result['files'])}; `fedsparse run {out}/tuned.toml"
          f"{f' --seeds {args.seeds}' if args.seeds else ''}` reruns the winners")
    return 0


def cmd_report(args) -> int:
    from .report.html import write_reports

    for page in write_reports(args.dir):
        print(f"wrote {page}")
    return 0


#: The trackers ``--log`` takes (fedsparse.loggers.KINDS, without importing it).
LOG_KINDS = ("tensorboard", "mlflow", "wandb")


def _add_log_option(parser) -> None:
    parser.add_argument("--log", action="append", choices=LOG_KINDS, metavar="TRACKER",
                        help="also log every run to an experiment tracker: tensorboard, "
                        "mlflow or wandb (offline unless WANDB_MODE says otherwise); "
                        "repeatable; its files go to --out (needs pip install "
                        "'fedsparse[TRACKER]')")


def _check_log(args) -> None:
    """A --log tracker that is not installed is refused before anything runs."""
    if getattr(args, "log", None):
        from .loggers import check_installed

        seen = set()
        for kind in args.log:
            if kind in seen:
                raise ConfigError(f"--log {kind} is given twice")
            seen.add(kind)
            check_installed(kind, "--log")


def _version() -> str:
    from . import __version__

    return __version__


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``fedsparse`` parser.

    Parameters
    ----------
    only : the command about to run. The optional commands (``data``, ``flower``) import
        torch or Flower to build their parsers, so only that one is built in full; the
        others get a one-line placeholder for ``--help``. None builds them all.
    """
    parser = argparse.ArgumentParser(prog="fedsparse", description="Sparse federated learning.")
    parser.add_argument("--version", action="version", version=f"fedsparse {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run a named experiment or a TOML config",
                         description="Run a named experiment (fedsparse list) or a TOML "
                                     "config; results go to --out (default runs/NAME).")
    run.add_argument("experiment", nargs="?", help=f"name or path (default {DEFAULT_EXPERIMENT})")
    run.add_argument("--out", help="output directory (default runs/NAME); must be new or empty "
                     "unless --resume or --force")
    run.add_argument("--set", action="append", type=_assignment, metavar="FIELD=VALUE",
                     help="override a run field, e.g. algorithm.step_size=0.01, or one run's "
                     "with LABEL:algorithm.step_size=0.01 (repeatable); VALUE is TOML")
    run.add_argument("--only", action="append", metavar="LABEL",
                     help="run only this run of a multi-run experiment (repeatable)")
    run.add_argument("--rounds", type=int, help="override the number of rounds of every run")
    run.add_argument("--resume", action="store_true",
                     help="continue the runs in --out from their checkpoints")
    run.add_argument("--force", action="store_true",
                     help="replace the results of an earlier run in --out (its files are "
                     "deleted first; only a folder a fedsparse run wrote)")
    run.add_argument("--quick", action="store_true",
                     help="Python experiments: a seconds-long version")
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    run.add_argument("--seeds", type=int, metavar="N",
                     help="run every run N times, replicate k adding k to its run seed and "
                     "data.seed; plots show mean ± std, summary.json mean, std and n")
    run.add_argument("--band", choices=("std", "ci95"),
                     help="with --seeds: shade ± one std (default) or the 95%% confidence "
                     "interval of the mean (Student's t)")
    _add_log_option(run)
    run.set_defaults(func=cmd_run)

    lst = sub.add_parser("list", help="list the named experiments: paper, runtime, needs")
    lst.add_argument("--all", action="store_true",
                     help="also the TOML configs that serve Python experiments")
    lst.set_defaults(func=cmd_list)

    show = sub.add_parser("show", help="print a named experiment's parameters (TOML)")
    show.add_argument("experiment")
    show.set_defaults(func=cmd_show)

    sweep = sub.add_parser("sweep", help="grid search over config fields")
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
                       help="run grid points in N processes (same results as serial)")
    sweep.add_argument("--set", action="append", type=_assignment, metavar="FIELD=VALUE")
    sweep.add_argument("--rounds", type=int)
    sweep.add_argument("--out")
    sweep.add_argument("--force", action="store_true",
                       help="replace the results of an earlier sweep or run in --out")
    _add_log_option(sweep)
    sweep.set_defaults(func=cmd_sweep)

    tune = sub.add_parser("tune", allow_abbrev=False,
                          help="search config fields with Optuna (needs fedsparse[tune])",
                          description="Tune fields of every run of a "
                          "TOML experiment with Optuna: one study per run, --trials trials "
                          "each; writes trials.csv, best.json, tune.png and tuned.toml "
                          "(fedsparse run tuned.toml reruns the winners). Trials that "
                          "diverge are pruned.")
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
                      help="run N trials at once in N processes (the sampler proposes N "
                      "at a time; repeatable for a given N)")
    tune.add_argument("--sampler", choices=("tpe", "gp", "random"), default="tpe",
                      help="Optuna's sampler (default tpe)")
    tune.add_argument("--sampler-seed", type=int, default=0, metavar="S",
                      help="the sampler's seed (default 0: the same trials every time)")
    tune.add_argument("--set", action="append", type=_assignment, metavar="FIELD=VALUE")
    tune.add_argument("--rounds", type=int)
    tune.add_argument("--out", help="output directory (default runs/NAME-tune)")
    tune.add_argument("--force", action="store_true",
                      help="replace the results of an earlier run in --out")
    _add_log_option(tune)
    tune.set_defaults(func=cmd_tune)

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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(only=_command_of(argv))
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"fedsparse: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file that vanished, a full disk: say so, no traceback
        print(f"fedsparse: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fedsparse: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
