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
(``VmHWM``, everything: interpreter, torch, data, evaluation; not ``ru_maxrss``, which
a child process inherits from the script that starts it).

Targets. With 1 % participation the sampled clients grow with N (100, 1,000, 10,000),
so "per-round time flat in N" is read per sampled client: the seconds per sampled
client at N = 10^6 within 2x of those at N = 10^4. Peak memory under 4 GB at
N = 10^6 on the CPU. Each is printed met or MISSED.

Flower (``--flower``): the same jobs on Flower's simulation engine, the engine a user
would pick instead -- ``flwr.simulation.run_simulation`` with fedsparse's ServerApp and
ClientApp (``fedsparse.flower.run_flower_simulation``: one virtual SuperNode per client,
one Ray actor per CPU) -- side by side with the embedded simulator, the same rounds, at
``--flower-sizes`` (default 10^3 and 10^4). Both engines run the one job dict of
:func:`job_spec` (same data, algorithm, seeds, sampled clients) and both time a round
with the same :class:`fedsparse.rounds.RoundLoop` clock, so the seconds per round are
comparable; Flower's start-up (Ray, the N virtual nodes, the ServerApp's handshake with
every node) is printed apart. Flower evaluates nowhere (``flower.evaluate_every = -1``:
an evaluation asks every one of the N nodes); the final models of the two engines are
compared instead (the sanity line). Peak memory is the parent's sample, every 0.2 s, of
the child's whole process tree (Ray's GCS, raylet and workers included): the sum of RSS
(shared pages counted once per process, an upper bound of the tree's footprint at that
instant) and the sum of PSS (shared pages split, what the tree adds to the machine);
sampling can miss a peak shorter than 0.2 s. A larger N is not tried once a smaller one
failed or ran past ``--timeout``; a failure prints the error or the timeout, measured.
Each Flower run takes minutes (the handshake is one message per client before round 1:
about 4 minutes at N = 10^4 on 2 cores), so run one case at a time.

Client state (``--client-state``): FedMac (Liu et al. 2023) on the same MLP and data,
whose every client keeps a personal model, at ``--state-sizes`` (default 10^4 and 10^5),
with the personal models in memory and on disk (``client_state_memory=0``: memory-mapped
files of which a round reads only its sampled rows). Targets: the same records either
way; at the largest N, the state on disk adds to the peak memory of the same run
without state (FedAvg, ``fedavg-mlp``) less than a quarter of the state's size (memory
follows the sampled clients, not N); on disk the seconds per sampled client stay within
2x from the smallest N to the largest.

