"""One cell's measurement on a shard's testbed: a ``Workload`` (the paper's timed writes,
or a YCSB run) inside the cell's ``conditions.Conditions`` (a link trace replayed and a fault
applied while it runs), composed per cell the way Jepsen composes a client and a
nemesis; then the check that every component survived, and the cell stored whole.

    measure(shard, cell, shaping)    # what scheduler.Shard calls for each cell

A new workload is a class with ``run(shard, cell, shaping) -> Measured`` and a line in
``workload_for``; the conditions, the component check, the commit and the progress
display are shared.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from testbed import Testbed
from workloads import WorkloadRefused, ycsb
from workloads.protocol import TABLE as WRITES_TABLE
from workloads.ycsb import client as ycsb_client

from ..plan import estimate
from ..settings import faults
from ..settings.cells import Cell
from ..settings.config import SweepConfig
from . import nemesis
from .conditions import Conditions, Shard
from .launch import cpu_busy, cpu_times
from .summary import stats_ms
from .watch import check_components

LOAD_ATTEMPTS = 3  # a YCSB keyspace's load, until no insert failed
READBACK_SETTLE_S = 10.0  # a replica lacking a write has this long to get it (hints)


def keyspace(rf: int) -> str:
    """The paper's writes' keyspace of an RF (one per cluster, made at bring-up)."""
    return f"edgetb_rf{rf}"


@dataclass
class Measured:
    """A measured cell as the store takes it, and its line in the progress display."""

    cell: dict[str, Any]
    requests: list[dict[str, Any]]
    summary: str
    ycsb_ops: list[dict[str, Any]] = field(default_factory=list)
    ycsb_requests: Any = ()


class Workload(Protocol):
    def run(self, shard: Shard, cell: Cell, shaping: dict[str, Any]) -> Measured: ...


def workload_for(cell: Cell) -> Workload:
    return YcsbRun() if cell.ycsb else PaperWrites()


def measure(shard: Shard, cell: Cell, shaping: dict[str, Any]) -> None:
    """Measure ``cell`` (its network already set: ``shaping``) and store it whole."""
    sweep = shard.sweep
    m = workload_for(cell).run(shard, cell, shaping)
    sweep.store.commit_cell(m.cell, m.requests, ycsb_ops=m.ycsb_ops, ycsb_requests=m.ycsb_requests)
    with sweep.lock:
        sweep.finished.add(cell.cell_id)
    if sweep.on_cell is not None:
        sweep.on_cell(cell.cell_id)
    sweep.progress.cell_done(shard.name, cell, estimate.cell_s(shard.config, cell), m.summary)


def cell_row(shard: Shard, cell: Cell, shaping: dict[str, Any], **values: Any) -> dict[str, Any]:
    """The store's row of a cell: its grid point, network, testbed and shard, ``values``."""
    cfg, tb = shard.config, shard.tb
    assert tb is not None
    return {
        "run_id": shard.sweep.run_id,
        "cell_id": cell.cell_id,
        "nodes": cell.nodes,
        "rf": cell.rf,
        "cl": cfg.level(cell),
        "sites": cell.sites,
        "policy": cfg.policy,
        "profile": cfg.profile,
        "latency_ms": cell.latency_ms,
        "loss_pct": cell.loss_pct,
        "repetition": cell.repetition,
        "shaping": shaping,
        "testbed_run": tb.run_id,
        "shard": shard.name,
        **values,
    }


# -- workloads -------------------------------------------------------------------------------


def key_seed(cfg: SweepConfig, cell: Cell) -> str:
    """The seed of a cell's keys: the same for every cell of a repetition (the same keys,
    so the same replicas, at every latency and loss), except that a cell with a fault
    writes keys of its own (its id's), so that what a node missed while it was away can
    be told from what an earlier cell wrote (``nemesis.writes_held``)."""
    seed = f"{cfg.seed}:r{cell.repetition}"
    return seed if cell.fault == "none" else f"{seed}:{cell.cell_id}"


