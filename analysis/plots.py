"""`python -m analysis.plots RESULTS_DIR`: the paper's figures, regenerated from a store.

Writes to RESULTS_DIR/analysis/ (PNG, SVG and PDF of each):
- ``rtt_n{N}_loss{P}``: mean write RTT vs one-way latency, one line per RF with its 95 %
  confidence band (the paper's Figures 2 and 3), for every (nodes, loss), and beside each
  the mean the model predicts (dashed; analysis.model, saved as model.{txt,json});
- ``rtt_cdf_n{N}_loss{P}``: every write's RTT at the largest latency, as a distribution
  per RF with p95 and p99 marked (where loss shows: the retransmission tail);
- ``high_rf_n{N}``: the average of RF 3-5 vs latency, one line per loss (Figure 4);
- ``phi_vs_excess``: φ of each (nodes, RF) against the RTT that loss added to it (mean
  over latencies of RTT at loss p minus RTT at the lowest loss measured).
Figures of an earlier call are removed first; ``figures.json`` names the runs drawn.
Then refreshes the HTML report (analysis.report).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from experiments.store import check_writable_dir
from testbed.command import command, prog
from testbed.errors import TestbedError

from . import phi as phi_mod
from . import prediction
from .figsave import FORMATS, MODEL_STYLE, matplotlib, plt, save_figure, series_style
from .results import Results, add_run_option, load, run_ids
from .stats import cell_stats, high_rf_average, mean_rtt, pooled

FIGURE_GLOBS = ("rtt_n*_loss*", "rtt_cdf_n*", "high_rf_n*", "phi_vs_excess", "ycsb_*", "fault_*")
FIGURES_INDEX = "figures.json"  # {"runs": [...], "figures": [...]}: what was drawn from what


def _label(cells: list[dict[str, Any]]) -> str:
    profiles = sorted({c["profile"] for c in cells})
    levels = sorted({c["cl"] for c in cells})
    policies = sorted({c["policy"] for c in cells})
    return f"{'/'.join(levels)}, {'/'.join(policies)}, profile {'/'.join(profiles)}"


def predicted_means(model: dict[str, Any] | None) -> dict[tuple, float]:
    """(nodes, loss, rf, latency) -> the model's mean RTT (cells of a point averaged)."""
    acc: dict[tuple, list[float]] = defaultdict(list)
    for r in (model or {}).get("cells", []):
        acc[(r["nodes"], r["loss_pct"], r["rf"], r["latency_ms"])].append(r["predicted_mean_ms"])
    return {k: float(np.mean(v)) for k, v in acc.items()}


