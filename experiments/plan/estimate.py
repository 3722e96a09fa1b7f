"""How long a sweep will take: a small model, used by --dry-run and for the ETA.

Per write: the mean RTT that model.rtt computes (a service time, the endpoint <->
coordinator round trip, the k-th fastest coordinator <-> replica round trip, TCP's
retransmissions under loss), with the service time this machine's write at 0 ms. Fixed
costs: one cluster bring-up and teardown per node count, one emulation check per network
setting.
The running sweep rescales the model by what it has measured so far.

The machine's costs (``Costs``: the write at 0 ms, CPU per write, an idle testbed's CPU,
bring-ups, how cells compare with the model) start from figures measured on the
development machine; this machine's calibration (``experiments.plan.calibration``: what earlier
runs measured here, in $EDGETB_HOME) comes over them, and the cells a results directory
already holds over both (``calibrate``: a robust line fit of each cell's measured CPU use
against its write rate; baselines for the write at 0 ms), so --dry-run and auto-P use
this machine's numbers.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np

from common import paths
from common.errors import ConfigError
from emulation import links
from model import rtt
from testbed.backends import capabilities

from ..settings.cells import Cell
from ..settings.config import SweepConfig
from . import fidelity
from . import shards as plan

CELL_OVERHEAD_S = 0.2
PROBE_INTERVAL_S = 0.005


@dataclass(frozen=True)
class Costs:
    """What the model charges per write and per testbed, and how many testbeds the
    machine runs at once without biasing what they measure."""

    base_write_ms: float  # median write at 0 ms
    cpu_ms_per_write: float  # client, coordinator, replicas and shaper together
    idle_cores_per_node: float  # an idle Cassandra JVM
    idle_cores_shaper: float  # an idle testbed's shaper (the gateway VM's guest kernel)
    shaper_mb: float  # the shaper's resident memory
    shaper_boot_s: float  # starting the shaper with a new cluster
    # The share of the machine's cores the testbeds (idle and measuring) may keep busy,
    # and the largest P that benchmarks/parallel_fidelity.py accepted with that budget
    # (where it has not run yet, ``source`` says the figure is provisional).
    max_busy: float
    max_parallel: int
    source: str
    parallel_by_nodes: tuple[tuple[int, int], ...] = ()
    # This machine's measurements (experiments.plan.calibration): a cell's measured over its
    # modelled time, bring-up seconds per node count, a teardown's seconds.
    cell_scale: float = 1.0
    bringup: tuple[tuple[int, float], ...] = ()
    teardown_s: float = 2.0
    # the figures above measured on this machine (the others: the development machine's)
    measured: frozenset[str] = frozenset()
    # the machine the measured figures come from (``calibration.machine_of``), "" for none
    calibrated_on: str = ""


# The costs a results directory's cells refit (``calibrate``)
FITTED = ("base_write_ms", "cpu_ms_per_write", "idle_cores_per_node", "idle_cores_shaper")


# The machine the default figures were measured on, as a dry run names it.
DEVELOPMENT_MACHINE = "the development machine (2 cores, 24 GB, QEMU TCG guests, no netem)"

# What each shaper costs on the 2-core development machine (TCG, no netem), until a
# results directory's own cells recalibrate it (``calibrate``).
SHAPER_COSTS = {
    # Fitted to the 36 sequential cells of parallel_fidelity.py (3 nodes, paper profile).
    # At ~9 % busy during cells (P=2) cells matched sequential ones as closely as two
    # sequential runs match; at ~15 % (P=4) every cell was slower by ~1 ms (the TCG
    # gateways' netem timers fire late under load).
    "gateway": Costs(
        base_write_ms=3.3,
        cpu_ms_per_write=5.3,
        idle_cores_per_node=0.0176,
        idle_cores_shaper=0.0206,
        shaper_mb=260,  # QEMU and its 160 MB guest
        shaper_boot_s=5.0,
        max_busy=0.12,
        max_parallel=2,
        source="fitted on the 2-core development machine (parallel_fidelity.py, gateway)",
    ),
    # benchmarks/jvm_profiles.py (CPU per write, steady; an idle JVM with the approximate
    # clock at 20 ms) and host_shaper.py (0.00 % idle, ~1 MB). parallel_fidelity.py, 3
    # nodes, 36 cells of 300 writes: P=2 with 60 % of the cores as the budget slowed 35
    # of 36 cells (median +0.5 ms; P=4 +1.4 ms): the JVMs wait for the CPU, the delayer
    # does not; with 12 % it matched sequential runs as closely as they match each other.
    # On 5 nodes (RF 1,3,5, 36 cells) P=2 at 12 % was still slower in 30 of 36 cells
    # (median +0.37 ms, sign test p < 0.001): rejected; on quiet nodes too (3 nodes: P=2).
    "host": Costs(
        base_write_ms=2.6,
        cpu_ms_per_write=4.7,
        idle_cores_per_node=0.017,
        idle_cores_shaper=0.0,
        shaper_mb=2,
        shaper_boot_s=0.2,
        max_busy=0.12,
        max_parallel=1,
        source="measured on the 2-core development machine (jvm_profiles.py, host_shaper.py, "
        "parallel_fidelity.py on 3 and 5 nodes)",
        parallel_by_nodes=((3, 2), (5, 1)),  # (grid's nodes, P): fidelity.default_verdict
    ),
}
# tc in each namespace: no process of its own, the host kernel's cost (not measured on
# the development machine, which has no netem: the host shaper's figures less its own)
SHAPER_COSTS["direct"] = replace(
    SHAPER_COSTS["host"],
    shaper_mb=0,
    shaper_boot_s=0.0,
    source="the host shaper's figures (netem was not measurable on the development machine)",
)

COSTS = SHAPER_COSTS["host"]


def defaults(shaper: str) -> Costs:
    """The development machine's costs with ``shaper`` (a resolved name);
    ``$EDGETB_MAX_BUSY`` (a share of the cores, for benchmarks/parallel_fidelity.py's
    trials of another budget) replaces its budget."""
    costs = SHAPER_COSTS[shaper]
    text = paths.get("EDGETB_MAX_BUSY")
    if text:
        try:
            share = float(text)
        except ValueError:
            share = math.nan
        if not 0 < share <= 1:
            raise ConfigError(f"EDGETB_MAX_BUSY={text!r}: give a share of the cores, 0 < x <= 1")
        costs = replace(costs, max_busy=share, source=f"{costs.source}; budget {share:g} asked")
    return costs


def use(costs: Costs) -> None:
    """Make ``costs`` the model's (the sweep calls it with ``defaults`` of its shaper, then
    with ``calibrate``'s result)."""
    global COSTS
    COSTS = costs
    write_ms.cache_clear()


