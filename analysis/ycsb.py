"""YCSB results (workloads.ycsb cells of a sweep): the cost of consistency per network
setting, throughput against client threads, latency against throughput, percentiles per
operation. Pure functions over ``Results.ycsb`` rows, plus the figures.

Cells are pooled over repetitions (mean of the cells' figures, with a 95 % t-interval
when there are several)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from model.consistency import level_rank

from .stats import t95

NETWORK = ("nodes", "rf", "latency_ms", "loss_pct", "profile", "policy")
SETTING = (*NETWORK, "workload", "threads", "target", "records")


_level_rank = level_rank


def mean_ci(values: Sequence[float | None]) -> tuple[float, float | None]:
    """The mean and the half-width of its 95 % t-interval (None for one value)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return float("nan"), None
    m = statistics.fmean(vals)
    if len(vals) < 2:
        return m, None
    return m, t95(len(vals) - 1) * statistics.stdev(vals) / len(vals) ** 0.5


def cells(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One dict per YCSB cell: its settings, throughput and, per operation (measured
    from the actual start), count, errors and percentiles."""
    by: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        c = by.setdefault(
            (r["run_id"], r["cell_id"]),
            {k: r[k] for k in (*SETTING, "run_id", "cell_id", "read_cl", "write_cl", "repetition")}
            | {"ops": {}, "intended": {}},
        )
        if r["op"] == "OVERALL":
            c["throughput_ops"] = r["throughput_ops"]
            c["operations"] = r["count"]
            c["errors"] = r["errors"]
        else:
            (c["intended"] if r["intended"] else c["ops"])[r["op"]] = dict(r)
    return list(by.values())


def pooled(ycsb_cells: Iterable[Mapping[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """(setting..., read_cl, write_cl) -> throughput and per-op p50/p99, over repetitions."""
    acc: dict[tuple, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for c in ycsb_cells:
        key = (*(c[k] for k in SETTING), c["read_cl"], c["write_cl"])
        acc[key]["throughput_ops"].append(c.get("throughput_ops"))
        acc[key]["errors"].append(c.get("errors", 0))
        for op, d in c["ops"].items():
            for q in ("p50_ms", "p99_ms"):
                acc[key][f"{op} {q}"].append(d.get(q))
    return {
        key: {name: mean_ci(values) for name, values in figures.items()}
        for key, figures in acc.items()
    }


def consistency_cost(ycsb_cells: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per setting (network, workload, threads, target, records): every level pair
    against the weakest one measured there (normally ONE/ONE): throughput and each
    operation's p99, as measured and relative to the reference."""
    table = pooled(ycsb_cells)
    groups: dict[tuple, list[tuple]] = defaultdict(list)
    for key in table:
        groups[key[: len(SETTING)]].append(key)
    out = []
    for setting, keys in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        keys.sort(key=lambda k: (_level_rank(k[-1]), _level_rank(k[-2])))
        ref = min(keys, key=lambda k: (_level_rank(k[-2]) + _level_rank(k[-1]), k[-2], k[-1]))
        base = table[ref]
        for key in keys:
            fig = table[key]
            row: dict[str, Any] = dict(zip(SETTING, setting, strict=True))
            row |= {"read_cl": key[-2], "write_cl": key[-1], "reference": f"{ref[-2]}/{ref[-1]}"}
            tp, tp_ci = fig["throughput_ops"]
            row["throughput_ops"], row["throughput_ci"] = tp, tp_ci
            row["throughput_vs_ref"] = tp / base["throughput_ops"][0] - 1
            for name, (value, half) in fig.items():
                if name.endswith("p99_ms"):
                    op = name.split()[0]
                    row[f"{op}_p99_ms"], row[f"{op}_p99_ci"] = value, half
                    ref_value = base.get(name, (float("nan"), None))[0]
                    row[f"{op}_p99_vs_ref"] = value / ref_value - 1 if ref_value else float("nan")
            row["errors"] = fig["errors"][0]
            out.append(row)
    return out


def _pm(value: float, half: float | None, fmt: str = ".1f") -> str:
    return f"{value:{fmt}}" + (f" ± {half:{fmt}}" if half is not None else "")


def format_cost(rows: Sequence[Mapping[str, Any]]) -> str:
    """The consistency-cost table, plainly."""
    if not rows:
        return "No YCSB cells."
    ops = sorted({k[: -len("_p99_ms")] for r in rows for k in r if k.endswith("_p99_ms")})
    lines = [
        "The cost of consistency (YCSB): each level pair against the weakest measured in the "
        "same setting; mean ± 95 % t-interval over repetitions.",
        f"{'nodes':>5} {'RF':>2} {'lat':>5} {'loss':>5} {'workload':<8} {'thr':>3} "
        f"{'read/write':<14} {'ops/s':>15} {'vs ref':>7}"
        + "".join(f" {op + ' p99 ms':>20} {'vs ref':>7}" for op in ops),
    ]
    for r in rows:
        line = (
            f"{r['nodes']:>5} {r['rf']:>2} {r['latency_ms']:>5g} {r['loss_pct']:>5g} "
            f"{r['workload']:<8} {r['threads']:>3} {r['read_cl'] + '/' + r['write_cl']:<14} "
            f"{_pm(r['throughput_ops'], r['throughput_ci']):>15} "
            f"{100 * r['throughput_vs_ref']:+6.0f}%"
        )
        for op in ops:
            if f"{op}_p99_ms" in r:
                line += (
                    f" {_pm(r[f'{op}_p99_ms'], r[f'{op}_p99_ci']):>20} "
                    f"{100 * r[f'{op}_p99_vs_ref']:+6.0f}%"
                )
            else:
                line += f" {'-':>20} {'':>7}"
        lines.append(line)
    lines.append("")
    lines += statements(rows)
    return "\n".join(lines)


def statements(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One sentence per stronger level and setting, as analysis.compare states things."""
    out = []
    for r in rows:
        if f"{r['read_cl']}/{r['write_cl']}" == r["reference"]:
            continue
        worst = [
            (k[: -len("_p99_vs_ref")], v)
            for k, v in r.items()
            if k.endswith("_p99_vs_ref") and v == v  # not NaN
        ]
        p99 = ", ".join(f"{op} p99 {100 * v:+.0f} %" for op, v in worst)
        out.append(
            f"- {r['workload']} at {r['latency_ms']:g} ms / {r['loss_pct']:g} % "
            f"({r['nodes']} nodes, RF {r['rf']}, {r['threads']} "
            f"thread{'' if r['threads'] == 1 else 's'}): "
            f"{r['read_cl']}/{r['write_cl']} instead of {r['reference']} changes throughput "
            f"by {100 * r['throughput_vs_ref']:+.0f} % ({r['throughput_ops']:.1f} ops/s)"
            + (f"; {p99}" if p99 else "")
            + "."
        )
    return out


# -- figures ----------------------------------------------------------------------------------


def figures(ycsb_cells: Sequence[Mapping[str, Any]], out: Path) -> list[dict[str, Any]]:
    """ycsb_throughput_threads.{png,svg,pdf} (throughput vs threads per workload, level and
    latency) and ycsb_latency_throughput.{png,svg,pdf} (p50 and p99 of each operation vs
    throughput). Returns plots-style entries (name, paths, series)."""
    from .figsave import plt, pt, save_figure, sized

    made: list[dict[str, Any]] = []
    table = pooled(ycsb_cells)
    if not table:
        return made
    # One line per setting but the x axis (threads): network, workload, levels, records
    # and policy all stay apart; open-loop cells (a target rate) are not on this figure.
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for key, fig in table.items():
        s = dict(zip((*SETTING, "read_cl", "write_cl"), key, strict=True))
        if s["target"] is not None:
            continue
        series[_label(s, without=("threads", "target"))].append(
            (s["threads"], fig["throughput_ops"][0])
        )
    fig_, ax = plt.subplots(figsize=sized(7, 4.5))
    for label, points in sorted(series.items()):
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("client threads (closed loop)")
    ax.set_ylabel("throughput (ops/s)")
    ax.set_title("YCSB throughput against client threads")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=pt(7))
    made.append(_made(save_figure(fig_, out, "ycsb_throughput_threads"), len(series)))

    fig_, ax = plt.subplots(figsize=sized(7, 4.5))
    curves: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for key, figs in table.items():
        s = dict(zip((*SETTING, "read_cl", "write_cl"), key, strict=True))
        for name, (value, _half) in figs.items():
            if name.endswith("p99_ms") or name.endswith("p50_ms"):
                op, q = name.split()
                # a curve: one setting and operation, its load (threads, target) varied
                label = f"{op} {q[:-3]} " + _label(s, without=("threads", "target"))
                curves[label].append((figs["throughput_ops"][0], value))
    for label, pts in sorted(curves.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=label)
    ax.set_xlabel("throughput (ops/s)")
    ax.set_ylabel("latency (ms)")
    ax.set_yscale("log")
    ax.set_title("YCSB latency against throughput")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=pt(6), ncol=2)
    made.append(_made(save_figure(fig_, out, "ycsb_latency_throughput"), len(curves)))
    return made


def _label(s: Mapping[str, Any], without: tuple[str, ...] = ()) -> str:
    """A setting in a legend: workload, levels, network, nodes/RF, records, policy."""
    parts = [
        s["workload"],
        f"{s['read_cl']}/{s['write_cl']}",
        f"{s['latency_ms']:g} ms {s['loss_pct']:g} % {s['profile']}",
        f"n={s['nodes']} RF {s['rf']}",
        f"{s['records']} rec",
        s["policy"],
    ]
    if "threads" not in without:
        parts.append(f"{s['threads']} thr")
    if "target" not in without and s["target"] is not None:
        parts.append(f"target {s['target']:g}")
    return " ".join(str(p) for p in parts)


def _made(paths: list[Path], series: int) -> dict[str, Any]:
    return {"name": paths[0].stem, "paths": paths, "series": series}


def percentiles_table(ycsb_cells: Sequence[Mapping[str, Any]]) -> str:
    """Per cell and operation: count, errors, p50/p95/p99/p99.9/max (ms)."""
    lines = [
        f"{'cell':<52} {'op':<18} {'count':>6} {'err':>4} {'p50':>7} {'p95':>7} {'p99':>7} "
        f"{'p99.9':>7} {'max':>7}"
    ]
    for c in ycsb_cells:
        for label, table in (("", c["ops"]), ("intended ", c["intended"])):
            for op, d in sorted(table.items()):
                lines.append(
                    f"{c['cell_id']:<52} {label + op:<18} {d['count']:>6} {d['errors']:>4} "
                    + " ".join(
                        f"{d[k]:>7.1f}" if d.get(k) is not None else f"{'-':>7}"
                        for k in ("p50_ms", "p95_ms", "p99_ms", "p999_ms", "max_ms")
                    )
                )
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    from common.command import not_a_command

    sys.exit(
        not_a_command(
            "analysis.ycsb",
            "its tables and figures are in `edgetb plots DIR` and `edgetb report DIR`",
        )
    )
