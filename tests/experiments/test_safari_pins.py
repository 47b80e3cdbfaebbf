"""The numbers docs/results/safari.md quotes (Mao et al. 2022 on Fashion-MNIST).

The page's tables are :func:`fedsparse.experiments.safari.markdown_rows` of each
experiment's ``safari.json``. The slow tests re-run an experiment with the command the page
gives and assert that every row it prints occurs on the page, so a change in the code that
moves a quoted number, or an edit of the page that no run gives, fails here
(``python -m pytest -m slow tests/experiments/test_safari_pins.py``: the six experiments'
committed runs took 25 minutes together on two shared cores). The default-suite test checks, on
a run of a few seconds, the claim of Figure 5 that does not need the full budget.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fedsparse.cli import main
from fedsparse.experiments import safari as S
from fedsparse.report.results_pages import TOLERANCE, generated_block, rows_off

PAGE = Path(__file__).resolve().parents[2] / "docs" / "results" / "safari.md"
ASYM_PANEL = "MAG + FedAvg, asymmetric P (0.18 / 0.6)"
needs_fashion = pytest.mark.skipif(not S.fashion_available(),
                                   reason="Fashion-MNIST is not installed "
                                          "(apt-get install dataset-fashion-mnist)")


def assert_on_page(block: str, *rows: str, tolerance: float = TOLERANCE) -> None:
    """Each row is quoted in the page's generated ``block``, its numbers within
    :data:`fedsparse.report.results_pages.TOLERANCE` points (float sums differ in the last
    digit from one machine to another; a real change moves a number by more)."""
    off = rows_off(list(rows), generated_block(PAGE.read_text(), block), tolerance=tolerance)
    assert not off, f"safari.md ({block}) does not quote what the runs give:\n" + "\n".join(off)


def test_markdown_rows_by_hand():
    stat = {"mean": 0.5, "std": 0.01234, "n": 2, "values": [0.49, 0.51]}
    analysis = {"panels": {"p": {"runs": {S.NO_DROP: {"score": stat, "curve_mean": stat,
                                                      "jitter": stat}},
                                 "differences": {f"{S.COMP} - {S.NO_COMP}": {
                                     "score": stat, "curve_mean": stat},
                                     f"{S.NO_COMP} - x": {"score": stat,
                                                          "curve_mean": stat},
                                     "P = 0.2 - P = 1": {"score": stat,
                                                         "curve_mean": stat}}}},
                "distances": {"p": {"per_seed": [{"ratio": 0.51}, {"ratio": 0.5234}],
                                    "ratio": {"mean": 0.5167, "std": 0.0094}}}}
    rows = S.markdown_rows(analysis)
    assert rows["runs"] == ["| p | no drop | 50.00 ± 1.23 | 50.00 ± 1.23 | 50.00 ± 1.23 |"]
    # only the pairs with a reference run (here compensation and P = 1) are printed
    assert rows["differences"] == ["| p | compensation - no compensation | 50.00 ± 1.23 | "
                                   "50.00 ± 1.23 |",
                                   "| p | P = 0.2 - P = 1 | 50.00 ± 1.23 | 50.00 ± 1.23 |"]
    assert rows["distances"] == ["| p | 0.510, 0.523 | 0.517 ± 0.009 |"]


@needs_fashion
def test_the_table_of_commands_quotes_the_committed_runs():
    # seeds, rounds and wall clock (to the half minute) of each committed run
    runs = PAGE.parent / "runs"
    rows = [line.split("|") for line in PAGE.read_text().splitlines()
            if line.startswith("|") and "`fedsparse run safari-" in line
            and line.rstrip().endswith("min |")]
    assert len(rows) == 6
    for cells in rows:
        name = cells[2].strip().strip("`").split()[-1]
        summary = json.loads((runs / name / "summary.json").read_text())
        _, seeds, rounds = (int(v.split(",")[0]) for v in cells[3].split(" x "))
        assert (seeds, rounds) == (summary["seeds"], summary["rounds"]), name
        minutes = round(summary["wall_clock_s"] / 30) / 2
        assert cells[4].strip() == f"{minutes:g} min", name


def test_distance_record_sees_the_groups_on_a_tiny_run(tmp_path):
    # Figure 5: after three rounds the compensated run's record already holds smaller
    # distances within a label group than between the groups (ratio 0.54-0.57 for data
    # seeds 0, 1, 2 at this size); a record that mixes up clients, or measures pairs that
    # did not arrive in the same round, puts it near 1.
    b = S.Budget(rounds=3, seeds=1, max_examples=1000)
    config = S.fig2_config(b, probabilities=(S.ASYMMETRIC,))
    config["runs"] = [r for r in config["runs"] if r["label"] == S.COMP]
    summary = S.run_safari(config, tmp_path, b, heatmaps=True, log=lambda *_: None)
    ratio = summary["safari"]["distances"][ASYM_PANEL]["per_seed"][0]
    assert ratio["measured_pairs"] == 50 * 49 // 2
    assert ratio["ratio"] < 0.7


@pytest.mark.slow
@needs_fashion
def test_compensation_beats_none_under_the_asymmetric_channel(tmp_path):
    # 10 rounds on 2,000 images: compensation leads by 7.5, 9.6 and 14.9 points (data
    # seeds 2, 1, 0); without compensation group 1 (P = 0.18) is under-weighted.
    b = S.Budget(rounds=10, seeds=3, max_examples=2000)
    config = S.fig2_config(b, probabilities=(S.ASYMMETRIC,))
    config["runs"] = [r for r in config["runs"] if r["label"] != S.NO_DROP]
    summary = S.run_safari(config, tmp_path, b, log=lambda *_: None)
    gaps = summary["safari"]["panels"][ASYM_PANEL]["differences"][
        f"{S.COMP} - {S.NO_COMP}"]["score"]["values"]
    assert len(gaps) == 3 and min(gaps) > 0.05


@pytest.mark.slow
@needs_fashion
@pytest.mark.parametrize("name", ["safari-fmnist", "safari-fmnist-cnn", "safari-pruners",
                                  "safari-probability", "safari-sparsity", "safari-fedprox"])
def test_page_quotes_the_runs(name, tmp_path):
    # one thread, whatever the machine: the committed runs used torch's default two (on
    # two cores), and thread counts may change float sums in the last bits, well within
    # the tolerance
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(["run", name, "--out", str(tmp_path / name), "--quiet"]) == 0
    finally:
        torch.set_num_threads(threads)
    analysis = json.loads((tmp_path / name / "safari.json").read_text())
    rows = S.markdown_rows(analysis)
    # the CNN's convolutions moved its numbers by up to 0.15 points between two machines
    for part in ("runs", "differences", "distances"):
        if rows[part]:
            assert_on_page(f"{name} {part}", *rows[part],
                           tolerance=0.5 if name == "safari-fmnist-cnn" else TOLERANCE)