def calibrate(
    cells: list[dict[str, Any]],
    manifests: list[dict[str, Any]],
    cores: int,
    shaper: str,
    start: Costs | None = None,
) -> Costs | None:
    """The costs fitted to measured cells (None when they are too few to fit), laid over
    ``start`` (default: the development machine's costs with ``shaper``).

    Only runs whose testbeds were shaped by ``shaper`` count (a gateway's cells say
    nothing about the host shaper's costs). CPU: the cells of runs with one testbed
    (``manifest["parallel"]["p"] == 1``) give busy cores = idle + cpu_per_write x writes
    per second; a Theil-Sen line through them (robust to cells that shared the machine).
    The write at 0 ms: the median of the runs' baselines."""
    base = defaults(shaper)
    costs = start or base
    manifests = [
        m
        for m in manifests
        if any(c.get("shaper") == shaper for c in m.get("clusters", {}).values())
    ]
    one = {m.get("run_id") for m in manifests if m.get("parallel", {}).get("p") == 1}
    rows = [
        c
        for c in cells
        if c["run_id"] in one
        and c.get("cpu_util") is not None
        and c["finished"] > c["started"]
        and c.get("workload") in (None, "writes")  # a YCSB cell's JVM and threads cost other
    ]
    bases = [
        b["median"] for m in manifests for b in m.get("baseline", {}).values() if "median" in b
    ]
    if bases:
        costs = replace(
            costs,
            base_write_ms=round(statistics.median(bases), 2),
            measured=costs.measured | {"base_write_ms"},
        )
    costs = _fit_cpu(rows, cores, base, costs)
    if all(getattr(costs, f) == getattr(start or base, f) for f in FITTED):
        return None
    fitted = f"fitted to {len(rows)} measured cells and {len(bases)} baselines"
    return replace(costs, source=fitted if start is None else f"{start.source}; {fitted}")