def rtt_vs_latency(
    results: Results, out: Path, model: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Figures 2/3: one per (nodes, loss), with the model's prediction (dashed) beside
    each measured RF line when ``model`` (analysis.prediction.compare) is given; returns
    [{name, paths, series}]."""
    groups: dict[tuple, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for (n, loss, rf, lat), rtts in pooled(results.cells).items():
        s = cell_stats(rtts)
        groups[(n, loss)][rf].append((lat, s["mean"], s["ci_low"], s["ci_high"]))
    predicted = predicted_means(model)
    made = []
    label = _label(results.cells)
    for (n, loss), by_rf in sorted(groups.items()):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for i, (rf, pts) in enumerate(sorted(by_rf.items())):
            pts.sort()
            x = [p[0] for p in pts]
            y = [p[1] for p in pts]
            (line,) = ax.plot(x, y, label=f"RF {rf}", **series_style(i))
            lo = [p[2] if np.isfinite(p[2]) else p[1] for p in pts]
            hi = [p[3] if np.isfinite(p[3]) else p[1] for p in pts]
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
            model_pts = [
                (lat, predicted[(n, loss, rf, lat)]) for lat in x if (n, loss, rf, lat) in predicted
            ]
            if model_pts:
                ax.plot(
                    [p[0] for p in model_pts],
                    [p[1] for p in model_pts],
                    color=line.get_color(),
                    gid="model",  # one per RF; one legend entry says what the dots are
                    **MODEL_STYLE,
                )
        ax.set_xlabel("one-way latency between edge nodes (ms)")
        ax.set_ylabel("mean write RTT (ms)")
        ax.set_title(f"{n}-node cluster, packet loss {loss:g} %", fontsize=10)
        ax.text(
            0.01,
            0.99,
            label + "; bands: 95 % CI of the mean",
            transform=ax.transAxes,
            fontsize=7,
            va="top",
            color="0.35",
        )
        ax.grid(alpha=0.3)
        if any(x.get_gid() == "model" for x in ax.get_lines()):
            ax.plot([], [], color="0.3", label="model (same colour)", gid="model", **MODEL_STYLE)
        ax.legend(fontsize=8)
        name = f"rtt_n{n}_loss{loss:g}"
        # what was drawn, not what was asked for: the measured lines
        series = sum(1 for x in ax.get_lines() if x.get_gid() != "model")
        made.append(
            {
                "name": name,
                "paths": save_figure(fig, out, name),
                "series": series,
                "nodes": n,
                "loss": loss,
            }
        )
    return made


def rtt_cdf(results: Results, out: Path) -> list[dict[str, Any]]:
    """Where loss lives: per (nodes, loss), the distribution of every write's RTT at the
    largest latency measured, a line per RF (repetitions pooled), its p95 and p99
    marked. A mean hides the retransmission tail this shows."""
    groups: dict[tuple, dict[int, np.ndarray]] = defaultdict(dict)
    top: dict[tuple, float] = {}
    for (n, loss, rf, lat), rtts in pooled(results.cells).items():
        if lat > top.get((n, loss), -1.0):
            top[(n, loss)] = lat
            groups[(n, loss)] = {}
        if lat == top[(n, loss)] and len(rtts):
            groups[(n, loss)][rf] = np.sort(rtts)
    made = []
    for (n, loss), by_rf in sorted(groups.items()):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for i, (rf, rtts) in enumerate(sorted(by_rf.items())):
            style = series_style(i) | {"marker": None}
            ax.step(rtts, np.arange(1, len(rtts) + 1) / len(rtts), where="post",
                    label=f"RF {rf}", **style)  # fmt: skip
            for q, mark in ((95, "|"), (99, "x")):
                ax.plot(np.percentile(rtts, q), q / 100, marker=mark, color=style["color"],
                        ms=7, ls="none", gid="mark")  # fmt: skip
        ax.axhline(0.95, color="0.7", lw=0.6, gid="mark")
        ax.axhline(0.99, color="0.7", lw=0.6, gid="mark")
        low = min(float(r[0]) for r in by_rf.values())
        high = max(float(r[-1]) for r in by_rf.values())
        wide = low > 0 and high / low > 4  # a tail of timeouts: seconds beside milliseconds
        if wide:
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("write RTT (ms" + (", log scale)" if wide else ")"))
        ax.set_ylabel("share of writes at or below")
        ax.set_title(
            f"{n}-node cluster, loss {loss:g} %, latency {top[(n, loss)]:g} ms: every write",
            fontsize=10,
        )
        ax.text(0.01, 0.99, "| p95   x p99", transform=ax.transAxes, fontsize=7, va="top",
                color="0.35")  # fmt: skip
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="lower right")
        name = f"rtt_cdf_n{n}_loss{loss:g}"
        series = sum(1 for x in ax.get_lines() if x.get_gid() != "mark")
        made.append(
            {"name": name, "paths": save_figure(fig, out, name), "series": series, "nodes": n}
        )
    return made


def high_rf(results: Results, out: Path) -> list[dict[str, Any]]:
    """Figure 4 per node count: average of RF 3..5 vs latency, one line per loss. Not
    for a node count with fewer than two of those RFs (at 3 nodes the "average" would be
    RF 3's own line, already in its rtt figure)."""
    avg = high_rf_average(results.cells)
    by_nodes: dict[int, dict[float, list]] = defaultdict(lambda: defaultdict(list))
    for (n, loss, lat), m in avg.items():
        by_nodes[n][loss].append((lat, m))
    made = []
    for n, by_loss in sorted(by_nodes.items()):
        rfs = sorted({c["rf"] for c in results.cells if c["nodes"] == n and c["rf"] >= 3})
        if len(rfs) < 2:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for i, (loss, pts) in enumerate(sorted(by_loss.items())):
            pts.sort()
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                label=f"loss {loss:g} %",
                **series_style(i),
            )
        ax.set_xlabel("one-way latency between edge nodes (ms)")
        ax.set_ylabel("mean write RTT (ms)")
        ax.set_title(f"{n}-node cluster: average of RF {', '.join(map(str, rfs))}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        name = f"high_rf_n{n}"
        series = len(ax.get_lines())
        made.append(
            {"name": name, "paths": save_figure(fig, out, name), "series": series, "nodes": n}
        )
    return made


def loss_excess(results: Results) -> list[dict[str, Any]]:
    """Per (nodes, loss above the lowest, RF): φ and the RTT loss added (ms), averaged
    over the latencies measured at both loss levels."""
    means = mean_rtt(results.cells)
    level = sorted({c["cl"] for c in results.cells})
    cl = level[0] if len(level) == 1 else "LOCAL_QUORUM"
    losses: dict[int, set] = defaultdict(set)
    for n, loss, _rf, _lat in means:
        losses[n].add(loss)
    rows = []
    for n, levels in sorted(losses.items()):
        low = min(levels)
        for loss in sorted(levels - {low}):
            for rf in sorted({k[2] for k in means if k[0] == n and k[1] == loss}):
                lats = [
                    k[3] for k in means if k[:3] == (n, loss, rf) and (n, low, rf, k[3]) in means
                ]
                if not lats:
                    continue
                excess = float(
                    np.mean([means[(n, loss, rf, lat)] - means[(n, low, rf, lat)] for lat in lats])
                )
                rows.append(
                    {
                        "nodes": n,
                        "loss": loss,
                        "base_loss": low,
                        "rf": rf,
                        "phi": float(phi_mod.phi(n, rf, cl)),
                        "excess_ms": excess,
                        "latencies": len(lats),
                    }
                )
    return rows


def phi_vs_excess(results: Results, out: Path) -> list[dict[str, Any]]:
    rows = loss_excess(results)
    if not rows:
        return []
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    markers = {3: "o", 4: "s", 5: "^"}
    for n, loss in sorted({(r["nodes"], r["loss"]) for r in rows}):
        pts = sorted(
            (r["phi"], r["excess_ms"], r["rf"])
            for r in rows
            if r["nodes"] == n and r["loss"] == loss
        )
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            linestyle="none",
            marker=markers.get(n, "D"),
            label=f"{n} nodes, loss {loss:g} %",
        )
        for x, y, rf in pts:
            ax.annotate(f"RF{rf}", (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points")
    ax.set_xlabel("φ (ack ratio, round-robin coordinators)")
    ax.set_ylabel("RTT added by loss (ms, mean over latencies)")
    ax.set_title("φ against the measured loss-induced excess RTT", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    series = len(ax.get_lines())
    return [
        {"name": "phi_vs_excess", "paths": save_figure(fig, out, "phi_vs_excess"), "series": series}
    ]


def _model(results: Results, out: Path) -> dict[str, Any] | None:
    """The model's comparison (analysis.model), saved beside the figures; None (and a
    note on stderr) when the cells give it nothing to work from."""
    try:
        data = prediction.compare(results)
    except Exception as exc:  # noqa: BLE001 - the figures matter more than the curves
        print(f"note: no model curves: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    prediction.save(data, out)
    return data


SUMMARY = "cells.csv"
SUMMARY_COLUMNS = (
    "nodes", "loss_pct", "rf", "latency_ms", "repetitions", "writes", "errors", "mean_ms",
    "ci_low_ms", "ci_high_ms", "median_ms", "p95_ms", "p99_ms", "std_ms", "rep_sd_ms",
)  # fmt: skip


def summary_table(results: Results, out: Path) -> Path:
    """One row per grid point (repetitions pooled): its writes, errors, mean with the 95 %
    CI of the writes, median, p95, p99, and ``rep_sd_ms``, the spread of the repetitions'
    means (empty with one repetition: the CI then shows the writes' noise only, not
    how much a second run would differ)."""
    reps: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for c in results.cells:
        reps[(c["nodes"], c["loss_pct"], c["rf"], c["latency_ms"])].append(c)
    path = out / SUMMARY
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(SUMMARY_COLUMNS)
        for key, cells in sorted(reps.items()):
            s = cell_stats(np.concatenate([c["rtt_ms"] for c in cells]))
            means = [float(np.mean(c["rtt_ms"])) for c in cells if len(c["rtt_ms"])]
            spread = float(np.std(means, ddof=1)) if len(means) > 1 else ""
            stat = [s[k] for k in ("mean", "ci_low", "ci_high", "median", "p95", "p99", "std")]
            errors = sum(c["errors"] for c in cells)
            w.writerow([*key, len(cells), s["n"], errors, *(f"{v:.3f}" for v in stat), spread])
    return path


def make_all(results: Results) -> list[dict[str, Any]]:
    """Every figure of ``results`` into its output directory, replacing those of an
    earlier call (which may have drawn other runs, or other node counts and losses)."""
    out = results.output_dir
    out.mkdir(parents=True, exist_ok=True)
    (out / FIGURES_INDEX).unlink(missing_ok=True)
    for stale in ("model.txt", "model.json", "ycsb.txt", "faults.txt", SUMMARY):
        (out / stale).unlink(missing_ok=True)
    for pattern in FIGURE_GLOBS:
        for fmt in FORMATS:
            for old in out.glob(f"{pattern}.{fmt}"):
                old.unlink()
    made: list[dict[str, Any]] = []
    model = None
    if results.cells:  # the paper's writes
        model = _model(results, out)
        summary_table(results, out)
        made += rtt_vs_latency(results, out, model) + rtt_cdf(results, out)
        made += high_rf(results, out)
        made += phi_vs_excess(results, out)
    if results.ycsb:
        from . import ycsb as ycsb_mod

        cells = ycsb_mod.cells(results.ycsb)
        made += ycsb_mod.figures(cells, out)
        cost = ycsb_mod.format_cost(ycsb_mod.consistency_cost(cells))
        (out / "ycsb.txt").write_text(f"{cost}\n\n{ycsb_mod.percentiles_table(cells)}\n")
    if results.faults:
        from . import faults as faults_mod

        made += faults_mod.figures(results.faults, out)
        table = faults_mod.format_availability(faults_mod.availability(results.faults))
        traces = faults_mod.trace_table(results.faults)
        (out / "faults.txt").write_text(table + "\n" + (f"\n{traces}\n" if traces else ""))
    index = {
        "runs": results.run_ids,
        "figures": [m["name"] for m in made],
        "model": model is not None,
    }
    (out / FIGURES_INDEX).write_text(json.dumps(index, indent=1))
    return made


@command("python -m analysis.plots")
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog=prog("python -m analysis.plots"),
        description="Regenerate the figures from stored results.",
    )
    p.add_argument("results", help="results directory (holds results.sqlite)")
    add_run_option(p)
    p.add_argument("--no-report", action="store_true", help="do not refresh report.html")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    try:
        results = load(args.results, run_ids(args.run))
        print(results.describe())
        if not results.cells and not results.ycsb and not results.faults:
            raise TestbedError(
                f"{args.results}: run(s) {', '.join(results.run_ids)} hold no measured cells"
            )
        check_writable_dir(results.output_dir, "analysis directory")
        made = make_all(results)
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for fig in made:
        kinds = "{" + ",".join(FORMATS) + "}"
        print(f"{fig['paths'][0].with_suffix('.' + kinds)}  ({fig['series']} series)")
    print(f"{len(made)} figures in {time.monotonic() - t0:.1f} s")
    if not args.no_report:
        from .report import write_report

        print(f"report: {write_report(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
