"""YCSB benchmark (issue 13) on a 3-node netns testbed, RF 3, round robin:

1. Client capacity: workload C at 0 ms with 1..32 threads: throughput, the YCSB client's
   CPU (cores) and its share of the machine's busy CPU; is the client the bottleneck?
2. One thread at 20 ms uniform links: throughput against 1 / mean latency (within 10 %).
3. The cost of consistency: workload A at 0, 20 and 50 ms uniform links, read and write
   level ONE, QUORUM, ALL; throughput and read/update p99 with 95 % t-intervals over
   ``--reps`` repetitions (each a fresh run phase on the loaded table).

    python benchmarks/ycsb.py [--reps 3] [--operations 1000] [--skip-capacity]

Prints its figures; nothing is asserted (the machine is noisy).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

from analysis.stats import t95
from emulation import api, links
from experiments.run.launch import cpu_busy, cpu_times
from testbed import Testbed, Topology
from workloads import ycsb
from workloads.ycsb import client as ycsb_client

KEYSPACE = "ycsb_bench"
RECORDS = 1000


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def ci(values: list[float]) -> str:
    m = statistics.fmean(values)
    if len(values) < 2:
        return f"{m:8.1f}"
    half = t95(len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5
    return f"{m:8.1f} ± {half:<6.1f}"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--operations", type=int, default=1000)
    p.add_argument("--skip-capacity", action="store_true")
    args = p.parse_args()
    out = Path(tempfile.mkdtemp(prefix="edgetb-ycsb-bench-"))
    tb = Testbed(Topology(edge_nodes=3))
    tb.up()
    try:
        runner = ycsb_client.Ycsb(tb)
        ycsb.create_table(tb, KEYSPACE, 3)
        runner.load(ycsb.Spec("a", records=RECORDS, threads=8), KEYSPACE, out / "load")
        if not args.skip_capacity:
            print("1. client capacity: workload C, 0 ms, RF 3, read ONE", flush=True)
            for threads in (1, 4, 16, 32):
                spec = ycsb.Spec("c", records=RECORDS, operations=500 * threads, threads=threads)
                c0, m0 = children_cpu_s(), cpu_times()
                t0 = time.monotonic()
                r = runner.run(spec, KEYSPACE, out / f"cap{threads}")
                wall = time.monotonic() - t0
                client = children_cpu_s() - c0
                busy = cpu_busy(m0, cpu_times()) or 0.0
                cores = busy * (os.cpu_count() or 1)  # busy: a fraction of all cores
                print(
                    f"  {threads:>2} threads: {r.throughput_ops:7.0f} ops/s, read p50 "
                    f"{r.ops['READ']['p50_ms']:.2f} ms; client {client / wall:.2f} cores "
                    f"(JVM start included), machine busy {100 * busy:.0f} % "
                    f"-> client share {100 * client / wall / max(cores, 1e-9):.0f} %",
                    flush=True,
                )
        api.set_links(tb, links.uniform(tb.topology, 20, 0))
        print("2. one thread, 20 ms uniform links, workload C, read ONE", flush=True)
        tputs, ratios = [], []
        for i in range(args.reps):
            spec = ycsb.Spec("c", records=RECORDS, operations=300, threads=1)
            r = runner.run(spec, KEYSPACE, out / f"one{i}")
            expected = 1000 / r.ops["READ"]["mean_ms"]
            tputs.append(r.throughput_ops)
            ratios.append(r.throughput_ops / expected)
            print(
                f"  rep {i + 1}: {r.throughput_ops:.2f} ops/s, 1/mean latency {expected:.2f} "
                f"ops/s, ratio {r.throughput_ops / expected:.3f}",
                flush=True,
            )
        print(f"  median ratio {statistics.median(ratios):.3f} (target within 10 % of 1)")
        print(
            f"3. consistency cost: workload A, {args.operations} ops, 8 threads, "
            f"{args.reps} reps (mean ± 95 % t-interval)",
            flush=True,
        )
        print(f"  {'ms':>3} {'level':<7} {'ops/s':>17} {'read p99 ms':>17} {'update p99 ms':>17}")
        for latency in (0, 20, 50):
            api.set_links(tb, links.uniform(tb.topology, latency, 0))
            for level in ("ONE", "QUORUM", "ALL"):
                tp, rp, up = [], [], []
                for i in range(args.reps):
                    spec = ycsb.Spec(
                        "a",
                        records=RECORDS,
                        operations=args.operations,
                        threads=8,
                        read_cl=level,
                        write_cl=level,
                    )
                    r = runner.run(spec, KEYSPACE, out / f"cost{latency}{level}{i}")
                    tp.append(r.throughput_ops)
                    rp.append(r.ops["READ"]["p99_ms"])
                    up.append(r.ops["UPDATE"]["p99_ms"])
                print(
                    f"  {latency:>3} {level:<7} {ci(tp):>17} {ci(rp):>17} {ci(up):>17}", flush=True
                )
    finally:
        api.clear(tb)
        tb.down()
    print(f"YCSB's files: {out}")


if __name__ == "__main__":
    main()
