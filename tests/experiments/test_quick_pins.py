"""Pins the default suite re-runs: the CPU quick forms of a SAFARI and a FedMac experiment
give the numbers they gave when pinned, within
:data:`fedsparse.report.results_pages.TOLERANCE` points.

The tolerance is five times the largest difference measured between two machines for
the same run (0.02 points, FedSpa + FedProx: float sums in another order); one test
image is worth 0.4 (SAFARI: 250 official test images) and 0.1-0.5 (FedMac) points here,
so any change of what the code computes moves a pin by more. The paper-scale and
CPU-scale numbers of the results pages are pinned the same way by the slow tests
(test_safari_pins.py, test_fedmac_experiments.py) against the committed runs they quote.

The pins were written by running the two functions below with torch on one thread.
"""

from __future__ import annotations

import pytest

from fedsparse.experiments import fedmac as M
from fedsparse.experiments import safari as S
from fedsparse.report.results_pages import TOLERANCE

#: SAFARI Figure 2's asymmetric panel, 5 rounds, 1,200 images, seed 0, the official test
#: split (the budget's default): score (%).
SAFARI_PINS = {"no drop": 35.2, "compensation": 34.64, "no compensation": 32.32}
#: FedMac Table 1's Synthetic row, quick form at 3 rounds, seed 0: best over rounds (%).
FEDMAC_PINS = {"FedAvg GM": 14.35, "FedProx GM": 14.35, "HeurFedAMP PM": 44.7665,
               "Per-FedAvg PM": 33.9336, "pFedMe GM": 19.9494, "pFedMe PM": 85.453,
               "FedMac GM": 20.2589, "FedMac PM": 85.2279}


def _off(got: dict, pinned: dict) -> dict:
    assert set(got) == set(pinned)
    return {k: (got[k], v) for k, v in pinned.items() if abs(got[k] - v) > TOLERANCE}


@pytest.mark.skipif(not S.fashion_available(), reason="Fashion-MNIST is not installed")
def test_safari_quick_pin(tmp_path, one_torch_thread):
    b = S.Budget(rounds=5, seeds=1, max_examples=1200)
    summary = S.run_safari(S.fig2_config(b, probabilities=(S.ASYMMETRIC,)), tmp_path, b,
                           log=lambda *_: None)
    runs = summary["safari"]["panels"]["MAG + FedAvg, asymmetric P (0.18 / 0.6)"]["runs"]
    got = {k: 100 * v["score"]["values"][0] for k, v in runs.items()}
    assert not _off(got, SAFARI_PINS), _off(got, SAFARI_PINS)


def test_fedmac_quick_pin(tmp_path, one_torch_thread):
    table = M.table1("fedmac-table1-synthetic", tmp_path, quick=True, rounds=3, seeds=1,
                     log=lambda *_: None)["table"]
    got = {f"{r['method']} {r['model']}": r["best"]["mean"] for r in table}
    assert not _off(got, FEDMAC_PINS), _off(got, FEDMAC_PINS)


def test_tolerance_catches_a_change_of_one_test_image():
    # a 200-example test split: one image is 0.5 points, five times the tolerance
    assert TOLERANCE <= 0.5 / 3
    assert _off({"a": 50.5}, {"a": 50.0}) and not _off({"a": 50.09}, {"a": 50.0})
