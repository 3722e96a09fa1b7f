"""model.rtt: exact limits, the exact computation against the simulation, the CLI.

Pure: no testbed. The integration test (test_3_sweep) checks the model against a real
sweep."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from analysis import model as model_cli
from analysis import prediction
from analysis.results import load
from analysis.synthetic import make_store
from common.errors import ConfigError
from emulation import links
from model import rtt as m
from model.tcp import TCP_RETRIES2
from testbed.topology import Topology

S = 5.0  # a constant service time, ms
SERVICE = m.Service.constant(S)


def scenario(nodes, rf, latency, loss=0.0, profile="uniform", cl="LOCAL_QUORUM", **kw):
    matrix = links.build(profile, Topology(edge_nodes=nodes), delay_ms=latency, loss_pct=loss)
    return m.Scenario(matrix, rf, cl, tcp=m.Tcp(), **kw)


# -- exact limits without loss ---------------------------------------------------------------


@pytest.mark.parametrize("rf", [2, 3, 4, 5])
def test_no_loss_uniform_is_two_round_trips_for_every_write(rf):
    """uniform: ep <-> c is 2L; LOCAL_QUORUM with RF >= 2 always waits for one more 2L."""
    p = m.predict(scenario(5, rf, 20), SERVICE)
    assert p.method == "exact"
    for value in p.summary().values():
        assert value == pytest.approx(S + 2 * 20 + 2 * 20)


def test_no_loss_rf1_paper_profile_mixes_local_and_remote_writes():
    """paper: 10 ms back to the endpoint; RF 1's coordinator is the replica 1 time in 5."""
    p = m.predict(scenario(5, 1, 30, profile="paper"), SERVICE)
    assert p.mean == pytest.approx(S + 10 + 0.8 * 60)
    assert p.quantile(0.1) == pytest.approx(S + 10)  # local writes: the lowest 20 %
    assert p.quantile(0.5) == pytest.approx(S + 10 + 60)
    assert p.cdf(S + 10) == pytest.approx(0.2)


def test_cl_one_against_all():
    """RF 3 of 5: ONE answers locally when the coordinator is a replica (3/5); ALL waits
    for every replica: always one remote round trip (they are all 2L here)."""
    one = m.predict(scenario(5, 3, 25, cl="ONE"), SERVICE)
    every = m.predict(scenario(5, 3, 25, cl="ALL"), SERVICE)
    assert one.mean == pytest.approx(S + 50 + 0.4 * 50)
    assert every.mean == pytest.approx(S + 50 + 50)


def test_token_aware_coordinator_is_always_a_replica():
    p = m.predict(scenario(5, 1, 40, policy="token-aware"), SERVICE)
    assert p.summary()["p99"] == pytest.approx(S + 80)  # never a remote round trip
    p3 = m.predict(scenario(5, 3, 40, policy="token-aware"), SERVICE)
    assert p3.mean == pytest.approx(S + 80 + 80)  # QUORUM: one remote ack, always


def test_asymmetric_matrix_waits_for_the_kth_fastest_replica():
    topo = Topology(edge_nodes=3)
    near, far = links.Link(5), links.Link(50)
    table = {
        ("e0", "e1"): near, ("e1", "e0"): near,
        ("e0", "e2"): far, ("e2", "e0"): far,
        ("e1", "e2"): far, ("e2", "e1"): far,
    }  # fmt: skip
    s = m.Scenario(links.LinkMatrix(topo, table), 3, "ALL", "token-aware")
    # ALL: the slowest remote round trip of the coordinator; e0: max(10, 100), e1: 100,
    # e2: 100 -> every write 100 ms plus S (the endpoint links are unshaped)
    assert m.predict(s, SERVICE).mean == pytest.approx(S + 100)
    q = m.Scenario(links.LinkMatrix(topo, table), 3, "QUORUM", "token-aware")
    # QUORUM (2 of 3, one local): the fastest remote: e0 10, e1 10, e2 100
    assert m.predict(q, SERVICE).mean == pytest.approx(S + (10 + 10 + 100) / 3)


# -- the pieces -----------------------------------------------------------------------------


