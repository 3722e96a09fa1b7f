"""Sweeps of sites and of several consistency levels (pure logic): the grid and its cell
ids, the checks before anything starts, the model's placement of replicas per site and
the acks each level waits for, and the analysis of the levels' cells
(tests/integration/test_1d_sites_sweep.py runs one)."""

import math

import numpy as np
import pytest

from analysis import levels as levels_mod
from common.errors import ConfigError
from emulation import links
from experiments.settings.config import SweepConfig
from model import rtt
from testbed.topology import Topology


def sites_config(**kw) -> SweepConfig:
    base = dict(sites="3x3", latency_ms=(0, 50), loss_pct=(0.5,))
    return SweepConfig(**{**base, **kw})


def test_a_sweep_of_sites_has_its_nodes_profile_and_rfs_per_site():
    c = sites_config(cl="local_quorum,EACH_QUORUM")
    assert c.nodes == (9,) and c.profile == "sites" and c.sites == "3x3"
    assert c.levels == ("LOCAL_QUORUM", "EACH_QUORUM")
    assert c.rfs(9) == (1, 2, 3)  # up to the smallest site, not the node count
    assert sites_config(sites="2,3", rf=("k",)).rfs(5) == (2,)
    topo = c.topology(9)
    assert topo.site_names == ("dc1", "dc2", "dc3") and topo.endpoint_site == "dc1"


def test_levels_are_a_grid_dimension_and_only_they_change_the_ids():
    one = SweepConfig(nodes=(3,), latency_ms=(0,), loss_pct=(0.5,))
    assert [x.cell_id for x in one.cells()][:1] == ["n3-rf1-l0-p0.5-r1"]  # as stored before
    two = SweepConfig(nodes=(3,), latency_ms=(0,), loss_pct=(0.5,), cl="ONE,QUORUM", rf=(3,))
    assert [x.cell_id for x in two.cells()] == [
        "n3-rf3-l0-p0.5-cONE-r1",
        "n3-rf3-l0-p0.5-cQUORUM-r1",
    ]
    assert [two.level(x) for x in two.cells()] == ["ONE", "QUORUM"]
    # one network setting for both levels: measured back to back after one change
    assert len({x.network for x in two.cells()}) == 1
    s = sites_config(sites="2,3", rf=(1,), cl="QUORUM")
    assert [x.cell_id for x in s.cells()] == ["n5-s2_3-rf1-l0-p0.5-r1", "n5-s2_3-rf1-l50-p0.5-r1"]


def test_one_level_keeps_the_fingerprint_of_runs_stored_before_levels():
    # the fingerprint of the default configuration, as stored by earlier versions (their
    # nodes were stock, the default then)
    assert SweepConfig(cassandra_build="stock").fingerprint() == "392f878827fdc7d6"
    assert SweepConfig(cl="local_quorum", cassandra_build="stock").fingerprint() == (
        "392f878827fdc7d6"
    )
    assert SweepConfig.from_dict({"cl": ["LOCAL_QUORUM"]}).cl == "LOCAL_QUORUM"  # TOML
    assert SweepConfig().fingerprint() != SweepConfig(cl="LOCAL_QUORUM,ONE").fingerprint()


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(sites="3,2", rf=(3,)), "rf 3 is above the size of site 2"),
        (dict(sites="3,0"), "every site needs at least one node"),
        (dict(sites="3x3", nodes=(5,)), "sites 3x3 hold 9 nodes"),
        (dict(sites="1x3"), "one site"),
        (dict(sites="2x2", profile="uniform"), "not 'uniform'"),
        (dict(sites=None, profile="sites"), "needs sites"),
        (dict(cl="QUORUM,quorum"), "twice"),
        (dict(cl="LOCAL_SERIAL"), "lightweight transactions"),
    ],
)
def test_bad_sites_and_levels_are_refused_before_anything_starts(kw, message):
    with pytest.raises(ConfigError, match=message) as err:
        sites_config(**kw)
    assert "\n" not in str(err.value)


def test_an_rf_the_level_cannot_serve_is_refused_per_level():
    with pytest.raises(ConfigError, match="THREE needs 3 acks|consistency level THREE"):
        SweepConfig(nodes=(3,), rf=(2,), cl="ONE,THREE")


def scenario(level: str, rf: int, delay: float = 50.0, loss: float = 0.0, sites=(3, 3, 3), **kw):
    topo = Topology(edge_nodes=sum(sites), sites=sites)
    return rtt.Scenario(links.build("sites", topo, delay_ms=delay, loss_pct=loss), rf, level, **kw)


def test_replicas_are_placed_per_site_and_coordinators_are_the_endpoints_site():
    s = scenario("LOCAL_QUORUM", 2)
    placements = s.placements()
    assert len(placements) == s.placement_count() == 3**3 * 3
    assert math.isclose(sum(w for w, _, _ in placements), 1.0)
    site_of = {h.name: h.site for h in s.matrix.topology.edges}
    for _, c, replicas in placements:
        assert site_of[c] == "dc1"
        assert sorted(site_of[r] for r in replicas) == ["dc1"] * 2 + ["dc2"] * 2 + ["dc3"] * 2
    token = scenario("LOCAL_QUORUM", 2, policy="token-aware")
    assert all(c in replicas and site_of[c] == "dc1" for _, c, replicas in token.placements())


