"""Edge sites as Cassandra datacenters: the topology's sites, their tokens and the
snitch's files (pure logic; tests/integration/test_1c_sites.py brings a cluster up)."""

from pathlib import Path

import pytest

from common.errors import ConfigError
from testbed.cassandra import config, jvm
from testbed.topology import Topology, format_sites, parse_sites

RING = 2**64


@pytest.mark.parametrize(
    "text, sizes",
    [("3x3", (3, 3, 3)), ("2,3", (2, 3)), ("1x4", (4,)), (" 2 x 2 ", (2, 2)), ("5", (5,))],
)
def test_sites_are_parsed_in_both_forms(text, sizes):
    assert parse_sites(text) == sizes


@pytest.mark.parametrize(
    "text, message",
    [
        ("0x3", "at least one site"),
        ("3x0", "every site needs at least one node"),
        ("2,0", "every site needs at least one node"),
        ("4x3", "at most 9"),
        ("three", "give SITESxNODES"),
        ("", "give SITESxNODES"),
    ],
)
def test_bad_sites_are_one_line_naming_the_problem(text, message):
    with pytest.raises(ConfigError, match=message) as err:
        parse_sites(text)
    assert "\n" not in str(err.value)


def test_nodes_are_numbered_site_by_site_and_the_endpoint_joins_a_named_site():
    topo = Topology(edge_nodes=5, sites=(2, 3), endpoint_site="dc2")
    assert [(h.name, h.site) for h in topo.hosts] == [
        ("e0", "dc1"), ("e1", "dc1"), ("e2", "dc2"), ("e3", "dc2"), ("e4", "dc2"), ("ep", "dc2"),
    ]  # fmt: skip
    assert [h.name for h in topo.site_nodes("dc2")] == ["e2", "e3", "e4"]
    assert format_sites(topo.sites or ()) == "2,3" and format_sites((3, 3, 3)) == "3x3"
    with pytest.raises(ConfigError, match="unknown site 'dc3'"):
        topo.site_nodes("dc3")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"edge_nodes": 3, "sites": (2, 2)}, "hold 4 nodes, not 3"),
        ({"edge_nodes": 2, "sites": (2, 0)}, "at least one node"),
        ({"edge_nodes": 4, "sites": (2, 2), "endpoint_site": "dc3"}, "not a site"),
        ({"edge_nodes": 4, "sites": (2, 2), "site_names": ("a", "a")}, "duplicate site"),
        ({"edge_nodes": 4, "sites": (2, 2), "site_names": ("a",)}, "1 site names for 2"),
        ({"edge_nodes": 4, "sites": (2, 2), "site_names": ("A", "b")}, "invalid site name"),
        ({"edge_nodes": 3, "endpoint_site": "dc1"}, "need sites"),
    ],
)
def test_inconsistent_sites_are_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        Topology(**kwargs)


def test_a_topology_of_sites_survives_its_state_and_one_site_keeps_the_old_shape():
    topo = Topology(edge_nodes=4, sites=(1, 3), site_names=("north", "south"), subnet="10.1.2.0/24")
    assert Topology.from_dict(topo.to_dict()) == topo
    assert Topology.from_dict(topo.to_dict()).host("e3").site == "south"
    plain = Topology(edge_nodes=3)
    assert "sites" not in plain.to_dict() and Topology.from_dict(plain.to_dict()) == plain
    assert plain.host("e0").site is None
    # placing a topology keeps its sites
    placed = topo.on_subnet("10.9.9.0/24").with_addresses(
        {h.name: f"192.168.1.{i + 1}" for i, h in enumerate(topo.hosts)}
    )
    assert placed.sites == (1, 3) and placed.host("ep").site == "north"


def _tokens(topo: Topology) -> dict[str, int]:
    return {h.name: config.node_token(topo, h) for h in topo.edges}


