"""Fixtures shared by the test modules."""

import glob
import json
import struct
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch


@pytest.fixture
def one_torch_thread():
    """Tiny problems on one torch thread: the intra-op thread pool only adds spin-waits,
    which on a loaded machine make a 0.4 s run take 20 s; and pinned numbers were made
    with one thread (other thread counts may change float sums in the last bits)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _update_with_its_draws(algorithm, dim: int, seed: int):
    """One client update of ``algorithm`` on two clients of 9 random least-squares rows
    of ``dim`` features (float64), round 0 of run seed 7: ``(uploads, problem, draws)``,
    ``draws`` a fresh ClientContext whose ``batch(k, b)`` is the k-th mini-batch the
    update drew (to compute it again by hand)."""
    import fedsparse as fs
    from fedsparse.algorithms import ClientContext

    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(2, 9, dim, generator=gen, dtype=torch.float64)
    y = torch.randn(2, 9, generator=gen, dtype=torch.float64)
    data = fs.data.from_arrays(list(X), list(y), dtype=torch.float64)
    problem = fs.problems.least_squares()
    algorithm = algorithm.bind(problem, data)
    state = algorithm.init(problem)
    clients = torch.arange(2)
    ctx = ClientContext(problem, data.train, clients, 0, 7,
                        config=algorithm.client_config(state))
    uploads, _, _ = algorithm.client_update(algorithm.broadcast(state, clients), ctx)
    return uploads, problem, ClientContext(problem, data.train, clients, 0, 7)


@pytest.fixture
def update_with_its_draws():
    """:func:`_update_with_its_draws`: ``update_with_its_draws(algorithm, dim, seed)``."""
    return _update_with_its_draws


class CommandLine:
    """``fedsparse`` in-process: ``run(argv) -> (exit code, stdout, stderr)``, and
    ``refused(argv, *texts)``: exit code 2, no traceback, every text in stderr."""

    @staticmethod
    def run(argv: list[str]) -> tuple[int, str, str]:
        import contextlib
        import io

        from fedsparse.cli import main

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's own usage errors
                code = exc.code
        return code, out.getvalue(), err.getvalue()

    def refused(self, argv: list[str], *expected: str) -> str:
        code, _, err = self.run(argv)
        assert code == 2, err
        assert "Traceback" not in err
        for text in expected:
            assert text in err, (text, err)
        return err


@pytest.fixture
def cli():
    """:class:`CommandLine`."""
    return CommandLine()


def _tiny_toml(*, rounds: int = 2, labels: Sequence[str] = ("Fed-HT", "FedIter-HT"),
               algorithms: Sequence[str] = ("fed_ht", "fed_iter_ht"), claim: str | None = None,
               seed: int | None = None, checkpoint_every: int | None = None,
               compare: bool = False, samples: int = 20, dim: int = 30, sparsity: int = 3,
               algorithm_per_run: bool = False) -> str:
    """The text of a tiny TOML experiment: least squares on the shifted Gaussian problem
    with 4 clients, one run per label, step size 0.01 and 2 local steps.

    Parameters
    ----------
    rounds : int
        ``rounds`` in ``[defaults]``.
    labels : sequence of str
        The runs' labels, one ``[[runs]]`` table each, in this order.
    algorithms : sequence of str
        Each run's algorithm kind, one per label.
    claim : str, optional
        A ``paper_claim`` line; none without it.
    seed : int, optional
        ``seed`` in ``[defaults]``; none without it.
    checkpoint_every : int, optional
        ``checkpoint_every`` in ``[defaults]``; none without it.
    compare : bool
        Add a ``[compare]`` table: the first run as the reference, at round ``rounds``.
    samples : int
        Samples per client.
    dim : int
        The dimension of the model.
    sparsity : int
        The sparsity of the true model and of the algorithm.
    algorithm_per_run : bool
        Write the sparsity and step size into each run's ``algorithm`` table instead of
        a ``[defaults.algorithm]`` table.

    Returns
    -------
    str
        The config's text, one key or table header a line: tests may edit it with
        ``str.replace`` (``"rounds = 2"``, ``"dim = 30"``, ``'label = "A"'``, ...).
    """
    lines = ['title = "tiny"']
    if claim is not None:
        lines.append(f'paper_claim = "{claim}"')
    lines += ["[defaults]", f"rounds = {rounds}"]
    if checkpoint_every is not None:
        lines.append(f"checkpoint_every = {checkpoint_every}")
    if seed is not None:
        lines.append(f"seed = {seed}")
    lines += ['problem = { kind = "least_squares" }', "[defaults.data]",
              'kind = "shifted_gaussian"', "num_clients = 4", f"samples_per_client = {samples}",
              f"dim = {dim}", f"sparsity = {sparsity}"]
    if algorithm_per_run:
        settings = f"sparsity = {sparsity}, step_size = 0.01, "
    else:
        settings = ""
        lines += ["[defaults.algorithm]", f"sparsity = {sparsity}", "step_size = 0.01"]
    for label, kind in zip(labels, algorithms, strict=True):
        lines += ["[[runs]]", f'label = "{label}"',
                  f'algorithm = {{ kind = "{kind}", {settings}local_steps = 2 }}']
    if compare:
        lines += ["[compare]", f'reference = "{labels[0]}"', f"at_rounds = [{rounds}]"]
    return "\n".join(lines) + "\n"


@pytest.fixture
def tiny_toml():
    """:func:`_tiny_toml`: ``tiny_toml(rounds=3, labels=("A", "B"))`` is a config's text."""
    return _tiny_toml


