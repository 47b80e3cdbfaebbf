"""docs/results/safari.md and fedmac.md agree with the committed runs they quote
(docs/results/runs/<experiment>/summary.json), and each committed run carries what a
reader needs to check a number: rounds, seeds, device, gpu, wall clock and per-seed
values."""

from __future__ import annotations

import copy
import json
import re
import statistics

import pytest

from fedsparse._validation import ConfigError
from fedsparse.experiments import fedmac as M
from fedsparse.report import results_pages as RP

RUNS = RP.load_runs()


def test_pages_agree_with_their_committed_runs():
    assert RP.generate(check=True) == [], (
        "a results page differs from its committed runs: "
        "python -m fedsparse.report.results_pages generate")


def test_every_block_names_a_committed_run_and_every_run_is_quoted():
    keys = [m.group("key") for name in RP.PAGES
            for m in RP.BLOCK.finditer((RP.RESULTS / name).read_text())]
    quoted = {k.split(" ")[0] for k in keys}
    assert quoted <= set(RUNS), quoted - set(RUNS)
    assert set(RUNS) <= quoted, set(RUNS) - quoted
    # each quoted run is labelled with its scale, model, rounds, seeds and device
    assert {k.split(" ")[0] for k in keys if k.endswith(" setting")} == quoted


@pytest.mark.parametrize("experiment", sorted(RUNS))
def test_committed_run_has_its_fields_and_per_seed_values(experiment):
    s = RUNS[experiment]
    for key in RP.REQUIRED:
        assert key in s, key
    assert isinstance(s["rounds"], int) and isinstance(s["seeds"], int) and s["seeds"] >= 1
    assert s["device"] == "cpu" and s["gpu"] is None or s["device"].startswith("cuda")
    if s["kind"] == "safari":
        for panel in s["panels"].values():
            for run in panel["runs"].values():
                for measure in ("score", "curve_mean", "jitter"):
                    assert len(run[measure]["values"]) == s["seeds"], (panel, measure)
    elif "table" in s:
        for row in s["table"]:
            assert len(row["seeds"]) == s["seeds"], row["method"]
    else:  # a FedMac figure: with more than one seed, each row keeps every seed's values
        assert s["runs"]
        if s["seeds"] > 1:
            for row in s["runs"]:
                assert all(len(v) == s["seeds"] for v in row["per_seed"].values()), row


def test_a_changed_number_changes_the_page():
    if not RUNS:
        pytest.skip("no committed runs")
    experiment = next(e for e, s in RUNS.items() if s["kind"] == "safari")
    page = next((RP.RESULTS / n).read_text() for n in RP.PAGES
                if f"generated: {experiment} runs" in (RP.RESULTS / n).read_text())
    changed = copy.deepcopy(RUNS)
    panel = next(iter(changed[experiment]["panels"].values()))
    next(iter(panel["runs"].values()))["score"]["mean"] += 0.001  # 0.1 point
    assert RP.render(page, changed) != page
    assert RP.render(page, RUNS) == page
    with pytest.raises(ConfigError, match="no committed run"):
        RP.render("<!-- begin generated: nowhere runs -->\n<!-- end generated -->", RUNS)


def test_collect_adds_up_the_attempts_of_a_resumed_run(tmp_path):
    # a run continued with --resume: its summary timed the last part (100 s), the
    # folder's marker every part (1,234 s over 3 attempts); the page quotes the whole
    run = RUNS["fedmac-fig3"]
    summary = {"rounds": run["rounds"], "seeds": run["seeds"], "device": "cpu", "gpu": None,
               "wall_clock_s": 100.0, "eval_every": 4, "weighting": "uniform",
               "table": run["table"]}
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps(summary))
    (out / ".fedsparse-run").write_text(json.dumps({"status": "done", "attempts": 3,
                                                    "seconds": 1234.4}))
    record = json.loads(RP.collect("fedmac-fig3", out, runs=tmp_path / "runs").read_text())
    assert (record["wall_clock_s"], record["attempts"]) == (1234.4, 3)
    assert "1,234 s wall clock in 3 attempts;" in RP.setting_line(record)
    (out / ".fedsparse-run").write_text(json.dumps({"status": "done", "attempts": 1,
                                                    "seconds": 101.0}))
    record = json.loads(RP.collect("fedmac-fig3", out, runs=tmp_path / "runs").read_text())
    assert record["wall_clock_s"] == 100.0 and "attempts" not in record
    assert "100 s wall clock;" in RP.setting_line(record)


def test_a_fedmac_run_records_how_its_baselines_averaged(tmp_path):
    # the figures' summaries said nothing of it and the import wrote "size", while their
    # FedAvg and FedProx averaged 1/S: the weighting is taken from the run, never assumed
    run = RUNS["fedmac-fig3"]
    summary = {"rounds": run["rounds"], "seeds": run["seeds"], "device": "cpu", "gpu": None,
               "wall_clock_s": 100.0, "eval_every": 4, "table": run["table"]}
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ConfigError, match="summary.json lacks weighting"):
        RP.collect("fedmac-fig3", out, runs=tmp_path / "runs")
    for name, s in RUNS.items():
        if name.startswith("fedmac-fig"):
            assert s["weighting"] == M.FIGURE_WEIGHTING == "uniform", name
        elif s["kind"] == "fedmac":
            assert s["weighting"] == "uniform", name  # Table 1 as the paper: 1/S


def test_collect_names_a_damaged_summary_or_analysis(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text('{"rounds": 3,')
    with pytest.raises(ConfigError, match=r"summary\.json: not valid JSON"):
        RP.collect("fedmac-fig3", out, runs=tmp_path / "runs")
    (out / "summary.json").write_text(json.dumps({"rounds": 3, "seeds": 1}))
    (out / "safari.json").write_text("[]")
    with pytest.raises(ConfigError, match=r"safari\.json: holds a JSON list"):
        RP.collect("fedmac-fig3", out, runs=tmp_path / "runs")


def test_a_gpu_run_says_how_its_float32_products_were_rounded(tmp_path):
    run = RUNS["fedmac-fig3"]
    summary = {"rounds": run["rounds"], "seeds": run["seeds"], "device": "cuda",
               "gpu": "NVIDIA H100 80GB HBM3", "tf32": {"matmul": False, "convolutions": True},
               "wall_clock_s": 100.0, "eval_every": 4, "weighting": "uniform",
               "table": run["table"]}
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps(summary))
    record = json.loads(RP.collect("fedmac-fig3", out, runs=tmp_path / "runs").read_text())
    assert record["tf32"] == summary["tf32"]
    assert "*GPU run*: 800 rounds, 2 seeds, device cuda (NVIDIA H100 80GB HBM3), TF32 " \
        "convolutions, 100 s" in RP.setting_line(record)
    record["tf32"] = {"matmul": False, "convolutions": False}
    assert "(NVIDIA H100 80GB HBM3), no TF32, 100 s" in RP.setting_line(record)


def test_rows_off_allows_float_drift_not_a_change():
    page = "| p | run | 68.02 ± 2.66 | 59.71 ± 2.36 |\n| p | other | 1.00 ± 0.10 | 2.00 |\n"
    assert RP.rows_off(["| p | run | 68.02 ± 2.65 | 59.70 ± 2.36 |"], page) == []
    off = RP.rows_off(["| p | run | 68.22 ± 2.66 | 59.71 ± 2.36 |",
                       "| p | missing | 1.00 ± 0.10 | 2.00 |"], page)
    assert len(off) == 2 and "off by more" in off[0] and "quoted in 0 rows" in off[1]


def test_rows_off_refuses_a_key_two_tables_hold():
    # the same run label in two experiments' tables: compared against either, a pin could
    # pass on the other experiment's numbers
    page = ("<!-- begin generated: a runs -->\n| p | run | 68.02 |\n<!-- end generated -->\n"
            "<!-- begin generated: b runs -->\n| p | run | 45.25 |\n<!-- end generated -->\n")
    assert "quoted in 2 rows" in RP.rows_off(["| p | run | 45.25 |"], page)[0]
    assert RP.rows_off(["| p | run | 45.25 |"], RP.generated_block(page, "b runs")) == []
    assert RP.rows_off(["| p | run | 45.25 |"], RP.generated_block(page, "a runs"))
    with pytest.raises(ValueError, match="no generated block 'c runs'"):
        RP.generated_block(page, "c runs")


# ------------------------------------------------------- prose outside the generated blocks


def _page(name: str) -> str:
    return " ".join((RP.RESULTS / name).read_text().split())


def _diff(experiment: str, panel: str, pair: str) -> list[float]:
    """Per-seed paired score differences of a committed SAFARI run, in points."""
    return [100 * v for v in RUNS[experiment]["panels"][panel]["differences"][pair]
            ["score"]["values"]]


