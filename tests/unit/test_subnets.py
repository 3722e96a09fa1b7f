"""The subnet pool: one /24 per run, never overlapping what the machine uses."""

from ipaddress import IPv4Network

import pytest

from common.errors import ConfigError
from testbed import subnets
from testbed.topology import Topology


def used(*nets: str) -> list[subnets.InUse]:
    return [subnets.InUse(IPv4Network(n, strict=False), f"thing {n}") for n in nets]


def test_first_free_skips_every_overlap():
    pool = IPv4Network("10.77.0.0/16")
    assert subnets.first_free(pool, []) == IPv4Network("10.77.0.0/24")
    taken = used("10.77.0.0/24", "10.77.1.7/32", "10.77.2.0/23")
    assert subnets.first_free(pool, taken) == IPv4Network("10.77.4.0/24")
    assert subnets.first_free(pool, used("10.0.0.0/8")) is None
    assert subnets.first_free(IPv4Network("10.77.5.0/24"), used("10.77.4.0/24")) == IPv4Network(
        "10.77.5.0/24"
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("10.77.0.0/25", "smaller than one run's /24"),
        ("8.8.0.0/16", "not a private"),
        ("10.77.0.1/16", "invalid subnet pool"),
        ("nonsense", "invalid subnet pool"),
    ],
)
def test_bad_pools_are_named(text, message):
    with pytest.raises(ConfigError, match=message):
        subnets.pool_from(text)


def test_pool_from_environment(monkeypatch):
    monkeypatch.setenv("EDGETB_SUBNET_POOL", "172.20.0.0/20")
    assert subnets.pool_from() == IPv4Network("172.20.0.0/20")
    assert subnets.pool_from("192.168.8.0/24") == IPv4Network("192.168.8.0/24")


def test_place_picks_a_free_subnet_or_names_the_clash(monkeypatch):
    monkeypatch.setattr(subnets, "in_use", lambda: used("10.77.0.0/24", "10.77.1.1/24"))
    placed = subnets.place(Topology(edge_nodes=3), "10.77.0.0/16")
    assert placed.subnet == "10.77.2.0/24" and placed.endpoint.address == "10.77.2.10"
    assert [h.address for h in placed.edges] == ["10.77.2.11", "10.77.2.12", "10.77.2.13"]
    mine = Topology(edge_nodes=3, subnet="10.88.0.0/24")
    assert subnets.place(mine, None) is mine
    with pytest.raises(ConfigError, match=r"subnet 10.77.1.0/24 is in use \(thing 10.77.1.1/24\)"):
        subnets.place(Topology(edge_nodes=3, subnet="10.77.1.0/24"), None)
    with pytest.raises(ConfigError, match="no free /24 left in the subnet pool 10.77.0.0/23"):
        subnets.place(Topology(edge_nodes=3), "10.77.0.0/23")


def test_recorded_subnets_come_from_registered_runs(tmp_path, monkeypatch):
    from testbed import state as st

    monkeypatch.setenv("EDGETB_REGISTRY", str(tmp_path / "reg"))
    for run_id, topo in {
        "aaaaaa": Topology(edge_nodes=1, subnet="10.77.3.0/24"),
        "bbbbbb": Topology(edge_nodes=1, addresses={"e0": "192.168.1.5", "ep": "192.168.1.6"}),
    }.items():
        state = st.RunState(run_id, "netns", topo.to_dict(), cassandra=None)
        st.create_run(state, tmp_path / "runs").release()
    found = {(str(u.network), u.by) for u in subnets.recorded_subnets()}
    assert found == {
        ("10.77.3.0/24", "run aaaaaa"),
        ("192.168.1.5/32", "run bbbbbb (e0)"),
        ("192.168.1.6/32", "run bbbbbb (ep)"),
    }
    assert len(subnets.recorded_subnets(hosts_only=True)) == 2


def test_topology_with_addresses_is_checked():
    with pytest.raises(ConfigError, match="missing \\['ep'\\]"):
        Topology(edge_nodes=1, addresses={"e0": "10.1.1.1"})
    with pytest.raises(ConfigError, match="e0 and ep have the same address"):
        Topology(edge_nodes=1, addresses={"e0": "10.1.1.1", "ep": "10.1.1.1"})
    with pytest.raises(ConfigError, match="not an IPv4"):
        Topology(edge_nodes=1, addresses={"e0": "10.1.1", "ep": "10.1.1.1"})
    with pytest.raises(ConfigError, match="not both"):
        Topology(edge_nodes=1, subnet="10.1.1.0/24", addresses={"e0": "1.1.1.1", "ep": "1.1.1.2"})
    assert not Topology(edge_nodes=1).placed
