"""Speed of a FedMac round (Liu et al. 2023), measured side by side in one run.

One round of FedMac with the paper's Table 2 setting (R = 20 local steps, batch 20,
K = 1 theta step per batch, eta = 3000, eta_p = 0.05, lambda = 1e-4, gamma = gamma_w = 0)
on 20 clients with the paper's 79,510-parameter DNN (784-100-10), two ways:

* fedsparse: every client of the round at once (``FedMac.client_update`` on (20, P)
  tensors + the server's average of S = 10 of them);
* loop: one ``nn.Module`` per client in a Python loop, autograd for the gradient of
  theta and the same two updates by hand -- what per-client federated-learning code
  does -- on exactly the same mini-batches;
* merged: ONE model trained for 20 steps on the merged batch of all clients (20 x 20
  examples), the same forward/backward FLOPs with no per-client structure: the compute
  bound of the round.

Both ways first run once and are checked to give the same uploads (to float32
rounding), so the timings compare the same work. Each is timed with torch on one
thread and on its default number of threads, since on a shared machine whose cores are
busy the thread setting matters more than the code.

Run: ``python benchmarks/bench_fedmac.py`` (about a minute on 2 cores).
"""

from __future__ import annotations

import time

import torch

import fedsparse as fs
from fedsparse._threads import single_threaded_blas
from fedsparse.algorithms import ClientContext, Cohort

CLIENTS, PER_CLIENT, STEPS, BATCH = 20, 300, 20, 20
ETA, ETA_P, LAM, S = 3000.0, 0.05, 1e-4, 10


def best_of(fn, repeats: int = 3) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        fn()
        times.append(time.perf_counter() - tic)
    return min(times)


def make_data(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    X = torch.rand(CLIENTS, PER_CLIENT, 784, generator=gen)
    y = torch.randint(0, 10, (CLIENTS, PER_CLIENT), generator=gen).float()
    return fs.data.from_arrays(list(X), list(y))


def module():
    return fs.models.mlp(784, (100,), 10)


def fedsparse_round(data):
    problem = fs.problems.neural(module())
    algo = fs.algorithms.fedmac(lam=LAM, step_size=ETA, personal_step_size=ETA_P,
                                local_steps=STEPS, batch_size=BATCH, clients_per_round=S)
    algo = algo.bind(problem, data)
    state = algo.init(problem, seed=0)
    clients = torch.arange(CLIENTS)
    payload = algo.broadcast(state, clients)
    cohort = Cohort(0, clients, data.weights, torch.ones(CLIENTS, dtype=torch.bool))

    def run():
        with single_threaded_blas():  # as fs.simulate runs a round
            ctx = ClientContext(problem, data.train, clients, 0, 0)
            uploads = algo.client_update(payload, ctx)[0]
            algo.aggregate(state, uploads, cohort)
        return uploads

    return run, payload


def loop_round(data, start: torch.Tensor):
    """The same round, one nn.Module per client; the theta gradient by autograd."""
    ctx = ClientContext(None, data.train, torch.arange(CLIENTS), 0, 0)
    batches = [ctx.batch_index(r, BATCH)[0] for r in range(STEPS)]
    Xs, ys = data.train.dense_X(), data.train.y.long()
    model = module()
    params = list(model.parameters())

    def run():
        uploads = []
        for i in range(CLIENTS):
            w = start.clone()
            torch.nn.utils.vector_to_parameters(start, params)  # theta = w^t
            for r in range(STEPS):
                idx = batches[r][i]
                for p in params:
                    p.grad = None
                loss = torch.nn.functional.cross_entropy(model(Xs[i, idx]), ys[i, idx])
                loss.backward()
                with torch.no_grad():
                    theta = torch.nn.utils.parameters_to_vector(params)
                    grad = torch.cat([p.grad.reshape(-1) for p in params])
                    theta = theta - ETA_P * (grad - LAM * w)
                    torch.nn.utils.vector_to_parameters(theta, params)
                    w = w - ETA * LAM * (w - theta)
            uploads.append(w)
        uploads = torch.stack(uploads)
        keep = torch.randperm(CLIENTS)[:S]  # the server's average of S uploads
        return uploads, uploads[keep].mean(0)

    return run


def merged_round(data):
    """One model, 20 steps on the merged batch of every client: the FLOP-equal bound."""
    model = module()
    opt = torch.optim.SGD(model.parameters(), lr=ETA_P)
    ctx = ClientContext(None, data.train, torch.arange(CLIENTS), 0, 0)
    X, y = data.train.dense_X(), data.train.y.long()
    rows = torch.arange(CLIENTS)[:, None]
    batches = [ctx.batch_index(r, BATCH)[0] for r in range(STEPS)]
    batches = [(X[rows, b].reshape(-1, 784), y[rows, b].reshape(-1)) for b in batches]

    def run():
        for xb, yb in batches:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()

    return run


def main():
    torch.manual_seed(0)
    default_threads = torch.get_num_threads()
    data = make_data()
    ours, start = fedsparse_round(data)
    loop = loop_round(data, start)
    merged = merged_round(data)
    # Same work: the uploads of both ways agree (float32, 20 steps).
    torch.testing.assert_close(ours(), loop()[0], rtol=1e-3, atol=1e-5)
    P = start.numel()
    print(f"FedMac round: {CLIENTS} clients x DNN 784-100-10 ({P:,} parameters), R = {STEPS}, "
          f"batch {BATCH}, K = 1; torch {torch.__version__}")
    results = {}
    for threads in dict.fromkeys([1, default_threads]):
        torch.set_num_threads(threads)
        t_ours, t_loop, t_merged = best_of(ours), best_of(loop), best_of(merged)
        results[threads] = (t_ours, t_loop, t_merged)
        print(f"  {threads} thread(s): fedsparse {t_ours * 1e3:7.1f} ms | per-client loop "
              f"{t_loop * 1e3:7.1f} ms ({t_loop / t_ours:4.1f}x faster) | merged-batch bound "
              f"{t_merged * 1e3:7.1f} ms ({t_ours / t_merged:4.1f}x the bound)")
    torch.set_num_threads(default_threads)
    return results


if __name__ == "__main__":
    main()
