"""A one-command local Flower deployment: SuperLink, SuperNodes and ``flwr run`` on loopback.

:func:`run_demo` (``fedsparse flower demo [CONFIG]``) starts a SuperLink and one
SuperNode per client on 127.0.0.1 (free ports, insecure: nothing leaves the machine),
writes the job's Flower app project, submits it with ``flwr run``, waits for the end
and stops every process it started, also when the run fails or is interrupted.

The process helpers (:class:`Cluster`, :class:`Proc`) are what the deployment tests
use too. Each process is started in its own session (process group), so stopping it
also stops the ``flwr-clientapp`` / ``flwr-serverapp`` children Flower spawns:
SIGTERM to the group, SIGKILL after a bounded wait. Every process gets
``FLWR_HOME`` pointing into the run's own directory, which also identifies strays
(:func:`processes_using`).
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .._validation import ConfigError, check_float, check_int, fail
from ..manifest import record_files, start_manifest
from .app_project import prepare_project_dir, write_app_project
from .job import NODE_DATA, Job, job_from_config

BIN = Path(sys.executable).parent

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


class FlowerProcessError(RuntimeError):
    """A Flower process did not start, exited early, or a step timed out."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    """True if something accepts connections on 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def killpg(pid: int, sig: int) -> None:
    """Signal the process group ``pid`` leads (gone already is fine)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def group_alive(pid: int) -> bool:
    """True while any process of the group ``pid`` leads still exists."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def executable(name: str) -> str:
    """The Flower command ``name`` of this Python environment, else whatever PATH finds."""
    path = BIN / name
    return str(path) if path.exists() else name


def processes_using(flwr_home: str | Path) -> list[int]:
    """Ids of the live processes whose environment has ``FLWR_HOME=flwr_home`` (Linux).

    Every process a :class:`Cluster` starts inherits its ``FLWR_HOME``, so this finds
    what is left of a run even if a process left its group. Empty where ``/proc`` is
    missing.
    """
    wanted = f"FLWR_HOME={Path(flwr_home)}".encode()
    found = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text()
        except OSError:  # gone meanwhile, or not ours
            continue
        # A zombie (state Z) has exited already; only its parent's wait is missing.
        if wanted in env.split(b"\0") and state.rsplit(")", 1)[-1].split()[0] != "Z":
            found.append(int(entry.name))
    return found


