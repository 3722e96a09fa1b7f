"""One unit on a shard's testbed: the cells of one network setting, measured one after
another. The network is set from the cell's link matrix and checked once (``emulation
verify`` of one edge pair, stored with each cell); a component lost in a cell (the
shaper, a node) is recovered from once and the cell measured again (``recover``)."""

from __future__ import annotations

import time
from typing import Any

from emulation import api as emulation
from emulation import links
from emulation.verify import measure_pair

from ..plan import shards as plan
from ..settings.cells import Cell
from . import nemesis
from .measure import Shard, measure
from .watch import ComponentLost, NodeLost

MAX_RECOVERIES_PER_CELL = 1
MAX_NODE_RESTARTS = 3  # per node and testbed: a node that keeps dying stops the sweep


def measure_unit(shard: Shard, unit: plan.Unit) -> None:
    """The unit's cells one after another on the shard's testbed, holding the gate's
    share for its demand; a component lost in a cell is recovered from once, and the
    cell measured again."""
    sweep = shard.sweep
    assert sweep.gate is not None and shard.tb is not None
    alone = unit.demand > sweep.gate.capacity
    sweep.progress.shard_status(
        shard.name, f"{unit.label}: waiting for the machine" + (" (alone)" if alone else "")
    )
    with sweep.gate.hold("measure", unit.demand, stop=sweep.stop, owner=shard.name):
        shaping: dict[str, Any] | None = None
        for cell in unit.cells:
            if sweep.stop.is_set():
                return
            for attempt in range(1 + MAX_RECOVERIES_PER_CELL):
                try:
                    if shaping is None:
                        shaping = set_network(shard, cell)
                    measure(shard, cell, shaping)
                    break
                except ComponentLost as exc:
                    if not exc.recoverable or attempt == MAX_RECOVERIES_PER_CELL:
                        raise
                    if shard.worker is not None:
                        shard.worker.abort()
                        shard.worker = None
                    recover(shard, cell, exc)
                    shard.worker = shard.start_worker()
                    shaping = None  # the restarted shaper gets the cell's setting again


def recover(shard: Shard, cell: Cell, exc: ComponentLost) -> None:
    """After the emulation broke (the shaper died, shaping vanished or was changed
    by another process): the shaper removed and built again (a new gateway, re-wired
    cleanly), the cell's network setting applied, the cluster whole again (the driver
    sees every node up). After a node died: the node started again (its data and
    command line), every node UN from every node, no hints pending. The fault and the
    recovery time go into the run's manifest."""
    sweep, tb = shard.sweep, shard.tb
    assert tb is not None
    t0 = time.monotonic()
    extra: dict[str, Any] = {}
    if isinstance(exc, NodeLost):
        shard.restarts[exc.node] += 1
        if shard.restarts[exc.node] > MAX_NODE_RESTARTS:
            raise ComponentLost(
                f"{exc.node} died {shard.restarts[exc.node]} times in this sweep; not "
                f"started again (its log: {tb.nodes[exc.node].system_log}); rerun the "
                "same command to resume"
            ) from exc
        shard.note(f"{exc}; starting {exc.node} again, then measuring {cell.cell_id} again")
        # its death is recorded (the manifest's faults): what its peers logged of it is
        # expected in their logs (logscan's fault allowances), not unexplained
        tb.faulted = True
        extra = {"node": exc.node, **nemesis.whole_again(tb, [exc.node], tb.restart_node)}
        extra.pop("nodetool", None)
    else:
        shard.note(f"{exc}; restarting the shaper, then measuring {cell.cell_id} again")
        emulation.clear(tb, remove=True)
        set_network(shard, cell)
        tb.driver_probe(timeout_s=180)
    took = round(time.monotonic() - t0, 1)
    with sweep.lock:
        sweep.faults.append(
            {
                "cell_id": cell.cell_id,
                "shard": shard.name,
                "problem": str(exc),
                "at": time.time(),
                "recovery_s": took,
                **extra,
            }
        )
        sweep.store.update_manifest(sweep.run_id, faults=list(sweep.faults))
    shard.note(f"recovered in {took:.1f} s")


def set_network(shard: Shard, cell: Cell) -> dict[str, Any]:
    """Apply the cell's link matrix; measure one edge pair against it."""
    cfg, tb = shard.config, shard.tb
    assert tb is not None
    shard.sweep.progress.shard_status(
        shard.name, f"network {cell.latency_ms:g} ms / {cell.loss_pct:g} %"
    )
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
    sites = tb.topology.site_names or ()
    if len(sites) > 1:  # the WAN: a node of the first site and one of the second
        a, b = (tb.topology.site_nodes(s)[0].name for s in sites[:2])
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
        low, high = pair.loss_interval_pct
        shard.note(
            f"network {cell.latency_ms:g} ms / {cell.loss_pct:g} % ({cfg.profile}) on "
            f"{cell.nodes} nodes: {a}<->{b} RTT {rtt} ms (configured "
            f"{pair.configured_rtt_ms:g}), loss {pair.measured_loss_pct:.1f} % "
            f"(configured {pair.configured_loss_pct:.2f}: 95 % of {pair.probes} probes fall "
            f"in {low:.1f}-{high:.1f}, {'ok' if pair.loss_ok else 'OUTSIDE'})"
        )
    return shaping