def test_each_site_has_its_own_even_tokens_and_no_token_is_shared():
    topo = Topology(edge_nodes=9, sites=(3, 3, 3))
    tokens = _tokens(topo)
    assert len(set(tokens.values())) == 9
    for site in ("dc1", "dc2", "dc3"):
        ring = sorted(tokens[h.name] for h in topo.site_nodes(site))
        gaps = [(b - a) % RING for a, b in zip(ring, ring[1:] + ring[:1], strict=True)]
        # each datacenter's replicas follow its own tokens: each owns a third of the ring
        assert max(gaps) - min(gaps) <= 2, (site, gaps)
    # one site: the tokens of before (evenly spaced over all nodes)
    plain = Topology(edge_nodes=3)
    assert list(_tokens(plain).values()) == [config.initial_token(i, 3) for i in range(3)]


def test_a_node_of_a_site_gets_the_gossiping_snitch_and_its_rackdc_file(tmp_path: Path):
    topo = Topology(edge_nodes=4, sites=(2, 2), subnet="10.1.2.0/24")
    e2 = topo.host("e2")
    values = config.node_settings(config.CassandraSettings(), topo, e2, tmp_path)
    assert values["endpoint_snitch"] == "GossipingPropertyFileSnitch"
    assert values["initial_token"] == str(config.initial_token(0, 2) + 1)
    assert config.rackdc_properties(e2).splitlines() == [
        "dc=dc2",
        "rack=rack1",
        "prefer_local=false",
    ]
    plain = Topology(edge_nodes=2, subnet="10.1.2.0/24")
    values = config.node_settings(config.CassandraSettings(), plain, plain.host("e0"), tmp_path)
    assert values["endpoint_snitch"] == "SimpleSnitch"
    assert config.rackdc_properties(plain.host("e0")).startswith("dc=datacenter1\n")
    args = jvm.jvm_args(
        settings=config.CassandraSettings(build="stock"),  # a stock classpath below
        classpath="cp",
        node_dir=tmp_path,
        run_id="r",
        host="e2",
    )
    assert (
        f"-Dcassandra-rackdc.properties=file://{tmp_path}/conf/cassandra-rackdc.properties" in args
    )


def test_the_snitch_is_the_testbeds_own_on_a_testbed_of_sites():
    sites = Topology(edge_nodes=4, sites=(2, 2))
    for settings in (
        config.CassandraSettings(overrides={"endpoint_snitch": "SimpleSnitch"}),
        config.CassandraSettings(node_overrides={"e1": {"endpoint_snitch": "SimpleSnitch"}}),
    ):
        with pytest.raises(ConfigError, match="sites are the datacenters"):
            settings.check_hosts(sites)
        settings.check_hosts(Topology(edge_nodes=4))  # one site: a user's choice, as before


def _layouts(total: int, most: int = 9):
    """Every list of site sizes summing to ``total``."""
    if total == 0:
        yield ()
        return
    for first in range(1, min(total, most) + 1):
        for rest in _layouts(total - first, most):
            yield (first, *rest)


def test_no_layout_of_sites_gives_two_nodes_one_token():
    # one rounding of i * 2^64 / n per token: i * (2^64 // n) gave 3,6 and 2,1,6 a shared
    # token (found by review)
    for total in range(1, 10):
        for sizes in _layouts(total):
            tokens = _tokens(Topology(edge_nodes=total, sites=sizes))
            assert len(set(tokens.values())) == total, (sizes, tokens)


NODETOOL_STATUS_2DC = """Datacenter: dc1
===============
Status=Up/Down
|/ State=Normal/Leaving/Joining/Moving
--  Address     Load       Tokens  Owns (effective)  Host ID                               Rack
UN  10.1.2.11   70.2 KiB   1       50.0%             2f0c8a4e-7a53-4a39-9d65-0c2c8f0b7c11  rack1
UN  10.1.2.12   69.9 KiB   1       50.0%             3a1d9b5f-8b64-4b4a-ae76-1d3d9f1c8d22  rack1

Datacenter: dc2
===============
Status=Up/Down
|/ State=Normal/Leaving/Joining/Moving
--  Address     Load       Tokens  Owns (effective)  Host ID                               Rack
UN  10.1.2.13   70.1 KiB   1       50.0%             4b2e0c6a-9c75-4c5b-bf87-2e4e0a2d9e33  rack1
DN  10.1.2.14   ?          1       50.0%             5c3f1d7b-0d86-4d6c-c098-3f5f1b3e0f44  rack1
"""


