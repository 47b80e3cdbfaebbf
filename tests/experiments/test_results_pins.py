"""The results pages (docs/results/*.md) quote numbers; these tests re-run what produced
them and check that each page still prints exactly what the code gives.

Every pin formats the run's values the way the page prints them and asserts that the
formatted text occurs on the page (whitespace-normalised, so line breaks in prose do not
matter). A change in the code that moves a quoted number, or an edit of the page that
does not match a run, fails here. Runs that take more than a few seconds are
``@pytest.mark.slow`` (``python -m pytest -m slow tests/experiments/test_results_pins.py``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import fedsparse as fs
from fedsparse.cli import main
from fedsparse.history import History

PAGES = Path(__file__).resolve().parents[2] / "docs" / "results"


def assert_quoted(page: str, *snippets: str) -> None:
    """Each snippet occurs on ``docs/results/<page>`` (whitespace-normalised)."""
    text = " ".join((PAGES / page).read_text().split())
    missing = [s for s in snippets if " ".join(s.split()) not in text]
    assert not missing, f"{page} does not quote what the runs give: {missing}"


def row(*cells) -> str:
    """A Markdown table row as the pages write it."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


def run_cli(tmp_path: Path, name: str, *args: str, out_name: str | None = None
            ) -> tuple[dict, dict]:
    """``fedsparse run NAME ARGS`` into ``tmp_path/(out_name or NAME)``.

    Returns (summary, {(panel, label): History}). Two runs of one experiment in one test
    need distinct ``out_name`` values: a run refuses a folder that already holds results.
    """
    out = tmp_path / (out_name or name)
    assert main(["run", name, "--out", str(out), "--quiet", *args]) == 0
    summary = json.loads((out / "summary.json").read_text())
    runs = {(r["panel"], r["label"]): History.load(out / r["dir"]) for r in summary["runs"]}
    return summary, runs


def reach(summary: dict, panel: str, run: str, reference_round: int):
    """Rounds ``run`` needs to reach the reference run's objective at ``reference_round``."""
    return next(c["rounds_needed"] for c in summary["comparisons"] if c["panel"] == panel
                and c["run"] == run and c["reference_round"] == reference_round)


def final(runs: dict, panel: str, label: str, metric: str = "objective"):
    return runs[(panel, label)].records[-1][metric]


def at_round(runs: dict, panel: str, label: str, rnd: int, metric: str = "objective"):
    return runs[(panel, label)].records[rnd - 1][metric]


# --------------------------------------------------------------------------------------
# Tong et al. 2022's generator (Simulations I and II): the per-client feature means


@pytest.mark.parametrize("beta", [0.0, 0.25, 1.0])
def test_fedht_simulation_feature_means_are_per_client_gaussians(beta):
    # z_ij ~ N(v_i, Sigma) with v_i[j] ~ N(B_i, 1), B_i ~ N(0, beta) (beta a standard
    # deviation) and Sigma_jj = j^-1.2. So a client's mean over its examples estimates
    # v_i; the average of v_i over the coordinates estimates B_i (plus N(0, 1/d) noise);
    # those averages spread across clients with std sqrt(beta^2 + 1/d). Reading beta as
    # a variance (std 0.5 for beta = 0.25), sharing B or v between clients, or a wrong
    # covariance fails one of the checks below.
    N, n, d = 150, 100, 300
    data = fs.data.fedht_simulation("regression", alpha=0.3, beta=beta, num_clients=N,
                                    samples_per_client=n, dim=d, support_size=30, seed=7,
                                    dtype=torch.float64)
    X = data.train.X.numpy()                      # (N, n, d)
    v_hat = X.mean(axis=1)                        # (N, d) per-client feature means
    b_hat = v_hat.mean(axis=1)                    # (N,) estimates of B_i
    spread = math.sqrt(beta ** 2 + 1 / d)
    assert b_hat.std(ddof=1) == pytest.approx(spread, rel=0.2)
    assert abs(b_hat.mean()) < 4 * spread / math.sqrt(N)        # B_i has mean 0
    # around its own B_i, each client's v_i[j] has unit variance
    assert (v_hat.std(axis=1, ddof=1)).mean() == pytest.approx(1.0, abs=0.05)
    # within a client, the coordinates vary around v_i with variance j^-1.2
    var = ((X - v_hat[:, None, :]) ** 2).sum(axis=(0, 1)) / (N * (n - 1))
    ratio = var / np.arange(1, d + 1) ** -1.2
    assert ratio.min() > 0.9 and ratio.max() < 1.1


