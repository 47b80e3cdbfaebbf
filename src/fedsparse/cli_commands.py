"""The ``fedsparse`` commands besides ``run``: ``list`` and ``show`` (what is there),
``sweep`` and ``tune`` (many runs of one config), ``report`` (HTML pages of results).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ._validation import ConfigError, expand_home
from .cli_common import DEFAULT_EXPERIMENT, check_count_options, resolve_experiment, suggest
from .cli_run import (
    INTERRUPTED,
    _apply_overrides,
    _check_device,
    _check_log,
    _guarded,
    _seeds_text,
)


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
    print("\nTOML experiments take --set, --rounds, --only, --seeds, --resume and --device, "
          "and `fedsparse sweep` and\n`tune` search their fields; Python experiments add "
          "steps a config cannot express;\nthey take --rounds, --seeds, --resume, --device "
          "and --quick (the same steps at a reduced\nscale, to check that everything "
          "runs: its numbers do not reproduce the paper's).\n"
          "RUNTIME: the full run, roughly, as timed on a 2-core CPU machine.\n"
          "GPU: \"wanted\" marks the long neural runs, which are worth --device cuda (the "
          "default device is\nthe CPU); a GPU run time in brackets is measured, or "
          "estimated from timed rounds where it says so.")
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


def _search_config(args, device, needs: str) -> tuple[str, dict]:
    """The TOML experiment a sweep or a tuning searches over, with ``--set``, ``--rounds``
    and ``--device`` applied; ``needs`` completes the refusal of a Python experiment."""
    name, config, _ = resolve_experiment(args.experiment)
    if config is None:
        raise ConfigError(f"experiment {name!r} is a Python experiment; {needs} a TOML config")
    return name, _apply_overrides(config, args.set, args.rounds, device)


def _search_log(args):
    """Where a sweep or a tuning prints its lines: nowhere with ``--quiet`` (its table
    is then printed by :func:`_report_search`)."""
    return (lambda *_: None) if args.quiet else print


def _report_search(result, out: Path, args, table: str) -> int:
    """The end of a sweep or a tuning: the winners and the command that reruns them
    (after the ``table`` entry of ``result`` with ``--quiet``, which printed nothing)."""
    if result is INTERRUPTED:
        return 130
    if args.quiet:
        print(result[table])
    print(json.dumps(result["best"], indent=2))
    if "tuned.toml" not in result["files"]:
        print(f"wrote {out}/ : {', '.join(result['files'])}; every point diverged for every "
              "run: there is no winner (a smaller step size or a narrower range may help)")
        return 0
    print(f"wrote {out}/ : {', '.join(result['files'])}; `fedsparse run {out}/tuned.toml"
          f"{f' --seeds {args.seeds}' if args.seeds else ''}` reruns the winners")
    return 0


def _once(option: str, pairs) -> dict:
    """``[(field, value), ...]`` as a dict, refusing a field given twice (the second
    would silently replace the first)."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ConfigError(f"{option} {key} is given twice; give each field once, with "
                              "all its values")
        out[key] = value
    return out


def _searched_not_fixed(searched: dict, args, option: str) -> None:
    """Refuse a field that the search varies and ``--set`` or ``--rounds`` also fixes: the
    searched values would replace the fixed one without a word."""
    fixed = {key: f"--set {key}" for key, _ in args.set or []}
    if args.rounds is not None:
        fixed["rounds"] = "--rounds"
    for key in searched:
        if key in fixed:
            raise ConfigError(f"{option} {key} and {fixed[key]} both give {key}: the searched "
                              f"values would replace {fixed[key]}; drop one of the two")


def cmd_sweep(args) -> int:
    from .experiments.output import SWEEP, prepare_output
    from .experiments.sweep import SWEEP_FILES, run_sweep

    if not args.grid:  # before loading anything: a sweep without a grid runs nothing
        raise ConfigError("sweep needs at least one --grid FIELD=[V1, V2, ...], e.g. "
                          "--grid 'algorithm.step_size=[0.01, 0.1, 1]'")
    check_count_options(args)
    _check_log(args)
    device = _check_device(args)
    name, config = _search_config(args, device, "sweeps need")
    grid = _once("--grid", args.grid)
    _searched_not_fixed(grid, args, "--grid")
    out = expand_home("--out", args.out or Path("runs") / f"{name}-sweep")
    created = prepare_output(out, resume=args.resume, force=args.force,  # never replaced
                             writes=[*SWEEP_FILES, "FAILED"],  # silently
                             identity={"experiment": SWEEP})
    result = _guarded(out, created, args, lambda: run_sweep(
        config, grid, out=out, metric=args.metric, maximize=args.maximize, seeds=args.seeds,
        jobs=args.jobs, loggers=args.log, log=_search_log(args), resume=args.resume))
    return _report_search(result, out, args, "pivot")


def cmd_tune(args) -> int:
    from .experiments.config import check_metric
    from .experiments.output import TUNING, prepare_output
    from .experiments.tune import TUNE_FILES, parse_space, require_optuna, run_tune

    if not args.param:
        raise ConfigError("tune needs at least one --param FIELD=SPACE, e.g. --param "
                          "'algorithm.step_size=log(1e-4, 1e-1)'")
    params = _once("--param", args.param)  # a typo in the command first, then the extra
    _searched_not_fixed(params, args, "--param")
    check_count_options(args)
    check_metric("--metric", args.metric)
    require_optuna("fedsparse tune")
    _check_log(args)
    device = _check_device(args)
    space = {key: parse_space(text, f"--param {key}") for key, text in params.items()}
    name, config = _search_config(args, device, "tuning needs")
    out = expand_home("--out", args.out or Path("runs") / f"{name}-tune")
    created = prepare_output(out, resume=args.resume, force=args.force,
                             writes=[*TUNE_FILES, "FAILED"], identity={"experiment": TUNING})
    result = _guarded(out, created, args, lambda: run_tune(
        config, space, trials=args.trials, out=out, metric=args.metric,
        maximize=args.maximize, seeds=args.seeds, jobs=args.jobs, sampler=args.sampler,
        sampler_seed=args.sampler_seed, loggers=args.log, log=_search_log(args),
        resume=args.resume))
    return _report_search(result, out, args, "table")


def cmd_report(args) -> int:
    from .report.html import write_reports

    failed = []

    def skipped(folder, error):
        failed.append(folder)
        print(f"fedsparse: error: {error}", file=sys.stderr)

    for page in write_reports(args.dir, on_error=skipped):
        print(f"wrote {page}")
    if failed:
        print(f"fedsparse: no report for {len(failed)} folder(s): "
              + ", ".join(map(str, failed[:5])), file=sys.stderr)
        return 2
    return 0