Run: ``python benchmarks/bench_scale.py [--rounds 3] [--sizes 10000 100000 1000000]``
(one case: ``--cases fedavg-mlp``); ``python benchmarks/bench_scale.py --flower
--cases fedavg-linear [--flower-sizes 1000 10000 100000] [--timeout 240]``;
``python benchmarks/bench_scale.py --client-state [--state-sizes 10000 100000]``.
"""


from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CASES = ("fedavg-linear", "fediterht-linear", "fedavg-mlp")
SIZES = (10_000, 100_000, 1_000_000)
FLOWER_SIZES = (1_000, 10_000)
PARTICIPATION = 0.01
MEMORY_TARGET = 4 * 2**30
#: Clients trained at once by the embedded simulator: the MLP's log-normal client sizes
#: make smaller chunks of similar sizes pay.
CLIENT_BATCH = {"fedavg-linear": 1000, "fediterht-linear": 1000, "fedavg-mlp": 256}


def job_spec(case: str, N: int, rounds: int) -> dict:
    """The job both engines run: a fedsparse job dict (see :mod:`fedsparse.flower.job`).

    Lazy generated data (client i drawn from (seed, i) alone), ``PARTICIPATION * N``
    clients a round, run seed 0, data seed 0, float32.
    """
    if case not in CASES:
        raise ValueError(f"case={case!r}: must be one of {', '.join(CASES)}")
    if case == "fedavg-mlp":
        data = {"kind": "fedprox_synthetic", "num_clients": N, "seed": 0, "lazy": True}
        problem = {"kind": "neural", "model": {"kind": "mlp", "in_features": 60,
                                               "hidden": [20], "num_classes": 10}}
        algorithm = {"kind": "fed_avg", "step_size": 0.05, "local_steps": 5, "batch_size": 20}
    else:
        data = {"kind": "fedht_simulation", "num_clients": N, "samples_per_client": 20,
                "dim": 100, "support_size": 10, "seed": 0, "lazy": True}
        problem = {"kind": "least_squares"}
        algorithm = {"kind": "fed_avg", "step_size": 1e-3, "local_steps": 5, "batch_size": 10}
        if case == "fediterht-linear":
            algorithm = {**algorithm, "kind": "fed_iter_ht", "sparsity": 10}
    return {"rounds": rounds, "seed": 0, "clients_per_round": max(1, int(PARTICIPATION * N)),
            "dtype": "float32", "data": data, "problem": problem, "algorithm": algorithm,
            # a slow round or start is measured, not refused; no evaluation on the nodes
            "flower": {"evaluate_every": -1, "round_timeout": 3600.0,
                       "wait_timeout": 3600.0}}


def _figures(history, spec: dict, wall: float, model_out: str | None) -> dict:
    """Seconds per round (median after the first), the process's own peak RSS, and the
    final model saved to ``model_out``."""
    import numpy as np
    import torch

    from fedsparse._resources import peak_memory

    per_round = [r["seconds"] for r in history.records]
    steady = per_round[1:] or per_round
    if model_out:
        np.save(model_out, history.model.detach().cpu().numpy())
    last = history.records[-1]
    return {"N": spec["data"]["num_clients"], "sampled": spec["clients_per_round"],
            "rounds": spec["rounds"], "seconds_per_round": statistics.median(steady),
            "first_round": per_round[0], "rounds_total": sum(per_round), "wall": wall,
            "peak_rss": peak_memory(),
            "gpu_peak": torch.cuda.max_memory_allocated() if torch.cuda.is_initialized()
            else None,
            "objective": last.get("objective"), "objective_se": last.get("objective_se"),
            "torch_threads": torch.get_num_threads()}


def _simulate_spec(spec: dict, client_batch: int, device: str, **extra):
    """Build a job spec's data, problem and algorithm and simulate them on the embedded
    simulator (a seeded sample of 200 clients evaluated at the last round):
    ``(history, seconds including the build, model size P)``."""
    import torch

    import fedsparse as fs

    def build(registry, table, **kwargs):
        # what a job's builders call (fedsparse.experiments.config), without importing
        # the experiments package (it imports matplotlib: 30 MB more peak RSS)
        return registry[table["kind"]](**{k: v for k, v in table.items() if k != "kind"},
                                       **kwargs)

    tic = time.perf_counter()
    data = build(fs.data.GENERATORS, spec["data"], dtype=getattr(torch, spec["dtype"]))
    problem = build(fs.problems.REGISTRY, spec["problem"])
    N, rounds = spec["data"]["num_clients"], spec["rounds"]
    history = fs.simulate(build(fs.algorithms.REGISTRY, spec["algorithm"]), problem, data,
                          rounds=rounds, seed=spec["seed"],
                          clients_per_round=spec["clients_per_round"],
                          client_batch=client_batch, eval_every=rounds,
                          eval_clients=min(200, N), progress=False, device=device, **extra)
    return history, time.perf_counter() - tic, problem.param_dim(data.dim)


def _set_threads(threads: int) -> None:
    import torch

    if threads:
        torch.set_num_threads(threads)


def run_one(case: str, N: int, rounds: int, threads: int = 0,
            model_out: str | None = None, device: str = "cpu") -> dict:
    """One (case, N) on the embedded simulator, in this process; returns the figures."""
    _set_threads(threads)
    spec = job_spec(case, N, rounds)
    history, seconds, _ = _simulate_spec(spec, CLIENT_BATCH[case], device)
    return {"case": case, "engine": "embedded", "device": device,
            **_figures(history, spec, seconds, model_out)}


#: FedMac (Liu et al. 2023) on the same MLP and data as ``fedavg-mlp``: every sampled
#: client keeps a personal model, (N, 1,430) float32 in all.
FEDMAC = {"kind": "fedmac", "lam": 0.1, "step_size": 0.05, "personal_step_size": 0.05,
          "gamma": 1e-4, "local_steps": 5, "batch_size": 20}
STATE_SIZES = (10_000, 100_000)


def run_fedmac(N: int, rounds: int, threads: int, on_disk: bool, device: str = "cpu"
               ) -> dict:
    """FedMac at N clients with its personal models in memory or on disk (memory-mapped
    files, :mod:`fedsparse.client_store`), in this process; returns the figures."""
    _set_threads(threads)
    spec = {**job_spec("fedavg-mlp", N, rounds), "algorithm": FEDMAC}
    history, seconds, dim = _simulate_spec(spec, CLIENT_BATCH["fedavg-mlp"], device,
                                           client_state_memory=0 if on_disk else 1 << 62)
    out = _figures(history, spec, seconds, None)
    out["state_bytes"] = N * (dim * 4 + 1)  # float32 personal models + trained flags
    return {"case": "fedmac-mlp", "engine": "on disk" if on_disk else "in memory",
            "personal_accuracy": history.records[-1].get("personal_accuracy"), **out}


def client_state(args) -> int:
    """The --client-state section: FedMac's personal models in memory and on disk, beside
    stateless FedAvg on the same data (what the rest of the run costs)."""
    print(f"FedMac and FedAvg, 1,430-parameter MLP, {PARTICIPATION:.0%} of N a round, "
          f"{args.rounds} rounds, {args.threads} torch thread(s); peak = the process's "
          "VmHWM", flush=True)
    rows = {}
    for N in args.state_sizes:
        for engine in ("fedavg", "in memory", "on disk"):
            child = ["--one", "fedavg-mlp", str(N)] if engine == "fedavg" else \
                ["--one-fedmac", str(N)] + (["--on-disk"] if engine == "on disk" else [])
            proc = subprocess.run([sys.executable, __file__, *child, "--rounds",
                                   str(args.rounds), "--threads", str(args.threads),
                                   "--device", args.device],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{engine} N={N}: failed\n{proc.stderr[-2000:]}")
                return 1
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            rows[N, engine] = r
            state = f"state {_gib(r['state_bytes'])}, " if "state_bytes" in r else ""
            print(f"{r['case']:10s} N={N:>9,d} S={r['sampled']:>6,d} "
                  f"{'' if engine == 'fedavg' else engine:9s} "
                  f"{r['seconds_per_round']:8.3f} s/round  peak {_gib(r['peak_rss'])}  "
                  f"({state}first round {r['first_round']:.3f} s)", flush=True)
    print()
    lo, hi = min(args.state_sizes), max(args.state_sizes)
    same = all(rows[N, "on disk"]["personal_accuracy"] ==
               rows[N, "in memory"]["personal_accuracy"]
               and rows[N, "on disk"]["objective"] == rows[N, "in memory"]["objective"]
               for N in args.state_sizes)
    print(f"the same records in memory and on disk: {'yes' if same else 'NO'}")
    # memory follows the sampled clients: on disk, the state adds less than a quarter of
    # its size to what the same run without state (FedAvg) peaks at
    state = rows[hi, "on disk"]["state_bytes"]
    added = {e: rows[hi, e]["peak_rss"] - rows[hi, "fedavg"]["peak_rss"]
             for e in ("in memory", "on disk")}
    follows = added["on disk"] < state / 4
    print(f"at N={hi:,d} the state is {_gib(state)}; over FedAvg's peak it adds "
          f"{_gib(added['in memory'])} in memory, {_gib(added['on disk'])} on disk "
          f"(target: under a quarter of the state): {'met' if follows else 'MISSED'}")
    ratio = (rows[hi, "on disk"]["seconds_per_round"] / rows[hi, "on disk"]["sampled"]) / \
        (rows[lo, "on disk"]["seconds_per_round"] / rows[lo, "on disk"]["sampled"])
    flat = ratio <= 2.0
    print(f"on disk, seconds per sampled client at N={hi:,d} / at N={lo:,d} = {ratio:.2f} "
          f"(target <= 2): {'met' if flat else 'MISSED'}")
    slow = rows[hi, "on disk"]["seconds_per_round"] / rows[hi, "in memory"]["seconds_per_round"]
    print(f"on disk / in memory at N={hi:,d}: {slow:.2f}x the time per round")
    return 0 if same and follows and flat else 1


def run_flower(case: str, N: int, rounds: int, num_cpus: int,
               model_out: str | None = None) -> dict:
    """One (case, N) on Flower's simulation engine, in this process (Ray's processes are
    its children); returns the figures, the time outside the rounds included."""
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
    from fedsparse.flower import job_from_config, run_flower_simulation

    spec = job_spec(case, N, rounds)
    job = job_from_config(spec)
    marks = _ServerLogClock()
    logging.getLogger("flwr").addHandler(marks)
    tic = time.perf_counter()
    history = run_flower_simulation(job, num_cpus=num_cpus)
    end = time.perf_counter()
    out = _figures(history, spec, end - tic, model_out)
    # Ray's start, N virtual nodes, the handshake with each, the shutdown
    out["outside_rounds"] = out["wall"] - out["rounds_total"]
    if marks.connected is not None and marks.first_round is not None:
        out["startup"] = marks.connected - tic  # Ray and the N nodes, until the server sees them
        out["handshake"] = marks.first_round - out["first_round"] - marks.connected
        out["shutdown"] = end - marks.last_round
    return {"case": case, "engine": "flower", "num_cpus": num_cpus, **out}


class _ServerLogClock(logging.Handler):
    """When the ServerApp (a thread of this process) logs that the nodes are connected and
    that a round ended: splits the time outside the rounds into Ray's start-up, the
    handshake with every node and the shutdown."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.connected = self.first_round = self.last_round = None

    def emit(self, record: logging.LogRecord) -> None:
        now, message = time.perf_counter(), record.getMessage()
        if "node(s) connected" in message and self.connected is None:
            self.connected = now
        elif message.startswith("fedsparse: round "):
            if self.first_round is None:
                self.first_round = now
            self.last_round = now