# --------------------------------------------------------------------------------------
# docs/results/fedht.md (Tong et al. 2022, Figures 1-3)

SIM1, SIM2 = "Simulation I (regression)", "Simulation II (classification)"
ALGOS = ("Distributed-IHT", "Fed-HT", "FedIter-HT")
GRID = [10, 1, 0.6, 0.3, 0.1, 0.06, 0.03, 0.01, 0.001]


def f1(v: float) -> str:
    return f"{v:.1f}"


def f3(v: float) -> str:
    return f"{v:.3f}"


def sig3(v: float) -> str:
    """Three significant digits, trailing zeros kept, no exponent (107, 65.9, 3.72, 0.460)."""
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:#.3g}".rstrip(".")


def sci(v: float, digits: int = 1) -> str:
    """3.4e9 rather than 3.4e+09."""
    mantissa, exponent = f"{v:.{digits}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def three(runs: dict, panel: str, fmt=sig3, labels=ALGOS) -> str:
    """'a / b / c': the final objectives of the three methods in one panel."""
    return " / ".join(fmt(final(runs, panel, label)) for label in labels)


def test_fedht_default_experiment_numbers(tmp_path):
    summary, _ = run_cli(tmp_path, "fedht-default")
    assert_quoted("fedht.md",
                  f"FedIter-HT reaches Distributed-IHT's round-60 objective at round "
                  f"{reach(summary, SIM1, 'FedIter-HT', 60)} on regression and round "
                  f"{reach(summary, SIM2, 'FedIter-HT', 60)} on classification (Fed-HT: "
                  f"{reach(summary, SIM1, 'Fed-HT', 60)} and {reach(summary, SIM2, 'Fed-HT', 60)})")


WORDS = ("no", "one", "two", "three", "four", "five", "six")


def test_fedht_local_smoothness_constants():
    # the step-size discussion: L_i of the clients of Simulations I and II (alpha = beta = 0.5)
    data = fs.data.fedht_simulation("regression", 0.5, 0.5, seed=0)
    L = fs.problems.least_squares().lipschitz(data.train.X, data.train.mean_weights()).double()
    Lc = fs.data.fedht_simulation("classification", 0.5, 0.5, seed=0)
    L2 = fs.problems.logistic().lipschitz(Lc.train.X, Lc.train.mean_weights()).double()
    assert_quoted(
        "fedht.md",
        f"(median {float(L.median()):,.0f}, largest {float(L.max()):,.0f})",
        f"({sci(2 / float(L.max()))} for the stiffest client)",
        f"above 2/L_i for the {WORDS[int((L > 2000).sum())]} clients with L_i > 2,000",
        f"0.001 exceeds 2 / max_i L_i = {sci(2 / float(L.max()))}",
        f"the bound is 2 / max_i L_i = {sci(2 / float(L2.max()))}",
        f"1/max_i L_i is {0.01 * float(L.max()):.0f}x smaller than the 0.01")


@pytest.mark.slow
def test_fedht_step_size_grid_search(tmp_path):
    from fedsparse.cli import resolve_experiment
    from fedsparse.experiments.sweep import run_sweep

    _, config, _ = resolve_experiment("fedht-fig3")
    config["defaults"]["rounds"] = 100
    for run in config["runs"]:
        run.pop("rounds", None)
    result = run_sweep(config, {"algorithm.step_size": GRID}, log=lambda *_: None)
    # sweep keys are "panel / label" (the labels repeat across the two panels)
    best = {key: v["params"]["algorithm.step_size"] for key, v in result["best"].items()}
    assert_quoted("fedht.md",
                  row("Simulation I (regression)", *(best[f"{SIM1} / {a}"] for a in ALGOS)),
                  row("Simulation II (classification)", *(best[f"{SIM2} / {a}"] for a in ALGOS)))
    # Simulation I: every step >= 0.03 diverges for all three, 0.01 for the K-step methods
    diverged = {(r["run"], r["algorithm.step_size"]) for r in result["rows"] if r["diverged"]}
    for label in ALGOS:
        assert {g for g in GRID if (f"{SIM1} / {label}", g) in diverged} == (
            {g for g in GRID if g >= (0.03 if label == "Distributed-IHT" else 0.01)})