def test_nodetool_status_of_two_datacenters_is_read_per_node():
    from testbed.access import parse_nodetool_datacenters, parse_nodetool_status

    assert parse_nodetool_datacenters(NODETOOL_STATUS_2DC) == {
        "10.1.2.11": "dc1", "10.1.2.12": "dc1", "10.1.2.13": "dc2", "10.1.2.14": "dc2",
    }  # fmt: skip
    assert parse_nodetool_status(NODETOOL_STATUS_2DC)["10.1.2.14"] == "DN"


def test_the_sites_profile_puts_a_lan_inside_each_site_and_the_wan_between_them():
    from emulation import links

    topo = Topology(edge_nodes=5, sites=(2, 3), endpoint_site="dc2")
    m = links.build("sites", topo, delay_ms=50, loss_pct=2.5, jitter_ms=5)
    assert m.rtt_ms("e0", "e1") == m.rtt_ms("e2", "e4") == 2 * links.LAN_DELAY_MS
    assert m.rtt_ms("e1", "e2") == m.rtt_ms("e4", "e0") == 100
    assert m.rtt_ms("ep", "e3") == 2 * links.LAN_DELAY_MS  # the endpoint's own site
    assert m.rtt_ms("ep", "e0") == 100
    assert m.link("e0", "e2").loss_pct == 2.5 and m.link("e0", "e2").jitter_ms == 5
    assert m.link("e0", "e1").loss_pct == 0 and m.link("ep", "e2").jitter_ms == 0
    with pytest.raises(ConfigError, match="needs a topology of sites"):
        links.build("sites", Topology(edge_nodes=3), delay_ms=50, loss_pct=0)


@pytest.mark.parametrize(
    "level, local, want",
    [
        ("LOCAL_QUORUM", "dc1", (2, 0)),  # a quorum of dc1's 3: no WAN
        ("LOCAL_ONE", "dc2", (1, 0)),
        ("EACH_QUORUM", "dc1", (6, 4)),  # 2 in each of 3 sites: 4 across the WAN
        ("QUORUM", "dc1", (5, 2)),  # 5 of 9: dc1's 3 cannot make it alone
        ("ALL", "dc3", (9, 6)),
        ("ONE", "dc1", (1, 0)),
        ("TWO", "dc1", (2, 0)),
    ],
)
def test_acks_per_level_on_three_sites_of_three_replicas(level, local, want):
    from model.consistency import site_acks

    assert site_acks(level, {"dc1": 3, "dc2": 3, "dc3": 3}, local) == want


def test_levels_a_keyspace_of_sites_cannot_serve_are_refused():
    from model.consistency import site_acks

    with pytest.raises(ConfigError, match="needs replicas in the coordinator's site 'dc2'"):
        site_acks("LOCAL_QUORUM", {"dc1": 3, "dc2": 0}, "dc2")
    with pytest.raises(ConfigError, match="THREE needs 3 replicas; the keyspace has 2"):
        site_acks("THREE", {"dc1": 1, "dc2": 1}, "dc1")
    assert site_acks("QUORUM", {"dc1": 1, "dc2": 1}, "dc1") == (2, 1)
    assert site_acks("QUORUM", {"dc1": 5, "dc2": 1}, "dc1") == (4, 0)  # local alone


def test_the_writer_replicates_per_site_and_coordinates_through_its_own_site():
    from cassandra.policies import DCAwareRoundRobinPolicy, RoundRobinPolicy, TokenAwarePolicy

    from testbed import client
    from workloads import writes

    assert client.replication({"dc2": 2, "dc1": 3}) == (
        "{'class': 'NetworkTopologyStrategy', 'dc1': 3, 'dc2': 2}"
    )
    assert client.replication(3) == "{'class': 'SimpleStrategy', 'replication_factor': 3}"
    local = writes.make_policy("round-robin", "dc2")
    assert isinstance(local, DCAwareRoundRobinPolicy) and local.local_dc == "dc2"
    assert local.used_hosts_per_remote_dc == 0  # never a coordinator of another site
    aware = writes.make_policy("token-aware", "dc2")
    assert isinstance(aware, TokenAwarePolicy)
    assert isinstance(aware._child_policy, DCAwareRoundRobinPolicy)
    assert type(writes.make_policy("round-robin")) is RoundRobinPolicy  # one site: as before
