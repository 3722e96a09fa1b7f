"""The paper's own curves beside what this machine measured: Figures 2-4 of Loganathan
et al., "Performance Measurement of Distributed Storage on Edge Devices" (the seed
paper this testbed reproduces), digitized from its PDF to ±3 ms
(``data/paper_figures.csv``).

- ``curves()``: each published curve, a node count (or every one, Figure 4) and a loss,
  one RF or the mean of RF 3-5, mean write RTT against the one-way latency.
- ``compare(stats_)``: per curve, the measured points at the same node count, loss, RF
  and latencies (``analysis.stats.points``), the slope of each (least squares, ms of RTT
  per ms of latency) side by side, and how far apart the curves are.
- ``figures(stats_, out)``: ``paper_<figure>_n<nodes>_loss<loss>``, the measured means
  with their 95 % CIs as solid lines and the paper's as dashed ones of the same colour.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).resolve().parent / "data" / "paper_figures.csv"
DIGITIZED_MS = 3.0  # how precisely the published curves were read off the figures
CITATION = (
    "P. Loganathan, D. Rauthan et al., Performance Measurement of Distributed Storage "
    "on Edge Devices (Figures 2-4)"
)
AVERAGED_RFS = (3, 4, 5)  # the paper's "RF 3-5" curves: the mean of those RFs' means


@dataclass(frozen=True)
class Curve:
    figure: str  # fig2, fig3, fig4
    nodes: int | None  # None: every node count, averaged (Figure 4)
    loss_pct: float
    rfs: tuple[int, ...]  # one RF, or AVERAGED_RFS
    points: tuple[tuple[float, float], ...]  # (one-way latency ms, mean RTT ms)

    @property
    def label(self) -> str:
        rf = f"RF {self.rfs[0]}" if len(self.rfs) == 1 else f"RF {self.rfs[0]}-{self.rfs[-1]}"
        return rf + ("" if self.nodes is not None else ", every node count")


def curves(path: Path = DATA) -> list[Curve]:
    """The published curves, by figure, node count, loss and RF."""
    acc: dict[tuple[str, int | None, float, tuple[int, ...]], list[tuple[float, float]]]
    acc = defaultdict(list)
    with open(path, newline="") as f:
        rows = csv.reader(line for line in f if not line.startswith("#"))
        for figure, nodes, loss, rf, latency, mean in rows:
            key = (
                figure,
                None if nodes == "all" else int(nodes),
                float(loss),
                AVERAGED_RFS if rf == "345avg" else (int(rf),),
            )
            acc[key].append((float(latency), float(mean)))
    made = [Curve(f, n, loss, rfs, tuple(sorted(pts))) for (f, n, loss, rfs), pts in acc.items()]
    return sorted(made, key=lambda c: (c.figure, c.nodes or 0, c.loss_pct, c.rfs))


def measured(curve: Curve, stats_: Mapping[tuple, Mapping[str, Any]]) -> dict[float, dict]:
    """latency -> {mean, ci_low, ci_high} measured where ``curve`` was published: its
    node count (every one measured, for Figure 4), loss and RF(s); a latency where any
    RF or node count of an averaged curve is missing is left out (a mean of another mix
    is not the paper's)."""
    by_latency: dict[float, list[Mapping[str, Any]]] = defaultdict(list)
    for (n, loss, rf, latency), s in stats_.items():
        if loss == curve.loss_pct and rf in curve.rfs and curve.nodes in (None, n):
            by_latency[latency].append(s)
    nodes_seen = {n for (n, loss, rf, _lat) in stats_ if loss == curve.loss_pct}
    want = len(curve.rfs) * (1 if curve.nodes is not None else len(nodes_seen))
    out = {}
    for latency, group in sorted(by_latency.items()):
        if len(group) < want or not all(np.isfinite(s.get("mean", np.nan)) for s in group):
            continue  # (a point without a successful write has no mean)
        if len(group) == 1:
            s = group[0]
            out[latency] = {k: s.get(k, np.nan) for k in ("mean", "ci_low", "ci_high")}
        else:  # a mean of means, as the paper averaged its lines: no interval of its own
            out[latency] = {"mean": float(np.mean([s["mean"] for s in group])),
                            "ci_low": np.nan, "ci_high": np.nan}  # fmt: skip
    return out


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of RTT against latency (NaN with fewer than two latencies)."""
    if len({x for x, _ in points}) < 2:
        return float("nan")
    x, y = np.array(points, dtype=float).T
    return float(np.polyfit(x, y, 1)[0])


def compare(stats_: Mapping[tuple, Mapping[str, Any]], path: Path = DATA) -> list[dict]:
    """One row per published curve measured at two or more of its latencies: both
    slopes over the latencies both have, the measured minus published means (median and
    largest in size), and at how many latencies the published mean lies inside the
    measured 95 % CI widened by the digitizing error."""
    rows = []
    for curve in curves(path):
        got = measured(curve, stats_)
        both = [(x, y) for x, y in curve.points if x in got]
        if len(both) < 2:
            continue
        diffs = [got[x]["mean"] - y for x, y in both]
        inside = sum(
            got[x]["ci_low"] - DIGITIZED_MS <= y <= got[x]["ci_high"] + DIGITIZED_MS
            for x, y in both
            if np.isfinite(got[x]["ci_low"])
        )
        rows.append(
            {
                "figure": curve.figure,
                "nodes": curve.nodes,
                "loss_pct": curve.loss_pct,
                "curve": curve.label,
                "latencies": len(both),
                "paper_slope": slope(both),
                "measured_slope": slope([(x, got[x]["mean"]) for x, _ in both]),
                "median_diff_ms": float(np.median(diffs)),
                "max_abs_diff_ms": float(max(abs(d) for d in diffs)),
                "within_ci": inside if any(np.isfinite(got[x]["ci_low"]) for x, _ in both)
                else None,
            }
        )  # fmt: skip
    return rows


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The comparison as text (the report's and ``paper.txt``)."""
    if not rows:
        return "no measured curve matches a published one (same nodes, loss, RF, latencies)"
    head = (
        f"{'figure':<6} {'nodes':>5} {'loss %':>6} {'curve':<26} {'lat':>3} "
        f"{'slope paper':>11} {'measured':>8} {'median Δ ms':>11} {'max |Δ|':>7} {'in CI':>6}"
    )
    lines = [head]
    for r in rows:
        nodes = "all" if r["nodes"] is None else str(r["nodes"])
        within = "-" if r["within_ci"] is None else f"{r['within_ci']}/{r['latencies']}"
        lines.append(
            f"{r['figure']:<6} {nodes:>5} {r['loss_pct']:>6g} {r['curve']:<26} "
            f"{r['latencies']:>3} {r['paper_slope']:>11.2f} {r['measured_slope']:>8.2f} "
            f"{r['median_diff_ms']:>+11.1f} {r['max_abs_diff_ms']:>7.1f} {within:>6}"
        )
    lines.append(
        f"slopes in ms of mean RTT per ms of one-way latency, over the latencies both have; "
        f"Δ = measured - published mean; in CI: the published mean inside the measured 95 % "
        f"CI widened by the ±{DIGITIZED_MS:g} ms of digitizing (- for averaged curves). "
        f"Published: {CITATION}."
    )
    return "\n".join(lines)


def figures(stats_: Mapping[tuple, Mapping[str, Any]], out: Path, path: Path = DATA) -> list:
    """paper_<figure>_n<nodes|all>_loss<loss>: each published curve of a panel that was
    measured, dashed, beside the measured one (solid, its 95 % CI as a band), one
    colour per curve."""
    from .figsave import plt, pt, save_figure, sized

    panels: dict[tuple, list[tuple[Curve, dict[float, dict]]]] = defaultdict(list)
    for curve in curves(path):
        got = measured(curve, stats_)
        if len([x for x, _ in curve.points if x in got]) >= 2:
            panels[(curve.figure, curve.nodes, curve.loss_pct)].append((curve, got))
    made = []
    for (figure, nodes, loss), drawn in sorted(panels.items(), key=lambda kv: str(kv[0])):
        fig, ax = plt.subplots(figsize=sized(6.4, 4.2))
        for curve, got in drawn:
            xs = sorted(got)
            (line,) = ax.plot(xs, [got[x]["mean"] for x in xs], marker="o", markersize=3,
                              label=f"{curve.label}: measured")  # fmt: skip
            lo, hi = [got[x]["ci_low"] for x in xs], [got[x]["ci_high"] for x in xs]
            if all(np.isfinite(lo)):
                ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
            px, py = zip(*curve.points, strict=True)
            ax.plot(px, py, linestyle="--", color=line.get_color(), alpha=0.8,
                    label=f"{curve.label}: paper ({figure})")  # fmt: skip
        where = "every node count" if nodes is None else f"{nodes} nodes"
        ax.set_title(f"Published vs measured: {where}, packet loss {loss:g} %", fontsize=pt(10))
        ax.set_xlabel("one-way latency between edge nodes (ms)")
        ax.set_ylabel("mean write RTT (ms)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=pt(7))
        name = f"paper_{figure}_n{'all' if nodes is None else nodes}_loss{loss:g}"
        made.append({"name": name, "paths": save_figure(fig, out, name), "series": len(drawn)})
    return made
