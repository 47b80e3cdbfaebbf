"""The scale benchmark's helpers (no Ray started here; the Flower runs themselves are
the benchmark's, and tests/flower covers the Flower path's parity)."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_scale.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_scale", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_job_spec_is_one_job_for_both_engines(bench):
    for case in bench.CASES:
        spec = bench.job_spec(case, 10_000, 3)
        assert spec["clients_per_round"] == 100
        assert spec["data"]["lazy"] is True
        assert spec["flower"]["evaluate_every"] == -1
    assert bench.job_spec("fedavg-linear", 50, 2)["clients_per_round"] == 1
    with pytest.raises(ValueError, match="fedavg-mlp"):
        bench.job_spec("fedavg-cnn", 100, 3)


def test_job_spec_is_a_valid_flower_job(bench):
    pytest.importorskip("flwr")
    from fedsparse.flower import job_from_config

    job = job_from_config(bench.job_spec("fediterht-linear", 1000, 2))
    assert (job.num_clients, job.clients_per_round, job.rounds) == (1000, 10, 2)
    assert job.build_algorithm().name == "fed_iter_ht"


def test_embedded_run_saves_its_model(bench, tmp_path):
    out = tmp_path / "model.npy"
    r = bench.run_one("fediterht-linear", 200, 2, threads=1, model_out=str(out))
    assert (r["engine"], r["N"], r["sampled"], r["rounds"]) == ("embedded", 200, 2, 2)
    assert r["seconds_per_round"] > 0
    model = np.load(out)
    assert model.shape == (100,) and 0 < np.count_nonzero(model) <= 10


def test_compare_models(bench, tmp_path):
    a, b, c = (str(tmp_path / f"{n}.npy") for n in "abc")
    np.save(a, np.array([0.0, 1.0, -2.0], dtype=np.float32))
    np.save(b, np.array([0.0, 1.0, -2.0 + 1e-7], dtype=np.float32))
    np.save(c, np.array([1e-3, 1.0, -2.0], dtype=np.float32))
    assert bench.compare_models(a, b).endswith(": agree")
    assert "same support: no" in bench.compare_models(a, c)
    assert bench.compare_models(a, c).endswith("DIFFER")


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="Linux /proc only")
def test_process_tree_memory_counts_the_children(bench):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        tree = bench.process_tree(os.getpid())
        assert os.getpid() in tree and child.pid in tree
        alone, _ = bench.tree_memory([os.getpid()])
        rss, pss = bench.tree_memory(tree)
        assert rss > alone > 0 and 0 < pss <= rss
    finally:
        child.kill()
        child.wait()


def test_arguments(bench):
    args = bench.parser().parse_args(["--flower", "--flower-sizes", "1000", "--timeout", "60"])
    assert args.flower and args.flower_sizes == [1000] and args.timeout == 60.0
    assert bench.parser().parse_args([]).flower_sizes == list(bench.FLOWER_SIZES)
    with pytest.raises(SystemExit):
        bench.main(["--flower", "--rounds", "0"])
    with pytest.raises(SystemExit):
        bench.main(["--flower", "--cases", "nope"])