@pytest.mark.slow
def test_fedht_figure3_grid_searched_steps(tmp_path):
    summary, runs = run_cli(tmp_path, "fedht-fig3")
    # Fed-HT's Simulation II value (step 0.03, an unstable regime) moves with the order of
    # floating-point operations; the page says so and quotes this build's value.
    assert_quoted("fedht.md",
                  row("Simulation I", f"**{sig3(final(runs, SIM1, 'Distributed-IHT'))}**",
                      sig3(final(runs, SIM1, "Fed-HT")), sig3(final(runs, SIM1, "FedIter-HT"))),
                  row("Simulation II", f"**{sig3(final(runs, SIM2, 'Distributed-IHT'))}**",
                      sig3(final(runs, SIM2, "Fed-HT")), sig3(final(runs, SIM2, "FedIter-HT"))),
                  f"this build gives {sig3(final(runs, SIM2, 'Fed-HT'))}",
                  f"I: {three(runs, SIM1)}; II: {three(runs, SIM2)} | never / never")
    for panel in (SIM1, SIM2):
        for label in ("Fed-HT", "FedIter-HT"):
            assert reach(summary, panel, label, 100) is None  # "Neither K-step method ..."


@pytest.mark.slow
def test_fedht_figure3_at_the_local_methods_step(tmp_path):
    summary, runs = run_cli(tmp_path, "fedht-fig3", "--set", "algorithm.step_size=0.001")
    _, short = run_cli(tmp_path, "fedht-fig3", "--set", "algorithm.step_size=0.0006",
                       "--rounds", "100", out_name="fedht-fig3-below-bound")
    assert_quoted(
        "fedht.md",
        row("Simulation I, round-200 objective",
            f"**{sig3(final(runs, SIM1, 'Distributed-IHT'))}**",
            sig3(final(runs, SIM1, "Fed-HT")), sig3(final(runs, SIM1, "FedIter-HT"))),
        row("Simulation II, round-200 objective", sig3(final(runs, SIM2, "Distributed-IHT")),
            sig3(final(runs, SIM2, "Fed-HT")), f"**{sig3(final(runs, SIM2, 'FedIter-HT'))}**"),
        "at 0.0006 (below it) the round-100 objectives are "
        + " / ".join(f1(at_round(short, SIM1, a, 100)) for a in ALGOS),
        "at 0.001 (above it) " + " / ".join(f1(at_round(runs, SIM1, a, 100)) for a in ALGOS),
        f"FedIter-HT reaches Distributed-IHT's round-200 objective at round "
        f"{reach(summary, SIM2, 'FedIter-HT', 200)}.")
    # below the bound the local methods win, above it Distributed-IHT does
    assert at_round(short, SIM1, "FedIter-HT", 100) < at_round(short, SIM1, "Distributed-IHT", 100)
    assert at_round(runs, SIM1, "Distributed-IHT", 100) < at_round(runs, SIM1, "Fed-HT", 100)


@pytest.mark.slow
def test_fedht_figure3_literal_loss(tmp_path):
    from fedsparse.cli import resolve_experiment
    from fedsparse.experiments.sweep import run_sweep

    summary, runs = run_cli(tmp_path, "fedht-fig3-literal-loss")
    panel = "Simulation I (regression), literal loss"
    fed_ht = runs[(panel, "Fed-HT")]
    assert_quoted("fedht.md",
                  f"| {sig3(final(runs, panel, 'Distributed-IHT'))} / diverged at round "
                  f"{len(fed_ht.records) + 1} / {sig3(final(runs, panel, 'FedIter-HT'))} | never |",
                  f"(0.002 here, the paper's 0.001, diverges at round {len(fed_ht.records) + 1})")
    assert reach(summary, panel, "FedIter-HT", 100) is None
    # Fed-HT has no convergent step on the (doubled) grid at all
    _, config, _ = resolve_experiment("fedht-fig3-literal-loss")
    config["runs"] = [r for r in config["runs"] if r["label"] == "Fed-HT"]
    del config["compare"]  # its reference run is not among the swept runs
    config["defaults"]["rounds"] = 100
    result = run_sweep(config, {"algorithm.step_size": [2 * g for g in GRID]},
                       log=lambda *_: None)
    assert all(r["diverged"] for r in result["rows"]) and len(result["rows"]) == len(GRID)


