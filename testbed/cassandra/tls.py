"""Per-run TLS for Cassandra: client-to-node and internode, both mutual (each side shows a
certificate of the run's own certificate authority).

On ``up`` (``make``) a CA is made in memory for the run, issues one certificate per node
(its address in the subject alternative names) and one for the run's client, and is
then forgotten: its key is never written, so nobody can issue another certificate that
this cluster trusts. Each node gets its key and certificate in one PEM file and the CA's
certificate in its ``conf`` directory (owner-only files), and cassandra.yaml says
(``settings``):

- ``client_encryption_options``: CQL on 9042 only over TLS, ``require_client_auth``: a
  client without the run's certificate is refused at the handshake, before any login;
  so the default superuser ``cassandra`` that each node creates about 10 s after its
  start (until the run's role replaces it, ``testbed.cassandra.auth``) is out of reach
  of anyone but this run;
- ``server_encryption_options``: internode traffic (7000) over TLS, each node showing its
  certificate to the other: a stranger can neither read it nor join.

The client's files live in ``<run dir>/tls`` on the controller and at the same path on
the endpoint (copied by the ``cassandra`` playbook over SSH); tools find them through
``$EDGETB_TLS`` (a directory). ``ssl_context`` builds the Python driver's context from
it; the YCSB binding (``CqlClient.java``) reads the same files.

Off by default on the local backends (namespaces and VMs of this machine: nothing leaves
it), on by default on the hosts backend (real networks); ``--tls``/``--no-tls`` choose.
``ssl_context`` imports nothing beyond the standard library: the endpoint's client uses it.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, StateError

ENV = "EDGETB_TLS"
DIR = "tls"  # in the run directory
CA_FILE, CERT_FILE, KEY_FILE = "ca.pem", "client.pem", "client.key"
NODE_KEYSTORE, NODE_CA = "tls-node.pem", "tls-ca.pem"  # in each node's conf directory
TLS_KEYS = frozenset({"client_encryption_options", "server_encryption_options"})
FACTORY = "org.apache.cassandra.security.PEMBasedSslContextFactory"
VALID_DAYS = 30  # a run longer than a month makes new certificates at its next up


@dataclass(frozen=True)
class RunTls:
    """A run's certificates, PEM-encoded: the CA's certificate, the client's key and
    certificate, and per node its key followed by its certificate (Cassandra's PEM
    keystore). Keys never appear in ``repr``."""

    ca: bytes
    client_cert: bytes
    client_key: bytes = field(repr=False)
    nodes: Mapping[str, bytes] = field(repr=False, default_factory=dict)

    def write_client(self, directory: Path) -> Path:
        """The client's files in ``directory`` (made owner-only): ca.pem, client.pem,
        client.key, each 0600."""
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(directory, 0o700)
        for name, data in ((CA_FILE, self.ca), (CERT_FILE, self.client_cert)):
            _write_private(directory / name, data)
        _write_private(directory / KEY_FILE, self.client_key)
        return directory

    def write_node(self, host: str, conf: Path) -> None:
        """``host``'s keystore and the CA in its conf directory, each 0600."""
        if host not in self.nodes:
            raise ConfigError(f"no TLS certificate was made for {host}")
        _write_private(conf / NODE_KEYSTORE, self.nodes[host])
        _write_private(conf / NODE_CA, self.ca)


def _write_private(path: Path, data: bytes) -> None:
    """``path`` holding ``data``, mode 0600 from its creation (replacing a file of an
    earlier start of the same node; never through a symlink)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)


def make(run_id: str, nodes: Mapping[str, str]) -> RunTls:
    """A new CA for run ``run_id`` and the certificates it issues: one per node (``nodes``:
    name -> address) and the client's. EC P-256 keys (a handshake costs a fraction of an
    RSA one on a small board)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=VALID_DAYS)

    def name(common: str) -> x509.Name:
        return x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "edgetb"),
                x509.NameAttribute(NameOID.COMMON_NAME, common),
            ]
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name(f"edgetb run {run_id} CA")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    def issue(common: str, address: str | None) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(common))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                # a node is a server (CQL, internode) and a client (internode)
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        if address is not None:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]),
                critical=False,
            )
        cert = builder.sign(ca_key, hashes.SHA256())
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,  # Cassandra's PEM reader takes PKCS#8 only
            serialization.NoEncryption(),
        )
        return key_pem, cert.public_bytes(serialization.Encoding.PEM)

    node_files = {}
    for host, address in nodes.items():
        key_pem, cert_pem = issue(f"{host} of run {run_id}", address)
        node_files[host] = key_pem + cert_pem
    client_key, client_cert = issue(f"client of run {run_id}", None)
    return RunTls(
        ca=ca.public_bytes(serialization.Encoding.PEM),
        client_cert=client_cert,
        client_key=client_key,
        nodes=node_files,
    )


def settings(conf: Path) -> dict[str, Any]:
    """The cassandra.yaml layer of a node whose conf directory is ``conf`` (it wins over
    every override, as the authentication layer does)."""
    common = {
        "ssl_context_factory": {"class_name": FACTORY},
        "keystore": str(conf / NODE_KEYSTORE),
        "truststore": str(conf / NODE_CA),
        "require_client_auth": True,
    }
    return {
        "client_encryption_options": {"enabled": True, "optional": False, **common},
        "server_encryption_options": {"internode_encryption": "all", "optional": False, **common},
    }


def check_overrides(overrides: Mapping[str, Any]) -> None:
    """ConfigError when cassandra.yaml overrides would change the run's TLS."""
    taken = sorted(TLS_KEYS & set(overrides))
    if taken:
        raise ConfigError(
            f"{', '.join(taken)}: set by the testbed when TLS is on (--tls); remove the "
            f"override, or run with --no-tls"
        )


def client_files(directory: str | os.PathLike) -> tuple[Path, Path, Path]:
    """(ca, certificate, key) in ``directory``; StateError when one is missing or the key
    is readable by others than its owner."""
    d = Path(directory)
    paths = (d / CA_FILE, d / CERT_FILE, d / KEY_FILE)
    for path in paths:
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError as exc:
            raise StateError(f"TLS file {path}: {exc.strerror}") from exc
        if not stat.S_ISREG(st.st_mode):
            raise StateError(f"TLS file {path} is not a regular file")
    mode = stat.S_IMODE(os.stat(paths[2]).st_mode)
    if mode & 0o077:
        raise StateError(f"TLS key {paths[2]} has mode {mode:04o}; it must be 0600")
    return paths


def ssl_context(directory: str | os.PathLike | None = None) -> ssl.SSLContext | None:
    """The client's TLS context for the run's cluster (``directory``, default
    ``$EDGETB_TLS``; None where neither is set: a cluster without TLS). The run's CA is the
    only one trusted; host names are not checked (the nodes are addressed by IP, and only
    the run's nodes hold a certificate of its CA)."""
    directory = directory or os.environ.get(ENV) or None
    if directory is None:
        return None
    ca, cert, key = client_files(directory)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    return ctx
