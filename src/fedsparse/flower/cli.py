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

from .._validation import ConfigError
from ..experiments.config import load_config
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
    app.add_argument("config", help="TOML file: a job (rounds, data, problem, algorithm) or an "
                     "experiment config with [[runs]]")
    app.add_argument("--out", required=True, help="directory to write the project to")
    app.add_argument("--run", default=None,
                     help="label or index of the run of an experiment config (default first)")
    app.add_argument("--name", default=None, help="project name")
    app.add_argument("--address", default="127.0.0.1:9093",
                     help="SuperLink address host:port for the deployment connections")
    app.add_argument("--root-certificates", default=None,
                     help="CA certificate (PEM) for the TLS connection")
    app.add_argument("--sim-address", default="127.0.0.1:9092",
                     help="address of a SuperLink started with --simulation (fedsparse-sim)")
    app.add_argument("--flwr-home", default=None,
                     help="also merge the connections into FLWR_HOME/config.toml")
    app.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a job value, e.g. --set rounds=5 --set algorithm.sparsity=3")
    app.add_argument("--force", action="store_true", help="write into a non-empty directory")
    app.set_defaults(func=flower_app_command)
    return flower


def _parse_value(text: str):
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # a bare word is a string


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
    path = Path(args.config)
    try:
        config = load_config(path)
        run = args.run
        if run is not None and run.isdigit():
            run = int(run)
        if args.set:
            overrides = {}
            for item in args.set:
                if "=" not in item:
                    raise ConfigError(f"--set {item!r} is invalid: must be KEY=VALUE")
                key, value = item.split("=", 1)
                overrides[key.strip()] = _parse_value(value.strip())
            if "runs" in config:
                config = flatten(job_from_config(config, run).to_dict())
                run = None
            config = {**config, **overrides}
        out = write_app_project(config, args.out, run=run, name=args.name, address=args.address,
                                root_certificates=args.root_certificates,
                                flwr_home=args.flwr_home, sim_address=args.sim_address,
                                overwrite=args.force)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote the Flower app project {out}")
    print(f"  run it:  flwr run {out} fedsparse-local   (see {out / 'README.md'})")
    return 0
