"""Sweep overhead: wall time of a sweep divided by the sum of the RTTs it recorded.

    python benchmarks/sweep_overhead.py [--runs 1] [-- extra sweep flags]

Runs `python -m experiments.sweep --quick` into a fresh results directory per run and
prints, per run and as the median over runs: wall time, sum of recorded RTTs, the ratio
(goal <= 1.10) and where the rest went (bring-up, unrecorded writes, shaping checks).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from experiments.store.db import Store

GOAL = 1.10


def one_run(extra: list[str]) -> dict[str, float]:
    out = Path(tempfile.mkdtemp(prefix="edgetb-overhead-"))
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.sweep", "--quick", "--out", str(out), *extra], text=True
    )
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"sweep failed with status {proc.returncode}")
    with Store(out, create=False) as store:
        (run,) = store.runs()
        rtt = store.total_rtt_ns(run.run_id) / 1e9
        cells = store.cells(run.run_id)
        in_cells = sum(c["finished"] - c["started"] for c in cells)
        verify = sum(
            {
                (c["nodes"], c["latency_ms"], c["loss_pct"], c["repetition"]): (
                    c["shaping"].get("measured") or {}
                ).get("took_s", 0.0)
                for c in cells
            }.values()
        )
        bringup = sum(c.get("bringup_s", 0.0) for c in run.manifest["clusters"].values())
    return {
        "wall_s": wall,
        "rtt_sum_s": rtt,
        "ratio": wall / rtt,
        "cells_s": in_cells,
        "bringup_s": bringup,
        "verify_s": verify,
        "results": str(out),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("extra", nargs="*", help="extra sweep flags (after --)")
    args = parser.parse_args()
    results = []
    for i in range(args.runs):
        r = one_run(args.extra)
        results.append(r)
        print(
            json.dumps(
                {
                    "run": i + 1,
                    **{k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()},
                }
            ),
            flush=True,
        )
    ratio = statistics.median(r["ratio"] for r in results)
    wall = statistics.median(r["wall_s"] for r in results)
    print(
        f"quick sweep: wall {wall / 60:.1f} min, overhead ratio {ratio:.3f} "
        f"(median of {len(results)}; goal <= {GOAL})"
    )


if __name__ == "__main__":
    main()