# -- memory of a process tree (Linux /proc; no psutil) ----------------------------------

def _process_table() -> dict[int, tuple[int, str]]:
    """{pid: (parent pid, start time)} of every process that can be read."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        table[int(entry.name)] = (int(fields[1]), fields[19])  # ppid, starttime
    return table


def process_tree(root: int) -> dict[int, str]:
    """{pid: start time} of ``root`` and all its descendants (live ones)."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in table and pid not in out:
            out[pid] = table[pid][1]
            todo.extend(children.get(pid, ()))
    return out


def tree_memory(pids) -> tuple[int, int]:
    """(sum of RSS, sum of PSS) in bytes over ``pids`` (``/proc/PID/smaps_rollup``)."""
    rss = pss = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
        except OSError:  # it ended meanwhile
            continue
    return rss, pss


class TreeSampler(threading.Thread):
    """Samples the memory of ``root``'s process tree every ``interval`` seconds; keeps the
    peaks, the most processes seen at once, and every (pid, start time) seen."""

    def __init__(self, root: int, interval: float = 0.2):
        super().__init__(daemon=True)
        self.root, self.interval = root, interval
        self.peak_rss = self.peak_pss = self.max_processes = 0
        self.seen: dict[int, str] = {}
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            tree = process_tree(self.root)
            self.seen.update(tree)
            rss, pss = tree_memory(tree)
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
            self.max_processes = max(self.max_processes, len(tree))
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def _kill_leftovers(seen: dict[int, str]) -> None:
    """SIGKILL the processes of the sampled tree still alive (the same start time: the
    same process, not a new one with a recycled pid)."""
    table = _process_table()
    for pid, start in seen.items():
        if table.get(pid, (None, None))[1] == start:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def run_child(argv: list[str], timeout: float) -> dict:
    """Run this script with ``argv`` in a new session; return its result, or why it has
    none (the error's last lines, or the timeout and the last log line), with the peak
    memory of its process tree."""
    with tempfile.TemporaryDirectory() as tmp:
        result, log = Path(tmp) / "result.json", Path(tmp) / "log.txt"
        env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}
        tic = time.perf_counter()
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, __file__, *argv, "--result", str(result)],
                                    stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
            sampler = TreeSampler(proc.pid)
            sampler.start()
            try:
                proc.wait(timeout)
                why = None
            except subprocess.TimeoutExpired:
                why = f"did not finish within {timeout:g} s"
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            sampler.stop()
        _kill_leftovers(sampler.seen)
        wall = time.perf_counter() - tic
        lines = log.read_text(errors="replace").splitlines()
        if why is None and proc.returncode != 0:
            why = f"exit status {proc.returncode}: " + " | ".join(
                line.strip() for line in lines[-3:])
        figures = json.loads(result.read_text()) if why is None else {}
        if why is not None:
            ours = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in lines
                    if "fedsparse:" in line]  # without the terminal colours
            if ours:
                why += f"; last log line: {ours[-1][-160:]}"
        return {**figures, "failed": why, "child_wall": wall,
                "tree_peak_rss": sampler.peak_rss, "tree_peak_pss": sampler.peak_pss,
                "max_processes": sampler.max_processes}


