"""A sweep's cells: the points of its grid, each cell's identity, the order the sweep
measures them in, its first pass and its preview. Functions of a ``SweepConfig``
(which calls them: ``config.cells()``)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from emulation.trace import load as load_trace
from testbed.cassandra.config import Housekeeping
from testbed.topology import Topology, parse_sites

from .faults import parse as parse_fault

PREVIEW_WRITES = 30  # per cell of --preview


WRITES = "writes"  # the paper's workload: sequential single-row writes, timed one by one


@dataclass(frozen=True)
class Cell:
    """One point of the grid. Its id is stable across runs (used for resume). A YCSB
    cell (``workload`` not ``writes``) also has its client threads, target rate (None:
    closed loop), read and write levels and the records its keyspace was loaded with."""

    nodes: int
    rf: int
    latency_ms: float
    loss_pct: float
    repetition: int
    workload: str = WRITES
    threads: int = 1
    target: float | None = None
    read_cl: str | None = None
    write_cl: str | None = None
    records: int | None = None
    fault: str = "none"  # experiments.settings.faults: what happens to the testbed during the cell
    trace: str = "none"  # emulation.trace: a link trace replayed during the cell
    cl: str | None = None  # the writes' level where the sweep has several (else its one)
    sites: str | None = None  # nodes per site (3x3, 2,3); rf is then the replicas per site

    @property
    def ycsb(self) -> bool:
        return self.workload != WRITES

    @property
    def cell_id(self) -> str:
        """The cell's identity, in the store and on resume: one to one with its grid
        values as SweepConfig makes them canonical (it refuses two values with one id)."""
        where = f"n{self.nodes}" + (f"-s{self.sites.replace(',', '_')}" if self.sites else "")
        base = f"{where}-rf{self.rf}-l{id_number(self.latency_ms)}-p{id_number(self.loss_pct)}"
        if self.cl is not None:  # only sweeps of several levels: the others keep their ids
            base += f"-c{self.cl}"
        if self.ycsb:  # the writes cells keep the ids of runs stored before YCSB
            rate = f"-o{id_number(self.target)}" if self.target is not None else ""
            base += (
                f"-{workload_label(self.workload)}-t{self.threads}{rate}-{self.read_cl}"
                f"-{self.write_cl}-k{self.records}"
            )
        if self.fault != "none":  # cells without one keep the ids of runs stored before
            base += f"-f{fault_label(self.fault)}"
        if self.trace != "none":
            base += f"-t{load_trace(self.trace).label}"
        return f"{base}-r{self.repetition}"

    @property
    def network(self) -> tuple[int, int, float, float]:
        """Cells with the same network share one emulation setting (and one verify)."""
        return (self.nodes, self.repetition, self.latency_ms, self.loss_pct)


def id_number(value: float) -> str:
    """A number in cell ids (%g, as in every run stored so far); SweepConfig refuses two
    values of a dimension that would share one."""
    return f"{value:g}"


def fault_label(text: str) -> str:
    fault = parse_fault(text)
    assert fault is not None
    return fault.label


def workload_label(workload: str) -> str:
    """``ycsb-a`` for the shipped ones; for a properties file its stem and a digest of its
    content, so two files (or a file named like a shipped workload) never share cell ids."""
    if workload.startswith("ycsb-"):
        return workload
    digest = hashlib.sha256(Path(workload).read_bytes()).hexdigest()[:6]
    return f"ycsb-{Path(workload).stem}-{digest}"


def rfs(config: Any, nodes: int) -> tuple[int, ...]:
    """Replication factors measured on ``nodes`` nodes, ascending ("k" is ``nodes``;
    larger ones are skipped). With sites, replicas in each site: up to the smallest
    site ("k")."""
    sizes = site_sizes(config)
    top = min(sizes) if sizes else nodes
    if config.rf is None:
        return tuple(range(1, top + 1))
    wanted = {top if r == "k" else r for r in config.rf}
    return tuple(sorted(r for r in wanted if r <= top))


def node_housekeeping(config: Any) -> Housekeeping:
    """The testbeds' housekeeping (``CassandraSettings.housekeeping``): ``auto`` is
    "writes" unless YCSB cells read."""
    if config.housekeeping != "auto":
        return config.housekeeping
    return "standard" if config.ycsb_workloads() else "writes"


def skipped(config: Any) -> list[tuple[int, int]]:
    """(nodes, rf) pairs of an explicit rf list that a node count cannot hold."""
    if config.rf is None or config.sites:  # sites: refused, not skipped (checks)
        return []
    return [(n, r) for n in config.nodes for r in config.rf if r != "k" and r > n]


def site_sizes(config: Any) -> tuple[int, ...] | None:
    """Nodes per site of a sweep of sites (None: one site)."""
    return parse_sites(config.sites) if config.sites else None


def topology(config: Any, nodes: int) -> Topology:
    """The topology of the sweep's ``nodes``-node testbeds (sites: the endpoint in the
    first)."""
    sizes = site_sizes(config)
    return Topology(edge_nodes=nodes, sites=sizes) if sizes else Topology(edge_nodes=nodes)


def level(config: Any, cell: Cell) -> str:
    """The consistency level of a cell's paper writes (YCSB cells: their write level)."""
    return cell.write_cl or cell.cl or config.levels[0]


