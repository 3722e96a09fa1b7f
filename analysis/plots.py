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

import csv
import json
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from common.command import command
from common.errors import ConfigError
from common.files import replacing, write_file

from . import paper as paper_mod
from . import prediction
from .figsave import (
    FORMATS,
    MODEL_STYLE,
    add_look_flags,
    log_ticks,
    look_from,
    plt,
    pt,
    save_figure,
    series_style,
    set_look,
)
from .figures import is_figure
from .phi_excess import phi_vs_excess
from .results import Results, command_parser, open_results
from .stats import ci_label, high_rf_average, points, pooled, predicted_means

FIGURES_INDEX = "figures.json"  # {"runs": [...], "figures": [...]}: what was drawn from what


def _label(cells: list[dict[str, Any]]) -> str:
    profiles = sorted({c["profile"] for c in cells})
    levels = sorted({c["cl"] for c in cells})
    policies = sorted({c["policy"] for c in cells})
    return f"{'/'.join(levels)}, {'/'.join(policies)}, profile {'/'.join(profiles)}"


def rtt_vs_latency(
    results: Results, out: Path, stats_: dict[tuple, dict[str, Any]], model: dict | None = None
) -> list[dict[str, Any]]:
    """Figures 2/3: one per (nodes, loss), with the model's prediction (dashed) beside
    each measured RF line when ``model`` (analysis.prediction.compare) is given; returns
    [{name, paths, series}]."""
    groups = _by_panel(stats_)
    predicted = predicted_means(model)
    made = []
    label = _label(results.cells)
    for (n, loss), by_rf in sorted(groups.items()):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        bands = _draw_rfs(ax, by_rf, "mean", predicted, (n, loss))
        ax.set_xlabel("one-way latency between edge nodes (ms)")
        ax.set_ylabel("mean write RTT (ms)")
        ax.set_title(f"{n}-node cluster, packet loss {loss:g} %", fontsize=pt(10))
        ax.annotate(
            f"{label}; bands: {bands}",
            (0, 0),
            xycoords="axes fraction",
            xytext=(0, -30),
            textcoords="offset points",
            fontsize=pt(7),
            va="top",
            color="0.35",
        )  # fmt: skip  (under the axis label: clear of every line)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=pt(8))
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


Panel = dict[int, list[tuple[float, dict[str, Any]]]]  # RF -> [(latency, point_stats)]


def _by_panel(stats_: dict[tuple, dict[str, Any]]) -> dict[tuple, Panel]:
    """(nodes, loss) -> RF -> its points sorted by latency."""
    groups: dict[tuple, Panel] = defaultdict(lambda: defaultdict(list))
    for (n, loss, rf, lat), st in stats_.items():
        groups[(n, loss)][rf].append((lat, st))
    for by_rf in groups.values():
        for pts in by_rf.values():
            pts.sort(key=lambda p: p[0])
    return groups


def _draw_rfs(ax: Any, by_rf: Panel, stat: str, predicted: dict[tuple, float], key: tuple) -> str:
    """A line per RF of ``stat`` (mean: with its CI band, and the model's mean dotted
    beside it where ``predicted`` has it); returns what the bands are."""
    drawn = []
    for rf, pts in sorted(by_rf.items()):
        x = [lat for lat, _ in pts]
        y = [st[stat] for _, st in pts]
        (line,) = ax.plot(x, y, label=f"RF {rf}", **series_style(rf - 1))  # RF k: one look
        if stat != "mean":
            continue
        drawn += [st for _, st in pts]
        lo = [st["ci_low"] if np.isfinite(st["ci_low"]) else st["mean"] for _, st in pts]
        hi = [st["ci_high"] if np.isfinite(st["ci_high"]) else st["mean"] for _, st in pts]
        ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
        model_pts = [(lat, predicted[(*key, rf, lat)]) for lat in x if (*key, rf, lat) in predicted]
        if model_pts:
            ax.plot(
                [p[0] for p in model_pts],
                [p[1] for p in model_pts],
                color=line.get_color(),
                gid="model",
                **MODEL_STYLE,
            )  # fmt: skip  (one legend entry for all)
    if any(x.get_gid() == "model" for x in ax.get_lines()):
        ax.plot([], [], color="0.3", label="model (same colour)", gid="model", **MODEL_STYLE)
    return ci_label(drawn) if drawn else ""


FACETS = {  # name -> (statistic, y label): one faceted figure each
    "rtt_grid_mean": ("mean", "mean write RTT (ms)"),
    "rtt_grid_p99": ("p99", "99th-percentile write RTT (ms)"),
}