def wait_for(predicate: Callable[[], bool], timeout: float, what: str,
             proc: Proc | None = None) -> None:
    """Poll ``predicate`` for at most ``timeout`` s.

    Raises
    ------
    FlowerProcessError
        naming ``what`` on timeout, or when ``proc`` exits meanwhile (with its log).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and not proc.alive():
            raise FlowerProcessError(f"{proc.name} exited while waiting for {what} "
                                     f"(log {proc.log}):\n{proc.text()[-3000:]}")
        time.sleep(0.3)
    raise FlowerProcessError(f"timed out after {timeout} s waiting for {what}"
                             + ("" if proc is None else
                                f" (log {proc.log}):\n{proc.text()[-3000:]}"))


class Proc:
    """A started process, leader of its own process group, with its log file."""

    def __init__(self, name: str, args: list[str], env: dict, log: Path):
        self.name, self.args, self.log = name, args, log
        self._fh = open(log, "wb")
        try:
            self.popen = subprocess.Popen(args, env=env, stdout=self._fh,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True)
        except OSError as exc:
            self._fh.close()
            raise FlowerProcessError(f"cannot start {args[0]!r}: {exc}; is Flower installed "
                                     "(pip install 'fedsparse[flower]')?") from None

    def text(self) -> str:
        """Everything the process wrote so far."""
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        """True while the group leader runs."""
        return self.popen.poll() is None

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the process and the children in its group."""
        killpg(self.popen.pid, sig)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, at most ``timeout`` s to exit, then SIGKILL of the whole group."""
        if self.alive():
            self.signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout)
        # Children (clientapp/serverapp processes) may outlive the leader: kill the group.
        self.signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)
        self._fh.close()


class Cluster:
    """A SuperLink, SuperNodes and ``flwr`` CLI calls sharing one FLWR_HOME under ``root``.

    Parameters
    ----------
    root : work directory (created): ``flwr-home/``, ``logs/``, the SuperLink database.
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.home = self.root / "flwr-home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.logs = self.root / "logs"
        self.logs.mkdir(exist_ok=True)
        self.env = {**os.environ, "FLWR_HOME": str(self.home), "PYTHONUNBUFFERED": "1",
                    # No usage reports or update checks: runs may be offline.
                    "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
                    # SuperExec looks for new ClientApp tasks every second by default.
                    "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.2"}
        self.procs: list[Proc] = []
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.returncode: int | None = None  # of the last run_job

    def start(self, name: str, args: list[str]) -> Proc:
        """Start ``args`` (a Flower command name first) with the cluster's environment."""
        proc = Proc(name, [executable(args[0]), *args[1:]], self.env,
                    self.logs / f"{name}.log")
        self.procs.append(proc)
        return proc

    def superlink(self, *extra: str, timeout: float = 30.0) -> Proc:
        """Start the SuperLink on :attr:`address` and wait until it listens."""
        proc = self.start("superlink", ["flower-superlink", "--host", "127.0.0.1", "--port",
                                        str(self.port), "--disable-runtime-dependency-installation",
                                        "--database", str(self.root / "state.db"), *extra])
        wait_for(lambda: port_open(self.port), timeout, "the SuperLink to listen", proc)
        return proc

    def supernode(self, name: str, node_config: str, *extra: str) -> Proc:
        """Start a SuperNode connecting to :attr:`address` (its own free local port)."""
        return self.start(name, ["flower-supernode", "--superlink", self.address, "--port",
                                 str(free_port()), "--node-config", node_config, *extra])

    def active_nodes(self) -> int:
        """How many SuperNodes the SuperLink has activated so far (from its log)."""
        if not self.procs or self.procs[0].name != "superlink":
            return 0
        return len(set(re.findall(r"Activated node_id=(\d+)", self.procs[0].text())))

    def flwr(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run a ``flwr`` CLI command to completion (killed after ``timeout`` s)."""
        proc = subprocess.Popen([executable("flwr"), *args], env=self.env, cwd=self.root,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            raise FlowerProcessError(f"flwr {' '.join(args)} timed out after {timeout} s:\n"
                                     f"{out}") from None
        finally:
            if proc.poll() is None:  # interrupted (e.g. Ctrl-C): leave nothing behind
                killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")

    def run_job(self, project: Path, connection: str, *, timeout: float,
                on_line: Callable[[str], None] | None = None) -> str:
        """``flwr run PROJECT CONNECTION --stream`` until the run ends; return its output.

        ``on_line(line)`` sees every output line as it arrives (to echo it or to inject
        faults). The exit code is kept in :attr:`returncode`.

        Raises
        ------
        FlowerProcessError
            if the run does not end within ``timeout`` s (the ``flwr`` process is killed).
        """
        proc = subprocess.Popen([executable("flwr"), "run", str(project), connection,
                                 "--stream"], env=self.env, cwd=self.root,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        lines: list[str] = []

        def pump():
            for line in proc.stdout:
                lines.append(line)
                if on_line is not None:
                    on_line(line)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
            reader.join(5)
            raise FlowerProcessError(f"flwr run did not finish within {timeout} s:\n"
                                     + "".join(lines) + self.dump()) from None
        finally:
            if proc.poll() is None:  # interrupted (e.g. Ctrl-C): leave nothing behind
                killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        reader.join(5)
        if not reader.is_alive():
            proc.stdout.close()
        self.returncode = proc.returncode
        return "".join(lines)

    def dump(self) -> str:
        """The tail of every process log (for failure messages)."""
        parts = []
        for p in self.procs:
            tail = "\n".join(p.text().splitlines()[-25:])
            parts.append(f"\n----- {p.name} (alive={p.alive()}, log {p.log}) -----\n{tail}")
        return "".join(parts)

    @staticmethod
    def wait_for(predicate, timeout: float, what: str, proc: Proc | None = None) -> None:
        """:func:`wait_for`."""
        wait_for(predicate, timeout, what, proc)

    def stop_all(self) -> None:
        """Stop every started process (last started first), then any stray of this run."""
        for p in reversed(self.procs):
            p.stop()
        # A process that left its group (none does in Flower 1.41) would still carry
        # this run's FLWR_HOME: stop those by id.
        for pid in processes_using(self.home):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        # SIGKILL is delivered asynchronously: give a loaded machine a moment to reap.
        deadline = time.monotonic() + 5.0
        while processes_using(self.home) and time.monotonic() < deadline:
            time.sleep(0.1)


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


@contextlib.contextmanager
def _sigterm_as_exit():
    """Turn SIGTERM into SystemExit while the demo runs, so its ``finally`` stops the
    processes when the demo itself is terminated (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
    workdir = _prepare_out(out, overwrite, "--force" if cli else "overwrite=True")
    for note in notes:
        say(f"demo: {note}")
    cluster = Cluster(workdir)
    result = DemoResult(out=out, workdir=workdir, job=job, log="", notes=notes)
    with _sigterm_as_exit():
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
