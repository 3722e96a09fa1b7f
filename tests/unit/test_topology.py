import pytest

from testbed import ConfigError, Topology


def test_default_hosts_and_addresses():
    topo = Topology(edge_nodes=5)
    assert [h.name for h in topo.hosts] == ["e0", "e1", "e2", "e3", "e4", "ep"]
    assert [h.address for h in topo.edges] == [f"10.77.0.{11 + i}" for i in range(5)]
    assert topo.endpoint.address == "10.77.0.10"
    assert topo.endpoint.role == "endpoint"
    assert all(h.prefixlen == 24 for h in topo.hosts)
    assert len({h.address for h in topo.hosts}) == 6


@pytest.mark.parametrize("k", [0, -1, 10, 100])
def test_node_count_out_of_range(k):
    with pytest.raises(ConfigError, match="between 1 and 9"):
        Topology(edge_nodes=k)


@pytest.mark.parametrize("k", ["3", 2.5, True, None])
def test_node_count_not_an_integer(k):
    with pytest.raises(ConfigError, match="integer"):
        Topology(edge_nodes=k)


@pytest.mark.parametrize(
    "names", [("E0", "e1"), ("e0", "e-1"), ("0a", "e1"), ("e0", "sw"), ("x" * 13, "e1")]
)
def test_bad_names(names):
    with pytest.raises(ConfigError, match="invalid host name"):
        Topology(edge_nodes=2, edge_names=names)


def test_duplicate_names():
    with pytest.raises(ConfigError, match="duplicate host names: ep"):
        Topology(edge_nodes=2, edge_names=("a", "ep"))


def test_name_count_mismatch():
    with pytest.raises(ConfigError, match="2 names for 3 edge nodes"):
        Topology(edge_nodes=3, edge_names=("a", "b"))


@pytest.mark.parametrize(
    "subnet, message",
    [
        ("8.8.8.0/24", "not a private"),
        ("10.0.0.1/24", "invalid subnet"),
        ("banana", "invalid subnet"),
        ("10.1.2.0/29", "too small"),
        ("127.0.0.0/24", "not a private"),
    ],
)
def test_bad_subnets(subnet, message):
    with pytest.raises(ConfigError, match=message):
        Topology(edge_nodes=3, subnet=subnet)


def test_custom_subnet_and_lookup():
    topo = Topology(edge_nodes=3, subnet="192.168.50.0/26")
    assert topo.host("e2").address == "192.168.50.13"
    with pytest.raises(ConfigError, match="unknown host 'e7'.*e0, e1, e2, ep"):
        topo.host("e7")


def test_frozen_and_roundtrip():
    topo = Topology(edge_nodes=4)
    with pytest.raises(AttributeError):
        topo.edge_nodes = 5  # type: ignore[misc]  # the point: a frozen field refuses it
    assert Topology.from_dict(topo.to_dict()) == topo
