"""Cells with a fault (experiments.settings.faults): what the writes saw around it. Pure functions
over ``Results.faults`` (cells with their requests and ``fault_log``), plus figures.

- ``availability``: per cell, errors before, during and after the fault, and the error
  rate of the writes whose replica set included a faulty node against those whose did
  not; with the recovery's times (node started, all UN, hints delivered).
- ``timeline`` figures: each write's RTT against its start time, errors marked, the
  acknowledged writes the read-back found lost or short of a replica marked, the
  fault's steps as vertical lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.settings.faults import parse
from experiments.settings.faults import window_ns as window_of_events
from workloads.readback import lost


def window_ns(cell: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """When the fault was made and healed (wall clock, ns) from the cell's log; the heal
    is None for a fault lasting to the cell's end."""
    return window_of_events((cell.get("fault_log") or {}).get("events") or [])


def faulty_nodes(text: str) -> set[str]:
    """The nodes a fault takes away from the others: killed, paused or restarted nodes;
    for a partition, the smallest group's (the minority, cut off)."""
    f = parse(text)
    if f is None:
        return set()
    if f.kind in ("kill", "pause", "restart"):
        return set(f.nodes)
    if f.kind == "partition":
        # the smallest group; of equal ones, the first named (deterministic)
        sizes = [(len(g), i) for i, g in enumerate(f.groups)]
        return set(f.groups[min(sizes)[1]])
    return {h for p in f.pairs for h in p}


