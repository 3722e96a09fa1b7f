"""`python -m experiments.sweep`: the seed paper's experiment, cell by cell, into a store.

    python -m experiments.sweep --quick                 # 3 and 5 nodes, ~15 min
    python -m experiments.sweep --config experiments/configs/paper.toml
    python -m experiments.sweep --nodes 3 --rf 1,2,3 --latency 0,20 --loss 0.5 --writes 50
    python -m experiments.sweep --quick --dry-run       # the cells and an estimated duration

Order: one cluster per node count (no restart inside it); one keyspace per RF created once;
for each network setting the emulation is changed at run time and checked once (a short
`emulation verify` of one edge pair, stored with every cell measured under it); then one
cell per RF. Rerunning the same command resumes: completed cells are kept, a cell cut off
by kill -9 or Ctrl-C is measured again, and a cluster a killed sweep left is removed.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import sys
import time
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from itertools import groupby
from pathlib import Path
from typing import Any, Literal

import numpy as np

from emulation import api as emulation
from emulation import links, shapers
from emulation.gateway import image as gateway_image
from emulation.verify import measure_pair
from testbed import CassandraSettings, Testbed, TestbedError, Topology
from testbed.clean import clean
from testbed.errors import ConfigError, RunInUseError, StoreFullError
from testbed.state import OwnerLock, RunState, describe_holder

from . import estimate
from .config import Cell, SweepConfig, load_toml, parse_list, parse_rf, preset
from .progress import Progress
from .store import DB_NAME, Store, check_store_file, check_writable_dir
from .workloads import WriteWorker

LOCK_NAME = "sweep.lock"  # in the results directory, held by the sweep measuring into it


def keyspace(rf: int) -> str:
    return f"edgetb_rf{rf}"


# -- configuration from flags --------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m experiments.sweep",
        description="Measure Cassandra writes over a grid of node counts, replication "
        "factors, latencies and losses. Lists take 0,20,40 or 0..100..10.",
    )
    p.add_argument("--config", metavar="FILE", help="TOML file with a [sweep] table")
    p.add_argument(
        "--quick",
        action="store_true",
        help="preset: 3 and 5 nodes, latency 0/50/100, loss 0.5/7.5, 200 writes",
    )
    p.add_argument("--nodes", help="node counts, e.g. 3,5 (default 3,4,5)")
    p.add_argument(
        "--rf",
        help="replication factors, k = the node count (default 1..k; "
        "RFs above a node count are skipped for it)",
    )
    p.add_argument("--latency", help="one-way edge latencies in ms (default 0..100..10)")
    p.add_argument("--loss", help="packet loss in %% (default 0.5,2.5,7.5)")
    p.add_argument("--profile", help="paper (default), uniform or file")
    p.add_argument("--links", metavar="FILE", help="link matrix TOML for --profile file")
    p.add_argument("--cl", help="consistency level (default LOCAL_QUORUM)")
    p.add_argument("--writes", type=int, help="recorded writes per cell (default 1000)")
    p.add_argument("--warmup", type=int, help="unrecorded writes before each cell (50)")
    p.add_argument("--repetitions", type=int, help="repetitions of the grid (default 1)")
    p.add_argument("--policy", help="round-robin (default, as the paper) or token-aware")
    p.add_argument("--seed", type=int, help="seed of the write keys (default 1)")
    p.add_argument("--backend", help="testbed backend (default netns)")
    p.add_argument("--shaper", help="auto (default), gateway or direct")
    p.add_argument("--out", metavar="DIR", help="results directory (default ./results)")
    p.add_argument(
        "--verify-probes",
        type=int,
        help="ICMP probes per network setting to check the shaping (0: skip)",
    )
    p.add_argument("--heap-mb", type=int, help="Cassandra heap per node (default 256)")
    p.add_argument("--jvm-profile", help="fast (default) or standard")
    p.add_argument(
        "--cluster-warmup", type=int, help="unrecorded writes after each bring-up (default 500)"
    )
    p.add_argument("--timeout", type=float, help="driver request timeout in s (default 12)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the cells and an estimated duration, run nothing",
    )
    p.add_argument(
        "--new-run",
        action="store_true",
        help="measure again even if this configuration is stored complete",
    )
    return p


# flag dest -> (config field, list element type, "rf", or None for scalars)
FLAG_FIELDS: dict[str, tuple[str, type | Literal["rf"] | None]] = {
    "nodes": ("nodes", int),
    "rf": ("rf", "rf"),
    "latency": ("latency_ms", float),
    "loss": ("loss_pct", float),
    "profile": ("profile", None),
    "links": ("links_file", None),
    "cl": ("cl", None),
    "writes": ("writes", None),
    "warmup": ("warmup", None),
    "repetitions": ("repetitions", None),
    "policy": ("policy", None),
    "seed": ("seed", None),
    "backend": ("backend", None),
    "shaper": ("shaper", None),
    "out": ("out", None),
    "verify_probes": ("verify_probes", None),
    "heap_mb": ("heap_mb", None),
    "jvm_profile": ("jvm_profile", None),
    "cluster_warmup": ("cluster_warmup", None),
    "timeout": ("request_timeout_s", None),
}


def config_from_args(args: argparse.Namespace) -> SweepConfig:
    """Defaults, then --quick, then --config, then flags. ConfigError for bad input."""
    values: dict[str, Any] = {}
    if args.quick:
        values.update(preset("quick"))
    if args.config:
        values.update(load_toml(args.config))
    for dest, (name, kind) in FLAG_FIELDS.items():
        raw = getattr(args, dest)
        if raw is None:
            continue
        flag = "--" + dest.replace("_", "-")
        if kind == "rf":  # integers, ranges or k (the node count)
            values[name] = parse_rf(flag, raw)
        else:
            values[name] = parse_list(flag, raw, kind) if kind else raw
    if args.links:
        values["links_file"] = str(Path(args.links).resolve())
    return SweepConfig.from_dict(values)


# -- summaries -------------------------------------------------------------------------------


def stats_ms(rtts_ns: Sequence[int]) -> dict[str, float]:
    a = np.asarray(rtts_ns, dtype=float) / 1e6
    if a.size == 0:
        return {"n": 0}
    return {
        "n": int(a.size),
        "mean": float(a.mean()),
        "median": float(np.median(a)),
        "p95": float(np.percentile(a, 95)),
        "p99": float(np.percentile(a, 99)),
        "max": float(a.max()),
    }


def summary_table(store: Store, run_id: str) -> str:
    cells = store.cells(run_id)
    if not cells:
        return "(no cells stored)"
    head = (
        f"{'nodes':>5} {'RF':>3} {'lat ms':>6} {'loss %':>6} {'rep':>3} {'writes':>6} "
        f"{'mean ms':>8} {'median':>8} {'p95':>8} {'errors':>6} {'c∈R':>5}"
    )
    lines = [head, "-" * len(head)]
    order = sorted(
        cells, key=lambda c: (c["nodes"], c["loss_pct"], c["rf"], c["latency_ms"], c["repetition"])
    )
    for c in order:
        s = stats_ms(store.rtts_ns(run_id, c["cell_id"]))
        cir = store.coordinator_is_replica_share(run_id, c["cell_id"])
        lines.append(
            f"{c['nodes']:>5} {c['rf']:>3} {c['latency_ms']:>6g} {c['loss_pct']:>6g} "
            f"{c['repetition']:>3} {s['n']:>6} {s['mean']:>8.2f} {s['median']:>8.2f} "
            f"{s['p95']:>8.2f} {store.errors(run_id, c['cell_id']):>6} "
            f"{(cir if cir is not None else float('nan')):>5.2f}"
        )
    return "\n".join(lines)


def dry_run(config: SweepConfig) -> str:
    cells = config.cells()
    lines = [
        f"sweep {config.name!r}: {len(cells)} cells, profile {config.profile}, "
        f"{config.cl}, {config.policy}, {config.writes} writes (+{config.warmup} "
        f"warm-up) x {config.repetitions} repetition(s)"
    ]
    for n, grouped in groupby(cells, key=lambda c: c.nodes):
        group = list(grouped)
        lines.append(
            f"  {n} nodes: RF {', '.join(map(str, config.rfs(n)))}; "
            f"{len(group)} cells, about "
            f"{estimate.fmt_duration(estimate.sweep_s(config, group))}"
        )
        for cell in group:
            lines.append(f"    {cell.cell_id:<28} ~{estimate.write_ms(config, cell):7.1f} ms/write")
    for n, r in config.skipped():
        lines.append(f"  skipped: RF {r} on {n} nodes (more replicas than nodes)")
    lines.append(
        f"estimated duration: {estimate.fmt_duration(estimate.sweep_s(config))} "
        f"(model: {estimate.BASE_WRITE_MS} ms per write at 0 ms + round trips + "
        f"TCP retransmissions under loss; bring-up per cluster)"
    )
    return "\n".join(lines)


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


def preflight(config: SweepConfig) -> None:
    """Checks that need no testbed: root, the gateway image when the gateway shapes."""
    if os.geteuid() != 0:
        raise ConfigError("the sweep builds network namespaces: run it as root")
    if shapers.resolve(config.shaper, config.backend or "netns") == "gateway":
        gateway_image.load()


def lock_results(out: Path) -> OwnerLock:
    """Own the results directory for this sweep's whole life: a second sweep on it is
    refused while this one lives, and resumes it once it died (the kernel drops the lock)."""
    out.mkdir(parents=True, exist_ok=True)
    lock = OwnerLock(out / LOCK_NAME)
    if not lock.acquire(blocking=False, wait_s=1.0):
        holder = lock.holder() or {}
        raise RunInUseError(
            f"results directory {out} is in use by a running sweep ({describe_holder(holder)}); "
            f"wait for it, or use another --out"
        )
    return lock


def _terminate(_signum, _frame):
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    try:
        config = config_from_args(args)
        check_writable_dir(config.out, "--out")
        if (Path(config.out) / DB_NAME).exists():
            check_store_file(Path(config.out) / DB_NAME)
        if args.dry_run:
            print(dry_run(config))
            return 0
        preflight(config)
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        owner = lock_results(Path(config.out))
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _terminate)
    store = Store(config.out)
    fingerprint = config.fingerprint()
    cells = config.cells()
    latest = store.latest_run(fingerprint)
    if latest is not None and latest.status == "complete" and not args.new_run:
        print(
            f"run {latest.run_id} of this configuration is already complete in "
            f"{config.out} ({len(cells)} cells); --new-run measures it again"
        )
        print(summary_table(store, latest.run_id))
        return 0
    resumed = (
        latest if latest is not None and latest.status != "complete" and not args.new_run else None
    )
    if resumed:
        run_id = resumed.run_id
        store.set_status(run_id, "running")
    else:
        run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + fingerprint[:6]
        store.begin_run(
            run_id, fingerprint, config.name, config.to_dict(), static_manifest(config, argv)
        )
    done = store.done_cells(run_id)
    todo = [c for c in cells if c.cell_id not in done]
    say(
        f"run {run_id} ({config.name}): {len(cells)} cells, {len(done)} stored, "
        f"{len(todo)} to measure; estimated "
        f"{estimate.fmt_duration(estimate.sweep_s(config, todo))}; results in "
        f"{Path(config.out).resolve()}" + (" (resumed)" if resumed else "")
    )
    progress = Progress(
        len(cells),
        len(done),
        lambda: estimate.split_s(
            config, [c for c in todo if c.cell_id not in sweep.finished], up=sweep.cluster_up
        ),
    )
    sweep = Sweep(config, store, run_id, progress)
    t0 = time.monotonic()
    # "failed" unless the loop finishes: an unexpected exception must not leave the run
    # marked complete, or rerunning would not resume it.
    status, code, problem = "failed", 0, ""
    try:
        remove_stale_testbeds(store, say)
        for nodes, group in groupby(todo, key=lambda c: c.nodes):
            sweep.run_cluster(nodes, list(group))
        status = "complete"
    except KeyboardInterrupt:
        status, code = "interrupted", 130
        problem = "interrupted: the testbed is down. "
    except TestbedError as exc:
        status, code, problem = "failed", 1, f"error: {exc}\n"
    finally:
        progress.close()
        try:
            store.set_status(run_id, status)
        except StoreFullError as full:
            status, code, problem = "failed", 1, f"error: {full}\n"
    if problem:
        say(
            f"\n{problem}{len(store.done_cells(run_id))} of {len(cells)} cells stored; "
            f"rerun the same command to resume."
        )
    if code == 0:
        wall = time.monotonic() - t0
        total_rtt = store.total_rtt_ns(run_id) / 1e9
        store.update_manifest(run_id, wall_s=round(wall, 1))
        print(summary_table(store, run_id))
        print(
            f"\n{len(cells)} cells in {estimate.fmt_duration(wall)} (this process); "
            f"recorded RTTs sum to {total_rtt:.1f} s"
        )
        print(f"results: {store.path.resolve()} (run {run_id})")
        print(f"export:  python -m experiments.export {config.out} --format csv")
    store.close()
    owner.release()
    return code


if __name__ == "__main__":
    sys.exit(main())
