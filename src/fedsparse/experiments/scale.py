"""``scale-million``: a cross-device population of 10^6 clients on one machine.

FedAvg (McMahan et al. 2017) trains FedMac's 1,430-parameter DNN (Liu et al. 2023,
Linear(60, 20)-ReLU-Linear(20, 10)) on FedProx's Synthetic(0.5, 0.5) (Li et al. 2020)
with N = 10^6 clients, 1 % of them (10,000) sampled each round. The data set is
generated lazily (:mod:`fedsparse.data.lazy`): client i is drawn from (seed, i) only when
it is sampled, so memory follows the sampled clients; the model is evaluated on a
seeded sample of 1,000 clients, the metrics being estimates with their standard errors
(:mod:`fedsparse.sampled_eval`). ``--quick``: 10^4 clients, 2 rounds.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from .. import algorithms, data, problems
from .._resources import peak_memory
from .._validation import check_int
from ..devices import device_info, resolve_device
from ..models import mlp
from ..simulate import simulate
from .registry import register_experiment

#: (clients, rounds) of the full and the quick run.
FULL, QUICK = (1_000_000, 5), (10_000, 2)
PARTICIPATION = 0.01
EVAL_CLIENTS = 1000
#: Clients trained at once: bounds the memory of one chunk of materialised clients
#: (chunks of similar log-normal sizes: see fedsparse.simulate with lazy data).
CLIENT_BATCH = 256


@register_experiment("scale-million", default_seeds=lambda quick: 1,
                     description="Cross-device scale: FedAvg on FedProx's Synthetic(0.5, 0.5) "
                                 "for 10^6 lazily generated clients, 1 % sampled a round, "
                                 "FedMac's 1,430-parameter DNN; evaluation on a seeded sample "
                                 "of 1,000 clients with standard errors")
def scale_million(out, *, quick: bool = False, rounds: int | None = None,
                  seeds: int | None = None, resume: bool = False, device=None) -> dict:
    """Run it; writes ``seed<k>/`` histories and ``summary.json`` to ``out``.

    Returns
    -------
    The summary: per seed the final objective and test accuracy estimates with their
    standard errors, seconds per round and the process's peak resident memory.
    """
    N, default_rounds = QUICK if quick else FULL
    rounds = default_rounds if rounds is None else check_int("rounds", rounds, minimum=1)
    seeds = 1 if seeds is None else check_int("seeds", seeds, minimum=1)
    dev = resolve_device(device)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    S = max(1, int(PARTICIPATION * N))
    runs = {}
    for seed in range(seeds):
        fed = data.fedprox_synthetic(0.5, 0.5, num_clients=N, seed=seed, lazy=True)
        algo = algorithms.fed_avg(step_size=0.05, local_steps=5, batch_size=20)
        history = simulate(algo, problems.neural(mlp(60, (20,), 10)), fed, rounds=rounds,
                           seed=seed, clients_per_round=S, client_batch=CLIENT_BATCH,
                           eval_clients=min(EVAL_CLIENTS, N), device=dev,
                           checkpoint=out / f"seed{seed}.ckpt", resume=resume,
                           progress=False)
        history.save(out / f"seed{seed}", overwrite=True)
        last = history.records[-1]
        runs[str(seed)] = {
            key: last.get(key) for key in ("objective", "objective_se", "test_accuracy",
                                           "test_accuracy_se", "eval_clients")}
        runs[str(seed)]["seconds_per_round"] = statistics.median(
            r["seconds"] for r in history.records)
        print(f"seed {seed}: objective {last['objective']:.4f} ± {last['objective_se']:.4f}, "
              f"test accuracy {last['test_accuracy']:.4f} ± {last['test_accuracy_se']:.4f} "
              f"(estimates on {last['eval_clients']} clients), "
              f"{runs[str(seed)]['seconds_per_round']:.2f} s a round")
    summary = {"experiment": "scale-million", "num_clients": N, "clients_per_round": S,
               "rounds": rounds, "quick": quick, **device_info(dev), "runs": runs,
               "peak_rss_bytes": peak_memory()}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
