"""Tong et al. 2022's claims, checked on our runs. The default-suite test uses the small
default experiment; the paper-scale ones are opt-in (pytest -m slow). The exact numbers
quoted on docs/results/fedht.md are pinned in test_results_pins.py; these tests hold the
claims themselves, as close to the paper's numbers as our runs get."""

import pytest

from fedsparse.cli import resolve_experiment
from fedsparse.experiments.runner import run_experiment

SIM1, SIM2 = "Simulation I (regression)", "Simulation II (classification)"


def _reach(summary, panel, run, reference_round):
    return next(c["rounds_needed"] for c in summary["comparisons"] if c["panel"] == panel
                and c["run"] == run and c["reference_round"] == reference_round)


def _finals(summary, panel):
    return {r["label"]: r["objective"] for r in summary["runs"] if r["panel"] == panel}


def test_default_experiment_fediter_ht_needs_fewer_rounds_than_distributed_iht(tmp_path):
    _, config, _ = resolve_experiment("fedht-default")
    summary = run_experiment(config, tmp_path, progress=False, log=lambda *_: None)
    # the paper's speed-ups are ~4-5x; this small version gets 2.7x and 3.3x (22 and 18
    # rounds for Distributed-IHT's 60): hold it to at least 2.5x and 3x
    for panel, most in ((SIM1, 24), (SIM2, 20)):
        needed = _reach(summary, panel, "FedIter-HT", 60)
        assert needed is not None and needed <= most, (panel, needed)
    # FedIter-HT uploads tau-sparse models: well under half of Fed-HT's dense bytes
    by_label = {(r["panel"], r["label"]): r for r in summary["runs"]}
    assert by_label[(SIM1, "FedIter-HT")]["bytes_total"] < 0.5 * by_label[(SIM1, "Fed-HT")][
        "bytes_total"]


@pytest.mark.slow
def test_figure3_at_equal_step_fediter_ht_is_several_times_faster(tmp_path):
    _, config, _ = resolve_experiment("fedht-fig3-auto")
    summary = run_experiment(config, tmp_path, progress=False, log=lambda *_: None)
    # Simulation I: the paper needs ~20 rounds for Distributed-IHT's round-100 objective;
    # we need 42 (2.4x, not 5x): at most 45
    needed = _reach(summary, SIM1, "FedIter-HT", 100)
    assert needed is not None and needed <= 45
    # Simulation II: the paper's ~50 rounds for the round-200 objective (we need 39)
    needed = _reach(summary, SIM2, "FedIter-HT", 200)
    assert needed is not None and needed <= 50
    # the paper's ordering at round 200: FedIter-HT < Fed-HT < Distributed-IHT
    for panel in (SIM1, SIM2):
        f = _finals(summary, panel)
        assert f["FedIter-HT"] < f["Fed-HT"] < f["Distributed-IHT"], (panel, f)


@pytest.mark.slow
def test_figure3_with_grid_searched_steps_distributed_iht_wins(tmp_path):
    # the negative result the page reports: under the per-algorithm grid search,
    # neither local method reaches Distributed-IHT's round-100 objective in 200 rounds
    _, config, _ = resolve_experiment("fedht-fig3")
    summary = run_experiment(config, tmp_path, progress=False, log=lambda *_: None)
    for panel in (SIM1, SIM2):
        for run in ("Fed-HT", "FedIter-HT"):
            assert _reach(summary, panel, run, 100) is None, (panel, run)