def test_retransmission_chain_probabilities_and_backoff():
    d = m.retransmission_delay(0.1, 300.0, m.Tcp())
    assert d.probs.sum() == pytest.approx(1)
    assert d.values[:3].tolist() == [0, 300, 900]  # RTO, then RTO + 2 RTO
    assert d.probs[:3] == pytest.approx([0.9, 0.09, 0.009])
    linear = m.retransmission_delay(0.1, 300.0, m.Tcp(thin_linear_timeouts=True))
    assert linear.values[:3].tolist() == [0, 300, 600]


def test_rto_is_srtt_plus_rto_min_or_four_mean_deviations():
    tcp = m.Tcp()
    link = links.Link(50)
    assert m.rto_ms(tcp, link, links.Link(30)) == pytest.approx(80 + 200)
    big = links.Link(100, 80)  # a jitter whose 4·mdev exceeds rto_min
    mdev = math.hypot(80, 80) * math.sqrt(2 / math.pi)
    assert m.rto_ms(tcp, big, big) == pytest.approx(200 + 4 * mdev)


def test_kth_smallest_is_exact_against_enumeration():
    a = m.Discrete.of([1, 4, 9], [0.5, 0.3, 0.2])
    b = m.Discrete.of([2, 4], [0.6, 0.4])
    c = m.Discrete.of([0, 10], [0.1, 0.9])
    for k in (1, 2, 3):
        got = m.kth_smallest([a, b, c], k)
        brute: dict[float, float] = {}
        for (x, px), (y, py), (z, pz) in itertools.product(
            zip(a.values, a.probs, strict=True),
            zip(b.values, b.probs, strict=True),
            zip(c.values, c.probs, strict=True),
        ):
            v = sorted([x, y, z])[k - 1]
            brute[v] = brute.get(v, 0) + px * py * pz
        assert dict(zip(got.values.tolist(), got.probs.tolist(), strict=True)) == pytest.approx(
            {float(v): p for v, p in brute.items() if p > 0}
        )


def test_tcp_settings_from_proc(tmp_path):
    (tmp_path / "tcp_rto_min_us").write_text("50000\n")
    (tmp_path / "tcp_thin_linear_timeouts").write_text("1\n")
    tcp = m.tcp_from_proc(tmp_path)
    assert tcp.rto_min_ms == 50 and tcp.thin_linear_timeouts and tcp.rto_max_ms == 120_000
    assert m.tcp_from_proc(tmp_path / "missing").rto_min_ms == 200  # older kernels
    assert m.Tcp.from_dict(tcp.to_dict()) == tcp


# -- exact against simulation ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "rf", "latency", "loss", "profile"),
    [(5, 2, 50, 7.5, "paper"), (5, 3, 20, 2.5, "uniform"), (3, 1, 100, 7.5, "paper")],
)
def test_simulation_without_in_order_delivery_agrees_with_the_exact_computation(
    nodes, rf, latency, loss, profile
):
    s = scenario(nodes, rf, latency, loss, profile)
    service = m.Service(np.array([3.0, 4.0, 8.0]), np.array([2.0, 3.0]), "test")
    exact = m.predict(s, service, method="exact")
    sim = m.simulate(s, service, hol=False, writes=60, chains=1000, seed=3)
    se = sim.samples.std() / math.sqrt(sim.samples.size)
    assert abs(sim.mean - exact.mean) < 4 * se, (sim.mean, exact.mean, se)
    for q in (0.5, 0.9):  # the body is discrete here: the same atoms
        assert sim.quantile(q) == pytest.approx(exact.quantile(q), abs=1.0)
    assert exact.cdf(exact.no_loss_max + 8.0) < 1  # loss left some writes above


def test_simulation_equals_the_exact_computation_when_nothing_can_wait_in_line():
    """Loss only on the client's links: nothing is in flight behind a lost message (the
    client sends the next write after the answer), so in-order delivery changes nothing."""
    topo = Topology(edge_nodes=4)
    lossy, edge = links.Link(10, loss_pct=5), links.Link(20)
    table = {(a.name, b.name): edge for a in topo.edges for b in topo.edges if a != b}
    for e in topo.edges:
        table[("ep", e.name)] = table[(e.name, "ep")] = lossy
    s = m.Scenario(links.LinkMatrix(topo, table), 3)
    exact = m.predict(s, SERVICE)
    assert exact.method == "exact"
    sim = m.simulate(s, SERVICE, writes=60, chains=1000, seed=4)
    se = sim.samples.std() / math.sqrt(sim.samples.size)
    assert abs(sim.mean - exact.mean) < 4 * se