def unit_rows(task: str):
    """Simulation I or II (alpha = beta = 0.5) with every feature row scaled to unit norm,
    exactly as the Python snippet on docs/results/fedht.md builds it."""
    d = fs.data.fedht_simulation(task, 0.5, 0.5, seed=0, dtype=torch.float64)
    n = d.train.counts
    xs = [d.train.X[i, :n[i]] / d.train.X[i, :n[i]].norm(dim=1, keepdim=True) for i in range(100)]
    return fs.data.from_arrays(xs, [d.train.y[i, :n[i]] for i in range(100)], dtype=torch.float32)


@pytest.mark.slow
def test_fedht_figure3_unit_rows():
    from fedsparse.experiments.runner import rounds_to_reach

    steps = {"regression": (10, 1, 0.6), "classification": (10, 10, 1)}
    cells = {}
    for task, problem in (("regression", fs.problems.least_squares()),
                          ("classification", fs.problems.logistic())):
        data = unit_rows(task)
        hists = [fs.simulate(make(sparsity=200, step_size=step, **kw), problem, data,
                             rounds=200, progress=False)
                 for make, step, kw in zip((fs.algorithms.distributed_iht, fs.algorithms.fed_ht,
                                            fs.algorithms.fed_iter_ht), steps[task],
                                           ({}, {"local_steps": 5}, {"local_steps": 5}),
                                           strict=True)]
        cells[task] = " / ".join(sig3(h.records[-1]["objective"]) for h in hists)
        at = 100 if task == "regression" else 200
        assert rounds_to_reach(hists[2], hists[0].records[at - 1]["objective"]) is None
    assert_quoted("fedht.md", f"I: {cells['regression']}; II: {cells['classification']} "
                              "| never / never")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fedht-fig3-one-over-n", "fedht-fig3-minibatch"])
def test_fedht_figure3_variants(tmp_path, name):
    summary, runs = run_cli(tmp_path, name)
    assert_quoted("fedht.md", f"| I: {three(runs, SIM1)}; II: {three(runs, SIM2)} "
                              "| never / never |")
    assert reach(summary, SIM1, "FedIter-HT", 100) is None
    assert reach(summary, SIM2, "FedIter-HT", 200) is None


@pytest.mark.slow
def test_fedht_figure3_equal_step(tmp_path):
    summary, runs = run_cli(tmp_path, "fedht-fig3-auto")
    paper = {(SIM1, 100): "FedIter-HT ~20", (SIM1, 200): "—", (SIM2, 100): "—",
             (SIM2, 200): "FedIter-HT ~50"}
    lines = []
    for panel, name, fmt in ((SIM1, "Simulation I", f1), (SIM2, "Simulation II", f3)):
        for at in (100, 200):
            target = fmt(at_round(runs, panel, "Distributed-IHT", at))
            lines.append(row(f"{name}, its round-{at} value ({target})", paper[(panel, at)],
                             reach(summary, panel, "Fed-HT", at),
                             f"**{reach(summary, panel, 'FedIter-HT', at)}**"))
    assert_quoted(
        "fedht.md", *lines,
        f"Simulation I {three(runs, SIM1, f1)} and Simulation II {three(runs, SIM2, f3)}",
        f"FedIter-HT's speed-up is {100 / reach(summary, SIM1, 'FedIter-HT', 100):.1f}x on "
        f"Simulation I (paper ~5x) and {200 / reach(summary, SIM2, 'FedIter-HT', 200):.1f}x",
        f"at {f1(final(runs, SIM1, 'Distributed-IHT'))} after 200 rounds",
        f"FedIter-HT moves {final(runs, SIM1, 'FedIter-HT', 'bytes_total') / 1e6:.1f} MB against "
        f"{final(runs, SIM1, 'Fed-HT', 'bytes_total') / 1e6:.1f} MB")