def cells(config: Any) -> list[Cell]:
    """Every cell in execution order: node count (one cluster each), repetition,
    network setting (one emulation change each), then RF (one keyspace each)."""
    return [
        cell
        for n in config.nodes
        for rep in range(1, config.repetitions + 1)
        for lat in config.latency_ms
        for loss in config.loss_pct
        for r in rfs(config, n)
        for f in config.fault
        for tr in config.trace
        for cell in workload_cells(
            config, Cell(n, r, lat, loss, rep, fault=f, trace=tr, sites=config.sites)
        )
    ]


def workload_cells(config: Any, cell: Cell) -> list[Cell]:
    """The cells of every workload at one (nodes, RF, network, repetition): the
    writes cells (one per level), then per records count (one keyspace load each) the
    YCSB cells."""
    several = len(config.levels) > 1
    out = (
        [replace(cell, cl=cl if several else None) for cl in config.levels]
        if WRITES in config.workload
        else []
    )
    for k in config.records:
        for w in config.ycsb_workloads():
            for threads in config.threads:
                for target in config.target or (None,):
                    for read in config.read_cl:
                        for write in config.write_cls(read):
                            out.append(
                                replace(
                                    cell,
                                    workload=w,
                                    threads=threads,
                                    target=target,
                                    read_cl=read,
                                    write_cl=write,
                                    records=k,
                                )
                            )
    return out


def preview(config: Any) -> Any:
    """The short run ``--preview`` measures first: every node count, RF and loss at the
    first-pass latencies (else 0, 50 and 100 ms where the grid has them) with few
    writes and short checks, into ``OUT/preview``: the shape of the figures in minutes
    (each cell's median from 30 writes), not numbers to report."""
    latencies = (
        config.first_pass
        or tuple(x for x in (0.0, 50.0, 100.0) if x in config.latency_ms)
        or config.latency_ms[:: max(1, len(config.latency_ms) // 3)]
    )
    return replace(
        config,
        latency_ms=tuple(latencies),
        writes=min(config.writes, PREVIEW_WRITES),
        warmup=min(config.warmup, 10),
        verify_probes=min(config.verify_probes, 20),
        cluster_warmup=min(config.cluster_warmup, 100),
        baseline_writes=min(config.baseline_writes, 100),
        repetitions=1,
        first_pass=None,
        name=f"{config.name}-preview",
        out=str(Path(config.out) / "preview"),
    )


def phase(config: Any, cell: Cell) -> int:
    """0 for a cell of the first pass (or when there is none), else 1."""
    return 0 if config.first_pass is None or cell.latency_ms in config.first_pass else 1
