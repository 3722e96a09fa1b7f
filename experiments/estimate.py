"""How long a sweep will take: a small model, used by --dry-run and for the ETA.

Per write: a CPU-bound base (~5-6 ms here at 0 ms), the endpoint <-> coordinator round
trip, one coordinator <-> replica round trip when the write needs a remote ack (see
``consistency.remote_round_trip_probability``), and a loss penalty: when a needed packet
is lost, TCP retransmits after about RTO_MS plus one more round trip. Fixed costs: one
cluster bring-up and teardown per node count, one emulation check per network setting.
The running sweep rescales the model by what it has measured so far.
"""

from __future__ import annotations

from functools import lru_cache
from math import comb

from emulation import links
from testbed.topology import Topology

from .config import Cell, SweepConfig
from .consistency import required_acks

BASE_WRITE_MS = 5.0  # measured median at 0 ms through the gateway, 2 cores (3-5 nodes)
RTO_MS = 200.0
CELL_OVERHEAD_S = 0.2
PROBE_INTERVAL_S = 0.005


def bringup_s(nodes: int) -> float:
    """Cluster up (measured: 11.6 s for 3 nodes, 18.9 s for 5), gateway boot, teardown."""
    return 1.0 + 3.7 * nodes + 5.0 + 2.0


def _miss_probability(available: int, needed: int, loss: float) -> float:
    """P(fewer than ``needed`` of ``available`` independent round trips succeed)."""
    if needed <= 0:
        return 0.0
    ok = 1 - loss
    got = sum(
        comb(available, k) * ok**k * loss ** (available - k) for k in range(needed, available + 1)
    )
    return 1 - got


@lru_cache(maxsize=4096)
def write_ms(config: SweepConfig, cell: Cell) -> float:
    """Expected time of one write of ``cell``."""
    topo = Topology(edge_nodes=cell.nodes)
    matrix = links.build(
        config.profile,
        topo,
        delay_ms=cell.latency_ms,
        loss_pct=cell.loss_pct,
        path=config.links_file,
    )
    ep = topo.endpoint.name
    edges = [h.name for h in topo.edges]
    client_rtt = sum(matrix.rtt_ms(ep, e) for e in edges) / len(edges)
    client_loss = sum(matrix.round_trip_loss_pct(ep, e) for e in edges) / len(edges) / 100
    pairs = [(a, b) for a in edges for b in edges if a != b]
    edge_rtt = sum(matrix.rtt_ms(a, b) for a, b in pairs) / len(pairs) if pairs else 0.0
    edge_loss = (
        sum(matrix.round_trip_loss_pct(a, b) for a, b in pairs) / len(pairs) / 100 if pairs else 0.0
    )
    acks = required_acks(config.cl, cell.rf)
    p_c = cell.rf / cell.nodes
    remote_needed = p_c * (1.0 if acks > 1 else 0.0) + (1 - p_c)
    miss = p_c * _miss_probability(cell.rf - 1, acks - 1, edge_loss) + (
        1 - p_c
    ) * _miss_probability(cell.rf, acks, edge_loss)
    return (
        BASE_WRITE_MS
        + client_rtt
        + remote_needed * edge_rtt
        + client_loss * (RTO_MS + client_rtt)
        + miss * (RTO_MS + edge_rtt)
    )


def cell_s(config: SweepConfig, cell: Cell) -> float:
    return (config.writes + config.warmup) * write_ms(config, cell) / 1000 + CELL_OVERHEAD_S


def verify_s(config: SweepConfig, cell: Cell) -> float:
    if not config.verify_probes:
        return 0.0
    wait = max(1.0, 4 * 2 * cell.latency_ms / 1000)
    return config.verify_probes * PROBE_INTERVAL_S + wait + 0.5


def split_s(
    config: SweepConfig, cells: list[Cell], *, up: int | None = None
) -> tuple[float, float]:
    """(time in cells, fixed time: bring-ups and checks) for ``cells``; ``up`` is a node
    count whose cluster is already running (no bring-up counted for it)."""
    in_cells = fixed = 0.0
    seen_nodes, seen_networks = {up}, set()
    for cell in cells:
        if cell.nodes not in seen_nodes:
            seen_nodes.add(cell.nodes)
            fixed += bringup_s(cell.nodes) + (
                (config.baseline_writes + config.cluster_warmup) * BASE_WRITE_MS / 1000
            )
        if cell.network not in seen_networks:
            seen_networks.add(cell.network)
            fixed += verify_s(config, cell)
        in_cells += cell_s(config, cell)
    return in_cells, fixed


def sweep_s(config: SweepConfig, cells: list[Cell] | None = None) -> float:
    """Estimated wall time of ``cells`` (default: the whole grid)."""
    return sum(split_s(config, config.cells() if cells is None else cells))


def fmt_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"
