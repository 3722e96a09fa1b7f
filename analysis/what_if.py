"""What-if tables: the model's predicted write RTT for a grid without any measurement
(`edgetb model predict`), its plot and its text; the paper-claims check of
``analysis.prediction`` asks it for the cells a run did not measure."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from emulation import links
from model import rtt as m
from model.consistency import check_level, required_acks
from testbed.topology import Topology, parse_sites, sites_topology

DEFAULT_BASELINE_MS = 5.0  # the service time of a write at 0 ms when none is measured


def what_if_rows(
    nodes: int,
    rf: int,
    latencies: Sequence[float],
    loss: float,
    profile: str,
    cl: str,
    policy: str,
    baseline_ms: float,
    tcp: m.Tcp,
    links_file: str | None = None,
    method: str = "auto",
    sites: str | None = None,
) -> list[dict[str, Any]]:
    topo = sites_topology(sites) if sites else Topology(edge_nodes=nodes)
    service = m.Service.constant(baseline_ms)
    rows = []
    for lat in latencies:
        matrix = links.build(profile, topo, delay_ms=lat, loss_pct=loss, path=links_file)
        scenario = m.Scenario(matrix, rf, cl, policy, tcp)
        exact_ok = not scenario.jittered and scenario.placement_count() <= m.MAX_EXACT_PLACEMENTS
        pred = m.predict(scenario, service, method=method if exact_ok else "auto")
        p = pred.summary()
        rows.append(
            {
                "nodes": nodes,
                "sites": sites,
                "rf": rf,
                "latency_ms": lat,
                "loss_pct": loss,
                "profile": profile,
                "cl": cl,
                "policy": policy,
                "predicted_mean_ms": p["mean"],
                "predicted_median_ms": p["median"],
                "predicted_p95_ms": p["p95"],
                "predicted_p99_ms": p["p99"],
                "method": pred.method,
            }
        )
    return rows


def what_if(
    nodes: Sequence[int],
    rfs: Sequence[int],
    latencies: Sequence[float],
    losses: Sequence[float],
    *,
    profile: str = "paper",
    cl: str = "LOCAL_QUORUM",
    policy: str = "round-robin",
    baseline_ms: float = DEFAULT_BASELINE_MS,
    links_file: str | None = None,
    tcp: m.Tcp | None = None,
    sites: str | None = None,
) -> list[dict[str, Any]]:
    """Predictions for a grid without any measurement: S is the constant ``baseline_ms``.
    With ``sites`` (3x3, 2,3), ``nodes`` is their sum and each RF is per site."""
    tcp = tcp or m.tcp_from_proc()
    cl = check_level(cl)
    rows = []
    for n in nodes:
        top = min(parse_sites(sites)) if sites else n
        for loss in losses:
            for rf in rfs:
                if rf <= top and (sites or required_acks(cl, rf) <= rf):  # else no such cell
                    rows += what_if_rows(
                        n, rf, latencies, loss, profile, cl, policy, baseline_ms, tcp,
                        links_file, sites=sites,
                    )  # fmt: skip
    return rows


def plot_what_if(rows: list[dict[str, Any]], path: Path) -> list[Path]:
    from .figsave import plt, pt, save_figure, series_style, sized

    groups: dict[tuple, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        groups[(r["nodes"], r["loss_pct"])][r["rf"]].append(
            (r["latency_ms"], r["predicted_mean_ms"], r["predicted_p99_ms"])
        )
    fig, axes = plt.subplots(
        1, len(groups), figsize=sized(5.2 * len(groups), 4.0), squeeze=False, sharey=True
    )
    for ax, ((n, loss), by_rf) in zip(axes[0], sorted(groups.items()), strict=True):
        for rf, pts in sorted(by_rf.items()):
            pts.sort()
            (line,) = ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                label=f"RF {rf} mean",
                **series_style(rf - 1),
            )
            ax.plot([p[0] for p in pts], [p[2] for p in pts], ls=":", color=line.get_color(), lw=1)
        ax.set_title(f"{n} nodes, loss {loss:g} % (dotted: p99)", fontsize=pt(10))
        ax.set_xlabel("one-way latency between edge nodes (ms)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=pt(7))
    axes[0][0].set_ylabel("predicted write RTT (ms)")
    return save_figure(fig, path.parent, path.name)


def format_what_if(rows: list[dict[str, Any]], baseline_ms: float) -> str:
    sites = next((r["sites"] for r in rows if r.get("sites")), None)
    lines = [
        f"Predicted write RTT (ms), service time {baseline_ms:g} ms (--baseline-ms), "
        "no measurements used."
        + (f" Sites {sites}: RF per site, latency and loss between sites." if sites else ""),
        f"{'nodes':>5} {'RF':>2} {'lat':>5} {'loss':>5} {'mean':>8} {'median':>8} "
        f"{'p95':>8} {'p99':>8}",
    ]
    for r in rows:
        lines.append(
            f"{r['nodes']:>5} {r['rf']:>2} {r['latency_ms']:>5g} {r['loss_pct']:>5g} "
            f"{r['predicted_mean_ms']:>8.1f} {r['predicted_median_ms']:>8.1f} "
            f"{r['predicted_p95_ms']:>8.1f} {r['predicted_p99_ms']:>8.1f}"
        )
    return "\n".join(lines)
