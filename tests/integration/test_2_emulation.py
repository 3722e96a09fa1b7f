"""Shaping a running cluster with the machine's default shaper (tcconfig's netem where
the kernel has it, the host shaper where it has not): measured RTT/loss match the
configured links, nothing is restarted, clear restores the baseline."""

import os
import re
import statistics
import subprocess

import pytest
from scipy import stats

from emulation import api, links
from emulation.verify import measure_pair

from .conftest import ping_rtts_ms, rtt_tolerance_ms, run_cli


def _edge_pids(tb):
    return {n.name: n.pid for n in tb.nodes.values()}


def _ping(tb, src: str, dst: str, count: int, interval_s: float) -> tuple[list[float], float]:
    """iputils ping from ``src`` to ``dst``'s address, an instrument the project did not
    write: the round trips it printed (ms; stamped by the kernel on arrival) and the
    fraction of echoes it says were lost."""
    address = tb.topology.host(dst).address
    argv = ["ping", "-n", "-c", str(count), "-i", f"{interval_s:g}", "-W", "5", address]
    proc = tb.exec(src, argv, check=False, timeout=count * interval_s + 60)
    sent = re.search(r"(\d+) packets transmitted, (\d+) received", proc.stdout)
    assert sent, proc.stdout[-500:] + proc.stderr
    transmitted, received = int(sent.group(1)), int(sent.group(2))
    assert transmitted == count, proc.stdout[-500:]
    rtts = ping_rtts_ms(proc.stdout)
    return rtts, 1 - received / transmitted


def _kernel_runs_netem() -> bool:
    """Asked of the kernel with tc itself, not with the code under test: does a netem
    qdisc go on (on lo of a scratch namespace)?"""
    ns = f"netemq{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        argv = ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem",
                "delay", "1ms"]  # fmt: skip
        return subprocess.run(argv, capture_output=True).returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=True)


def test_invalid_settings_are_rejected_without_touching_the_network(cluster):
    before = api.show(cluster)
    for args, message in [
        (["--latency", "-5"], "--latency: expected a number from 0 to 10000 ms, got '-5'"),
        (["--latency", "20000"], "--latency: expected a number from 0 to 10000 ms, got '20000'"),
        (["--loss", "150"], "--loss: expected a number from 0 to 100 %, got '150'"),
        (["--profile", "file", "--file", "/nonexistent.toml"], "link file not found"),
        (["--latency", "5", "--jitter", "9"], "cannot exceed"),
    ]:
        proc = run_cli("set", *args, module="emulation", run=cluster.run_id)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr
    assert api.show(type(cluster).attach(cluster.run_id)) == before


@pytest.mark.parametrize("delay_ms, loss_pct", [(0, 0), (20, 2.5), (100, 0)])
def test_uniform_rtt_and_loss_between_edge_nodes(cluster, delay_ms, loss_pct):
    pids = _edge_pids(cluster)
    matrix = links.uniform(cluster.topology, delay_ms, loss_pct)
    result = api.set_links(cluster, matrix)
    # auto: tcconfig's netem where the kernel has it, else the host shaper
    assert result["shaper"] == ("direct" if _kernel_runs_netem() else "host")
    # 2000 echoes: the exact 99.9 % binomial range of 4.94 % is 3.4-6.6 %, so one-way
    # loss (2.5 %) or loss applied twice each way (9.6 %) fails, and chance rarely does
    pair = measure_pair(cluster, matrix, "e0", "e1", loss_probes=2000, level=0.999)
    assert pair.configured_rtt_ms == 2 * delay_ms
    assert abs(pair.median_rtt_ms - 2 * delay_ms) <= rtt_tolerance_ms(2 * delay_ms), pair
    assert pair.probes >= (2000 if loss_pct else 100)
    assert pair.loss_ok, pair
    # the same with ping: every echo waits both delays (none is early, whatever the load),
    # the fastest within 0.5 ms of them (docs/network.md measured +0.1-0.2 ms medians),
    # the median within the tolerance, and loss in the same exact 99.9 % binomial range
    count = 2000 if loss_pct else 100
    rtts, lost = _ping(cluster, "e0", "e1", count, 0.005 if loss_pct else 0.02)
    assert 2 * delay_ms <= min(rtts) <= 2 * delay_ms + 0.5, sorted(rtts)[:5]
    assert abs(statistics.median(rtts) - 2 * delay_ms) <= rtt_tolerance_ms(2 * delay_ms)
    round_trip = 1 - (1 - loss_pct / 100) ** 2
    low, high = stats.binom.interval(0.999, count, round_trip)
    assert low <= lost * count <= high, (lost, round_trip)
    assert _edge_pids(cluster) == pids and all(n.alive() for n in cluster.nodes.values())


