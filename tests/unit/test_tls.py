"""The run's TLS material (testbed.cassandra.tls): what the CA issues, where the files go
and with which modes, what cassandra.yaml gets, and what the client trusts. A real TLS
handshake between two sockets checks that the run's client certificate is accepted and a
stranger's is not, and that the client trusts no server but the run's nodes (the cluster
itself is checked in tests/integration/test_1b_named.py and, on VMs, test_4_vms.py)."""

from __future__ import annotations

import socket
import ssl
import stat
import threading

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from common.errors import ConfigError, StateError
from testbed.cassandra import config, tls
from testbed.cassandra.config import CassandraSettings
from testbed.topology import Topology

NODES = {"e0": "10.77.0.11", "e1": "10.77.0.12"}


@pytest.fixture(scope="module")
def made() -> tls.RunTls:
    return tls.make("abc123", NODES)


def _certs(pem: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem)


def test_the_run_cas_issue_one_certificate_per_node_and_one_for_the_client(made):
    (ca,) = _certs(made.ca)
    (clients_ca,) = _certs(made.clients_ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert "abc123" in ca.subject.rfc4514_string()
    for host, address in NODES.items():
        keystore = made.nodes[host]
        assert keystore.startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS#8, what Cassandra reads
        (cert,) = _certs(keystore)
        cert.verify_directly_issued_by(ca)  # raises unless the run's CA signed it
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == [address]
        usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH} <= set(usage)
    (client,) = _certs(made.client_cert)
    client.verify_directly_issued_by(clients_ca)
    with pytest.raises(ValueError):  # not the nodes' CA: the internode port refuses it
        client.verify_directly_issued_by(ca)
    usage = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]  # it cannot pose as a server


def test_every_run_has_its_own_ca():
    a, b = tls.make("r1", {"e0": "10.0.0.1"}), tls.make("r2", {"e0": "10.0.0.1"})
    (ca_a,) = _certs(a.ca)
    (cert_b,) = _certs(b.nodes["e0"])
    with pytest.raises(ValueError):  # the signature does not match: not the same CA
        cert_b.verify_directly_issued_by(ca_a)


def test_keys_are_written_owner_only_and_never_shown(made, tmp_path):
    client = made.write_client(tmp_path / "tls")
    conf = tmp_path / "conf"
    conf.mkdir()
    made.write_node("e1", conf)
    assert stat.S_IMODE(client.stat().st_mode) == 0o700
    node_files = (tls.NODE_KEYSTORE, tls.NODE_CA, tls.CLIENTS_CA)
    files = [*client.iterdir(), *(conf / f for f in node_files)]
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}
    assert (conf / tls.NODE_KEYSTORE).read_bytes() == made.nodes["e1"]
    assert (conf / tls.CLIENTS_CA).read_bytes() == made.clients_ca
    assert "PRIVATE" not in repr(made)
    with pytest.raises(ConfigError, match="e7"):
        made.write_node("e7", conf)


def test_a_node_file_is_replaced_not_followed(made, tmp_path):
    conf = tmp_path / "conf"
    conf.mkdir()
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (conf / tls.NODE_KEYSTORE).symlink_to(target)
    made.write_node("e0", conf)
    assert target.read_text() == "keep"
    assert not (conf / tls.NODE_KEYSTORE).is_symlink()


def test_cassandra_yaml_gets_mutual_tls_on_both_ports_and_it_wins_over_overrides(tmp_path):
    topo = Topology(edge_nodes=2)
    host = topo.edges[0]
    tried = {"client_encryption_options": {"enabled": False}}  # what an override might say
    on = config.node_settings(
        CassandraSettings(tls=True, node_overrides={host.name: tried}), topo, host, tmp_path
    )
    client, server = on["client_encryption_options"], on["server_encryption_options"]
    assert client["truststore"] == str(tmp_path / "conf" / tls.CLIENTS_CA)  # CQL: the client
    assert server["truststore"] == str(tmp_path / "conf" / tls.NODE_CA)  # 7000: nodes only
    assert client["enabled"] is True and client["optional"] is False
    assert server["internode_encryption"] == "all" and server["optional"] is False
    for side in (client, server):
        assert side["require_client_auth"] is True
        assert side["keystore"] == str(tmp_path / "conf" / tls.NODE_KEYSTORE)
        assert side["ssl_context_factory"]["class_name"] == tls.FACTORY
    off = config.node_settings(CassandraSettings(tls=False), topo, host, tmp_path)
    assert "client_encryption_options" not in off and "server_encryption_options" not in off