@pytest.mark.parametrize(
    "level, rf, wan_trips",
    [
        ("LOCAL_QUORUM", 3, 0),
        ("LOCAL_ONE", 1, 0),
        ("EACH_QUORUM", 3, 1),
        ("QUORUM", 3, 1),  # 5 of 9: the local 3 cannot make it
        ("ALL", 1, 1),
    ],
)
def test_without_loss_a_level_pays_a_wan_round_trip_exactly_when_it_needs_a_remote_ack(
    level, rf, wan_trips
):
    service = rtt.Service.constant(5.0)
    at0 = rtt.predict(scenario(level, rf, delay=0.0), service, method="exact").mean
    at50 = rtt.predict(scenario(level, rf, delay=50.0), service, method="exact").mean
    # at 0 ms the WAN is unshaped, faster than the LAN: a remote ack may be the first
    assert at50 - at0 == pytest.approx(wan_trips * 100.0, abs=2 * links.LAN_DELAY_MS)
    if not wan_trips:
        assert at50 == at0


def test_each_quorum_waits_for_the_slowest_site():
    # dc2 100 ms away, dc3 10 ms: the write waits for dc2's quorum, not the faster one's
    topo = Topology(edge_nodes=6, sites=(2, 2, 2))
    base = links.build("sites", topo, delay_ms=0, loss_pct=0)
    entries = {}
    for a in (h.name for h in topo.hosts):
        for b in (h.name for h in topo.hosts if h.name != a):
            sa, sb = topo.host(a).site, topo.host(b).site
            far = {sa, sb} == {"dc1", "dc2"}
            near = {sa, sb} == {"dc1", "dc3"}
            lan = base.link(a, b).delay_ms
            entries[(a, b)] = links.Link(50.0 if far else 5.0 if near else lan)
    matrix = links.LinkMatrix(topo, entries, profile="file")
    service = rtt.Service.constant(0.0)
    each = rtt.predict(rtt.Scenario(matrix, 1, "EACH_QUORUM"), service, method="exact")
    one = rtt.predict(rtt.Scenario(matrix, 1, "ONE"), service, method="exact")
    lan = 2 * links.LAN_DELAY_MS
    assert each.mean == pytest.approx(lan + 100.0)
    # the local replica: the coordinator itself half the time, else one LAN round trip
    assert one.mean == pytest.approx(lan + lan / 2)


@pytest.mark.parametrize("loss", [0.0, 2.5])
def test_the_simulation_agrees_with_the_exact_computation_on_sites(loss):
    # with loss, without in-order delivery (the exact computation leaves it out)
    service = rtt.Service.constant(3.0)
    for level in ("LOCAL_QUORUM", "EACH_QUORUM", "QUORUM"):
        s = scenario(level, 2, delay=30.0, loss=loss)
        exact = rtt.predict(s, service, method="exact").mean
        sim = rtt.simulate(s, service, hol=False, chains=2000).mean
        assert sim == pytest.approx(exact, rel=0.02), level


def test_loss_on_the_wan_slows_only_the_levels_that_cross_it():
    service = rtt.Service.constant(3.0)
    local = rtt.predict(scenario("LOCAL_QUORUM", 3, loss=7.5), service, method="simulation")
    assert local.mean == pytest.approx(3.0 + 2 * 0.25 + 0.5, abs=0.01)  # LAN only
    each = rtt.predict(scenario("EACH_QUORUM", 2, loss=7.5), service, method="simulation")
    assert each.mean > 3.0 + 0.5 + 100.5 + 10  # retransmissions on the WAN show


def test_the_service_time_counts_a_local_ack_as_no_remote_wait_only_where_it_is_one():
    s = scenario("LOCAL_ONE", 1)
    assert not s.needs_remote(True) and s.needs_remote(False)
    e = scenario("EACH_QUORUM", 3)
    assert e.needs_remote(True) and e.needs_remote(False)


def cell(level, rf, lat, mean, sites="2x2"):
    rng = np.random.default_rng(int(lat) + rf)
    return {
        "nodes": 4, "sites": sites, "loss_pct": 0.5, "rf": rf, "cl": level,
        "latency_ms": float(lat), "rtt_ms": rng.normal(mean, 0.1, 200), "errors": 0,
    }  # fmt: skip


