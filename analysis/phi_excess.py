"""What loss adds to each RF's write RTT, against φ: the table (``loss_excess``) and the
figure ``phi_vs_excess`` with its labels placed apart (measured by the renderer)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from . import phi as phi_mod
from .figsave import matplotlib, plt, pt, save_figure, series_style, sized
from .results import Results
from .stats import mean_rtt


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
    fig, ax = plt.subplots(figsize=sized(6.4, 4.2))
    loss_levels = sorted({r["loss"] for r in rows})
    node_counts = sorted({r["nodes"] for r in rows})
    for n, loss in sorted({(r["nodes"], r["loss"]) for r in rows}):
        pts = sorted(
            (r["phi"], r["excess_ms"]) for r in rows if r["nodes"] == n and r["loss"] == loss
        )
        style = series_style(loss_levels.index(loss))  # colour: the loss; marker: the nodes
        ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle="none", color=style["color"],
                marker=series_style(node_counts.index(n))["marker"], ms=6,
                label=f"{n} nodes, loss {loss:g} %")  # fmt: skip
    ax.set_xlabel("φ (ack ratio, round-robin coordinators)")
    ax.set_ylabel("RTT added by loss (ms, mean over latencies)")
    ax.set_title("φ against the measured loss-induced excess RTT", fontsize=pt(10))
    ax.grid(alpha=0.3)
    ax.margins(x=0.1, y=0.1)  # room for the labels of the outermost points
    ax.legend(fontsize=pt(7))
    _annotate_apart(ax, _label_spots(rows))  # last: the axes' limits are final
    series = len(ax.get_lines())
    return [
        {"name": "phi_vs_excess", "paths": save_figure(fig, out, "phi_vs_excess"), "series": series}
    ]


def _label_spots(rows: list[dict[str, Any]], near: float = 0.03) -> list[tuple]:
    """One label per spot of the φ/excess plane: points within ``near`` of the axes'
    span of each other (the same RF at several node counts, say) share it, so labels do
    not print over each other; [(x, y, {rf, ...})]."""
    xs, ys = [r["phi"] for r in rows], [r["excess_ms"] for r in rows]
    dx, dy = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0
    spots: list[tuple[float, float, set[int]]] = []
    for r in sorted(rows, key=lambda r: (r["phi"], r["excess_ms"])):
        for x, y, rfs in spots:
            if abs(x - r["phi"]) <= near * dx and abs(y - r["excess_ms"]) <= near * dy:
                rfs.add(r["rf"])
                break
        else:
            spots.append((r["phi"], r["excess_ms"], {r["rf"]}))
    return spots


# where a label may go beside its point (offset in points, alignment), in order of taste
LABEL_SPOTS = (
    ((5, 3), "left"), ((-5, 3), "right"), ((5, -10), "left"), ((-5, -10), "right"),
    ((5, 13), "left"), ((-5, 13), "right"), ((5, -20), "left"), ((5, 23), "left"),
)  # fmt: skip


def _annotate_apart(ax: Any, spots: list[tuple]) -> None:
    """Each spot's label at the first place beside it that covers no marker and no label
    placed before (measured by the renderer), else at the first place."""
    ax.figure.canvas.draw()  # the axes' limits as drawn: a point outside has no label box
    renderer = ax.figure.canvas.get_renderer()
    half = 4 * ax.figure.dpi / 72  # a 6-point marker's half width, in pixels
    placed: list[Any] = [
        matplotlib.transforms.Bbox.from_extents(px - half, py - half, px + half, py + half)
        for line in ax.get_lines()
        for px, py in ax.transData.transform(line.get_xydata())
    ]
    legend = ax.get_legend()
    if legend is not None:  # pinned where "best" put it: it must not move onto a label
        box = legend.get_window_extent(renderer)
        placed.append(box)
        (x0, y0), (x1, y1) = ax.transAxes.inverted().transform(box.get_points())
        # by its corner nearest the axes' edges, which a later layout keeps it inside
        ys, y = ("upper", y1) if 1 - y1 < y0 else ("lower", y0)
        xs, x = ("right", x1) if 1 - x1 < x0 else ("left", x0)
        legend.set_loc(f"{ys} {xs}")
        legend.set_bbox_to_anchor((x, y), transform=ax.transAxes)
    frame = ax.get_window_extent(renderer)
    for x, y, rfs in spots:
        text = "RF " + ", ".join(str(rf) for rf in sorted(rfs))
        for offset, ha in LABEL_SPOTS:
            ann = ax.annotate(text, (x, y), xytext=offset, textcoords="offset points",
                              fontsize=pt(7), ha=ha)  # fmt: skip
            box = ann.get_window_extent(renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0
            if inside and box.y1 <= frame.y1 and not any(box.overlaps(b) for b in placed):
                break
            ann.remove()
        else:  # every place is taken: the first one, drawn again
            ann = ax.annotate(text, (x, y), xytext=LABEL_SPOTS[0][0],
                              textcoords="offset points", fontsize=pt(7))  # fmt: skip
            box = ann.get_window_extent(renderer)
        placed.append(box)
