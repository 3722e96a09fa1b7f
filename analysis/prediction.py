"""Predicted against measured write RTT (the model: ``model.rtt``), cell by cell, and
what-if tables: the comparison behind `python -m analysis.model`, the figures' dashed
model lines and the report's model section.

Per measured cell: the measured and predicted mean, median, p95 and p99 with their
relative errors; the mean absolute relative error of the mean per (nodes, loss, profile)
over the cells at 10 ms or more; and, for every cell the model misses by more than its
tolerance, which assumption the measurement contradicts. What-if tables without
measurements are ``analysis.what_if``'s.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from common.errors import ConfigError
from model import rtt as m

from . import claims
from .results import Results, save_text_and_json
from .stats import TAIL_WRITES, bootstrap_mean_ci, bootstrap_quantile_ci, tail_note
from .what_if import DEFAULT_BASELINE_MS, what_if_rows

TOLERANCE = 0.10  # the issue's target: mean absolute relative error of the mean <= 10 %
MIN_LATENCY_MS = 10.0  # cells below this are the baseline's neighbours, not predictions
CI_RESAMPLES = 499  # enough for a 95 % percentile interval; keeps 396 cells under 10 s


# -- predicted vs measured --------------------------------------------------------------------


def run_tcp(results: Results) -> m.Tcp:
    """The TCP settings the runs recorded (manifest ``tcp``), else this host's."""
    for run in results.runs:
        recorded = (run.get("manifest") or {}).get("tcp")
        if isinstance(recorded, dict):
            return m.Tcp.from_dict(recorded)
    tcp = m.tcp_from_proc()
    return replace(tcp, source=f"{tcp.source} (the runs recorded none)")


def _scenario(cell: dict[str, Any], tcp: m.Tcp) -> m.Scenario:
    matrix = m.link_matrix_of(
        cell["nodes"],
        cell.get("shaping"),
        cell["profile"],
        cell["latency_ms"],
        cell["loss_pct"],
        cell.get("sites"),
    )
    return m.Scenario(matrix, cell["rf"], cell["cl"], cell["policy"], tcp)


def _group(c: dict[str, Any]) -> tuple:
    """The cells that share one service time: a run's nodes (and sites), RF, level,
    policy and profile."""
    return (c["run_id"], c["nodes"], c.get("sites"), c["rf"], c["cl"], c["policy"], c["profile"])


def _baselines(results: Results, tcp: m.Tcp) -> dict[tuple, tuple[m.Service, str]]:
    """``_group`` -> the service time of its 0 ms cell at the lowest loss measured
    there."""
    chosen: dict[tuple, dict[str, Any]] = {}
    for c in results.cells:
        if c["latency_ms"] != 0 or c["profile"] == "file":
            continue
        key = _group(c)
        if key not in chosen or c["loss_pct"] < chosen[key]["loss_pct"]:
            chosen[key] = c
    out = {}
    for key, c in chosen.items():
        name = f"the 0 ms cell at {c['loss_pct']:g} % loss ({c['cell_id']})"
        ok = ~np.asarray(c.get("failed", np.zeros(len(c["rtt_ms"]), dtype=bool)))
        try:  # S from the writes that succeeded: an error's time is not a write's service
            service = m.service_from_baseline(
                np.asarray(c["rtt_ms"])[ok], np.asarray(c["cir"])[ok], _scenario(c, tcp), name
            )
        except ConfigError:
            continue  # no usable request: the run's manifest baseline stands in
        out[key] = (service, name)
    return out


def _manifest_baseline(results: Results, run_id: str, nodes: int) -> m.Service | None:
    for run in results.runs:
        if run["run_id"] == run_id:
            b = (run.get("manifest") or {}).get("baseline", {}).get(str(nodes))
            if isinstance(b, dict) and isinstance(b.get("mean"), (int, float)):
                return m.Service.constant(
                    float(b["mean"]), f"the run's unshaped RF 1 baseline (mean {b['mean']:.2f} ms)"
                )
    return None


