"""YCSB workloads on the testbed: the real YCSB engine (``site.ycsb.Client``, its
``CoreWorkload`` and HdrHistogram measurements) with the project's CQL binding
(``java/edgetb/ycsb``; see ``dist``), run from the endpoint host against the edge nodes.

A run has a load phase (insert ``recordcount`` records) and a run phase (``operationcount``
operations or ``maxexecutiontime`` seconds) of a workload: one of the standard A-F
property sets shipped in ``workloads/`` or a user's properties file, with client threads
(closed loop) or a target rate (open loop: YCSB then also measures each operation from
when it should have started, ``measurement.interval=both``, so coordinated omission is
corrected in the ``intended`` figures). Reads go at the read consistency level, writes at
the write level. YCSB's status lines drive ``progress``; its JSON export and one
HdrHistogram log per operation (``<out>/<phase>-hdr/<OP>.hdr``: every percentile
recoverable exactly) are kept.

    python -m workloads.ycsb install
    python -m workloads.ycsb run --workload a --threads 8 --read-cl QUORUM --rf 3
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.errors import ConfigError, TestbedError
from common.files import read_text
from model.consistency import check_level, check_read_level, required_acks
from testbed.testbed import Testbed

from . import dist as dist_mod

TABLE = "usertable"  # YCSB's default table and the binding's schema (y_id + fieldN)
SCHEMA = {"table": TABLE, "fieldnameprefix": "field"}  # what create_table makes
PERCENTILES = (50, 95, 99, 99.9)
READ_OPS = frozenset({"READ", "SCAN", "READ-MODIFY-WRITE"})
WRITE_OPS = frozenset({"UPDATE", "INSERT", "READ-MODIFY-WRITE", "DELETE"})
PROPORTIONS = {
    "readproportion": "READ",
    "updateproportion": "UPDATE",
    "insertproportion": "INSERT",
    "scanproportion": "SCAN",
    "readmodifywriteproportion": "READ-MODIFY-WRITE",
}
CORE_DEFAULTS = {  # CoreWorkload's own defaults for what the checks read
    "recordcount": "0",
    "operationcount": "0",
    "fieldcount": "10",
    "fieldlength": "100",
    "readproportion": "0.95",
    "updateproportion": "0.05",
}
CORE_WORKLOAD = "site.ycsb.workloads.CoreWorkload"
MAX_THREADS = 1024
MAX_COUNT = 2**31 - 1
KEY_BYTES = 30  # "user" + a hashed long, and Cassandra's per-row overhead besides
LOAD_THREADS = 16  # the load phase inserts this many records at once
PERCENTILE = re.compile(r"^([\d.]+)(?:th)?PercentileLatency\(us\)$")


class YcsbError(TestbedError):
    """YCSB failed, hung or wrote no result."""


def read_properties(path: Path) -> dict[str, str]:
    """A Java properties file (``key=value``, ``key: value`` or ``key value``; ``#``/``!``
    comments; a trailing backslash continues a line)."""
    out: dict[str, str] = {}
    pending = ""
    for raw in read_text(path, "YCSB workload").splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
        else:
            out[line] = ""
    return out


def workload_path(name: str) -> Path:
    """A shipped workload (``a``, ``ycsb-a`` or ``workloada``) or a properties file."""
    short = name.lower().removeprefix("ycsb-").removeprefix("workload")
    shipped = dist_mod.WORKLOADS / f"workload{short}"
    if len(short) == 1 and shipped.is_file():
        return shipped
    path = Path(name)
    if path.is_file():
        return path
    choices = ", ".join(
        p.name.removeprefix("workload") for p in sorted(dist_mod.WORKLOADS.iterdir())
    )
    raise ConfigError(
        f"unknown workload {name!r}: one of {choices} (YCSB's A-F) or a properties file"
    )


def _number(props: Mapping[str, str], key: str, kind: type = int) -> Any:
    text = props.get(key, CORE_DEFAULTS.get(key, "0"))
    try:
        return kind(text)
    except ValueError:
        raise ConfigError(f"workload property {key}={text!r} is not a number") from None


@dataclass(frozen=True)
class Spec:
    """One YCSB workload run: what to run and how hard (``None``: the workload file's)."""

    workload: str = "a"
    records: int | None = None
    operations: int | None = None
    duration_s: float | None = None
    threads: int = 1
    target: float | None = None  # ops/s over all threads; None: as fast as they go
    read_cl: str = "ONE"
    write_cl: str = "ONE"
    extra: tuple[tuple[str, str], ...] = ()  # more -p KEY=VALUE, after the file's
    raw: bool = False  # also every operation's latency (YCSB's raw measurement)

    @property
    def by_time(self) -> bool:
        """The run phase ends at its duration only (no operation count given)."""
        return self.duration_s is not None and self.operations is None

    def properties(self) -> dict[str, str]:
        """The workload file's properties with this spec's on top (what YCSB gets)."""
        props = {"workload": CORE_WORKLOAD, **read_properties(workload_path(self.workload))}
        props.update(self.extra)
        if self.records is not None:
            props["recordcount"] = str(self.records)
        if self.operations is not None:
            props["operationcount"] = str(self.operations)
        if self.duration_s is not None:
            props["maxexecutiontime"] = str(int(round(self.duration_s)))
            if self.by_time:
                # no limit but the time. Not 0: YCSB 0.17's Client lowers threadcount to
                # operationcount when it is smaller (no 0 exception), so 0 starts no
                # client thread and the run ends at once with 0 operations
                props["operationcount"] = str(MAX_COUNT)
        return props

    def ops(self) -> set[str]:
        """The operations the run phase does (proportion > 0)."""
        props = self.properties()
        return {op for key, op in PROPORTIONS.items() if _number(props, key, float) > 0}

    def check(
        self, *, nodes: int | None = None, rf: int | None = None, heap_mb: int | None = None
    ) -> None:
        """ConfigError (one line) for anything YCSB or the cluster would refuse later."""
        if isinstance(self.threads, bool) or not isinstance(self.threads, int):
            raise ConfigError(f"threads must be an integer, got {self.threads!r}")
        if not 1 <= self.threads <= MAX_THREADS:
            raise ConfigError(f"threads must be 1..{MAX_THREADS}, got {self.threads}")
        if self.target is not None and not self.target > 0:
            raise ConfigError(f"target must be > 0 ops/s, got {self.target:g}")
        if self.target is not None and self.target != int(self.target):
            raise ConfigError(  # YCSB reads it with Integer.parseInt
                f"target must be a whole number of ops/s, got {self.target:g}"
            )
        if self.duration_s is not None and not self.duration_s >= 1:
            raise ConfigError(f"duration must be >= 1 s, got {self.duration_s:g}")
        for name, v in (("records", self.records), ("operations", self.operations)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ConfigError(f"{name} must be an integer >= 1, got {v!r}")
            if v is not None and v > MAX_COUNT:  # YCSB's Client parses both as an int
                raise ConfigError(f"{name} must be at most {MAX_COUNT} (YCSB's limit), got {v}")
        props = self.properties()
        if props.get("workload", CORE_WORKLOAD) != CORE_WORKLOAD:
            raise ConfigError(
                f"workload class {props['workload']}: only {CORE_WORKLOAD} fits the "
                f"binding's table ({TABLE}: y_id and fieldN columns)"
            )
        records = _number(props, "recordcount")
        if records < 1:
            raise ConfigError("recordcount must be >= 1 (the load phase inserts them)")
        if _number(props, "operationcount") < 1 and "maxexecutiontime" not in props:
            raise ConfigError("give operationcount (--operations) or a duration")
        ops = self.ops()
        if not ops:
            raise ConfigError(f"workload {self.workload}: every operation's proportion is 0")
        for key, want in SCHEMA.items():
            if props.get(key, want) != want:
                raise ConfigError(
                    f"workload property {key}={props[key]!r}: the testbed's table is "
                    f"{TABLE} with columns {SCHEMA['fieldnameprefix']}N (leave {key} out)"
                )
        level = check_read_level(self.read_cl)
        if ops & READ_OPS:
            self._level_ok(level, rf, "read")
        if "SCAN" in ops and level in ("SERIAL", "LOCAL_SERIAL"):
            raise ConfigError(f"read level {level}: Cassandra refuses range reads (scans) at it")
        level = check_level(self.write_cl)
        self._level_ok(level, rf, "write")  # the load phase writes, whatever the mix
        if nodes and rf and heap_mb:
            row = KEY_BYTES + _number(props, "fieldcount") * _number(props, "fieldlength")
            per_node_mb = records * row * rf / nodes / 2**20
            if per_node_mb > heap_mb:
                raise ConfigError(
                    f"{records} records of {row} bytes at RF {rf} put {per_node_mb:.0f} MB on "
                    f"each of {nodes} nodes, more than their {heap_mb} MB heaps: fewer records, "
                    f"or a bigger --heap"
                )

    @staticmethod
    def _level_ok(level: str, rf: int | None, what: str) -> None:

        if rf is not None and level not in ("SERIAL", "LOCAL_SERIAL"):
            need = required_acks(level, rf)
            if need > rf:
                raise ConfigError(f"{what} level {level} needs {need} replicas; RF is {rf}")


def create_table(
    tb: Testbed, keyspace: str, rf: int, fieldcount: int = 10, timeout_s: float = 60
) -> None:
    """YCSB's table in ``keyspace`` (SimpleStrategy, ``rf``; on a testbed of sites
    NetworkTopologyStrategy, ``rf`` in each site), if not there yet."""
    from testbed.client import replication

    if not re.fullmatch(r"[a-z][a-z0-9_]{0,47}", keyspace):
        raise ConfigError(f"keyspace {keyspace!r}: lower-case letters, digits and _ only")
    topo = tb.topology
    per_site: int | dict[str, int] = rf
    if topo.sites is not None:
        if rf > min(topo.sites):
            raise ConfigError(f"rf {rf} in each site: the smallest site has {min(topo.sites)}")
        per_site = topo.per_site(rf)
    columns = ", ".join(f"field{i} varchar" for i in range(fieldcount))
    tb.client(
        [
            "cql",
            f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = {replication(per_site)}",
            f"CREATE TABLE IF NOT EXISTS {keyspace}.{TABLE} (y_id varchar PRIMARY KEY, {columns})",
        ],
        timeout_s=timeout_s,
    )


@dataclass
class Result:
    """One phase: throughput and, per operation, counts and latency percentiles (ms).

    ``throughput_ops``: YCSB operations over the window from the first operation's start
    to the last one's end (the binding's EDGETB-WINDOW); YCSB's own figure
    (``ycsb_throughput_ops``) also counts connecting the session."""

    phase: str
    runtime_s: float
    throughput_ops: float
    ops: dict[str, dict[str, Any]]
    operations: int = 0
    window_s: float | None = None
    ycsb_throughput_ops: float | None = None
    intended: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors_by_type: dict[str, int] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "runtime_s": self.runtime_s,
            "throughput_ops": self.throughput_ops,
            "ycsb_throughput_ops": self.ycsb_throughput_ops,
            "operations": self.operations,
            "window_s": self.window_s,
            "ops": self.ops,
            "intended": self.intended,
            "errors_by_type": self.errors_by_type,
            "files": self.files,
        }


def parse_export(rows: list[dict[str, Any]]) -> tuple[float, float, dict, dict]:
    """YCSB's JSON array export -> runtime (s), throughput, per-op and intended per-op."""
    runtime_s = throughput = 0.0
    ops: dict[str, dict[str, Any]] = {}
    intended: dict[str, dict[str, Any]] = {}
    for r in rows:
        metric, what, value = r["metric"], r["measurement"], r["value"]
        if metric == "OVERALL":
            if what == "RunTime(ms)":
                runtime_s = float(value) / 1000
            elif what == "Throughput(ops/sec)":
                throughput = float(value)
            continue
        if metric.startswith("Raw"):
            continue  # hdrhistogram+raw: the raw half's summary (the rows are in its file)
        metric = metric.removeprefix("Hdr")  # hdrhistogram+raw names the other half so
        if (
            metric.endswith("-FAILED")
            or metric in ("CLEANUP", "INIT")
            or metric.startswith("TOTAL_")
        ):
            continue  # YCSB's own bookkeeping: the failed ops are in Return=... too
        into = intended if metric.startswith("Intended-") else ops
        op = into.setdefault(metric.removeprefix("Intended-"), {"return_codes": {}})
        if what == "Operations":
            op["count"] = int(value)
        elif what.startswith("Return="):
            op["return_codes"][what.removeprefix("Return=")] = int(value)
        elif what == "AverageLatency(us)":
            op["mean_ms"] = float(value) / 1000
        elif what == "MinLatency(us)":
            op["min_ms"] = float(value) / 1000
        elif what == "MaxLatency(us)":
            op["max_ms"] = float(value) / 1000
        elif m := PERCENTILE.match(what):
            key = "p" + m.group(1).replace(".", "")
            op[f"{key}_ms"] = float(value) / 1000
    for table in (ops, intended):
        for op in table.values():
            codes = op["return_codes"]
            op["errors"] = sum(n for code, n in codes.items() if code != "OK")
    return runtime_s, throughput, ops, intended
