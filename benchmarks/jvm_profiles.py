"""What a Cassandra node costs the machine per JVM profile (issue 23, item 4):

1. Idle: a 3-node netns testbed up ``--settle`` s, then each JVM's CPU (utime + stime
   from /proc) over ``--idle`` s, as a share of one core.
2. Per write: a sweep of ``--cells`` repetitions of one cell (3 nodes, RF 3,
   ``--latency`` ms on every link, the paper's LOCAL_QUORUM writes, ``--writes`` each,
   after the sweep's own warm-up) with the shaper given; the machine's busy CPU during
   each cell (the store's ``cpu_util``) over its writes. The last cell is the steady
   state (the JIT has compiled what it will); the first shows the warm-up. At 0 ms the
   host shaper queues nothing; give a latency to count the shaper's part.

    python benchmarks/jvm_profiles.py [--profiles fast,standard] [--reps 2] [--shaper auto]
    python benchmarks/jvm_profiles.py --profiles fast --skip-idle --latency 5 \
        --shaper gateway                                # a shaper's CPU per write

Prints its figures; nothing is asserted (the machine is noisy). Run it alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from experiments.store.db import Store
from testbed import Testbed, Topology
from testbed.cassandra.config import CassandraSettings

TICK = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def idle_share(profile: str, settle_s: float, idle_s: float) -> float:
    """Median over the JVMs of the share of a core each takes while nothing happens."""
    tb = Testbed(
        Topology(edge_nodes=3), cassandra=CassandraSettings(jvm_profile=profile),  # type: ignore[arg-type]
        progress=lambda _m: None,
    )  # fmt: skip
    with tb:
        time.sleep(settle_s)
        pids = [n.pid for n in tb.nodes.values() if n.pid is not None]
        before, t0 = [cpu_s(p) for p in pids], time.monotonic()
        time.sleep(idle_s)
        took = time.monotonic() - t0
        return statistics.median((cpu_s(p) - b) / took for p, b in zip(pids, before, strict=True))


def write_costs(
    profile: str, cells: int, writes: int, shaper: str, latency: float = 0.0
) -> list[float]:
    """CPU-ms of the whole machine per write, cell by cell."""
    with tempfile.TemporaryDirectory(prefix="edgetb-jvm-") as tmp:
        out = Path(tmp)
        argv = [
            sys.executable, "-m", "experiments.sweep", "--nodes", "3", "--rf", "3",
            "--latency", f"{latency:g}", "--loss", "0", "--profile", "uniform",
            "--writes", str(writes),
            "--repetitions", str(cells), "--jvm-profile", profile, "--shaper", shaper,
            "--verify-probes", "0", "--parallel", "1", "--out", str(out),
        ]  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"sweep failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        with Store(out, create=False) as store:
            (run,) = store.runs()
            rows = sorted(store.cells(run.run_id), key=lambda c: c["repetition"])
    return [
        1000 * c["cpu_util"] * CORES * (c["finished"] - c["started"]) / (c["writes"] + c["warmup"])
        for c in rows
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--profiles", default="fast,standard")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--settle", type=float, default=60)
    p.add_argument("--idle", type=float, default=30)
    p.add_argument("--cells", type=int, default=3)
    p.add_argument("--writes", type=int, default=2000)
    p.add_argument("--shaper", default="auto")
    p.add_argument("--latency", type=float, default=0.0, help="one-way ms on every link")
    p.add_argument("--skip-idle", action="store_true")
    args = p.parse_args()
    profiles = args.profiles.split(",")
    idle: dict[str, list[float]] = {pr: [] for pr in profiles}
    steady: dict[str, list[float]] = {pr: [] for pr in profiles}
    first: dict[str, list[float]] = {pr: [] for pr in profiles}
    for rep in range(args.reps):
        for pr in profiles:  # alternated, so a slow spell of the machine hits both
            if not args.skip_idle:
                idle[pr].append(idle_share(pr, args.settle, args.idle))
            costs = write_costs(pr, args.cells, args.writes, args.shaper, args.latency)
            first[pr].append(costs[0])
            steady[pr].append(costs[-1])
            idle_text = f"idle {100 * idle[pr][-1]:.2f} % of a core per JVM; " if idle[pr] else ""
            print(f"  rep {rep + 1} {pr}: {idle_text}"
                  f"CPU-ms per write by cell {', '.join(f'{c:.2f}' for c in costs)}")  # fmt: skip
    print(f"medians of {args.reps} (3 nodes, RF 3, {args.latency:g} ms, {args.writes} writes "
          f"a cell, shaper {args.shaper}):")  # fmt: skip
    for pr in profiles:
        idle_text = ""
        if idle[pr]:
            idle_text = f"idle {100 * statistics.median(idle[pr]):.2f} % of a core per JVM; "
        print(f"  {pr:>8}: {idle_text}"
              f"{statistics.median(first[pr]):.2f} CPU-ms per write in the first cell, "
              f"{statistics.median(steady[pr]):.2f} in the last")  # fmt: skip


if __name__ == "__main__":
    main()