def compare_models(a: str, b: str) -> str:
    """The sanity line: how far the two engines' final models are apart."""
    import numpy as np

    x, y = np.load(a).astype(np.float64), np.load(b).astype(np.float64)
    diff = float(np.abs(x - y).max())
    scale = float(np.abs(x).max()) or 1.0
    support = bool(((x != 0) == (y != 0)).all())
    # float32 round-off: the Flower nodes train one client at a time, the simulator a
    # chunk at once, so a few sums run in another order
    agree = diff <= 1e-4 * scale and support
    return (f"max |model_flower - model_embedded| = {diff:.2e} (max |model| {scale:.3g}), "
            f"same support: {'yes' if support else 'no'}: {'agree' if agree else 'DIFFER'}")


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def flower_comparison(args) -> int:
    """The --flower section: each case and N on both engines, one child process each."""
    print(f"Flower {_version('flwr')} (Ray {_version('ray')}) simulation vs the embedded "
          f"simulator: {args.rounds} rounds, {PARTICIPATION:.0%} of N a round, Flower on "
          f"{args.num_cpus} CPU(s), the simulator on {args.threads} torch thread(s); "
          "memory: the child's process tree sampled every 0.2 s (sum of RSS / sum of PSS)",
          flush=True)
    failed_any = False
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases:
            stop_reason = None
            for N in args.flower_sizes:
                common = ["--rounds", str(args.rounds)]
                emb_model, flw_model = f"{tmp}/{case}-{N}-e.npy", f"{tmp}/{case}-{N}-f.npy"
                emb = run_child(["--one", case, str(N), *common, "--threads",
                                 str(args.threads), "--model-out", emb_model], args.timeout)
                _print_row(case, N, "embedded", emb)
                if stop_reason:
                    print(f"{case:17s} N={N:>9,d} flower    not run: {stop_reason}")
                    continue
                flw = run_child(["--one-flower", case, str(N), *common, "--num-cpus",
                                 str(args.num_cpus), "--model-out", flw_model], args.timeout)
                _print_row(case, N, "flower", flw)
                if flw["failed"]:
                    failed_any = True
                    stop_reason = f"N={N:,d} did not finish"
                    continue
                if not emb["failed"]:
                    print(f"{'':17s} ratio flower/embedded: "
                          f"{flw['seconds_per_round'] / emb['seconds_per_round']:.1f}x s/round, "
                          f"{flw['tree_peak_rss'] / emb['tree_peak_rss']:.1f}x peak RSS, "
                          f"{flw['tree_peak_pss'] / emb['tree_peak_pss']:.1f}x peak PSS; "
                          f"sanity: {compare_models(flw_model, emb_model)}", flush=True)
    return 1 if failed_any else 0


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except ImportError:
        return "(not installed)"


