"""The sweep's summaries: per-cell statistics in milliseconds, the table printed at the
end of a run, and the dry run's list of cells with their estimated durations."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from typing import Any

import numpy as np

from workloads.readback import lost

from ..plan import calibration, estimate, stages
from ..settings.config import SweepConfig
from ..store.db import Store
from .figures import REFRESH_EVERY_S

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
    every = store.cells(run_id)
    if not every:
        return "(no cells stored)"
    cells = [c for c in every if c.get("workload") in (None, "writes")]
    tables = [_writes_table(store, run_id, cells)] if cells else []
    if len(cells) < len(every):
        tables.append(ycsb_table(store.ycsb_ops(run_id)))
    return "\n\n".join(tables)


def ycsb_table(rows: Sequence[dict]) -> str:
    """YCSB cells: throughput and each operation's p50/p99 (ms)."""
    head = (
        f"{'nodes':>5} {'RF':>3} {'lat ms':>6} {'loss %':>6} {'workload':<9} {'thr':>4} "
        f"{'read/write':<14} {'ops/s':>8} {'errors':>6}  p50/p99 ms per operation"
    )
    lines = [head, "-" * len(head)]
    for _cell, group in groupby(rows, key=lambda r: (r["run_id"], r["cell_id"])):
        ops = [r for r in group if not r["intended"]]
        overall = next((r for r in ops if r["op"] == "OVERALL"), None)
        if overall is None:
            continue
        r = overall
        per_op = ", ".join(
            f"{o['op']} {o['p50_ms']:.1f}/{o['p99_ms']:.1f}"
            for o in ops
            if o["op"] != "OVERALL" and o["p50_ms"] is not None
        )
        lines.append(
            f"{r['nodes']:>5} {r['rf']:>3} {r['latency_ms']:>6g} {r['loss_pct']:>6g} "
            f"{r['workload']:<9} {r['threads']:>4} {r['read_cl'] + '/' + r['write_cl']:<14} "
            f"{r['throughput_ops'] or 0:>8.1f} {r['errors']:>6}  {per_op}"
        )
    return "\n".join(lines)


def _writes_table(store: Store, run_id: str, cells: list[dict]) -> str:
    head = (
        f"{'nodes':>5} {'RF':>3} {'lat ms':>6} {'loss %':>6} {'rep':>3} {'writes':>6} "
        f"{'mean ms':>8} {'median':>8} {'p95':>8} {'errors':>6} {'c∈R':>5} {'lost':>5}"
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
            f"{(cir if cir is not None else float('nan')):>5.2f} {lost_said(c):>5}"
        )
    legend = "c∈R: the share of writes whose coordinator held a replica of the key"
    return "\n".join([*lines, legend, *losses(order)])


def lost_said(cell: dict) -> str:
    """A cell's acknowledged writes lost as its table shows them: "-" (not read back),
    the count, "*" where losses were expected (a node killed at RF 1)."""
    n = lost(cell.get("readback"))
    if n is None:
        return "-"
    return f"{n}" + ("*" if cell["readback"].get("expected") else "")


def losses(cells: Sequence[dict]) -> list[str]:
    """The lines under the table that say loudly where acknowledged writes were lost
    (and, quietly, where the read-back could not be made)."""
    read = [c for c in cells if c.get("readback")]
    failed = [c["cell_id"] for c in read if "error" in c["readback"]]
    lossy = [c for c in read if lost(c["readback"])]
    loud = [c for c in lossy if not c["readback"].get("expected")]
    out = []
    if loud:
        out.append(
            f"LOST: {sum(c['readback']['lost'] for c in loud)} acknowledged writes in "
            f"{len(loud)} cell(s) are on no replica: "
            + ", ".join(f"{c['cell_id']} ({c['readback']['lost']})" for c in loud)
        )
    if len(lossy) > len(loud):
        out.append("* lost where expected: a node killed or restarted at RF 1")
    if failed:
        out.append(f"read-back failed in {len(failed)} cell(s): {', '.join(failed)}")
    return out


