"""Fixtures that start real Flower processes on 127.0.0.1 and always stop them.

The process helpers live in :mod:`fedsparse.flower.demo` (``fedsparse flower demo``
uses them too): every process is started in its own session (process group), so
stopping it also stops the ``flwr-clientapp`` / ``flwr-serverapp`` children Flower
spawns; the ``cluster`` fixture's finalizer stops every group (SIGTERM, then SIGKILL
after a bounded wait) even when the test fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Flower reads these when it is first imported: no usage reports or update checks
# from the test suite (CI may be offline).
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")


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
