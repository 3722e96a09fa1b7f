"""Analysis benchmark: `python -m analysis.plots` (figures, the model's curves, report)
or `python -m analysis.model` on a synthetic full paper grid (3/4/5 nodes, every RF, 11
latencies, 3 losses = 396 cells x 1000 requests).

    python benchmarks/plots.py [--runs 3] [--module analysis.model]

Prints the median wall time of the whole command over runs (goal <= 10 s).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from analysis.synthetic import make_store

GOAL_S = 10.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--module", choices=("analysis.plots", "analysis.model"), default="analysis.plots"
    )
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="edgetb-plots-"))
    try:
        t0 = time.monotonic()
        make_store(directory)
        print(f"synthetic store: 396 cells x 1000 requests in {time.monotonic() - t0:.1f} s")
        times = []
        for _ in range(args.runs):
            t0 = time.monotonic()
            subprocess.run(
                [sys.executable, "-m", args.module, str(directory)],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            times.append(time.monotonic() - t0)
        figures = len(list((directory / "analysis").glob("*.png")))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(
        f"{args.module}: {figures} figures (PNG+SVG) + report, median "
        f"{statistics.median(times):.1f} s over {len(times)} runs "
        f"({', '.join(f'{t:.1f}' for t in times)}); goal <= {GOAL_S:g} s"
    )


if __name__ == "__main__":
    main()