def _mean_std(values: list[float]) -> str:
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def test_safari_prose_quotes_the_committed_per_seed_values():
    # The verdicts and bullets quote the committed runs outside the generated tables;
    # their numbers must be those of the runs, to the digits printed.
    asym = "asymmetric P (0.18 / 0.6)"
    synflow = _diff("safari-pruners", f"SynFlow + FedAvg, {asym}", "no drop - compensation")
    pruners = (("safari-fmnist", "MAG + FedAvg"), ("safari-pruners", "SynFlow + FedAvg"),
               ("safari-pruners", "FedSpa + FedAvg"))
    gaps = [_diff(e, f"{p}, {asym}", "no drop - no compensation") for e, p in pruners]
    below = [v for seeds in gaps for v in seeds]
    means = [sum(seeds) / len(seeds) for seeds in gaps]
    alpha = _diff("safari-sparsity", "MAG + FedAvg, compensation, P = 0.6",
                  "pruned 0 - pruned 0.2")
    text = _page("safari.md")
    assert not _holds(synflow)
    for quoted in (f"SynFlow {_mean_std(synflow)} points ({min(synflow):.2f} to "
                   f"{max(synflow):.2f} by seed)",
                   f"At the asymmetric P compensation is {_mean_std(synflow)} points from no "
                   f"drop ({synflow[0]:.2f} and {synflow[1]:.2f}: no difference we can "
                   "resolve with 2 seeds)",
                   f"asymmetric P: {min(below):.1f}-{max(below):.1f} points below no drop on "
                   f"every seed (means {min(means):.1f}-{max(means):.1f})",
                   f"At 0.2 both seeds are below the dense model (by {alpha[0]:.2f} and "
                   f"{alpha[1]:.2f} points)"):
        assert quoted in text, quoted


def test_fedmac_prose_quotes_the_committed_per_seed_leads():
    rows = {(r["method"], r["model"]): r["seeds"] for r in RUNS["fedmac-table1-fmnist"]["table"]}

    def lead(a: str, b: str) -> list[float]:
        return [x - y for x, y in zip(rows[(a, "PM")], rows[(b, "PM")], strict=True)]

    per_fedavg, heur = lead("Per-FedAvg", "pFedMe"), lead("pFedMe", "HeurFedAMP")
    text = _page("fedmac.md")
    for quoted in (f"Per-FedAvg leads pFedMe by only {min(per_fedavg):.2f} to "
                   f"{max(per_fedavg):.2f} points ({_mean_std(per_fedavg)})",
                   f"pFedMe is above HeurFedAMP by {_mean_std(heur)} "
                   f"({min(heur):.2f} to {max(heur):.2f}:"):
        assert quoted in text, quoted


COMP, NO_COMP = "compensation", "no compensation"


def _jitter_gap(experiment: str, panel: str, run: str, reference: str) -> list[float]:
    """Per-seed jitter of ``run`` minus that of ``reference`` (same seed), in points."""
    runs = RUNS[experiment]["panels"][panel]["runs"]
    return [100 * (a - b) for a, b in zip(runs[run]["jitter"]["values"],
                                          runs[reference]["jitter"]["values"], strict=True)]


def _holds(values: list[float]) -> bool:
    """The SAFARI page's rule: the same sign on every seed and a mean gap at least twice
    its standard deviation."""
    mean = statistics.mean(values)
    return (all(v > 0 for v in values) or all(v < 0 for v in values)) \
        and abs(mean) >= 2 * statistics.stdev(values)


def test_safari_instability_verdicts_follow_the_pages_rule():
    # "Holds as instability" is a verdict on the seed-paired jitter gap (no compensation
    # minus compensation; P < 1 minus P = 1), by the page's own rule; where the rule is
    # not met the summary must say "not resolvable" and quote the gap.
    text = _page("safari.md")
    fig6 = "without compensation (Fig. 6)"
    gaps = {P: _jitter_gap("safari-probability", fig6, P, "P = 1")
            for P in ("P = 0.2", "P = 0.4", "P = 0.6", "P = 0.8")}
    assert [_holds(g) for g in gaps.values()] == [True, False, True, True]
    assert ("holds as instability at P = 0.2, 0.6 and 0.8, 2 seeds; at P = 0.4 both seeds "
            f"shake more, but by {_mean_std(gaps['P = 0.4'])} points of jitter (under twice "
            "the std): not resolvable with 2 seeds") in text
    assert (f"the jitter is up by {_mean_std(gaps['P = 0.2'])}, {_mean_std(gaps['P = 0.6'])} "
            f"and {_mean_std(gaps['P = 0.8'])} points); at P = 0.4 it is up on both seeds "
            f"too, but by {_mean_std(gaps['P = 0.4'])} points") in text
    fedavg = {p: _jitter_gap(e, f"{p} + FedAvg, P = 0.6", NO_COMP, "compensation")
              for e, p in (("safari-fmnist", "MAG"), ("safari-pruners", "SynFlow"),
                           ("safari-pruners", "FedSpa"))}
    assert [_holds(g) for g in fedavg.values()] == [True, True, True]
    assert ("P = 0.6: holds as instability for MAG (3 seeds), SynFlow and FedSpa (2 seeds; "
            f"seed-paired jitter up by {_mean_std(fedavg['SynFlow'])} and "
            f"{_mean_std(fedavg['FedSpa'])} points)") in text
    fedprox = {p: _jitter_gap("safari-fedprox", f"{p} + FedProx, P = 0.6", NO_COMP,
                              "compensation") for p in ("MAG", "SynFlow", "FedSpa")}
    assert [_holds(g) for g in fedprox.values()] == [False, False, True]
    assert ("holds as instability for FedSpa, 2 seeds, not resolvable for MAG and SynFlow "
            f"({_mean_std(fedprox['MAG'])} and {_mean_std(fedprox['SynFlow'])} points of "
            "jitter, under twice the std)") in text


def test_safari_summary_quotes_the_compensation_gaps_as_mean_and_std():
    # a mean of two seeds is not a bound on them ("within 0.13" where a seed is 0.18)
    text = _page("safari.md")
    pair = "no drop - compensation"
    synflow = _diff("safari-pruners", "SynFlow + FedAvg, P = 0.6", pair)
    assert f"SynFlow {_mean_std(synflow)}, FedSpa" in text
    prox = [_mean_std(_diff("safari-fedprox", f"{p} + FedProx, P = 0.6", pair))
            for p in ("MAG", "SynFlow", "FedSpa")]
    assert (f"no drop - compensation: MAG {prox[0]}, SynFlow {prox[1]}, FedSpa {prox[2]} "
            "points; no compensation") in text
    fig7 = {P: _diff("safari-probability", "with compensation (Fig. 7)", f"{P} - P = 1")
            for P in ("P = 0.8", "P = 0.6", "P = 0.4", "P = 0.2")}
    assert [_holds(g) for g in fig7.values()] == [False, False, True, False]
    worst = max(abs(statistics.mean(g)) for g in fig7.values())
    assert (f"seed-paired, within {worst:.2f} points of P = 1 at every P "
            f"({_mean_std(fig7['P = 0.8'])} at P = 0.8, {_mean_std(fig7['P = 0.6'])} at 0.6, "
            f"{_mean_std(fig7['P = 0.4'])} at 0.4, {_mean_std(fig7['P = 0.2'])} at 0.2) | "
            "holds, 2 seeds: at P = 0.8, 0.6 and 0.2 no gap resolvable with 2 seeds; at 0.4 "
            f"a small gap, {abs(statistics.mean(fig7['P = 0.4'])):.2f} points on both seeds "
            "(holds, 2 seeds)") in text


def test_fedmac_assumptions_list_the_figures_choices_the_configs_make():
    # What the paper leaves open in Figures 2, 4 and 6 (the data set of Figure 4, the R,
    # beta and gamma_w grids, the modified pFedMe's gamma) is ours: the assumptions
    # table must say it, and say what the configs run.
    from fedsparse.experiments.config import resolve_runs
    from fedsparse.experiments.fedmac_runs import named_config

    text = _page("fedmac.md")
    table = text[text.index("## What we assumed"):text.index("## Table 1, Fashion-MNIST")]

    def runs(figure: str) -> list[dict]:
        return resolve_runs(named_config(M.FIGURES[figure][0]))

    fig4 = runs("fedmac-fig4")
    assert {r["data"]["dataset"] for r in fig4} == {"fashion_mnist"}
    assert "| Figure 4's data set | not stated" in table and "| Fashion-MNIST:" in table
    assert {r["algorithm"]["gamma"] for r in fig4} == {1e-3}
    assert "gamma = 1e-3 for the modified pFedMe too" in table
    fig2 = runs("fedmac-fig2")
    R = sorted(r["algorithm"]["local_steps"] for r in fig2 if r["panel"] == "R")
    beta = sorted(r["algorithm"]["beta"] for r in fig2 if r["panel"] == "beta")
    assert (R, beta) == ([5, 10, 20, 30], [1.0, 1.5, 2.0])
    assert "R in {5, 10, 20, 30} at beta = 1; beta in {1, 1.5, 2} at R = 20" in table
    fig6 = runs("fedmac-fig6")
    gamma_w = sorted(r["algorithm"]["gamma_w"] for r in fig6)
    assert gamma_w == [0.0, 1e-6, 1e-5, 1e-4]
    assert max(g * r["algorithm"]["step_size"] for r in fig6 for g in gamma_w) <= 0.2
    assert "| Figure 6's gamma_w values | not listed | {0, 1e-6, 1e-5, 1e-4}" in table


