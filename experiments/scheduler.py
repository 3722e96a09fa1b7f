"""The sweep's scheduler: one cluster per node count, its keyspaces, the network settings
in order, one cell after another into the store; the checks that void a cell measured
while a component was broken, and the recovery from a broken emulation."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from emulation import api as emulation
from emulation import links, shapers
from emulation.verify import measure_pair
from testbed import CassandraSettings, Testbed, TestbedError, Topology
from testbed.clean import clean
from testbed.errors import StoreFullError
from testbed.state import RunState

from . import estimate
from .config import Cell, SweepConfig
from .progress import Progress
from .store import Store
from .summary import stats_ms
from .workloads import WriteWorker


def keyspace(rf: int) -> str:
    return f"edgetb_rf{rf}"


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def static_manifest(config: SweepConfig, argv: Sequence[str]) -> dict[str, Any]:
    return {
        "command": ["python", "-m", "experiments.sweep", *argv],
        "packages": {
            p: _version(p) for p in ("edge-testbed", "cassandra-driver", "tcconfig", "numpy")
        },
        "python": platform.python_version(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "hostname": platform.node(),
        "clusters": {},
        "baseline": {},
    }


# -- the sweep -------------------------------------------------------------------------------


class Sweep:
    def __init__(self, config: SweepConfig, store: Store, run_id: str, progress: Progress):
        self.config = config
        self.store = store
        self.run_id = run_id
        self.progress = progress
        self.logs = Path(config.out) / "logs"
        self.finished: set[str] = set()
        self.cluster_up: int | None = None  # node count of the running cluster
        self.faults: list[dict[str, Any]] = []  # components lost and recovered from

    def run_cluster(self, nodes: int, cells: list[Cell]) -> None:
        cfg = self.config
        topo = Topology(edge_nodes=nodes)
        settings = CassandraSettings(heap_mb=cfg.heap_mb, jvm_profile=cfg.jvm_profile)
        tb = Testbed(topo, cfg.backend, cassandra=settings, progress=self.progress.note)
        t0 = time.monotonic()
        tb.create_hosts()
        testbed_run = tb.run_id
        self.store.testbed_started(self.run_id, testbed_run, nodes)
        worker = None
        try:
            tb.start_cassandra()
            self.logs.mkdir(parents=True, exist_ok=True)
            rfs = sorted({c.rf for c in cells})
            setup = emulation.set_links(tb, links.LinkMatrix(topo, {}, profile="none"), cfg.shaper)
            gateway = shapers.emulation_state(tb).get("gateway", {})
            worker = self.start_worker(tb, rfs)
            self.store.update_manifest(
                self.run_id,
                clusters={
                    str(nodes): {
                        "testbed_run": testbed_run,
                        "cassandra": tb.dist.version if tb.dist else None,
                        "java": tb.java.version if tb.java else None,
                        "heap_mb": cfg.heap_mb,
                        "jvm_profile": cfg.jvm_profile,
                        "driver": worker.hello,
                        "shaper": setup["shaper"],
                        "gateway_accel": gateway.get("accel"),
                        "gateway_boot_s": gateway.get("boot_s"),
                        "bringup_s": round(time.monotonic() - t0, 2),
                    }
                },
            )
            self.cluster_up = nodes
            self.warm_up(worker, sorted({c.rf for c in cells}))
            self.baseline(worker, nodes, min(c.rf for c in cells))
            network = None
            shaping: dict[str, Any] = {}
            for cell in cells:
                for attempt in range(1 + MAX_RECOVERIES_PER_CELL):
                    try:
                        if cell.network != network:
                            network = None  # set again after a failure while setting it
                            shaping = self.set_network(tb, cell)
                            network = cell.network
                        self.measure(tb, worker, cell, shaping, testbed_run)
                        break
                    except ComponentLost as exc:
                        if not exc.recoverable or attempt == MAX_RECOVERIES_PER_CELL:
                            raise
                        worker.abort()
                        worker = None
                        self.recover(tb, cell, exc)
                        worker = self.start_worker(tb, rfs)
                        network = None  # the restarted shaper gets the cell's setting again
            worker.close()
            worker = None
        finally:
            self.cluster_up = None
            if worker is not None:  # only after a failure: it may be mid-command
                worker.abort()
            self.progress.note(f"tearing the {nodes}-node cluster down")
            tb.down()
            try:
                self.store.testbed_down(testbed_run)
            except StoreFullError as full:  # not instead of the error that got us here
                self.progress.note(str(full))

    def start_worker(self, tb: Testbed, rfs: list[int]) -> WriteWorker:
        """The endpoint's write process for this cluster, with every RF's keyspace."""
        cfg = self.config
        worker = WriteWorker(
            tb,
            policy=cfg.policy,
            timeout_s=cfg.request_timeout_s,
            log_path=self.logs / f"{self.run_id}-n{tb.topology.edge_nodes}-worker.log",
            watch=component_watch(tb),
        )
        try:
            for rf in rfs:
                worker.schema(keyspace(rf), rf)
        except BaseException:
            worker.abort()
            raise
        return worker

    def recover(self, tb: Testbed, cell: Cell, exc: ComponentLost) -> None:
        """After the emulation broke (the gateway VM died, shaping vanished or was changed
        by another process): the shaper removed and built again (a new gateway, re-wired
        cleanly), the cell's network setting applied, the cluster whole again (the driver
        sees every node up). The fault and the recovery time go into the run's manifest."""
        t0 = time.monotonic()
        self.progress.note(f"{exc}; restarting the shaper, then measuring {cell.cell_id} again")
        emulation.clear(tb, remove=True)
        self.set_network(tb, cell)
        tb.driver_probe(timeout_s=180)
        took = round(time.monotonic() - t0, 1)
        self.faults.append(
            {"cell_id": cell.cell_id, "problem": str(exc), "at": time.time(), "recovery_s": took}
        )
        self.store.update_manifest(self.run_id, faults=self.faults)
        self.progress.note(f"recovered in {took:.1f} s")

    def warm_up(self, worker: WriteWorker, rfs: list[int]) -> None:
        """Unrecorded writes right after bring-up: the JVMs' JIT compilers and the driver
        pools warm up here (measured: the first ~300 writes on a fresh cluster are ~2x
        slower), not inside the baseline or the first cell."""
        cfg = self.config
        if not cfg.cluster_warmup:
            return
        t0 = time.monotonic()
        share = max(1, cfg.cluster_warmup // len(rfs))
        for rf in rfs:
            worker.run(
                keyspace=keyspace(rf),
                cl=cfg.cl,
                writes=share,
                warmup=0,
                key_seed=f"{cfg.seed}:cluster-warmup:{rf}",
                warmup_seed=f"{cfg.seed}:cluster-warmup:{rf}",
            )
        self.progress.note(
            f"cluster warm-up: {share * len(rfs)} unrecorded writes in "
            f"{time.monotonic() - t0:.1f} s"
        )

    def baseline(self, worker: WriteWorker, nodes: int, rf: int) -> None:
        """Writes on the unshaped network: the CPU-bound floor of this machine, this run."""
        cfg = self.config
        if not cfg.baseline_writes:
            return
        rows = worker.run(
            keyspace=keyspace(rf),
            cl=cfg.cl,
            writes=cfg.baseline_writes,
            warmup=min(cfg.warmup, 50),
            key_seed=f"{cfg.seed}:baseline:n{nodes}",
            warmup_seed=f"{cfg.seed}:baseline-warmup:n{nodes}",
        )
        s: dict[str, Any] = stats_ms([r["rtt_ns"] for r in rows])
        s.update(rf=rf, cl=cfg.cl, errors=sum(r["error"] is not None for r in rows))
        self.store.update_manifest(self.run_id, baseline={str(nodes): s})
        self.progress.note(
            f"baseline, {nodes} nodes unshaped (RF {rf}, {cfg.cl}): median "
            f"{s['median']:.2f} ms, mean {s['mean']:.2f} ms over {s['n']} "
            f"writes"
        )

    def set_network(self, tb: Testbed, cell: Cell) -> dict[str, Any]:
        """Apply the cell's link matrix; measure one edge pair against it."""
        cfg = self.config
        matrix = links.build(
            cfg.profile,
            tb.topology,
            delay_ms=cell.latency_ms,
            loss_pct=cell.loss_pct,
            path=cfg.links_file,
        )
        applied = emulation.set_links(tb, matrix, cfg.shaper)
        names = [h.name for h in tb.topology.edges]
        a, b = (names[0], names[1]) if len(names) > 1 else (tb.topology.endpoint.name, names[0])
        shaping: dict[str, Any] = {
            "shaper": applied["shaper"],
            "change_s": applied["change_s"],
            "matrix": matrix.to_dict(),
            "configured": {
                "pair": [a, b],
                "rtt_ms": matrix.rtt_ms(a, b),
                "loss_pct": matrix.round_trip_loss_pct(a, b),
            },
            "measured": None,
        }
        if cfg.verify_probes:
            t0 = time.monotonic()
            pair = measure_pair(
                tb, matrix, a, b, rtt_probes=cfg.verify_probes, loss_probes=cfg.verify_probes
            )
            shaping["measured"] = {
                "median_rtt_ms": pair.median_rtt_ms,
                "p99_rtt_ms": pair.p99_rtt_ms,
                "rtt_error_ms": pair.rtt_error_ms,
                "loss_pct": pair.measured_loss_pct,
                "loss_interval_pct": list(pair.loss_interval_pct),
                "loss_ok": pair.loss_ok,
                "probes": pair.probes,
                "took_s": round(time.monotonic() - t0, 2),
            }
            rtt = f"{pair.median_rtt_ms:.2f}" if pair.median_rtt_ms is not None else "n/a"
            self.progress.note(
                f"network {cell.latency_ms:g} ms / {cell.loss_pct:g} % ({cfg.profile}) on "
                f"{cell.nodes} nodes: {a}<->{b} RTT {rtt} ms (configured "
                f"{pair.configured_rtt_ms:g}), loss {pair.measured_loss_pct:.1f} % "
                f"(configured {pair.configured_loss_pct:.2f}, {pair.probes} probes)"
            )
        return shaping

    def measure(
        self,
        tb: Testbed,
        worker: WriteWorker,
        cell: Cell,
        shaping: dict[str, Any],
        testbed_run: str,
    ) -> None:
        cfg = self.config
        self.progress.cell_started(cell, cfg.writes)
        started = time.time()
        rows = worker.run(
            keyspace=keyspace(cell.rf),
            cl=cfg.cl,
            writes=cfg.writes,
            warmup=cfg.warmup,
            key_seed=f"{cfg.seed}:r{cell.repetition}",
            warmup_seed=f"{cfg.seed}:r{cell.repetition}:warmup:{cell.cell_id}",
            on_progress=self.progress.wrote,
        )
        # A component that broke during the cell voids it: a dead node or gateway, a host
        # that lost its namespace, shaping that is gone. Never stored as complete.
        check_components(tb, thorough=True)
        finished = time.time()
        names = {h.address: h.name for h in tb.topology.hosts}
        requests = []
        for r in rows:
            coordinator = names.get(r["coordinator"], r["coordinator"])
            replicas = [names.get(a, a) for a in r["replicas"]]
            requests.append(
                {
                    "run_id": self.run_id,
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
        self.store.commit_cell(
            {
                "run_id": self.run_id,
                "cell_id": cell.cell_id,
                "nodes": cell.nodes,
                "rf": cell.rf,
                "cl": cfg.cl,
                "policy": cfg.policy,
                "profile": cfg.profile,
                "latency_ms": cell.latency_ms,
                "loss_pct": cell.loss_pct,
                "repetition": cell.repetition,
                "writes": cfg.writes,
                "warmup": cfg.warmup,
                "key_seed": f"{cfg.seed}:r{cell.repetition}",
                "shaping": shaping,
                "testbed_run": testbed_run,
                "started": started,
                "finished": finished,
            },
            requests,
        )
        self.finished.add(cell.cell_id)
        s = stats_ms([r["rtt_ns"] for r in rows])
        errors = sum(r["error"] is not None for r in rows)
        self.progress.cell_done(
            cell,
            estimate.cell_s(cfg, cell),
            f"mean {s['mean']:.2f} ms, median {s['median']:.2f}, p95 {s['p95']:.2f}, "
            f"{errors} errors",
        )


class ComponentLost(TestbedError):
    """A component the cell depends on broke while it was measured; the cell is void.
    ``recoverable``: the sweep can rebuild it (the gateway VM) and measure the cell again."""

    def __init__(self, message: str, *, recoverable: bool = False):
        super().__init__(message)
        self.recoverable = recoverable


MAX_RECOVERIES_PER_CELL = 1


def check_components(tb: Testbed, *, thorough: bool = False) -> None:
    """Raise once something the measurement depends on is broken: a Cassandra node died
    (NodeError with its log tail), a host's namespace/VM or recorded process is gone, the
    gateway VM died, or (``thorough``: one query per host) shaping disappeared."""
    for node in tb.nodes.values():
        if not node.alive():
            raise node.error(
                "Cassandra died during the sweep; the cell it was in is "
                "not stored (rerun the same command to resume)"
            )
    broken = tb.problems()
    if broken:
        raise ComponentLost(
            "the testbed broke during the sweep (" + "; ".join(broken) + "); the cell it "
            "was in is not stored (rerun the same command to resume)"
        )
    lost = emulation.problems(tb, thorough=thorough)
    if thorough and tb.state is not None:
        # Another process (`emulation set --force`) may have reshaped the testbed: what
        # is on disk must still be what this sweep applied.
        applied = tb.state.extra.get("emulation", {}).get("matrix")
        on_disk = RunState.load(tb.state.run_dir).extra.get("emulation", {}).get("matrix")
        if on_disk != applied:
            lost.append("another process changed the link settings during the cell")
    if lost:
        raise ComponentLost(
            "the emulation broke during the cell (" + "; ".join(lost) + ")", recoverable=True
        )


def component_watch(tb: Testbed, every_s: float = 1.0):
    """check_components (cheap checks only), at most once per ``every_s``."""
    last = [0.0]

    def watch() -> None:
        now = time.monotonic()
        if now - last[0] < every_s:
            return
        last[0] = now
        check_components(tb)

    return watch


def remove_stale_testbeds(store: Store, say) -> None:
    """Clusters a killed sweep of this results directory left running."""
    for testbed_run in store.testbeds_up():
        say(f"removing cluster {testbed_run} left by an interrupted sweep")
        clean(progress=lambda _m: None, run_id=testbed_run)
        store.testbed_down(testbed_run)