def _print_row(case: str, N: int, engine: str, r: dict) -> None:
    head = f"{case:17s} N={N:>9,d} {engine:9s}"
    memory = f"peak {_gib(r['tree_peak_rss'])} RSS / {_gib(r['tree_peak_pss'])} PSS " \
             f"({r['max_processes']} processes)"
    if r["failed"]:
        print(f"{head} FAILED after {r['child_wall']:.0f} s: {r['failed']}; {memory}",
              flush=True)
        return
    extra = ""
    if "handshake" in r:
        extra = f"; outside the rounds: start-up {r['startup']:.1f} s, handshake " \
                f"{r['handshake']:.1f} s, shutdown {r['shutdown']:.1f} s"
    elif "outside_rounds" in r:
        extra = f"; outside the rounds {r['outside_rounds']:.1f} s"
    print(f"{head} S={r['sampled']:>6,d} {r['seconds_per_round']:8.3f} s/round  {memory}  "
          f"(first round {r['first_round']:.3f} s, process {r['wall']:.1f} s{extra})",
          flush=True)


def scale_targets(args) -> int:
    """The default section: the embedded simulator at ``--sizes``, with the targets."""
    results = []
    for case in args.cases:
        for N in args.sizes:
            proc = subprocess.run([sys.executable, __file__, "--one", case, str(N),
                                   "--rounds", str(args.rounds), "--threads",
                                   str(args.threads), "--device", args.device],
                                  capture_output=True,
                                  text=True)
            if proc.returncode != 0:
                print(f"{case} N={N}: failed\n{proc.stderr[-2000:]}")
                return 1
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            results.append(r)
            print(f"{case:17s} N={N:>9,d} S={r['sampled']:>6,d}  "
                  f"{r['seconds_per_round']:8.3f} s/round  "
                  f"{1e3 * r['seconds_per_round'] / r['sampled']:7.3f} ms/client  "
                  f"peak {r['peak_rss'] / 2**30:6.2f} GiB"
                  + (f" (GPU {r['gpu_peak'] / 2**30:.2f} GiB)" if r.get("gpu_peak") else "")
                  + "  (first round "
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


def parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    p.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (default 1: steadier figures on a shared machine; 0 "
                   "leaves torch its own choice)")
    p.add_argument("--device", default="cpu",
                   help="where the embedded simulator runs: cpu (default) or cuda; peak "
                   "memory is the host's (VmHWM), the GPU's peak is printed beside it")
    p.add_argument("--flower", action="store_true",
                   help="compare with Flower's simulation engine at --flower-sizes instead")
    p.add_argument("--flower-sizes", type=int, nargs="+", default=list(FLOWER_SIZES))
    p.add_argument("--num-cpus", type=int, default=os.cpu_count() or 1,
                   help="CPUs Ray may use in the Flower runs (one ClientApp actor each)")
    p.add_argument("--timeout", type=float, default=240.0,
                   help="seconds each run of the Flower comparison may take (default 240)")
    p.add_argument("--client-state", action="store_true",
                   help="FedMac with its personal models in memory and on disk at "
                   "--state-sizes instead")
    p.add_argument("--state-sizes", type=int, nargs="+", default=list(STATE_SIZES))
    p.add_argument("--one", nargs=2, metavar=("CASE", "N"), help=argparse.SUPPRESS)
    p.add_argument("--one-fedmac", type=int, metavar="N", help=argparse.SUPPRESS)
    p.add_argument("--on-disk", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--one-flower", nargs=2, metavar=("CASE", "N"), help=argparse.SUPPRESS)
    p.add_argument("--model-out", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    for name in ("rounds", "num_cpus", "timeout"):
        if getattr(args, name) <= 0:
            parser().error(f"--{name.replace('_', '-')} must be positive, got "
                           f"{getattr(args, name)}")
    if args.one_fedmac:
        print(json.dumps(run_fedmac(args.one_fedmac, args.rounds, args.threads,
                                    args.on_disk, args.device)))
        return 0
    if args.client_state:
        return client_state(args)
    if args.one or args.one_flower:
        case, N = args.one or args.one_flower
        r = run_one(case, int(N), args.rounds, args.threads, args.model_out, args.device) \
            if args.one \
            else run_flower(case, int(N), args.rounds, args.num_cpus, args.model_out)
        if args.result:
            Path(args.result).write_text(json.dumps(r))
        print(json.dumps(r))
        return 0
    return flower_comparison(args) if args.flower else scale_targets(args)


if __name__ == "__main__":
    sys.exit(main())