class PaperWrites:
    """The seed paper's measurement: ``writes`` timed writes after ``warmup`` untimed ones,
    round robin over the nodes, one row per request with its coordinator and replicas."""

    def run(self, shard: Shard, cell: Cell, shaping: dict[str, Any]) -> Measured:
        cfg, sweep, tb, worker = shard.config, shard.sweep, shard.tb, shard.worker
        assert tb is not None and worker is not None
        sweep.progress.cell_started(shard.name, cell, cfg.writes)
        started = time.time()
        seed, seeds = key_seed(cfg, cell), shard.seeds.setdefault(keyspace(cell.rf), set())
        fresh = seed not in seeds  # a cell tried again writes its keys again
        seeds.add(seed)  # before the writes: an attempt voided midway counts
        with Conditions(shard, cell) as conditions:
            rows = worker.run(
                keyspace=keyspace(cell.rf),
                cl=cfg.level(cell),
                writes=cfg.writes,
                warmup=cfg.warmup,
                key_seed=seed,
                warmup_seed=f"{cfg.seed}:r{cell.repetition}:warmup:{cell.cell_id}",
                on_progress=conditions.wrote,
                on_measuring=conditions.measuring,
            )
        # A component that broke during the cell voids it: a dead node or gateway, a host
        # that lost its namespace, shaping that is gone. Never stored as complete.
        check_components(tb, thorough=True)
        finished = time.time()
        requests = request_rows(sweep.run_id, cell, tb, rows)
        fault_log, trace_log = conditions.fault_log, conditions.trace_log
        if fault_log is not None and conditions.fault is not None:
            fault_log["recovery"]["writes_held"] = _held(shard, cell, conditions, rows, fresh)
        readback = read_back(shard, cell, rows)
        row = cell_row(
            shard,
            cell,
            shaping,
            writes=cfg.writes,
            warmup=cfg.warmup,
            key_seed=seed,
            started=started,
            finished=finished,
            cpu_util=conditions.cpu,
            fault=cell.fault if fault_log else None,
            fault_log=fault_log,
            trace=cell.trace if trace_log else None,
            trace_log=trace_log,
            readback=readback,
        )
        s = stats_ms([r["rtt_ns"] for r in rows])
        errors = sum(r["error"] is not None for r in rows)
        summary = (
            f"mean {s['mean']:.2f} ms, median {s['median']:.2f}, p95 {s['p95']:.2f}, "
            f"{errors} errors, {readback_said(readback)}, CPU {100 * (conditions.cpu or 0):.0f} %"
        )
        return Measured(row, requests, summary)


def _held(shard: Shard, cell: Cell, conditions: Conditions, rows: list, fresh: bool) -> dict:
    """``nemesis.writes_held`` of the cell's fault (a sample of what each node that was
    away holds, by its own SSTables: an instrument beside the read-back), noted."""
    assert conditions.fault is not None and conditions.fault_log is not None
    held = nemesis.writes_held(
        shard.tb, conditions.fault.fault, conditions.fault_log["events"], rows,
        keyspace(cell.rf), WRITES_TABLE, fresh,
    )  # fmt: skip
    for node, h in held.items():
        shard.note(
            f"fault {cell.fault}: {node} holds {h['held']} of {h['checked']} writes "
            f"checked of the {h['acknowledged']} acknowledged while it was away"
            + (f" ({h['skipped']})" if "skipped" in h else "")
        )
    return held