def test_fedmac_figure_prose_quotes_the_committed_per_seed_values():
    # Figures 2, 3, 4 and 6: the seed-by-seed leads the verdicts rest on, to the digits
    # printed, from the committed summaries.
    text = _page("fedmac.md")

    def seeds(experiment: str, label: str, key: str) -> list[float]:
        run = next(r for r in RUNS[experiment]["runs"] if r["label"] == label)
        return run["per_seed"][key]

    def lead(experiment, a, b, key):
        return [x - y for x, y in zip(seeds(experiment, a, key), seeds(experiment, b, key),
                                      strict=True)]

    fig4 = [lead("fedmac-fig4", "FedMac", "modified pFedMe", k) for k in ("pm_best", "pm_last")]
    gm4 = [lead("fedmac-fig4", "FedMac", "modified pFedMe", k) for k in ("gm_best", "gm_last")]
    quoted = [f"by {fig4[0][0]:.2f} and {fig4[0][1]:.2f} points on the best over rounds "
              f"({_mean_std(fig4[0])}) and by {fig4[1][0]:.2f} and {fig4[1][1]:.2f} at the last "
              f"round ({_mean_std(fig4[1])},",
              f"(best over rounds: {gm4[0][0]:.2f} and +{gm4[0][1]:.2f}; last round: "
              f"{gm4[1][0]:.2f} and {gm4[1][1]:.2f})"]
    gm2 = lead("fedmac-fig2", "R = 5", "R = 30", "gm_best")
    pm2 = lead("fedmac-fig2", "R = 30", "R = 5", "pm_best")
    beta_gm = lead("fedmac-fig2", "beta = 2", "beta = 1", "gm_best")
    beta_pm = lead("fedmac-fig2", "beta = 1", "beta = 2", "pm_last")
    quoted += [f"(R = 5 over R = 30 by {gm2[0]:.2f} and {gm2[1]:.2f} points, {_mean_std(gm2)}:",
               f"(R = 30 over R = 5 by {pm2[0]:.2f} and {pm2[1]:.2f} points)",
               f"(by {beta_gm[0]:.2f} and {beta_gm[1]:.2f}, that is 4 and 2 test images)",
               f"beta = 1 over beta = 2 by {_mean_std(beta_pm)} points"]
    rows = {(r["method"], r["model"]): r["seeds"] for r in RUNS["fedmac-fig3"]["table"]}
    fedmac = rows[("FedMac", "PM")]
    per = [x - y for x, y in zip(fedmac, rows[("Per-FedAvg", "PM")], strict=True)]
    pfedme = [x - y for x, y in zip(fedmac, rows[("pFedMe", "PM")], strict=True)]
    quoted += [f"Above Per-FedAvg's PM by {_mean_std(per)} points ({per[0]:.1f} and "
               f"{per[1]:.1f}: holds, 2 seeds)",
               f"above pFedMe's by {_mean_std(pfedme)} ({pfedme[0]:.1f} and {pfedme[1]:.1f} "
               "points"]
    pm6 = [seeds("fedmac-fig6", "gamma_w = 1e-5", "pm_last")]
    quoted += [f"({pm6[0][0]:.2f} and {pm6[0][1]:.2f}% at the last round for gamma_w = 1e-5)"]
    for q in quoted:
        assert q in text, q


def test_real_data_page_says_its_runs_are_not_committed():
    # its numbers come from runs with no committed summary: a reader must be told
    committed = {p.parent.name for p in (RP.RESULTS / "runs").glob("*/summary.json")}
    assert not {n for n in committed if n.startswith(("fig6-", "fedht-fig6"))}, committed
    assert "**None of these runs is committed**" in _page("real-data.md")


def _test_images(values: list[float], sizes=range(10_000, 15_001)) -> int:
    """The one test-set size n for which every accuracy in ``values`` (%) is k / n."""
    found = [n for n in sizes if all(abs(v * n / 100 - round(v * n / 100)) < 1e-6
                                     for v in values)]
    assert len(found) == 1, found
    return found[0]


def test_fedmac_fashion_mnist_row_states_its_test_split_size():
    # Fashion-MNIST here is its 60,000 training images split 80/20 per client: the GM
    # accuracies of each seed are counts over 12,000 test images, give or take rounding
    # per client, and the leads the prose quotes in images follow from them.
    table = RUNS["fedmac-table1-fmnist"]["table"]
    rows = {(r["method"], r["model"]): r["seeds"] for r in table}
    gms = [r["seeds"] for r in table if r["model"] == "GM"]
    sizes = [_test_images([g[s] for g in gms]) for s in range(3)]
    assert min(sizes) >= 11_997 and max(sizes) <= 12_001, sizes
    lead = rows[("FedMac", "PM")][2] - rows[("Per-FedAvg", "PM")][2]
    images = round(lead * sizes[2] / 100)
    text = _page("fedmac.md")
    assert (f"The test splits hold 12,000 images ({min(sizes):,} to {max(sizes):,} by seed), "
            f"so {100 * 10 / 12_000:.2f} points is 10 images.") in text
    assert f"and {lead:.2f} per seed, the last {images} test images)" in text
    assert "70,000" not in text and "14,000" not in text


def _rows(experiment: str, name: str = "summary.json") -> dict:
    """A committed Table 1 (or Figure 3) run's rows by (method, model)."""
    folder = RP.RESULTS / "runs" / experiment
    table = json.loads((folder / name).read_text())["table"]
    return {(r["method"], r["model"]): r for r in table}


def _leads(rows: dict, a: tuple, b: tuple) -> list[float]:
    """Per-seed best of ``a`` minus that of ``b``, in points."""
    return [x - y for x, y in zip(rows[a]["seeds"], rows[b]["seeds"], strict=True)]


def _range(values: list[float], digits: int = 1) -> str:
    return f"{min(values):.{digits}f} to {max(values):.{digits}f}"


FM, PM, GM = ("FedMac", "PM"), "PM", "GM"