def test_in_order_delivery_makes_a_spare_replicas_loss_cost_later_writes():
    """At high RF a write does not wait for a spare replica's lost mutation, but the next
    writes on that connection do: the simulation's mean is above the exact one's."""
    s = scenario(5, 4, 50, 7.5, "paper")
    exact = m.predict(s, SERVICE, method="exact")
    sim = m.predict(s, SERVICE)
    assert sim.method == "simulation"
    assert sim.mean > exact.mean * 1.02


def test_jitter_is_simulated_and_spreads_the_body():
    topo = Topology(edge_nodes=3)
    s = m.Scenario(links.uniform(topo, 30, 0, jitter_ms=5), 2)
    p = m.predict(s, SERVICE)
    assert p.method == "simulation"
    assert p.mean == pytest.approx(S + 120, abs=1.5)
    assert p.quantile(0.95) > p.quantile(0.05) + 10
    # the threshold between writes loss touched and the others: the configured delays
    assert p.no_loss_max == pytest.approx(120)


# -- partitions and extreme loss --------------------------------------------------------------


def partitioned(cl="QUORUM", rf=3):
    """3 nodes, 10 ms everywhere, e0 cut off from e1 and e2 (the endpoint reaches all)."""
    topo = Topology(edge_nodes=3)
    cut = links.Link(10, 0, 100)
    table = {(a, b): cut for a in ("e1", "e2") for b in ("e0",)}
    table |= {(b, a): cut for a, b in table}
    matrix = links.LinkMatrix(topo, {**links.uniform(topo, 10, 0).links, **table})
    return m.Scenario(matrix, rf, cl, tcp=m.Tcp())


def test_a_partitioned_coordinator_times_out_after_the_write_timeout():
    """QUORUM at RF 3: a write coordinated by e0 (1 in 3) needs one remote ack and gets
    none: Cassandra's write timeout ends it; e1 and e2 have each other."""
    s = partitioned()
    exact = m.predict(s, SERVICE, method="exact")
    expected = S + 20 + (m.WRITE_TIMEOUT_MS + 2 * 20) / 3
    assert exact.mean == pytest.approx(expected)
    assert exact.cdf(S + 40) == pytest.approx(2 / 3)
    simulated = m.predict(s, SERVICE)  # loss between edge nodes: the simulation
    assert simulated.method == "simulation"
    assert simulated.mean == pytest.approx(expected, rel=0.03)
    assert math.isfinite(simulated.no_loss_max)


def test_a_client_that_reaches_no_coordinator_waits_for_its_own_timeout():
    topo = Topology(edge_nodes=3)
    s = m.Scenario(links.uniform(topo, 10, 100), 1, "ONE", tcp=m.Tcp())
    for method in ("exact", "simulation"):
        p = m.predict(s, SERVICE, method=method)
        assert p.quantile(0.01) >= m.CLIENT_TIMEOUT_MS, method


@pytest.mark.parametrize("method", ["exact", "simulation"])
def test_extreme_loss_gives_finite_predictions(method):
    """99 % loss: chains of resends past tcp_retries2 no longer overflow the backoff."""
    p = m.predict(scenario(3, 2, 10, 99), SERVICE, method=method)
    assert all(math.isfinite(v) for v in p.summary().values())
    assert m.Tcp().backoff(5000) == 2.0**TCP_RETRIES2


# -- what the paper reports for 5 nodes ------------------------------------------------------


def test_the_model_orders_rf2_worst_at_high_loss_and_rf1_best_at_low_loss():
    for latency in (20, 50, 100):
        high = {
            rf: m.predict(scenario(5, rf, latency, 7.5, "paper"), SERVICE).mean
            for rf in range(1, 6)
        }
        assert max(high, key=lambda rf: high[rf]) == 2, high
        low = {
            rf: m.predict(scenario(5, rf, latency, 0.5, "paper"), SERVICE).mean
            for rf in range(1, 6)
        }
        assert min(low, key=lambda rf: low[rf]) == 1, low


