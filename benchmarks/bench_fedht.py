"""Speed of the hard-thresholding family, measured side by side in one run.

(a) FedIter-HT on Tong et al. 2022's simulation I (100 clients x 100 examples, d = 1000, K = 5,
    full local gradients): seconds per round against the memory-bandwidth bound, i.e.
    the bytes the local steps must read (every step's full gradient touches every entry
    of every A_i once) divided by this machine's read bandwidth, measured here.
    Target: within 2x of the bound.
(b) Many small clients (1,000 clients x 20 examples, d = 200, K = 5): the vectorised
    client update against a straightforward per-client Python loop of the same math.
    Target: at least 3x faster.

Run: python benchmarks/bench_fedht.py
"""

from __future__ import annotations

import time

import torch

import fedsparse as fs
from fedsparse._memory import keep_freed_memory
from fedsparse._threads import single_threaded_blas
from fedsparse.algorithms import ClientContext, Cohort
from fedsparse.sparsity import hard_threshold


def best_of(fn, repeats: int = 7) -> float:
    fn()  # warm up
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        fn()
        times.append(time.perf_counter() - tic)
    return min(times)


def read_bandwidth() -> float:
    """Bytes per second of a streaming read (sum over a 400 MB float32 array)."""
    big = torch.ones(100_000_000)
    return big.numel() * big.element_size() / best_of(lambda: big.sum(), 5)


def one_round(algo, problem, data):
    algo = algo.bind(problem, data)
    state = algo.init(problem)
    clients = torch.arange(data.num_clients)
    ctx = ClientContext(problem, data.train, clients, 0, 0, config=algo.client_config(state))
    payload = algo.broadcast(state, clients)
    cohort = Cohort(0, clients, data.weights, torch.ones(data.num_clients, dtype=torch.bool))

    def run():
        uploads, _, _ = algo.client_update(payload, ctx)
        algo.aggregate(state, uploads, cohort)

    return run


def best_round(run) -> float:
    """:func:`best_of` a round inside the contexts fs.simulate enters once per run (not
    per round): numpy's BLAS on one thread, freed memory kept for the next step. Entering
    the BLAS limit costs about 0.7 ms (threadpoolctl scans the loaded libraries), which
    simulate pays once, not every round."""
    with single_threaded_blas(), keep_freed_memory():
        return best_of(run)


def loop_round(algo_kwargs, data):
    """The same math, one client at a time."""
    tau, gamma, K = algo_kwargs["sparsity"], algo_kwargs["step_size"], algo_kwargs["local_steps"]
    clients = [data.train.client(i) for i in range(data.num_clients)]
    x0 = torch.zeros(data.dim, dtype=data.dtype)
    weights = data.weights.to(data.dtype)

    def run():
        total = torch.zeros_like(x0)
        for i, (A, y) in enumerate(clients):
            x = x0.clone()
            for _ in range(K):
                x = hard_threshold(x - gamma * (A.T @ (A @ x - y)) / A.shape[0], tau)
            total += weights[i] * x
        hard_threshold(total, tau)

    return run


def main() -> None:
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    one_core = read_bandwidth()
    torch.set_num_threads(threads)
    bandwidth = read_bandwidth()
    print(f"torch {torch.__version__}; read bandwidth {bandwidth / 1e9:.1f} GB/s with "
          f"{threads} threads (the bound), {one_core / 1e9:.1f} GB/s with one")

    data = fs.data.fedht_simulation("regression", seed=0)
    kwargs = {"sparsity": 200, "step_size": 1e-3, "local_steps": 5}
    ours = best_round(one_round(fs.algorithms.fed_iter_ht(**kwargs),
                                fs.problems.least_squares(), data))
    bound = kwargs["local_steps"] * data.train.X.numel() * data.train.X.element_size() / bandwidth
    print(f"(a) FedIter-HT, 100 clients x 100 x 1000, K=5: {ours * 1e3:.2f} ms/round; "
          f"bandwidth bound {bound * 1e3:.2f} ms; ratio {ours / bound:.2f}x (target <= 2)")

    small = fs.data.fedht_simulation("regression", num_clients=1000, samples_per_client=20,
                                     dim=200, support_size=20, seed=0)
    kwargs = {"sparsity": 40, "step_size": 1e-3, "local_steps": 5}
    vec = best_round(one_round(fs.algorithms.fed_iter_ht(**kwargs),
                               fs.problems.least_squares(), small))
    loop = best_of(loop_round(kwargs, small), 3)
    print(f"(b) 1000 clients x 20 x 200, K=5: vectorised {vec * 1e3:.2f} ms/round, "
          f"per-client loop {loop * 1e3:.2f} ms/round; speed-up {loop / vec:.1f}x (target >= 3)")


if __name__ == "__main__":
    main()
