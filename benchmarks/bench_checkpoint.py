"""What checkpoints cost a long run of cheap rounds, measured side by side in one run.

FedIter-HT on the default experiment's small problem (20 clients x 50 examples, d = 200)
for --rounds rounds (default 4,000), three ways: no checkpoint; a checkpoint every 10
rounds as saved now (the round records as one string of JSON lines, each record encoded
once); and the same with the records saved as a list of dicts, as checkpoints of format 3
held them (torch.save pickles every entry of every record again at every save, so the
cost grows with the square of the run's length). Prints seconds and the ratio to the run
without checkpoints. Targets: the checkpointed run within 2x of the plain run (each save
still writes, hashes and syncs the whole file), and at least 2.5x faster than with the
records as a list.

The three ways are alternated and the best of --repeats kept. About 3 minutes on 2 cores.

Run: python benchmarks/bench_checkpoint.py [--rounds 4000] [--repeats 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from unittest import mock

import fedsparse as fs
from fedsparse import checkpoints


def timed(rounds: int, checkpoint: Path | None) -> float:
    """Seconds of one run, ``checkpoint`` None for none."""
    data = fs.data.fedht_simulation(task="regression", alpha=0.5, beta=0.5, seed=0,
                                    num_clients=20, samples_per_client=50, dim=200,
                                    support_size=20)
    algorithm = fs.algorithms.REGISTRY["fed_iter_ht"](sparsity=40, step_size="auto")
    tic = time.perf_counter()
    fs.simulate(algorithm, fs.problems.REGISTRY["least_squares"](), data, rounds=rounds,
                checkpoint=checkpoint, checkpoint_every=10, progress=False)
    return time.perf_counter() - tic


WAYS = ("no checkpoint", "records as JSON lines", "records as a list of dicts")


def one(way: str, rounds: int, folder: Path) -> float:
    for old in folder.glob("*.pt"):  # the run before's (simulate never replaces one)
        old.unlink()
    if way == WAYS[0]:
        return timed(rounds, None)
    if way == WAYS[1]:
        return timed(rounds, folder / "lines.pt")
    with mock.patch.object(checkpoints.RecordLines, "text", lambda self, records: records):
        return timed(rounds, folder / "list.pt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=2, help="the best of this many")
    args = parser.parse_args()
    best = dict.fromkeys(WAYS, float("inf"))
    with tempfile.TemporaryDirectory() as tmp:
        timed(10, None)  # warm up
        for _ in range(args.repeats):  # alternated: a busy machine slows all alike
            for way in WAYS:
                best[way] = min(best[way], one(way, args.rounds, Path(tmp)))
    plain, lines, listed = (best[w] for w in WAYS)
    print(f"{args.rounds} rounds, a checkpoint every 10 (best of {args.repeats})")
    for way in WAYS:
        print(f"  {way:28s} {best[way]:7.1f} s  {best[way] / plain:5.2f}x")
    print("targets:")
    for text, value, ok in (
            ("checkpointed run within 2x of the plain run", lines / plain, lines <= 2 * plain),
            ("JSON lines >= 2.5x faster than a list of dicts", listed / lines,
             listed >= 2.5 * lines)):
        print(f"  {'met' if ok else 'MISSED':6s} {text} ({value:.2f}x)")


if __name__ == "__main__":
    main()