def rtt_grids(
    results: Results, out: Path, stats_: dict[tuple, dict[str, Any]], model: dict | None = None
) -> list[dict[str, Any]]:
    """Figures 2/3 on one page: a panel per (nodes, loss), node counts in rows and losses
    in columns, sharing both axes; one figure of the mean (bands, the model) and one of
    the 99th percentile (where retransmissions show). Only with two or more panels."""
    groups = _by_panel(stats_)
    nodes = sorted({n for n, _ in groups})
    losses = sorted({loss for _, loss in groups})
    if len(groups) < 2:
        return []
    predicted = predicted_means(model)
    made = []
    for name, (stat, ylabel) in FACETS.items():
        fig, axes = plt.subplots(
            len(nodes), len(losses), sharex=True, sharey=True, squeeze=False, layout="constrained",
            figsize=(2.6 * len(losses) + 1.0, 2.2 * len(nodes) + 1.0),
        )  # fmt: skip
        bands = ""
        for r, n in enumerate(nodes):
            for c, loss in enumerate(losses):
                ax = axes[r][c]
                if (n, loss) not in groups:
                    ax.set_axis_off()
                    continue
                bands = _draw_rfs(ax, groups[(n, loss)], stat, predicted, (n, loss)) or bands
                ax.set_title(f"{n} nodes, loss {loss:g} %", fontsize=pt(8))
                ax.grid(alpha=0.3)
                ax.tick_params(labelsize=7)
        fig.supxlabel("one-way latency between edge nodes (ms)", fontsize=pt(9))
        fig.supylabel(ylabel, fontsize=pt(9))
        legend: dict[str, Any] = {}  # every panel's RFs (--rf 1,k differs per row), once
        for ax in axes.flat:
            legend |= dict(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
        labels = sorted(legend, key=lambda lb: (lb.startswith("model"), len(lb), lb))
        handles = [legend[lb] for lb in labels]
        note = f"{_label(results.cells)}" + (f"; bands: {bands}" if bands else "")
        fig.legend(handles, labels, loc="outside upper center", ncol=len(labels), fontsize=pt(8),
                   title=note, title_fontsize=pt(7), frameon=False)  # fmt: skip
        series = len({lb for lb in labels if not lb.startswith("model")})
        made.append({"name": name, "paths": save_figure(fig, out, name), "series": series})
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
        for rf, rtts in sorted(by_rf.items()):
            style = series_style(rf - 1) | {"marker": None}
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
            log_ticks(ax.xaxis, low, high)
        ax.set_xlabel("write RTT (ms" + (", log scale)" if wide else ")"))
        ax.set_ylabel("share of writes at or below")
        ax.set_title(
            f"{n}-node cluster, loss {loss:g} %, latency {top[(n, loss)]:g} ms: every write",
            fontsize=pt(10),
        )
        ax.text(0.01, 0.99, "| p95   x p99", transform=ax.transAxes, fontsize=pt(7), va="top",
                color="0.35")  # fmt: skip
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=pt(8), loc="lower right")
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
        ax.set_title(f"{n}-node cluster: average of RF {', '.join(map(str, rfs))}", fontsize=pt(10))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=pt(8))
        name = f"high_rf_n{n}"
        series = len(ax.get_lines())
        made.append(
            {"name": name, "paths": save_figure(fig, out, name), "series": series, "nodes": n}
        )
    return made


