"""A one-command local Flower deployment: SuperLink, SuperNodes and ``flwr run`` on loopback.

:func:`run_demo` (``fedsparse flower demo [CONFIG]``) starts a SuperLink and one
SuperNode per client on 127.0.0.1 (free ports, insecure: nothing leaves the machine),
writes the job's Flower app project, submits it with ``flwr run``, waits for the end
and stops every process it started, also when the run fails or is interrupted.

The process helpers (:class:`Cluster`, :class:`Proc`, ...) live in
:mod:`fedsparse.flower.processes` and are importable from here too.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .._signals import sigterm_raises
from .._validation import ConfigError, check_float, check_int, fail
from ..manifest import record_files, start_manifest
from .app_project import prepare_project_dir, write_app_project
from .job import NODE_DATA, Job, job_from_config, job_to_run_config
from .processes import (
    BIN,
    Cluster,
    FlowerProcessError,
    Proc,
    executable,
    free_port,
    group_alive,
    killpg,
    port_open,
    processes_using,
    wait_for,
)

__all__ = ["BIN", "DEMO_FILES", "DEMO_JOB", "Cluster", "DemoResult", "FlowerProcessError",
           "Proc", "demo_job", "executable", "free_port", "group_alive", "killpg",
           "port_open", "processes_using", "run_demo", "wait_for"]


#: The job ``fedsparse flower demo`` runs without a config: FedIter-HT (Tong et al.
#: 2022) on a small sparse regression, two clients, evaluated on the nodes at the end.
DEMO_JOB: dict = {
    "rounds": 5, "seed": 0,
    "data": {"kind": "fedht_simulation", "num_clients": 2, "samples_per_client": 50,
             "dim": 100, "support_size": 10},
    "problem": {"kind": "least_squares"},
    "algorithm": {"kind": "fed_iter_ht", "sparsity": 10, "local_steps": 5, "batch_size": 10,
                  "step_size": "auto"},
    "flower": {"round_timeout": 60.0, "wait_timeout": 60.0},
}

#: Marks a work directory as written by :func:`run_demo`.
_MARKER = ".fedsparse-flower-demo"


@dataclass
class DemoResult:
    """What :func:`run_demo` did.

    Attributes
    ----------
    out : directory holding ``history.jsonl``, ``history.csv`` and ``model.npy``.
    workdir : the Flower side: ``app/`` (the project), ``flwr-home/``, ``logs/``.
    job : the job that ran (with the demo's adjustments).
    log : the output of ``flwr run``.
    pids : process ids of the SuperLink and SuperNodes (all stopped on return).
    notes : adjustments made to the config (printed by the command line).
    """

    out: Path
    workdir: Path
    job: Job
    log: str
    pids: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def history(self) -> Path:
        """``out/history.jsonl``: one JSON record per round (round 0 first)."""
        return self.out / "history.jsonl"


def demo_job(config: dict | Job | None = None, *, nodes: int = 2, rounds: int | None = None,
             run: str | int | None = None, out: str | Path = "") -> tuple[Job, list[str]]:
    """The job :func:`run_demo` runs: ``config`` with one client per SuperNode.

    Parameters
    ----------
    config : a job dict, an experiment config (``run`` picks the run), a Job, or None
        for :data:`DEMO_JOB`.
    nodes : number of SuperNodes; ``data.num_clients`` is set to it (each SuperNode
        holds one client).
    rounds : overrides the job's rounds.
    run : label or 0-based index of the run of an experiment config.
    out : where the ServerApp saves the history (``flower.out_dir``).

    Returns
    -------
    (Job, notes)
        The job, and one line per value changed to fit the demo.

    Raises
    ------
    ConfigError
        for a job whose data lives in files on the nodes (``data.kind = "node"``).
    """
    nodes = check_int("nodes", nodes, minimum=1, maximum=16)
    if config is None:
        config = DEMO_JOB
    job = config if isinstance(config, Job) else job_from_config(config, run)
    spec = copy.deepcopy(job.to_dict())
    notes = []
    if job.data["kind"] == NODE_DATA:
        raise fail("data.kind", NODE_DATA, "must name a generator for the demo (every node "
                   "regenerates the data and keeps its row); node files are for real "
                   "deployments, see docs/deploy.md")
    if job.num_clients != nodes:
        notes.append(f"data.num_clients = {nodes} (was {job.num_clients}): one client per "
                     "SuperNode")
        spec["data"]["num_clients"] = nodes
    cpr = spec.get("clients_per_round")
    if cpr is not None and cpr > nodes:
        notes.append(f"clients_per_round = all {nodes} (was {cpr})")
        del spec["clients_per_round"]
    if rounds is not None:
        spec["rounds"] = check_int("rounds", rounds, minimum=1)
    # Nodes count as lost only after these; a demo should not wait minutes for a dead one.
    for key in ("round_timeout", "wait_timeout"):
        if spec["flower"][key] > 120.0:
            notes.append(f"flower.{key} = 120 (was {spec['flower'][key]:g})")
            spec["flower"][key] = 120.0
    spec["flower"]["out_dir"] = str(Path(out).resolve()) if out else ""
    return job_from_config(spec), notes


#: What a demo writes into its ``out`` (the history files come from the ServerApp's process).
DEMO_FILES = ("history.jsonl", "history.csv", "model.npy", "config.json", "flower/*",
              "flower/*/*", "flower/*/*/*")


def _prepare_out(out: Path, overwrite: bool, force: str) -> Path:
    """Make ``out`` ready for a demo: new or empty, or (``overwrite``) an earlier demo's
    folder, whose own unchanged files are removed (:func:`prepare_project_dir`)."""
    created = not out.exists()
    prepare_project_dir(out, overwrite, force, files=DEMO_FILES)
    workdir = out / "flower"
    if workdir.exists():  # the demo's own, listed in the manifest, or refused above
        raise ConfigError(f"{str(workdir)!r} still holds files fedsparse did not write; move "
                          "them away or choose another out")
    workdir.mkdir(parents=True)
    start_manifest(out, folder_created=created)
    (workdir / _MARKER).write_text("written by fedsparse flower demo\n")
    return workdir


def _record_demo_files(out: Path, workdir: Path) -> None:
    """List what the demo and the processes it started wrote in ``out``'s manifest."""
    written = [p for p in (out / "history.jsonl", out / "history.csv", out / "model.npy",
                           out / "config.json") if p.is_file()]
    written += [p for p in workdir.rglob("*") if p.is_file() and not p.is_symlink()]
    record_files(out, [p.relative_to(out).as_posix() for p in written])


def run_demo(config: dict | Job | None = None, out: str | Path = "runs/flower-demo", *,
             rounds: int | None = None, run: str | int | None = None, nodes: int = 2,
             timeout: float = 600.0, overwrite: bool = False,
             echo: Callable[[str], None] | None = None, cli: bool = False) -> DemoResult:
    """Run a fedsparse job on a local Flower deployment and stop it again.

    Starts an insecure SuperLink on a free port of 127.0.0.1 and ``nodes`` SuperNodes
    (node config ``partition-id=i num-partitions=nodes``; each regenerates the job's
    seeded data and keeps client i), writes the app project, runs ``flwr run --stream``
    and, whatever happens, stops every process: SIGTERM to each process group, SIGKILL
    after 10 s.

    Parameters
    ----------
    config : job dict, experiment config, Job, or None for :data:`DEMO_JOB`.
    out : directory for the history and model (``flower/`` inside it holds the app
        project, Flower's home and the process logs). Must be empty unless ``overwrite``.
    rounds : overrides the job's rounds.
    run : label or index of the run of an experiment config.
    nodes : number of SuperNodes (and clients), 1..16.
    timeout : seconds the whole ``flwr run`` may take before it is stopped.
    overwrite : replace an earlier demo's output in ``out``: the files it wrote (listed
        in the folder's manifest, unchanged since) are removed, other files stay.
    echo : called with each progress line (and each ``fedsparse:`` line of the run);
        None prints nothing.
    cli : errors name the command line's ``--force`` rather than ``overwrite=True``.

    Returns
    -------
    DemoResult
        Where the history went; every process listed in ``pids`` has exited.

    Raises
    ------
    ConfigError
        for a bad config or ``out``.
    FlowerProcessError
        when a process fails to start, a step times out, or the run ends without a
        history (the message carries the tail of every log).
    """
    say = echo or (lambda line: None)
    timeout = check_float("timeout", timeout, positive=True)
    out = Path(out).resolve()
    job, notes = demo_job(config, nodes=nodes, rounds=rounds, run=run, out=out)
    job_to_run_config(job)  # a value Flower's run config cannot hold: before any process
    workdir = _prepare_out(out, overwrite, "--force" if cli else "overwrite=True")
    for note in notes:
        say(f"demo: {note}")
    cluster = Cluster(workdir)
    result = DemoResult(out=out, workdir=workdir, job=job, log="", notes=notes)
    # SIGTERM exits through the demo's `finally`, which stops the processes it started
    with sigterm_raises(lambda signum: SystemExit(128 + signum)):
        try:
            cluster.superlink("--insecure")
            say(f"demo: SuperLink on {cluster.address} (insecure, loopback only)")
            for i in range(nodes):
                cluster.supernode(f"supernode{i}", f"partition-id={i} num-partitions={nodes}",
                                  "--insecure")
            def connected() -> bool:
                for proc in cluster.procs[1:]:
                    if not proc.alive():
                        raise FlowerProcessError(f"{proc.name} exited (log {proc.log}):\n"
                                                 f"{proc.text()[-3000:]}")
                return cluster.active_nodes() >= nodes

            cluster.wait_for(connected, 60, f"{nodes} SuperNodes to connect", cluster.procs[0])
            say(f"demo: {nodes} SuperNodes connected; logs in {cluster.logs}")
            project = write_app_project(job, workdir / "app", address=cluster.address,
                                        flwr_home=cluster.home, overwrite=True)
            say(f"demo: flwr run {project} fedsparse-local --stream")

            def on_line(line: str) -> None:
                if "fedsparse:" in line:
                    say(line.rstrip()[line.find("fedsparse:"):])

            result.log = cluster.run_job(project, "fedsparse-local", timeout=timeout,
                                         on_line=on_line)
            (cluster.logs / "flwr-run.log").write_text(result.log)
            if not result.history.exists():
                raise FlowerProcessError(
                    f"flwr run ended (exit code {cluster.returncode}) without writing "
                    f"{result.history}:\n{result.log[-3000:]}{cluster.dump()}")
        finally:
            result.pids = [p.popen.pid for p in cluster.procs]
            cluster.stop_all()
            _record_demo_files(out, workdir)
    return result
