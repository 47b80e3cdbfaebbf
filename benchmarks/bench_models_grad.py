"""Per-client gradients of a neural problem: its vmap, loop and stacked paths side by side.

``fs.problems.neural`` computes the (S, P) gradients of S clients vectorised over the
client axis (``functional_call`` + ``vmap(grad)``), one client after another
(``functional_call`` + autograd), or, for sequential convolutional networks and ResNet-20,
as one network with grouped layers (``"stacked"``). This script times them side by side in
one run, on the shapes the automatic rule (``NeuralProblem._method`` and
``fedsparse.problems._neural_paths.auto_path``) was chosen from:

(a) FedMac's MLP (784-100-10, 79,510 parameters), S = 100 clients x b = 20 examples;
(b) the small CNN (``fs.models.cnn()``, 28 x 28 x 1, 215,370 parameters), S = 20 x b = 20;
and a few neighbours of those shapes (fewer clients, other batch sizes, ResNet-20, VGG) so
the rule's boundary is visible; ``--threads 1`` repeats them on one torch thread. Each
timing is the best of several repeats of one ``grad`` call with distinct per-client
parameters, in float32, on this machine's CPU or (``--device cuda``) its GPU.

Run: python benchmarks/bench_models_grad.py [--quick] [--threads N] [--device cuda]

Other processes on the same cores inflate multi-threaded timings of both paths (torch's
worker threads wait for cores); the paths are therefore timed alternately.
"""

from __future__ import annotations

import argparse
import time

import torch
from profile_round import sync

import fedsparse as fs
import fedsparse.models as models

DEVICE = torch.device("cpu")


def best_times(fns: dict, repeats: int) -> dict:
    """Best time of each function, run alternately so that all see the same machine load."""
    for fn in fns.values():  # warm up (also builds the cached module copies)
        fn()
    sync(DEVICE)  # a GPU call returns before its kernels run
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            tic = time.perf_counter()
            fn()
            sync(DEVICE)
            best[name] = min(best[name], time.perf_counter() - tic)
    return best


def case(label: str, module, feature_shape: tuple[int, ...], S: int, b: int,
         repeats: int) -> None:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(S, b, *feature_shape, generator=g).to(DEVICE)
    y = torch.randint(0, 10, (S, b), generator=g).float().to(DEVICE)
    w = torch.full((S, b), 1.0 / b, device=DEVICE)
    auto = fs.problems.neural(module)
    paths = ["vmap", "loop"] + (["stacked"] if auto._stacked is not None else [])
    problems = {p: fs.problems.neural(module, path=p) for p in paths}
    base = problems["vmap"].init_params(seed=0, dtype=torch.float32)
    params = (base + 0.01 * torch.randn(S, base.numel(), generator=g)).to(DEVICE)
    t = best_times({p: (lambda pr=pr: pr.grad(params, X, y, w))
                    for p, pr in problems.items()}, repeats)
    rule = auto._method(X)
    times = "   ".join(f"{p} {1e3 * t[p]:8.1f} ms" for p in paths)
    print(f"{label:<34} S={S:<4} b={b:<4} {times}   loop/vmap {t['loop'] / t['vmap']:5.2f}"
          f"   fastest: {min(t, key=t.get):<7}  rule: {rule}")


def main(argv=None) -> None:
    global DEVICE
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--quick", action="store_true",
                        help="the two shapes (a) and (b) only, fewer repeats")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's own)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    DEVICE = torch.device(args.device)
    if DEVICE.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device} needs a CUDA GPU, and none is available")
    quick = args.quick
    repeats = 3 if quick else 5
    where = torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else "cpu"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {where}")
    mlp = models.mlp(784, (100,), 10)
    small_cnn = models.cnn()
    # The two shapes of the brief.
    case("(a) MLP 784-100-10", mlp, (784,), 100, 20, repeats)
    case("(b) small CNN", small_cnn, (1, 28, 28), 20, 20, repeats)
    if quick:
        return
    # Neighbours, to see where the rule's boundary lies.
    case("MLP 784-100-10", mlp, (784,), 10, 20, repeats)
    case("MLP 784-100-10", mlp, (784,), 1000, 20, 2)
    case("MLP 784-100-10", mlp, (784,), 20, 200, 3)
    case("MLP 60-20-10", models.mlp(60, (20,), 10), (60,), 100, 20, repeats)
    for b in (2, 5, 8, 12, 64):
        case("small CNN", small_cnn, (1, 28, 28), 20, b, 3)
    case("CNN McMahan (32, 64) / 512", models.cnn(channels=(32, 64), hidden=512),
         (1, 28, 28), 20, 20, 3)
    case("VGG small, 1 x 32 x 32", models.vgg_small(10, 1), (1, 32, 32), 10, 20, 3)
    case("ResNet-20 GN, 1 x 28 x 28", models.resnet20(10, 1, norm="group"), (1, 28, 28),
         4, 16, 3)
    case("ResNet-20 BN, 1 x 28 x 28", models.resnet20(10, 1), (1, 28, 28), 4, 16, 3)
    case("ResNet-20 BN, 1 x 28 x 28", models.resnet20(10, 1), (1, 28, 28), 8, 4, 3)
    # ResNet-20 on small images, where vmap beat stacked on the CPU with few rows
    for side in (8, 16):
        for S, b in ((20, 4), (50, 2), (20, 8)):
            case(f"ResNet-20 BN, 1 x {side} x {side}", models.resnet20(10, 1),
                 (1, side, side), S, b, 3)
    # SAFARI's model (one-channel stem, 32 x 32) on 20 clients, across the rows per client
    # where the automatic rule was measured (it takes stacked on 32 x 32 images)
    for norm in ("batch", "group"):
        for b in (4, 8, 12, 32):
            case(f"ResNet-20 {norm[0].upper()}N, 1 x 32 x 32", models.resnet20(10, 1, norm=norm),
                 (1, 32, 32), 20, b, 2)


if __name__ == "__main__":
    main()
