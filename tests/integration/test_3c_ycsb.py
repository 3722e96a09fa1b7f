"""YCSB on the shared 3-node cluster: the real YCSB engine with the project's CQL binding,
run from the endpoint through real shaping. Percentiles per operation, the price of a
QUORUM read at 20 ms links, client threads that overlap, bad input refused."""

from __future__ import annotations

import csv
import json

import pytest

from emulation import api, links
from workloads import ycsb
from workloads.ycsb import client as ycsb_client

from .conftest import run_cli, sweep_failure

KEYSPACE = "ycsb_it"
RECORDS = 500


@pytest.fixture(scope="module")
def loaded(cluster, tmp_path_factory):
    """YCSB's table at RF 3, loaded once for the module (unshaped links)."""
    api.clear(cluster)
    ycsb.create_table(cluster, KEYSPACE, 3)
    runner = ycsb_client.Ycsb(cluster)
    result = runner.load(
        ycsb.Spec("a", records=RECORDS, threads=4), KEYSPACE, tmp_path_factory.mktemp("load")
    )
    assert result.ops["INSERT"]["count"] == RECORDS and result.ops["INSERT"]["errors"] == 0
    yield runner
    api.clear(cluster)
    cluster.client(["cql", f"DROP KEYSPACE IF EXISTS {KEYSPACE}"])


def test_workload_a_records_reads_and_updates_with_percentiles(loaded, tmp_path):
    seen: list[tuple[int, int]] = []
    spec = ycsb.Spec("a", records=RECORDS, operations=3000, threads=4)
    result = loaded.run(
        spec, KEYSPACE, tmp_path, lambda done, total, rate: seen.append((done, total))
    )
    ops = result.ops
    assert set(ops) == {"READ", "UPDATE"}
    assert ops["READ"]["count"] + ops["UPDATE"]["count"] == 3000
    assert 0.4 < ops["READ"]["count"] / 3000 < 0.6  # workload A: half and half
    for op in ops.values():
        assert op["errors"] == 0, op
        assert op["min_ms"] <= op["p50_ms"] <= op["p95_ms"] <= op["p99_ms"] <= op["p999_ms"]
        assert op["p999_ms"] <= op["max_ms"], op
        with open(op["hdr"]) as f:  # one HdrHistogram log per operation
            assert "#[StartTime:" in f.read(4096)
    # Little's law for a closed loop: 4 threads each waiting for one operation at a time
    # make threads / mean latency operations per second, less the client's own time
    # between operations. The throughput is timed over the run's wall window, the
    # latencies by YCSB's histograms: two independent measurements that must agree.
    mean_s = sum(o["mean_ms"] * o["count"] for o in ops.values()) / 3000 / 1000
    bound = 4 / mean_s
    assert 0.5 * bound <= result.throughput_ops <= 1.05 * bound, (result.throughput_ops, bound)
    assert seen and seen[-1][1] == 3000 and all(d <= t for d, t in seen)


def _median_read_ms(runner, tmp_path, level: str) -> float:
    spec = ycsb.Spec("c", records=RECORDS, operations=200, threads=1, read_cl=level)
    result = runner.run(spec, KEYSPACE, tmp_path / level)
    assert result.ops["READ"]["errors"] == 0
    return result.ops["READ"]["p50_ms"]


