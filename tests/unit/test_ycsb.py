"""experiments.ycsb's pure parts: workload files, the checks made before anything runs,
and the reading of YCSB's export (rows as YCSB 0.17.0 writes them with hdrhistogram
measurements and measurement.interval=both)."""

from __future__ import annotations

import pytest

from experiments import ycsb
from experiments.consistency import check_read_level
from testbed.errors import ConfigError


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
    assert timed["maxexecutiontime"] == "30" and timed["operationcount"] == "0"


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
    assert list(ycsb.read_raw(raw)) == [("READ", 1795366387855, 6945), ("READ", 1795366387856, 12)]