@pytest.fixture
def count_runs(monkeypatch):
    """``count_runs(module)`` counts the runs a search evaluates (``module._evaluate``,
    a sweep's or a tuning's): ``.count`` of the returned object is the number started,
    ``.original`` the unpatched function, and ``.stop_after = k`` stops the search (as
    Ctrl-C does) when run k + 1 starts."""
    def patch(module):
        evaluate = module._evaluate

        class Runs:
            count = 0
            stop_after = None
            original = evaluate

        def counted(*args, **kwargs):
            if Runs.stop_after is not None and Runs.count >= Runs.stop_after:
                raise KeyboardInterrupt
            Runs.count += 1
            return evaluate(*args, **kwargs)

        monkeypatch.setattr(module, "_evaluate", counted)
        return Runs
    return patch


# --- W&B's offline run files, read back ------------------------------------------------


def _wandb_items(entries) -> dict:
    """{key: value} of W&B history, config or summary items (plain or nested keys)."""
    return {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in entries}


def _wandb_records(run_dir: Path) -> list:
    """The records of an offline W&B run file."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = glob.glob(str(run_dir / "run-*.wandb"))
    buf = Path(path).read_bytes()
    assert buf[:4] == b":W&B"
    pos, block, pending, out = 7, 32768, b"", []
    while pos + 7 <= len(buf):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, n, kind = struct.unpack("<IHB", buf[pos:pos + 7])
        pos += 7
        if kind == 0 and n == 0:
            break
        chunk, pos = buf[pos:pos + n], pos + n
        if kind == 1:
            out.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            out.append(pending + chunk)
    found = []
    for data in out:
        record = pb.Record()
        record.ParseFromString(data)
        found.append(record)
    return found


def _wandb_finished_records(run_dir: Path) -> list:
    """:func:`_wandb_records` once the run file holds its exit record: W&B's service process may
    still be writing it when ``finish()`` returns (seen on a loaded machine with wandb
    0.31)."""
    from google.protobuf.message import DecodeError

    found = []
    for _ in range(100):
        try:
            found = _wandb_records(run_dir)
        except DecodeError:  # a record cut off mid-write
            found = []
        if any(r.WhichOneof("record_type") == "exit" for r in found):
            break
        time.sleep(0.1)
    return found


def _wandb_of_kind(found: list, kind: str) -> list:
    """The records of one kind ("run", "history", "summary", "exit", ...)."""
    return [getattr(r, kind) for r in found if r.WhichOneof("record_type") == kind]


@pytest.fixture
def wandb_records():
    """Readers of an offline W&B run folder (``DIR/wandb/offline-run-*/run-<id>.wandb``, a
    LevelDB-style log of protobufs): ``.records(folder)``, ``.finished_records(folder)``
    (once W&B has written the exit record), ``.of_kind(records, "history")`` and
    ``.items(entries)`` ({key: value} of history, config or summary items)."""
    pytest.importorskip("wandb")
    return SimpleNamespace(items=_wandb_items, records=_wandb_records,
                           finished_records=_wandb_finished_records, of_kind=_wandb_of_kind)