def test_fedmac_table1_prose_quotes_the_committed_runs():
    # Every number the Table 1 sections and the summary quote outside the generated
    # tables, from the committed summary.json (and other-arithmetic.json) of each row,
    # to the digits printed; per-seed claims rest on the per-seed bests the runs keep,
    # last-round claims on the last round's mean and std (no run keeps each seed's last).
    text = _page("fedmac.md")
    quoted = []
    # ---- Fashion-MNIST
    f = _rows("fedmac-table1-fmnist")
    pms = [k for k in f if k[1] == PM and k != FM]
    assert all(min(_leads(f, FM, k)) > 0 for k in pms)  # best PM in every seed
    per = _leads(f, FM, ("Per-FedAvg", PM))
    gm_avg, gm_prox, gm_pfedme = (_leads(f, ("FedMac", GM), (m, GM))
                                  for m in ("FedAvg", "FedProx", "pFedMe"))
    assert min(gm_avg + gm_prox + gm_pfedme) > 0 and _range(gm_prox) == _range(gm_avg)
    last = {k[0]: r["last"] for k, r in f.items() if k[1] == GM}
    assert min(last, key=lambda m: last[m]["mean"]) == "FedMac"
    tie = sorted(_leads(f, ("pFedMe", GM), ("FedAvg", GM)))
    assert tie[0] > 0
    short = {k: r["paper"] - r["best"]["mean"] for k, r in f.items()}
    seed2 = [(m, f[(m, PM)]["seeds"][2], f[(m, PM)]["paper"])
             for m in ("FedMac", "Per-FedAvg", "pFedMe", "HeurFedAMP")]
    assert [s >= p for _, s, p in seed2] == [True, True, True, False]
    gap = {m: f[(m, PM)]["best"]["mean"] - f[(m, GM)]["best"]["mean"]
           for m in ("FedMac", "pFedMe")}
    paper_gap = {m: f[(m, PM)]["paper"] - f[(m, GM)]["paper"] for m in ("FedMac", "pFedMe")}
    paper_pm = [r["paper"] for k, r in f.items() if k[1] == PM]
    paper_gm = [r["paper"] for k, r in f.items() if k[1] == GM]
    assert max(paper_pm) == f[FM]["paper"] and max(paper_gm) == f[("FedMac", GM)]["paper"]
    assert round(min(paper_pm) - max(paper_gm)) == 13
    quoted += [
        f"FedMac's PM is the best PM ({f[FM]['paper']:.2f}%) and its GM the best GM "
        f"({f[('FedMac', GM)]['paper']:.2f}%); every PM is about 13 points above every GM",
        f"its PMs reach {min(s for _, s, _ in seed2):.1f} to "
        f"{max(s for _, s, _ in seed2):.1f}%",
        f"lead {_mean_std(per)} points** over Per-FedAvg's: {per[0]:.2f}, {per[1]:.2f} and "
        f"{per[2]:.2f} per seed",
        f"{_mean_std(gm_avg)} points above FedAvg's ({_range(gm_avg)}, and the same over "
        f"FedProx's), {_mean_std(gm_pfedme)} above pFedMe's ({_range(gm_pfedme)})",
        f"at the last round FedMac's GM has the *lowest* mean of the GMs "
        f"({M.format_stat(last['FedMac'])} against pFedMe's {M.format_stat(last['pFedMe'])} "
        f"and FedAvg's {M.format_stat(last['FedAvg'])})",
        f"but by {tie[0]:.2f} and {tie[1]:.2f} points in two of them",
        f"every model is {_range(list(short.values()))} points below the paper's value "
        f"(FedMac's PM {f[FM]['best']['mean']:.2f} against {f[FM]['paper']:.2f}, "
        f"HeurFedAMP's PM {f[('HeurFedAMP', PM)]['best']['mean']:.2f} against "
        f"{f[('HeurFedAMP', PM)]['paper']:.2f}, the largest shortfall)",
        "FedMac's, Per-FedAvg's and pFedMe's PMs are at the paper's level or above it "
        f"({seed2[0][1]:.2f}, {seed2[1][1]:.2f} and {seed2[2][1]:.2f} against "
        f"{seed2[0][2]:.2f}, {seed2[1][2]:.2f} and {seed2[2][2]:.2f}), HeurFedAMP's not "
        f"({seed2[3][1]:.2f} against {seed2[3][2]:.2f})",
        f"The PM - GM gap is {gap['FedMac']:.1f} points for FedMac and {gap['pFedMe']:.1f} "
        f"for pFedMe, as in the paper ({paper_gap['FedMac']:.1f} and "
        f"{paper_gap['pFedMe']:.1f})"]
    assert max(short.values()) == short[("HeurFedAMP", PM)]
    o = _rows("fedmac-table1-fmnist", "other-arithmetic.json")
    other = json.loads((RP.RESULTS / "runs" / "fedmac-table1-fmnist" /
                        "other-arithmetic.json").read_text())
    o_last = sorted(r["last"]["mean"] for k, r in o.items() if k[1] == GM)
    assert o_last[0] == o[("FedMac", GM)]["last"]["mean"]
    quoted += [
        f"other-arithmetic.json`, {other['wall_clock_s']:,.0f} s in two attempts)",
        f"(FedMac's GM: the last round's std {f[('FedMac', GM)]['last']['std']:.2f} to "
        f"{o[('FedMac', GM)]['last']['std']:.2f}, seed 1's best "
        f"{f[('FedMac', GM)]['seeds'][1]:.2f} to {o[('FedMac', GM)]['seeds'][1]:.2f})",
        f"the lowest at the last round on the mean ({o_last[0]:.2f} against {o_last[1]:.2f} "
        f"to {o_last[-1]:.2f})",
        f"(it was {_leads(f, ('pFedMe', GM), ('FedAvg', GM))[0]:.2f} above)"]
    assert other["attempts"] == 2
    # the summary's Table 1 rows
    f_last = sorted(r["last"]["mean"] for k, r in f.items() if k[1] == GM)
    quoted += [f"but the lowest at the last round on the mean of the 3 seeds "
               f"({f_last[0]:.2f} against {f_last[1]:.2f} to {f_last[-1]:.2f})",
               f"({_mean_std(gm_pfedme)} points over pFedMe's, {_mean_std(gm_avg)} over "
               "FedAvg's)",
               f"Fashion-MNIST: every model {_range(list(short.values()))} points lower (in "
               "seed 2 FedMac's, Per-FedAvg's and pFedMe's PMs at the paper's level)"]
    # ---- Synthetic
    s = _rows("fedmac-table1-synthetic")
    pms = {m: _leads(s, FM, (m, PM)) for m in ("Per-FedAvg", "pFedMe", "HeurFedAMP")}
    assert min(v for seeds in pms.values() for v in seeds) > 0
    stds = [r[c]["std"] for r in s.values() for c in ("best", "last")]
    pf = _leads(s, ("Per-FedAvg", PM), ("pFedMe", PM))
    assert sum(v > 0 for v in pf) == 2
    gm_fedavg = _leads(s, ("FedMac", GM), ("FedAvg", GM))
    seed1 = {m: s[(m, GM)]["seeds"][1] for m in ("FedMac", "FedAvg", "FedProx", "pFedMe")}
    assert all(seed1["FedMac"] < seed1[m] for m in ("FedAvg", "FedProx", "pFedMe"))
    gms = [k for k in s if k[1] == GM]
    assert max(gms, key=lambda k: s[k]["best"]["mean"]) == ("FedMac", GM)
    gm_short = [s[k]["paper"] - s[k]["best"]["mean"] for k in gms]
    pm_short = [s[k]["paper"] - s[k]["best"]["mean"] for k in s if k[1] == PM]
    drop = {k: r["best"]["mean"] - r["last"]["mean"] for k, r in s.items()}
    assert max(drop, key=drop.get) == ("pFedMe", PM)

    def mean(k, c="best"):
        return f"{s[k]['best' if c == 'best' else c]['mean']:.2f}"

    quoted += [
        f"FedMac's PM is the best ({s[FM]['paper']:.2f}%), Per-FedAvg second "
        f"({s[('Per-FedAvg', PM)]['paper']:.2f}%); FedMac's GM is the best GM "
        f"({s[('FedMac', GM)]['paper']:.2f}%)",
        f"the seed spread ({_range(stds)} points)",
        f"{_mean_std(pms['Per-FedAvg'])} points above Per-FedAvg's ({_range(pms['Per-FedAvg'])} "
        f"per seed), {_mean_std(pms['pFedMe'])} above pFedMe's ({_range(pms['pFedMe'])}) and "
        f"{_mean_std(pms['HeurFedAMP'])} above HeurFedAMP's ({_range(pms['HeurFedAMP'])})",
        f"(FedMac {mean(FM)}, Per-FedAvg {mean(('Per-FedAvg', PM))}, pFedMe "
        f"{mean(('pFedMe', PM))}, HeurFedAMP {mean(('HeurFedAMP', PM))})",
        f"in two seeds of three and by {statistics.mean(pf):.2f} points on average",
        f"highest mean ({mean(('FedMac', GM))}, against pFedMe {mean(('pFedMe', GM))}, "
        f"FedAvg {mean(('FedAvg', GM))} and FedProx {mean(('FedProx', GM))})",
        f"in seed 1 ({seed1['FedMac']:.2f} against {seed1['FedAvg']:.2f}, "
        f"{seed1['FedProx']:.2f} and {seed1['pFedMe']:.2f})",
        f"its lead over FedAvg is {gm_fedavg[0]:.1f}, {gm_fedavg[1]:.1f} and "
        f"{gm_fedavg[2]:.1f} points in the three seeds",
        f"the GMs come within {_range(gm_short)} points of the paper's (pFedMe's GM "
        f"{mean(('pFedMe', GM))} against {s[('pFedMe', GM)]['paper']:.2f}), the PMs stay "
        f"{_range(pm_short)} points below (FedMac's {mean(FM)} against {s[FM]['paper']:.2f})",
        f"({M.format_stat(s[('pFedMe', PM)]['last'])} at the last round against "
        f"{M.format_stat(s[('pFedMe', PM)]['best'])} at its best)",
        f"Synthetic: the GMs {_range(gm_short)} lower, the PMs {_range(pm_short)}"]
    o = _rows("fedmac-table1-synthetic", "other-arithmetic.json")
    other = json.loads((RP.RESULTS / "runs" / "fedmac-table1-synthetic" /
                        "other-arithmetic.json").read_text())
    o_pf = _leads(o, ("Per-FedAvg", PM), ("pFedMe", PM))
    assert o[("pFedMe", PM)]["best"]["mean"] > o[("Per-FedAvg", PM)]["best"]["mean"] \
        and sum(v > 0 for v in o_pf) == 2
    assert all(o[("FedMac", GM)]["seeds"][1] < o[(m, GM)]["seeds"][1]
               for m in ("FedAvg", "FedProx", "pFedMe"))
    quoted += [
        f"(pFedMe's PM: {mean(('pFedMe', PM))} to {o[('pFedMe', PM)]['best']['mean']:.2f} on "
        f"average, {s[('pFedMe', PM)]['seeds'][0]:.2f} to {o[('pFedMe', PM)]['seeds'][0]:.2f} "
        "in seed 0)",
        f"({_mean_std(_leads(o, FM, ('Per-FedAvg', PM)))} points over Per-FedAvg's)",
        f"pFedMe's PM ({o[('pFedMe', PM)]['best']['mean']:.2f}) passes Per-FedAvg's "
        f"({o[('Per-FedAvg', PM)]['best']['mean']:.2f})",
        f"other-arithmetic.json`, {other['wall_clock_s']:,.0f} s)",
        "switched off (`{}`: the code a CPU without AVX takes; its default here is "
        "AVX-512)".format(" ".join(f"{k}={v}" for k, v in other["environment"].items()
                                   if k != "OMP_NUM_THREADS"))]
    assert "default is AVX-512" in other["what"]
    # ---- MNIST-5k
    m5 = _rows("fedmac-table1-mnist5k")
    pfedme = _leads(m5, FM, ("pFedMe", PM))
    others = _leads(m5, FM, ("Per-FedAvg", PM)) + _leads(m5, FM, ("HeurFedAMP", PM))
    assert min(pfedme) > 0 and min(pfedme) < min(others)
    paper = {k[0] if k[1] == PM else k: r["paper"] for k, r in m5.items()}
    paper_gms = [r["paper"] for k, r in m5.items() if k[1] == GM]
    assert max(paper_gms) == m5[("FedMac", GM)]["paper"]
    m_last = {k: r["last"] for k, r in m5.items() if k[1] == PM}
    assert sorted(m_last, key=lambda k: -m_last[k]["mean"])[:2] == [FM, ("pFedMe", PM)]
    ph = _leads(m5, ("Per-FedAvg", PM), ("HeurFedAMP", PM))
    assert sum(v > 0 for v in ph) == 2
    gm = _leads(m5, ("FedMac", GM), ("FedAvg", GM))
    assert sorted(round(v, 1) for v in gm) == [-0.1, -0.1, 0.5]
    m_gms = [r["best"]["mean"] for k, r in m5.items() if k[1] == GM]
    m_sizes = [_test_images([m5[k]["seeds"][s] for k in m5 if k[1] == GM], range(900, 1_101))
               for s in range(3)]
    other = json.loads((RP.RESULTS / "runs" / "fedmac-table1-mnist5k" /
                        "other-arithmetic.json").read_text())
    quoted += [
        f"FedMac PM {paper['FedMac']:.2f} > pFedMe PM {paper['pFedMe']:.2f} > HeurFedAMP "
        f"{paper['HeurFedAMP']:.2f} > Per-FedAvg {paper['Per-FedAvg']:.2f}; the GMs within "
        "0.05 points of each other (FedMac's highest); PM - GM about 2 points",
        f"{_mean_std(pfedme)} points above pFedMe's ({pfedme[0]:.1f}, {pfedme[1]:.1f} and "
        f"{pfedme[2]:.1f}: {round(10 * pfedme[0])}, {round(10 * pfedme[1])} and "
        f"{round(10 * pfedme[2])} test images)",
        f"and {_range(others)} above Per-FedAvg's and HeurFedAMP's",
        f"(FedMac's {M.format_stat(m5[FM]['last'])} at round 800 against "
        f"{M.format_stat(m5[FM]['best'])}), and at the last round FedMac's PM still has the "
        f"highest mean (pFedMe's {M.format_stat(m5[('pFedMe', PM)]['last'])} is second)",
        f"ahead in two seeds of three ({M.format_stat(m5[('Per-FedAvg', PM)]['best'])} "
        f"against {M.format_stat(m5[('HeurFedAMP', PM)]['best'])})",
        f"FedMac {M.format_stat(m5[('FedMac', GM)]['best'])}, pFedMe "
        f"{M.format_stat(m5[('pFedMe', GM)]['best'])}, FedAvg and FedProx "
        f"{M.format_stat(m5[('FedAvg', GM)]['best'])}",
        f"The PM - GM gap is {m5[FM]['best']['mean'] - m5[('FedMac', GM)]['best']['mean']:.1f} "
        f"points for FedMac, much larger than the paper's "
        f"{m5[FM]['paper'] - m5[('FedMac', GM)]['paper']:.1f}",
        f"other-arithmetic.json`, {other['wall_clock_s']:,.0f} s)",
        f"MNIST-5k: within {max(m_gms) - min(m_gms):.1f} points of every GM, as the paper's "
        f"(within 0.05)",
        "as in the paper, where they are within 0.05 points",
        f"above FedAvg's in one seed (by {max(gm):.1f} points) and {-min(gm):.1f} below it in "
        "the other two",
        f"The test splits hold {round(statistics.mean(m_sizes), -3):,.0f} images, so 0.1 point "
        "is one image"]
    assert max(m_sizes) - min(m_sizes) <= 2
    assert max(paper_gms) - min(paper_gms) <= 0.05 and max(m_gms) - min(m_gms) <= 0.1
    assert abs(paper["FedMac"] - paper[("FedMac", GM)] - 2) < 0.1
    # ---- the summary's first row: the lead over each row's second-best PM
    second = []
    for rows in (f, s, m5):
        runner = max((k for k in rows if k[1] == PM and k != FM),
                     key=lambda k: rows[k]["best"]["mean"])
        second.append((_mean_std(_leads(rows, FM, runner)), runner[0]))
    quoted.append(f"{second[0][0]} points over {second[0][1]} (Fashion-MNIST), "
                  f"{second[1][0]} over {second[1][1]} (Synthetic), {second[2][0]} over "
                  f"{second[2][1]} (MNIST-5k)")
    for q in quoted:
        assert q in text, q