def _cell_lines(config: SweepConfig, cells: list) -> list[str]:
    """The sweep's settings, then its cells per node count with their estimates."""
    where = f", sites {config.sites}" if config.sites else ""
    lines = [
        f"sweep {config.name!r}: {len(cells)} cells, profile {config.profile}, "
        f"{config.cl.replace(',', '/')}{where}, {config.policy}, {config.writes} writes "
        f"(+{config.warmup} warm-up) x {config.repetitions} repetition(s)"
    ]
    for n, grouped in groupby(cells, key=lambda c: c.nodes):
        group = list(grouped)
        lines.append(
            f"  {n} nodes: RF {', '.join(map(str, config.rfs(n)))}; "
            f"{len(group)} cells, about "
            f"{estimate.fmt_duration(estimate.sweep_s(config, group))}"
        )
        for cell in group:
            unit = "ms/op" if cell.ycsb else "ms/write"
            lines.append(f"    {cell.cell_id:<28} ~{estimate.write_ms(config, cell):7.1f} {unit}")
    for n, r in config.skipped():
        lines.append(f"  skipped: RF {r} on {n} nodes (more replicas than nodes)")
    return lines


def model_figures(nodes: int) -> list[dict[str, Any]]:
    """The model's figures for a testbed of ``nodes`` nodes, each with its unit and
    whether it was measured on this machine (else the development machine's)."""
    costs, m = estimate.COSTS, estimate.COSTS.measured
    rows = [
        ("write at 0 ms", costs.base_write_ms, "ms", "base_write_ms" in m),
        ("CPU per write", costs.cpu_ms_per_write, "CPU-ms", "cpu_ms_per_write" in m),
        (f"an idle {nodes}-node testbed", estimate.idle_cores(nodes), "cores",
         "idle_cores_per_node" in m),
        (f"bring-up and teardown, {nodes} nodes", estimate.bringup_s(nodes), "s",
         "bringup" in m),
        ("cells against the model", costs.cell_scale, "x", "cell_scale" in m),
    ]  # fmt: skip
    return [
        {"figure": name, "value": round(v, 3), "unit": unit, "measured_here": here}
        for name, v, unit, here in rows
    ]


def dry_run_plan(
    config: SweepConfig,
    parallel: int = 1,
    why: str = "",
    cores: int = 1,
    machines: dict[str, int] | None = None,
    stored: frozenset[str] = frozenset(),
    staged: list[stages.Stage] | None = None,
) -> dict[str, Any]:
    """What a dry run tells (``--json`` prints it as it is): the cells, those stored
    already (``stored``: their ids, left out of the estimate), P and why (``staged``:
    stages by testbed size, each with its own), the estimated wall time and where it
    goes, the model's figures and where each comes from."""
    cells = config.cells()
    todo = [c for c in cells if c.cell_id not in stored]
    sizes = list(machines.values()) if machines else None
    if staged is not None and len(staged) == 1 and not machines:  # what the run will use
        parallel, why = staged[0].parallel, staged[0].why
    in_stages = staged is not None and len(staged) > 1 and not machines
    first = [c for c in todo if config.phase(c) == 0] if config.first_pass is not None else []
    if staged is not None and in_stages:  # each stage's estimate, made once
        shards, why = max(s.parallel for s in staged), stages.summary(staged)
        wall = stages.wall_s(staged)
        early = [s for s in staged if config.phase(s.cells[0]) == 0]
        first_s = stages.wall_s(early) if first else None
    else:
        shards = sum(sizes) if sizes else parallel
        wall = estimate.wall_s(config, todo, shards, cores, machines=sizes)
        first_s = estimate.wall_s(config, first, shards, cores, machines=sizes) if first else None
    in_cells, _ = estimate.split_s(config, todo)
    # one testbed in the scheduler's own order (the replay at P=1, the same as ``wall``
    # when that is one testbed here): a first pass can take it back to a node count it
    # left (the quick preset: 5, 3, then 5 nodes again), one more bring-up than
    # split_s's one per node count
    one = wall if shards == 1 and not sizes else estimate.wall_s(config, todo, 1, cores)
    return {
        "sweep": config.name,
        "cells": len(cells),
        "stored": len(cells) - len(todo),
        "to_measure": len(todo),
        "writes_per_cell": config.writes,
        "warmup_per_cell": config.warmup,
        "repetitions": config.repetitions,
        "parallel": shards,
        "why": why,
        "workers": machines or None,
        "cores": cores,
        "estimated_s": round(wall),
        "one_at_a_time_s": round(one),
        "in_cells_s": round(in_cells),
        "bringups_and_checks_s": round(one - in_cells),
        "first_pass_s": round(first_s) if first_s is not None else None,
        "stages": _stage_rows(staged) if staged and in_stages else None,
        "figures": model_figures(max(config.nodes)),
        "costs": estimate.COSTS.source,
        "calibrated_on": calibrated_on(),
        "this_machine": calibration.machine_of(calibration.machine_facts()),
    }