def _fit_cpu(rows: list[dict[str, Any]], cores: int, base: Costs, costs: Costs) -> Costs:
    """``costs`` with CPU per write and the idle testbed's CPU fitted to ``rows`` (cells of
    one-testbed runs): busy cores = idle + CPU per write x write rate, a Theil-Sen line (a
    cell that shared the machine with something else, another sweep or a build, does not
    drag it as it would a least-squares fit); unchanged with fewer than 4 cells or no
    spread of rates."""
    if len(rows) < 4:
        return costs
    rate = np.array([(c["writes"] + c["warmup"]) / (c["finished"] - c["started"]) for c in rows])
    busy = np.array([c["cpu_util"] * cores for c in rows])
    if np.ptp(rate) <= 0:
        return costs
    from scipy import stats  # here, not at import: 0.9 s of every command's start

    fit = stats.theilslopes(busy, rate)
    slope, idle = float(fit.slope), float(fit.intercept)
    nodes = statistics.median(c["nodes"] for c in rows)
    default_idle = nodes * base.idle_cores_per_node + base.idle_cores_shaper
    if slope <= 0 or idle <= 0:
        return costs
    scale = idle / default_idle
    return replace(
        costs,
        cpu_ms_per_write=round(slope * 1000, 2),
        idle_cores_per_node=round(base.idle_cores_per_node * scale, 4),
        idle_cores_shaper=round(base.idle_cores_shaper * scale, 4),
        measured=costs.measured | {"cpu_ms_per_write", "idle_cores_per_node", "idle_cores_shaper"},
    )


def bringup_s(nodes: int) -> float:
    """A cluster's bring-up (with its shaper) and teardown. This machine's measured
    bring-ups (``COSTS.bringup``) where there are some: the node count's own, else a
    line through the nearest two measured counts (with one: the development machine's
    formula scaled to it); without any, that formula (measured there: 11.6 s for 3
    nodes, 18.9 s for 5)."""
    measured = dict(COSTS.bringup)
    formula = lambda n: 1.0 + 3.7 * n + COSTS.shaper_boot_s  # noqa: E731
    if nodes in measured:
        up = measured[nodes]
    elif len(measured) >= 2:
        near = sorted(measured.items(), key=lambda kv: (abs(kv[0] - nodes), kv[0]))
        (n0, s0), (n1, s1) = near[:2]
        up = max(s0 + (s1 - s0) * (nodes - n0) / (n1 - n0), formula(nodes) / 4)
    elif measured:
        ((n0, s0),) = measured.items()
        up = formula(nodes) * s0 / formula(n0)
    else:
        up = formula(nodes)
    return up + COSTS.teardown_s


@lru_cache(maxsize=1)
def _tcp():  # the host's TCP timers, read once
    return rtt.tcp_from_proc()


@lru_cache(maxsize=4096)
def write_ms(config: SweepConfig, cell: Cell) -> float:
    """Expected time of one write of ``cell``: the mean of model.rtt's exact
    computation (independent writes) with the service time COSTS.base_write_ms; with
    jitter, its simulation."""
    topo = config.topology(cell.nodes)
    matrix = links.build(
        config.profile,
        topo,
        delay_ms=cell.latency_ms,
        loss_pct=cell.loss_pct,
        path=config.links_file,
    )
    level = config.level(cell)  # YCSB cells: its writes' level stands for its ops
    scenario = rtt.Scenario(matrix, cell.rf, level, config.policy, _tcp())
    method = "simulation" if scenario.jittered else "exact"
    service = rtt.Service.constant(COSTS.base_write_ms)
    return rtt.predict(scenario, service, method=method).mean


