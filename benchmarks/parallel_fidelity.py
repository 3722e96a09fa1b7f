"""Are cells measured P at a time the same as cells measured one at a time?

Runs one sub-grid sequentially twice (two independent runs: the scale of run-to-run
variation) and once per P in --parallel, each into its own results directory, then
compares every cell with the first sequential run: the difference of medians and of means,
and two two-sample tests (scipy.stats: Mann-Whitney U on the RTTs, Kolmogorov-Smirnov on
their distributions). Two sequential runs already differ "significantly" in most cells
(measured: 13-16 of 18): the RTTs are so tight that a run-to-run shift of a few tenths of
a millisecond is detected. So a parallel P passes when (a) its median differences are no
larger than the second sequential run's (median |Δ median| at most 1.5x + 0.1 ms) and
(b) they show no systematic direction (a two-sided sign test over the cells, p >= 0.05:
parallel cells are not consistently slower); the per-cell test rejections are counted
beside those of the second sequential run for scale. Prints one table per P and a
summary; writes both to OUT/fidelity.md. A run already complete in OUT is reused.

    python benchmarks/parallel_fidelity.py                       # the issue's sub-grid
    python benchmarks/parallel_fidelity.py --nodes 3 --rf 1..3 --latency 0,50,100 \\
        --loss 0.5,7.5 --writes 150 --parallel 2,4                # ~45 min here
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scipy import stats

from experiments.store import Store

ALPHA = 0.05


def sweep(args: argparse.Namespace, out: Path, parallel: int) -> float:
    """Run (or resume, or reuse) one sweep of the sub-grid; its wall seconds."""
    cmd = [
        sys.executable, "-m", "experiments.sweep", "--nodes", args.nodes, "--rf", args.rf,
        "--latency", args.latency, "--loss", args.loss, "--profile", args.profile,
        "--writes", str(args.writes), "--parallel", str(parallel), "--out", str(out),
    ]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}")
    return time.monotonic() - t0


def rtts(out: Path) -> tuple[dict[str, list[float]], dict]:
    """Cell id -> RTTs in ms of the run in ``out``, and the run's manifest."""
    with Store(out, read_only=True) as store:
        (run,) = store.runs()
        cells = store.cells(run.run_id)
        return (
            {
                c["cell_id"]: [r / 1e6 for r in store.rtts_ns(run.run_id, c["cell_id"])]
                for c in cells
            },
            run.manifest,
        )


def compare(base: dict[str, list[float]], other: dict[str, list[float]]) -> list[dict]:
    rows = []
    for cell_id in sorted(base):
        a, b = base[cell_id], other[cell_id]
        rows.append(
            {
                "cell": cell_id,
                "median_diff_ms": statistics.median(b) - statistics.median(a),
                "mean_diff_ms": statistics.fmean(b) - statistics.fmean(a),
                "mw_p": stats.mannwhitneyu(a, b, alternative="two-sided").pvalue,
                "ks_p": stats.ks_2samp(a, b).pvalue,
            }
        )
    return rows


def table(title: str, rows: list[dict]) -> str:
    lines = [
        f"### {title}",
        "",
        "| cell | Δ median ms | Δ mean ms | Mann-Whitney p | KS p |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['cell']} | {r['median_diff_ms']:+.2f} | {r['mean_diff_ms']:+.2f} | "
            f"{r['mw_p']:.3f}{' *' if r['mw_p'] < ALPHA else ''} | "
            f"{r['ks_p']:.3f}{' *' if r['ks_p'] < ALPHA else ''} |"
        )
    return "\n".join(lines)


def summary(rows: list[dict]) -> dict:
    n = len(rows)
    return {
        "cells": n,
        "mw_rejects": sum(r["mw_p"] < ALPHA for r in rows),
        "ks_rejects": sum(r["ks_p"] < ALPHA for r in rows),
        "median_abs_median_diff_ms": statistics.median(abs(r["median_diff_ms"]) for r in rows),
        "max_abs_median_diff_ms": max(abs(r["median_diff_ms"]) for r in rows),
        "slower": sum(r["median_diff_ms"] > 0 for r in rows),
        "sign_p": stats.binomtest(
            sum(r["median_diff_ms"] > 0 for r in rows),
            sum(r["median_diff_ms"] != 0 for r in rows),
        ).pvalue,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", default="5")
    p.add_argument("--rf", default="1..5")
    p.add_argument("--latency", default="0,20,50,100")
    p.add_argument("--loss", default="0.5,7.5")
    p.add_argument("--profile", default="paper")
    p.add_argument("--writes", type=int, default=1000)
    p.add_argument("--parallel", default="2,4,8")
    p.add_argument("--out", type=Path, default=Path("results/fidelity"))
    args = p.parse_args()
    ps = [int(x) for x in args.parallel.split(",")]
    walls = {}
    for name, parallel in [("seq-a", 1), ("seq-b", 1)] + [(f"p{q}", q) for q in ps]:
        print(f"running {name} (--parallel {parallel}) ...", file=sys.stderr, flush=True)
        walls[name] = sweep(args, args.out / name, parallel)
    base, _ = rtts(args.out / "seq-a")
    report = [
        f"## Parallel fidelity: nodes {args.nodes}, RF {args.rf}, latency {args.latency} ms, "
        f"loss {args.loss} %, {args.profile} profile, {args.writes} writes per cell",
        "",
        "Each run compared with the sequential run seq-a; `*`: p < 0.05.",
        "",
    ]
    sums = {}
    for name in ["seq-b"] + [f"p{q}" for q in ps]:
        other, manifest = rtts(args.out / name)
        rows = compare(base, other)
        sums[name] = summary(rows)
        cpu = manifest.get("cpu_util")
        report += [table(f"{name} vs seq-a", rows), ""]
        # the sweep's own wall time (a reused run's is stored in its manifest)
        sums[name]["wall_s"] = round(manifest.get("wall_s") or walls[name])
        sums[name]["cpu_util"] = cpu
    report += [
        "| run | cells | MW p<0.05 | KS p<0.05 | median abs Δ median ms | max abs Δ median ms "
        "| cells slower | sign test p | wall s | CPU busy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in sums.items():
        report.append(
            f"| {name} | {s['cells']} | {s['mw_rejects']} | {s['ks_rejects']} | "
            f"{s['median_abs_median_diff_ms']:.2f} | {s['max_abs_median_diff_ms']:.2f} | "
            f"{s['slower']}/{s['cells']} | {s['sign_p']:.3f} | "
            f"{s['wall_s']} | {100 * (s['cpu_util'] or 0):.0f} % |"
        )
    scale = sums["seq-b"]
    verdicts = []
    for q in ps:
        s = sums[f"p{q}"]
        close = s["median_abs_median_diff_ms"] <= 1.5 * scale["median_abs_median_diff_ms"] + 0.1
        unbiased = s["sign_p"] >= ALPHA
        verdicts.append(
            f"P={q}: "
            + ("indistinguishable from sequential" if close and unbiased else "DIFFERS")
            + f" (median |Δ median| {s['median_abs_median_diff_ms']:.2f} ms vs "
            f"{scale['median_abs_median_diff_ms']:.2f} between sequential runs; slower in "
            f"{s['slower']}/{s['cells']} cells, sign test p {s['sign_p']:.3f}; test "
            f"rejections {s['mw_rejects']}+{s['ks_rejects']} vs "
            f"{scale['mw_rejects']}+{scale['ks_rejects']})"
        )
    report += [""] + verdicts
    text = "\n".join(report)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fidelity.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