def _stats(a: np.ndarray) -> dict[str, float]:
    return {
        "mean": float(a.mean()),
        # the smallest value with F >= q, as Prediction.quantile defines it
        "median": float(np.quantile(a, 0.5, method="inverted_cdf")),
        "p95": float(np.quantile(a, 0.95, method="inverted_cdf")),
        "p99": float(np.quantile(a, 0.99, method="inverted_cdf")),
    }


def _rel(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured if measured else math.nan


def attribute(row: dict[str, Any], tcp: m.Tcp) -> str:
    """Which assumption a missed cell contradicts (see ``analysis.model``), from where the
    difference lies: in the writes no retransmission touched (the body) or in the others."""
    d_body = row["measured_body_ms"] - row["predicted_body_ms"]
    d_tail = row["measured_tail_ms"] - row["predicted_tail_ms"]
    if abs(d_body) >= abs(d_tail):
        return (
            f"the writes no loss touched take {d_body:+.1f} ms "
            f"{'more' if d_body > 0 else 'less'} on average than the 0 ms baseline plus "
            f"the configured delays: the service time is not independent of the network"
        )
    hit_m, hit_p = row["measured_hit_fraction"], row["predicted_hit_fraction"]
    if hit_p > 0 and not 2 / 3 <= hit_m / hit_p <= 1.5 and hit_m * row["n"] >= 5:
        return (
            f"{100 * hit_m:.1f} % of writes waited for a retransmission, the model says "
            f"{100 * hit_p:.1f} %: losses are not independent per message, or a write "
            f"waits behind other traffic on its connections more or less than modelled"
        )
    return (
        f"a write slowed by loss waits {d_tail / max(hit_m, 1e-9):+.0f} ms per such write "
        f"{'more' if d_tail > 0 else 'less'} than modelled: the recovery is not "
        f"RTO = srtt + {tcp.rto_min_ms:g} ms with "
        f"doubling, or RACK's early resend"
    )


def compare(results: Results, tcp: m.Tcp | None = None, claims: bool = True) -> dict[str, Any]:
    """Every cell's measured and predicted RTT, the error table and the explanations;
    with ``claims``, the paper's claims too (one level on one site: not for
    ``Results.levels``)."""
    if not results.cells:
        raise ConfigError("no measured cells to compare")
    tcp = tcp or run_tcp(results)
    baselines = _baselines(results, tcp)
    rows: list[dict[str, Any]] = []
    unpredictable: list[dict[str, Any]] = []
    for c in sorted(
        results.cells,
        key=lambda c: (c["nodes"], c["profile"], c["loss_pct"], c["rf"], c["latency_ms"]),
    ):
        rtt = np.asarray(c["rtt_ms"], dtype=float)
        if rtt.size == 0:
            continue
        service, source = _service_of(c, baselines, results)
        try:
            if service is None:
                raise ConfigError(
                    "no 0 ms cell of its nodes, RF, level, policy and profile, and no "
                    "baseline in the run's manifest: nothing to take the service time from"
                )
            pred = m.predict(_scenario(c, tcp), service)
        except ConfigError as exc:  # this cell only: the others still have their answer
            unpredictable.append({"run_id": c["run_id"], "cell_id": c["cell_id"], "why": str(exc)})
            continue
        rows.append(_row(c, rtt, pred, service, source, tcp))
    if not rows:
        raise ConfigError(
            "no cell can be predicted: "
            + "; ".join(f"{u['cell_id']}: {u['why']}" for u in unpredictable[:3])
        )
    return {
        "runs": results.run_ids,
        "tcp": tcp.to_dict(),
        "tolerance": TOLERANCE,
        "min_latency_ms": MIN_LATENCY_MS,
        "cells": rows,
        "unpredictable": unpredictable,
        "groups": error_groups(rows),
        "failures": failures(rows),
        "claims": paper_claims(results, rows, tcp) if claims else [],
    }


def _service_of(c: dict[str, Any], baselines: dict, results: Results) -> tuple[Any, str]:
    """The service time of cell ``c`` and where it comes from: its group's 0 ms cell,
    else the run's manifest (None when neither has one)."""
    service, source = baselines.get(_group(c), (None, ""))
    if service is None:
        service = _manifest_baseline(results, c["run_id"], c["nodes"])
        if service is not None:
            source = service.source
    return service, source


def _row(
    c: dict[str, Any], rtt: np.ndarray, pred: Any, service: Any, source: str, tcp: m.Tcp
) -> dict[str, Any]:
    """Cell ``c`` measured against its prediction: the errors, the body and tail around
        the loss threshold, and an explanation where the error is past the tolerance. A p99
    of fewer than TAIL_WRITES writes is marked ``p99_indicative``, with its bootstrap
    interval ``measured_p99_ci_ms``: its "error" is mostly the sample's."""
    p = pred.summary()
    meas = _stats(rtt)
    s_all = np.concatenate([service.remote, service.local])
    thr = pred.no_loss_max + float(np.quantile(s_all, 0.99)) + tcp.rto_min_ms / 2
    lo, hi = bootstrap_mean_ci(rtt, resamples=CI_RESAMPLES)
    row = {
        "run_id": c["run_id"],
        "cell_id": c["cell_id"],
        "nodes": c["nodes"],
        "sites": c.get("sites"),
        "rf": c["rf"],
        "cl": c["cl"],
        "policy": c["policy"],
        "latency_ms": c["latency_ms"],
        "loss_pct": c["loss_pct"],
        "profile": c["profile"],
        "shaper": (c.get("shaping") or {}).get("shaper"),
        "n": int(rtt.size),
        "method": pred.method,
        "baseline": source,
        **{f"measured_{k}_ms": v for k, v in meas.items()},
        **{f"predicted_{k}_ms": v for k, v in p.items()},
        **{f"error_{k}": _rel(p[k], meas[k]) for k in meas},
        "measured_mean_ci_ms": [lo, hi],
        "threshold_ms": thr,
        "measured_body_ms": float(rtt[rtt <= thr].sum() / rtt.size),
        "measured_tail_ms": float(rtt[rtt > thr].sum() / rtt.size),
        "predicted_body_ms": pred.partial_mean(thr),
        "predicted_tail_ms": p["mean"] - pred.partial_mean(thr),
        "measured_hit_fraction": float((rtt > thr).mean()),
        "predicted_hit_fraction": 1 - pred.cdf(thr),
    }
    row["within_ci"] = bool(lo <= p["mean"] <= hi)
    row["p99_indicative"] = bool(rtt.size < TAIL_WRITES)
    row["measured_p99_ci_ms"] = (
        list(bootstrap_quantile_ci(rtt, 0.99, CI_RESAMPLES)) if row["p99_indicative"] else None
    )
    row["service_mean_ms"] = float(np.mean(np.concatenate([service.remote, service.local])))
    row["explanation"] = (
        attribute(row, tcp)
        if abs(row["error_mean"]) > TOLERANCE and c["latency_ms"] >= MIN_LATENCY_MS
        else None
    )
    return row


PAPER_NODES = (3, 4, 5)
PAPER_LOSSES = (0.5, 2.5, 7.5)


def paper_claims(
    results: Results, rows: Sequence[dict[str, Any]], tcp: m.Tcp
) -> list[dict[str, Any]]:
    """analysis.claims on the measured means (``claims.from_results``: the same findings
    compare shows), the predicted ones, and the model over 3-5 nodes and the paper's
    losses (node counts and losses not measured: the what-if with the measured service
    time of the same RF)."""
    acc: dict[tuple, list[float]] = defaultdict(list)
    service: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        acc[(r["nodes"], r["loss_pct"], r["rf"], r["latency_ms"])].append(r["predicted_mean_ms"])
        service[r["rf"]].append(r["service_mean_ms"])
    predicted = {k: float(np.mean(v)) for k, v in acc.items()}
    profiles = sorted({r["profile"] for r in rows})
    levels = sorted({r["cl"] for r in rows})
    policies = sorted({r["policy"] for r in rows})
    what_if = dict(predicted)
    if len(profiles) == 1 and profiles[0] != "file" and len(levels) == 1 and len(policies) == 1:
        lats = sorted({k[3] for k in predicted if k[3] >= MIN_LATENCY_MS}) or [20.0, 50.0, 100.0]
        losses = sorted(set(PAPER_LOSSES) | {k[1] for k in predicted})
        have = {(k[0], k[1]) for k in predicted}
        for n in PAPER_NODES:
            for loss in losses:
                if (n, loss) in have:
                    continue
                for rf in range(1, n + 1):
                    s_ms = float(np.mean(service[rf])) if service[rf] else DEFAULT_BASELINE_MS
                    # exact (independent writes): ~2 % low at 7.5 % loss, 10x cheaper
                    for row in what_if_rows(
                        n,
                        rf,
                        lats,
                        loss,
                        profiles[0],
                        levels[0],
                        policies[0],
                        s_ms,
                        tcp,
                        method="exact",
                    ):
                        what_if[(n, loss, rf, row["latency_ms"])] = row["predicted_mean_ms"]
    return claims.from_results(results, predicted, what_if)


def error_groups(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean absolute relative error of the predicted mean per (nodes, loss, profile,
    level), over the cells at MIN_LATENCY_MS or more, with the worst cell; that of the
    p99 over the cells of TAIL_WRITES writes or more only (NaN where none has them:
    ``p99_writes`` says how many writes the smallest cell has)."""
    acc: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["latency_ms"] >= MIN_LATENCY_MS and not math.isnan(r["error_mean"]):
            acc[(r["nodes"], r["loss_pct"], r["profile"], r["cl"])].append(r)
    out = []
    for (n, loss, profile, level), group in sorted(acc.items()):
        worst = max(group, key=lambda r: abs(r["error_mean"]))
        mare = float(np.mean([abs(r["error_mean"]) for r in group]))
        tails = [abs(r["error_p99"]) for r in group if not r.get("p99_indicative")]
        out.append(
            {
                "nodes": n,
                "loss_pct": loss,
                "profile": profile,
                "cl": level,
                "cells": len(group),
                "mare_mean": mare,
                "mare_p99": float(np.mean(tails)) if tails else math.nan,
                "p99_writes": min(r["n"] for r in group),
                "meets_target": mare <= TOLERANCE,
                "worst_cell": worst["cell_id"],
                "worst_error_mean": worst["error_mean"],
            }
        )
    return out


def failures(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cells missed by more than the tolerance, grouped by the assumption named."""
    by_reason: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["explanation"]:
            reason = r["explanation"].split(": ", 1)[-1]
            by_reason[reason].append(r)
    return [
        {
            "assumption": reason,
            "cells": [r["cell_id"] for r in group],
            "examples": [r["explanation"] for r in group[:3]],
        }
        for reason, group in sorted(by_reason.items(), key=lambda kv: -len(kv[1]))
    ]


def _pct(v: float) -> str:
    return "   -  " if math.isnan(v) else f"{100 * v:+6.1f}"


def _p99_err(r: dict[str, Any]) -> str:
    return f"{'ind.':>6}" if r.get("p99_indicative") else _pct(r["error_p99"])


def _mare_p99(g: dict[str, Any]) -> str:
    """A group's MARE of the p99, or "ind." where every cell's p99 is indicative."""
    v = g["mare_p99"]
    return f"{'ind.':>9}" if math.isnan(v) else f"{100 * v:>8.1f}%"


def format_text(data: dict[str, Any]) -> str:
    return format_cells(data) + "\n\n" + claims.format_text(data.get("claims", []))


def _footnotes(data: dict[str, Any]) -> list[str]:
    """Under the cells: what * and "ind." mean, and the cells not predicted."""
    lines: list[str] = []
    lines.append("* the prediction is outside the measured mean's 95 % bootstrap CI")
    small = [r["n"] for r in data["cells"] if r.get("p99_indicative")]
    if small:
        lines.append(
            f"ind.: a p99 of fewer than {TAIL_WRITES} writes ({min(small)}"
            f"{f'-{max(small)}' if max(small) > min(small) else ''} here) is indicative: it "
            f"rests on the slowest few writes, so its distance from the model is not an error "
            f"of the model (its bootstrap interval beside it)"
        )
    skipped = data.get("unpredictable", [])
    if skipped:
        lines.append(f"Not predicted ({len(skipped)} cell(s)):")
        lines += [f"- {u['run_id']}/{u['cell_id']}: {u['why']}" for u in skipped[:10]]
        if len(skipped) > 10:
            lines.append(f"  ... and {len(skipped) - 10} more (model.json lists them all)")
    return lines


def format_cells(data: dict[str, Any]) -> str:
    tcp = data["tcp"]
    lines = [
        "Predicted vs measured write RTT (ms); err: (predicted - measured) / measured, %.",
        f"Runs: {', '.join(data['runs'])}. TCP: RTO = srtt + {tcp['rto_min_ms']:g} ms, doubling"
        f"{', linear for thin streams' if tcp['thin_linear_timeouts'] else ''} "
        f"({tcp['source']}).",
        "",
        f"{'nodes':>5} {'RF':>2} {'lat':>5} {'loss':>5} {'profile':>7} "
        f"{'mean m/p':>15} {'err':>6} {'median m/p':>15} {'p95 m/p':>13} {'err':>6} "
        f"{'p99 m/p':>13} {'err':>6}  method",
    ]
    for r in data["cells"]:
        lines.append(
            f"{r['nodes']:>5} {r['rf']:>2} {r['latency_ms']:>5g} {r['loss_pct']:>5g} "
            f"{r['profile']:>7} {r['measured_mean_ms']:>7.1f}/{r['predicted_mean_ms']:<7.1f} "
            f"{_pct(r['error_mean'])} {r['measured_median_ms']:>7.1f}/"
            f"{r['predicted_median_ms']:<7.1f} {r['measured_p95_ms']:>6.0f}/"
            f"{r['predicted_p95_ms']:<6.0f} {_pct(r['error_p95'])} "
            f"{r['measured_p99_ms']:>6.0f}/{r['predicted_p99_ms']:<6.0f} "
            f"{_p99_err(r)}  {r['method']}"
            + ("" if r["within_ci"] else " *")
            + (f"  ({tail_note(r['n'], r['measured_p99_ci_ms'])})" if r["p99_indicative"] else "")
        )
    lines += _footnotes(data)
    lines += [
        "",
        f"Mean absolute relative error of the mean, cells at >= {data['min_latency_ms']:g} ms "
        f"(target <= {100 * data['tolerance']:g} %):",
        f"{'nodes':>5} {'loss %':>6} {'profile':>8} {'level':>13} {'cells':>5} "
        f"{'MARE mean':>10} {'MARE p99':>9}  worst cell",
    ]
    for g in data["groups"]:
        lines.append(
            f"{g['nodes']:>5} {g['loss_pct']:>6g} {g['profile']:>8} {g['cl']:>13} {g['cells']:>5} "
            f"{100 * g['mare_mean']:>9.1f}% {_mare_p99(g)}  "
            f"{g['worst_cell']} ({100 * g['worst_error_mean']:+.1f} %)"
            + ("" if g["meets_target"] else "  <- above target")
        )
    lines.append("")
    if not data["failures"]:
        lines.append(
            f"Where the model fails: no cell at >= {data['min_latency_ms']:g} ms is missed by "
            f"more than {100 * data['tolerance']:g} %."
        )
    else:
        lines.append(f"Where the model fails (cells missed by > {100 * data['tolerance']:g} %):")
        for f in data["failures"]:
            lines.append(f"- {len(f['cells'])} cell(s): {f['assumption']}")
            for ex in f["examples"]:
                lines.append(f"    e.g. {ex.split(': ', 1)[0]}")
            lines.append(
                f"    cells: {', '.join(f['cells'][:8])}{' ...' if len(f['cells']) > 8 else ''}"
            )
    return "\n".join(lines)


def save(data: dict[str, Any], out: Path, name: str = "model") -> None:
    """NAME.txt and NAME.json in ``out`` (the results' analysis directory)."""
    save_text_and_json(out, name, format_text(data), data)
