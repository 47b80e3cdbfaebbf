"""Rounds per second: the embedded simulator vs Flower's simulation engine, same job.

Both run the same FedIter-HT job (all clients every round, least squares on
``fedht_simulation`` data) at 100 and 1,000 clients, measured in this one run, and
the ratio is printed. Flower's time per round is taken from the ServerApp's own
per-round clock, so Ray's start-up and the handshake are not counted against it.
The simulator runs with ``--threads`` torch threads (default 1: each of Flower's
ClientApp actors gets one CPU too, and on a loaded machine torch's intra-op threads
slow the small batched kernels of this job down many times).

Usage::

    python benchmarks/bench_flower.py                 # 100 and 1,000 clients
    python benchmarks/bench_flower.py --clients 100 --flower-rounds 3

Needs ``pip install 'fedsparse[flower]'``. Takes a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import logging
import os
import time

import torch

import fedsparse as fs


def job(num_clients: int, rounds: int) -> dict:
    """The benchmark's job dict: FedIter-HT, all ``num_clients`` clients every round."""
    return {"rounds": rounds, "seed": 0,
            "data": {"kind": "fedht_simulation", "num_clients": num_clients,
                     "samples_per_client": 20, "dim": 50, "support_size": 5},
            "problem": {"kind": "least_squares"},
            "algorithm": {"kind": "fed_iter_ht", "sparsity": 5, "local_steps": 5,
                          "batch_size": 10, "step_size": "auto"},
            "flower": {"evaluate_every": -1, "round_timeout": 600.0}}


def simulator_rounds_per_second(spec: dict) -> float:
    """Rounds per second of :func:`fedsparse.simulate` on ``spec`` (after a warm-up)."""
    from fedsparse.flower import job_from_config

    j = job_from_config(spec)
    data, problem = j.build_data(), j.build_problem()
    fs.simulate(j.build_algorithm(), problem, data, rounds=2, seed=j.seed)  # warm-up
    tic = time.perf_counter()
    fs.simulate(j.build_algorithm(), problem, data, rounds=j.rounds, seed=j.seed,
                progress=False)
    return j.rounds / (time.perf_counter() - tic)


def flower_rounds_per_second(spec: dict, num_cpus: int) -> float:
    """Rounds per second of Flower's simulation runtime on ``spec``, from the ServerApp's
    own per-round clock (Ray start-up and the handshake excluded)."""
    from fedsparse.flower import run_flower_simulation

    history = run_flower_simulation(spec, num_cpus=num_cpus)
    seconds = history.column("seconds")
    return len(seconds) / sum(seconds)


def main(argv=None) -> None:
    """Measure both runtimes for each ``--clients`` value and print the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--sim-rounds", type=int, default=50)
    parser.add_argument("--flower-rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads for the simulator (default 1)")
    parser.add_argument("--num-cpus", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    rows = []
    threads = torch.get_num_threads()
    for n in args.clients:
        torch.set_num_threads(args.threads)
        sim = simulator_rounds_per_second(job(n, args.sim_rounds))
        torch.set_num_threads(threads)
        flower = flower_rounds_per_second(job(n, args.flower_rounds), args.num_cpus)
        rows.append((n, sim, flower))
        print(f"[{n} clients] simulator {sim:.2f} rounds/s, Flower {flower:.3f} rounds/s",
              flush=True)
    print(f"\nFedIter-HT, all clients per round, {args.num_cpus} CPU(s), "
          f"simulator on {args.threads} torch thread(s)")
    print(f"{'clients':>8} {'simulator r/s':>14} {'Flower r/s':>11} {'ratio':>8}")
    for n, sim, flower in rows:
        print(f"{n:>8} {sim:>14.2f} {flower:>11.3f} {sim / flower:>7.0f}x")


if __name__ == "__main__":
    main()
