"""Are cells measured P at a time the same as cells measured one at a time?

Runs one sub-grid sequentially twice (two independent runs: the scale of run-to-run
variation) and once per P in --parallel, each into its own results directory, then
compares every cell with the first sequential run (seq-a). Each run is shown against
issue 23's rules (information): per-cell mean and median within max(0.5 ms, 1 %) and the
p99 within max(1 ms, 10 %) in >= 95 % of cells, slopes of means over latency per (nodes,
RF, loss) within 2 %, a two-sided sign test over the cells' median differences
p >= 0.01.

A run is accepted (issue 39) when both hold:

- equivalence: the median over cells of the signed Δ median has a 95 % CI (bootstrap
  over cells, ``experiments.plan.fidelity.shift``) inside ±0.25 ms. A sign test finds any
  shift at all given enough cells; what matters is whether the shift is too small to
  change a conclusion, and the smallest difference between RFs the paper's figures
  resolve is several ms. The sign test's p stays in the table as information;
- as close as two sequential runs (seq-b, the machine's run-to-run noise): its shares
  of agreeing cells at most 10 points below seq-b's, the slopes of its *medians* over
  latency within max(2 %, 1.5x seq-b's deviation) (the slope of means inherits the
  means' tail noise), the median over cells of |Δ median| at most 1.5x seq-b's + 0.1 ms.

The largest P accepted with every smaller P tested also accepted is recorded for the
shaper, the Cassandra build (``--build stock|quiet``: every run's nodes) and the grid
($EDGETB_HOME/fidelity.json), and ``--parallel auto`` runs at most that many testbeds
from then on. ``--ab`` compares builds instead of Ps: seq-a and seq-b on stock nodes,
quiet-a and quiet-b on quiet ones, one at a time and alternating (seq-a, quiet-a, seq-b,
quiet-b), each quiet run judged against seq-a by the same rules; quiet nodes become the
default only where both are accepted. ``--max-busy`` tries another budget for the
parallel runs (a share of the cores; not recorded). Prints one table per run and a
summary; writes both to OUT/fidelity.md. A run already complete in OUT is reused (an
interrupted one resumes), so the benchmark can be run in parts.

    python benchmarks/parallel_fidelity.py                        # the issue's grid, hours
    python benchmarks/parallel_fidelity.py --nodes 3 --rf 1..3 --parallel 2,4 \
        --out results/fidelity-n3                                 # ~75 min here
    python benchmarks/parallel_fidelity.py --ab --nodes 5 --rf 1,3,5 \
        --out results/ab-n5                                       # stock vs quiet, ~2 h
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

from emulation import shapers
from experiments.plan import estimate, fidelity
from experiments.run.launch import CORES
from experiments.store.db import Store
from testbed.cassandra.quiet import BUILDS

ABS_MS, REL = 0.5, 0.01  # mean and median: within max(0.5 ms, 1 %)
P99_REL, P99_ABS_MS = 0.10, 1.0  # p99: within max(1 ms, 10 %)
NOISE_SHARE = 0.10  # the noise rule: shares of agreeing cells at most this below seq-b's
NOISE_SLOPE = 1.5
NOISE_MEDIAN, NOISE_MEDIAN_MS = 1.5, 0.1
SHARE = 0.95  # of cells
SLOPE_REL = 0.02
SIGN_ALPHA = 0.01  # shown for information: with enough cells it finds any shift at all
EQUIV_MS = fidelity.EQUIV_MS  # the shift's 95 % CI inside ±this (experiments.plan.fidelity)


def run_name(parallel: int, max_busy: float) -> str:
    """seq-a, seq-b, then p<P>-busy<the budget in % of the cores>."""
    return f"p{parallel}-busy{100 * max_busy:g}"


def sweep(args: argparse.Namespace, out: Path, parallel: int, build: str) -> float:
    """Run (or resume, or reuse) one sweep of the sub-grid; its wall seconds."""
    cmd = [
        sys.executable, "-m", "experiments.sweep", "--nodes", args.nodes, "--rf", args.rf,
        "--latency", args.latency, "--loss", args.loss, "--profile", args.profile,
        "--writes", str(args.writes), "--parallel", str(parallel), "--out", str(out),
        "--shaper", args.shaper, "--cassandra-build", build,
    ]  # fmt: skip
    env = dict(os.environ)
    if args.max_busy is not None and parallel > 1:
        env["EDGETB_MAX_BUSY"] = str(args.max_busy)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}")
    return time.monotonic() - t0


def rtts(out: Path) -> tuple[dict[str, list[float]], dict[str, dict], dict]:
    """The run in ``out``: cell id -> RTTs in ms, cell id -> its row, the manifest."""
    with Store(out, read_only=True) as store:
        (run,) = store.runs()
        cells = store.cells(run.run_id)
        return (
            {
                c["cell_id"]: [r / 1e6 for r in store.rtts_ns(run.run_id, c["cell_id"])]
                for c in cells
            },
            {c["cell_id"]: c for c in cells},
            run.manifest,
        )


def within(a: float, b: float) -> bool:
    return abs(b - a) <= max(ABS_MS, REL * abs(a))


def compare(base: dict[str, list[float]], other: dict[str, list[float]]) -> list[dict]:
    rows = []
    for cell_id in sorted(base):
        a, b = np.array(base[cell_id]), np.array(other[cell_id])
        mean_a, mean_b = float(a.mean()), float(b.mean())
        med_a, med_b = float(np.median(a)), float(np.median(b))
        p99_a, p99_b = float(np.percentile(a, 99)), float(np.percentile(b, 99))
        rows.append(
            {
                "cell": cell_id,
                "mean_ms": mean_a,
                "mean_diff_ms": mean_b - mean_a,
                "median_diff_ms": med_b - med_a,
                "p99_rel": p99_b / p99_a - 1 if p99_a else 0.0,
                "ok": within(mean_a, mean_b) and within(med_a, med_b),
                "p99_ok": abs(p99_b - p99_a) <= max(P99_ABS_MS, P99_REL * p99_a),
            }
        )
    return rows


def slopes(values: dict[str, float], cells: dict[str, dict]) -> dict[tuple, float]:
    """(nodes, RF, loss) -> slope of a per-cell RTT statistic (``values``: cell id -> its
    mean, or its median) over latency (ms per ms), least squares."""
    groups: dict[tuple, list[tuple[float, float]]] = {}
    for cell_id, value in values.items():
        c = cells[cell_id]
        groups.setdefault((c["nodes"], c["rf"], c["loss_pct"]), []).append((c["latency_ms"], value))
    return {
        key: float(np.polyfit([x for x, _ in pts], [y for _, y in pts], 1)[0])
        for key, pts in sorted(groups.items())
        if len({x for x, _ in pts}) > 1
    }


def table(title: str, rows: list[dict]) -> str:
    lines = [
        f"### {title}",
        "",
        "| cell | mean ms | Δ mean ms | Δ median ms | p99 Δ | agree |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['cell']} | {r['mean_ms']:.2f} | {r['mean_diff_ms']:+.2f} | "
            f"{r['median_diff_ms']:+.2f} | {100 * r['p99_rel']:+.1f} % | "
            f"{'yes' if r['ok'] else 'NO'}{'' if r['p99_ok'] else ', p99 NO'} |"
        )
    return "\n".join(lines)


def run_slopes(run: dict[str, list[float]], cells: dict[str, dict]) -> tuple[dict, dict]:
    """A run's slopes over latency: of its cells' means, of their medians."""
    return (
        slopes({k: statistics.fmean(v) for k, v in run.items()}, cells),
        slopes({k: statistics.median(v) for k, v in run.items()}, cells),
    )


def deviation(base: dict, other: dict) -> float:
    """The largest relative difference of two runs' slopes over the groups."""
    return max((abs(other[k] / base[k] - 1) for k in base if base[k]), default=0.0)


