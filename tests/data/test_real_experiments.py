"""Paper 000 Figure 6 on real data: the quick variants run in seconds; full runs are slow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import fedsparse as fs
from fedsparse.cli import main
from fedsparse.experiments.real_data import (
    central_optimum,
    fig6_fashion_mnist,
    fig6_libsvm,
    fig6_mnist5k,
    write_svmlight,
)

LABELS = {"Distributed-IHT", "Fed-HT", "FedIter-HT"}


def check_outputs(out: Path, summary: dict, panels: int):
    assert len(summary["f_star"]) == panels
    assert {r["label"] for r in summary["runs"]} == LABELS
    for row in summary["runs"]:
        assert row["diverged"] is None and row["objective"] is not None
        assert row["gap"] >= 0
    for name in summary["plots"]:
        png = out / name
        assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size < 200_000
    assert json.loads((out / "summary.json").read_text())["f_star"]


def test_fig6_libsvm_quick_reads_svmlight_as_csr(tmp_path):
    summary = fig6_libsvm(tmp_path, quick=True)
    check_outputs(tmp_path, summary, panels=2)
    assert any(p.startswith("gap-") for p in summary["plots"])
    # the runs' data are CSR end to end
    from fedsparse.experiments.config import build_data, resolve_runs

    cfg = json.loads((tmp_path / "summary.json").read_text())
    assert cfg["quick"] is True
    paths = write_svmlight(tmp_path / "again")
    data = build_data({"kind": "libsvm_file", "path": str(paths["diabetes"]),
                       "num_clients": 25, "parts_per_cluster": 5, "standardize_target": True},
                      torch.float64)
    assert isinstance(data.train.X, fs.data.SparseRows)
    assert abs(float(data.train.y.sum() + data.test.y.sum())) < 1e-8  # centred targets
    assert resolve_runs  # imported for the config schema check above


def test_fig6_mnist5k_quick(tmp_path):
    summary = fig6_mnist5k(tmp_path, quick=True)
    check_outputs(tmp_path, summary, panels=1)
    assert all(r["test_accuracy"] is not None for r in summary["runs"])
    assert "test_accuracy.png" in summary["plots"] and "objective.png" in summary["plots"]


def test_fig6_fashion_mnist_quick_or_clear_skip(tmp_path):
    summary = fig6_fashion_mnist(tmp_path, quick=True)
    if "skipped" in summary:
        assert "apt-get install -y dataset-fashion-mnist" in summary["skipped"]
        pytest.skip(summary["skipped"])
    check_outputs(tmp_path, summary, panels=1)


def test_pointing_the_rcv1_and_e2006_configs_at_a_libsvm_file_works(tmp_path, capsys):
    paths = write_svmlight(tmp_path / "data")
    small = ["--set", "data.num_clients=25", "--set", "data.parts_per_cluster=5",
             "--set", "algorithm.sparsity=5", "--set", "data.scale=maxabs", "--rounds", "2",
             "--quiet"]
    assert main(["run", "fedht-fig6-rcv1", "--out", str(tmp_path / "rcv1"), "--set",
                 f"data.path={paths['breast_cancer']}", "--set", "data.n_features=30",
                 *small]) == 0
    assert main(["run", "fedht-fig6-e2006", "--out", str(tmp_path / "e2006"), "--set",
                 f"data.path={paths['diabetes']}", "--set", "data.n_features=10", *small]) == 0
    for name in ("rcv1", "e2006"):
        s = json.loads((tmp_path / name / "summary.json").read_text())
        assert {r["label"] for r in s["runs"]} == LABELS
        assert all(r["diverged"] is None for r in s["runs"])
    capsys.readouterr()
    # without the file: a clear error naming the path, not a traceback
    assert main(["run", "fedht-fig6-e2006", "--out", str(tmp_path / "none"), "--rounds",
                 "1"]) == 2
    assert "E2006.train" in capsys.readouterr().err


def test_central_optimum_is_a_lower_reference_for_iht():
    data = fs.data.federated_real("digits", partition="clusters", by_labels=True,
                                  num_clients=20, parts_per_cluster=4, scale="maxabs")
    problem = fs.problems.softmax(num_classes=10)
    ref = central_optimum(problem, data, sparsity=20, rounds=30)
    hist = fs.simulate(fs.algorithms.distributed_iht(sparsity=20, step_size=ref["step_size"]),
                       problem, data, rounds=10)
    assert ref["f_star"] <= min(hist.column("objective")) + 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("fn", [fig6_mnist5k, fig6_fashion_mnist, fig6_libsvm])
def test_fig6_full(fn, tmp_path):
    summary = fn(tmp_path, quick=False)
    if "skipped" in summary:
        pytest.skip(summary["skipped"])
    check_outputs(tmp_path, summary, panels=len(summary["f_star"]))
