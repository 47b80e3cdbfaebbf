"""Fixtures that start real Flower processes on 127.0.0.1 and always stop them.

Every process is started in its own session (process group), so stopping it also
stops the ``flwr-clientapp`` / ``flwr-serverapp`` children Flower spawns; the
``cluster`` fixture's finalizer stops every group (SIGTERM, then SIGKILL after a
bounded wait) even when the test fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

# Flower reads these when it is first imported: no usage reports or update checks
# from the test suite (CI may be offline).
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _killpg(pid: int, sig: int) -> None:
    """Signal the process group ``pid`` leads (gone already is fine)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _executable(name: str) -> str:
    path = BIN / name
    return str(path) if path.exists() else name


class Proc:
    """A started process with its log file."""

    def __init__(self, name: str, args: list[str], env: dict, log: Path):
        self.name, self.args, self.log = name, args, log
        self._fh = open(log, "wb")
        self.popen = subprocess.Popen(args, env=env, stdout=self._fh, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal_group(self, sig: int) -> None:
        _killpg(self.popen.pid, sig)

    def stop(self, timeout: float = 10.0) -> None:
        if self.alive():
            self.signal_group(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        # Children (clientapp/serverapp processes) may outlive the leader: kill the group.
        self.signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)
        self._fh.close()


class Cluster:
    """A SuperLink, SuperNodes and ``flwr`` CLI calls sharing one FLWR_HOME in tmp."""

    def __init__(self, root: Path):
        self.root = root
        self.home = root / "flwr-home"
        self.home.mkdir()
        self.logs = root / "logs"
        self.logs.mkdir()
        self.env = {**os.environ, "FLWR_HOME": str(self.home), "PYTHONUNBUFFERED": "1",
                    "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
                    # SuperExec looks for new ClientApp tasks every second by default.
                    "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.2"}
        self.procs: list[Proc] = []
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"

    def start(self, name: str, args: list[str]) -> Proc:
        proc = Proc(name, [_executable(args[0]), *args[1:]], self.env,
                    self.logs / f"{name}.log")
        self.procs.append(proc)
        return proc

    def superlink(self, *extra: str) -> Proc:
        proc = self.start("superlink", ["flower-superlink", "--host", "127.0.0.1", "--port",
                                        str(self.port), "--disable-runtime-dependency-installation",
                                        "--database", str(self.root / "state.db"), *extra])
        wait_for(lambda: _port_open(self.port), 30, "the SuperLink to listen", proc)
        return proc

    def supernode(self, name: str, node_config: str, *extra: str) -> Proc:
        return self.start(name, ["flower-supernode", "--superlink", self.address, "--port",
                                 str(free_port()), "--node-config", node_config, *extra])

    def flwr(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run a ``flwr`` CLI command to completion (killed after ``timeout`` s)."""
        proc = subprocess.Popen([_executable("flwr"), *args], env=self.env, cwd=self.root,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            raise AssertionError(f"flwr {' '.join(args)} timed out after {timeout} s:\n{out}"
                                 ) from None
        finally:
            if proc.poll() is None:  # interrupted (e.g. Ctrl-C): leave nothing behind
                _killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")

    def run_job(self, project: Path, connection: str, *, timeout: float,
                on_line=None) -> str:
        """``flwr run PROJECT CONNECTION --stream`` until the run ends; return its output.

        ``on_line(line)`` sees every output line as it arrives (used to inject faults).
        """
        proc = subprocess.Popen([_executable("flwr"), "run", str(project), connection,
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
            _killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
            reader.join(5)
            raise AssertionError(f"flwr run did not finish within {timeout} s:\n"
                                 + "".join(lines) + self.dump()) from None
        finally:
            if proc.poll() is None:  # interrupted (e.g. Ctrl-C): leave nothing behind
                _killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        reader.join(5)
        if not reader.is_alive():
            proc.stdout.close()
        return "".join(lines)

    def dump(self) -> str:
        """The tail of every process log (for failure messages)."""
        parts = []
        for p in self.procs:
            tail = "\n".join(p.text().splitlines()[-25:])
            parts.append(f"\n----- {p.name} (alive={p.alive()}) -----\n{tail}")
        return "".join(parts)

    @staticmethod
    def wait_for(predicate, timeout: float, what: str, proc: Proc | None = None) -> None:
        wait_for(predicate, timeout, what, proc)

    def stop_all(self) -> None:
        for p in reversed(self.procs):
            p.stop()


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_for(predicate, timeout: float, what: str, proc: Proc | None = None) -> None:
    """Poll ``predicate`` for at most ``timeout`` s; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and not proc.alive():
            raise AssertionError(f"{proc.name} exited while waiting for {what}:\n{proc.text()}")
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}"
                         + ("" if proc is None else f":\n{proc.text()[-3000:]}"))


@pytest.fixture
def cluster(tmp_path, request):
    """A :class:`Cluster` whose processes are all stopped when the test ends."""
    c = Cluster(tmp_path)
    request.addfinalizer(c.stop_all)
    return c


def make_tls_files(directory: Path, node_keys: tuple[str, ...] = ("node0", "node1")) -> dict:
    """A CA, a server certificate for 127.0.0.1/localhost signed by it, and SuperNode
    EC P-384 key pairs in OpenSSH format (what ``flwr supernode register`` and
    ``flower-supernode --auth-supernode-private-key`` read)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    valid = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1))

    def pem_key(key) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM,
                                 serialization.PrivateFormat.TraditionalOpenSSL,
                                 serialization.NoEncryption())

    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedsparse test CA")])
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(valid[0]).not_valid_after(valid[1])
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                            crl_sign=True, content_commitment=False,
                                            key_encipherment=False, data_encipherment=False,
                                            key_agreement=False, encipher_only=False,
                                            decipher_only=False), critical=True)
               .sign(ca_key, hashes.SHA256()))
    server_key = ec.generate_private_key(ec.SECP384R1())
    server_cert = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
                   .issuer_name(ca_name).public_key(server_key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(valid[0]).not_valid_after(valid[1])
                   .add_extension(x509.SubjectAlternativeName([
                       x509.DNSName("localhost"),
                       x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                                  critical=False)
                   .sign(ca_key, hashes.SHA256()))
    files = {"ca": directory / "ca.crt", "cert": directory / "server.pem",
             "key": directory / "server.key"}
    files["ca"].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files["cert"].write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    files["key"].write_bytes(pem_key(server_key))
    for name in node_keys:
        key = ec.generate_private_key(ec.SECP384R1())
        private = directory / f"{name}_key"
        private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                              serialization.PrivateFormat.OpenSSH,
                                              serialization.NoEncryption()))
        private.chmod(0o600)
        public = directory / f"{name}_key.pub"
        public.write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                         serialization.PublicFormat.OpenSSH))
        files[name] = (private, public)
    return files


@pytest.fixture
def tls_files(tmp_path):
    """``tls_files(names)``: CA, server certificate and SuperNode keys in ``tmp_path/tls``."""
    return lambda names: make_tls_files(tmp_path / "tls", tuple(names))
