"""An edge deployment of two sites (issue 28): `edgetb up --sites 2,2` makes each site a
Cassandra datacenter, as Cassandra itself reports it; a keyspace replicated per
datacenter is placed evenly inside each one (the tokens are per site), writes at
LOCAL_QUORUM and EACH_QUORUM succeed from the endpoint, the `sites` link profile puts a
LAN inside each site and the WAN between them, and nothing is left after down."""

import json
import re
import statistics
import subprocess
import sys

from emulation import links

from .conftest import assert_no_residue, rtt_tolerance_ms, run_cli, run_id_in


def edgetb(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "edgetb", *args], capture_output=True, text=True, timeout=timeout
    )


def _median_rtt_ms(run_id: str, address: str) -> float:
    probe = run_cli(
        "exec", "--run", run_id, "ep", "--", sys.executable, "-m", "emulation.probe",
        address, "--count", "20", "--interval", "0.02", "--wait", "1",
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    return statistics.median(json.loads(probe.stdout)["rtt_us"]) / 1000


def test_two_sites_are_two_datacenters_each_with_even_replicas():
    up = edgetb("up", "--sites", "2,2", "--endpoint-site", "dc2")
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-3000:]
    run_id = run_id_in(up.stdout)
    try:
        status = edgetb("status", "--run", run_id, "--json")
        assert status.returncode == 0, status.stderr
        hosts = {h["name"]: h for h in json.loads(status.stdout)["hosts"]}
        # the site the testbed gave each node is the datacenter Cassandra gossips
        assert {n: (h.get("site"), h.get("datacenter")) for n, h in hosts.items()} == {
            "e0": ("dc1", "dc1"), "e1": ("dc1", "dc1"), "e2": ("dc2", "dc2"),
            "e3": ("dc2", "dc2"), "ep": ("dc2", None),
        }  # fmt: skip
        assert all(hosts[n]["cassandra"] == "UN" for n in ("e0", "e1", "e2", "e3")), hosts
        # one replica per datacenter: each node owns exactly half of its datacenter's
        # ring (one evenly spaced token set per site; one set over all four nodes would
        # give 75 % and 25 %)
        statements = [
            "CREATE KEYSPACE IF NOT EXISTS sites WITH replication = "
            "{'class': 'NetworkTopologyStrategy', 'dc1': 1, 'dc2': 1}",
            "CREATE TABLE IF NOT EXISTS sites.kv (k text PRIMARY KEY, v text)",
        ]
        for level in ("LOCAL_QUORUM", "EACH_QUORUM"):
            statements.append(f"INSERT INTO sites.kv (k, v) VALUES ('{level}', 'x')")
            cql = run_cli(
                "exec", "--run", run_id, "ep", "--", sys.executable, "-m", "testbed.client",
                "cql", *statements, "--consistency", level,
            )  # fmt: skip
            assert cql.returncode == 0, cql.stderr[-2000:]
            assert f"-- ok ({level}" in cql.stderr, cql.stderr[-2000:]
            statements = statements[-1:]
        owns = edgetb("node", "--run", run_id, "e0", "nodetool", "status", "sites")
        assert owns.returncode == 0, owns.stderr
        effective = dict(re.findall(r"^UN\s+(\S+)\s.*?\s([\d.]+)%", owns.stdout, re.M))
        assert sorted(effective.values()) == ["50.0"] * 4, owns.stdout
        # the sites profile: the endpoint (on dc2's LAN) reaches e2 over the LAN, e0
        # over the WAN (20 ms each way)
        shaped = run_cli(
            "set", "--profile", "sites", "--latency", "20", "--loss", "0",
            module="emulation", run=run_id, timeout=300,
        )  # fmt: skip
        assert shaped.returncode == 0, shaped.stderr
        lan, wan = (_median_rtt_ms(run_id, hosts[n]["address"]) for n in ("e2", "e0"))
        lan_rtt = 2 * links.LAN_DELAY_MS  # shaped too: never below it
        assert lan_rtt <= lan < lan_rtt + rtt_tolerance_ms(lan_rtt), lan
        assert abs(wan - 40) <= rtt_tolerance_ms(40), wan
    finally:
        down = edgetb("down", "--run", run_id)
    assert down.returncode == 0, down.stderr
    assert_no_residue(run_id)
