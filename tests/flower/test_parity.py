"""Parity: Flower's simulation runtime and fedsparse.simulate give the same run.

Same seed, perfect channel, client sampling: the final models agree up to float
round-off (the only difference is the order of a few sums, and step_size="auto"
resolved from per-node power iterations instead of one stacked one), and the bytes
sent up and down agree exactly, round by round.
"""

import signal
import time

import pytest
import torch

flwr = pytest.importorskip("flwr")

import fedsparse as fs  # noqa: E402
from fedsparse.flower import job_from_config, run_flower_simulation  # noqa: E402

pytestmark = pytest.mark.flower


def _job(kind: str, step_size) -> dict:
    return {"rounds": 4, "seed": 11, "clients_per_round": 4,
            "data": {"kind": "fedht_simulation", "num_clients": 6, "samples_per_client": 24,
                     "dim": 60, "support_size": 6},
            "problem": {"kind": "least_squares"},
            "algorithm": {"kind": kind, "sparsity": 6, "local_steps": 3, "batch_size": 8,
                          "step_size": step_size},
            "flower": {"round_timeout": 60.0, "wait_timeout": 60.0}}


@pytest.mark.parametrize("kind,step_size", [("fed_ht", "auto"), ("fed_iter_ht", 0.002)])
def test_flower_simulation_matches_the_simulator(kind, step_size):
    job = job_from_config(_job(kind, step_size))
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    tic = time.monotonic()
    flower = run_flower_simulation(job, num_cpus=2)
    assert time.monotonic() - tic < 150
    # Ray's start sets a SIGTERM handler of its own; the caller's is back afterwards
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers
    data = job.build_data()
    reference = fs.simulate(job.build_algorithm(), job.build_problem(), data, rounds=job.rounds,
                            seed=job.seed, clients_per_round=job.clients_per_round)
    torch.testing.assert_close(flower.model, reference.model, rtol=1e-5, atol=1e-6)
    assert torch.equal(flower.model != 0, reference.model != 0)
    for column in ("bytes_up", "bytes_down", "bytes_total", "clients_sampled", "delivered"):
        assert flower.column(column) == reference.column(column), column
    # The evaluation on the nodes at the end is the simulator's objective.
    assert flower.records[-1]["objective"] == pytest.approx(reference.records[-1]["objective"],
                                                            rel=1e-5)


def test_fedavg_on_the_mlp_matches_the_simulator():
    """The model track over Flower: FedAvg on Liu et al.'s Synthetic DNN (60-20-10, 1,430
    parameters), seeded initial model, mini-batches drawn on the nodes."""
    job = job_from_config({
        "rounds": 3, "seed": 5, "clients_per_round": 3,
        "data": {"kind": "fedprox_synthetic", "num_clients": 5, "seed": 0},
        "problem": {"kind": "neural", "model": {"kind": "mlp", "in_features": 60,
                                                 "hidden": [20], "num_classes": 10}},
        "algorithm": {"kind": "fed_avg", "step_size": 0.05, "local_steps": 4,
                      "batch_size": 10},
        "flower": {"round_timeout": 60.0, "wait_timeout": 60.0}})
    flower = run_flower_simulation(job, num_cpus=2)
    reference = fs.simulate(job.build_algorithm(), job.build_problem(), job.build_data(),
                            rounds=job.rounds, seed=job.seed,
                            clients_per_round=job.clients_per_round)
    assert flower.model.numel() == 1430
    torch.testing.assert_close(flower.model, reference.model, rtol=1e-5, atol=1e-6)
    for column in ("bytes_up", "bytes_down", "clients_sampled", "delivered"):
        assert flower.column(column) == reference.column(column), column
    assert flower.records[-1]["accuracy"] == pytest.approx(reference.records[-1]["accuracy"],
                                                           abs=1e-6)