def test_the_levels_table_gives_acks_wan_acks_and_the_rise_over_the_lowest_latency():
    cells = [
        cell("LOCAL_QUORUM", 2, 0, 2.0),
        cell("LOCAL_QUORUM", 2, 50, 2.5),
        cell("EACH_QUORUM", 2, 0, 3.0),
        cell("EACH_QUORUM", 2, 50, 104.0),
    ]
    model = {"cells": [
        {"nodes": 4, "sites": "2x2", "loss_pct": 0.5, "rf": 2, "cl": "EACH_QUORUM",
         "latency_ms": 50.0, "predicted_mean_ms": 104.0 * 1.05},
    ]}  # fmt: skip
    rows = levels_mod.table(cells, model)
    by = {(r["level"], r["latency_ms"]): r for r in rows}
    assert (by[("LOCAL_QUORUM", 50.0)]["acks"], by[("LOCAL_QUORUM", 50.0)]["wan_acks"]) == (2, 0)
    assert (by[("EACH_QUORUM", 50.0)]["acks"], by[("EACH_QUORUM", 50.0)]["wan_acks"]) == (4, 2)
    assert by[("EACH_QUORUM", 50.0)]["rise_ms"] == pytest.approx(101.0, abs=0.1)
    assert by[("EACH_QUORUM", 50.0)]["error"] == pytest.approx(0.05, abs=0.01)
    assert by[("LOCAL_QUORUM", 0.0)]["predicted_ms"] is None
    text = levels_mod.format_table(rows)
    assert "EACH_QUORUM" in text and "+5.0%" in text


def test_a_link_file_sets_the_lan_the_wan_and_links_between_named_sites(tmp_path):
    path = tmp_path / "edge.toml"
    path.write_text(
        "[lan]\ndelay_ms = 0.5\n[wan]\ndelay_ms = 40\nloss_pct = 2.5\nrate_mbit = 100\n"
        '[[link]]\nsrc = "dc1"\ndst = "dc3"\ndelay_ms = 80\n'
    )
    topo = Topology(edge_nodes=6, sites=(2, 2, 2))
    m = links.from_toml(topo, path)
    assert m.link("e0", "e1") == links.Link(0.5)  # inside dc1
    assert m.link("ep", "e0") == links.Link(0.5)  # the endpoint is on dc1's LAN
    assert m.link("e0", "e2") == links.Link(40, 0, 2.5, 100)  # dc1 -> dc2
    assert m.link("e1", "e5") == links.Link(80, 0, 2.5, 100)  # dc1 -> dc3, overridden
    assert m.link("e5", "e1") == links.Link(40, 0, 2.5, 100)  # one way only
    links.check_file(path)  # without a testbed: sites dc1..dc9 may be named
    with pytest.raises(ConfigError, match=r"\[lan\] and \[wan\] need a topology of sites"):
        links.from_toml(Topology(edge_nodes=3), path)
    bad = tmp_path / "bad.toml"
    bad.write_text('[[link]]\nsrc = "dc4"\ndst = "*"\ndelay_ms = 1\n')
    with pytest.raises(ConfigError, match=r"unknown host 'dc4' .*a site \(dc1, dc2, dc3\)"):
        links.from_toml(topo, bad)
    c = sites_config(sites="3x2", profile="file", links_file=str(path), latency_ms=(40,))
    assert c.profile == "file" and c.nodes == (6,)


def test_phi_per_kind_of_link_on_sites_and_the_papers_phi_on_one_site():
    from fractions import Fraction as F

    from analysis.phi import phi, phi_sites

    # 3 sites of 3, RF 3 each: the coordinator is always a replica
    assert phi_sites("LOCAL_QUORUM", 3, (3, 3, 3)) == (F(1, 2), 0)  # 1 of 2 local others
    assert phi_sites("EACH_QUORUM", 3, (3, 3, 3)) == (F(1, 2), F(4, 6))  # 2 of 3 in each
    assert phi_sites("QUORUM", 3, (3, 3, 3)) == (1, F(2, 6))  # 4 more: 2 local, 2 WAN
    # RF 1: the coordinator is the local replica a third of the time
    assert phi_sites("QUORUM", 1, (3, 3, 3)) == (F(2, 3), F(1, 2))
    for n in (3, 4, 5):  # one site: the paper's φ, exactly
        for rf in range(1, n + 1):
            for level in ("LOCAL_QUORUM", "ONE", "ALL"):
                assert phi_sites(level, rf, (n,)) == (phi(n, rf, level), 0), (n, rf, level)


def test_the_what_if_predicts_sites_per_level_without_measurements():
    from analysis.what_if import format_what_if, what_if

    tcp = rtt.Tcp()
    rows = {
        level: what_if((9,), (3,), (0.0, 50.0), (0.0,), profile="sites", cl=level,
                       baseline_ms=5.0, tcp=tcp, sites="3x3")
        for level in ("LOCAL_QUORUM", "EACH_QUORUM")
    }  # fmt: skip
    local, each = rows["LOCAL_QUORUM"], rows["EACH_QUORUM"]
    assert [r["sites"] for r in local] == ["3x3", "3x3"]
    assert local[1]["predicted_mean_ms"] == pytest.approx(local[0]["predicted_mean_ms"])
    assert each[1]["predicted_mean_ms"] - each[0]["predicted_mean_ms"] == pytest.approx(
        100.0, abs=2 * links.LAN_DELAY_MS
    )
    assert "Sites 3x3: RF per site" in format_what_if(each, 5.0)
    assert what_if((9,), (4,), (0.0,), (0.0,), profile="sites", sites="3x3", tcp=tcp) == []
