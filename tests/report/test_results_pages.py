"""docs/results/safari.md and fedmac.md agree with the committed runs they quote
(docs/results/runs/<experiment>/summary.json), and each committed run carries what a
reader needs to check a number: rounds, seeds, device, gpu, wall clock and per-seed
values."""

from __future__ import annotations

import copy
import json
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
    for quoted in (f"SynFlow {_mean_std(synflow)} points below no drop (every seed)",
                   f"{_mean_std(synflow)} points below no drop "
                   f"({synflow[0]:.2f}, {synflow[1]:.2f})",
                   f"asymmetric P: {min(below):.1f}-{max(below):.1f} points below no drop on "
                   f"every seed (means {min(means):.1f}-{max(means):.1f})",
                   f"(at 0.2 by {alpha[0]:.2f} and {alpha[1]:.2f} points)"):
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


NO_COMP = "no compensation"


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
    assert [_holds(g) for g in gaps.values()] == [True, False, False, True]
    assert ("holds as instability at P = 0.2 and 0.8, 2 seeds; at P = 0.4 and 0.6 both "
            f"seeds shake more, but by {_mean_std(gaps['P = 0.4'])} and "
            f"{_mean_std(gaps['P = 0.6'])} points of jitter (under twice the std): not "
            "resolvable with 2 seeds") in text
    assert (f"the jitter is up by {_mean_std(gaps['P = 0.2'])} and "
            f"{_mean_std(gaps['P = 0.8'])} points") in text
    fedavg = {p: _jitter_gap(e, f"{p} + FedAvg, P = 0.6", NO_COMP, "compensation")
              for e, p in (("safari-fmnist", "MAG"), ("safari-pruners", "SynFlow"),
                           ("safari-pruners", "FedSpa"))}
    assert [_holds(g) for g in fedavg.values()] == [True, False, True]
    assert ("P = 0.6: holds as instability for MAG (3 seeds) and FedSpa (2 seeds), not "
            "resolvable with 2 seeds for SynFlow (it shakes more on both seeds, by "
            f"{_mean_std(fedavg['SynFlow'])} points of jitter") in text
    fedprox = {p: _jitter_gap("safari-fedprox", f"{p} + FedProx, P = 0.6", NO_COMP,
                              "compensation") for p in ("MAG", "SynFlow", "FedSpa")}
    assert [_holds(g) for g in fedprox.values()] == [False, True, True]
    assert ("holds as instability for SynFlow and FedSpa, 2 seeds, not resolvable for MAG "
            f"({_mean_std(fedprox['MAG'])} points of jitter") in text


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
            for P in ("P = 0.8", "P = 0.6", "P = 0.4")}
    assert _holds(fig7["P = 0.8"]) and not _holds(fig7["P = 0.6"]) \
        and not _holds(fig7["P = 0.4"])
    assert (f"({_mean_std(fig7['P = 0.8'])} at P = 0.8, {_mean_std(fig7['P = 0.6'])} at 0.6, "
            f"{_mean_std(fig7['P = 0.4'])} at 0.4)") in text


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
