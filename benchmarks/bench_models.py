"""Speed of a FedAvg round on neural networks, measured side by side in one run.

For each model (FedMac's 79,510-parameter MLP on 100 clients; the small CNN on 20 clients),
one FedAvg round (5 local SGD steps, batch 20 per client) three ways:

* fedsparse: every client of the round at once (``FedAvg.client_update`` + aggregation);
* loop: one ``nn.Module`` and one ``torch.optim.SGD`` per client, in a Python loop -- what
  most federated-learning code does;
* merged: ONE model trained for 5 steps on the merged batch of all clients (100 x 20
  examples), the same forward/backward FLOPs with no per-client structure: the compute
  bound of the round.

Targets: MLP >= 3x faster than the loop and within 2.5x of the merged bound; CNN no
slower than the loop. Then 1,000 MLP clients with ``client_batch=100`` (memory bounded).

Run: ``python benchmarks/bench_models.py`` (about a minute on 2 cores).
"""

from __future__ import annotations

import time

import torch

import fedsparse as fs
from fedsparse._threads import single_threaded_blas
from fedsparse.algorithms import ClientContext, Cohort

STEPS, BATCH, LR = 5, 20, 0.05


def best_of(fn, repeats: int = 3) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        fn()
        times.append(time.perf_counter() - tic)
    return min(times)


def make_data(clients: int, per_client: int, feature_shape, classes: int = 10, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(clients, per_client, *feature_shape, generator=gen)
    y = torch.randint(0, classes, (clients, per_client), generator=gen).float()
    return fs.data.from_arrays(list(X), list(y))


def fedsparse_round(module_fn, data, client_batch=None):
    problem = fs.problems.neural(module_fn())
    algo = fs.algorithms.fed_avg(step_size=LR, local_steps=STEPS, batch_size=BATCH)
    algo = algo.bind(problem, data)
    state = algo.init(problem, seed=0)
    N = data.num_clients
    clients = torch.arange(N)
    payload = algo.broadcast(state, clients)
    cohort = Cohort(0, clients, data.weights, torch.ones(N, dtype=torch.bool))
    chunks = [clients] if client_batch is None else list(torch.split(clients, client_batch))
    splits = [data.train if client_batch is None else data.train.select(c) for c in chunks]

    def run():
        with single_threaded_blas():  # as fs.simulate runs a round
            ups = []
            for chunk, split in zip(chunks, splits, strict=True):
                ctx = ClientContext(problem, split, chunk, 0, 0, config=algo.client_config(state))
                ups.append(algo.client_update(payload, ctx)[0])
            algo.aggregate(state, torch.cat(ups), cohort)

    return run


def loop_round(module_fn, data):
    """The same work, one nn.Module and one optimiser per client."""
    N = data.num_clients
    template = module_fn()
    ctx = ClientContext(None, data.train, torch.arange(N), 0, 0)
    batches = [ctx.batch_index(k, BATCH)[0] for k in range(STEPS)]
    Xs, ys = data.train.dense_X(), data.train.y.long()

    def run():
        total = None
        for i in range(N):
            model = module_fn()
            model.load_state_dict(template.state_dict())
            opt = torch.optim.SGD(model.parameters(), lr=LR)
            for k in range(STEPS):
                idx = batches[k][i]
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(Xs[i, idx]), ys[i, idx])
                loss.backward()
                opt.step()
            flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
            total = flat * float(data.weights[i]) if total is None else \
                total + flat * float(data.weights[i])
        return total

    return run


def merged_round(module_fn, data):
    """One model, 5 steps on the merged batch of every client: the FLOP-equal bound."""
    N = data.num_clients
    model = module_fn()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    ctx = ClientContext(None, data.train, torch.arange(N), 0, 0)
    X = data.train.dense_X()
    batches = [X[torch.arange(N)[:, None], ctx.batch_index(k, BATCH)[0]]
               for k in range(STEPS)]
    batches = [b.reshape(N * BATCH, *b.shape[2:]) for b in batches]
    labels = torch.randint(0, 10, (N * BATCH,))

    def run():
        for k in range(STEPS):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(batches[k]), labels).backward()
            opt.step()

    return run


def compare(name, module_fn, clients, feature_shape):
    data = make_data(clients, 50, feature_shape)
    ours = best_of(fedsparse_round(module_fn, data))
    loop = best_of(loop_round(module_fn, data))
    merged = best_of(merged_round(module_fn, data))
    P = sum(p.numel() for p in module_fn().parameters())
    print(f"{name} ({P:,} parameters), {clients} clients, {STEPS} steps x batch {BATCH}:")
    print(f"  fedsparse {ours * 1e3:8.1f} ms | per-client loop {loop * 1e3:8.1f} ms "
          f"({loop / ours:4.1f}x faster) | merged-batch bound {merged * 1e3:8.1f} ms "
          f"({ours / merged:4.1f}x the bound)")
    return loop / ours, ours / merged


def main():
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    mlp_speedup, mlp_bound = compare("MLP 784-100-10", lambda: fs.models.mlp(784, (100,), 10),
                                     100, (784,))
    cnn_speedup, _ = compare("small CNN", lambda: fs.models.cnn(1, 10, 28), 20, (1, 28, 28))
    data = make_data(1000, 30, (784,))
    big = best_of(fedsparse_round(lambda: fs.models.mlp(784, (100,), 10), data,
                                  client_batch=100), repeats=1)
    print(f"MLP, 1,000 clients in chunks of 100: {big:.2f} s per round")
    print(f"targets: MLP >= 3x the loop ({'met' if mlp_speedup >= 3 else 'MISSED'}), "
          f"MLP within 2.5x of the bound ({'met' if mlp_bound <= 2.5 else 'MISSED'}), "
          f"CNN no slower than the loop ({'met' if cnn_speedup >= 1 else 'MISSED'})")


if __name__ == "__main__":
    main()
