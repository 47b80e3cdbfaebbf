"""``fedsparse flower ...``: the command line of the Flower integration.

Importing this module imports the package ``fedsparse.flower``, whose ``__init__``
needs ``flwr`` and otherwise raises an ImportError naming
``pip install 'fedsparse[flower]'``: ``fedsparse.cli`` wraps the import, so
``fedsparse --help`` works without Flower and simply has no ``flower`` command.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

from .._validation import ConfigError
from ..cli_common import folder, name_typed_options, parse_value, resolve_experiment
from .app_project import write_app_project
from .job import flatten, job_from_config


def add_flower_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``flower app CONFIG --out DIR`` to an argparse ``subparsers`` object.

    Parameters
    ----------
    subparsers : what ``ArgumentParser.add_subparsers()`` returned.

    Returns
    -------
    argparse.ArgumentParser
        The ``flower`` parser. Each leaf parser sets ``func`` to the function to call
        with the parsed arguments (``args.func(args)`` returns an exit code).
    """
    flower = subparsers.add_parser(
        "flower", help="run fedsparse jobs on Flower (needs pip install 'fedsparse[flower]')",
        description="Run fedsparse algorithms on Flower: write app projects for `flwr run`.")
    sub = flower.add_subparsers(dest="flower_command", metavar="COMMAND")
    sub.required = True
    app = sub.add_parser(
        "app", help="write a Flower app project for a fedsparse config",
        description="Write a Flower app project (pyproject.toml with the job as run config, "
                    "ServerApp/ClientApp modules, SuperLink connections) so that `flwr run` "
                    "works on it.")
    app.add_argument("config", help="a named experiment (see `fedsparse list`) or a TOML file: "
                     "a job (rounds, data, problem, algorithm) or an experiment config with "
                     "[[runs]]")
    app.add_argument("--out", required=True, type=folder, help="directory to write the project to")
    app.add_argument("--run", default=None,
                     help="label or index of the run of an experiment config (needed when it "
                     "has several runs)")
    app.add_argument("--name", default=None, help="project name")
    app.add_argument("--address", default="127.0.0.1:9093",
                     help="SuperLink address host:port for the deployment connections")
    app.add_argument("--root-certificates", default=None,
                     help="CA certificate (PEM) for the TLS connection")
    app.add_argument("--sim-address", default="127.0.0.1:9092",
                     help="address of a SuperLink started with --simulation (fedsparse-sim)")
    app.add_argument("--flwr-home", default=None,
                     help="also merge the connections into FLWR_HOME/config.toml (only a "
                     "Flower configuration; the earlier file is kept as config.toml.TIME.bak)")
    app.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a job value, e.g. --set rounds=5 --set algorithm.sparsity=3")
    app.add_argument("--force", action="store_true",
                     help="replace a project fedsparse wrote in --out: only its own files, "
                     "and only those unchanged since; other files stay")
    app.set_defaults(func=flower_app_command)
    _add_demo_parser(sub)
    return flower


def flower_app_command(args: argparse.Namespace) -> int:
    """``fedsparse flower app CONFIG --out DIR``: write the project.

    Parameters
    ----------
    args : the parsed arguments of :func:`add_flower_parser`'s ``app`` parser.

    Returns
    -------
    int
        The exit code: 0, or 2 after printing a configuration error.
    """
    try:
        config = _resolve_config(args.config)
        run = args.run
        if run is not None and run.isdigit():
            run = int(run)
        _check_run_given(config, run)
        if args.set:
            overrides = _overrides(args.set)
            if "runs" in config:
                config = flatten(job_from_config(config, run).to_dict())
                run = None
            config = {**config, **overrides}
        out = write_app_project(config, args.out, run=run, name=args.name, address=args.address,
                                root_certificates=args.root_certificates,
                                flwr_home=args.flwr_home, sim_address=args.sim_address,
                                overwrite=args.force, log=print, cli=True)
    except ConfigError as exc:
        print(f"fedsparse flower app: error: {_as_typed(exc, args)}", file=sys.stderr)
        return 2
    print(f"wrote the Flower app project {out}")
    _print_connections(out, args)
    return 0


def _as_typed(exc: ConfigError, args) -> str:
    """The error naming ``--set KEY=VALUE`` where the bad value came from one (as ``fedsparse
    run`` does), not the job key it became."""
    try:
        pairs = _assignments(args.set)
    except ConfigError:  # a malformed --set: that error already names it
        pairs = []
    typed = SimpleNamespace(set=pairs, argv=getattr(args, "argv", None))
    try:
        return name_typed_options(str(exc), typed)
    except Exception:  # never a traceback in place of the error itself
        return str(exc)


def _overrides(items) -> dict:
    """``--set KEY=VALUE`` items as {dotted key: value} (a later one wins)."""
    return dict(_assignments(items))


def _assignments(items) -> list[tuple[str, object]]:
    """``--set KEY=VALUE`` items as (dotted key, value) pairs, in order; a table
    (``algorithm``) cannot be replaced by a value, only its keys set."""
    from ..experiments.config import TABLE_KEYS

    out = []
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set {item!r} is invalid: must be KEY=VALUE")
        key, value = (part.strip() for part in item.split("=", 1))
        if key in TABLE_KEYS:
            raise ConfigError(f"--set {item!r} is invalid: [{key}] is a table: set one of "
                              f"its keys, e.g. --set {key}.kind=...")
        out.append((key, parse_value(value)))
    return out