def test_fedmac_figure_prose_quotes_the_committed_figures():
    # The numbers of the figures' sections and of the summary that
    # test_fedmac_figure_prose_quotes_the_committed_per_seed_values leaves out, from the
    # committed summaries (and Figure 6's shrink sizes from its config), to the digits
    # printed.
    from fedsparse.experiments.config import resolve_runs
    from fedsparse.experiments.fedmac_runs import named_config

    text = _page("fedmac.md")

    def run(experiment: str, label: str) -> dict:
        return next(r for r in RUNS[experiment]["runs"] if r["label"] == label)

    def seeds(experiment: str, label: str, key: str) -> list[float]:
        return run(experiment, label)["per_seed"][key]

    def lead(experiment, a, b, key):
        return [x - y for x, y in zip(seeds(experiment, a, key), seeds(experiment, b, key),
                                      strict=True)]

    # ---- Figure 2
    R = ("R = 5", "R = 10", "R = 20", "R = 30")
    B = ("beta = 1", "beta = 1.5", "beta = 2")
    loss = {k: seeds("fedmac-fig2", k, "loss_last") for k in R + B}
    to95 = {k: seeds("fedmac-fig2", k, "pm_rounds_to_95pct_of_best") for k in R}
    pm_last = {k: seeds("fedmac-fig2", k, "pm_last") for k in B}
    for s in (0, 1):  # every step up falls, in both seeds
        for grid in (R, B):
            assert all(loss[a][s] > loss[b][s] for a, b in zip(grid, grid[1:], strict=False))
        assert all(pm_last[a][s] > pm_last[b][s] for a, b in zip(B, B[1:], strict=False))
    assert to95["R = 20"] == to95["R = 30"] == [RUNS["fedmac-fig2"]["eval_every"]] * 2
    r20_30 = lead("fedmac-fig2", "R = 30", "R = 20", "pm_best")
    beta_best = lead("fedmac-fig2", "beta = 1", "beta = 2", "pm_best")
    beta_gm = lead("fedmac-fig2", "beta = 2", "beta = 1", "gm_best")
    gm2 = lead("fedmac-fig2", "R = 5", "R = 30", "gm_best")
    beta_pm = lead("fedmac-fig2", "beta = 1", "beta = 2", "pm_last")

    def per_seed(values: dict, keys, s, digits=3):
        return ", ".join(f"{values[k][s]:.{digits}f}" for k in keys)

    quoted = [
        f"({per_seed(loss, R, 0)} in seed 0; {per_seed(loss, R, 1)} in seed 1)",
        f"(rounds {to95['R = 5'][0]} and {to95['R = 5'][1]} for R = 5, {to95['R = 10'][0]} "
        f"and {to95['R = 10'][1]} for R = 10, the first evaluation, round "
        f"{to95['R = 20'][0]}, for R = 20 and 30)",
        f"(PM best {r20_30[0]:.2f} points apart in both seeds)",
        f"({per_seed(pm_last, B, 0, 2)} in seed 0; {per_seed(pm_last, B, 1, 2)} in seed 1;",
        f"fall by only {beta_best[0]:.2f} and {beta_best[1]:.2f} points (beta = 1 over 2)",
        f"The training loss falls with beta ({per_seed(loss, B, 0)} in seed 0; "
        f"{per_seed(loss, B, 1)} in seed 1)",
        f"(R = 5 over R = 30 by {_mean_std(gm2)} points)",
        f"beta = 2 above beta = 1 by {_mean_std(beta_gm)} points (best)",
        f"(beta = 1 over 2 by {_mean_std(beta_pm)}), the best by "
        f"{statistics.mean(beta_best):.2f}"]
    assert round(r20_30[0], 2) == round(r20_30[1], 2)
    # ---- Figure 3
    f3 = _rows("fedmac-fig3")
    gaps = {(g["method"], g["model"]): g for g in RUNS["fedmac-fig3"]["gaps"]}
    signs = [all(v > 0 for v in _leads(f3, FM, k)) == (gaps[k]["paper_gap"] > 0)
             and len({v > 0 for v in _leads(f3, FM, k)}) == 1 for k in gaps]
    assert sum(signs) == 6 and len(signs) == 7
    gm_gaps = [g["gap"] for k, g in gaps.items() if k[1] == GM]
    gm_seeds = [v for k in gaps if k[1] == GM for v in _leads(f3, FM, k)]
    ratio = [g["gap"] / g["paper_gap"] for k, g in gaps.items() if k[1] == GM]
    pfedme = _leads(f3, FM, ("pFedMe", PM))
    heur = _leads(f3, FM, ("HeurFedAMP", PM))
    assert round(heur[0], 2) == round(heur[1], 2) < 0
    # the accuracies of each seed's GMs are counts over that seed's test images
    sizes = [_test_images([f3[k]["seeds"][s] for k in f3 if k[1] == GM], range(900, 1_101))
             for s in (0, 1)]
    other = json.loads((RP.RESULTS / "runs" / "fedmac-fig3" /
                        "other-arithmetic.json").read_text())
    h_last, f_last = f3[("HeurFedAMP", PM)]["last"], f3[FM]["last"]
    assert h_last["mean"] > f_last["mean"]
    per = _leads(f3, FM, ("Per-FedAvg", PM))
    quoted += [
        "six of the seven gaps have the paper's sign, in both seeds",
        f"by {_range(gm_gaps, 2)} points on average ({_range(gm_seeds)} per seed: holds, "
        f"2 seeds), {_range(ratio)} times the paper's gaps",
        f"({pfedme[0]:.1f} and {pfedme[1]:.1f} points, that is "
        f"{round(pfedme[0] * sizes[0] / 100)} and {round(pfedme[1] * sizes[1] / 100)} test images",
        f"by {-heur[0]:.2f} points in both seeds ({round(-heur[0] * sizes[0] / 100)} test "
        f"images each; the paper has FedMac {gaps[('HeurFedAMP', PM)]['paper_gap']:.2f} ahead)",
        f"ahead on the mean too ({M.format_stat(h_last)} against {M.format_stat(f_last)})",
        f"other-arithmetic.json`, {other['wall_clock_s']:,.0f} s",
        f"(on {round(statistics.mean(sizes), -3):,.0f} test images a point is 10 images",
        f"above every GM ({_range(gm_gaps, 2)} points), Per-FedAvg's PM ({_mean_std(per)}) "
        f"and pFedMe's ({_mean_std(pfedme)}) in both seeds; {-heur[0]:.2f} below "
        "HeurFedAMP's PM in both seeds"]
    # ---- Figure 4
    fedmac, pfedme4 = run("fedmac-fig4", "FedMac"), run("fedmac-fig4", "modified pFedMe")
    floor = [fedmac["per_seed"]["pm_floor_round"], pfedme4["per_seed"]["pm_floor_round"]]
    later = [b - a for a, b in zip(*floor, strict=True)]
    assert round(min(later), -2) == 400 and min(later) > 0
    assert {f"{r[k]:.3f}" for r in (fedmac, pfedme4)
            for k in ("upload_density_last", "gm_density_last")} == {"1.000"}
    fig4 = [lead("fedmac-fig4", "FedMac", "modified pFedMe", k) for k in ("pm_best", "pm_last")]
    quoted += [
        f"FedMac's PMs reach the 50% floor at rounds {floor[0][0]} and {floor[0][1]}, the "
        f"modified pFedMe's at rounds {floor[1][0]} and {floor[1][1]}: some 400 rounds later",
        f"PMs at the 50% floor at rounds {floor[0][0]} and {floor[0][1]} (the modified "
        f"pFedMe's at {floor[1][0]} and {floor[1][1]}); PM higher by {_mean_std(fig4[0])} "
        f"points (best) and {_mean_std(fig4[1])} (last)",
        "(non-zero fraction 1.000 for both methods up to rounding)",
        f"are therefore {fedmac['recorded_cost_ratio']:.3f} of the dense cost",
        f"(2 x 64 s d + 2 (1 - s) d + d): after {fedmac['cost_round']} rounds that gives "
        f"{fedmac['formula_cost_ratio']:.3f}",
        f"gives {fedmac['formula_cost_ratio']:.3f} of the dense cost for FedMac (a "
        f"{100 * (1 - fedmac['formula_cost_ratio']):.0f}% saving; the paper: \"reduced by "
        f"almost half\") and {pfedme4['formula_cost_ratio']:.3f} for the modified pFedMe",
        f"the paper's formula with the PMs' sparsity gives {fedmac['formula_cost_ratio']:.3f} "
        f"of the dense cost after {fedmac['cost_round']} rounds"]
    # ---- Figure 6
    G = ("gamma_w = 0", "gamma_w = 1e-6", "gamma_w = 1e-5", "gamma_w = 1e-4")
    gm_best = {g: seeds("fedmac-fig6", g, "gm_best") for g in G}
    pm6 = {g: seeds("fedmac-fig6", g, "pm_last") for g in G}
    floor6 = {g: seeds("fedmac-fig6", g, "gm_floor_round") for g in G}
    assert floor6 == {"gamma_w = 0": [None, None], "gamma_w = 1e-6": [2, 2],
                      "gamma_w = 1e-5": [1, 1], "gamma_w = 1e-4": [1, 1]}
    assert all(max(pm6[g]) < min(pm6["gamma_w = 1e-6"]) for g in G[2:])
    spread = max(abs(a - b) for g in G[2:] for k in ("pm_best", "pm_last")
                 for a, b in [seeds("fedmac-fig6", g, k)])
    fig6 = resolve_runs(named_config(M.FIGURES["fedmac-fig6"][0]))
    shrink = sorted(r["algorithm"]["step_size"] * r["algorithm"]["gamma_w"] for r in fig6
                    if r["algorithm"]["gamma_w"] > 0)
    assert {r["algorithm"]["local_steps"] for r in fig6} == {20}
    quoted += [
        "any gamma_w > 0 puts it at the 50% floor at round 2 (gamma_w = 1e-6) or round 1 "
        "(1e-5, 1e-4), in both seeds",
        "The GM's best falls from {} (gamma_w = 0) to {} (1e-6), {} (1e-5) and {} (1e-4; "
        "chance is 10%)".format(*(f"{gm_best[g][0]:.2f} and {gm_best[g][1]:.2f}%" for g in G)),
        f"from {pm6[G[0]][0]:.2f} and {pm6[G[0]][1]:.2f}% to {pm6[G[1]][0]:.2f} and "
        f"{pm6[G[1]][1]:.2f}% (1e-6), and lower for the two largest values",
        f"their PMs differ by up to {spread:.1f} points between the two seeds",
        "after **every** one of the 20 local steps",
        f"eta gamma_w = {shrink[0]:.0e} (gamma_w = 1e-6) to {shrink[-1]:.1f} (1e-4)".replace(
            "e-03", "e-3"),
        "(the GM's best from {} to {}, {}, {}%)".format(
            *(f"{run('fedmac-fig6', g)['gm_best']:.2f}" for g in G))]
    for q in quoted:
        assert q in text, q


