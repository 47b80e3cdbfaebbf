"""``fedsparse run``: a named experiment or a TOML config, with its options, into a
guarded output folder (and what the other commands that write results share: the
output guard, the exact command that goes on after Ctrl-C, the checks of ``--device``
and ``--log``).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import shlex
import sys
import time
from pathlib import Path

from ._signals import as_interrupted, sigterm_raises
from ._validation import ConfigError, expand_home
from .cli_common import check_count_options, resolve_experiment

#: What a command run under :func:`_guarded` returns when Ctrl-C stopped it.
INTERRUPTED = object()


def _apply_overrides(config: dict, assignments, rounds, device: str | None = None) -> dict:
    """``config`` with ``--set`` (``FIELD=VALUE`` or ``LABEL:FIELD=VALUE``), ``--rounds``
    and ``--device`` applied to every run (a copy); ``--device`` wins over the device
    the config or a ``--set`` names."""
    from .experiments.run_selection import apply_overrides

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
    check_count_options(args)
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


def _python_identity(name: str, python_exp, kwargs: dict) -> dict:
    """What a Python experiment's folder records of it (``--resume`` compares): its name,
    seeds and quick form, an option not given read as the experiment's default (the
    number of seeds it runs unless told, where it declares one)."""
    params = inspect.signature(python_exp.fn).parameters
    identity = {"experiment": name}
    for key in ("seeds", "quick"):
        value = kwargs.get(key)
        if value in (None, False) and key in params:
            default = params[key].default
            value = None if default is inspect.Parameter.empty else default
        identity[key] = bool(value) if key == "quick" else value
    if identity["seeds"] is None and python_exp.default_seeds is not None:
        identity["seeds"] = _declared_seeds(python_exp, identity["quick"])
    return identity


def _toml_source(experiment: str | None) -> dict:
    """What a TOML experiment's folder records of the config it was started from
    (:data:`~fedsparse.experiments.output.SOURCE`): the named experiment, or the file's
    resolved path, and the SHA-256 of its bytes; chosen as :func:`resolve_experiment`
    chose the config (a file before a name)."""
    from .cli_common import DEFAULT_EXPERIMENT
    from .experiments.registry import toml_experiments

    name = DEFAULT_EXPERIMENT if experiment is None else experiment
    path, source = Path(name), None
    if not (name.endswith(".toml") or "/" in name or path.is_file()):
        source, path = name, toml_experiments()[name]
    return {"config": source or str(path.resolve()),
            "config_sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def _declared_seeds(python_exp, quick: bool) -> int:
    """The number of seeds ``python_exp`` declares it runs unless told, checked."""
    from ._validation import check_int

    return check_int(f"{python_exp.name}: default_seeds(quick={quick})",
                     python_exp.default_seeds(quick), minimum=1)


def _without_seeds(argv: list[str]) -> list[str]:
    """``argv`` without its ``--seeds N`` (or ``--seeds=N``)."""
    out, skip = [], False
    for token in argv:
        if skip:
            skip = False
        elif token == "--seeds":
            skip = True
        elif not token.startswith("--seeds="):
            out.append(token)
    return out


def _check_resume_seeds(args, out: Path, identity: dict, run: str | None = None) -> None:
    """On ``--resume``, refuse another number of seeds than the runs in ``out`` were
    started with (fewer, or --seeds where there was none or the other way round), saying
    why and giving the exact command that continues them. :func:`prepare_output` refuses
    these too, naming only the values; this says what to type. ``run``: a run folder of
    a TOML experiment, to show where its files go (None for a Python experiment)."""
    from types import SimpleNamespace

    from ._validation import fail
    from .experiments.output import IDENTITY, marker_info, more_seeds, said

    if not args.resume or not out.is_dir():
        return
    recorded = marker_info(out)
    if "seeds" not in recorded or any(recorded.get(k, identity.get(k)) != identity.get(k)
                                      for k in IDENTITY if k != "seeds"):
        return  # another experiment or form, or an older marker: prepare_output says so
    old, new = recorded["seeds"], identity.get("seeds")
    if old == new or more_seeds(old, new) or not all(isinstance(v, int | None)
                                                      for v in (old, new)):
        return  # the same or more seeds: resumable
    seeds = f"seeds {said('seeds', old)} there, {said('seeds', new)} now"
    argv = _without_seeds(list(getattr(args, "argv", None) or ["run", args.experiment or ""]))
    if old is not None:
        argv += ["--seeds", str(old)]
    how = _command(SimpleNamespace(argv=argv), out, add="--resume")
    if old is not None and new is not None:  # fewer
        lost = f"replicate {new}" if new == old - 1 else f"replicates {new} to {old - 1}"
        why = (f"its runs have {old} seeds ({seeds}), and fewer seeds would leave {lost} "
               "out of the results")
    elif run is not None:  # a TOML experiment: where the files of each form go
        run = (out / run).as_posix()
        plain = f"each run's files lie in its own folder ({run}/checkpoint.pt)"
        seeded = (f"each run's replicates go to {run}/seed-0/, {run}/seed-1/, ... and their "
                  f"mean to {run}/")
        why = (f"its runs were started without --seeds ({seeds}): {plain}; with --seeds N, "
               f"--seeds 1 included, {seeded}" if old is None else
               f"its runs were started with --seeds {old} ({seeds}): {seeded}; without "
               f"--seeds {plain}") + ": another layout, which would be mixed with this one"
    else:  # a Python experiment: the form it was started in
        started = "without --seeds" if old is None else f"with --seeds {old}"
        why = (f"its runs were started {started} ({seeds}); without --seeds "
               f"{identity.get('experiment')!r} runs its own number of seeds, which --resume "
               "does not equate with any --seeds N: a run continues only in the form it was "
               "started in")
    form = "as they were started, without --seeds" if old is None else \
        f"with --seeds {old} (a larger N adds replicates)"
    raise fail("--resume", str(out), f"{why}. Continue them {form}:\n  {how}\nor replace "
               "them with --force, or choose another --out")


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


def _guarded(out: Path, created: bool, args, block):
    """``block()`` under :func:`output_guard`; on Ctrl-C or SIGTERM, print the exact
    command that continues (or, if nothing was kept, starts again) and return
    :data:`INTERRUPTED`."""
    from .experiments.output import FAILED, has_output, output_guard

    resume = _command(args, out, add="--resume")
    started = time.time()
    try:
        # SIGTERM (`kill`, a scheduler's stop) interrupts as Ctrl-C does: the folder is
        # marked and the command that continues printed, instead of dying unmarked
        with sigterm_raises(lambda signum: KeyboardInterrupt("terminated (SIGTERM)")), \
                output_guard(out, created=created, resume_command=resume):
            return as_interrupted(block)  # an error unwinding from Ctrl-C is the Ctrl-C
    except KeyboardInterrupt:
        if has_output(out):
            kept = (f"what finished is kept in {out} (see {out / FAILED})"
                    if (out / FAILED).exists() else f"{out} is as it was")
            print(f"fedsparse: interrupted; {kept}. Continue with:\n  {resume}", file=sys.stderr)
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
    from .experiments.config import resolve_runs
    from .experiments.output import (
        TOML_CONFIG,
        output_patterns,
        prepare_output,
        record_default_seeds,
        wrote_line,
    )
    from .experiments.run_selection import select_runs
    from .experiments.runner import check_runs_buildable, run_experiment
    from .experiments.seeds import check_replicates
    from .manifest import read_manifest

    check_count_options(args)
    device = _check_device(args)
    name, config, python_exp = resolve_experiment(args.experiment)
    out = expand_home("--out", args.out or Path("runs") / name)
    if python_exp is not None and args.log:  # before the extra's check: it applies anyway
        raise ConfigError(f"--log: {name!r} is a Python experiment, which writes its own "
                          "files; --log applies to TOML experiments (and fs.simulate("
                          "..., loggers=...) in Python)")
    _check_log(args)
    if python_exp is not None:
        kwargs = _python_options(name, python_exp, args)
        # what it wrote last time is what it writes again: a file kept there (the user's,
        # or one changed since) is refused now, not after the computing
        earlier = read_manifest(out) if out.is_dir() else None
        identity = _python_identity(name, python_exp, kwargs)
        if args.resume and python_exp.default_seeds is not None:
            record_default_seeds(out, identity, _declared_seeds(python_exp, identity["quick"]))
        _check_resume_seeds(args, out, identity)
        created = prepare_output(out, resume=args.resume, force=args.force,
                                 writes=sorted(earlier.files) if earlier else None,
                                 identity=identity)
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
            if not args.seeds or args.seeds < 2:
                raise ConfigError(f"--band {args.band} draws the spread over seeds: give "
                                  "--seeds N (N >= 2) as well")
            config["plot"] = {**config.get("plot", {}), "band": args.band}
        runs = resolve_runs(config)  # every check before --out is touched
        data_cache: dict = {}  # what building every run needs: built once, here
        check_runs_buildable(config, runs, data_cache)
        if args.seeds:
            check_replicates(runs, args.seeds)
        slugs = [r["slug"] for r in runs]
        identity = {"experiment": TOML_CONFIG, "seeds": args.seeds,
                    **_toml_source(args.experiment)}
        _check_resume_seeds(args, out, identity, run=slugs[0])
        created = prepare_output(out, resume=args.resume, force=args.force, slugs=slugs,
                                 writes=output_patterns(config, slugs), identity=identity)
        print(f"fedsparse run {name} -> {out} ({_seeds_text(runs)})")
        summary = _guarded(out, created, args, lambda: run_experiment(
            config, out, resume=args.resume, progress=False if args.quiet else None,
            seeds=args.seeds, loggers=args.log, data_cache=data_cache))
    if summary is INTERRUPTED:
        return 130
    if python_exp is None:  # a FedMac Table 1 row run as its TOML config: its table too
        from .experiments.fedmac import runner_table

        table = runner_table(name, config, out)
        if table:
            print(table)
    # what the manifest records as written, not what the experiment says it wrote: a
    # file an experiment adds cannot be left out of this line
    print(wrote_line(out, [*(summary or {}).get("plots", []), "summary.json"]))
    gone, total, all_gone = _diverged_runs(summary)
    if gone and all_gone:
        # no result to read: a script or CI job must see it in the status, not only in
        # the warnings above (a folder of divergent runs is still written: its histories
        # show where and how each one went)
        print(f"fedsparse: error: every run diverged ({'; '.join(gone)}): the folder "
              "holds their histories (summary.json marks each divergence), but no finite "
              "result", file=sys.stderr)
        return 1
    if gone:  # results all the same (a figure may show a divergent method): said, status 0
        print(f"note: {len(gone)} of {total} run{'s' if total != 1 else ''} diverged: "
              f"{'; '.join(gone)} (summary.json marks them diverged, at diverged_round)")
    return 0


def _diverged_runs(summary) -> tuple[list[str], int, bool]:
    """The runs of a run folder's summary that diverged, named (with the round, or the
    seeds that diverged of those run), the number of runs, and whether every run
    diverged in every seed: (names, total, all diverged). Only rows that mark it as the
    TOML runner does (``"diverged": true/false``); a Python experiment's own table
    counts as none."""
    rows = (summary or {}).get("runs") if isinstance(summary, dict) else None
    rows = [r for r in rows if isinstance(r, dict) and isinstance(r.get("diverged"), bool)] \
        if isinstance(rows, list) else []
    gone, every = [], bool(rows)
    for r in rows:
        name = f"{r['panel']} / {r.get('label')}" if r.get("panel") else str(r.get("label"))
        seeds = r.get("seeds") if isinstance(r.get("seeds"), dict) else None
        if seeds is None:
            if r["diverged"]:
                gone.append(f"{name} at round {r.get('diverged_round')}")
            every = every and r["diverged"]
            continue
        lost = len(seeds.get("diverged_seeds", []))
        if lost:
            gone.append(f"{name} in {lost} of {seeds.get('n')} seeds")
        every = every and lost >= seeds.get("n", 0)
    return gone, len(rows), every


def _check_log(args) -> None:
    """A --log tracker that is not installed, or one given twice, is refused before
    anything runs."""
    if getattr(args, "log", None):
        from .loggers import check_installed

        seen = set()
        for kind in args.log:
            if kind in seen:
                raise ConfigError(f"--log {kind} is given twice")
            seen.add(kind)
            check_installed(kind, "--log")
