"""The sweep's scheduler: P shards (threads), each with a testbed of its own, measure the
grid's units by the rules of ``plan`` (longest first; CPU-bound work alone; set-up never
beside a measurement) into one store; the checks that void a cell measured while a
component was broken, and the recovery from a broken emulation or a dead node.

Stopping: a failure in one shard lets the others finish their current cell, then every
testbed goes down and the failure is raised; Ctrl-C (or SIGTERM) leaves the current
cells at once (the workers' watch raises ``plan.Stopped``). Cells are stored whole, so
rerunning the command resumes either way; kill -9 leaves the testbeds, which the next
run removes (``remove_stale_testbeds``)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common.command import stop_signals
from common.errors import TestbedError
from emulation import api as emulation
from emulation import links
from testbed import CassandraSettings, Testbed
from testbed.cassandra import logscan
from testbed.cassandra.readiness import Deadlines
from testbed.clean import clean
from workloads import WriteWorker

from ..plan import estimate
from ..plan import shards as plan
from ..settings.cells import Cell
from ..settings.config import SweepConfig
from ..store.db import Store, StoreFullError
from . import units
from .manifest import cluster_entry
from .measure import keyspace
from .progress import Progress
from .summary import stats_ms
from .watch import component_watch

ETA_EVERY_S = 5.0  # the ETA's replay of the rules runs at most this often


# -- the sweep -------------------------------------------------------------------------------


class Sweep:
    """Measures cells on ``parallel`` testbeds at once (threads, one per shard), by the
    rules of ``plan``: units longest first, the machine gate between them."""

    def __init__(
        self,
        config: SweepConfig,
        store: Store,
        run_id: str,
        progress: Progress,
        *,
        parallel: int = 1,
        cores: int | None = None,
    ):
        self.config = config
        self.store = SharedStore(store)
        self.run_id = run_id
        self.progress = progress
        self.parallel = parallel
        self.logs = Path(config.out) / "logs"
        self.finished: set[str] = set()
        self.faults: list[dict[str, Any]] = []  # components lost and recovered from
        self.lock = threading.Lock()
        self.stop = threading.Event()  # no new cells (a failure elsewhere, Ctrl-C)
        self.abort = threading.Event()  # leave the current cell too (Ctrl-C)
        self.errors: list[BaseException] = []
        self.failed_shards: list[str] = []  # shards that failed (not merely stopped)
        self.cores = cores or os.cpu_count() or 1
        self.planner: plan.Planner | None = None
        self.gate: plan.Gate | None = None
        self.shards: list[Shard] = []
        self._eta: tuple[float, float] | None = None  # (when, the replay's wall seconds)
        self.on_cell: Any = None  # called with each cell id once it is stored

    def remaining_s(self, scale: float) -> float:
        """The model's wall time for the units not handed out yet, plus what the running
        ones have left, both rescaled by ``scale`` (measured/model so far)."""
        if self.planner is None:
            return 0.0
        now = time.monotonic()
        if self._eta is not None and now - self._eta[0] < ETA_EVERY_S:
            since, wall = self._eta  # the last replay, counted down
            return max(0.0, scale * wall - (now - since))
        left = [c for u in self.planner.left() for c in u.cells]
        running = [
            c
            for sh in self.shards
            if sh.unit is not None
            for c in sh.unit.cells
            if c.cell_id not in self.finished
        ]
        cells = left + running
        if not cells:
            return 0.0
        alive = [sh for sh in self.shards if sh.thread.is_alive()]
        up = [sh.nodes for sh in alive]
        wall = estimate.wall_s(self.config, cells, max(1, len(alive)), self.cores, up)
        self._eta = (now, wall)
        return scale * wall

    def run(self, todo: list[Cell]) -> None:
        """Measure ``todo``; raises the first shard's failure, KeyboardInterrupt after
        Ctrl-C (every shard's testbed down by then)."""
        self.logs.mkdir(parents=True, exist_ok=True)
        work = estimate.units(self.config, todo)
        self.planner = plan.Planner(work, estimate.bringup_s)
        shards = min(self.parallel, len(work))
        self.shards = [Shard(self, f"s{i}") for i in range(shards)]
        # the idle testbeds beside a measurement: as many as there are shards; one gate
        # for every run of this sweep (stages), which the figures hold too
        if self.gate is None:
            self.gate = plan.Gate(estimate.budget(self.cores))
        self._eta = None  # a replay of an earlier run's units
        # Ctrl-C and SIGTERM only set flags while the shards run: a KeyboardInterrupt
        # raised anywhere in this thread (starting the shards, between two joins, a
        # second Ctrl-C) would leave this method while shards still tear testbeds down.
        with stop_signals(self.stop_all) as signals:
            for sh in self.shards:
                if not self.stop.is_set():
                    sh.thread.start()
            told = 1
            for sh in self.shards:
                while sh.thread.is_alive():
                    sh.thread.join(timeout=0.5)
                    if signals[0] > told:
                        told = signals[0]
                        self.progress.note("still tearing the testbeds down; please wait")
        if signals[0]:
            raise KeyboardInterrupt
        if self.errors:
            raise self.errors[0]

    def stop_all(self) -> None:
        """Leave the current cells too, and start no other (Ctrl-C, SIGTERM, SIGHUP)."""
        self.abort.set()
        self.stop.set()

    def failed(self, shard: Shard, exc: BaseException) -> None:
        with self.lock:
            self.errors.append(exc)
        if not isinstance(exc, plan.Stopped):
            with self.lock:
                self.failed_shards.append(shard.name)
            self.stop.set()  # the others finish their current cell, then stop

    def check_abort(self) -> None:
        if self.abort.is_set():
            raise plan.Stopped()


class SharedStore:
    """The store used by several shard threads: one call at a time."""

    def __init__(self, store: Store):
        self._store = store
        self._lock = threading.RLock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        def locked(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return locked


class Shard:
    """One testbed slot of the sweep: brings clusters up and down as the planner says,
    measures units on them. Runs in a thread of its own."""

    def __init__(self, sweep: Sweep, name: str):
        self.sweep = sweep
        self.config = sweep.config
        self.name = name
        self.tb: Testbed | None = None
        self.testbed_run: str | None = None  # the testbed's run id, once in the store
        self.idle = 0.0  # the gate's share for this testbed's idle load, while it is up
        self.worker: WriteWorker | None = None
        self.fault: Any = None  # the running cell's experiments.run.nemesis.Runner
        self.nodes: int | None = None
        self.shaper: str | None = None  # the running cluster's, once it came up
        self.rfs: list[int] = []
        self.loaded: set[str] = set()  # YCSB keyspaces loaded on the current cluster
        self.seeds: dict[str, set[str]] = {}  # keyspace -> key seeds its cells used (cluster)
        self.unit: plan.Unit | None = None
        self.restarts: Counter[str] = Counter()  # nodes started again after they died
        self.thread = threading.Thread(target=self.main, name=f"shard-{name}", daemon=True)

    def note(self, message: str) -> None:
        self.sweep.progress.note(message, shard=self.name)

    def main(self) -> None:
        sweep = self.sweep
        assert sweep.planner is not None
        try:
            while not sweep.stop.is_set():
                unit = sweep.planner.next(self.nodes)
                if unit is None:
                    break
                self.unit = unit
                if unit.nodes != self.nodes:
                    self.down()
                    self.up(unit.nodes)
                units.measure_unit(self, unit)
                self.unit = None
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            sweep.failed(self, exc)
        finally:
            self.unit = None
            try:
                self.down()
            except BaseException as exc:  # noqa: BLE001
                sweep.failed(self, exc)
            sweep.progress.shard_done(self.name)

    # -- clusters --------------------------------------------------------------------------

    def up(self, nodes: int) -> None:
        cfg, sweep = self.config, self.sweep
        self.loaded, self.seeds = set(), {}
        assert sweep.gate is not None
        settings = CassandraSettings(
            heap_mb=cfg.heap_mb,
            jvm_profile=cfg.jvm_profile,
            build=cfg.cassandra_build,
            housekeeping=cfg.node_housekeeping(),
            # auto: the backend's default; plain-text: off, on real hosts too
            tls={"on": True, "off": False, "plain-text": False}.get(cfg.tls),
            plain_text=cfg.tls == "plain-text",
        )

        def say(msg: str) -> None:
            sweep.check_abort()
            self.note(msg)

        def registered(testbed_run: str) -> None:
            # In the store before any object of the testbed exists: if this process is
            # killed while building it, the next run of the sweep removes it.
            sweep.store.testbed_started(sweep.run_id, testbed_run, nodes)
            self.testbed_run = testbed_run

        tb = Testbed(
            cfg.topology(nodes),
            cfg.backend,
            cassandra=settings,
            progress=say,
            backend_options=cfg.backend_options(),
            subnet_pool=cfg.subnet_pool,
            on_registered=registered,
            deadlines=Deadlines.for_cql(cfg.cql_timeout_s) if cfg.cql_timeout_s else Deadlines(),
        )
        sweep.progress.shard_status(self.name, f"waiting to bring up {nodes} nodes")
        with sweep.gate.hold("setup", stop=sweep.stop, owner=self.name):
            sweep.progress.shard_status(self.name, f"bringing up {nodes} nodes")
            t0 = time.monotonic()
            # down() from here on: a bring-up that fails part-way is undone by the
            # Testbed itself, and down() still records it as down in the store.
            self.tb, self.nodes = tb, nodes
            self.idle = estimate.idle_cores(nodes)
            sweep.gate.add_testbed(self.idle)  # its idle load comes off what cells share
            tb.create_hosts()
            tb.start_cassandra()
            setup = emulation.set_links(
                tb, links.LinkMatrix(tb.topology, {}, profile="none"), cfg.shaper
            )
            self.rfs = list(cfg.rfs(nodes))
            self.worker = self.start_worker()
            self.record_cluster(setup["shaper"], round(time.monotonic() - t0, 2))
            self.warm_up()
        sweep.progress.shard_status(self.name, "waiting to measure the baseline alone")
        with sweep.gate.hold("measure", plan.EXCLUSIVE, stop=sweep.stop, owner=self.name):
            self.baseline()

    def record_cluster(self, shaper: str, bringup_s: float) -> None:
        """The new cluster in the run's manifest: its nodes, versions, shaper, bring-up."""
        cfg, tb, worker = self.config, self.tb, self.worker
        assert tb is not None and worker is not None
        entry = cluster_entry(cfg, tb, worker.hello, shard=self.name, nodes=self.nodes)
        entry.update(shaper=shaper, bringup_s=bringup_s)
        self.sweep.store.update_manifest(self.sweep.run_id, clusters={tb.run_id: entry})
        self.shaper = shaper  # its teardown is timed too (experiments.plan.calibration)

    def down(self) -> None:
        """Tear the shard's testbed down (also one whose bring-up failed and was undone);
        recorded as down in the store only once it is gone: a teardown that fails
        leaves it "up" there, so the next run of the sweep removes what is left."""
        if self.tb is None:
            return
        tb, sweep, testbed_run, nodes = self.tb, self.sweep, self.testbed_run, self.nodes
        worker, self.worker = self.worker, None
        sweep.progress.shard_status(self.name, f"tearing the {self.nodes}-node cluster down")
        self.tb, self.nodes, self.testbed_run = None, None, None
        shaper, self.shaper = self.shaper, None
        if sweep.gate is not None and self.idle:
            sweep.gate.remove_testbed(self.idle)
            self.idle = 0.0
        try:
            if worker is not None:
                if sweep.abort.is_set() or sweep.errors:
                    worker.abort()  # it may be mid-command
                else:
                    worker.close()
        finally:
            t0 = time.monotonic()
            tb.down()  # a no-op when a failed bring-up was undone already
            took = round(time.monotonic() - t0, 2)
            if testbed_run is not None and (shaper is not None or tb.log_findings):
                self.record_logs(tb, testbed_run)  # (tb.run_id ended with the testbed)
            if testbed_run is not None:
                try:
                    sweep.store.testbed_down(testbed_run)
                    if shaper is not None:  # a cluster that came up (a failed one: no figure)
                        teardown = {"nodes": nodes, "shaper": shaper, "teardown_s": took}
                        sweep.store.update_manifest(sweep.run_id, teardowns={testbed_run: teardown})
                except StoreFullError as full:  # not instead of the error that got us here
                    self.note(str(full))

    def record_logs(self, tb: Testbed, testbed_run: str) -> None:
        """What its nodes' logs held (read at teardown): in the manifest; a warning for
        lines no allowance explains."""
        found = logscan.summary(tb.log_findings)
        with contextlib.suppress(TestbedError):  # not instead of the error that got us here
            self.sweep.store.update_manifest(self.sweep.run_id, node_logs={testbed_run: found})
        if found["unexpected"]:
            self.note(
                f"warning: {found['unexpected']} ERROR/exception lines in the nodes' logs of "
                f"cluster {testbed_run} (the run's manifest: node_logs), first: "
                f"{found['lines'][0]}"
            )

    def start_worker(self) -> WriteWorker:
        """The endpoint's write process for this cluster, with every RF's keyspace."""
        cfg, tb = self.config, self.tb
        assert tb is not None
        sweep = self.sweep
        worker = WriteWorker(
            tb,
            policy=cfg.policy,
            timeout_s=cfg.request_timeout_s,
            log_path=sweep.logs / f"{sweep.run_id}-{self.name}-{tb.run_id}-worker.log",
            watch=component_watch(tb, sweep.check_abort, expected_down=self.faulted),
        )
        try:
            topo = tb.topology
            for rf in self.rfs:  # sites: rf replicas in each (NetworkTopologyStrategy)
                worker.schema(keyspace(rf), topo.per_site(rf) if topo.sites else rf)
            # Nodes run with unsafesystem (fast bring-up): schema changes stay in memtables,
            # and a node killed before they are flushed comes back without the keyspaces
            # and refuses writes as coordinator. Flushed, a dead node can be restarted.
            alive = [h.name for h in tb.topology.edges if tb.nodes[h.name].alive()]
            with ThreadPoolExecutor(max(1, len(alive))) as pool:
                for done in [pool.submit(tb.nodetool, n, "flush", "system_schema") for n in alive]:
                    done.result()  # a failure is the sweep's error
        except BaseException:
            worker.abort()
            raise
        return worker

    def warm_up(self) -> None:
        """Unrecorded writes right after bring-up: the JVMs' JIT compilers and the driver
        pools warm up here (measured: the first ~300 writes on a fresh cluster are ~2x
        slower), not inside the baseline or the first cell."""
        cfg = self.config
        if not cfg.cluster_warmup or self.worker is None:
            return
        t0 = time.monotonic()
        share = max(1, cfg.cluster_warmup // len(self.rfs))
        for rf in self.rfs:
            self.worker.run(
                keyspace=keyspace(rf),
                cl=cfg.levels[0],
                writes=share,
                warmup=0,
                key_seed=f"{cfg.seed}:cluster-warmup:{rf}",
                warmup_seed=f"{cfg.seed}:cluster-warmup:{rf}",
            )
        self.note(
            f"cluster warm-up: {share * len(self.rfs)} unrecorded writes in "
            f"{time.monotonic() - t0:.1f} s"
        )

    def baseline(self) -> None:
        """Writes on the unshaped network, alone on the machine: the CPU-bound floor of
        this testbed. The first testbed of a node count also gives the run's baseline."""
        cfg, sweep = self.config, self.sweep
        if not cfg.baseline_writes or self.worker is None or self.tb is None:
            return
        nodes, rf = self.nodes, min(self.rfs)
        rows = self.worker.run(
            keyspace=keyspace(rf),
            cl=cfg.levels[0],
            writes=cfg.baseline_writes,
            warmup=min(cfg.warmup, 50),
            key_seed=f"{cfg.seed}:baseline:n{nodes}",
            warmup_seed=f"{cfg.seed}:baseline-warmup:n{nodes}",
        )
        s: dict[str, Any] = stats_ms([r["rtt_ns"] for r in rows])
        s.update(rf=rf, cl=cfg.levels[0], errors=sum(r["error"] is not None for r in rows))
        with sweep.lock:
            manifest = sweep.store.run(sweep.run_id).manifest
            # update_manifest merges one level deep: the cluster's entry goes in whole
            cluster = dict(manifest["clusters"][self.tb.run_id], baseline=s)
            entries: dict[str, Any] = {"clusters": {self.tb.run_id: cluster}}
            if str(nodes) not in manifest.get("baseline", {}):
                entries["baseline"] = {str(nodes): s}
            sweep.store.update_manifest(sweep.run_id, **entries)
        self.note(
            f"baseline, {nodes} nodes unshaped (RF {rf}, {cfg.levels[0]}): median "
            f"{s['median']:.2f} ms, mean {s['mean']:.2f} ms over {s['n']} writes"
        )

    def faulted(self) -> frozenset[str]:
        """The nodes the running cell's fault took down on purpose (killed, restarting)."""
        return frozenset(self.fault.killed) if self.fault is not None else frozenset()


def remove_stale_testbeds(store: Store, say) -> None:
    """Clusters a killed sweep of this results directory left running."""
    for testbed_run in store.testbeds_up():
        say(f"removing cluster {testbed_run} left by an interrupted sweep")
        clean(progress=lambda _m: None, run_id=testbed_run)
        store.testbed_down(testbed_run)
