"""Paper 000's claims, checked on our runs. The default-suite test uses the small default
experiment; the paper-scale ones are opt-in (pytest -m slow)."""

import pytest

from fedsparse.cli import resolve_experiment
from fedsparse.experiments.runner import run_experiment


def _reach(summary, panel, run, reference_round):
    return next(c["rounds_needed"] for c in summary["comparisons"] if c["panel"] == panel
                and c["run"] == run and c["reference_round"] == reference_round)


def test_default_experiment_fediter_ht_needs_fewer_rounds_than_distributed_iht(tmp_path):
    _, config, _ = resolve_experiment("fedht-default")
    summary = run_experiment(config, tmp_path, progress=False, log=lambda *_: None)
    for panel in ("Simulation I (regression)", "Simulation II (classification)"):
        needed = _reach(summary, panel, "FedIter-HT", 60)
        assert needed is not None and needed <= 30, (panel, needed)
    # FedIter-HT uploads tau-sparse models: well under half of Fed-HT's dense bytes
    by_label = {(r["panel"], r["label"]): r for r in summary["runs"]}
    reg = "Simulation I (regression)"
    assert by_label[(reg, "FedIter-HT")]["bytes_total"] < 0.5 * by_label[(reg, "Fed-HT")][
        "bytes_total"]


@pytest.mark.slow
def test_figure3_at_equal_step_fediter_ht_is_several_times_faster(tmp_path):
    _, config, _ = resolve_experiment("fedht-fig3-auto")
    summary = run_experiment(config, tmp_path, progress=False, log=lambda *_: None)
    needed = _reach(summary, "Simulation I (regression)", "FedIter-HT", 100)
    assert needed is not None and needed <= 50
    needed = _reach(summary, "Simulation II (classification)", "FedIter-HT", 200)
    assert needed is not None and needed <= 60