def _check_run_given(config: dict, run) -> None:
    """An app project holds one job: with several runs, the user says which (a silent
    first-run default would drop the others)."""
    from ..experiments.run_selection import run_choices

    runs = config.get("runs")
    if run is None and isinstance(runs, list) and len(runs) > 1:
        names = run_choices(config)
        raise ConfigError(f"the config has {len(runs)} runs and an app project holds one: "
                          f"choose it with --run LABEL or --run INDEX; runs: "
                          + ", ".join(f"{i} {n!r}" for i, n in enumerate(names)))


def _resolve_config(name_or_path: str) -> dict:
    """The TOML config of a named experiment or a file, as ``fedsparse run`` finds it."""
    name, config, _ = resolve_experiment(name_or_path)
    if config is None:
        raise ConfigError(f"experiment {name!r} is a Python experiment; Flower runs TOML "
                          "configs (a job or an experiment with [[runs]])")
    return config


def _print_connections(out: Path, args: argparse.Namespace) -> None:
    """Say which SuperLink connections were written (as ``flower-config.toml`` holds
    them), TLS first when certificates were given."""
    with open(out / "flower-config.toml", "rb") as fh:
        links = tomllib.load(fh)["superlink"]
    where = f"{out / 'flower-config.toml'}"
    if args.flwr_home:
        where += f", merged into {Path(args.flwr_home) / 'config.toml'}"
    print(f"  SuperLink connections ({where}):")
    tls = links["fedsparse-tls"]
    ca = tls.get("root-certificates")
    rows = [("fedsparse-tls", tls["address"], "TLS, CA " + ca if ca else
             "TLS, trusting the system's CA certificates (no --root-certificates given)"),
            ("fedsparse-local", links["fedsparse-local"]["address"], "insecure (no TLS)"),
            ("fedsparse-sim", links["fedsparse-sim"]["address"],
             "insecure, a SuperLink started with --simulation")]
    if not ca:  # without a CA of its own, the insecure link is what a local test uses
        rows[:2] = rows[1::-1]
    for conn, address, how in rows:
        print(f"    {conn:<16} {address:<22} {how}")
    print(f"  run it:  flwr run {out} {rows[0][0]} --stream   (see {out / 'README.md'})")


def _add_demo_parser(sub) -> None:
    demo = sub.add_parser(
        "demo", help="run a job on a local SuperLink and two SuperNodes, then stop them",
        description="Start a SuperLink and SuperNodes on 127.0.0.1 (free ports, insecure: "
                    "nothing leaves the machine), run the job with `flwr run`, print where the "
                    "history went and stop every process, also on errors and Ctrl-C. Each "
                    "SuperNode holds one client and regenerates the job's seeded data.")
    demo.add_argument("config", nargs="?", default=None,
                      help="a named experiment or a TOML file (job or experiment config); "
                           "default a small FedIter-HT regression job")
    demo.add_argument("--rounds", type=int, default=None, help="override the number of rounds")
    demo.add_argument("--run", default=None,
                      help="label or index of the run of an experiment config (needed when "
                      "it has several runs)")
    demo.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="override a job value, e.g. --set algorithm.sparsity=3")
    demo.add_argument("--nodes", type=int, default=2,
                      help="number of SuperNodes; the job gets one client per node (default 2)")
    demo.add_argument("--out", default="runs/flower-demo", type=folder,
                      help="directory for the history and model (default runs/flower-demo)")
    demo.add_argument("--timeout", type=float, default=600.0,
                      help="seconds the run may take before it is stopped (default 600)")
    demo.add_argument("--force", action="store_true",
                      help="replace an earlier demo's output in --out: only the files it "
                      "wrote, and only those unchanged since; other files stay")
    demo.set_defaults(func=flower_demo_command)


def flower_demo_command(args: argparse.Namespace) -> int:
    """``fedsparse flower demo [CONFIG]``: a local deployment, run and stopped.

    Parameters
    ----------
    args : the parsed arguments of the ``demo`` parser.

    Returns
    -------
    int
        0; 2 after a configuration error; 1 when a Flower process failed or timed out.
    """
    from .demo import FlowerProcessError, run_demo

    try:
        config, run = None, args.run
        if args.config is not None:
            config = _resolve_config(args.config)
            if run is not None and run.isdigit():
                run = int(run)
            _check_run_given(config, run)
            if "runs" in config:
                config = job_from_config(config, run).to_dict()
                run = None
        elif run is not None:
            raise ConfigError(f"--run {run!r} needs a CONFIG with [[runs]]")
        if args.set:
            from .demo import DEMO_JOB

            config = {**flatten(config if config is not None else DEMO_JOB),
                      **_overrides(args.set)}
        result = run_demo(config, args.out, rounds=args.rounds, run=run, nodes=args.nodes,
                          timeout=args.timeout, overwrite=args.force, echo=print, cli=True)
    except ConfigError as exc:
        print(f"fedsparse flower demo: error: {exc}", file=sys.stderr)
        return 2
    except FlowerProcessError as exc:
        print(f"fedsparse flower demo: error: {exc}", file=sys.stderr)
        print("every process the demo started has been stopped", file=sys.stderr)
        return 1
    print(f"demo: done; the SuperLink and {args.nodes} SuperNodes are stopped")
    print(f"  history: {result.history} (and history.csv, model.npy in {result.out})")
    print(f"  Flower app project, logs: {result.workdir}")
    print(f"  read it back: fedsparse.load_run({str(result.out)!r})")
    return 0
