"""workloads.ycsb's pure parts: workload files, the checks made before anything runs,
and the reading of YCSB's export (rows as YCSB 0.17.0 writes them with hdrhistogram
measurements and measurement.interval=both)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from common import tags
from common.errors import ConfigError
from model.consistency import check_read_level
from testbed.topology import Topology
from workloads import ycsb
from workloads.ycsb import client as ycsb_client
from workloads.ycsb.client import END_CLIENT


def test_shipped_workloads_a_to_f_and_their_operations():
    assert ycsb.Spec("a").ops() == {"READ", "UPDATE"}
    assert ycsb.Spec("ycsb-b").ops() == {"READ", "UPDATE"}
    assert ycsb.Spec("workloadc").ops() == {"READ"}
    assert ycsb.Spec("d").ops() == {"READ", "INSERT"}
    assert ycsb.Spec("e").ops() == {"SCAN", "INSERT"}
    assert ycsb.Spec("f").ops() == {"READ", "READ-MODIFY-WRITE"}
    props = ycsb.Spec("e").properties()
    assert props["maxscanlength"] == "100" and props["requestdistribution"] == "zipfian"


def test_properties_files_and_overrides(tmp_path):
    f = tmp_path / "mine.properties"
    f.write_text(
        "# comment\n! also\nrecordcount = 50\noperationcount: 70\nreadproportion 1\n"
        "updateproportion=0\nfieldlength=10\\\n0\n"
    )
    spec = ycsb.Spec(str(f), records=20, extra=(("fieldcount", "3"),))
    props = spec.properties()
    assert props["recordcount"] == "20" and props["operationcount"] == "70"
    assert props["fieldlength"] == "100" and props["fieldcount"] == "3"
    assert spec.ops() == {"READ"}
    timed = ycsb.Spec("a", duration_s=30).properties()
    # by time, with a count YCSB never reaches: 0 would start no client thread (its
    # Client lowers threadcount to operationcount; seen in test_4 as a run that ended
    # at once with "0 sec: 0 operations")
    assert timed["maxexecutiontime"] == "30" and timed["operationcount"] == str(ycsb.MAX_COUNT)
    assert int(timed["operationcount"]) >= int(timed.get("threadcount", "1"))


@pytest.mark.parametrize(
    "spec, kw, message",
    [
        (ycsb.Spec("zz"), {}, "unknown workload 'zz'"),
        (ycsb.Spec("a", threads=0), {}, "threads must be 1..1024"),
        (ycsb.Spec("a", target=0), {}, "target must be > 0"),
        (ycsb.Spec("a", records=0), {}, "records must be an integer >= 1"),
        (ycsb.Spec("a", read_cl="ANY"), {}, "ANY is for writes only"),
        (ycsb.Spec("a", read_cl="EACH_QUORUM"), {}, "EACH_QUORUM is for writes only"),
        (ycsb.Spec("a", write_cl="SERIAL"), {}, "only for lightweight transactions"),
        (ycsb.Spec("a", read_cl="MOST"), {}, "unknown consistency level 'MOST'"),
        (ycsb.Spec("a", read_cl="THREE"), {"rf": 2}, "read level THREE needs 3 replicas"),
        (ycsb.Spec("c", write_cl="ALL"), {"rf": 2}, None),  # fine: ALL of 2
        (
            ycsb.Spec("a", records=10**7),
            {"nodes": 3, "rf": 3, "heap_mb": 256},
            "put 9823 MB on each of 3 nodes, more than their 256 MB heaps",
        ),
        (ycsb.Spec("a", extra=(("workload", "site.ycsb.workloads.RestWorkload"),)), {}, "only"),
        (
            ycsb.Spec("a", extra=(("readproportion", "0"), ("updateproportion", "0"))),
            {},
            "every operation's proportion is 0",
        ),
        (ycsb.Spec("a", extra=(("recordcount", "many"),)), {}, "is not a number"),
    ],
)
def test_bad_input_is_one_line_before_anything_runs(spec, kw, message):
    if message is None:
        spec.check(**kw)
        return
    with pytest.raises(ConfigError, match=message) as err:
        spec.check(**kw)
    assert "\n" not in str(err.value)


def test_read_levels():
    assert check_read_level("local_serial") == "LOCAL_SERIAL"
    assert check_read_level("quorum") == "QUORUM"


EXPORT = [
    {"metric": "OVERALL", "measurement": "RunTime(ms)", "value": 2005},
    {"metric": "OVERALL", "measurement": "Throughput(ops/sec)", "value": 997.5},
    {"metric": "TOTAL_GCs", "measurement": "Count", "value": 0},
    {"metric": "READ", "measurement": "Operations", "value": 2000},
    {"metric": "READ", "measurement": "AverageLatency(us)", "value": 1255.0},
    {"metric": "READ", "measurement": "MinLatency(us)", "value": 800},
    {"metric": "READ", "measurement": "MaxLatency(us)", "value": 209000},
    {"metric": "READ", "measurement": "50thPercentileLatency(us)", "value": 1100},
    {"metric": "READ", "measurement": "95thPercentileLatency(us)", "value": 2000},
    {"metric": "READ", "measurement": "99thPercentileLatency(us)", "value": 5000},
    {"metric": "READ", "measurement": "99.9PercentileLatency(us)", "value": 11000},
    {"metric": "READ", "measurement": "Return=OK", "value": 1997},
    {"metric": "READ", "measurement": "Return=ERROR", "value": 3},
    {"metric": "READ-FAILED", "measurement": "Operations", "value": 3},
    {"metric": "CLEANUP", "measurement": "Operations", "value": 2},
    {"metric": "Intended-READ", "measurement": "Operations", "value": 2000},
    {"metric": "Intended-READ", "measurement": "99thPercentileLatency(us)", "value": 18463},
]


def test_export_is_read_per_operation_in_ms():
    runtime, throughput, ops, intended = ycsb.parse_export(EXPORT)
    assert runtime == pytest.approx(2.005) and throughput == pytest.approx(997.5)
    assert set(ops) == {"READ"} and set(intended) == {"READ"}
    read = ops["READ"]
    assert read["count"] == 2000 and read["errors"] == 3
    assert read["return_codes"] == {"OK": 1997, "ERROR": 3}
    assert (read["p50_ms"], read["p95_ms"], read["p99_ms"], read["p999_ms"]) == (
        1.1, 2.0, 5.0, 11.0
    )  # fmt: skip
    assert read["mean_ms"] == pytest.approx(1.255) and read["max_ms"] == 209.0
    assert intended["READ"]["p99_ms"] == pytest.approx(18.463)


def test_hdrhistogram_plus_raw_names_and_the_raw_file(tmp_path):
    """With measurementtype=hdrhistogram+raw YCSB prefixes the halves: Hdr* rows are the
    percentiles, Raw* rows only a count; the raw file has every operation."""
    rows = [
        {"metric": "HdrREAD", "measurement": "Operations", "value": 2},
        {"metric": "HdrREAD", "measurement": "99thPercentileLatency(us)", "value": 7000},
        {"metric": "HdrREAD", "measurement": "Return=OK", "value": 2},
        {"metric": "RawREAD", "measurement": "Total Operations", "value": 2},
    ]
    _, _, ops, _ = ycsb.parse_export(rows)
    assert ops == {"READ": {"count": 2, "p99_ms": 7.0, "return_codes": {"OK": 2}, "errors": 0}}
    raw = tmp_path / "run-raw.csv"
    raw.write_text(
        "RawREAD latency raw data: op, timestamp(ms), latency(us)\n"
        "RawREAD,1795366387855,6945\nRawREAD,1795366387856,12\n"
        "RawCLEANUP latency raw data: op, timestamp(ms), latency(us)\nRawCLEANUP,1795366387863,1\n"
    )
    assert list(ycsb_client.read_raw(raw)) == [
        ("READ", 1795366387855, 6945),
        ("READ", 1795366387856, 12),
    ]


# Says "alive" once its stdin closes, then sleeps: a process killed before that never says it.
SLEEPER = "import sys, time; sys.stdin.read(); print('alive', flush=True); time.sleep(60)"


def _tagged_sleeper(tag: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", SLEEPER, tag], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )


@pytest.mark.parametrize("same_tag", [True, False])
def test_the_remote_client_is_ended_by_its_pid_only_while_it_carries_the_runs_tag(
    tmp_path, same_tag
):
    """END_CLIENT (run on a remote endpoint after a failed phase, and by teardown): the
    recorded PID is killed only when its command line has the run's tag as a whole
    argument; the phase's directory and the PID file go either way."""
    proc = _tagged_sleeper("-Dedgetb.run=abc123:ep" if same_tag else "-Dedgetb.run=abc124:ep")
    with proc:
        try:
            pidfile = tmp_path / "client.pid"
            pidfile.write_text(f"{proc.pid}\n")
            where = tmp_path / "1-run"
            (where / "run-hdr").mkdir(parents=True)
            subprocess.run(
                ["sh", "-c", END_CLIENT, "sh", str(pidfile), "-Dedgetb.run=abc123:ep", str(where)],
                check=True,
                timeout=30,
            )
            if same_tag:
                assert proc.wait(timeout=10) == -9
            else:
                # a kill sent by END_CLIENT would be pending by now: it could not answer
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.close()
                assert proc.stdout.readline() == b"alive\n"  # another run's process: left alone
                assert proc.poll() is None
            assert not where.exists() and not pidfile.exists()
        finally:
            proc.kill()