# -- the service time from a baseline --------------------------------------------------------


def test_service_time_subtracts_the_configured_delay_and_drops_retransmitted_writes():
    base = scenario(5, 3, 0, 0.5, "paper")
    rtt = np.array([15.0, 16.0, 14.0, 260.0, 15.5])  # paper: 10 ms to the endpoint at 0 ms
    service = m.service_from_baseline(rtt, np.array([1, 0, 1, 1, 0]), base, "b")
    assert sorted(service.remote.tolist()) == pytest.approx([4.0, 5.0, 5.5, 6.0])
    assert "1 above" in service.source or "(1 above" in service.source


def test_an_unknown_coordinator_under_token_aware_is_a_replica():
    """Token-aware: the coordinator is always a replica, so at RF 1 a request whose
    coordinator was not recorded (-1) waited for no remote ack: only the endpoint's
    round trip (paper: 10 ms at 0 ms) is subtracted."""
    base = scenario(5, 1, 0, 0.5, "paper", policy="token-aware")
    service = m.service_from_baseline(np.array([15.0, 16.0]), np.array([-1, -1]), base, "b")
    assert service.local.tolist() == pytest.approx([5.0, 6.0])
    assert service.remote.size == 0


# -- bad input ------------------------------------------------------------------------------


def test_bad_scenarios_are_one_line_errors():
    with pytest.raises(ConfigError, match="RF 6"):
        scenario(5, 6, 10)
    with pytest.raises(ConfigError, match="THREE needs 3 acks"):
        scenario(5, 2, 10, cl="THREE")
    with pytest.raises(ConfigError, match="policy"):
        scenario(5, 2, 10, policy="nearest")
    with pytest.raises(ConfigError, match="timeouts"):
        scenario(3, 2, 10, write_timeout_ms=20_000)