# ------------------------------------------------------------- which images SAFARI tests on


SAFARI_CPU = ("safari-fmnist", "safari-pruners", "safari-probability", "safari-sparsity",
              "safari-fedprox", "safari-fmnist-cnn")


def test_safari_runs_say_which_test_split_they_were_tested_on(monkeypatch, tmp_path):
    # A committed CPU run tests either on the official test split dealt by label or on
    # 1/6 of each client's share held out: its setting line, and the assumptions table's
    # test-set row, say which, and the experiment's full budget is the one that ran.
    from fedsparse.experiments import safari as S

    monkeypatch.setattr(S, "run_safari", lambda config, out, budget, **_: budget)
    budgets = {name: getattr(S, name.replace("-", "_"))(tmp_path) for name in SAFARI_CPU}
    text = _page("safari.md")
    row = text[text.index("| test set |"):text.index("| optimiser |")]
    named = {}
    for split, words in (("official", "**official test split** ("),
                         ("held_out", "**held out** (")):
        group = row[row.index(words) + len(words):].split(")")[0] if words in row else ""
        named[split] = set(re.findall(r"`(safari-[a-z-]+)`", group))
    for experiment in SAFARI_CPU:
        s = RUNS[experiment]
        assert s["test_split"] == budgets[experiment].test_split, experiment
        assert RP.TEST_SPLITS[s["test_split"]] in RP.setting_line(s), experiment
        assert experiment in named[s["test_split"]], (experiment, named)
    assert named["official"] | named["held_out"] == set(SAFARI_CPU)


def test_collect_reads_the_test_split_of_an_older_safari_analysis(tmp_path):
    # a safari.json whose budget does not name the split: the run folder's config does
    out = tmp_path / "out"
    out.mkdir()
    s = RUNS["safari-fmnist"]
    (out / "summary.json").write_text(json.dumps({"rounds": 50, "seeds": 3, "device": "cpu",
                                                  "gpu": None, "wall_clock_s": 10.0}))
    budget = {"rounds": 50, "seeds": 3, "max_examples": None, "model": "mlp"}
    (out / "safari.json").write_text(json.dumps({"budget": budget, "measures": s["measures"],
                                                 "panels": s["panels"]}))
    config = ('[defaults.data]\ntest_split = "official"\n\n[[runs]]\nlabel = "a"\n\n'
              '[[runs]]\nlabel = "b"\n\n[runs.data]\ntest_split = "{}"\n')
    (out / "config.toml").write_text(config.format("official"))
    record = json.loads(RP.collect("safari-fmnist", out, runs=tmp_path / "runs").read_text())
    assert record["test_split"] == "official"
    assert "tested on the official test split, 50 rounds" in RP.setting_line(record)
    (out / "config.toml").write_text(config.format("held_out"))
    with pytest.raises(ConfigError, match="held_out, official; the pages quote runs"):
        RP.collect("safari-fmnist", out, runs=tmp_path / "runs")
    budget["test_split"] = "held_out"  # the analysis names it: that is the split
    (out / "safari.json").write_text(json.dumps({"budget": budget, "measures": s["measures"],
                                                 "panels": s["panels"]}))
    record = json.loads(RP.collect("safari-fmnist", out, runs=tmp_path / "runs").read_text())
    assert record["test_split"] == "held_out"


def _seeds(values: list[float], digits: int = 2) -> str:
    return ", ".join(f"{v:.{digits}f}" for v in values)


def _span(values: list[float], digits: int = 1) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