def test_paper_profile_edge_links_and_fixed_endpoint_links(cluster):
    matrix = links.paper(cluster.topology, 20, 0)
    api.set_links(cluster, matrix)
    edge = measure_pair(cluster, matrix, "e1", "e2")
    endpoint = measure_pair(cluster, matrix, "ep", "e0")
    assert edge.median_rtt_ms is not None and endpoint.median_rtt_ms is not None, (edge, endpoint)
    assert abs(edge.median_rtt_ms - 40) <= rtt_tolerance_ms(40), edge
    assert abs(endpoint.median_rtt_ms - 10) <= rtt_tolerance_ms(10), endpoint


def test_cli_show_verify_and_clear_return_to_baseline(cluster):
    # the shared cluster is in use by this test process: changing it needs --force
    args = ["set", "--profile", "uniform", "--latency", "50", "--loss", "2.5"]
    before = api.configured(type(cluster).attach(cluster.run_id)).to_dict()
    refused = run_cli(*args, module="emulation", run=cluster.run_id)
    assert refused.returncode == 2, refused.stderr
    assert f"is in use by pid {os.getpid()}" in refused.stderr
    assert api.configured(type(cluster).attach(cluster.run_id)).to_dict() == before
    # the done-when sequence: uniform 50 ms, 2.5 % -> ~100 ms RTT, ~4.9 % loss
    proc = run_cli(*args, "--force", module="emulation", run=cluster.run_id)
    assert proc.returncode == 0, proc.stderr
    shown = run_cli("show", "--json", module="emulation", run=cluster.run_id)
    import json

    data = json.loads(shown.stdout)
    assert data["matrix"]["profile"] == "uniform"
    assert {(l["delay_ms"], l["loss_pct"]) for l in data["matrix"]["links"]} == {(50.0, 2.5)}
    verified = run_cli(
        "verify",
        "--json",
        "--sample",
        "1",
        "--level",
        "0.999",
        "--loss-probes",
        "2000",
        module="emulation",
        run=cluster.run_id,
    )
    assert verified.returncode == 0, verified.stderr
    pair = json.loads(verified.stdout)["pairs"][0]
    assert abs(pair["median_rtt_ms"] - 100) <= rtt_tolerance_ms(100)
    assert pair["configured_loss_pct"] == pytest.approx(4.9375)
    assert pair["probes"] >= 2000 and pair["loss_ok"], pair
    assert json.loads(verified.stdout)["loss_location"]
    cleared = run_cli("clear", "--force", module="emulation", run=cluster.run_id)
    assert cleared.returncode == 0, cleared.stderr
    tb = type(cluster).attach(cluster.run_id)
    base = measure_pair(tb, api.configured(tb), "e0", "e2")
    assert base.median_rtt_ms is not None, base  # some echo came back
    assert base.configured_rtt_ms == 0 and base.median_rtt_ms < rtt_tolerance_ms(0), base


def test_cassandra_kept_running_through_every_change(cluster):
    proc = run_cli("status", "--json", run=cluster.run_id)
    import json

    states = [h["cassandra"] for h in json.loads(proc.stdout)["hosts"] if h["role"] == "edge"]
    assert states == ["UN", "UN", "UN"]