def test_predict_cli_json_and_bad_input(capsys, tmp_path, monkeypatch):
    args = ["predict", "--nodes", "5", "--rf", "1..5", "--latency", "0..100..50"]
    assert model_cli.main([*args, "--loss", "7.5", "--json"]) == 0
    cells = json.loads(capsys.readouterr().out)["cells"]
    assert len(cells) == 15
    assert {
        "nodes",
        "rf",
        "latency_ms",
        "loss_pct",
        "predicted_mean_ms",
        "predicted_p99_ms",
    } <= set(cells[0])
    assert model_cli.main([*args, "--out", str(tmp_path)]) == 0
    assert (tmp_path / "model_predict.png").is_file()
    # without --out: the table, and nothing written where the command ran
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    capsys.readouterr()
    assert model_cli.main(args) == 0
    assert list(empty.iterdir()) == [] and "--out DIR" in capsys.readouterr().out
    # a level RF 1 cannot serve: that RF is left out, not the whole grid
    capsys.readouterr()
    two = ["predict", "--rf", "1..3", "--cl", "TWO", "--latency", "50", "--json"]
    assert model_cli.main(two) == 0
    rows = json.loads(capsys.readouterr().out)["cells"]
    assert {r["rf"] for r in rows} == {2, 3}
    for bad in (["--nodes", "0"], ["--loss", "101"], ["--latency", "50..10"], ["--cl", "SERIAL"]):
        assert model_cli.main(["predict", *bad]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err


def test_compare_on_a_store(tmp_path, capsys):
    """The CLI's data: every cell, the issue's keys, errors grouped per (nodes, loss,
    profile). The synthetic RTTs are not the model's, so this checks the plumbing only."""
    make_store(tmp_path, nodes=(3,), losses=(0.5,), latencies=(0, 20), writes=50)
    assert model_cli.main([str(tmp_path), "--json", "--no-report"]) == 0
    data = json.loads(capsys.readouterr().out)
    keys = {
        "cell_id", "nodes", "rf", "latency_ms", "loss_pct", "profile", "measured_mean_ms",
        "predicted_mean_ms", "measured_p99_ms", "predicted_p99_ms",
    }  # fmt: skip
    assert len(data["cells"]) == 6 and keys <= set(data["cells"][0])
    assert [(g["nodes"], g["loss_pct"], g["cells"]) for g in data["groups"]] == [(3, 0.5, 3)]
    assert (tmp_path / "analysis" / "model.json").is_file()
    results = load(tmp_path)
    again = prediction.compare(results)
    assert [r["predicted_mean_ms"] for r in again["cells"]] == [
        r["predicted_mean_ms"] for r in data["cells"]
    ]  # seeded: the same numbers every time


# -- the paper's claims ---------------------------------------------------------------------


def _means(fn, nodes=(5,), losses=(0.5, 7.5), lats=(20, 50, 100)):
    return {
        (n, loss, rf, lat): fn(n, rf, lat, loss)
        for n in nodes
        for loss in losses
        for rf in range(1, n + 1)
        for lat in lats
    }


def test_claims_on_means_where_the_answer_is_known():
    from analysis import claims

    def paperish(n, rf, lat, loss):  # RF 2 pays for loss, RF 1 is cheapest at low loss
        base = 10 + (1.6 if rf == 1 else 2) * lat
        return base * (1 + (0.5 if rf == 2 and loss > 1 else 0.02 * rf))

    means = _means(paperish)
    assert claims.rf2_worst_at_high_loss(means, 5)[0] == "holds"
    assert claims.rf1_best_at_low_loss(means, 5)[0] == "holds"
    assert claims.rf2_steepest_at_high_loss(means, 5)[0] == "holds"
    assert claims.rf2_similar_at_lower_loss(means, 5)[0] == "holds"
    assert claims.rf5_best_at_high_loss(means, 5)[0] == "does not hold"  # RF 1 is cheaper
    verdict, numbers = claims.phi_orders_loss_sensitivity(means, 5, "LOCAL_QUORUM")
    assert verdict == "holds only in part" and "Spearman +0.77" in numbers  # RF 2 alone
    backwards = _means(lambda n, rf, lat, loss: 10 + 2 * lat * (1 + rf * loss / 100))
    assert claims.phi_orders_loss_sensitivity(backwards, 5, "LOCAL_QUORUM")[0] == "does not hold"
    assert claims.rf3_same_across_node_counts(means, 5)[0].startswith("cannot tell")
    flat = _means(lambda n, rf, lat, loss: 10 + 2 * lat, nodes=(3, 4, 5))
    assert claims.rf3_same_across_node_counts(flat, 0)[0] == "holds"
    assert claims.rf345_similar(flat, 5)[0] == "holds"
    partly = {k: v * (1.5 if k[2] == 2 and k[3] == 100 else 1) for k, v in flat.items()}
    assert claims.rf2_worst_at_high_loss(partly, 5)[0] == "holds only at latencies 100 ms"
    # measured means carry standard errors: a ranking within 2 of them is no ranking
    near = {k: v + (1.0 if k[2] == 2 and k[1] == 7.5 else 0) for k, v in flat.items()}
    small = dict.fromkeys(near, 0.1)  # RF 2 worst by 1 ms = 7 standard errors
    assert claims.rf2_worst_at_high_loss(near, 5, small)[0] == "holds"
    large = dict.fromkeys(near, 1.0)  # 1 ms = 0.7 standard errors
    verdict, numbers = claims.rf2_worst_at_high_loss(near, 5, large)
    assert verdict == "cannot tell (within 2 standard errors at every latency)"
    assert "(8x the repetitions to tell)" in numbers  # (2 x sqrt(2) x 1 ms / 1 ms)^2 = 8
    assert claims.rf2_worst_at_high_loss(near, 5)[0] == "holds"  # the model's: exact
    # RF 3 worst and RF 4 within an error of it, RF 2 far below both: RF 2 is clearly not
    # the worst, whichever of RF 3 and 4 is
    low2 = {k: v + (10.0 if k[2] == 3 else 9.5 if k[2] == 4 else -20 if k[2] == 2 else 0)
            for k, v in flat.items()}  # fmt: skip
    assert claims.rf2_worst_at_high_loss(low2, 5, large)[0] == "does not hold"
    rows = claims.check(means, means, means)
    assert {r["id"] for r in rows} == {c[0] for c in claims.CLAIMS}
    assert "[5.1a, 5 nodes]" in claims.format_text(rows)
