"""What TLS costs a write's RTT (issue 25): the same small sweep with ``--tls off`` and
``--tls on``, alternating (off, on, off, on, ...) so that drift of the machine falls on
both alike, then per cell the median over the runs of each side's mean and median RTT,
and the difference.

    python benchmarks/tls_cost.py [--runs 3] [--nodes 3] [--rf 1,3] [--latency 0,20] \
        [--writes 300] [-- EXTRA SWEEP FLAGS, e.g. --backend hosts --inventory inv.yml]

Every sweep brings its own cluster up (TLS is chosen at bring-up) and writes its store
under a temporary directory. Prints its figures; nothing is asserted (the machine is
noisy). Run it alone.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from analysis.results import load


def sweep(out: Path, tls: str, args: argparse.Namespace, extra: list[str]) -> float:
    argv = [
        sys.executable, "-m", "experiments.sweep", "--out", str(out), "--tls", tls,
        "--nodes", args.nodes, "--rf", args.rf, "--latency", args.latency, "--loss", "0",
        "--writes", str(args.writes), "--verify-probes", "0", *extra,
    ]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"sweep --tls {tls} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return time.monotonic() - t0


def cells(out: Path) -> dict[tuple[int, int, float], tuple[float, float]]:
    """(nodes, rf, latency) -> (mean, median) RTT in ms of the run in ``out``."""
    found = {}
    for cell in load(out).cells:
        rtt = cell["rtt_ms"][~cell["failed"]]
        key = (cell["nodes"], cell["rf"], cell["latency_ms"])
        found[key] = (float(np.mean(rtt)), float(np.median(rtt)))
    return found


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="sweeps per side (default 3)")
    p.add_argument("--nodes", default="3")
    p.add_argument("--rf", default="1,3")
    p.add_argument("--latency", default="0,20")
    p.add_argument("--writes", type=int, default=300)
    args, extra = p.parse_known_args()
    extra = [a for a in extra if a != "--"]
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="edgetb-tls-cost-") as tmp:
        for i in range(args.runs):
            for tls in ("off", "on"):
                out = Path(tmp) / f"{tls}-{i}"
                took = sweep(out, tls, args, extra)
                runs[tls].append(cells(out))
                print(f"run {i + 1}/{args.runs} --tls {tls}: {took:.0f} s", flush=True)
    print()
    print(f"RTT in ms, each figure the median over {args.runs} runs")
    print(
        f"{'nodes':>5} {'rf':>3} {'lat ms':>6} | {'mean off':>8} {'mean on':>8} {'Δ mean':>7} "
        f"| {'p50 off':>8} {'p50 on':>8} {'Δ p50':>7}"
    )
    for key in sorted(runs["off"][0]):
        off = [r[key] for r in runs["off"]]
        on = [r[key] for r in runs["on"]]
        mean_off = statistics.median(m for m, _ in off)
        mean_on = statistics.median(m for m, _ in on)
        p50_off = statistics.median(m for _, m in off)
        p50_on = statistics.median(m for _, m in on)
        print(
            f"{key[0]:>5} {key[1]:>3} {key[2]:>6g} | {mean_off:8.2f} {mean_on:8.2f} "
            f"{mean_on - mean_off:+7.2f} | {p50_off:8.2f} {p50_on:8.2f} {p50_on - p50_off:+7.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
