"""The ``fedsparse`` command line.

Importing this module is cheap: torch and the experiment machinery are imported inside
the command functions, and the parsers of the optional ``data`` and ``flower`` commands
are only built when one of them runs, so ``fedsparse --help`` answers at once.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import inspect
import json
import shlex
import sys
import time
from pathlib import Path

from ._validation import ConfigError
from .cli_common import DEFAULT_EXPERIMENT, parse_value, resolve_experiment, suggest

#: What a command run under :func:`_guarded` returns when Ctrl-C stopped it.
INTERRUPTED = object()
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


def _apply_overrides(config: dict, assignments, rounds, device: str | None = None) -> dict:
    """``config`` with ``--set`` (``FIELD=VALUE`` or ``LABEL:FIELD=VALUE``), ``--rounds``
    and ``--device`` applied to every run (a copy); ``--device`` wins over the device
    the config or a ``--set`` names."""
    from .experiments.config import apply_overrides

    extra = [("device", device)] if device is not None else []
    return apply_overrides(config, [*(assignments or ()), *extra], rounds)


def _check_device(args) -> str | None:
    """``--device`` as given, checked on this machine before anything runs (a GPU that is
    not there is a ConfigError naming --device: exit status 2)."""
    spec = getattr(args, "device", None)
    if spec is None:
        return None
    from .devices import check_device_spec

    return check_device_spec("--device", spec)


#: Options of ``run`` a Python experiment cannot take: it is not a list of config runs.
_TOML_ONLY = (("--set", "set"), ("--only", "only"), ("--band", "band"))
#: The options ``run`` passes to a Python experiment function, by parameter name.
_PYTHON_OPTIONS = {"quick": "--quick", "rounds": "--rounds", "seeds": "--seeds",
                   "resume": "--resume", "device": "--device"}


def _python_options(name: str, python_exp, args) -> dict:
    """The keyword arguments of the Python experiment ``name`` from the command line:
    ``quick``, ``rounds``, ``seeds``, ``resume`` and ``device`` (None / False = the
    experiment's own default). Refuses the options it cannot take."""
    from ._validation import check_int
    from .experiments.registry import INFO

    given = [opt for opt, attr in _TOML_ONLY if getattr(args, attr, None)]
    if given:
        base = getattr(INFO.get(name), "config", None)
        hint = (f"; its runs are the TOML experiment {base!r}: fedsparse run {base} "
                f"{' '.join(given)} ... runs them alone, without the Python experiment's "
                "own steps") if base else ""
        verb = "applies" if len(given) == 1 else "apply"
        raise ConfigError(f"{name!r} is a Python experiment: {', '.join(given)} {verb} to "
                          f"TOML experiments only{hint}")
    values = {"quick": args.quick, "rounds": args.rounds, "seeds": args.seeds,
              "resume": args.resume, "device": getattr(args, "device", None)}
    if values["rounds"] is not None:
        check_int("--rounds", values["rounds"], minimum=1)
    if values["seeds"] is not None:
        check_int("--seeds", values["seeds"], minimum=1)
    params = inspect.signature(python_exp.fn).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {}
    for key, value in values.items():
        if key in params or takes_any:
            kwargs[key] = value
        elif value not in (None, False):
            raise ConfigError(f"{_PYTHON_OPTIONS[key]}: the Python experiment {name!r} does "
                              "not take it")
    return kwargs


def _seeds_text(runs: list[dict]) -> str:
    """"run seed 0, data seed 0" (or the list of each) for the runs of an experiment."""
    from .experiments.runner import data_seed

    def listed(values) -> str:
        values = sorted(set(values))
        return ("s " if len(values) > 1 else " ") + ", ".join(map(str, values))

    data = [d for r in runs if (d := data_seed(r)) is not None]
    return (f"run seed{listed(r['seed'] for r in runs)}, "
            + (f"data seed{listed(data)}" if data else "data read from files"))


def _command(args, out: Path, *, add: str | None = None, drop=("--force", "--resume")) -> str:
    """The exact command line the user typed, without ``drop`` and with ``add`` (e.g.
    ``--resume``), naming ``out`` even where the user left --out to its default."""
    argv = list(getattr(args, "argv", None) or ["run", args.experiment or ""])
    tokens = [t for t in argv if t not in drop]
    if add:
        tokens.append(add)
    if not any(t == "--out" or t.startswith("--out=") for t in tokens):
        tokens += ["--out", str(out)]
    return shlex.join(["fedsparse", *tokens])


def _guarded(out: Path, created: bool, args, block, *, resumable: bool = True):
    """``block()`` under :func:`output_guard`; on Ctrl-C, print the exact command that
    continues (or, if nothing was kept, starts again) and return :data:`INTERRUPTED`."""
    from .experiments.runner import FAILED, has_output, output_guard

    if resumable:
        resume, rerun = _command(args, out, add="--resume"), None
    else:
        resume, rerun = None, _command(args, out, add="--force", drop=("--force",))
    started = time.time()
    try:
        with output_guard(out, created=created, resume_command=resume, rerun_command=rerun):
            return block()
    except KeyboardInterrupt:
        if has_output(out):
            kept = (f"what finished is kept in {out} (see {out / FAILED})"
                    if (out / FAILED).exists() else f"{out} is as it was")
            how = f"Continue with:\n  {resume}" if resume else f"Start again with:\n  {rerun}"
            print(f"fedsparse: interrupted; {kept}. {how}", file=sys.stderr)
        else:
            typed = shlex.join(["fedsparse", *(getattr(args, "argv", None) or [])])
            print("fedsparse: interrupted before any result was written (nothing was kept). "
                  f"Start again with:\n  {typed}", file=sys.stderr)
        return INTERRUPTED
    finally:
        if getattr(args, "log", None):
            _record_tracker_files(out, since=started)


def _record_tracker_files(out: Path, *, since: float) -> None:
    """List the files the trackers wrote during the run in ``out``'s manifest, so that
    ``--force`` may replace them: MLflow's SQLite store and W&B's service process write
    outside Python's ``open``, which the manifest's recorder sees."""
    from .loggers import TRACKER_DIRS
    from .manifest import record_files

    if not out.is_dir():
        return
    written = [p.relative_to(out).as_posix() for d in TRACKER_DIRS if (out / d).is_dir()
               for p in (out / d).rglob("*")
               if p.is_file() and not p.is_symlink() and p.stat().st_mtime >= since - 1]
    if written:
        record_files(out, written)


def _stamp_version(out: Path, device: str | None = None) -> None:
    """Record the fedsparse version, and the device the run was asked to use (``device``,
    None = the default, the CPU) with its GPU, in a Python experiment's summary.json
    where the experiment did not record them itself (the TOML runner writes all three)."""
    from . import __version__
    from .devices import DEFAULT_DEVICE, device_info, resolve_device

    path = out / "summary.json"
    if not path.is_file():
        return
    summary = json.loads(path.read_text())
    if isinstance(summary, dict) and not {"fedsparse_version", "device", "gpu"} <= set(summary):
        summary.setdefault("fedsparse_version", __version__)
        if "device" not in summary:
            summary.update(device_info(resolve_device(device or DEFAULT_DEVICE)))
        path.write_text(json.dumps(summary, indent=2))


def cmd_run(args) -> int:
    from .experiments.config import resolve_runs, select_runs
    from .experiments.runner import output_patterns, prepare_output, run_experiment

    device = _check_device(args)
    name, config, python_exp = resolve_experiment(args.experiment)
    out = Path(args.out or Path("runs") / name).expanduser()
    if python_exp is not None and args.log:  # before the extra's check: it applies anyway
        raise ConfigError(f"--log: {name!r} is a Python experiment, which writes its own "
                          "files; --log applies to TOML experiments (and fs.simulate("
                          "..., loggers=...) in Python)")
    _check_log(args)
    if python_exp is not None:
        kwargs = _python_options(name, python_exp, args)
        created = prepare_output(out, resume=args.resume, force=args.force)
        print(f"fedsparse run {name} -> {out}")

        def run_python():
            result = python_exp.fn(out, **kwargs)
            _stamp_version(out, device)
            return result

        summary = _guarded(out, created, args, run_python)
    else:
        if args.quick:
            from .experiments.registry import has_quick, python_experiments

            quick = sorted(n for n, e in python_experiments().items() if has_quick(e.fn))
            raise ConfigError(f"--quick: {name!r} is a TOML experiment and has no quick form "
                              f"(the Python experiments {', '.join(quick)} have one); for a "
                              "shorter run give --rounds N")
        if args.only:  # by the config's own labels, before --set may change them
            compare, claims = config.get("compare"), config.get("claims", [])
            config = select_runs(config, args.only)
            if compare and "compare" not in config:
                print(f"note: no comparison: the reference run {compare.get('reference')!r} "
                      "is not among the --only runs")
            left_out = len(claims) - len(config.get("claims", []))
            if left_out:
                print(f"note: {left_out} of the config's {len(claims)} claims compare runs "
                      "that --only leaves out: they are not tested here")
        config = _apply_overrides(config, args.set, args.rounds, device)
        if args.band:
            if not args.seeds:
                raise ConfigError(f"--band {args.band} draws the spread over seeds: give "
                                  "--seeds N (N >= 2) as well")
            config["plot"] = {**config.get("plot", {}), "band": args.band}
        runs = resolve_runs(config)  # every check before --out is touched
        slugs = [r["slug"] for r in runs]
        created = prepare_output(out, resume=args.resume, force=args.force, slugs=slugs,
                                 writes=output_patterns(config, slugs))
        print(f"fedsparse run {name} -> {out} ({_seeds_text(runs)})")
        summary = _guarded(out, created, args, lambda: run_experiment(
            config, out, resume=args.resume, progress=False if args.quiet else None,
            seeds=args.seeds, loggers=args.log))
    if summary is INTERRUPTED:
        return 130
    if python_exp is None:  # a FedMac Table 1 row run as its TOML config: its table too
        from .experiments.fedmac import runner_table

        table = runner_table(name, config, out)
        if table:
            print(table)
    print(f"wrote {out}/ : " + ", ".join([*(summary or {}).get("plots", []), "summary.json"]))
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
        gpu = (f"wanted ({r.gpu_runtime})" if r.gpu_runtime else "wanted") if r.gpu else "-"
        table.append((r.paper, r.name, kind, r.runtime, gpu, needs, what))
    widths = [max(len(t[i]) for t in table) for i in range(1, 6)]
    heads = ("NAME", "TYPE", "RUNTIME", "GPU", "NEEDS")
    widths = [max(w, len(h)) for w, h in zip(widths, heads, strict=True)]
    paper = None
    for row in table:
        if row[0] != paper:
            paper = row[0]
            print(("\n" if paper != table[0][0] else "") + PAPERS.get(paper, paper or "other"))
            print("  " + "  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True))
                  + "  WHAT")
        print("  " + "  ".join(c.ljust(w) for c, w in zip(row[1:6], widths, strict=True))
              + "  " + row[6])
    needs = {n.short: n for r in rows for n in r.needs}
    print("\nTOML experiments take --set, --rounds, --only, --seeds, --resume, --device and "
          "work with `fedsparse sweep`;\nPython experiments add steps a config cannot "
          "express; they take --rounds, --seeds, --resume, --device\nand --quick (the same "
          "steps at a reduced scale, "
          "to check that everything runs: its numbers do not\nreproduce the paper's).\n"
          "RUNTIME: the full run, roughly, on one CPU core.\n"
          "GPU: \"wanted\" marks the long neural runs, which are worth --device cuda (the "
          "default device is\nthe CPU); their GPU run times: not measured yet unless given "
          "in brackets (fedsparse show NAME).")
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
        raise ConfigError(f"experiment {name!r} is not a named experiment.{suggest(name, known)}"
                          " `fedsparse list` shows them all.")
    header, text = shown_config(name)
    first, _, rest = header.partition("\n")  # the device line after the header's first
    head = f"{first}\n{_device_comment(name)}{rest}" if header else _device_comment(name)
    sys.stdout.write(head + _seed_comment(name) + text)
    return 0


def _device_comment(name: str) -> str:
    """A comment line saying whether ``name`` wants a GPU, with its measured run times."""
    from .experiments.registry import INFO

    info = INFO.get(name)
    return "" if info is None else f"# Device: {info.device_note()}.\n"


def _seed_comment(name: str) -> str:
    """Comment lines saying which seed is which and their values in ``name``'s runs."""
    from .experiments.config import load_config, resolve_runs
    from .experiments.registry import INFO, toml_experiments

    tomls = toml_experiments()
    path = tomls.get(name) or tomls.get(getattr(INFO.get(name), "config", None) or "")
    if path is None:
        return ""
    try:
        runs = resolve_runs(load_config(path))
    except ConfigError:
        return ""
    return ("# Seeds: `seed` is the run seed (client sampling, channel drops, mini-batches, a\n"
            "# neural model's initialisation); `data.seed` draws the data (the synthetic problem,\n"
            "# or the split and subsample of a real data set). Here: "
            f"{_seeds_text(runs)}.\n"
            "# --set seed=N changes only the run seed (a linear model trained on every client\n"
            "# in every round, on full batches, over no channel, then gives the same numbers);\n"
            "# --set data.seed=N changes the data; --seeds N repeats every run, adding 0..N-1\n"
            "# to both.\n")


def cmd_sweep(args) -> int:
    from .experiments.runner import prepare_output
    from .experiments.sweep import SWEEP_FILES, run_sweep

    if not args.grid:  # before loading anything: a sweep without a grid runs nothing
        raise ConfigError("sweep needs at least one --grid FIELD=[V1, V2, ...], e.g. "
                          "--grid 'algorithm.step_size=[0.01, 0.1, 1]'")
    _check_log(args)
    device = _check_device(args)
    name, config, _ = resolve_experiment(args.experiment)
    if config is None:
        raise ConfigError(f"experiment {name!r} is a Python experiment; sweeps need a TOML config")
    config = _apply_overrides(config, args.set, args.rounds, device)
    grid = dict(args.grid)
    out = Path(args.out or Path("runs") / f"{name}-sweep").expanduser()
    created = prepare_output(out, force=args.force, resumable=False,  # never replaced silently
                             writes=[*SWEEP_FILES, "FAILED"])
    result = _guarded(out, created, args, lambda: run_sweep(
        config, grid, out=out, metric=args.metric, maximize=args.maximize, seeds=args.seeds,
        jobs=args.jobs, loggers=args.log), resumable=False)
    if result is INTERRUPTED:
        return 130
    print(json.dumps(result["best"], indent=2))
    print(f"wrote {out}/ : {', '.join(result['files'])}; `fedsparse run {out}/tuned.toml"
          f"{f' --seeds {args.seeds}' if args.seeds else ''}` reruns the winners")
    return 0


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


def _leaf_parser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The sub-command parser that ``argv`` reaches (``fedsparse flower app ...`` -> app)."""
    for token in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and token in subs[0].choices:
            parser = subs[0].choices[token]
    return parser


def _unknown_options(parser: argparse.ArgumentParser, extra: list[str],
                     argv: list[str]) -> str:
    """"unrecognized arguments: ..." with, for each unknown option, the options it may
    have meant."""
    options = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    notes = []
    for token in extra:
        if not token.startswith("--"):
            continue
        name = token.split("=", 1)[0]
        close = [o for o in options if o.startswith(name)] or \
            difflib.get_close_matches(name, options, n=2, cutoff=0.6)
        if name == "--seed" and "--seeds" in options:
            after = argv[argv.index(token) + 1:argv.index(token) + 2]
            value = token.split("=", 1)[1] if "=" in token else (
                after[0] if after and after[0].isdigit() else "N")
            notes.append(f"{name} is not an option (options are never abbreviated): the run "
                         f"seed is --set seed={value}, the data seed --set data.seed={value}; "
                         "--seeds N repeats every run over N seeds")
        elif close:
            notes.append(f"{name} is not an option (options are never abbreviated); did you "
                         f"mean {' or '.join(close)}?")
    return f"unrecognized arguments: {' '.join(extra)}" + "".join(f"\n  {n}" for n in notes)


def _param(text: str) -> tuple[str, str]:
    if "=" not in text or not text.split("=", 1)[0].strip():
        raise argparse.ArgumentTypeError(f"expected FIELD=SPACE, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


def cmd_tune(args) -> int:
    from .experiments.runner import prepare_output
    from .experiments.tune import parse_space, require_optuna, run_tune

    if not args.param:
        raise ConfigError("tune needs at least one --param FIELD=SPACE, e.g. --param "
                          "'algorithm.step_size=log(1e-4, 1e-1)'")
    require_optuna("fedsparse tune")
    _check_log(args)
    device = _check_device(args)
    space = {key: parse_space(text, f"--param {key}") for key, text in args.param}
    name, config, _ = resolve_experiment(args.experiment)
    if config is None:
        raise ConfigError(f"experiment {name!r} is a Python experiment; tuning needs a TOML "
                          "config")
    config = _apply_overrides(config, args.set, args.rounds, device)
    out = Path(args.out or Path("runs") / f"{name}-tune").expanduser()
    created = prepare_output(out, force=args.force, resumable=False)
    result = _guarded(out, created, args, lambda: run_tune(
        config, space, trials=args.trials, out=out, metric=args.metric,
        maximize=args.maximize, seeds=args.seeds, jobs=args.jobs, sampler=args.sampler,
        sampler_seed=args.sampler_seed, loggers=args.log), resumable=False)
    if result is INTERRUPTED:
        return 130
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


def _add_device_option(parser) -> None:
    parser.add_argument("--device", metavar="DEVICE",
                        help="where every run computes: cpu (the default: the numbers the "
                        "results pages pin are CPU results), cuda, cuda:N, or auto (a GPU "
                        "where there is one); overrides the config's device")


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
    parser = _Parser(prog="fedsparse", description="Sparse federated learning.")
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
                       help="replace an earlier sweep or run in --out (only the files "
                       "fedsparse wrote there, unless changed since; your own files stay)")
    _add_log_option(sweep)
    _add_device_option(sweep)
    sweep.set_defaults(func=cmd_sweep)

    tune = sub.add_parser("tune", allow_abbrev=False,
                          help="search config fields with Optuna (needs fedsparse[tune])",
                          description="Tune fields of every run of a "
                          "TOML experiment with Optuna: one study per run, --trials trials "
                          "each; writes trials.csv, best.json, tune.png and tuned.toml "
                          "(fedsparse run tuned.toml reruns the winners). The trials "
                          "start spread over the space, the sampler proposes the next "
                          "and the last refine the best so far by a golden-section line "
                          "search. Trials that diverge are pruned.")
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
                      help="Optuna's sampler between the start and the refinement "
                      "(default tpe; random: every trial at random, no phases)")
    tune.add_argument("--sampler-seed", type=int, default=0, metavar="S",
                      help="the sampler's seed (default 0: the same trials every time)")
    tune.add_argument("--set", action="append", type=_assignment, metavar="FIELD=VALUE")
    tune.add_argument("--rounds", type=int)
    tune.add_argument("--out", help="output directory (default runs/NAME-tune)")
    tune.add_argument("--force", action="store_true",
                      help="replace the results of an earlier run in --out")
    _add_log_option(tune)
    _add_device_option(tune)
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
    args, extra = parser.parse_known_args(argv)
    if extra:  # exits with status 2, naming the options the user may have meant
        leaf = _leaf_parser(parser, argv)
        leaf.error(_unknown_options(leaf, extra, argv))
    args.argv = argv  # the exact command, for the messages that say how to go on
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"fedsparse: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        print("fedsparse: error: out of memory (MemoryError): the run needs more memory "
              "than this machine has; make it smaller (fewer data.num_clients or "
              "samples, a smaller data.dim or model, fewer --seeds)", file=sys.stderr)
        return 1
    except OSError as exc:  # a file that vanished, a full disk: say so, no traceback
        print(f"fedsparse: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fedsparse: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
