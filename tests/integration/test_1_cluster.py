"""A real 3-node cluster in namespaces, used as a researcher would."""

import json
import uuid

from .conftest import run_cli


def test_status_json_reports_every_node_up_normal(cluster):
    proc = run_cli("status", "--json", run=cluster.run_id)
    assert proc.returncode == 0, proc.stderr
    hosts = json.loads(proc.stdout)["hosts"]
    assert [(h["name"], h["role"]) for h in hosts] == [
        ("e0", "edge"),
        ("e1", "edge"),
        ("e2", "edge"),
        ("ep", "endpoint"),
    ]
    assert [h["cassandra"] for h in hosts if h["role"] == "edge"] == ["UN", "UN", "UN"]
    assert {h["name"]: h["address"] for h in hosts} == {
        h.name: h.address for h in cluster.topology.hosts
    }


def test_write_and_read_back_at_local_quorum_from_the_endpoint(cluster):
    value = uuid.uuid4().hex
    statements = [
        "CREATE KEYSPACE IF NOT EXISTS itest WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 3}",
        "CREATE TABLE IF NOT EXISTS itest.kv (k text PRIMARY KEY, v text)",
        f"INSERT INTO itest.kv (k, v) VALUES ('key', '{value}')",
        "SELECT k, v FROM itest.kv WHERE k = 'key'",
    ]
    proc = run_cli(
        "exec",
        "--run",
        cluster.run_id,
        "ep",
        "--",
        *cluster.client_argv(["cql", *statements, "--consistency", "LOCAL_QUORUM"]),
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"k": "key", "v": value}
    assert proc.stderr.count("-- ok (LOCAL_QUORUM") == 4
    # RF 3 on 3 nodes: every node holds the row
    ring = cluster.nodetool("e0", "getendpoints", "itest", "kv", "key").split()
    assert sorted(ring) == sorted(h.address for h in cluster.topology.edges)


def test_each_node_listens_only_on_its_own_address(cluster):
    for host in cluster.topology.edges:
        out = cluster.exec(host.name, ["ss", "-Htln"]).stdout
        local = {line.split()[3] for line in out.splitlines()}
        addresses = {a.rpartition(":")[0].strip("[]") for a in local}
        assert addresses <= {host.address, "127.0.0.1"}, (host.name, local)
        assert {f"{host.address}:9042", f"{host.address}:7000", "127.0.0.1:7199"} <= local


def test_hosts_are_isolated_from_the_machine_namespace(cluster):
    # our hosts reach each other; their interfaces are not in the machine's own namespace
    out = cluster.exec("ep", ["ip", "-o", "-4", "addr", "show", "dev", "eth0"]).stdout
    assert cluster.address("ep") + "/24" in out
    import subprocess

    root_links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f"tb-{cluster.run_id}" not in root_links
