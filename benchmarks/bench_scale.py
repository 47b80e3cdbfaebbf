"""Cross-device scale: N = 10^4, 10^5, 10^6 clients, 1 % of them sampled each round.

Cases (lazy generated data: a client is drawn from (seed, i) only when sampled):

* ``fedavg-linear``: FedAvg, least squares on Tong et al. 2022's simulation I
  (``fedht_simulation``, 20 examples a client, d = 100), 5 local steps of batch 10;
* ``fediterht-linear``: FedIter-HT (Tong et al. 2022), the same data, tau = 10;
* ``fedavg-mlp``: FedAvg on the 1,430-parameter MLP 60-20-10 (FedMac's DNN for
  Synthetic) on FedProx's Synthetic(0.5, 0.5) (``fedprox_synthetic``, log-normal sizes).

Each (case, N) runs in its own process: seconds per round (median over the rounds
after the first, the round's own time: sampling, drawing the sampled clients, local
training, aggregation; the evaluation is a seeded sample of 200 clients, at the
last round only; 1,000 clients trained at once, 256 for the MLP, whose log-normal client
sizes make smaller chunks of similar sizes pay) and the process's peak resident memory
(``ru_maxrss``, everything: interpreter, torch, data, evaluation).

Targets. With 1 % participation the sampled clients grow with N (100, 1,000, 10,000),
so "per-round time flat in N" is read per sampled client: the seconds per sampled
client at N = 10^6 within 2x of those at N = 10^4. Peak memory under 4 GB at
N = 10^6 on the CPU. Each is printed met or MISSED.

Run: ``python benchmarks/bench_scale.py [--rounds 3] [--sizes 10000 100000 1000000]``
(one case: ``--cases fedavg-mlp``).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

CASES = ("fedavg-linear", "fediterht-linear", "fedavg-mlp")
SIZES = (10_000, 100_000, 1_000_000)
PARTICIPATION = 0.01
MEMORY_TARGET = 4 * 2**30


def run_one(case: str, N: int, rounds: int, threads: int = 0) -> dict:
    """One (case, N) in this process; returns the figures."""
    import torch

    import fedsparse as fs
    from fedsparse.models import mlp

    if threads:
        torch.set_num_threads(threads)
    tic = time.perf_counter()
    if case == "fedavg-mlp":
        data = fs.data.fedprox_synthetic(num_clients=N, seed=0, lazy=True)
        problem = fs.problems.neural(mlp(60, (20,), 10))
        algo = fs.algorithms.fed_avg(step_size=0.05, local_steps=5, batch_size=20)
        batch = 256  # lazy chunks group clients of similar (log-normal) sizes
    else:
        data = fs.data.fedht_simulation(num_clients=N, samples_per_client=20, dim=100,
                                        support_size=10, seed=0, lazy=True)
        problem = fs.problems.least_squares()
        batch = 1000
        if case == "fedavg-linear":
            algo = fs.algorithms.fed_avg(step_size=1e-3, local_steps=5, batch_size=10)
        else:
            algo = fs.algorithms.fed_iter_ht(sparsity=10, step_size=1e-3, local_steps=5,
                                             batch_size=10)
    S = max(1, int(PARTICIPATION * N))
    history = fs.simulate(algo, problem, data, rounds=rounds, seed=0, clients_per_round=S,
                          client_batch=batch, eval_every=rounds, eval_clients=min(200, N),
                          progress=False)
    wall = time.perf_counter() - tic
    per_round = [r["seconds"] for r in history.records]
    steady = per_round[1:] or per_round
    last = history.records[-1]
    return {"case": case, "N": N, "sampled": S, "rounds": rounds,
            "seconds_per_round": statistics.median(steady),
            "first_round": per_round[0], "wall": wall,
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "objective": last["objective"], "objective_se": last["objective_se"],
            "torch_threads": torch.get_num_threads()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: steadier figures on a shared machine; 0 "
                        "leaves torch its own choice)")
    parser.add_argument("--one", nargs=2, metavar=("CASE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one[0], int(args.one[1]), args.rounds, args.threads)))
        return 0
    results = []
    for case in args.cases:
        for N in args.sizes:
            proc = subprocess.run([sys.executable, __file__, "--one", case, str(N),
                                   "--rounds", str(args.rounds), "--threads",
                                   str(args.threads)], capture_output=True,
                                  text=True)
            if proc.returncode != 0:
                print(f"{case} N={N}: failed\n{proc.stderr[-2000:]}")
                return 1
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            results.append(r)
            print(f"{case:17s} N={N:>9,d} S={r['sampled']:>6,d}  "
                  f"{r['seconds_per_round']:8.3f} s/round  "
                  f"{1e3 * r['seconds_per_round'] / r['sampled']:7.3f} ms/client  "
                  f"peak {r['peak_rss'] / 2**30:6.2f} GiB  (first round "
                  f"{r['first_round']:.3f} s, process {r['wall']:.1f} s)", flush=True)
    print()
    ok = True
    for case in args.cases:
        rows = {r["N"]: r for r in results if r["case"] == case}
        lo, hi = min(rows), max(rows)
        ratio = (rows[hi]["seconds_per_round"] / rows[hi]["sampled"]) / \
            (rows[lo]["seconds_per_round"] / rows[lo]["sampled"])
        flat = ratio <= 2.0
        print(f"{case}: seconds per sampled client at N={hi:,d} / at N={lo:,d} = "
              f"{ratio:.2f} (target <= 2): {'met' if flat else 'MISSED'}")
        if hi >= 1_000_000:
            mem = rows[hi]["peak_rss"] < MEMORY_TARGET
            print(f"{case}: peak memory at N={hi:,d} {rows[hi]['peak_rss'] / 2**30:.2f} GiB "
                  f"(target < 4 GiB): {'met' if mem else 'MISSED'}")
            ok &= mem
        ok &= flat
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
