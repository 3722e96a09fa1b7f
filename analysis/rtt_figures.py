"""The figures of the write RTT, drawn from a store's statistics (drawers of the
registry in ``analysis.figures``, which ``analysis.plots`` runs):

- ``rtt_grid_mean``, ``rtt_grid_p99``: every (nodes, loss) on one page, shared axes;
- ``rtt_n{N}_loss{P}``: mean write RTT vs one-way latency, one line per RF with its 95 %
  confidence band (the paper's Figures 2 and 3), and the model's mean (dotted) beside it;
- ``rtt_cdf_n{N}_loss{P}``: every write's RTT at the largest latency, as a distribution
  per RF with p95 and p99 marked (where loss shows: the retransmission tail);
- ``high_rf_n{N}``: the average of RF 3-5 vs latency, one line per loss (Figure 4).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from .figsave import MODEL_STYLE, log_ticks, plt, pt, save_figure, series_style, sized, top_legend
from .results import Results
from .stats import ci_label, high_rf_average, pooled, predicted_means


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
        fig, ax = plt.subplots(figsize=sized(6.4, 4.2))
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
            figsize=sized(2.6 * len(losses) + 1.0, 2.2 * len(nodes) + 1.0),
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
        top_legend(fig, handles, labels, fontsize=pt(8), title=note, title_fontsize=pt(7),
                   frameon=False)  # fmt: skip
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
        fig, ax = plt.subplots(figsize=sized(6.4, 4.2))
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
        fig, ax = plt.subplots(figsize=sized(6.4, 4.2))
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
