"""Resident memory of testbeds as the parallel sweep runs them: N testbeds of k nodes,
each with its gateway VM shaping and a write having gone through, summed over every
process in their namespaces (Cassandra JVMs, QEMU, the endpoint's client). Prints the
RSS per testbed (median), what P testbeds would take, and the share of this machine's
memory that is; --parallel auto keeps that under 75 %.

    python benchmarks/testbed_memory.py --nodes 5 --testbeds 2
"""

from __future__ import annotations

import argparse
import statistics
import sys

from emulation import api as emulation
from emulation import links
from testbed import CassandraSettings, Testbed, Topology
from testbed.backends.netns import namespace_pids
from testbed.state import namespace_name


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return 0.0


def testbed_rss_mb(tb: Testbed) -> float:
    names = ["sw", *(h.name for h in tb.topology.hosts)]
    pids = {p for n in names for p in namespace_pids(namespace_name(tb.run_id, n))}
    return sum(rss_mb(p) for p in pids)


def total_mb() -> float:
    with open("/proc/meminfo") as f:
        return int(f.readline().split()[1]) / 1024


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=5)
    p.add_argument("--testbeds", type=int, default=2)
    p.add_argument("--heap-mb", type=int, default=256)
    args = p.parse_args()
    tbs: list[Testbed] = []
    try:
        for _ in range(args.testbeds):
            tb = Testbed(
                Topology(edge_nodes=args.nodes),
                cassandra=CassandraSettings(heap_mb=args.heap_mb),
                progress=lambda m: print(m, file=sys.stderr),
            )
            tbs.append(tb)
            tb.up()
            matrix = links.build("uniform", tb.topology, delay_ms=20, loss_pct=0.5)
            emulation.set_links(tb, matrix, "auto")
            tb.client(["write", "--rf", str(min(3, args.nodes))])
        each = [testbed_rss_mb(tb) for tb in tbs]
    finally:
        for tb in tbs:
            if tb.state is not None:
                tb.down()
    median = statistics.median(each)
    ram = total_mb()
    print(f"RSS per {args.nodes}-node testbed (heap {args.heap_mb} MB, gateway shaping): "
          f"{', '.join(f'{x:.0f}' for x in each)} MB; median {median:.0f} MB")  # fmt: skip
    for p_ in (1, 2, 4, 8):
        print(f"P={p_}: {p_ * median / 1024:.1f} GB = {100 * p_ * median / ram:.0f} % of "
              f"{ram / 1024:.1f} GB")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
