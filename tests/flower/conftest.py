"""Fixtures for the Flower tests: an in-process grid, and real Flower processes on
127.0.0.1 that are always stopped.

``fake_grid`` is :class:`FakeGrid`, a grid without processes: it hands every message
straight to the real ClientApp (one Context per node, kept across messages like a
SuperNode does) and lets a test drop replies (a timeout), turn them into error replies,
or rewrite them as a faulty or hostile client would. ``task_identity`` sets what a real
ServerApp process sets before messages can be made.

The process helpers live in :mod:`fedsparse.flower.demo` (``fedsparse flower demo``
uses them too): every process is started in its own session (process group), so
stopping it also stops the ``flwr-clientapp`` / ``flwr-serverapp`` children Flower
spawns; the ``cluster`` fixture's finalizer stops every group (SIGTERM, then SIGKILL
after a bounded wait) even when the test fails.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from pathlib import Path

import pytest

# Flower reads these when it is first imported: no usage reports or update checks
# from the test suite (CI may be offline).
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")


@pytest.fixture
def task_identity():
    """Messages take their run and sender from Flower's process-wide TaskIdentity, which a
    real ServerApp process (or run_simulation) sets; set it here and restore it after."""
    pytest.importorskip("flwr")
    from flwr.supercore.task_identity import TaskIdentity

    saved = {k: getattr(TaskIdentity, k, None) for k in ("_run_id", "_task_id", "_node_id")}
    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, 0
    yield
    for k, v in saved.items():
        setattr(TaskIdentity, k, v)


class FakeGrid:
    """Just enough of Flower's Grid: push runs the ClientApp at once; pull returns replies.

    Parameters
    ----------
    job : the job every node's ClientApp runs.
    partitions : the partition ids of the honest nodes; node ``1000 + pid`` holds ``pid``.
    fate : ``fate(message_type, group_id, partition_id)`` for every message: "ok",
        "drop" (no reply: a timeout), "error" (an error reply) or a callable that
        rewrites the reply's content in place (a faulty or hostile client). A ClientApp
        that raises gives an error reply with the exception, as a SuperNode does.
    nodes : more nodes, ``{node_id: (partition_id, fate)}`` with ``fate(message_type,
        group_id)`` as above: two nodes may claim one partition.
    node_config : more node config for every node (e.g. ``{"state-dir": ...}``).
    run_id : the Flower run's id (a resumed run is another run).
    """

    def __init__(self, job, partitions, fate=lambda kind, group, pid: "ok",
                 nodes: dict[int, tuple[int, Callable]] | None = None,
                 node_config: dict | None = None, run_id: int = 1):
        from flwr.app import Context, RecordDict

        from fedsparse.flower import make_client_app

        self.app = make_client_app(job)
        self.ids = itertools.count(1)
        self.fates: dict[int, Callable] = {}
        self.nodes = {}
        extra = {1000 + pid: (pid, None) for pid in partitions} | dict(nodes or {})
        for node, (pid, node_fate) in extra.items():
            self.nodes[node] = Context(run_id=run_id, node_id=node, state=RecordDict(),
                                       node_config={"partition-id": pid,
                                                    "num-partitions": job.num_clients,
                                                    **(node_config or {})},
                                       run_config={})
            if node_fate is not None:
                self.fates[node] = node_fate
        self.fate = fate
        self.replies: dict = {}
        #: (message_type, group_id, node) of every message pushed, in order.
        self.sent: list[tuple[str, str, int]] = []

    def get_node_ids(self):
        return list(self.nodes)

    def push_messages(self, messages):
        from flwr.app import Error, Message

        out = []
        for msg in messages:
            mid = f"m{next(self.ids)}"
            msg.metadata.__dict__["_message_id"] = mid
            node = msg.metadata.dst_node_id
            ctx = self.nodes[node]
            kind, group = msg.metadata.message_type, msg.metadata.group_id
            self.sent.append((kind, group, node))
            fate = self.fates[node](kind, group) if node in self.fates else \
                self.fate(kind, group, int(ctx.node_config["partition-id"]))
            if fate == "error":
                reply = Message(Error(code=0, reason="node crashed"), reply_to=msg)
            else:
                try:
                    reply = self.app(msg, ctx)
                except Exception as exc:  # noqa: BLE001 - what a SuperNode replies (flwr 1.41)
                    reply = Message(Error(code=2, reason=f"{type(exc)}:<'{exc}'>"), reply_to=msg)
                if callable(fate) and not reply.has_error():  # a hostile client rewrites it
                    fate(reply.content)
            reply.metadata.__dict__["_src_node_id"] = node
            reply.metadata.__dict__["_reply_to_message_id"] = mid
            if fate != "drop":
                self.replies[mid] = reply
            out.append(mid)
        return out

    def pull_messages(self, message_ids):
        return [self.replies.pop(m) for m in list(message_ids) if m in self.replies]


@pytest.fixture
def fake_grid(task_identity):
    """:class:`FakeGrid` (with Flower's task identity set for the test)."""
    return FakeGrid


@pytest.fixture
def cluster(tmp_path, request):
    """A :class:`~fedsparse.flower.demo.Cluster` whose processes are all stopped when the
    test ends."""
    pytest.importorskip("flwr")
    from fedsparse.flower.demo import Cluster

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
