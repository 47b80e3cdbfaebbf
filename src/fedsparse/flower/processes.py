"""Flower processes on loopback: a SuperLink, SuperNodes and ``flwr`` CLI calls that
share one ``FLWR_HOME``, each started and stopped as a whole process group.

:class:`Cluster` and :class:`Proc` are what :func:`fedsparse.flower.demo.run_demo` and
the deployment tests use. Each process is started in its own session (process group),
so stopping it also stops the ``flwr-clientapp`` / ``flwr-serverapp`` children Flower
spawns: SIGTERM to the group, SIGKILL after a bounded wait. Every process gets
``FLWR_HOME`` pointing into the run's own directory, which also identifies strays
(:func:`processes_using`).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["BIN", "Cluster", "FlowerProcessError", "Proc", "executable", "free_port",
           "group_alive", "killpg", "port_open", "processes_using", "wait_for"]

BIN = Path(sys.executable).parent


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
                    "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.2",
                    # The SuperLink and SuperNodes start flower-superexec and the app
                    # processes by name: from an environment not activated, PATH lacks them
                    "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")])}
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