YCSB_START_S = 4.0  # a YCSB cell's JVM start and driver session (measured ~3 s here)
YCSB_MAX_OPS = 1800.0  # what this machine serves at 0 ms (benchmarks/ycsb.py, 32 threads)


def ycsb_ops_per_s(config: SweepConfig, cell: Cell) -> float:
    """A YCSB cell's throughput: its threads over the model's time per operation (closed
    loop), its target (open loop), at most what the machine serves."""
    closed = cell.threads * 1000 / write_ms(config, cell)
    rate = min(closed, cell.target) if cell.target is not None else closed
    return min(rate, YCSB_MAX_OPS)


def cell_s(config: SweepConfig, cell: Cell) -> float:
    """A cell's wall time: its writes at the model's time per write, scaled by how this
    machine's cells compared with the model (``COSTS.cell_scale``)."""
    if cell.ycsb:
        return config.operations / ycsb_ops_per_s(config, cell) + YCSB_START_S + CELL_OVERHEAD_S
    model = (config.writes + config.warmup) * write_ms(config, cell) / 1000 + CELL_OVERHEAD_S
    return model * COSTS.cell_scale


def verify_s(config: SweepConfig, cell: Cell) -> float:
    if not config.verify_probes:
        return 0.0
    wait = max(1.0, 4 * 2 * cell.latency_ms / 1000)
    return config.verify_probes * PROBE_INTERVAL_S + wait + 0.5


def split_s(config: SweepConfig, cells: list[Cell]) -> tuple[float, float]:
    """(time in cells, fixed time: bring-ups and checks) for ``cells`` on one testbed."""
    in_cells = fixed = 0.0
    seen_nodes: set[int] = set()
    seen_networks = set()
    for cell in cells:
        if cell.nodes not in seen_nodes:
            seen_nodes.add(cell.nodes)
            fixed += bringup_s(cell.nodes) + prepare_s(config, cell.nodes)
        if cell.network not in seen_networks:
            seen_networks.add(cell.network)
            fixed += verify_s(config, cell)
        in_cells += cell_s(config, cell)
    return in_cells, fixed


def sweep_s(config: SweepConfig, cells: list[Cell] | None = None) -> float:
    """Estimated wall time of ``cells`` (default: the whole grid)."""
    return sum(split_s(config, config.cells() if cells is None else cells))


# -- what a testbed costs the machine: the parallel sweep's limits -------------------------

# Resident memory of one node beyond its heap (metaspace, code cache, thread stacks,
# direct buffers) and of the endpoint's workload; the shaper's is in ``Costs``.
# Measured (benchmarks/testbed_memory.py): a 5-node testbed shaped by the gateway, heap
# 256 MB, 2044 MB without the workload process (median of 2).
NODE_OVERHEAD_MB = 100
WORKLOAD_MB = 120
MAX_MEMORY_SHARE = 0.75  # --parallel auto keeps all testbeds under this share of RAM


def cpu_cores(config: SweepConfig, cell: Cell) -> float:
    """Cores a cell's writes keep busy: CPU per write over the time per write. A YCSB
    cell is measured alone: its threads load the machine as much as it serves."""
    if cell.ycsb:
        return plan.EXCLUSIVE
    return COSTS.cpu_ms_per_write / write_ms(config, cell)


def idle_cores(nodes: int) -> float:
    return nodes * COSTS.idle_cores_per_node + COSTS.idle_cores_shaper


def testbed_mb(config: SweepConfig, nodes: int) -> float:
    """Resident memory of one testbed of ``nodes`` nodes (netns)."""
    return nodes * (config.heap_mb + NODE_OVERHEAD_MB) + COSTS.shaper_mb + WORKLOAD_MB


