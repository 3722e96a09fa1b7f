"""The YCSB client run from the endpoint host: one phase (load or run) of a ``Spec``
against a testbed's edge nodes, followed from its status lines, its files fetched back
from a remote endpoint, its result read from YCSB's export and histogram logs."""

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.errors import ConfigError
from testbed.cassandra import jvm
from testbed.cassandra.config import SIMPLE_SNITCH_DC
from testbed.testbed import Testbed

from . import PERCENTILES, Result, Spec, YcsbError, _number, parse_export
from . import dist as dist_mod

# On a remote endpoint: kill -9 the PID in $1 if its command line carries the tag $2 as a
# whole argument (a PID the kernel reused for something else is left alone), then remove
# the phase's directory $3 and the PID file.
END_CLIENT = (
    'pid=$(cat "$1" 2>/dev/null) && [ -r "/proc/$pid/cmdline" ] && '
    'tr "\\0" "\\n" < "/proc/$pid/cmdline" | grep -qxF -e "$2" && kill -9 "$pid"; '
    'rm -rf "$3" "$1"; true'
)
STATUS = re.compile(r"(\d+) sec: (\d+) operations; ([\d.,]+|NaN) current ops/sec")
SILENCE_S = 120.0  # YCSB prints a status line every second; this much silence is a hang
STATUS_INTERVAL_S = 1
CLIENT_HEAP_MB = 512


def client_jvm_options(profile: str) -> tuple[str, ...]:
    """The client JVM's options under the testbed's JVM profile: under "fast" the nodes'
    quick-start JIT and GC (a phase in a 1-vCPU TCG guest started in 29 s against 49
    with the defaults, medians of 2; its operations wait on the network, not on compiled
    code), under "standard" the JVM's own defaults."""
    return jvm.PROFILE_OPTIONS["fast"] if profile == "fast" else ()


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
        profile = tb.settings.jvm_profile if tb.settings is not None else "fast"
        self.jvm_options = client_jvm_options(profile)
        self._phases = 0

    @property
    def endpoint(self) -> str:
        return self.tb.topology.endpoint.name

    @property
    def tag(self) -> str:
        """The run's process tag (``common.tags``): ``clean`` and ``down`` find the client
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
            # the driver routes to the endpoint's own datacenter (its site, if any)
            "cassandra.localdc": self.tb.topology.endpoint.site or SIMPLE_SNITCH_DC,
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
            *self.jvm_options,
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
        where, argv = self._prepare(phase, spec, keyspace, out)
        if phase == "run" and spec.by_time:
            total = 0  # by time: no count to show progress against
        else:
            total = _number(
                spec.properties(), "recordcount" if phase == "load" else "operationcount"
            )
        log_path = out / f"{phase}.log"
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
        return self._result(phase, spec, out, seen)

    def _prepare(self, phase: str, spec: Spec, keyspace: str, out: Path) -> tuple[Path, list[str]]:
        """``out`` emptied of an earlier phase's files; where YCSB writes (``out``, or the
        run's directory on a remote endpoint) and its command line (kept in ``out``)."""
        out.mkdir(parents=True, exist_ok=True)
        for stale in (f"{phase}-hdr", f"{phase}.json", f"{phase}-raw.csv"):
            path = out / stale
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        (out / f"{phase}-hdr").mkdir()
        where = out
        if self.remote:
            self._phases += 1
            where = self.tb.state.run_dir / "ycsb" / f"{self._phases}-{phase}"  # type: ignore[union-attr]
        argv = self.argv(phase, spec, keyspace, where)
        (out / f"{phase}.argv").write_text(json.dumps(argv))
        if self.remote:  # its directory first; the PID kept for teardown (by PID, tagged)
            pidfile = where.parent / "client.pid"
            script = 'mkdir -p "$1/$2-hdr" && echo $$ > "$3" && shift 3 && exec "$@"'
            argv = ["sh", "-c", script, "sh", str(where), phase, str(pidfile), *argv]
        return where, argv

    def _result(self, phase: str, spec: Spec, out: Path, seen: dict[str, Any]) -> Result:
        """The phase's Result from YCSB's export, status lines and histogram logs;
        YcsbError where YCSB wrote none or ran no operation."""
        log_path = out / f"{phase}.log"
        try:
            rows = json.loads((out / f"{phase}.json").read_text())
        except (OSError, ValueError) as exc:
            raise YcsbError(f"YCSB {phase} wrote no result ({exc}): {_tail(log_path)}") from None
        runtime_s, throughput, ops, intended = parse_export(rows)
        operations = seen["operations"]
        if not operations or not ops:  # e.g. every client thread failed to connect
            raise YcsbError(f"YCSB {phase} ran no operation: {_tail(log_path)}")
        props = spec.properties()
        asked = _number(props, "recordcount" if phase == "load" else "operationcount")
        done = operations_done(ops)
        if "maxexecutiontime" not in props and done < asked:
            # YCSB drops a client thread whose DB init failed (a stack trace, exit 0)
            # and the others finish their share: a silent shortfall, never a result
            why = next((ln for ln in _tail(log_path, 400).splitlines() if "DBException" in ln), "")
            raise YcsbError(
                f"YCSB {phase} did {done} of {asked} operations"
                + (f" (a client thread could not start: {why.strip()})" if why else "")
                + f": {_tail(log_path)}"
            )
        raw = spec.raw and phase == "run"
        if raw and not (out / f"{phase}-raw.csv").is_file():
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
        files = {"log": str(log_path), "export": str(out / f"{phase}.json")}
        if raw:
            files["raw"] = str(out / f"{phase}-raw.csv")
        rate = operations / window_s if window_s else throughput
        return Result(
            phase,
            runtime_s,
            rate,
            ops,
            operations,
            window_s,
            throughput,
            intended,
            seen["errors"],
            files,
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


def operations_done(ops: dict[str, dict[str, Any]]) -> int:
    """The operations a phase did, from its per-operation counts: workload F's
    read-modify-writes are also counted as a READ and an UPDATE each."""
    rmw = ops.get("READ-MODIFY-WRITE", {}).get("count", 0)
    return sum(d.get("count", 0) for op, d in ops.items() if op != "READ-MODIFY-WRITE") - rmw


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