@pytest.mark.parametrize("remote", [False, True])
def test_the_client_jvm_carries_the_runs_tag_and_the_endpoints_java(remote):
    """``clean`` (netns) and teardown (remote hosts) find the client JVM by the tag; on a
    remote endpoint the host's own Java runs it."""
    backend = SimpleNamespace(
        remote=remote, tool_java=lambda java: "/guest/java" if remote else java
    )
    tb = SimpleNamespace(
        backend=backend,
        java=SimpleNamespace(path="/host/java"),
        run_id="abc123",
        topology=Topology(edge_nodes=2, subnet="10.0.0.0/24"),
        settings=SimpleNamespace(jvm_profile="fast"),
    )
    dist = ycsb.dist.YcsbDist(Path("/d"), {"lib/a.jar": "0"})
    runner = ycsb_client.Ycsb(tb, dist=dist)  # type: ignore[arg-type]
    argv = runner.argv("run", ycsb.Spec("a", records=10, operations=10), "ks", Path("/o"))
    assert argv[0] == ("/guest/java" if remote else "/host/java")
    assert tags.tag_of("\0".join(argv).encode()) == "abc123"
    assert "hosts=10.0.0.11,10.0.0.12" in argv and "exportfile=/o/run.json" in argv
    assert "cassandra.localdc=datacenter1" in argv  # SimpleSnitch's one datacenter
    # on a testbed of sites, the driver's local datacenter is the endpoint's site
    tb.topology = Topology(edge_nodes=2, subnet="10.0.0.0/24", sites=(1, 1), endpoint_site="dc2")
    argv = runner.argv("run", ycsb.Spec("a", records=10, operations=10), "ks", Path("/o"))
    assert "cassandra.localdc=dc2" in argv