def budget(cores: int) -> float:
    """Cores the sweep's testbeds, idle and measuring, may keep busy together."""
    return cores * COSTS.max_busy


def auto_parallel(
    config: SweepConfig,
    cells: list[Cell],
    *,
    cores: int,
    total_mb: float,
    used_mb: float,
    accepted: tuple[int, str] | None = None,
) -> tuple[int, str]:
    """How many testbeds at once: (P, why). At most the largest P the fidelity benchmark
    accepted (``accepted``: this machine's verdict and where it comes from; default the
    development machine's, ``fidelity.default_verdict``) and what the memory allows (every
    testbed under MAX_MEMORY_SHARE of RAM beside what is in use already); within that,
    the P whose replayed schedule (``wall_s``: idle testbeds shrink what measurements
    may use) ends first."""
    if not capabilities(config.backend).namespaces:  # what the fidelity benchmark measured
        return 1, f"the {config.backend} backend: one testbed at a time"
    nodes = max((c.nodes for c in cells), default=max(config.nodes))
    each = testbed_mb(config, nodes)
    by_mem = max(1, int((total_mb * MAX_MEMORY_SHARE - used_mb) / each))
    # idle testbeds alone must leave the measurements some of the budget
    by_cpu = max(1, int(budget(cores) / idle_cores(nodes))) if idle_cores(nodes) else by_mem
    default = fidelity.default_verdict(COSTS.parallel_by_nodes, COSTS.max_parallel, nodes)
    by_fidelity, source = accepted or default
    candidates = range(1, max(1, min(by_mem, by_cpu, by_fidelity)) + 1)
    times = {p: wall_s(config, cells, p, cores) for p in candidates}
    best = min(times, key=lambda p: (round(times[p] / 60), p))  # ties: fewer testbeds
    why = (
        f"fidelity accepts up to {by_fidelity} ({source}); memory allows {by_mem} testbeds "
        f"of {nodes} nodes ({each / 1024:.1f} GB each, {used_mb / 1024:.1f} of "
        f"{total_mb / 1024:.1f} GB in use); {cores} cores at most "
        f"{100 * COSTS.max_busy:.0f} % busy allow {by_cpu}; "
        f"P={best} ends first by the model ({fmt_duration(times[best])}"
        + (f"; P=1: {fmt_duration(times[1])}" if best != 1 else "")
        + ")"
    )
    return best, why


def prepare_s(config: SweepConfig, nodes: int) -> float:
    """After a bring-up: the cluster warm-up and the baseline writes at 0 ms."""
    return (config.baseline_writes + config.cluster_warmup) * COSTS.base_write_ms / 1000


def units(config: SweepConfig, cells: list[Cell]) -> list[plan.Unit]:
    """``cells`` as the scheduler's units, costed by this model."""
    return plan.units(
        cells,
        lambda c: cell_s(config, c),
        lambda c: verify_s(config, c),
        lambda c: cpu_cores(config, c),
        config.phase,
    )


def wall_s(
    config: SweepConfig,
    cells: list[Cell],
    parallel: int,
    cores: int,
    up: list[int | None] | None = None,
    machines: list[int] | None = None,
) -> float:
    """The sweep's wall time for ``cells`` on ``parallel`` testbeds: the scheduler's own
    rules (``plan``) replayed in virtual time over this model's costs (``up``: the node
    counts of clusters already running, one per shard; ``machines``: testbeds per
    ``--workers`` machine, each assumed to have ``cores`` and this model's costs)."""
    if not cells:
        return 0.0
    todo = units(config, cells)
    # as the scheduler: no testbed without a unit (running ones, ``up``, all count)
    shards = parallel if up else min(parallel, len(todo))
    return plan.simulate(
        todo,
        shards,
        budget=budget(cores),
        idle_cores=idle_cores,
        bringup_s=bringup_s,
        prepare_s=lambda n: prepare_s(config, n),
        up=up or (),
        machines=machines or (),
    )


def fmt_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"