def test_safari_fmnist_prose_quotes_the_committed_run():
    # Figures 2 and 5: every number of the bullets and the summary rows, to the digits
    # printed, and each verdict by the page's rule.
    text = _page("safari.md")
    s = RUNS["safari-fmnist"]
    p06, asym = "MAG + FedAvg, P = 0.6", "MAG + FedAvg, asymmetric P (0.18 / 0.6)"
    comp06 = _diff("safari-fmnist", p06, "no drop - compensation")
    comp_asym = _diff("safari-fmnist", asym, "no drop - compensation")
    assert not _holds(comp06) and not _holds(comp_asym)
    level = _diff("safari-fmnist", p06, "compensation - no compensation")
    stall = _diff("safari-fmnist", asym, "compensation - no compensation")
    assert min(stall) > 0 and _holds(stall)
    runs = s["panels"][p06]["runs"]
    jitter = {r: [100 * v for v in runs[r]["jitter"]["values"]] for r in (COMP, NO_COMP)}
    assert _holds(_jitter_gap("safari-fmnist", p06, NO_COMP, COMP))
    below = sorted(v for v in level if v > 0)
    above = sorted(-v for v in level if v < 0)
    assert len(below) == 1 and len(above) == 2
    ratios = [d["ratio"] for panel in s["distances"].values() for d in panel["per_seed"]]
    assert max(ratios) < 0.30
    dist = [f"{p['ratio']['mean']:.3f} ± {p['ratio']['std']:.3f}"
            for p in s["distances"].values()]
    no_drop = s["panels"][p06]["runs"]["no drop"]["score"]["mean"]
    for quoted in (f"{_mean_std(comp06)} points of score ({_seeds(comp06)} on the three seeds)",
                   f"{_mean_std(comp_asym)} points of score ({_seeds(comp_asym)} on the three "
                   "seeds): no difference we can resolve with 3 seeds",
                   f"no drop - compensation: MAG {_mean_std(comp06)}, SynFlow",
                   f"MAG {_mean_std(comp_asym)} points ({min(comp_asym):.2f} to "
                   f"{max(comp_asym):.2f} by seed)",
                   f"within {abs(statistics.mean(level)):.2f} ± {statistics.stdev(level):.2f} "
                   f"points of compensation's",
                   f"one seed ends {below[0]:.1f} points below, two end {above[0]:.1f} and "
                   f"{above[1]:.1f} points above",
                   f"jumps by {_mean_std(jitter[NO_COMP])} points",
                   f"against {_mean_std(jitter[COMP])} with compensation "
                   f"({_span(jitter[NO_COMP])} against {_span(jitter[COMP])} on every seed)",
                   f"Accuracy stalls: {_mean_std(stall)} points below compensation "
                   f"({_span(stall)} on every seed)",
                   f"within / between = {dist[0]} (P = 0.6) and {dist[1]} (asymmetric)",
                   "distances are below 0.30 of the between-group ones on every seed",
                   f"no drop's test accuracy averages {100 * no_drop:.2f}% over rounds 41-50"):
        assert quoted in text, quoted


def test_safari_summary_quotes_the_jitter_ratios_of_the_three_pruners():
    # no compensation's jitter over compensation's at P = 0.6, from the tables' means
    text = _page("safari.md")
    ratios = []
    for experiment, pruner in (("safari-fmnist", "MAG"), ("safari-pruners", "SynFlow"),
                               ("safari-pruners", "FedSpa")):
        runs = RUNS[experiment]["panels"][f"{pruner} + FedAvg, P = 0.6"]["runs"]
        ratios.append(runs[NO_COMP]["jitter"]["mean"] / runs[COMP]["jitter"]["mean"])
    assert f"the curve shakes {_span(ratios)} times as much from round to round" in text


def test_safari_sparsity_prose_quotes_the_committed_run():
    # Figure 8: each alpha's gap to the dense model, and which of them hold by the rule
    text = _page("safari.md")
    panel = "MAG + FedAvg, compensation, P = 0.6"
    alphas = ("0.2", "0.4", "0.6", "0.7", "0.8")
    gaps = {a: _diff("safari-sparsity", panel, f"pruned 0 - pruned {a}") for a in alphas}
    assert all(min(g) > 0 for g in gaps.values())  # below the dense model on every seed
    assert [_holds(g) for g in gaps.values()] == [False, True, True, True, True]
    q = {a: _mean_std(g) for a, g in gaps.items()}
    for quoted in (f"{q['0.2']} points at alpha = 0.2, {q['0.4']} at 0.4, {q['0.6']} at 0.6 "
                   f"(the paper's setting), {q['0.7']} at 0.7 and {q['0.8']} at 0.8 below the "
                   "dense model, on both seeds at every alpha. From alpha = 0.4 on each gap is "
                   "more than twice its spread: it holds, 2 seeds.",
                   f"| {q['0.2']} to {q['0.8']} points below dense from alpha = 0.2 to 0.8, on "
                   "both seeds at every alpha | does not hold at 30 rounds with the MLP: from "
                   "alpha = 0.4 on, a gap that holds, 2 seeds; at 0.2 not resolvable with 2 "
                   "seeds"):
        assert quoted in text, quoted


def test_safari_pruners_prose_quotes_the_committed_run():
    # Figures 3 and 4: the bullets' numbers, to the digits printed, and their verdicts
    text = _page("safari.md")
    asym = "asymmetric P (0.18 / 0.6)"
    sf, fs = "SynFlow + FedAvg", "FedSpa + FedAvg"
    sf06 = _diff("safari-pruners", f"{sf}, P = 0.6", "no drop - compensation")
    sf_level = _diff("safari-pruners", f"{sf}, P = 0.6", "compensation - no compensation")
    sf_above = _diff("safari-pruners", f"{sf}, {asym}", "compensation - no compensation")
    fs06 = _diff("safari-pruners", f"{fs}, P = 0.6", "no drop - compensation")
    fs_level = _diff("safari-pruners", f"{fs}, P = 0.6", "compensation - no compensation")
    fs_gap = _diff("safari-pruners", f"{fs}, {asym}", "no drop - compensation")
    fs_above = _diff("safari-pruners", f"{fs}, {asym}", "compensation - no compensation")
    sf_jitter = _jitter_gap("safari-pruners", f"{sf}, P = 0.6", NO_COMP, COMP)
    fs_jitter = _jitter_gap("safari-pruners", f"{fs}, P = 0.6", NO_COMP, COMP)
    assert min(sf06) > 0 and not _holds(sf06) and not _holds(fs06)
    assert not _holds(sf_level) and not _holds(fs_level)
    assert _holds(sf_jitter) and _holds(fs_jitter) and _holds(fs_gap) and _holds(fs_above)
    assert _holds(sf_above)

    def jitter(panel: str, run: str) -> str:
        return _mean_std([100 * v for v in RUNS["safari-pruners"]["panels"][panel]["runs"]
                          [run]["jitter"]["values"]])

    largest = max(RUNS[e]["panels"][f"{p}, P = 0.6"]["runs"][NO_COMP]["jitter"]["mean"]
                  for e, p in (("safari-fmnist", "MAG + FedAvg"), ("safari-pruners", sf),
                               ("safari-pruners", fs)))
    assert largest == RUNS["safari-pruners"]["panels"][f"{fs}, P = 0.6"]["runs"][NO_COMP][
        "jitter"]["mean"]
    for quoted in (f"At P = 0.6 compensation is {_mean_std(sf06)} points below no drop "
                   f"({sf06[0]:.2f} and {sf06[1]:.2f} on the two seeds: below on both, but by "
                   "less than twice the spread, no difference we can resolve with 2 seeds)",
                   f"seed spread ({_mean_std(sf_level)} points) but shakes: jitter "
                   f"{jitter(f'{sf}, P = 0.6', NO_COMP)} points per round against "
                   f"{jitter(f'{sf}, P = 0.6', COMP)}, seed-paired up by "
                   f"{_mean_std(sf_jitter)} points ({sf_jitter[0]:.2f} and {sf_jitter[1]:.2f}): "
                   "holds, 2 seeds.",
                   f"{_mean_std(sf_above)} points above no compensation ({_seeds(sf_above)}): "
                   "the paper's claim.",
                   f"compensation vs no drop, {_mean_std(fs06)} points: no difference we can "
                   f"resolve with 2 seeds. No compensation: no difference in level we can "
                   f"resolve ({_mean_std(fs_level)}), and the largest jitter of Figures 2-4's "
                   f"P = 0.6 runs ({jitter(f'{fs}, P = 0.6', NO_COMP)} against "
                   f"{jitter(f'{fs}, P = 0.6', COMP)}; seed-paired up by {_mean_std(fs_jitter)} "
                   "points: holds, 2 seeds).",
                   f"Compensation is better than none ({_mean_std(fs_above)} points; "
                   f"{fs_above[0]:.2f} and {fs_above[1]:.2f} on the two seeds) but "
                   f"{_mean_std(fs_gap)} points below no drop ({_seeds(fs_gap)}), and its curve "
                   f"jumps by {jitter(f'{fs}, {asym}', COMP)} points per round.",
                   f"FedSpa {_mean_std(fs_gap)} points below no drop (every seed)"):
        assert quoted in text, quoted


