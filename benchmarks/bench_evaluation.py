"""What evaluating every round costs next to training, measured side by side in one run.

The setting is FedMac's Fashion-MNIST row of Liu et al. 2023, Table 1 (the config
``fedmac-table1-fmnist-runs``, its FedMac run): 60,000 images over 20 clients, the
79,510-parameter DNN, all 20 clients trained every round with R = 20 local steps of
batch 20. A run records after every round the global model's loss and accuracy on every
training and test example (``metrics.evaluate``) and every client's own model's on its
own examples (``metrics.evaluate_personal``). Four timings, the best of each:

* training: a round of ``fs.simulate``, the best of the records' ``seconds`` (which leave
  out the evaluation) of a run of ``--repeats`` rounds evaluated at its last only;

and, alternated, on the models that run ends with:

* global evaluation: ``evaluate`` of the global model;
* personal evaluation: ``evaluate_personal`` of the 20 personal models, the loss and the
  accuracy from one forward pass (``Problem.loss_and_accuracy``);
* personal evaluation in two passes: the same with the loss and the accuracy each from a
  forward pass of its own (``Problem.loss``, then ``Problem.accuracy``), checked to give
  the same numbers.

Needs Fashion-MNIST (Debian's ``dataset-fashion-mnist``, as README says). Run:
``python benchmarks/bench_evaluation.py`` (ten seconds on 2 cores).
"""

from __future__ import annotations

import argparse
import time

import torch

import fedsparse as fs
from fedsparse._threads import single_threaded_blas
from fedsparse.experiments import load_config, resolve_runs
from fedsparse.experiments.config import DTYPES, build_algorithm, build_data, build_problem
from fedsparse.experiments.registry import CONFIG_DIR
from fedsparse.metrics import evaluate, evaluate_personal


class TwoPasses:
    """A problem whose ``loss_and_accuracy`` makes two forward passes (loss, accuracy)."""

    def __init__(self, problem):
        self._problem = problem

    def __getattr__(self, name):
        return getattr(self._problem, name)

    def loss_and_accuracy(self, params, X, y, w):
        with torch.no_grad():
            return self._problem.loss(params, X, y, w), self._problem.accuracy(params, X, y, w)


def fedmac_run() -> dict:
    config = load_config(CONFIG_DIR / "fedmac-table1-fmnist-runs.toml")
    (run,) = [r for r in resolve_runs(config) if r["label"] == "FedMac"]
    return run


def best_times(calls: dict, repeats: int) -> dict[str, float]:
    """The best wall-clock seconds of each call, the calls alternated ``repeats`` times."""
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1, as each run of `fedsparse run`)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    run = fedmac_run()
    data = build_data(run["data"], DTYPES[run["dtype"]])
    problem = build_problem(run["problem"])
    algorithm = build_algorithm(run["algorithm"])
    history = fs.simulate(algorithm, problem, data, rounds=args.repeats, seed=run["seed"],
                          eval_every=args.repeats, progress=False)
    training = min(r["seconds"] for r in history.records)
    model, personal = history.model, history.personal_models
    two_passes = TwoPasses(problem)
    one = evaluate_personal(problem, data, personal)
    two = evaluate_personal(two_passes, data, personal)
    assert one == two, (one, two)  # the same numbers, or the timings compare other work
    # the evaluation's threads as the round loop has them (numpy's BLAS on one)
    with single_threaded_blas():
        t = best_times({"global": lambda: evaluate(problem, data, model),
                        "personal": lambda: evaluate_personal(problem, data, personal),
                        "two passes": lambda: evaluate_personal(two_passes, data, personal)},
                       args.repeats)
    ms = {"training": training * 1e3, **{k: v * 1e3 for k, v in t.items()}}
    evaluation = ms["global"] + ms["personal"]
    print(f"torch {torch.__version__}, fedsparse {fs.__version__}, "
          f"{torch.get_num_threads()} torch thread(s), best of {args.repeats} (alternated)")
    print(f"FedMac, Fashion-MNIST Table 1 setting ({data.num_clients} clients, "
          f"{int(data.train.counts.sum()):,} training and {int(data.test.counts.sum()):,} "
          "test examples):")
    print(f"  training round          {ms['training']:7.1f} ms")
    print(f"  global evaluation       {ms['global']:7.1f} ms")
    print(f"  personal evaluation     {ms['personal']:7.1f} ms (one pass) | "
          f"{ms['two passes']:7.1f} ms (two passes, {t['two passes'] / t['personal']:.2f}x)")
    print(f"  evaluation / training   {evaluation / ms['training']:.2f}x")


if __name__ == "__main__":
    main()
