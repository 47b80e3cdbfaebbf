"""Speed of a FedMac round (Liu et al. 2023), measured side by side in one run.

One round of FedMac with the paper's Table 2 setting (R = 20 local steps, batch 20,
K = 1 theta step per batch, eta = 3000, eta_p = 0.05, lambda = 1e-4, gamma = gamma_w = 0)
on 20 clients with the paper's 79,510-parameter DNN (784-100-10), four ways:

* fedsparse: every client of the round at once (``FedMac.client_update`` on (20, P)
  tensors + the server's average of S = 10 of them);
* fedsparse with the whole gradient: the same round, the theta step subtracting the
  whole (S, P) gradient instead of each layer's block (what the CPU's closed form saves);
* loop: one ``nn.Module`` per client in a Python loop, autograd for the gradient of
  theta and the same two updates by hand -- what per-client federated-learning code
  does -- on exactly the same mini-batches;
* merged: ONE model trained for 20 steps on the merged batch of all clients (20 x 20
  examples), the same forward/backward FLOPs with no per-client structure: the compute
  bound of the round.

The first three ways first run once and are checked to give the same uploads (to float32
rounding; the two fedsparse ways bit for bit), so the timings compare the same work; the
four ways are then alternated and the best of each is kept. Targets (printed with "met"
or "MISSED"): fedsparse >= 2x the loop with ``--device cpu`` (``--threads 2``), >= 20x
with ``--device cuda``.

Run: ``python benchmarks/bench_fedmac.py --device cpu`` (a minute or two on 2 cores).
``--profile`` then profiles one fedsparse round and one merged round
(``benchmarks/profile_round.py``): their operators, and on a GPU whether the host's
dispatch or the device's kernels set the pace.
"""

from __future__ import annotations

import argparse
from contextlib import nullcontext

import torch
from profile_round import profile_call, time_side_by_side

import fedsparse as fs
from fedsparse._threads import single_threaded_blas
from fedsparse.algorithms import ClientContext, Cohort
from fedsparse.problems.neural import NeuralProblem

try:  # absent in older fedsparse versions, which this script can also time
    from fedsparse._memory import keep_freed_memory
except ImportError:  # pragma: no cover
    keep_freed_memory = nullcontext

CLIENTS, PER_CLIENT, STEPS, BATCH = 20, 300, 20, 20
ETA, ETA_P, LAM, S = 3000.0, 0.05, 1e-4, 10


def make_data(device, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    X = torch.rand(CLIENTS, PER_CLIENT, 784, generator=gen)
    y = torch.randint(0, 10, (CLIENTS, PER_CLIENT), generator=gen).float()
    data = fs.data.from_arrays(list(X), list(y))
    return data if device.type == "cpu" else data.to_device(device)


def module():
    return fs.models.mlp(784, (100,), 10)


class WholeGradient(NeuralProblem):
    """The MLP with a gradient of its own, so its step writes the (S, P) gradient first."""

    def grad(self, params, X, y, w):
        return super().grad(params, X, y, w)


def fedsparse_round(data, whole_gradient: bool = False):
    problem = (WholeGradient if whole_gradient else fs.problems.neural)(module())
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
    model = module().to(start.device)
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
        keep = torch.randperm(CLIENTS)[:S].to(uploads.device)  # the server's average of S
        return uploads, uploads[keep].mean(0)

    return run


def merged_round(data, device):
    """One model, 20 steps on the merged batch of every client: the FLOP-equal bound."""
    model = module().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=ETA_P)
    ctx = ClientContext(None, data.train, torch.arange(CLIENTS), 0, 0)
    X, y = data.train.dense_X(), data.train.y.long()
    rows = torch.arange(CLIENTS, device=X.device)[:, None]
    batches = [ctx.batch_index(r, BATCH)[0].to(X.device) for r in range(STEPS)]
    batches = [(X[rows, b].reshape(-1, 784), y[rows, b].reshape(-1)) for b in batches]

    def run():
        for xb, yb in batches:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()

    return run


def main(argv=None):
    parser = argparse.ArgumentParser(description="Speed of a FedMac round", allow_abbrev=False)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--threads", type=int, default=2,
                        help="torch threads on the CPU (default 2)")
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--profile", action="store_true",
                        help="also profile one fedsparse round and one merged-bound round: "
                             "their operators, and whether the host or the device sets the pace")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda needs a CUDA GPU, and none is available")
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    repeats = args.repeats or (2 if args.quick else 4)
    torch.manual_seed(0)
    data = make_data(device)
    ours, start = fedsparse_round(data)
    whole = fedsparse_round(data, whole_gradient=True)[0]
    loop = loop_round(data, start)
    merged = merged_round(data, device)
    # Same work: the uploads of both ways agree (float32, 20 steps), and the step on the
    # whole gradient is the same bits as the step block by block.
    torch.testing.assert_close(ours(), loop()[0], rtol=1e-3, atol=1e-5)
    assert torch.equal(ours(), whole())
    P = start.numel()
    gpu = f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""
    print(f"FedMac round: {CLIENTS} clients x DNN 784-100-10 ({P:,} parameters), R = {STEPS}, "
          f"batch {BATCH}, K = 1; torch {torch.__version__}, device {device}{gpu}, "
          f"{torch.get_num_threads()} threads, best of {repeats} (alternated)")
    # The allocator setting fs.simulate holds during a run, for all three ways alike.
    with keep_freed_memory():
        t = time_side_by_side({"ours": ours, "whole": whole, "loop": loop, "merged": merged},
                              device, repeats)
    speedup = t["loop"] / t["ours"]
    print(f"  fedsparse {t['ours'] * 1e3:7.1f} ms | per-client loop {t['loop'] * 1e3:7.1f} ms "
          f"({speedup:5.2f}x faster) | merged-batch bound {t['merged'] * 1e3:7.1f} ms "
          f"({t['ours'] / t['merged']:5.2f}x the bound)")
    print(f"  the theta step with the whole (S, P) gradient written first: "
          f"{t['whole'] * 1e3:.1f} ms ({t['whole'] / t['ours']:.2f}x fedsparse's block by "
          f"block{'; a GPU takes the whole gradient either way' if device.type == 'cuda' else ''})")
    need = 20 if device.type == "cuda" else 2
    mark = "met" if speedup >= need else "MISSED"
    print(f"targets:\n  {mark:6s} FedMac round on {device.type}: >= {need}x its per-client "
          f"loop ({speedup:.2f}x)")
    if args.profile:
        with keep_freed_memory():
            for name, fn in (("fedsparse", ours), ("merged-batch bound", merged)):
                print(f"\nprofile of one {name} round:", flush=True)
                profile_call(fn, device)
    return t, mark


if __name__ == "__main__":
    main()