def availability(cells: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per fault cell (see the module)."""
    rows = []
    for c in cells:
        if c.get("fault") in (None, "none"):
            continue  # a link trace only: see trace_table
        reqs = c.get("requests") or []
        made, healed = window_ns(c)
        bad = faulty_nodes(c["fault"])
        phases: dict[str, list[int]] = {"before": [0, 0], "during": [0, 0], "after": [0, 0]}
        touched = [0, 0]  # [writes, errors] whose replicas include a faulty node
        untouched = [0, 0]
        for r in reqs:
            # a write in flight when the fault was made is during it, not before it
            start, end = r["t_start_ns"], r["t_start_ns"] + r["rtt_ns"]
            phase = (
                "before"
                if made is None or end < made
                else "during"
                if healed is None or start < healed
                else "after"
            )
            err = r["error"] is not None
            phases[phase][0] += 1
            phases[phase][1] += err
            if phase == "during":
                group = touched if bad & set((r["replicas"] or "").split(",")) else untouched
                group[0] += 1
                group[1] += err
        rec = (c.get("fault_log") or {}).get("recovery") or {}
        rows.append(
            {
                "cell_id": c["cell_id"],
                "run_id": c["run_id"],
                "nodes": c["nodes"],
                "rf": c["rf"],
                "cl": c["cl"],
                "latency_ms": c["latency_ms"],
                "loss_pct": c["loss_pct"],
                "fault": c["fault"],
                "writes": len(reqs),
                **{f"{k}_writes": v[0] for k, v in phases.items()},
                **{f"{k}_errors": v[1] for k, v in phases.items()},
                "replica_faulty_writes": touched[0],
                "replica_faulty_errors": touched[1],
                "replica_ok_writes": untouched[0],
                "replica_ok_errors": untouched[1],
                "restart_s": rec.get("restart_s"),
                "all_up_s": rec.get("all_up_s"),
                "hints_delivered_s": rec.get("hints_delivered_s"),
                **read_back(c),
            }
        )
    return rows


def read_back(cell: Mapping[str, Any]) -> dict[str, Any]:
    """A cell's read-back in the availability row: ``acknowledged``, ``lost`` and
    ``repaired`` (a replica lacked them, ALL returned them) writes, ``lost_expected``;
    None each where the cell was not read back."""
    found = cell.get("readback") or {}
    if lost(found) is None:
        return dict.fromkeys(("acknowledged", "lost", "repaired", "lost_expected"))
    return {
        "acknowledged": found["acknowledged"],
        "lost": lost(found),
        "repaired": len(found.get("repaired_keys") or []),
        "lost_expected": bool(found.get("expected")),
    }


def trace_table(cells: Iterable[Mapping[str, Any]]) -> str:
    """Per cell with a link trace: its steps applied, how far off schedule at most, and
    the writes' median, p95 and errors over the whole cell."""
    lines = [f"{'cell':<56} {'steps':>7} {'off ms':>7} {'median':>7} {'p95':>7} {'errors':>6}"]
    for c in cells:
        log = c.get("trace_log")
        if not log:
            continue
        rtts = sorted(r["rtt_ns"] / 1e6 for r in c.get("requests") or [] if r["error"] is None)
        med = rtts[len(rtts) // 2] if rtts else float("nan")
        p95 = rtts[min(len(rtts) - 1, int(0.95 * len(rtts)))] if rtts else float("nan")
        errors = sum(r["error"] is not None for r in c.get("requests") or [])
        off = log.get("max_late_ms")
        lines.append(
            f"{c['cell_id']:<56} {log['applied']:>3}/{log['steps']:<3} "
            f"{off if off is not None else float('nan'):>7.1f} {med:>7.1f} {p95:>7.1f} {errors:>6}"
        )
    return "\n".join(lines) if len(lines) > 1 else ""


def _pct(errors: int, writes: int) -> str:
    return f"{100 * errors / writes:5.1f} %" if writes else "    - "


def format_availability(rows: Sequence[Mapping[str, Any]]) -> str:
    """The availability table: error rates by RF x CL x fault, before/during/after and by
    whether the write's replicas included a faulty node; the recovery's times."""
    if not rows:
        return "no cells with a fault"
    lines = [
        f"{'n':>2} {'RF':>2} {'CL':<12} {'ms':>4} {'loss':>5} {'fault':<30} {'before':>7} "
        f"{'during':>7} {'after':>7} {'faulty replica':>14} {'others':>7} "
        f"{'recovered (s): start/UN/hints':>30} {'lost':>11}"
    ]
    for r in sorted(
        rows, key=lambda r: (r["nodes"], r["rf"], r["cl"], r["latency_ms"], r["fault"])
    ):
        rec = "/".join(
            f"{r[k]:.1f}" if r[k] is not None else "-"
            for k in ("restart_s", "all_up_s", "hints_delivered_s")
        )
        lines.append(
            f"{r['nodes']:>2} {r['rf']:>2} {r['cl']:<12} {r['latency_ms']:>4g} "
            f"{r['loss_pct']:>5g} {r['fault']:<30} "
            f"{_pct(r['before_errors'], r['before_writes']):>7} "
            f"{_pct(r['during_errors'], r['during_writes']):>7} "
            f"{_pct(r['after_errors'], r['after_writes']):>7} "
            f"{_pct(r['replica_faulty_errors'], r['replica_faulty_writes']):>14} "
            f"{_pct(r['replica_ok_errors'], r['replica_ok_writes']):>7} {rec:>30} "
            f"{_lost(r):>11}"
        )
    lines.append(
        "errors in % of the writes that ended before the fault was made, were under way "
        "while it lasted, or started after it was healed; during it, split by whether the "
        "write's replicas included a faulty node; lost: acknowledged writes no replica "
        "returned when read back after the recovery, of those acknowledged (* expected: "
        "a node killed at RF 1)"
    )
    return "\n".join(lines)


# the read-back's keys marked on a fault figure: (its list, legend, scatter style)
READ_BACK_MARKS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("lost_keys", "acknowledged, then lost", {"marker": "X", "color": "black"}),
    ("repaired_keys", "acknowledged, a replica lacked it",
     {"marker": "o", "facecolors": "none", "edgecolors": "tab:orange"}),
)  # fmt: skip


def _lost(r: Mapping[str, Any]) -> str:
    if r.get("acknowledged") is None:
        return "-"
    return f"{r['lost']}/{r['acknowledged']}" + ("*" if r["lost_expected"] else "")


def figures(cells: Sequence[Mapping[str, Any]], out: Path) -> list[dict[str, Any]]:
    """fault_<cell>.{png,svg,pdf}: each write's RTT against its start, errors as red marks,
    acknowledged writes the read-back found lost (black) or on too few replicas (orange
    rings), the fault's steps as vertical lines."""
    from .figsave import log_ticks, plt, pt, save_figure, sized

    made = []
    for c in cells:
        reqs = c.get("requests") or []
        if not reqs:
            continue
        t0 = min(r["t_start_ns"] for r in reqs)
        ok = [((r["t_start_ns"] - t0) / 1e9, r["rtt_ns"] / 1e6) for r in reqs if r["error"] is None]
        bad = [((r["t_start_ns"] - t0) / 1e9, r["rtt_ns"] / 1e6) for r in reqs if r["error"]]
        fig, ax = plt.subplots(figsize=sized(8, 4))
        if ok:
            ax.scatter([p[0] for p in ok], [p[1] for p in ok], s=4, label="write")
        if bad:
            ax.scatter(
                [p[0] for p in bad], [p[1] for p in bad], s=14, marker="x", color="red",
                label=f"error ({len(bad)})",
            )  # fmt: skip
        found = c.get("readback") or {}
        for keys, label, style in READ_BACK_MARKS:
            marked = set(found.get(keys) or ())
            at = [((r["t_start_ns"] - t0) / 1e9, r["rtt_ns"] / 1e6) for r in reqs
                  if r["error"] is None and r.get("key") in marked]  # fmt: skip
            if at:
                ax.scatter([p[0] for p in at], [p[1] for p in at], s=30,
                           label=f"{label} ({len(at)})", **style)  # fmt: skip
        for e in (c.get("fault_log") or {}).get("events") or []:
            if "at_ns" in e:
                x = (e["at_ns"] - t0) / 1e9
                ax.axvline(x, color="black", linestyle="--", linewidth=0.8)
                ax.text(x, ax.get_ylim()[1], f" {e.get('what')}", fontsize=pt(7), va="top")
        for step in (c.get("trace_log") or {}).get("schedule") or []:
            x = (step["at_ns"] - t0) / 1e9
            ax.axvline(x, color="tab:purple", linestyle=":", linewidth=0.8)
        ax.set_yscale("log")
        rtts = [r["rtt_ns"] / 1e6 for r in reqs if r["rtt_ns"] > 0]
        if rtts:
            log_ticks(ax.yaxis, min(rtts), max(rtts))
        ax.set_xlabel("time since the first measured write (s)")
        ax.set_ylabel("RTT (ms)")
        what = " + ".join(x for x in (c.get("fault"), c.get("trace")) if x not in (None, "none"))
        ax.set_title(
            f"{what}: {c['nodes']} nodes, RF {c['rf']}, {c['cl']}, "
            f"{c['latency_ms']:g} ms / {c['loss_pct']:g} %",
            fontsize=pt(9),
        )
        ax.legend(fontsize=pt(7))
        ax.grid(True, alpha=0.3)
        name = f"fault_{c['cell_id']}"  # ids have dots (p0.5): no with_suffix here
        made.append({"name": name, "paths": save_figure(fig, out, name), "series": 2})
    return made


if __name__ == "__main__":
    import sys

    from common.command import not_a_command

    sys.exit(
        not_a_command(
            "analysis.faults",
            "its tables and figures are in `edgetb plots DIR` and `edgetb report DIR`",
        )
    )