def _model(
    results: Results, out: Path, name: str = "model", claims: bool = True
) -> dict[str, Any] | None:
    """The model's comparison (analysis.model), saved beside the figures as NAME.txt and
    NAME.json; None (and a note on stderr) when the cells give it nothing to work from."""
    try:
        data = prediction.compare(results, claims=claims)
    except Exception as exc:  # noqa: BLE001 - the figures matter more than the curves
        print(f"note: no model curves: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    prediction.save(data, out, name)
    return data


SUMMARY = "summary.csv"
SUMMARY_COLUMNS = (
    "nodes", "loss_pct", "rf", "latency_ms", "repetitions", "writes", "errors", "mean_ms",
    "ci_low_ms", "ci_high_ms", "ci_over", "median_ms", "p95_ms", "p99_ms", "std_ms",
    "rep_sd_ms", "predicted_mean_ms", "acknowledged", "acknowledged_lost",
)  # fmt: skip


def summary_table(
    out: Path, stats_: dict[tuple, dict[str, Any]], model: dict[str, Any] | None = None
) -> Path:
    """One row per grid point (repetitions pooled): its writes, errors, mean with its
    95 % CI (``ci_over`` "repetitions" where two or more, else "writes": the within-run
    CI), median, p95, p99, ``rep_sd_ms`` (the spread of the repetitions' means; empty with
    one), the model's predicted mean (empty without a model), the acknowledged writes
    and how many of them no replica returned when read back (empty where a cell was not
    read back)."""
    predicted = predicted_means(model)
    path = out / SUMMARY
    with replacing(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(SUMMARY_COLUMNS)
        for key, st in sorted(stats_.items()):
            stat = [st[k] for k in ("mean", "ci_low", "ci_high")]
            tail = [st[k] for k in ("median", "p95", "p99", "std", "rep_sd")]
            tail.append(predicted.get(key, np.nan))
            head = [*key, st["repetitions"], st["n"], st["errors"]]
            kept = ["" if st[k] is None else st[k] for k in ("acknowledged", "acknowledged_lost")]
            w.writerow([*head, *map(_num, stat), st["ci_over"], *map(_num, tail), *kept])
    return path


def _num(v: float) -> str:
    return f"{v:.3f}" if np.isfinite(v) else ""


# what make_all writes beside the figures: an earlier call's go before it draws
WRITTEN = (
    "model.txt", "model.json", "levels_model.txt", "levels_model.json", "levels.txt",
    "levels.json", "ycsb.txt", "faults.txt", "paper.txt", SUMMARY, "cells.csv",
)  # fmt: skip


def _remove_earlier(out: Path) -> None:
    """An earlier call's index, tables and figures (in any format) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / FIGURES_INDEX).unlink(missing_ok=True)
    for stale in WRITTEN:
        (out / stale).unlink(missing_ok=True)
    for old in list(out.iterdir()):
        if old.suffix[1:] in FORMATS and is_figure(old.stem) and not old.is_dir():
            old.unlink()


def make_all(results: Results) -> list[dict[str, Any]]:
    """Every figure of ``results`` into its output directory, replacing those of an
    earlier call (which may have drawn other runs, or other node counts and losses)."""
    out = results.output_dir
    _remove_earlier(out)
    made: list[dict[str, Any]] = []
    model = None
    if results.cells:  # the paper's writes
        model = _model(results, out)
        stats_ = points(results.cells)  # per grid point: the table's and the figures'
        summary_table(out, stats_, model)
        made += rtt_grids(results, out, stats_, model)
        made += rtt_vs_latency(results, out, stats_, model)
        made += rtt_cdf(results, out)
        made += high_rf(results, out)
        made += phi_vs_excess(results, out)
        made += paper_mod.figures(stats_, out)
        write_file(out / "paper.txt", paper_mod.format_table(paper_mod.compare(stats_)) + "\n")
    if results.levels:  # sites, or several levels: their own figures and table
        from . import levels as levels_mod

        levels = replace(results, cells=results.levels)
        levels_model = _model(levels, out, "levels_model", claims=False)
        made += levels_mod.figures(results.levels, out, levels_model)
        rows = levels_mod.table(results.levels, levels_model)
        write_file(out / "levels.txt", levels_mod.format_table(rows) + "\n")
    if results.ycsb:
        from . import ycsb as ycsb_mod

        cells = ycsb_mod.cells(results.ycsb)
        made += ycsb_mod.figures(cells, out)
        cost = ycsb_mod.format_cost(ycsb_mod.consistency_cost(cells))
        write_file(out / "ycsb.txt", f"{cost}\n\n{ycsb_mod.percentiles_table(cells)}\n")
    if results.faults:
        from . import faults as faults_mod

        made += faults_mod.figures(results.faults, out)
        table = faults_mod.format_availability(faults_mod.availability(results.faults))
        traces = faults_mod.trace_table(results.faults)
        write_file(out / "faults.txt", table + "\n" + (f"\n{traces}\n" if traces else ""))
    index = {
        "runs": results.run_ids,
        "figures": [m["name"] for m in made],
        "model": model is not None,
    }
    write_file(out / FIGURES_INDEX, json.dumps(index, indent=1))
    return made


@command("python -m analysis.plots")
def main(argv: list[str] | None = None) -> int:
    p = command_parser("analysis.plots", "Regenerate the figures from stored results.")
    add_look_flags(p)
    args = p.parse_args(argv)
    set_look(look_from(args))
    t0 = time.monotonic()
    results = open_results(args)
    print(results.describe())
    if not (results.cells or results.ycsb or results.faults or results.levels):
        raise ConfigError(
            f"{args.results}: run(s) {', '.join(results.run_ids)} hold no measured cells"
        )
    made = make_all(results)
    for fig in made:
        kinds = "{" + ",".join(p.suffix[1:] for p in fig["paths"]) + "}"
        print(f"{fig['paths'][0].with_suffix('.' + kinds)}  ({fig['series']} series)")
    print(f"{len(made)} figures in {time.monotonic() - t0:.1f} s")
    if not args.no_report:
        from .report import write_report  # the report shows these figures: it imports us

        print(f"report: {write_report(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