def _stage_rows(staged: list[stages.Stage]) -> list[dict]:
    """A dry run's stages (``stages.auto``): each one's sizes, cells, P and estimate."""
    return [
        {
            "nodes": list(s.nodes),
            "cells": len(s.cells),
            "parallel": s.parallel,
            "why": s.why,
            "estimated_s": round(s.estimated_s),
        }
        for s in staged
    ]


def calibrated_on() -> str:
    """Where the model's measured figures come from: the machine a calibration names, the
    results directory's own cells, or (nothing measured) the development machine."""
    costs = estimate.COSTS
    if costs.calibrated_on:
        return costs.calibrated_on
    if costs.measured:
        return "the cells stored in this results directory"
    return estimate.DEVELOPMENT_MACHINE


def _calibration_line(plan: dict[str, Any]) -> str:
    """Which machine the estimate's figures were measured on, and whether it is this one."""
    source, here = plan["calibrated_on"], plan["this_machine"]
    if source == estimate.DEVELOPMENT_MACHINE:
        return (
            f"  calibrated on: {source}; this machine, {here}, has stored no sweep yet "
            "(the first one calibrates it)"
        )
    same = source.startswith(f"{here}, ")
    return f"  calibrated on: {source}" + ("" if same else f" (this machine is {here})")


def dry_run(config: SweepConfig, plan: dict[str, Any], verbose: bool = False) -> str:
    """``plan`` (``dry_run_plan``'s) as a short summary (cells, P, time, where the time goes,
    the model's figures); with ``verbose`` every cell's estimate after it."""
    machines, cores, why = plan["workers"], plan["cores"], plan["why"]
    stored = plan["stored"]
    d = estimate.fmt_duration
    where = (
        f"on {len(machines)} workers ("
        + ", ".join(f"{w}: {p} at once" for w, p in machines.items())
        + f"; each assumed to have this machine's {cores} cores and costs)"
        if machines
        else f"on {plan['parallel']} testbed{'s' if plan['parallel'] > 1 else ''} at once"
    )
    lines = [
        f"sweep {config.name!r}: {plan['cells']} cells of {config.writes} writes "
        f"(+{config.warmup} warm-up) x {config.repetitions} repetition(s)"
        + (f"; {plan['stored']} stored already, {plan['to_measure']} to measure" if stored else ""),
        f"estimated: {d(plan['estimated_s'])} {where}; one at a time {d(plan['one_at_a_time_s'])}"
        f" = cells {d(plan['in_cells_s'])} + bring-ups and checks "
        f"{d(plan['bringups_and_checks_s'])}",
    ]
    if plan.get("stages"):
        lines[1] = lines[1].replace(" on ", f" in {len(plan['stages'])} stages, up to ", 1)
        for s in plan["stages"]:
            nodes = "/".join(map(str, s["nodes"]))
            lines.append(
                f"  {nodes} nodes, {s['cells']} cells: {d(s['estimated_s'])} at P={s['parallel']}"
                f" ({s['why']})"
            )
    elif why and not machines:
        lines.append(f"  P={plan['parallel']}: {why}")
    lines.append(_calibration_line(plan))
    lines.append(
        "  figures: "
        + "; ".join(
            f"{f['figure']} {f['value']:g} {f['unit']} "
            f"({'measured here' if f['measured_here'] else 'development machine'})"
            for f in plan["figures"]
        )
    )
    if plan["first_pass_s"] is not None:
        assert config.first_pass is not None
        lines.append(
            f"  first pass ({', '.join(f'{x:g}' for x in config.first_pass)} ms): figures "
            f"after about {d(plan['first_pass_s'])}, refreshed every "
            f"{REFRESH_EVERY_S / 60:.0f} min while cells arrive"
        )
    if verbose:
        lines += _cell_lines(config, config.cells())
    else:
        lines.append("  (each cell's estimate: --verbose; all of this as JSON: --json)")
    return "\n".join(lines)
