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

import io
import json
import os
import re
import select
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model.consistency import check_level, check_read_level, required_acks
from testbed.errors import ConfigError, TestbedError
from testbed.files import read_text
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
CLIENT_HEAP_MB = 512
LOAD_THREADS = 16  # the load phase inserts this many records at once
STATUS_INTERVAL_S = 1
SILENCE_S = 120.0  # YCSB prints a status line every second; this much silence is a hang
STATUS = re.compile(r"(\d+) sec: (\d+) operations; ([\d.,]+|NaN) current ops/sec")
PERCENTILE = re.compile(r"^([\d.]+)(?:th)?PercentileLatency\(us\)$")


# On a remote endpoint: kill -9 the PID in $1 if its command line carries the tag $2 as a
# whole argument (a PID the kernel reused for something else is left alone), then remove
# the phase's directory $3 and the PID file.
END_CLIENT = (
    'pid=$(cat "$1" 2>/dev/null) && [ -r "/proc/$pid/cmdline" ] && '
    'tr "\\0" "\\n" < "/proc/$pid/cmdline" | grep -qxF -e "$2" && kill -9 "$pid"; '
    'rm -rf "$3" "$1"; true'
)


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
            if self.operations is None:
                props["operationcount"] = "0"  # 0: no limit but the time
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
    """YCSB's table in ``keyspace`` (SimpleStrategy, ``rf``), if not there yet."""
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,47}", keyspace):
        raise ConfigError(f"keyspace {keyspace!r}: lower-case letters, digits and _ only")
    columns = ", ".join(f"field{i} varchar" for i in range(fieldcount))
    tb.client(
        [
            "cql",
            f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = "
            f"{{'class': 'SimpleStrategy', 'replication_factor': {rf}}}",
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


class Ycsb:
    """YCSB against ``tb``'s edge nodes, from its endpoint host.

    Under netns the controller's Java and cache are the endpoint's. On VMs and inventory
    hosts the endpoint's own Java runs the jars, which ``dist.ship`` copies to the same
    absolute path there (checksummed, once per machine); each phase writes into the run's
    directory on the endpoint and its files are copied back into ``out`` afterwards."""

    def __init__(
        self,
        tb: Testbed,
        *,
        policy: str = "round-robin",
        timeout_s: float = 12.0,
        dist: dist_mod.YcsbDist | None = None,
    ):
        if policy not in ("round-robin", "token-aware"):
            raise ConfigError(f"unknown policy {policy!r} (round-robin, token-aware)")
        if tb.backend is None:
            raise ConfigError("the testbed is not up")
        if tb.java is None:
            raise ConfigError("no Java runtime recorded for this testbed")
        self.tb = tb
        self.policy = policy
        self.timeout_s = timeout_s
        self.dist = dist or dist_mod.load()
        self.remote = bool(getattr(tb.backend, "remote", False))
        self.java = tb.backend.tool_java(tb.java.path)  # the endpoint's own on remote hosts
        self._shipped = not self.remote
        self._phases = 0

    @property
    def endpoint(self) -> str:
        return self.tb.topology.endpoint.name

    @property
    def tag(self) -> str:
        """The run's process tag (``testbed.tags``): ``clean`` and ``down`` find the client
        JVM by it when its owner died."""
        return f"-Dedgetb.run={self.tb.run_id}:{self.endpoint}"

    def ship(self) -> None:
        """The jars on the endpoint (remote backends; once per Ycsb)."""
        if not self._shipped:
            dist_mod.ship(self.tb, self.dist)
            self._shipped = True

    def argv(self, phase: str, spec: Spec, keyspace: str, out: Path) -> list[str]:
        """YCSB's command line on the endpoint (``out``: its directory there)."""
        props = spec.properties()
        ours = {
            "hosts": ",".join(h.address for h in self.tb.topology.edges),
            "cassandra.keyspace": keyspace,
            "cassandra.readconsistencylevel": spec.read_cl.upper(),
            "cassandra.writeconsistencylevel": spec.write_cl.upper(),
            "edgetb.policy": self.policy,
            "edgetb.timeout_ms": str(int(self.timeout_s * 1000)),
            "threadcount": str(spec.threads),
            "measurementtype": "hdrhistogram",
            "hdrhistogram.percentiles": ",".join(f"{p:g}" for p in PERCENTILES),
            "hdrhistogram.fileoutput": "true",
            "hdrhistogram.output.path": f"{out / f'{phase}-hdr'}/",
            "exporter": "site.ycsb.measurements.exporter.JSONArrayMeasurementsExporter",
            "exportfile": str(out / f"{phase}.json"),
            "status.interval": str(STATUS_INTERVAL_S),
        }
        if spec.target is not None:
            ours["target"] = str(int(spec.target))
            ours["measurement.interval"] = "both"  # also from the intended start
        if phase == "load":
            ours.pop("target", None)  # load as fast as the threads go
            ours.pop("measurement.interval", None)
        elif spec.raw:  # every operation: op, wall-clock ms, latency us
            ours["measurementtype"] = "hdrhistogram+raw"
            ours["measurement.raw.output_file"] = str(out / f"{phase}-raw.csv")
            ours["measurement.raw.no_summary"] = "true"
        argv = [
            self.java,
            self.tag,
            f"-Xmx{CLIENT_HEAP_MB}m",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            self.dist.classpath,
            "site.ycsb.Client",
            "-load" if phase == "load" else "-t",
            "-db",
            dist_mod.BINDING_CLASS,
            "-s",
        ]
        for key, value in {**props, **ours}.items():
            argv += ["-p", f"{key}={value}"]
        return argv

    def load(
        self, spec: Spec, keyspace: str, out: Path, progress: Callable[..., None] | None = None
    ) -> Result:
        return self._phase("load", spec, keyspace, out, progress)

    def run(
        self, spec: Spec, keyspace: str, out: Path, progress: Callable[..., None] | None = None
    ) -> Result:
        return self._phase("run", spec, keyspace, out, progress)

    def _phase(
        self, phase: str, spec: Spec, keyspace: str, out: Path, progress: Callable[..., None] | None
    ) -> Result:
        self.ship()
        out.mkdir(parents=True, exist_ok=True)
        for stale in (f"{phase}-hdr", f"{phase}.json", f"{phase}-raw.csv"):
            path = out / stale
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        (out / f"{phase}-hdr").mkdir()
        props = spec.properties()
        total = _number(props, "recordcount" if phase == "load" else "operationcount")
        log_path = out / f"{phase}.log"
        where = out  # where YCSB writes its files: `out` itself, or the run's dir remotely
        if self.remote:
            self._phases += 1
            where = self.tb.state.run_dir / "ycsb" / f"{self._phases}-{phase}"  # type: ignore[union-attr]
        argv = self.argv(phase, spec, keyspace, where)
        (out / f"{phase}.argv").write_text(json.dumps(argv))
        if self.remote:  # its directory first; the PID kept for teardown (by PID, tagged)
            pidfile = where.parent / "client.pid"
            argv = [
                "sh",
                "-c",
                'mkdir -p "$1/$2-hdr" && echo $$ > "$3" && shift 3 && exec "$@"',
                "sh",
                str(where),
                phase,
                str(pidfile),
                *argv,
            ]
        with open(log_path, "wb") as log, open(out / f"{phase}.out", "wb") as stdout:
            proc = self.tb.popen(self.endpoint, argv, stdout=stdout, stderr=subprocess.PIPE)
            try:
                seen = self._follow(proc, log, total, progress)
            except BaseException:
                if proc.poll() is None:  # ours, by PID
                    proc.kill()
                proc.wait(timeout=30)
                if self.remote:
                    self._end_remote(where)
                raise
        try:
            if self.remote:
                self._fetch(where, out)
        finally:
            if self.remote:
                self._end_remote(where)
        if proc.returncode != 0:
            raise YcsbError(f"YCSB {phase} exited with status {proc.returncode}: {_tail(log_path)}")
        try:
            rows = json.loads((out / f"{phase}.json").read_text())
        except (OSError, ValueError) as exc:
            raise YcsbError(f"YCSB {phase} wrote no result ({exc}): {_tail(log_path)}") from None
        runtime_s, throughput, ops, intended = parse_export(rows)
        operations = seen["operations"]
        if not operations or not ops:  # e.g. every client thread failed to connect
            raise YcsbError(f"YCSB {phase} ran no operation: {_tail(log_path)}")
        if spec.raw and phase == "run" and not (out / f"{phase}-raw.csv").is_file():
            raise YcsbError(f"YCSB {phase} wrote no raw measurements: {_tail(log_path)}")
        window = seen["window"]
        window_s = (
            (window["last_end_ns"] - window["first_start_ns"]) / 1e9
            if "last_end_ns" in window
            else None
        )
        hdr = {
            p.stem.removeprefix("Hdr"): str(p) for p in sorted((out / f"{phase}-hdr").glob("*.hdr"))
        }
        for name, table in (("", ops), ("Intended-", intended)):
            for op, data in table.items():
                if f"{name}{op}" in hdr:
                    data["hdr"] = hdr[f"{name}{op}"]
        return Result(
            phase,
            runtime_s,
            operations / window_s if window_s else throughput,
            ops,
            operations,
            window_s,
            throughput,
            intended,
            seen["errors"],
            {"log": str(log_path), "export": str(out / f"{phase}.json")}
            | ({"raw": str(out / f"{phase}-raw.csv")} if spec.raw and phase == "run" else {}),
        )

    def _fetch(self, where: Path, out: Path) -> None:
        """The files YCSB wrote on the endpoint (export, histogram logs, raw rows) into
        ``out``, as one tar stream over the backend's own channel."""
        proc = subprocess.run(
            self.tb.exec_argv(self.endpoint, ["tar", "-C", str(where), "-cf", "-", "."]),
            capture_output=True,
            timeout=600,
        )
        if proc.returncode != 0:
            raise YcsbError(
                f"could not copy YCSB's files back from {self.endpoint}:{where}: "
                + proc.stderr.decode(errors="replace").strip()[-300:]
            )
        with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
            tar.extractall(out, filter="data")

    def _end_remote(self, where: Path) -> None:
        """The client JVM ended (by its recorded PID, if it still carries the run's tag)
        and its directory on the endpoint removed."""
        self.tb.exec(
            self.endpoint,
            ["sh", "-c", END_CLIENT, "sh", str(where.parent / "client.pid"), self.tag, str(where)],
            check=False,
            timeout=60,
        )

    def _follow(self, proc: subprocess.Popen, log, total: int, progress) -> dict[str, Any]:
        """Copy YCSB's stderr into the log; status lines -> progress(done, total, ops/s).
        Returns the operations done (the last status line's count), the binding's errors
        by exception class and its window of operations."""
        assert proc.stderr is not None
        seen: dict[str, Any] = {"operations": 0, "errors": {}, "window": {}}
        buf = b""
        last = time.monotonic()
        fd = proc.stderr.fileno()
        while True:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if not ready:
                if proc.poll() is not None and not select.select([fd], [], [], 0)[0]:
                    break  # exited, and nothing it wrote is left unread
                if time.monotonic() - last > SILENCE_S:
                    raise YcsbError(f"YCSB printed nothing for {SILENCE_S:.0f} s")
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                proc.wait(timeout=60)
                break
            last = time.monotonic()
            log.write(chunk)
            log.flush()
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                line = raw.decode(errors="replace")
                if line.startswith("EDGETB-ERRORS "):
                    seen["errors"] = json.loads(line.split(" ", 1)[1])
                elif line.startswith("EDGETB-WINDOW "):
                    seen["window"] = json.loads(line.split(" ", 1)[1])
                elif m := STATUS.search(line):
                    seen["operations"] = int(m.group(2))
                    rate = m.group(3).replace(",", "")
                    if progress is not None:
                        progress(int(m.group(2)), total, 0.0 if rate == "NaN" else float(rate))
        return seen


def read_raw(path: Path):
    """YCSB's raw measurement file: (op, wall-clock ms, latency us) per operation, in the
    order written (per operation type), without its header lines, CLEANUP and the
    open loop's intended-start rows."""
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split(",")
            if len(parts) != 3 or not parts[0].startswith("Raw"):
                continue
            op = parts[0].removeprefix("Raw")
            if op == "CLEANUP" or op.startswith("Intended-") or not parts[1].isdigit():
                continue  # the intended latencies (open loop) are in their histograms
            yield op, int(parts[1]), int(parts[2])


def _tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:]) or "(empty log)"
