"""Consistency levels against each other, on one site or on several (Cassandra
datacenters): the writes cells of a sweep of sites (``--sites 3x3``) or of several levels
(``--cl LOCAL_QUORUM,EACH_QUORUM,QUORUM``), kept out of the paper's figures
(``Results.levels``). Pure functions, plus figures.

- ``figures``: ``levels_n{N}[_s{SITES}]_loss{P}``: mean write RTT against the one-way
  latency (between sites, on a testbed of sites), a panel per RF, a line per level with
  its 95 % CI band and the model's mean dashed beside it;
- ``table`` / ``format_table``: per level and RF, the acks a write waits for and how many
  of them cross the WAN (``model.consistency``), the measured and predicted mean at each
  latency, and the model's error.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from model.consistency import level_rank, required_acks, site_acks
from testbed.topology import parse_sites, sites_topology

from .figsave import MODEL_STYLE, plt, pt, save_figure, series_style, sized, top_legend
from .phi import phi, phi_sites
from .stats import ci_label, predicted_means
from .stats import points as stats_points

FIGURE_GLOB = "levels_n*"


def _order(level: str) -> tuple[int, str]:
    return (level_rank(level), level)


def acks(level: str, rf: int, sites: str | None) -> tuple[int, int]:
    """(acks a write at ``level`` waits for, the fewest from another site than the
    endpoint's): rf per site on a testbed of sites (the endpoint in the first)."""
    if not sites:
        return required_acks(level, rf), 0
    topo = sites_topology(sites)
    return site_acks(level, topo.per_site(rf), str(topo.endpoint_site))


def level_point(c: Mapping[str, Any]) -> tuple:
    """A cell's (or a model row's) point: (nodes, sites, loss, rf, level, latency)."""
    return (c["nodes"], c.get("sites") or "", c["loss_pct"], c["rf"], c["cl"], c["latency_ms"])


def points(cells: Iterable[Mapping[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """``level_point`` -> ``point_stats`` (repetitions pooled)."""
    return stats_points(cells, key=level_point)


def predicted(model: Mapping[str, Any] | None) -> dict[tuple, float]:
    """The same keys as ``points`` -> the model's mean (cells of a point averaged)."""
    return predicted_means(model, key=level_point)


def figures(
    cells: Sequence[Mapping[str, Any]], out: Path, model: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """One figure per (nodes, sites, loss) (see the module); returns [{name, paths, ...}]."""
    stats = points(cells)
    model_means = predicted(model)
    groups: dict[tuple, dict[int, dict[str, list]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for (n, sites, loss, rf, level, lat), st in stats.items():
        groups[(n, sites, loss)][rf][level].append((lat, st))
    made = []
    for (n, sites, loss), by_rf in sorted(groups.items()):
        rfs = sorted(by_rf)
        fig, axes = plt.subplots(
            1, len(rfs), sharey=True, squeeze=False, layout="constrained",
            figsize=sized(3.4 * len(rfs) + 0.8, 3.6),
        )  # fmt: skip
        levels = sorted({lv for by_level in by_rf.values() for lv in by_level}, key=_order)
        drawn: list[dict[str, Any]] = []
        for ax, rf in zip(axes[0], rfs, strict=True):
            drawn += _panel(ax, by_rf[rf], levels, model_means, (n, sites, loss, rf))
        if any(x.get_gid() == "model" for ax in axes[0] for x in ax.get_lines()):
            axes[0][0].plot([], [], color="0.3", label="model (same colour)", **MODEL_STYLE)
        where = f"{len(parse_sites(sites))} sites ({sites} nodes)" if sites else f"{n} nodes"
        fig.supxlabel(
            "one-way latency between sites (ms; 0.25 ms inside a site)"
            if sites
            else "one-way latency between edge nodes (ms)",
            fontsize=pt(9),
        )
        fig.supylabel("mean write RTT (ms)", fontsize=pt(9))
        handles, labels = axes[0][0].get_legend_handles_labels()
        top_legend(fig, handles, labels, fontsize=pt(8),
                   title=f"{where}, packet loss {loss:g} %; bands: {ci_label(drawn)}",
                   title_fontsize=pt(8), frameon=False)  # fmt: skip
        name = f"levels_n{n}" + (f"_s{sites.replace(',', '_')}" if sites else "") + f"_loss{loss:g}"
        made.append(
            {
                "name": name,
                "paths": save_figure(fig, out, name),
                "series": len(levels),
                "nodes": n,
                "sites": sites or None,
                "loss": loss,
            }
        )
    return made


def _panel(ax: Any, by_level: Mapping[str, list], levels: list[str], model_means: Mapping,
           group: tuple) -> list[dict[str, Any]]:  # fmt: skip
    """One RF's panel: a line per level with its CI band, dotted the model's means where
    it has them; returns the grid points drawn. ``group``: (nodes, sites, loss, rf)."""
    drawn: list[dict[str, Any]] = []
    for level, pts in sorted(by_level.items(), key=lambda kv: _order(kv[0])):
        pts.sort(key=lambda p: p[0])
        x = [lat for lat, _ in pts]
        y = [st["mean"] for _, st in pts]
        style = series_style(levels.index(level))
        (line,) = ax.plot(x, y, label=level, **style)
        lo = [st["ci_low"] if np.isfinite(st["ci_low"]) else st["mean"] for _, st in pts]
        hi = [st["ci_high"] if np.isfinite(st["ci_high"]) else st["mean"] for _, st in pts]
        ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
        drawn += [st for _, st in pts]
        key = (*group, level)
        mx = [lat for lat in x if (*key, lat) in model_means]
        if mx:
            ax.plot(mx, [model_means[(*key, lat)] for lat in mx], color=line.get_color(),
                    gid="model", **MODEL_STYLE)  # fmt: skip
    ax.set_title(f"RF {group[3]}{' per site' if group[1] else ''}", fontsize=pt(9))
    ax.grid(alpha=0.3)
    return drawn


def table(cells: Sequence[Mapping[str, Any]], model: Mapping[str, Any] | None) -> list[dict]:
    """A row per grid point: its level, RF, acks (and the WAN's share), the measured
    mean, its rise over the same level's lowest latency, the model's mean and error."""
    stats = points(cells)
    model_means = predicted(model)
    floor: dict[tuple, float] = {}
    for key, st in sorted(stats.items()):
        floor.setdefault(key[:5], st["mean"])  # the lowest latency's
    rows = []
    for key, st in sorted(stats.items(), key=lambda kv: (*kv[0][:4], _order(kv[0][4]), kv[0][5])):
        n, sites, loss, rf, level, lat = key
        need, remote = acks(level, rf, sites or None)
        phi_lan, phi_wan = (
            phi_sites(level, rf, parse_sites(sites)) if sites else (phi(n, rf, level), None)
        )
        pred = model_means.get(key)
        rows.append(
            {
                "nodes": n,
                "sites": sites or "-",
                "loss_pct": loss,
                "rf": rf,
                "level": level,
                "acks": need,
                "wan_acks": remote,
                "phi_lan": float(phi_lan),
                "phi_wan": None if phi_wan is None else float(phi_wan),
                "latency_ms": lat,
                "n": st["n"],
                "errors": st["errors"],
                "mean_ms": st["mean"],
                "rise_ms": st["mean"] - floor[key[:5]],
                "predicted_ms": pred,
                "error": (pred - st["mean"]) / st["mean"] if pred is not None else None,
            }
        )
    return rows


def format_table(rows: list[dict]) -> str:
    """``table`` as text: what each level costs at each latency, measured and predicted."""
    head = (
        f"{'sites':>6} {'loss%':>5} {'RF':>3} {'level':<13} {'acks':>4} {'WAN':>3} "
        f"{'φ LAN':>5} {'φ WAN':>5} "
        f"{'lat ms':>6} {'writes':>6} {'err':>4} {'mean ms':>8} {'rise':>7} {'model':>8} "
        f"{'error':>7}"
    )
    lines = [head]
    for r in rows:
        pred = f"{r['predicted_ms']:8.2f}" if r["predicted_ms"] is not None else f"{'-':>8}"
        err = f"{100 * r['error']:+6.1f}%" if r["error"] is not None else f"{'-':>7}"
        wan = f"{r['phi_wan']:>5.2f}" if r["phi_wan"] is not None else f"{'-':>5}"
        lines.append(
            f"{r['sites']:>6} {r['loss_pct']:>5g} {r['rf']:>3} {r['level']:<13} "
            f"{r['acks']:>4} {r['wan_acks']:>3} {r['phi_lan']:>5.2f} {wan} "
            f"{r['latency_ms']:>6g} {r['n']:>6} "
            f"{r['errors']:>4} {r['mean_ms']:>8.2f} {r['rise_ms']:>+7.2f} {pred} {err}"
        )
    lines.append(
        "acks: replica acks a write waits for; WAN: the fewest of them from another site "
        "than the endpoint's (each costs a round trip between sites); φ LAN / φ WAN: the "
        "share of the requests over the endpoint's site's LAN / over the WAN whose acks a "
        "write waits for (analysis.phi.phi_sites; one site: the paper's φ); rise: over "
        "the same level's lowest latency; error: (model - measured) / measured."
    )
    return "\n".join(lines)