@pytest.mark.slow
def test_fedht_figure2(tmp_path):
    _, runs = run_cli(tmp_path, "fedht-fig2")
    levels = (0.1, 0.5, 1.0)
    rows = []
    for algo in ("Fed-HT", "FedIter-HT"):
        cells = []
        for a in levels:
            h = runs[(f"{algo}, {SIM1}", f"alpha = beta = {a}")]
            if len(h.records) < 100:  # stopped by DivergenceError: the page names the round
                cells.append(f"diverged at round {len(h.records) + 1}")
                continue
            # the regression objectives differ in size across levels: the page adds the
            # reduction from the objective of x0 = 0, f(0) = sum_i p_i ||y_i||^2 / (2 n_i)
            data = fs.data.fedht_simulation("regression", a, a, seed=0)
            X = data.train.X
            f0 = float(fs.problems.least_squares().loss(
                torch.zeros(X.shape[0], X.shape[-1], dtype=X.dtype), X, data.train.y,
                data.train.mean_weights()).double() @ data.weights.double())
            final_value = h.records[-1]["objective"]
            value = f"{final_value:.0f}" if final_value >= 1000 else f1(final_value)
            cells.append(f"{value} ({f0 / final_value:.1f}x)")
        rows.append(row(f"{algo}, Simulation I", *cells))
        rows.append(row(f"{algo}, Simulation II",
                        *(f3(final(runs, f"{algo}, {SIM2}", f"alpha = beta = {a}"))
                          for a in levels)))
    assert_quoted("fedht.md", *rows)


def _k_rows(runs: dict) -> list[str]:
    out = []
    for algo in ("Fed-HT", "FedIter-HT"):
        for sim, fmt in ((SIM1, lambda v: sci(v) if v >= 1e5 else f1(v)), (SIM2, f3)):
            panel = f"{algo}, {sim}"
            out.append(row(f"{algo}, {sim.split(' (')[0]}",
                           *(fmt(final(runs, panel, f"K = {k}")) for k in (3, 5, 8, 10))))
    return out


@pytest.mark.slow
def test_fedht_figure1(tmp_path):
    _, runs = run_cli(tmp_path, "fedht-fig1")
    _, auto = run_cli(tmp_path / "auto", "fedht-fig1", "--set", "algorithm.step_size=auto")
    assert_quoted("fedht.md", *_k_rows(runs), *_k_rows(auto))
    # "Fed-HT gets worse with K on both simulations"
    fed_ht_1 = [final(runs, f"Fed-HT, {SIM1}", f"K = {k}") for k in (3, 5, 8, 10)]
    assert fed_ht_1 == sorted(fed_ht_1)
    fed_ht_2 = [final(runs, f"Fed-HT, {SIM2}", f"K = {k}") for k in (3, 5, 8, 10)]
    assert fed_ht_2[0] < min(fed_ht_2[1:])
    assert_quoted("fedht.md", f"on Simulation II it ends lowest at K = 3 ({f3(fed_ht_2[0])}) "
                              f"and higher at every larger K ({f3(min(fed_ht_2[1:]))} to "
                              f"{f3(max(fed_ht_2[1:]))})")


# --------------------------------------------------------------------------------------
# docs/results/fedgradmp.md (Jeong et al. 2024)

COMPARISON = "comparison"


def errors(h: History) -> list[float]:
    return [float(v) for v in h.column("rel_error")]


@pytest.mark.slow
def test_fedgradmp_figure9(tmp_path):
    _, runs = run_cli(tmp_path, "fedgradmp-fig9")
    (h,) = runs.values()
    e = errors(h)
    assert max(e[2:]) < 1e-15 and e[1] > 1e-3        # round-off from round 3 on, not before
    assert all(r["support_precision"] == r["support_recall"] == 1.0 for r in h.records[2:])
    assert_quoted("fedgradmp.md", f"relative error {sci(e[1], 0)} after round 2 and below "
                                  "1e-15 (round-off, about 3e-16) from round 3 on")


