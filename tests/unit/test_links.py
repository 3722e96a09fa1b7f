import pytest

from emulation import links
from emulation.links import Link, LinkMatrix
from testbed import ConfigError, Topology

TOPO = Topology(edge_nodes=3)


def test_uniform_every_pair_both_directions():
    m = links.uniform(TOPO, 50, 2.5)
    pairs = [(s, d) for s, d, _ in m.shaped()]
    assert len(pairs) == 4 * 3  # every ordered pair of 4 hosts, endpoint included
    assert m.rtt_ms("e0", "e2") == m.rtt_ms("ep", "e1") == 100
    assert m.round_trip_loss_pct("e0", "e1") == pytest.approx(4.9375)


def test_paper_profile():
    m = links.paper(TOPO, 20, 7.5)
    assert m.link("e0", "e1") == Link(20, 0, 7.5)
    assert m.link("e1", "ep") == Link(10, 0, 0)
    assert not m.link("ep", "e0").shaped  # the endpoint's own egress is not shaped
    assert m.rtt_ms("e0", "e1") == 40
    assert m.rtt_ms("ep", "e2") == 10
    assert len(list(m.shaped())) == 3 * 2 + 3


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"delay_ms": -1}, "delay_ms must be between 0 and 10000"),
        ({"delay_ms": 10_001}, "delay_ms"),
        ({"loss_pct": 101}, "loss_pct must be between 0 and 100"),
        ({"loss_pct": -0.5}, "loss_pct"),
        ({"delay_ms": float("nan")}, "must be a number"),
        ({"delay_ms": "10"}, "must be a number"),
        ({"delay_ms": 5, "jitter_ms": 6}, "cannot exceed"),
        ({"rate_mbit": 0}, "rate_mbit"),
    ],
)
def test_link_validation(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        Link(**kwargs)


def test_matrix_rejects_unknown_hosts_and_self_links():
    with pytest.raises(ConfigError, match="unknown host 'e7'"):
        LinkMatrix(TOPO, {("e0", "e7"): Link(1)})
    with pytest.raises(ConfigError, match="no link to itself"):
        LinkMatrix(TOPO, {("e1", "e1"): Link(1)})


def test_build_unknown_profile_and_missing_file():
    with pytest.raises(ConfigError, match="unknown profile 'mesh'"):
        links.build("mesh", TOPO)
    with pytest.raises(ConfigError, match="needs a path"):
        links.build("file", TOPO)
    with pytest.raises(ConfigError, match="not found"):
        links.build("file", TOPO, path="/nonexistent.toml")


def test_from_toml(tmp_path):
    path = tmp_path / "links.toml"
    path.write_text(
        """
[default]
delay_ms = 5

[[link]]
src = "e0"
dst = "*"
delay_ms = 30
loss_pct = 1.5

[[link]]
src = "ep"
dst = "e2"
jitter_ms = 2
"""
    )
    m = links.from_toml(TOPO, path)
    assert m.link("e0", "e1") == Link(30, 0, 1.5)
    assert m.link("e0", "ep") == Link(30, 0, 1.5)
    assert m.link("e1", "e0") == Link(5)
    assert m.link("ep", "e2") == Link(5, 2, 0)
    assert m.rtt_ms("e0", "e1") == 35


@pytest.mark.parametrize(
    "text, message",
    [
        ("[[link]]\nsrc='e0'\ndst='e9'\ndelay_ms=1", "unknown host 'e9'"),
        ("[[link]]\nsrc='e0'\ndelay_ms=1", "needs src and dst"),
        ("[default]\ndelay=1", "unknown keys"),
        ("[links]\n", "unknown tables"),
        ("[default]\nloss_pct=200", "loss_pct"),
        ("not toml [", "invalid TOML"),
        ("default = 3", r"\[default\] must be a table, got 3"),
        ("link = [1]", r"\[\[link\]\] #1 must be a table, got 1"),
        ("link = {src = 'e0', dst = 'e1'}", "link must be an array of tables"),
        ("[default]\ndelay_ms = 'x'", r"bad.toml: \[default\]: delay_ms must be a number"),
    ],
)
def test_from_toml_errors(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        links.from_toml(TOPO, path)