def test_safari_probability_prose_quotes_the_committed_run():
    # Figures 6 and 7: the bullets' numbers, to the digits printed
    text = _page("safari.md")
    s = RUNS["safari-probability"]
    fig6, fig7 = "without compensation (Fig. 6)", "with compensation (Fig. 7)"
    ps = ("P = 0.2", "P = 0.4", "P = 0.6", "P = 0.8")
    level = {P: _diff("safari-probability", fig6, f"{P} - P = 1") for P in ps}
    assert not any(_holds(v) for v in level.values())
    means = {P: statistics.mean(v) for P, v in level.items()}
    lo, hi = min(ps, key=means.get), max(ps, key=means.get)
    spreads = [statistics.stdev(v) for v in level.values()]

    def jitter(panel: str, P: str) -> list[float]:
        return [100 * v for v in s["panels"][panel]["runs"][P]["jitter"]["values"]]

    jitter6 = [100 * s["panels"][fig6]["runs"][P]["jitter"]["mean"] for P in ps]
    assert max(jitter6) == jitter6[0]  # largest at P = 0.2
    one = jitter(fig6, "P = 1")
    below = [-level[P][0] for P in ps]
    assert min(below) > 0 and sum(level[P][1] > 0 for P in ps) == 3
    comp = {P: _diff("safari-probability", fig7, f"{P} - P = 1") for P in ps}
    jitter7 = [100 * s["panels"][fig7]["runs"][P]["jitter"]["mean"] for P in (*ps, "P = 1")]
    for quoted in (f"from P = 1 are {_mean_std(level[lo])} ({lo}) to {_mean_std(level[hi])} "
                   f"({hi}) points, with spreads of {min(spreads):.2f}-{max(spreads):.2f} points",
                   f"jitter {min(jitter6):.2f} to {max(jitter6):.2f} points per round against "
                   f"{_mean_std(one)} at P = 1 ({min(v for P in ps for v in jitter(fig6, P)):.2f} "
                   f"or more on every seed at every P < 1, against {one[0]:.2f} and {one[1]:.2f} "
                   "at P = 1), largest at P = 0.2",
                   f"seed 0 every P < 1 ends {min(below):.1f}-{max(below):.1f} points below "
                   "P = 1; on seed 1 three of the four end above it",
                   f"the seed-paired differences from P = 1 are {_mean_std(comp['P = 0.8'])} "
                   f"(P = 0.8), {_mean_std(comp['P = 0.6'])} (0.6), {_mean_std(comp['P = 0.4'])} "
                   f"(0.4) and {_mean_std(comp['P = 0.2'])} (0.2) points",
                   f"at P = 0.4 both seeds end below P = 1 ({comp['P = 0.4'][0]:.2f} and "
                   f"{comp['P = 0.4'][1]:.2f}), by about a third of a point. The jitter stays at "
                   f"{min(jitter7):.2f}-{max(jitter7):.2f} points.",
                   f"(jitter {min(jitter6):.2f}-{max(jitter6):.2f} against "
                   f"{100 * s['panels'][fig6]['runs']['P = 1']['jitter']['mean']:.2f} points per "
                   f"round), but not monotonically in P ({jitter6[2]:.2f} at P = 0.6, "
                   f"{jitter6[3]:.2f} at 0.8)",
                   f"level differences from P = 1 between {_mean_std(level[lo])} and "
                   f"{_mean_std(level[hi])} points"):
        assert quoted in text, quoted
    assert jitter6[3] > jitter6[2]  # not monotonic


def test_the_pruned_0_6_run_is_figure_7s_p_0_6_run():
    # the page says the two experiments give the same numbers for the same configuration
    a = RUNS["safari-sparsity"]["panels"]["MAG + FedAvg, compensation, P = 0.6"]["runs"][
        "pruned 0.6"]
    b = RUNS["safari-probability"]["panels"]["with compensation (Fig. 7)"]["runs"]["P = 0.6"]
    for measure in ("score", "curve_mean", "jitter"):
        assert a[measure]["values"] == b[measure]["values"], measure
    assert "The pruned 0.6 run is the same run as Figure 7's P = 0.6 with compensation (the " \
        "same numbers)" in _page("safari.md")


def test_safari_fedprox_prose_quotes_the_committed_run():
    # Figures 9-11: the paragraph's and the summary row's numbers, to the digits printed
    text = _page("safari.md")
    pruners = ("MAG", "SynFlow", "FedSpa")
    panels = {p: RUNS["safari-fedprox"]["panels"][f"{p} + FedProx, P = 0.6"] for p in pruners}
    comp = {p: _diff("safari-fedprox", f"{p} + FedProx, P = 0.6", "no drop - compensation")
            for p in pruners}
    level = {p: _diff("safari-fedprox", f"{p} + FedProx, P = 0.6",
                      "compensation - no compensation") for p in pruners}
    gap = {p: _jitter_gap("safari-fedprox", f"{p} + FedProx, P = 0.6", NO_COMP, COMP)
           for p in pruners}
    assert not any(_holds(v) for v in (*comp.values(), *level.values()))
    assert all(min(g) > 0 for g in gap.values())  # shakes more on every seed

    def jitter(p: str, run: str) -> str:
        return _mean_std([100 * v for v in panels[p]["runs"][run]["jitter"]["values"]])

    ratios = [panels[p]["runs"][NO_COMP]["jitter"]["mean"] / panels[p]["runs"][COMP]["jitter"]
              ["mean"] for p in pruners]
    spreads = [statistics.stdev(v) for v in level.values()]
    scores = [100 * r["score"]["mean"] for p in pruners for r in panels[p]["runs"].values()]
    m, sf, fs = pruners
    for quoted in (f"compensation vs no drop, {_mean_std(comp[m])} (MAG), {_mean_std(comp[sf])} "
                   f"(SynFlow) and {_mean_std(comp[fs])} (FedSpa) points",
                   f"(seed spreads of {min(spreads):.2f}-{max(spreads):.2f} points), and shakes "
                   f"more on every seed: jitter {jitter(m, NO_COMP)}, {jitter(sf, NO_COMP)} and "
                   f"{jitter(fs, NO_COMP)} points per round against {jitter(m, COMP)}, "
                   f"{jitter(sf, COMP)} and {jitter(fs, COMP)} with compensation",
                   f"the jitter is up by {_mean_std(gap[m])} (MAG), {_mean_std(gap[sf])} "
                   f"(SynFlow) and {_mean_std(gap[fs])} (FedSpa) points: the instability holds "
                   "for FedSpa, 2 seeds; for MAG and SynFlow it is under twice its spread",
                   f"scores between {min(scores):.2f}% and {max(scores):.2f}%",
                   f"level within the seed spread, {min(ratios):.1f}-{max(ratios):.1f} times the "
                   "jitter"):
        assert quoted in text, quoted


def test_safari_fmnist_cnn_prose_quotes_the_committed_run():
    # the CNN check: one seed, so every number is that seed's, to the digits printed
    text = _page("safari.md")
    cnn, mlp = RUNS["safari-fmnist-cnn"], RUNS["safari-fmnist"]
    panel = cnn["panels"]["MAG + FedAvg, asymmetric P (0.18 / 0.6)"]
    runs = {k: {m: 100 * v[m]["mean"] for m in ("score", "curve_mean", "jitter")}
            for k, v in panel["runs"].items()}
    gaps = {k: 100 * v["score"]["mean"] for k, v in panel["differences"].items()}
    assert cnn["seeds"] == 1 and gaps["no drop - compensation"] > 0
    assert max(runs, key=lambda k: runs[k]["curve_mean"]) == NO_COMP
    n_cnn = cnn["rounds"] * len(panel["runs"])
    # safari-fmnist's two panels share their no-drop run: count each run once
    n_mlp = mlp["rounds"] * mlp["seeds"] * len({tuple(r["score"]["values"]) for p in
                                                mlp["panels"].values()
                                                for r in p["runs"].values()})
    per_cnn, per_mlp = cnn["wall_clock_s"] / n_cnn, mlp["wall_clock_s"] / n_mlp
    ratio = cnn["distances"]["MAG + FedAvg, asymmetric P (0.18 / 0.6)"]["ratio"]["mean"]
    for quoted in (f"A round costs about {per_cnn / per_mlp:.0f} times the MLP's here (the "
                   f"committed runs' wall clocks: {cnn['wall_clock_s']:.0f} s for {n_cnn} "
                   f"rounds, {per_cnn:.2f} s a round, against {mlp['wall_clock_s']:.0f} s for "
                   f"`safari-fmnist`'s {n_mlp}, {per_mlp:.2f} s a round)",
                   "no drop's score, the mean over rounds 6-15, is "
                   f"{runs['no drop']['score']:.2f}%",
                   f"({gaps['no drop - no compensation']:.2f} points of score below no drop)",
                   f"(within / between {ratio:.3f})",
                   f"ending {gaps['no drop - compensation']:.2f} points of score below no drop "
                   f"and {gaps['compensation - no compensation']:.2f} above no compensation",
                   f"jitter {runs[COMP]['jitter']:.2f} against {runs['no drop']['jitter']:.2f} "
                   "points per round",
                   f"the highest curve mean, {runs[NO_COMP]['curve_mean']:.2f} against "
                   f"{runs['no drop']['curve_mean']:.2f}"):
        assert quoted in text, quoted


def test_the_pins_say_how_long_the_committed_runs_took():
    minutes = sum(RUNS[e]["wall_clock_s"] for e in SAFARI_CPU) / 60
    assert f"whose committed runs took {minutes:.0f} minutes together on two shared cores" \
        in _page("safari.md")