@pytest.mark.slow
def test_fedgradmp_figure8(tmp_path):
    _, runs = run_cli(tmp_path, "fedgradmp-fig8")
    small = [final(runs, "FedIterHT, small steps", f"gamma = {g}", "rel_error")
             for g in (0.0001, 0.0005, 0.001, 0.002)]
    large = [final(runs, "FedIterHT, large steps", f"gamma = {g}", "rel_error")
             for g in (0.004, 0.01, 0.02)]
    assert_quoted("fedgradmp.md",
                  "after 100 rounds the relative error is " + ", ".join(f"{v:.2f}" for v in small)
                  + " (small steps) and " + ", ".join(f"{v:.2f}" for v in large)
                  + " (large steps)")
    assert all(math.isfinite(v) for v in large)       # "we do not see divergence"


@pytest.mark.slow
def test_fedgradmp_figure1(tmp_path):
    _, runs = run_cli(tmp_path, "fedgradmp-fig1")
    noisy = {label: errors(h) for (panel, label), h in runs.items() if panel != "noiseless"}
    for (panel, _), h in runs.items():
        if panel == "noiseless":
            assert max(errors(h)[2:]) < 1e-15
    tail = [v for e in noisy.values() for v in e[5:]]
    means = {label: sum(e[5:]) / len(e[5:]) for label, e in noisy.items()}
    assert list(means.values()) == sorted(means.values(), reverse=True)  # falls with alpha
    assert_quoted("fedgradmp.md",
                  f"(it fluctuates there: {min(tail) * 1e3:.1f}e-3 to {max(tail) * 1e3:.1f}e-3 "
                  "over rounds 6-25)",
                  f"from a mean of {sci(means['alpha = 0.1'], 2)} over rounds 6-25 at alpha = 0.1 "
                  f"to {sci(means['alpha = 2.5'], 2)} at alpha = 2.5")


@pytest.mark.slow
def test_fedgradmp_figure11(tmp_path):
    _, runs = run_cli(tmp_path, "fedgradmp-fig11")
    for (panel, label), h in runs.items():
        if panel == "noiseless":
            e = errors(h)
            assert e[0] > 1e-10 and max(e[1:]) < 1e-14, label      # machine precision at round 2
    noisy = {label: errors(h)[5:] for (panel, label), h in runs.items() if panel != "noiseless"}
    tail = [v for e in noisy.values() for v in e]
    means = [sum(noisy[f"L = {n}"]) / len(noisy[f"L = {n}"]) for n in (10, 15, 20, 25, 30)]
    assert means == sorted(means, reverse=True)                        # falls with L
    assert_quoted("fedgradmp.md",
                  f"({min(tail) * 1e3:.1f}e-3 to {max(tail) * 1e3:.1f}e-3 over rounds 6-40)",
                  f"the residual *falls* with L: {means[0] * 1e3:.2f}e-3 (L = 10), "
                  + ", ".join(f"{m * 1e3:.2f}e-3" for m in means[1:4])
                  + f", {means[4] * 1e3:.2f}e-3 (L = 30)")


def _below(e: list[float], level: float):
    return next((i + 1 for i, v in enumerate(e) if v < level), None)


@pytest.mark.slow
def test_fedgradmp_figures3_and_4(tmp_path):
    _, fig3 = run_cli(tmp_path, "fedgradmp-fig3")
    _, fig4 = run_cli(tmp_path, "fedgradmp-fig4", "--rounds", "200")
    e3 = {label: errors(h) for (_, label), h in fig3.items()}
    e4 = {label: errors(h) for (_, label), h in fig4.items()}
    ith3, dual3 = e3["FedIterHT (gamma = 0.05)"], e3["FedDualAvg (eta_c = 0.05, eta_s = 1)"]
    ith4, dual4 = e4["FedIterHT (gamma = 0.02)"], e4["FedDualAvg (eta_c = 0.02, eta_s = 1)"]
    assert e3["FedMid (eta_c = 0.05, eta_s = 1)"] == ith3            # FedMid = FedIter-HT
    assert _below(e3["FedGradMP"], 1e-15) == _below(e4["FedGradMP"], 1e-15) == 3
    rate = (ith4[59] / ith4[49]) ** 0.1
    assert_quoted("fedgradmp.md",
                  f"FedIterHT and FedMid need {_below(ith3, 1e-3)} rounds to get below 1e-3 and "
                  f"end at {sci(ith3[59])} after 60 rounds; FedDualAvg ends at {sci(dual3[59])}",
                  f"the baselines are at {sci(ith4[59])} (FedIterHT, FedMid) and "
                  f"{sci(dual4[59])} (FedDualAvg) after 60 rounds",
                  f"(a factor {rate:.3f} per round over rounds 50-60)",
                  f"bring FedIterHT and FedMid to {sci(ith4[-1])} and FedDualAvg to "
                  f"{sci(dual4[-1])}")
    assert 0.94 < rate < 0.97                                           # "about 4 % per round"