@pytest.mark.parametrize("profile", ["fast", "standard"])
def test_the_client_jvm_runs_the_nodes_jvm_profile(profile):
    """Under "fast" the client starts as the nodes do (C1 only, serial GC: a YCSB phase
    in a TCG guest started in 29 s instead of 49); under "standard" with Java's defaults."""
    tb = SimpleNamespace(
        backend=SimpleNamespace(remote=False, tool_java=lambda java: java),
        java=SimpleNamespace(path="/java"),
        run_id="ab",
        topology=Topology(edge_nodes=1, subnet="10.0.0.0/24"),
        settings=SimpleNamespace(jvm_profile=profile),
    )
    runner = ycsb_client.Ycsb(tb, dist=ycsb.dist.YcsbDist(Path("/d"), {}))  # type: ignore[arg-type]
    argv = runner.argv("load", ycsb.Spec("a", records=10, operations=10), "ks", Path("/o"))
    jvm = argv[: argv.index("site.ycsb.Client")]
    fast = {"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"}
    assert fast <= set(jvm) if profile == "fast" else not fast & set(jvm), jvm


@pytest.mark.parametrize(
    "spec, message",
    [
        (ycsb.Spec("a", target=0.5), "whole number of ops/s"),
        (ycsb.Spec("a", operations=2**31), "at most 2147483647"),
        (ycsb.Spec("e", read_cl="SERIAL"), "refuses range reads"),
        (ycsb.Spec("a", extra=(("table", "other"),)), "table='other'"),
        (ycsb.Spec("a", extra=(("fieldnameprefix", "f"),)), "fieldnameprefix='f'"),
    ],
)
def test_what_ycsb_or_cassandra_would_refuse_late_is_refused_first(spec, message):
    with pytest.raises(ConfigError, match=message):
        spec.check(rf=3)


