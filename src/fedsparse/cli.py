"""The ``fedsparse`` command line."""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

from ._validation import ConfigError

DEFAULT_EXPERIMENT = "fedht-default"


def _parse_value(text: str):
    """TOML-ish scalar or list: numbers, true/false, quoted or bare strings."""
    lowered = text.strip()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return ast.literal_eval(lowered)
    except (ValueError, SyntaxError):
        return lowered


def _assignment(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), _parse_value(value)


def _grid(text: str) -> tuple[str, list]:
    key, value = _assignment(text)
    values = list(value) if isinstance(value, list | tuple) else [value]
    return key, values


def resolve_experiment(name_or_path: str | None) -> tuple[str, dict | None, object]:
    """(name, TOML config or None, Python experiment or None) for a name or a file path."""
    from .experiments.config import load_config
    from .experiments.registry import python_experiments, toml_experiments

    name = name_or_path or DEFAULT_EXPERIMENT
    if name.endswith(".toml") or Path(name).is_file():
        return Path(name).stem, load_config(name), None
    tomls, pythons = toml_experiments(), python_experiments()
    if name in tomls:
        return name, load_config(tomls[name]), None
    if name in pythons:
        return name, None, pythons[name]
    known = ", ".join(sorted([*tomls, *pythons]))
    raise ConfigError(f"experiment {name!r} is neither a config file nor a named experiment; "
                      f"named experiments: {known}")


def _apply_overrides(config: dict, assignments, rounds) -> dict:
    from .experiments.config import set_path

    defaults = config.setdefault("defaults", {})
    for key, value in assignments or []:
        set_path(defaults, key, value)
        for run in config.get("runs", []):
            try:  # a value set on a run itself would otherwise win over the defaults
                node = run
                for k in key.split(".")[:-1]:
                    node = node[k]
                if key.split(".")[-1] in node:
                    set_path(run, key, value)
            except (KeyError, TypeError):
                pass
    if rounds is not None:
        defaults["rounds"] = rounds
        for run in config.get("runs", []):
            run.pop("rounds", None)
    return config


def cmd_run(args) -> int:
    from .experiments.runner import run_experiment

    name, config, python_exp = resolve_experiment(args.experiment)
    out = Path(args.out or Path("runs") / name)
    print(f"fedsparse run {name} -> {out}")
    if python_exp is not None:
        if args.set or args.rounds is not None:
            raise ConfigError(f"experiment {name!r} is a Python experiment; --set and --rounds "
                              "apply to TOML configs only")
        summary = python_exp.fn(out, quick=args.quick)
    else:
        config = _apply_overrides(config, args.set, args.rounds)
        summary = run_experiment(config, out, resume=args.resume,
                                 progress=False if args.quiet else None)
    print(f"wrote {out}/ : " + ", ".join(summary.get("plots", [])) + ", summary.json")
    return 0


def cmd_list(args) -> int:
    from .experiments.registry import list_experiments

    rows = list_experiments()
    width = max(len(n) for n, _ in rows)
    for name, desc in rows:
        star = " (default)" if name == DEFAULT_EXPERIMENT else ""
        print(f"{name:<{width}}  {desc}{star}")
    return 0


def cmd_show(args) -> int:
    from .experiments.registry import toml_experiments

    tomls = toml_experiments()
    if args.experiment not in tomls:
        raise ConfigError(f"experiment {args.experiment!r} has no TOML config; "
                          f"choose one of: {', '.join(tomls)}")
    sys.stdout.write(tomls[args.experiment].read_text())
    return 0


def cmd_sweep(args) -> int:
    from .experiments.sweep import run_sweep

    name, config, _ = resolve_experiment(args.experiment)
    if config is None:
        raise ConfigError(f"experiment {name!r} is a Python experiment; sweeps need a TOML config")
    config = _apply_overrides(config, args.set, args.rounds)
    grid = dict(args.grid)
    if not grid:
        raise ConfigError("give at least one --grid FIELD=[v1, v2, ...]")
    out = Path(args.out or Path("runs") / f"{name}-sweep")
    result = run_sweep(config, grid, out=out, metric=args.metric)
    print(json.dumps(result["best"], indent=2, default=str))
    print(f"wrote {out}/sweep.csv and best.json")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedsparse", description="Sparse federated learning.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a named experiment or a TOML config")
    run.add_argument("experiment", nargs="?", help=f"name or path (default {DEFAULT_EXPERIMENT})")
    run.add_argument("--out", help="output directory (default runs/NAME)")
    run.add_argument("--set", action="append", type=_assignment, metavar="FIELD=VALUE",
                     help="override a run field, e.g. algorithm.step_size=0.01 (repeatable)")
    run.add_argument("--rounds", type=int, help="override the number of rounds of every run")
    run.add_argument("--resume", action="store_true", help="continue from saved checkpoints")
    run.add_argument("--quick", action="store_true", help="Python experiments: a small version")
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    run.set_defaults(func=cmd_run)

    lst = sub.add_parser("list", help="list the named experiments")
    lst.set_defaults(func=cmd_list)

    show = sub.add_parser("show", help="print a named experiment's TOML config")
    show.add_argument("experiment")
    show.set_defaults(func=cmd_show)

    sweep = sub.add_parser("sweep", help="grid search over config fields")
    sweep.add_argument("experiment")
    sweep.add_argument("--grid", action="append", type=_grid, metavar="FIELD=[V1, V2]",
                       help="e.g. algorithm.step_size=[1, 0.1, 0.01] (repeatable)")
    sweep.add_argument("--metric", default="objective", help="final-round field to minimise")
    sweep.add_argument("--set", action="append", type=_assignment, metavar="FIELD=VALUE")
    sweep.add_argument("--rounds", type=int)
    sweep.add_argument("--out")
    sweep.set_defaults(func=cmd_sweep)

    _add_optional_parsers(sub)
    return parser


def _add_optional_parsers(sub) -> None:
    """Sub-commands that live with optional parts of the package."""
    from .data.cli import add_data_parser

    add_data_parser(sub)
    try:
        from .flower.cli import add_flower_parser
    except ImportError:
        return
    add_flower_parser(sub)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"fedsparse: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
