"""The careless-input table: every case of tests/test_careless_inputs.py and of
tests/algorithms/test_unbound.py, classified on whichever fedsparse is first on
PYTHONPATH as clear (a ConfigError naming the parameter), unclear (another error, or one
that does not name it), silent (accepted) or hang (still running after the given seconds).

    PYTHONPATH=src python tests/careless_table.py tests/test_careless_inputs.py 20 [ROW]

Run it on an older source tree to see what the battery catches there; the address space
is capped at 6 GiB so that a memory bomb of the old code fails fast.
"""
import importlib.util
import re
import resource
import signal
import sys
import tempfile
from collections import Counter
from pathlib import Path

import torch

import fedsparse as fs
from fedsparse._validation import ConfigError


class Hang(Exception):
    pass


def _alarm(*_):
    raise Hang()


def main():
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
    spec = importlib.util.spec_from_file_location("battery", sys.argv[1])
    B = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(B)
    hang_after = float(sys.argv[2]) if len(sys.argv) > 2 else 20.0


    signal.signal(signal.SIGALRM, _alarm)
    tmp = Path(tempfile.mkdtemp())
    lib = tmp / "tiny.svm"
    lib.write_text("\n".join(f"{i % 2} 1:{i + 1} 3:{0.5 * i}" for i in range(12)) + "\n")
    tiny = fs.data.shifted_gaussian(num_clients=3, samples_per_client=6, dim=5, sparsity=2, seed=0,
                                    dtype=torch.float64)
    from fedsparse.data.ondisk import write_federated

    ondisk = write_federated(tiny, tmp / "ondisk")
    cases = []  # (row, thunk, name)
    REG = {"algorithm": B.ALGORITHMS, "data": B.GENERATORS, "problem": B.PROBLEMS}
    ROW = {"algorithm": "algorithm builders", "data": "data generators", "problem": "problems"}
    for p in B._registry_cases():
        registry, kind, name, value = p.values
        kw = {**B._base_kwargs(kind, lib, ondisk), name: value}
        cases.append((ROW[registry], lambda b=REG[registry][kind], kw=kw: b(**kw), name))


    def sim(**kw):
        return lambda: fs.simulate(fs.algorithms.fed_avg(step_size=0.01, local_steps=1),
                                   fs.problems.least_squares(), tiny, **kw)


    for name, value in B.SIMULATE_CASES:
        cases.append(("simulate", sim(**{"rounds": 2, name: value}), name))
    for p in B._channel_cases():
        kind, name, value = p.values
        builder, base = B.CHANNEL_BUILDERS[kind]
        cases.append(("channels", lambda b=builder, kw={**base, name: value}: b(**kw), name))
    cases.append(("channels", lambda: B.safari_channel("asymmetric", []), "groups"))
    cases.append(("channels", lambda: B.safari_channel([0.5, 0.5, 0.5, 0.1], [0, 0, 1]),
                  "probability"))
    for channel, name in [
            (lambda: B.BernoulliChannel([0.5, 0.5, 0.5, 0.9]), "probability"),
            (lambda: B.ScheduledChannel(torch.ones(2, 4, dtype=torch.bool)), "delivered"),
            (lambda: B.GroupChannel(B.BernoulliChannel(0.5), [0, 0, 1, 1]), "groups"),
            (lambda: B.safari_channel(0.5, [0, 0, 1, 1]), "groups"),
            (lambda: B.BernoulliChannel([0.5, 0.5]), "probability"),
            (lambda: B.ScheduledChannel(torch.ones(2, 2, dtype=torch.bool)), "delivered")]:
        cases.append(("channels", lambda c=channel: sim(rounds=2, channel=c())(), name))
    for out in [lambda c: torch.ones(c.shape[0] + 1, dtype=torch.bool),
                lambda c: torch.ones(1, dtype=torch.bool), lambda c: torch.full((c.shape[0],), 0.5),
                lambda c: torch.full((c.shape[0],), 2), lambda c: None, lambda c: "all",
                lambda c: torch.ones(c.shape[0], 1, dtype=torch.bool)]:
        cases.append(("channels", lambda o=out: sim(rounds=2, channel=B._Custom(o))(),
                      "MyLossyLink"))
    # resource limits (no callback: a run that starts is one that runs on)
    for build, name in [
            (lambda: fs.data.shifted_gaussian(num_clients=10**9), "num_clients"),
            (lambda: fs.data.fedht_simulation(num_clients=10**9), "num_clients"),
            (lambda: fs.data.fedprox_synthetic(num_clients=10**9), "num_clients"),
            (lambda: fs.data.fedprox_synthetic(size_scale=10**12), "size_scale"),
            (lambda: fs.data.shifted_gaussian(dim=10**12, sparsity=2), "dim"),
            (lambda: fs.data.fedht_simulation(dim=10**12), "dim"),
            (lambda: fs.data.shifted_gaussian(samples_per_client=10**12), "samples_per_client"),
            (lambda: fs.data.fedprox_synthetic(dim=10**12), "dim"),
            (lambda: fs.data.fedprox_synthetic(num_classes=10**12), "num_classes"),
            (sim(rounds=10**12), "rounds"), (sim(rounds=2**62), "rounds"),
            (sim(rounds=10**30), "rounds"), (sim(rounds=2, clients_per_round=10**30),
                                             "clients_per_round"),
            (sim(rounds=2, client_batch=10**30), "client_batch"),
            (sim(rounds=2, eval_every=10**30), "eval_every"),
            (lambda: fs.simulate(fs.algorithms.fed_avg(local_steps=10**30),
                                 fs.problems.least_squares(), tiny, rounds=1), "local_steps"),
            (lambda: fs.simulate(fs.algorithms.fed_ht(sparsity=2, local_steps=10**18),
                                 fs.problems.least_squares(), tiny, rounds=1), "local_steps"),
            (lambda: fs.simulate(fs.algorithms.fed_grad_mp(sparsity=2, inner_solver="sgd",
                                                           inner_steps=10**18),
                                 fs.problems.least_squares(), tiny, rounds=1), "inner_steps"),
            (lambda: fs.simulate(fs.algorithms.fed_avg(local_steps=10**15),
                                 fs.problems.least_squares(), tiny, rounds=1), "local_steps"),
            (lambda: fs.simulate(fs.algorithms.heur_fedamp(lam=1, alpha_k=1, sigma=1, step_size=1,
                                                           local_steps=10**16),
                                 fs.problems.softmax(2), fs.data.fedprox_synthetic(
                                     num_clients=3, dim=4, num_classes=2), rounds=1),
             "local_steps"),
            (lambda: fs.simulate(fs.algorithms.fedmac(lam=1, step_size=1, personal_step_size=1,
                                                      local_steps=10**10, inner_steps=10**10),
                                 fs.problems.softmax(2), fs.data.fedprox_synthetic(
                                     num_clients=3, dim=4, num_classes=2), rounds=1),
             "inner_steps"),
            (lambda: fs.simulate(fs.algorithms.safari(density=0.5, pruner="synflow",
                                                      synflow_iterations=10**18),
                                 fs.problems.neural(torch.nn.Linear(5, 2)),
                                 fs.data.fedprox_synthetic(num_clients=3, dim=5, num_classes=2),
                                 rounds=1), "synflow_iterations")]:
        cases.append(("resource limits", build, name))
    for seed in (2**63, 2**64 + 5, -1, 1.5, True, "7"):
        cases.append(("simulate", sim(rounds=1, seed=seed), "seed"))
        cases.append(("data generators", lambda s=seed: fs.data.shifted_gaussian(
            num_clients=2, samples_per_client=4, dim=5, sparsity=2, seed=s), "seed"))
    cases.append(("algorithm builders", lambda: fs.algorithms.distributed_iht(
        sparsity=2, local_steps=True), "local_steps"))

    # unbound algorithms: every round method of every registered algorithm
    UB = importlib.util.spec_from_file_location(
        "unbound", Path(sys.argv[1]).parent / "algorithms" / "test_unbound.py")
    U = importlib.util.module_from_spec(UB)
    UB.loader.exec_module(U)
    problem, _ = U._softmax_case()
    for kind in sorted(U.REGISTRY):
        for method in U.ROUND_METHODS:
            cases.append(("unbound algorithms", lambda k=kind, m=method: getattr(U._build(k), m)(
                *U._arguments(m, problem)), "bound"))

    if len(sys.argv) > 3:
        cases = [c for c in cases if c[0] == sys.argv[3]]
    table = {}
    examples = {}
    for row, thunk, name in cases:
        signal.setitimer(signal.ITIMER_REAL, hang_after)
        try:
            thunk()
            outcome = "silent"
        except Hang:
            outcome = "hang"
        except ConfigError as exc:
            text = str(exc)
            outcome = "clear" if re.search(rf"(^|\W){re.escape(name)}(\W|$)", text) \
                or name in text else "unclear"
            if outcome == "unclear":
                examples.setdefault((row, outcome), []).append(text[:150])
        except AssertionError:  # the battery's callback: the run started
            outcome = "silent"
        except BaseException as exc:  # noqa: BLE001
            outcome = "unclear"
            examples.setdefault((row, outcome), []).append(f"{type(exc).__name__}: {exc}"[:150])
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        table.setdefault(row, Counter())[outcome] += 1
    print("| category | tried | clear | unclear | silent | hang |")
    print("|---|---|---|---|---|---|")
    for row, c in table.items():
        print(f"| {row} | {sum(c.values())} | {c['clear']} | {c['unclear']} | {c['silent']} | "
              f"{c['hang']} |")
    for k, v in examples.items():
        print(k, len(v), v[:4])


if __name__ == "__main__":
    main()