def test_overrides_of_the_tls_settings_are_refused():
    with pytest.raises(ConfigError, match="server_encryption_options"):
        tls.check_overrides({"server_encryption_options": {"internode_encryption": "none"}})
    tls.check_overrides({"concurrent_writes": 8})
    with pytest.raises(ConfigError, match="tls"):
        CassandraSettings(tls="yes")  # type: ignore[arg-type]


def test_the_client_refuses_a_key_others_can_read(made, tmp_path):
    d = made.write_client(tmp_path / "tls")
    (d / tls.KEY_FILE).chmod(0o644)
    with pytest.raises(StateError, match="0644"):
        tls.ssl_context(d)
    (d / tls.KEY_FILE).unlink()
    with pytest.raises(StateError, match="client.key"):
        tls.ssl_context(d)


def test_no_directory_means_no_tls(monkeypatch):
    monkeypatch.delenv(tls.ENV, raising=False)
    assert tls.ssl_context() is None


def _serve_once(
    made: tls.RunTls, tmp_path, results: list, connections: int = 2
) -> tuple[int, threading.Thread]:
    """A TLS server with e0's certificate that requires a client certificate of the run's
    CA, as Cassandra is configured to, for ``connections``; returns its port and thread."""
    (tmp_path / "e0.pem").write_bytes(made.nodes["e0"])
    (tmp_path / "ca.pem").write_bytes(made.clients_ca)  # as the CQL port trusts
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "e0.pem")
    ctx.load_verify_locations(tmp_path / "ca.pem")
    ctx.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)

    def serve() -> None:
        with listener:
            for _ in range(connections):
                conn, _addr = listener.accept()
                try:
                    with ctx.wrap_socket(conn, server_side=True) as s:
                        results.append(("accepted", s.recv(4)))
                        s.sendall(b"pong")
                except (ssl.SSLError, OSError) as exc:
                    results.append(("refused", str(exc)))

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    return listener.getsockname()[1], server


def _talk(ctx: ssl.SSLContext, port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw) as s:
            s.sendall(b"ping")
            return s.recv(4)


def test_the_runs_client_is_accepted_and_a_stranger_with_another_ca_is_not(made, tmp_path):
    results: list = []
    port, server = _serve_once(made, tmp_path, results)
    own = made.write_client(tmp_path / "tls")
    ours = tls.ssl_context(own)
    assert ours is not None
    assert _talk(ours, port) == b"pong"
    stranger = tls.make("other", {"e0": "127.0.0.1"}).write_client(tmp_path / "stranger")
    ctx = tls.ssl_context(stranger)
    assert ctx is not None
    ctx.load_verify_locations(own / tls.CA_FILE)  # it trusts our nodes: only its cert is wrong
    with pytest.raises((ssl.SSLError, OSError)):
        _talk(ctx, port)
    server.join(timeout=20)  # TLS 1.3: the client may see the refusal before the server
    assert not server.is_alive()  # has recorded it
    assert results[0] == ("accepted", b"ping")
    assert results[1][0] == "refused"


def test_the_client_trusts_no_server_but_the_runs_nodes(made, tmp_path):
    other = tls.make("other", {"e0": "127.0.0.1"})
    results: list = []
    port, server = _serve_once(other, tmp_path, results, connections=1)  # another run's node
    ours = tls.ssl_context(made.write_client(tmp_path / "tls"))
    assert ours is not None
    with pytest.raises(ssl.SSLCertVerificationError):
        _talk(ours, port)
    server.join(timeout=20)
    assert results and results[0][0] == "refused"  # the server saw the client give up