def judge(rows: list[dict], base: tuple[dict, dict], other: tuple[dict, dict]) -> dict:
    """``rows`` (``compare``) and the two runs' ``run_slopes`` against the rules."""
    n = len(rows)
    median_shift, lo, hi = fidelity.shift([r["median_diff_ms"] for r in rows])
    slower = sum(r["median_diff_ms"] > 0 for r in rows)
    moved = sum(r["median_diff_ms"] != 0 for r in rows)
    slope_dev = deviation(base[0], other[0])
    s = {
        "cells": n,
        "agree": sum(r["ok"] for r in rows) / n,
        "p99_agree": sum(r["p99_ok"] for r in rows) / n,
        "max_abs_mean_diff_ms": max(abs(r["mean_diff_ms"]) for r in rows),
        "median_abs_median_diff_ms": statistics.median(abs(r["median_diff_ms"]) for r in rows),
        "slope_dev": slope_dev,
        "median_slope_dev": deviation(base[1], other[1]),
        "slower": slower,
        "sign_p": stats.binomtest(slower, moved).pvalue if moved else 1.0,
        "shift_ms": median_shift,
        "shift_ci": (lo, hi),
        "equivalent": -EQUIV_MS <= lo and hi <= EQUIV_MS,
    }
    s["accepted"] = (
        s["agree"] >= SHARE
        and s["p99_agree"] >= SHARE
        and slope_dev <= SLOPE_REL
        and s["sign_p"] >= SIGN_ALPHA
    )
    return s