def test_a_properties_file_without_a_class_is_a_core_workload(tmp_path):
    f = tmp_path / "w.properties"
    f.write_text("recordcount=10\noperationcount=10\nreadproportion=1\n")
    assert ycsb.Spec(str(f)).properties()["workload"] == ycsb.CORE_WORKLOAD
    ycsb.Spec(str(f)).check(rf=1)


def test_the_open_loops_intended_raw_rows_are_not_operations(tmp_path):
    raw = tmp_path / "run-raw.csv"
    raw.write_text(
        "operation, timestamp (ms), latency (us)\n"
        "RawREAD,1700000000000,812\nRawIntended-READ,1700000000000,990\n"
        "RawCLEANUP,1700000000001,5\nRawUPDATE,1700000000002,1500\n"
    )
    assert list(ycsb_client.read_raw(raw)) == [
        ("READ", 1700000000000, 812),
        ("UPDATE", 1700000000002, 1500),
    ]


def test_a_phase_that_did_fewer_operations_than_asked_is_an_error(tmp_path):
    """YCSB drops a client thread whose binding fails to start (a stack trace, exit 0)
    and the others finish their share: CI saw a load of 200 records report 100, error
    free. The shortfall is an error naming the thread's failure, not a result."""
    tb = SimpleNamespace(
        backend=SimpleNamespace(remote=False, tool_java=lambda java: java),
        java=SimpleNamespace(path="/java"),
        run_id="ab",
        settings=None,
    )
    runner = ycsb_client.Ycsb(tb, dist=ycsb.dist.YcsbDist(Path("/d"), {}))  # type: ignore[arg-type]
    rows = [
        {"metric": "HdrINSERT", "measurement": "Operations", "value": 100},
        {"metric": "HdrINSERT", "measurement": "Return=OK", "value": 100},
    ]
    (tmp_path / "load.json").write_text(__import__("json").dumps(rows))
    (tmp_path / "load-hdr").mkdir()
    (tmp_path / "load.log").write_text(
        "site.ycsb.DBException: cannot prepare the workload's statements: "
        "DriverTimeoutException: Query timed out after PT12S\n\tat edgetb.ycsb.CqlClient\n"
    )
    seen = {"operations": 100, "errors": {}, "window": {}}
    spec = ycsb.Spec("a", records=200, operations=300)
    with pytest.raises(ycsb.YcsbError, match="load did 100 of 200 operations .*Query timed out"):
        runner._result("load", spec, tmp_path, seen)
    rows[0]["value"] = rows[1]["value"] = 200  # all of them: a result
    (tmp_path / "load.json").write_text(__import__("json").dumps(rows))
    assert runner._result("load", spec, tmp_path, seen).ops["INSERT"]["count"] == 200
    # a run given a duration stops when it is over: fewer operations are not a shortfall
    timed = ycsb.Spec("a", records=200, operations=300, duration_s=5)
    assert runner._result("load", timed, tmp_path, seen).ops["INSERT"]["count"] == 200
    # workload F: a read-modify-write is also counted as a READ and an UPDATE
    f_ops = {"READ": {"count": 10}, "UPDATE": {"count": 4}, "READ-MODIFY-WRITE": {"count": 4}}
    assert ycsb_client.operations_done(f_ops) == 10


def test_every_flag_of_ycsb_run_says_what_it_is():
    """`edgetb ycsb run --help`: no flag without a line of help (nine had none)."""
    import argparse

    from workloads.ycsb.__main__ import parser

    subs = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subs.choices.items():
        bare = [a.dest for a in sub._actions if a.option_strings and not a.help]
        assert not bare, (name, bare)
