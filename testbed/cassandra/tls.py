"""Per-run TLS for Cassandra: client-to-node and internode, both mutual (each side shows a
certificate of the run's own certificate authority).

On ``up`` (``make``) two CAs are made in memory for the run: the nodes' CA issues one
certificate per node (its address in the subject alternative names), the clients' CA
one for the run's client; then both are forgotten: their keys are never written, so
nobody can issue another certificate that this cluster trusts. Two, so that the client's
certificate opens the CQL port and not the internode one. Each node gets its key and
certificate in one PEM file and the two CAs' certificates in its ``conf`` directory
(owner-only files), and cassandra.yaml says (``settings``):

- ``client_encryption_options``: CQL on 9042 only over TLS, ``require_client_auth``: a
  client without the run's certificate is refused at the handshake, before any login;
  so the default superuser ``cassandra`` that each node creates about 10 s after its
  start (until the run's role replaces it, ``testbed.cassandra.auth``) is out of reach
  of anyone but this run;
- ``server_encryption_options``: internode traffic (7000) over TLS, each node showing its
  certificate (of the nodes' CA) to the other: neither a stranger nor the run's own
  client can read it or join.

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

from common import paths
from common.errors import ConfigError, StateError

ENV = "EDGETB_TLS"
DIR = "tls"  # in the run directory
CA_FILE, CERT_FILE, KEY_FILE = "ca.pem", "client.pem", "client.key"
# in each node's conf directory: its key and certificate, the nodes' CA, the clients' CA
NODE_KEYSTORE, NODE_CA, CLIENTS_CA = "tls-node.pem", "tls-ca.pem", "tls-clients-ca.pem"
TLS_KEYS = frozenset({"client_encryption_options", "server_encryption_options"})
FACTORY = "org.apache.cassandra.security.PEMBasedSslContextFactory"
VALID_DAYS = 10 * 365  # the CAs' keys are forgotten: a run's certificates cannot be renewed


@dataclass(frozen=True)
class RunTls:
    """A run's certificates, PEM-encoded: the nodes' CA (``ca``, what the client and the
    internode port trust), the clients' CA (what the CQL port trusts), the client's key
    and certificate, and per node its key followed by its certificate (Cassandra's PEM
    keystore). Keys never appear in ``repr``."""

    ca: bytes
    clients_ca: bytes
    client_cert: bytes
    client_key: bytes = field(repr=False)
    nodes: Mapping[str, bytes] = field(repr=False, default_factory=dict)

    def write_client(self, directory: Path) -> Path:
        """The client's files in ``directory`` (made owner-only): ca.pem, client.pem,
        client.key, each 0600."""
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(directory, 0o700)
        for name, data in (
            (CA_FILE, self.ca),
            (CERT_FILE, self.client_cert),
            (KEY_FILE, self.client_key),
        ):
            _write_private(directory / name, data)
        return directory

    def write_node(self, host: str, conf: Path) -> None:
        """``host``'s keystore and the two CAs in its conf directory, each 0600."""
        if host not in self.nodes:
            raise ConfigError(f"no TLS certificate was made for {host}")
        _write_private(conf / NODE_KEYSTORE, self.nodes[host])
        _write_private(conf / NODE_CA, self.ca)
        _write_private(conf / CLIENTS_CA, self.clients_ca)


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
    """Two new CAs for run ``run_id`` and the certificates they issue: the nodes' CA one
    per node (``nodes``: name -> address; a server and an internode client), the clients'
    CA the client's (a client only). Two CAs, so that the client's certificate opens CQL
    and nothing else: the internode port trusts only the nodes' CA. EC P-256 keys (a
    handshake costs a fraction of an RSA one on a small board)."""
    from cryptography.hazmat.primitives import serialization

    now = datetime.datetime.now(datetime.UTC)
    # from a day back (a board without a clock that runs behind) for years: the CAs' keys
    # are gone after this, so a certificate can never be renewed, only made anew at `up`
    valid = (now - datetime.timedelta(days=1), now + datetime.timedelta(days=VALID_DAYS))
    node_ca = _authority(f"edgetb run {run_id} nodes CA", valid)
    client_ca = _authority(f"edgetb run {run_id} clients CA", valid)
    node_files = {}
    for host, address in nodes.items():
        key_pem, cert_pem = _issue(node_ca, f"{host} of run {run_id}", address, valid)
        node_files[host] = key_pem + cert_pem
    client_key, client_cert = _issue(client_ca, f"client of run {run_id}", None, valid)
    return RunTls(
        ca=node_ca[2].public_bytes(serialization.Encoding.PEM),
        clients_ca=client_ca[2].public_bytes(serialization.Encoding.PEM),
        client_cert=client_cert,
        client_key=client_key,
        nodes=node_files,
    )


def _name(common: str) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "edgetb"),
            x509.NameAttribute(NameOID.COMMON_NAME, common),
        ]
    )


def _authority(common: str, valid: tuple[datetime.datetime, datetime.datetime]) -> tuple:
    """A new CA: (its key, its name, its self-signed certificate), for signing only."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    subject = _name(common)
    usage = dict.fromkeys(
        ("digital_signature", "content_commitment", "key_encipherment", "data_encipherment",
         "key_agreement", "encipher_only", "decipher_only"), False,
    )  # fmt: skip
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(key_cert_sign=True, crl_sign=True, **usage), critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, subject, cert


def _issue(
    ca: tuple, common: str, address: str | None, valid: tuple[datetime.datetime, datetime.datetime]
) -> tuple[bytes, bytes]:
    """A key (PEM, PKCS#8) and a certificate signed by ``ca``: a client's, and with an
    ``address`` a node's too (a server at that IP address)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    ca_key, ca_name, _ = ca
    key = ec.generate_private_key(ec.SECP256R1())
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if address is not None:  # a node serves (CQL, internode) and connects (internode)
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
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


def settings(conf: Path) -> dict[str, Any]:
    """The cassandra.yaml layer of a node whose conf directory is ``conf`` (it wins over
    every override, as the authentication layer does)."""
    common = {
        "ssl_context_factory": {"class_name": FACTORY},
        "keystore": str(conf / NODE_KEYSTORE),
        "require_client_auth": True,
    }
    return {
        "client_encryption_options": {
            "enabled": True,
            "optional": False,
            "truststore": str(conf / CLIENTS_CA),  # CQL: the run's client
            **common,
        },
        "server_encryption_options": {
            "internode_encryption": "all",
            "optional": False,
            "truststore": str(conf / NODE_CA),  # internode: the run's nodes only
            **common,
        },
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
    ``$EDGETB_TLS``; None where neither is set: a cluster without TLS). The run's nodes'
    CA is the only one trusted; host names are not checked (the nodes are addressed by IP,
    and only the run's nodes hold a certificate of that CA)."""
    directory = directory or paths.get(ENV)
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
