"""`python -m analysis.report RESULTS_DIR`: one static HTML page next to the results.

RESULTS_DIR/report.html shows which runs it describes, the figures (from
RESULTS_DIR/analysis, made by analysis.plots), the φ table, the comparison
(analysis.compare), per-cell statistics, the paper's slope and spread checks, and the
manifest of each run used. Figures and comparison are shown only when they were made from
the same runs as the report. It only links files inside RESULTS_DIR, so the directory can
be copied or published as is.
"""

from __future__ import annotations

import base64
import html
import json
import math
import sys
import time
from pathlib import Path

from common.command import command
from common.files import write_file

from . import claims, provenance
from . import paper as paper_mod
from . import phi as phi_mod
from .figures import caption, figure_rank
from .findings import MIN_LATENCY_MS
from .results import Results, command_parser, open_results
from .stats import per_cell, slopes, std_across_nodes, tail_note

CSS = (Path(__file__).resolve().parent / "data" / "report.css").read_text()  # the page's style


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.2f}"
    return html.escape(str(v))


def _table(rows: list[dict], columns: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{_fmt(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _figure(output_dir: Path, directory: Path, name: str) -> str:
    """One figure, its PNG inside the page (the report still shows it when moved or
    mailed), linked to its SVG and PDF beside it."""
    png = output_dir / f"{name}.png"
    data = base64.b64encode(png.read_bytes()).decode() if png.is_file() else ""
    links = " · ".join(
        f"<a href='{html.escape(str((output_dir / f'{name}.{fmt}').relative_to(directory)))}'>"
        f"{fmt.upper()}</a>"
        for fmt in ("svg", "pdf")
        if (output_dir / f"{name}.{fmt}").is_file()
    )
    wide = " class='wide'" if name.startswith("rtt_grid") else ""  # a page of panels
    return (
        f"<figure{wide}><img src='data:image/png;base64,{data}' "
        f"alt='{html.escape(caption(name))}'>"
        f"<figcaption>{html.escape(caption(name))} <small>({html.escape(name)}: {links})"
        f"</small></figcaption></figure>"
    )


CLAIM_KINDS = (("measured", "measured"), ("model", "model, same cells"),
               ("what_if", "model, 3-5 nodes and the paper's losses"))  # fmt: skip


def claims_table(rows: list[dict]) -> str:
    """The paper's claims as a table: a row per claim (and node count), its verdict on the
    measurements, on the model of the same cells and on the model's what-if grid; the
    numbers behind a verdict show on hover and under the table."""
    if not rows:
        return "<p>No claims checked (no model of these runs).</p>"
    head = (
        "<tr><th>§</th><th>claim</th><th>nodes</th>"
        + "".join(f"<th>{html.escape(t)}</th>" for _, t in CLAIM_KINDS)
        + "</tr>"
    )
    body = []
    for r in rows:
        cells = "".join(
            f"<td class='v' title='{html.escape(r[k]['numbers'])}'>"
            f"{html.escape(r[k]['verdict'])}</td>"
            for k, _ in CLAIM_KINDS
        )
        body.append(
            f"<tr><td>{html.escape(r['id'])}</td><td class='c'>{html.escape(r['claim'])}</td>"
            f"<td>{r['nodes'] or '3-5'}</td>{cells}</tr>"
        )
    return (
        f"<table class='claims'>{head}{''.join(body)}</table>"
        "<details><summary>The numbers behind each verdict</summary><pre>"
        + html.escape(claims.format_text(rows))
        + "</pre></details>"
    )


def _made_from(index: Path, runs: list[str]) -> dict | None:
    """An analysis output's JSON (figures.json, compare.json) if it describes ``runs``."""
    try:
        data = json.loads(index.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("runs") == runs else None


def _model_rows(data: dict) -> tuple[list[dict], list[dict]]:
    """model.json's error groups and cells as the report's tables show them: a p99 of
    fewer than stats.TAIL_WRITES writes as indicative, not as an error of the model."""
    groups = [
        {
            "nodes": g["nodes"],
            "loss %": g["loss_pct"],
            "profile": g["profile"],
            "level": g.get("cl", ""),
            "cells": g["cells"],
            "MARE of the mean %": 100 * g["mare_mean"],
            "MARE of p99 %": (
                f"indicative (p99s of {g.get('p99_writes', '?')} writes)"
                if math.isnan(g["mare_p99"])
                else 100 * g["mare_p99"]
            ),
            "worst cell": g["worst_cell"],
            "its error %": 100 * g["worst_error_mean"],
        }
        for g in data["groups"]
    ]
    cells = [
        {
            "nodes": r["nodes"],
            "RF": r["rf"],
            "latency ms": r["latency_ms"],
            "loss %": r["loss_pct"],
            "mean": r["measured_mean_ms"],
            "predicted mean": r["predicted_mean_ms"],
            "err %": 100 * r["error_mean"],
            "p99": r["measured_p99_ms"],
            "predicted p99": r["predicted_p99_ms"],
            "p99 err %": (
                tail_note(r["n"], r.get("measured_p99_ci_ms"))
                if r.get("p99_indicative")
                else 100 * r["error_p99"]
            ),
            "method": r["method"],
        }
        for r in data["cells"]
    ]
    return groups, cells


def _model_section(results: Results, rerun: str) -> str:
    """Predicted vs measured (analysis.model): the error table, where the model fails,
    and every cell, when model.json was made from these runs."""
    data = _made_from(results.output_dir / "model.json", results.run_ids)
    head = "<h2>Predicted vs measured RTT (analysis.model)</h2>"
    if not data:
        return head + (
            f"<p>Run <code>edgetb model {html.escape(str(results.directory))} "
            f"{html.escape(rerun)}</code> (or <code>edgetb plots</code>) to add it.</p>"
        )
    tcp = data["tcp"]
    groups, cells = _model_rows(data)
    failing = "".join(
        f"<li>{len(f['cells'])} cell(s): {html.escape(f['assumption'])}</li>"
        for f in data["failures"]
    )
    return (
        head + f"<p>The model (<code>model/rtt.py</code>): the 0 ms cell's service time, the "
        f"configured delays, the k-th fastest replica round trip, and TCP's recovery of "
        f"each lost message (RTO = srtt + {tcp['rto_min_ms']:g} ms, doubling; in-order "
        f"delivery). Nothing is fitted to the cells it predicts. Mean absolute relative "
        f"error of the mean over the cells at &ge; {data['min_latency_ms']:g} ms (target "
        f"&le; {100 * data['tolerance']:g} %):</p>"
        + _table(groups, list(groups[0]) if groups else ["nodes"])
        + (f"<p>Where the model fails:</p><ul>{failing}</ul>" if failing else "")
        + "<p>The paper's claims against the measurements and the model: under "
        "<a href='#findings'>Findings</a>.</p>"
        + "<details><summary><b>Every cell</b> (ms)</summary>"
        + _table(cells, list(cells[0]) if cells else ["nodes"])
        + "</details>"
    )


def _findings(results: Results) -> str:
    """What the page opens with: the paper cited, how many of its claims hold on these
    measurements (each claim's verdict, measured and modelled, in a table whose numbers
    show on hover), and how its published curves compare (paper.txt)."""
    model = _made_from(results.output_dir / "model.json", results.run_ids)
    rows = (model or {}).get("claims", [])
    verdicts = [r["measured"]["verdict"] for r in rows]
    held = sum(v == "holds" for v in verdicts)
    failed = sum(v == "does not hold" for v in verdicts)
    said = (
        f"Of the paper's claims, checked at each node count measured: <b>{held} hold</b>, "
        f"<b>{failed} do not</b>, {len(verdicts) - held - failed} hold in part or cannot be "
        f"told from these measurements (a verdict needs the 95 % intervals apart)."
        if rows
        else "No claims checked: the model of these runs was not made."
    )
    paper_txt = results.output_dir / "paper.txt"
    curves = (
        paper_txt.read_text().splitlines()
        if paper_txt.is_file() and _made_from(results.output_dir / "figures.json", results.run_ids)
        else []
    )
    matched = max(0, len(curves) - 2)  # a header line and a legend line
    return (
        f"<h2 id='findings'>Findings</h2><p>This reproduces {html.escape(paper_mod.CITATION)}"
        f" on an emulated edge network. {said} "
        + (
            f"{matched} of its published curves were measured at the same points; their "
            f"slopes and distances are under <a href='#paper'>The paper's own curves</a>."
            if matched
            else "None of its published curves was measured at the same points."
        )
        + "</p>"
        + (claims_table(rows) if rows else "")
    )


def write_report(results: Results) -> Path:
    """report.html of ``results``: its sections in order, each from what is stored."""
    out = results.directory / "report.html"
    runs = results.run_ids
    rerun = " ".join(f"--run {r}" for r in runs)
    index = _made_from(results.output_dir / "figures.json", runs)
    caveat = results.caveat()
    parts = [
        *_opening(results),
        *_caveat(caveat, "p"),
        _findings(results),
        *_figures_section(results, index, rerun),
        *_phi_and_comparison(results, rerun),
        _model_section(results, rerun),
        *_paper_and_levels(results, index),
        *_slopes_and_spread(results),
        _per_cell(results),
        *_ycsb_and_faults(results),
        *_runs_used(results),
        *_caveat(caveat, "footer"),
    ]
    write_file(out, "\n".join(parts))
    return out


def _opening(results: Results) -> list[str]:
    runs = results.run_ids
    parts = [
        f"<!doctype html><meta charset='utf-8'><title>Edge testbed results</title>"
        f"<style>{CSS}</style><h1>Cassandra writes on an emulated edge network</h1>"
        f"<p>Results in <code>{html.escape(str(results.directory.resolve()))}</code>: "
        f"{len(results.cells) + len(results.levels)} cells, "
        f"{sum(len(c['rtt_ms']) for c in (*results.cells, *results.levels))} "
        f"requests of {len(runs)} run(s) ({html.escape(results.selection)}): "
        f"{html.escape(', '.join(runs))}. Generated "
        f"{html.escape(time.strftime('%Y-%m-%d %H:%M:%S'))}.</p>"
    ]
    if results.others:
        parts.append(
            f"<p>Not included: {html.escape(', '.join(results.others))} "
            f"(<code>--run RUN_ID</code> chooses runs).</p>"
        )
    return parts


def _caveat(line: str, tag: str) -> list[str]:
    """The sample's caveat (``Results.caveat``) as the page's opening line and footer."""
    return [f"<{tag} class='caveat'>Sample: {html.escape(line)}.</{tag}>"] if line else []


def _figures_section(results: Results, index: dict | None, rerun: str) -> list[str]:
    parts = ["<h2>Figures</h2>"]
    if index and index.get("figures"):
        for name in sorted(index["figures"], key=figure_rank):
            parts.append(_figure(results.output_dir, results.directory, name))
    else:
        parts.append(
            "<p>No figures of these runs yet: run <code>edgetb plots "
            f"{html.escape(str(results.directory))} {html.escape(rerun)}</code>.</p>"
        )
    return parts


def _phi_and_comparison(results: Results, rerun: str) -> list[str]:
    nodes = sorted({c["nodes"] for c in results.cells}) or [3, 4, 5]
    levels = sorted({c["cl"] for c in results.cells}) or ["LOCAL_QUORUM"]
    compare_txt = results.output_dir / "compare.txt"
    return [
        f"<h2>φ (ack ratio)</h2><pre>{html.escape(phi_mod.format_table(nodes, levels[0]))}</pre>",
        "<h2>Measured RTT vs φ</h2>",
        f"<pre>{html.escape(compare_txt.read_text())}</pre>"
        if compare_txt.is_file()
        and _made_from(results.output_dir / "compare.json", results.run_ids)
        else f"<p>Run <code>edgetb compare {html.escape(str(results.directory))} "
        f"{html.escape(rerun)}</code> to add it.</p>",
    ]


def _paper_and_levels(results: Results, index: dict | None) -> list[str]:
    parts = []
    paper_txt = results.output_dir / "paper.txt"
    if paper_txt.is_file() and index:
        parts.append(
            "<h2 id='paper'>The paper's own curves</h2><p>Each curve of the paper's Figures 2-4 "
            f"({html.escape(paper_mod.CITATION)}, digitized to ±{paper_mod.DIGITIZED_MS:g} "
            "ms) that this run measured at the same node count, loss, RF and latencies: the "
            "slopes side by side and how far the means are apart.</p>"
            f"<pre>{html.escape(paper_txt.read_text())}</pre>"
        )
    levels_txt = results.output_dir / "levels.txt"
    if results.levels and levels_txt.is_file() and index:
        parts.append(
            "<h2>Consistency levels and sites (analysis.levels)</h2>"
            "<p>What each level costs at each latency: the acks a write waits for, how "
            "many must cross the WAN between sites (each a round trip there), the "
            "measured mean and its rise over the level's lowest latency, and the model's "
            "mean (<code>model.rtt</code> with the replicas placed per site and the "
            "coordinators in the endpoint's site; its per-cell detail is "
            "<code>analysis/levels_model.txt</code>).</p>"
            f"<pre>{html.escape(levels_txt.read_text())}</pre>"
        )
    return parts


def _slopes_and_spread(results: Results) -> list[str]:
    slope_rows = [
        {
            "nodes": n,
            "loss %": loss,
            "RF": rf,
            "LS slope": v["ls"],
            "median-line slope": v["median_line"],
            "latencies": v["points"],
        }
        for (n, loss, rf), v in sorted(slopes(results.cells).items())
    ]
    parts = [
        "<h2>Slopes of RTT vs latency (section 5.1)</h2>"
        + _table(
            slope_rows, ["nodes", "loss %", "RF", "LS slope", "median-line slope", "latencies"]
        )
    ]
    spread = [
        {
            "RF": rf,
            "loss %": loss,
            "latency ms": lat,
            "std across node counts (ms)": v["std"],
            "node counts": v["nodes"],
        }
        for loss in sorted({c["loss_pct"] for c in results.cells})
        for (rf, lat), v in sorted(std_across_nodes(results.cells, loss).items())
        if v["nodes"] > 1
    ]
    if spread:
        parts.append(
            "<h2>Spread of the mean RTT across node counts (section 5.4)</h2>"
            "<p>Per loss and latency, as measured (the claim [5.4] decides each of RF 3's "
            f"at &ge; {MIN_LATENCY_MS:g} ms against the noise of its means, and shows "
            "the worst with that noise taken out, under <a href='#findings'>Findings</a>)."
            "</p>"
            + _table(
                spread,
                ["RF", "loss %", "latency ms", "std across node counts (ms)", "node counts"],
            )
        )
    return parts


CELL_COLUMNS = [
    "nodes", "rf", "latency_ms", "loss_pct", "repetition", "n", "mean", "median", "p95",
    "p99", "std", "ci_low", "ci_high", "errors", "lost",
]  # fmt: skip


def _per_cell(results: Results) -> str:
    cell_rows = sorted(
        per_cell(results.cells),
        key=lambda r: (r["nodes"], r["loss_pct"], r["rf"], r["latency_ms"], r["repetition"]),
    )
    columns = ["run_id"] * (len(results.run_ids) > 1) + CELL_COLUMNS
    return (
        "<details><summary><b>Per-cell statistics</b> (ms)</summary>"
        + _table(cell_rows, columns)
        + "</details>"
    )


def _ycsb_and_faults(results: Results) -> list[str]:
    parts = []
    if results.ycsb:
        from . import ycsb as ycsb_mod

        cells = ycsb_mod.cells(results.ycsb)
        parts.append(
            "<h2>YCSB: the cost of consistency</h2>"
            f"<pre>{html.escape(ycsb_mod.format_cost(ycsb_mod.consistency_cost(cells)))}</pre>"
            "<details><summary>Latency percentiles per cell and operation (ms)</summary>"
            f"<pre>{html.escape(ycsb_mod.percentiles_table(cells))}</pre></details>"
        )
    if results.faults:
        from . import faults as faults_mod

        table = faults_mod.format_availability(faults_mod.availability(results.faults))
        traces = faults_mod.trace_table(results.faults)
        parts.append(
            "<h2>Faults: availability and recovery</h2>"
            f"<pre>{html.escape(table)}</pre>"
            + (
                f"<h2>Link traces: the schedule held</h2><pre>{html.escape(traces)}</pre>"
                if traces
                else ""
            )
            + "<p>The writes of each such cell over time, with the fault's steps (dashed) "
            "and the trace's (dotted), are the <code>fault_*</code> figures.</p>"
        )
    return parts


def _runs_used(results: Results) -> list[str]:
    parts = ["<h2>Runs used</h2>"]
    for run in results.runs:
        described = json.dumps({"config": run["config"], "manifest": run["manifest"]}, indent=1)
        summary = f"run {run['run_id']} ({run['status']}): {provenance.line(run['manifest'])}"
        parts.append(f"<details><summary>{html.escape(summary)}</summary><pre>"
                     f"{html.escape(described)}</pre></details>")  # fmt: skip
    return parts


@command("python -m analysis.report")
def main(argv: list[str] | None = None) -> int:
    p = command_parser("analysis.report", "Write report.html from stored results.", report=False)
    results = open_results(p.parse_args(argv), writes="results")
    print(results.describe())
    print(write_report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
