"""Device-sized nodes (issue 14, item 1), measured on a netns testbed:

1. Quota accuracy: a CPU-bound Java loop (``threads`` threads, a single-file program run
   by the JDK's source launcher) inside an edge node with ``--node-cpu Q``: the cores it
   got (the node cgroup's own CPU accounting over wall time) against Q, median of
   ``--reps`` runs, for Q in 0.25, 0.5 and 1.0.
2. The JVM fits its memory limit: a 1-node Cassandra with ``--node-memory M`` (heap
   256 MB) loaded with YCSB records; the node cgroup's peak memory against M, and the
   node still UN afterwards (no OOM kill).

    python benchmarks/resources.py [--reps 5] [--memory 640] [--records 20000]

Prints its figures; nothing is asserted (the machine is noisy).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from testbed import Testbed, Topology, cgroups
from testbed.backends import backend_options
from testbed.cassandra.config import CassandraSettings

BUSY = """
public class Busy {
  public static void main(String[] a) throws Exception {
    long end = System.nanoTime() + (long) (Double.parseDouble(a[0]) * 1e9);
    int n = Integer.parseInt(a[1]);
    Thread[] ts = new Thread[n];
    for (int i = 0; i < n; i++) {
      ts[i] = new Thread(() -> { long x = 0; while (System.nanoTime() < end) { x += x ^ 7; } });
      ts[i].start();
    }
    for (Thread t : ts) t.join();
  }
}
"""


def quota(reps: int, seconds: float, threads: int, work: Path) -> None:
    src = work / "Busy.java"
    src.write_text(BUSY)
    print(f"1. quota accuracy: Java loop, {threads} threads, {seconds:g} s, {reps} runs each")
    print(f"   {'quota':>6} {'got (median)':>13} {'ratio':>7}   runs")
    for q in (0.25, 0.5, 1.0):
        tb = Testbed(
            Topology(edge_nodes=1),
            cassandra=None,
            backend_options=backend_options("netns", node_resources={"*": {"cpu": q}}),
        )
        tb.up()
        try:
            dirs = tb.backend.cgroup_dirs["e0"]  # type: ignore[union-attr]
            got = []
            for _ in range(reps):
                java = tb.java.path if tb.java else "java"
                before = cgroups.cpu_usage_s(dirs)
                t0 = time.monotonic()
                # the JVM's start (compiling the source) is inside the window too
                tb.exec("e0", [java, str(src), str(seconds), str(threads)], timeout=seconds + 60)
                got.append((cgroups.cpu_usage_s(dirs) - before) / (time.monotonic() - t0))
            med = statistics.median(got)
            print(
                f"   {q:>6.2f} {med:>13.3f} {med / q:>7.3f}   " + " ".join(f"{g:.3f}" for g in got)
            )
        finally:
            tb.down()


def memory(limit_mb: int, records: int, work: Path) -> None:
    from workloads import ycsb
    from workloads.ycsb import client as ycsb_client

    print(f"2. memory: 1 node, --node-memory {limit_mb}, heap 256 MB, {records} YCSB records")
    tb = Testbed(
        Topology(edge_nodes=1),
        cassandra=CassandraSettings(heap_mb=256),
        backend_options=backend_options("netns", node_resources={"*": {"memory_mb": limit_mb}}),
    )
    tb.up()
    try:
        dirs = tb.backend.cgroup_dirs["e0"]  # type: ignore[union-attr]
        print(f"   after start: peak {cgroups.memory_peak_mb(dirs):.0f} MB of {limit_mb}")
        runner = ycsb_client.Ycsb(tb)
        ycsb.create_table(tb, "ycsb_mem", 1)
        loaded = runner.load(ycsb.Spec("a", records=records, threads=8), "ycsb_mem", work / "load")
        state = {s["name"]: s.get("cassandra") for s in tb.status()}
        print(
            f"   after {records} inserts ({loaded.throughput_ops:.0f} ops/s): peak "
            f"{cgroups.memory_peak_mb(dirs):.0f} MB of {limit_mb}; e0 {state.get('e0')}, "
            f"JVM alive: {tb.nodes['e0'].alive()}"
        )
    finally:
        tb.down()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--memory", type=int, default=640)
    p.add_argument("--records", type=int, default=20000)
    p.add_argument("--skip-memory", action="store_true")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="edgetb-resources-bench-"))
    print(f"cgroups: {cgroups.require_layout()}")
    try:
        quota(args.reps, args.seconds, args.threads, work)
        if not args.skip_memory:
            memory(args.memory, args.records, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