def test_quorum_read_waits_one_more_round_trip_and_threads_run_at_once(cluster, loaded, tmp_path):
    """20 ms uniform links: every read goes ep -> coordinator -> ep (40 ms). RF 3 of 3
    nodes makes the coordinator a replica, so ONE answers from it; QUORUM also waits for
    one other replica: one more 40 ms round trip."""
    api.set_links(cluster, links.uniform(cluster.topology, 20, 0))
    one = _median_read_ms(loaded, tmp_path, "ONE")
    quorum = _median_read_ms(loaded, tmp_path, "QUORUM")
    assert 40 <= one <= 55, one
    assert 30 <= quorum - one <= 50, (one, quorum)

    # 8 client threads run at once: by Little's law (a closed loop) 8 threads each
    # waiting for one read make up to 8 / mean latency reads per second, one thread at
    # most 1 / mean latency. More than 2 / mean latency proves they overlap, whatever the
    # machine's load does to both figures; how throughput scales with threads, and the
    # client's own CPU, are benchmarks/ycsb.py's figures (timing, not asserted here).
    spec = ycsb.Spec("c", records=RECORDS, operations=800, threads=8)
    eight = loaded.run(spec, KEYSPACE, tmp_path / "t8")
    mean_s = eight.ops["READ"]["mean_ms"] / 1000
    assert 2 / mean_s <= eight.throughput_ops <= 1.05 * 8 / mean_s, (eight.throughput_ops, mean_s)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--threads", "0"], "--threads"),
        (["--workload", "zz"], "unknown workload 'zz'"),
        (["--read-cl", "ANY"], "ANY is for writes only"),
        (["--rf", "3", "--write-cl", "FOUR"], "unknown consistency level 'FOUR'"),
        (["--target", "0"], "--target"),
    ],
)
def test_bad_ycsb_input_is_refused_before_anything_runs(cluster, args, message):
    proc = run_cli("run", *args, "--json", module="workloads.ycsb", run=cluster.run_id)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and proc.stdout == ""
    last = proc.stderr.strip().splitlines()[-1]  # after argparse's usage, if any
    assert "error: " in last and message in last, proc.stderr


def test_cli_runs_a_workload_and_prints_json(cluster, loaded, tmp_path):
    proc = run_cli(
        "run", "--workload", "b", "--rf", "3", "--keyspace", KEYSPACE, "--no-load",
        "--records", str(RECORDS), "--operations", "300", "--threads", "2",
        "--out", str(tmp_path), "--json",
        module="workloads.ycsb", run=cluster.run_id,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    (phase,) = data["phases"]
    assert phase["phase"] == "run" and sum(o["count"] for o in phase["ops"].values()) == 300


def test_a_sweep_with_ycsb_cells_stores_analyses_and_exports_them(tmp_path):
    """The sweep's grid with a YCSB workload on a testbed of its own: cells stored per
    operation, the cost table in the report, the ycsb table exported."""
    out = tmp_path / "results"
    proc = run_cli(
        "--workload", "ycsb-a", "--nodes", "3", "--rf", "3", "--latency", "20",
        "--loss", "0", "--profile", "uniform", "--threads", "2", "--read-cl", "ONE,QUORUM",
        "--write-cl", "read", "--records", "200", "--operations", "200",
        "--verify-probes", "20", "--parallel", "1", "--out", str(out), "--ycsb-raw",
        module="experiments.sweep", timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, sweep_failure(proc.stderr)
    assert "ycsb-a 2t ONE/ONE" in proc.stdout + proc.stderr
    assert run_cli(str(out), module="analysis.plots").returncode == 0
    assert "YCSB: the cost of consistency" in (out / "report.html").read_text()
    assert run_cli(str(out), module="experiments.store.export").returncode == 0
    with open(out / "export" / "ycsb.csv") as f:
        rows = list(csv.DictReader(f))
    overall = {r["read_cl"]: r for r in rows if r["op"] == "OVERALL"}
    assert set(overall) == {"ONE", "QUORUM"} and all(int(r["errors"]) == 0 for r in rows)
    assert all(int(r["count"]) == 200 and float(r["throughput_ops"]) > 0 for r in overall.values())
    read = {r["read_cl"]: float(r["p50_ms"]) for r in rows if r["op"] == "READ"}
    assert 25 <= read["QUORUM"] - read["ONE"] <= 55, read  # one more 40 ms round trip
    with open(out / "export" / "ycsb_requests.csv") as f:  # YCSB's raw rows
        raw = list(csv.DictReader(f))
    assert len(raw) == 2 * 200 and {r["op"] for r in raw} == {"READ", "UPDATE"}
    quorum = sorted(
        int(r["latency_us"]) for r in raw if "QUORUM" in r["cell_id"] and r["op"] == "READ"
    )
    assert abs(quorum[len(quorum) // 2] / 1000 - read["QUORUM"]) < 2  # the same median
