"""The benchmark scripts read their options with argparse: ``--help`` prints the usage
and runs nothing, an option the device cannot honour is refused, not ignored."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("script", ["bench_models.py", "bench_models_grad.py"])
def test_help_prints_the_usage_and_times_nothing(script):
    done = _run(script, "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage:")
    assert "--threads" in done.stdout and "--device" in done.stdout
    assert "torch 2" not in done.stdout  # the first line a timing run prints


def test_a_cpu_profile_is_refused_not_ignored():
    done = _run("bench_models.py", "--profile", "--device", "cpu")
    assert done.returncode == 2
    assert "--profile is CUDA only" in done.stderr and "--device cuda" in done.stderr