@pytest.mark.slow
def test_fedgradmp_figure5(tmp_path):
    _, runs = run_cli(tmp_path, "fedgradmp-fig5")
    e = {label: errors(h) for (_, label), h in runs.items()}
    gmp = e["FedGradMP"]
    inner = runs[(COMPARISON, "FedGradMP")].records[-1]["inner_iterations"]
    assert_quoted("fedgradmp.md",
                  f"the run records ~{inner:.0f} inner iterations per local step",
                  f"({gmp[0]:.2f}, {gmp[1]:.2f}, ... {gmp[11]:.2f} at round 12) to "
                  f"{gmp[-1]:.3f} after 40 rounds",
                  f"FedIterHT = FedMid end at {e['FedIterHT (gamma = 0.001)'][-1]:.2f} and "
                  f"FedDualAvg at {e['FedDualAvg (eta_c = 0.001, eta_s = 1)'][-1]:.2f}")


FIG6 = ("FedGradMP", "FedIterHT (gamma = 0.05)", "FedMid (eta_c = 0.05)",
        "FedDualAvg (eta_c = 0.05)", "FedAvg (gamma = 0.05, dense)")
FIG7 = ("standard basis", "Gaussian dictionary (200 atoms)")


def _accuracy_row(h: History, label: str) -> str:
    """'| label | train / test at round 100 | mean over rounds 91-100 | MB sent |'."""
    train = [float(v) for v in h.column("accuracy")]
    test = [float(v) for v in h.column("test_accuracy")]
    return row(label, f"{100 * train[-1]:.1f}% / {100 * test[-1]:.1f}%",
               f"{100 * sum(train[-10:]) / 10:.1f}% / {100 * sum(test[-10:]) / 10:.1f}%",
               f"{h.records[-1]['bytes_total'] / 1e6:.1f} MB")


@pytest.mark.slow
def test_fedgradmp_figures6_and_7(tmp_path):
    summary6, fig6 = run_cli(tmp_path, "fedgradmp-fig6")
    _, fig7 = run_cli(tmp_path, "fedgradmp-fig7")
    h6 = {label: h for (_, label), h in fig6.items()}
    h7 = {label: h for (_, label), h in fig7.items()}
    models = {r["label"]: np.load(tmp_path / "fedgradmp-fig6" / r["dir"] / "model.npy")
              for r in summary6["runs"]}
    norms = [float(np.linalg.norm(m)) for m in models.values()]
    per_row = (models[FIG6[0]].reshape(10, 784) != 0).sum(1)
    for label in FIG6[:4]:                          # ||x||_0 <= 90 over the whole model
        assert int((models[label] != 0).sum()) == 90
    # FedMid with eta_s = 1 is FedIter-HT; Figure 7's standard basis is Figure 6's FedGradMP
    assert h6[FIG6[1]].column("accuracy") == h6[FIG6[2]].column("accuracy")
    assert h7[FIG7[0]].column("accuracy") == h6[FIG6[0]].column("accuracy")
    assert_quoted("fedgradmp.md",
                  *(_accuracy_row(h6[label], label) for label in FIG6),
                  *(_accuracy_row(h7[label], label) for label in FIG7),
                  f"the final models' norms are {min(norms):.1f} to {max(norms):.1f}",
                  f"FedGradMP's final model spends between {per_row.min()} and {per_row.max()} "
                  "of its 90 entries on a class row")
    assert max(norms) < 1e5                         # "the ball never binds at the end"