def read_back(shard: Shard, cell: Cell, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Every acknowledged write of the cell read back by value (``workloads.readback``:
    from each replica alone, then at ALL where one lacks it), after the cell's fault was
    undone; replicas by host name. ``expected``: losses this cell may have by design (a
    node killed at RF 1); any other loss is said loudly in the sweep's output. A read-back
    the workload refused is stored as its error (the cell's writes stand)."""
    tb, worker = shard.tb, shard.worker
    assert tb is not None and worker is not None
    t0 = time.monotonic()
    try:
        found = worker.readback(keyspace(cell.rf), rows, READBACK_SETTLE_S)
    except WorkloadRefused as exc:
        acked = sum(r["error"] is None for r in rows)
        shard.note(f"cell {cell.cell_id}: the read-back failed: {exc}")
        return {"error": str(exc), "acknowledged": acked}
    names = {h.address: h.name for h in tb.topology.hosts}
    found["replicas"] = {names.get(a, a): v for a, v in found["replicas"].items()}
    found["took_s"] = round(time.monotonic() - t0, 3)
    fault = faults.parse(cell.fault)
    found["expected"] = bool(cell.rf == 1 and fault and fault.kind in ("kill", "restart"))
    if found["lost"]:
        shard.note(
            f"{'' if found['expected'] else 'LOST: '}cell {cell.cell_id}: {found['lost']} of "
            f"{found['acknowledged']} acknowledged writes are on no replica"
            + (" (expected: a node killed at RF 1)" if found["expected"] else "")
            + f", e.g. {', '.join(found['lost_keys'][:3])}"
        )
    return found


def readback_said(found: dict[str, Any]) -> str:
    """The read-back in a cell's progress line."""
    if "error" in found:
        return "read-back failed"
    short = sum(v["missing"] + v["stale"] for v in found["replicas"].values())
    return f"{found['lost']} of {found['acknowledged']} lost" + (
        f" ({short} copies repaired)" if short else ""
    )


def request_rows(run_id: str, cell: Cell, tb: Testbed, rows: list[dict]) -> list[dict]:
    """The store's rows of the paper's writes: coordinator and replicas by host name."""
    names = {h.address: h.name for h in tb.topology.hosts}
    requests = []
    for r in rows:
        coordinator = names.get(r["coordinator"], r["coordinator"])
        replicas = [names.get(a, a) for a in r["replicas"]]
        requests.append(
            {
                "run_id": run_id,
                "cell_id": cell.cell_id,
                "seq": r["seq"],
                "key": r["key"],
                "coordinator": coordinator,
                "replicas": ",".join(replicas),
                "coordinator_is_replica": None
                if coordinator is None
                else int(coordinator in replicas),
                "rtt_ns": r["rtt_ns"],
                "error": r["error"],
                "t_start_ns": r["t_start_ns"],
            }
        )
    return requests


class YcsbRun:
    """A YCSB cell: its keyspace (RF, records) loaded once per cluster, then the run
    phase; stored as one row per operation (and OVERALL) with YCSB's histogram logs."""

    def run(self, shard: Shard, cell: Cell, shaping: dict[str, Any]) -> Measured:
        cfg, sweep, tb = shard.config, shard.sweep, shard.tb
        assert tb is not None and cell.records is not None
        runner = ycsb_client.Ycsb(tb, policy=cfg.policy, timeout_s=cfg.request_timeout_s)
        spec = ycsb.Spec(
            cell.workload,
            records=cell.records,
            operations=cfg.operations,
            threads=cell.threads,
            target=cell.target,
            read_cl=cell.read_cl or "ONE",
            write_cl=cfg.level(cell),
            raw=cfg.ycsb_raw,
        )
        out = Path(cfg.out) / "ycsb" / sweep.run_id / cell.cell_id
        fields = int(spec.properties().get("fieldcount", ycsb.CORE_DEFAULTS["fieldcount"]))
        space = ycsb_keyspace(cell.rf, cell.records, fields)
        if space not in shard.loaded:
            self.load(shard, runner, spec, cell, fields, out.parent / f"load-{space}")
        sweep.progress.cell_started(shard.name, cell, cfg.operations)
        started = time.time()
        cpu0 = cpu_times()
        result = runner.run(
            spec, space, out, lambda done, total, rate: sweep.progress.wrote(shard.name, done)
        )
        cpu = cpu_busy(cpu0, cpu_times())
        check_components(tb, thorough=True)
        rows = ycsb_rows(sweep.run_id, cell.cell_id, result)
        row = cell_row(
            shard,
            cell,
            shaping,
            cl=spec.write_cl,
            writes=cfg.operations,
            warmup=0,
            key_seed=f"ycsb:{space}",
            started=started,
            finished=time.time(),
            cpu_util=cpu,
            workload=cell.workload,
            threads=cell.threads,
            target=cell.target,
            read_cl=spec.read_cl,
            write_cl=spec.write_cl,
            records=cell.records,
        )
        errors = sum(r["errors"] for r in rows if r["op"] != "OVERALL" and not r["intended"])
        parts = ", ".join(
            f"{op} p50 {d['p50_ms']:.1f} p99 {d['p99_ms']:.1f}"
            for op, d in sorted(result.ops.items())
            if "p50_ms" in d
        )
        raw = ycsb_client.read_raw(Path(result.files["raw"])) if "raw" in result.files else ()
        summary = f"{result.throughput_ops:.0f} ops/s, {parts} ms, {errors} errors"
        return Measured(row, [], summary, ycsb_ops=rows, ycsb_requests=raw)

    def load(self, shard: Shard, runner: Any, spec: Any, cell: Cell, fields: int, out: Path):  # noqa: ANN201
        """The cell's keyspace and records, until no insert failed (LOAD_ATTEMPTS at most)."""
        records, space = spec.records, ycsb_keyspace(cell.rf, spec.records, fields)
        shard.sweep.progress.shard_status(shard.name, f"loading {records} records ({space})")
        t0 = time.monotonic()
        assert shard.tb is not None
        ycsb.create_table(shard.tb, space, cell.rf, fields)
        loading = replace(spec, threads=ycsb.LOAD_THREADS, target=None)
        for attempt in range(1, LOAD_ATTEMPTS + 1):
            loaded = runner.load(loading, space, out)
            failed = sum(d["errors"] for d in loaded.ops.values())
            if not failed:
                break
            # A missing record would be a NOT_FOUND (an error) in every cell that reads
            # it, blamed on that cell's network: load again (an insert of the same key
            # overwrites it), or give up on the cluster.
            shard.note(
                f"loading {space}: {failed} of {records} inserts failed "
                f"(attempt {attempt} of {LOAD_ATTEMPTS})"
            )
        else:
            raise ycsb.YcsbError(
                f"loading {records} records into {space} failed {LOAD_ATTEMPTS} times "
                f"({failed} inserts failed the last time; network {cell.latency_ms:g} ms / "
                f"{cell.loss_pct:g} %)"
            )
        shard.loaded.add(space)
        shard.note(
            f"loaded {records} records into {space} in {time.monotonic() - t0:.1f} s "
            f"({loaded.throughput_ops:.0f} ops/s)"
        )


def ycsb_keyspace(rf: int, records: int, fields: int = 10) -> str:
    """One keyspace per (RF, records, columns): cells whose workloads agree on them share
    its load."""
    return f"ycsb_rf{rf}_k{records}" + (f"_f{fields}" if fields != 10 else "")


def ycsb_rows(run_id: str, cell_id: str, result: Any) -> list[dict[str, Any]]:
    """The store's rows of a YCSB result: OVERALL, then each operation (and, open loop,
    each operation from its intended start), with its HdrHistogram log's text."""
    rows: list[dict[str, Any]] = [
        {
            "run_id": run_id,
            "cell_id": cell_id,
            "op": "OVERALL",
            "intended": 0,
            "count": result.operations,
            "errors": sum(d["errors"] for op, d in result.ops.items() if op != "READ-MODIFY-WRITE"),
            "return_codes": {},
            "throughput_ops": result.throughput_ops,
        }
    ]
    for intended, table in ((0, result.ops), (1, result.intended)):
        for op, d in sorted(table.items()):
            hdr = d.get("hdr")
            rows.append(
                {
                    "run_id": run_id,
                    "cell_id": cell_id,
                    "op": op,
                    "intended": intended,
                    "count": d.get("count", 0),
                    "errors": d["errors"],
                    "return_codes": d["return_codes"],
                    # its share of the cell's operations, at the cell's rate
                    "throughput_ops": result.throughput_ops * d.get("count", 0) / result.operations
                    if result.operations
                    else None,
                    **{k: d.get(k) for k in ("mean_ms", "min_ms", "max_ms")},
                    **{k: d.get(k) for k in ("p50_ms", "p95_ms", "p99_ms", "p999_ms")},
                    "hdr": Path(hdr).read_text() if hdr else None,
                }
            )
    return rows