def as_close_as(s: dict, noise: dict) -> bool:
    """The verdict: the shift is too small to change a conclusion (``equivalent``), and
    ``s`` agrees with seq-a about as well as seq-b does (the noise rules)."""
    return (
        s["equivalent"]
        and s["agree"] >= noise["agree"] - NOISE_SHARE
        and s["p99_agree"] >= noise["p99_agree"] - NOISE_SHARE
        and s["median_slope_dev"] <= max(SLOPE_REL, NOISE_SLOPE * noise["median_slope_dev"])
        and s["median_abs_median_diff_ms"]
        <= NOISE_MEDIAN * noise["median_abs_median_diff_ms"] + NOISE_MEDIAN_MS
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", default="3,5")
    p.add_argument("--rf", default="1..5")
    p.add_argument("--latency", default="0,20,50,100")
    p.add_argument("--loss", default="0.5,2.5,7.5")
    p.add_argument("--profile", default="paper")
    p.add_argument("--writes", type=int, default=300)
    p.add_argument("--parallel", default="2,4,6,8", help="Ps to test ('' with --ab: none)")
    p.add_argument("--shaper", default="auto", choices=shapers.SHAPERS)
    p.add_argument("--build", default="stock", choices=BUILDS, help="every run's nodes")
    p.add_argument(
        "--ab",
        action="store_true",
        help="stock against quiet nodes instead: seq-a, quiet-a, seq-b, quiet-b, one at a "
        "time, alternating; each quiet run judged against seq-a as the P runs are",
    )
    p.add_argument("--out", type=Path, default=Path("results/fidelity"))
    p.add_argument(
        "--max-busy",
        type=float,
        help="the parallel runs' budget, a share of the cores (default: the shaper's)",
    )
    p.add_argument(
        "--no-record", action="store_true", help="do not make the verdict this machine's"
    )
    args = p.parse_args()
    ps = [int(x) for x in args.parallel.split(",") if x] if not args.ab else []
    shaper = shapers.resolve(args.shaper)
    walls = {}
    default_busy = estimate.defaults(shaper).max_busy
    busy = default_busy if args.max_busy is None else args.max_busy
    base_build = "stock" if args.ab else args.build
    runs = [("seq-a", 1, base_build), ("seq-b", 1, base_build)]
    if args.ab:  # alternating: a drift of the machine over hours falls on both builds
        runs = [("seq-a", 1, "stock"), ("quiet-a", 1, "quiet"),
                ("seq-b", 1, "stock"), ("quiet-b", 1, "quiet")]  # fmt: skip
    runs += [(run_name(q, busy), q, args.build) for q in ps]
    for name, parallel, build in runs:
        print(
            f"running {name} (--parallel {parallel}, {build} nodes) ...",
            file=sys.stderr,
            flush=True,
        )
        walls[name] = sweep(args, args.out / name, parallel, build)
    base, cells, _ = rtts(args.out / "seq-a")
    base_slopes = run_slopes(base, cells)
    grid = (
        f"nodes {args.nodes}, RF {args.rf}, latency {args.latency} ms, loss {args.loss} %, "
        f"{args.profile} profile, {args.writes} writes per cell, shaper {shaper}"
        + (", stock against quiet nodes" if args.ab else f", {args.build} nodes")
        + f", budget {100 * busy:g} % of the cores"
    )
    report = [
        f"## {'Stock against quiet nodes' if args.ab else 'Parallel fidelity'}: {grid}",
        "",
        "Each run compared with the sequential run seq-a. Agree: mean and median within "
        f"max({ABS_MS} ms, {100 * REL:g} %); p99 within max({P99_ABS_MS:g} ms, "
        f"{100 * P99_REL:g} %). Shift: the median over cells of the signed Δ median, with "
        f"its 95 % CI (bootstrap over cells); equivalent when the CI is inside "
        f"±{EQUIV_MS} ms.",
        "",
    ]
    sums = {}
    for name, _, _ in runs[1:]:
        other, _, manifest = rtts(args.out / name)
        rows = compare(base, other)
        sums[name] = judge(rows, base_slopes, run_slopes(other, cells))
        report += [table(f"{name} vs seq-a", rows), ""]
        # the sweep's own wall time (a reused run's is stored in its manifest)
        sums[name]["wall_s"] = round(manifest.get("wall_s") or walls[name])
        sums[name]["cpu_util"] = manifest.get("cpu_util")
    report += [
        "| run | cells | mean & median agree | p99 agree | max abs Δ mean ms "
        "| median abs Δ median ms | max slope Δ (means) | max slope Δ (medians) "
        "| shift ms (95 % CI) | cells slower | sign test p | wall s "
        "| CPU busy | issue 23's rules | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    verdict = {name: name != "seq-b" and as_close_as(s, sums["seq-b"]) for name, s in sums.items()}
    for name, s in sums.items():
        lo, hi = s["shift_ci"]
        report.append(
            f"| {name} | {s['cells']} | {100 * s['agree']:.0f} % | {100 * s['p99_agree']:.0f} % "
            f"| {s['max_abs_mean_diff_ms']:.2f} | {s['median_abs_median_diff_ms']:.2f} "
            f"| {100 * s['slope_dev']:.2f} % | {100 * s['median_slope_dev']:.2f} % "
            f"| {s['shift_ms']:+.3f} ({lo:+.3f}, {hi:+.3f}) "
            f"| {s['slower']}/{s['cells']} | {s['sign_p']:.3f} | {s['wall_s']} "
            f"| {100 * (s['cpu_util'] or 0):.0f} % | {'yes' if s['accepted'] else 'no'} "
            f"| {'-' if name == 'seq-b' else 'accepted' if verdict[name] else 'REJECTED'} |"
        )
    rule = f"equivalence (shift CI inside ±{EQUIV_MS} ms) and as close as two sequential runs"
    report += [""]
    if args.ab:
        same = verdict["quiet-a"] and verdict["quiet-b"]
        report += [
            f"Verdict by {rule}: quiet nodes "
            + ("measure the same as stock" if same else "do NOT measure the same as stock")
        ]
    else:
        verdicts = {q: verdict[run_name(q, busy)] for q in ps}
        report += [
            f"Verdicts by {rule}: "
            + ", ".join(f"P={q} {'accepted' if ok else 'REJECTED'}" for q, ok in verdicts.items()),
        ]
        if busy != default_busy:
            report += ["Not recorded: the parallel runs had a budget other than the shaper's."]
        elif not args.no_record and ps:
            max_nodes = max(int(n) for n in args.nodes.split(","))
            best = fidelity.record(
                shaper, CORES, verdicts, grid, rule, args.out, args.build, max_nodes=max_nodes
            )
            report += [f"--parallel auto with the {shaper} shaper and {args.build} nodes: at "
                       f"most P={best} (every grid recorded in {fidelity.path()})"]  # fmt: skip
    text = "\n".join(report)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fidelity.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
