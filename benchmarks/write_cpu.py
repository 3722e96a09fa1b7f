"""Where a write's CPU goes, per thread group and component (issue 39, item 1).

For each Cassandra build (``stock``, ``quiet``; alternated, ``--reps`` times) a 3-node
netns testbed (RF ``--rf``) is brought up; for each ``--latencies`` value every link is
shaped (uniform, no loss), ``--warmup`` writes run, then ``--writes`` timed LOCAL_QUORUM
round-robin writes of the paper's workload. Around the timed writes the benchmark reads
``/proc`` — not the project's own figures:

- per thread, ``/proc/PID/task/TID/schedstat`` (CPU ns and timeslices; a thread that
  blocks between runs starts one slice per wake-up) of every Cassandra JVM, grouped:
  SEP workers (the shared executor pool: Native-Transport-Requests, MutationStage,
  RequestResponseStage, ... and idle SharedPool-Worker threads), other JVM threads;
- the writer (the workload process and its children), the host shaper's delayer;
- ``/proc/stat``: the whole machine's busy CPU (by the tick: short wake-ups are missed,
  so it can read less than the threads' schedstat sum), its irq + softirq part, and the
  steal time (a VM's CPU its hypervisor gave to others, apart).

It prints, per build and latency, CPU-ms per write of each part, SEP wake-ups per write,
the median RTT, then the idle share of a core per JVM (``--idle`` s with nothing to do)
with its busiest threads (CPU µs and wake-ups per second), what that housekeeping costs
a write over its median RTT (idle share × JVMs × RTT: why CPU per write grows with the
latency), and the host shaper's release lateness over the timed writes (its own counters, reset
before them). Medians over the repetitions. Nothing is asserted: run it alone.

    python benchmarks/write_cpu.py [--builds stock,quiet] [--latencies 0,5,50] [--reps 2]

A build may name a housekeeping too: ``--builds quiet,quiet+writes`` measures quiet nodes
with the standard housekeeping and with the writes one (``CassandraSettings.housekeeping``).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from emulation import api as emulation_api
from emulation import shapers
from emulation.links import uniform
from testbed import Testbed, Topology
from testbed.cassandra.config import CassandraSettings
from workloads import WriteWorker

TICK = os.sysconf("SC_CLK_TCK")
# Thread names (15 characters of comm) of the shared executor pool's workers: named after
# the stage of the task they run, "SharedPool-Worker-N" before their first.
SEP_PREFIXES = (
    "SharedPool-Work",
    "Native-Transpor",
    "MutationStage",
    "RequestResponse",
    "ReadStage",
    "CounterMutation",
    "ViewMutationSta",
)


def thread_stats(pid: int) -> dict[int, tuple[str, int, int, int]]:
    """tid -> (comm, CPU ns, ns waited on a run queue, timeslices) of every thread of
    ``pid`` that still exists (``/proc/PID/task/TID/schedstat``)."""
    out: dict[int, tuple[str, int, int, int]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run_ns, wait_ns, slices = (int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
        out[int(tid)] = (comm, run_ns, wait_ns, slices)
    return out


def threads(pid: int) -> dict[int, tuple[str, int, int]]:
    """tid -> (comm, CPU ns, timeslices) of every thread of ``pid`` that still exists."""
    return {tid: (c, run, sl) for tid, (c, run, _w, sl) in thread_stats(pid).items()}


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (from /proc/*/stat's parent field)."""
    children = defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children[ppid].append(int(entry))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def machine() -> tuple[int, int, int]:
    """(busy ticks, irq + softirq ticks, steal ticks) of the whole machine, from
    /proc/stat. Steal (a virtual machine's CPU taken by its hypervisor for others) is
    not the machine's own work: shown apart, it explains late releases."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
    return user + nice + system + irq + softirq, irq + softirq, steal


def is_sep(comm: str) -> bool:
    return comm.startswith(SEP_PREFIXES)


def group(comm: str) -> str:
    """A thread's name without its number: the threads of one pool together."""
    return comm.rstrip("0123456789:-_ ")


class Snapshot:
    def __init__(self, jvms: list[int], writer: int, shaper: int | None):
        self.t = time.monotonic()
        self.jvm = {pid: threads(pid) for pid in jvms}
        self.writer = {p: threads(p) for p in descendants(writer)}
        self.shaper = threads(shaper) if shaper else {}
        self.busy, self.kernel, self.steal = machine()


def delta(before: dict[int, tuple[str, int, int]], after: dict[int, tuple[str, int, int]]):
    """(CPU ns, timeslices) per thread over the interval; threads born inside count whole."""
    for tid, (comm, ns, slices) in after.items():
        _, ns0, sl0 = before.get(tid, (comm, 0, 0))
        yield comm, ns - ns0, slices - sl0


def attribute(a: Snapshot, b: Snapshot, writes: int) -> dict[str, float]:
    sep_ns = sep_slices = other_ns = 0
    named: dict[str, int] = defaultdict(int)  # other JVM threads by name without numbers
    for pid, after in b.jvm.items():
        for comm, ns, slices in delta(a.jvm.get(pid, {}), after):
            if is_sep(comm):
                sep_ns += ns
                sep_slices += slices
            else:
                other_ns += ns
                named[group(comm)] += ns
    writer_ns = sum(ns for p, t in b.writer.items() for _, ns, _ in delta(a.writer.get(p, {}), t))
    shaper_ns = sum(ns for _, ns, _ in delta(a.shaper, b.shaper))
    busy_ms = (b.busy - a.busy) * 1000 / TICK
    return {
        "machine": busy_ms / writes,
        "sep": sep_ns / 1e6 / writes,
        "sep_wakeups": sep_slices / writes,
        "jvm_other": other_ns / 1e6 / writes,
        "writer": writer_ns / 1e6 / writes,
        "shaper": shaper_ns / 1e6 / writes,
        "kernel_irq": (b.kernel - a.kernel) * 1000 / TICK / writes,
        "steal": (b.steal - a.steal) * 1000 / TICK / writes,
        "busy_cores": busy_ms / 1000 / (b.t - a.t),
        **{f"jvm:{name}": ns / 1e6 / writes for name, ns in named.items()},
    }


def idle_share(pids: list[int], seconds: float) -> tuple[float, dict[str, tuple[float, float]]]:
    """The share of one core each JVM takes while nothing happens (median over the JVMs),
    and per thread name (numbers stripped) what it takes on average per JVM: CPU µs and
    wake-ups (timeslices) per second: the housekeeping a write pays for while it waits."""

    def snap() -> dict[int, dict[int, tuple[str, int, int]]]:
        return {p: threads(p) for p in pids}

    before, t0 = snap(), time.monotonic()
    time.sleep(seconds)
    after, took = snap(), time.monotonic() - t0
    shares: list[float] = []
    named: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for pid in pids:
        total = 0
        for comm, ns, slices in delta(before[pid], after[pid]):
            total += ns
            entry = named[group(comm)]
            entry[0] += ns / 1e3 / took / len(pids)
            entry[1] += slices / took / len(pids)
        shares.append(total / 1e9 / took)
    return statistics.median(shares), {k: (v[0], v[1]) for k, v in named.items()}


def fmt_idle(share: float, named: dict[str, tuple[float, float]], top: int = 8) -> str:
    """'0.84 % of a core per JVM: ScheduledFastTa 2900 µs/s (50 wake-ups/s), ...'"""
    busiest = sorted(named.items(), key=lambda kv: -kv[1][0])[:top]
    return f"{100 * share:.2f} % of a core per JVM: " + ", ".join(
        f"{name} {us:.0f} us/s ({wakes:.1f}/s)" for name, (us, wakes) in busiest
    )


def measure(build: str, args: argparse.Namespace, log_dir: Path) -> dict:
    """One testbed of ``build``: the figures per latency, and its idle share."""
    name, _, housekeeping = build.partition("+")  # quiet+writes: that housekeeping
    settings = CassandraSettings(build=name, housekeeping=housekeeping or "standard")  # type: ignore[arg-type]
    results: dict = {}
    with Testbed(Topology(edge_nodes=3), cassandra=settings, progress=lambda _m: None) as tb:
        jvms = [n.pid for n in tb.nodes.values() if n.pid is not None]
        worker = WriteWorker(tb, policy="round-robin", timeout_s=12.0, log_path=log_dir / "w.log")
        try:
            worker.schema("bench", args.rf)
            for i, latency in enumerate(args.latencies):
                emulation_api.set_links(tb, uniform(tb.topology, latency, 0.0), args.shaper)
                shaper = shapers.for_testbed(tb)
                host = isinstance(shaper, shapers.HostShaper)  # its lateness counters
                snap: dict[str, Snapshot] = {}

                def start(shaper=shaper, host=host, snap=snap) -> None:
                    if host:
                        shaper.control.send(["resetlate"])
                    snap["a"] = Snapshot(jvms, worker.proc.pid, shaper_pid(tb) if host else None)

                rows = worker.run(
                    keyspace="bench", cl="LOCAL_QUORUM", writes=args.writes,
                    warmup=args.warmup, key_seed=f"k{i}", warmup_seed=f"w{i}",
                    on_measuring=start,
                )  # fmt: skip
                end = Snapshot(jvms, worker.proc.pid, shaper_pid(tb) if host else None)
                figures = attribute(snap["a"], end, args.writes)
                rtts = sorted(r["rtt_ns"] for r in rows if r["error"] is None)
                figures["median_ms"] = rtts[len(rtts) // 2] / 1e6
                figures["p99_ms"] = rtts[int(0.99 * (len(rtts) - 1))] / 1e6
                if isinstance(shaper, shapers.HostShaper):
                    counters = shaper.stats()
                    late = counters["late_us"]
                    figures["late_p99_us"] = late["p99"]
                    figures["late_p999_us"] = late["p999"]
                    figures["late_max_us"] = late["max"]
                    figures["spin"] = counters["spun_us"] / 1000 / args.writes
                results[latency] = figures
                print(f"  {build} {latency:g} ms: " + fmt(figures), flush=True)
            emulation_api.clear(tb)
        finally:
            worker.close()
        results["idle"], results["idle_threads"] = idle_share(jvms, args.idle)
        print(f"  {build} idle: " + fmt_idle(results["idle"], results["idle_threads"]), flush=True)
        for latency in args.latencies:
            # what the idle housekeeping alone costs a write that lasts its median RTT
            f = results[latency]
            f["housekeeping"] = results["idle"] * len(jvms) * f["median_ms"]
    return results


def shaper_pid(tb: Testbed) -> int | None:
    assert tb.state is not None
    rec = tb.state.get(shapers.HostShaperRecord)
    return rec.pid if rec else None


def fmt(f: dict) -> str:
    parts = [
        f"machine {f['machine']:.2f}",
        f"SEP {f['sep']:.2f} ({f['sep_wakeups']:.0f} wake-ups)",
        f"other JVM {f['jvm_other']:.2f}",
        f"writer {f['writer']:.2f}",
        f"shaper {f['shaper']:.2f}",
        f"irq {f['kernel_irq']:.2f} CPU-ms/write (steal {f.get('steal', 0):.2f})",
        f"median {f['median_ms']:.2f} ms p99 {f['p99_ms']:.2f}",
    ]
    if "housekeeping" in f:
        parts.append(f"of which idle housekeeping over the median write {f['housekeeping']:.2f}")
    top = sorted((k for k in f if k.startswith("jvm:")), key=lambda k: -f[k])[:5]
    parts.append("other JVM: " + ", ".join(f"{k[4:]} {f[k]:.2f}" for k in top))
    if "late_p999_us" in f:
        parts.append(
            f"late p99 {f['late_p99_us']} p99.9 {f['late_p999_us']} max {f['late_max_us']} us, "
            f"spinning {f['spin']:.2f} CPU-ms/write"
        )
    return ", ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--builds", default="stock,quiet")
    parser.add_argument("--latencies", default="0,5,50")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--writes", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--rf", type=int, default=3)
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of idle measure")
    parser.add_argument("--shaper", default="auto")
    args = parser.parse_args()
    # Ctrl-C, or SIGTERM (and SIGINT where a shell started it in the background, which
    # ignores it), ends the benchmark through its testbeds' teardown
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.latencies = [float(x) for x in args.latencies.split(",")]
    builds = args.builds.split(",")
    runs: dict[str, list[dict]] = {b: [] for b in builds}
    with tempfile.TemporaryDirectory(prefix="edgetb-writecpu-") as tmp:
        for rep in range(args.reps):
            for build in builds if rep % 2 == 0 else reversed(builds):
                print(f"rep {rep + 1}/{args.reps}: {build}", flush=True)
                runs[build].append(measure(build, args, Path(tmp)))
    print(
        f"\nmedians of {args.reps} (3 nodes, RF {args.rf}, {args.writes} writes, CPU-ms per write)"
    )
    for build in builds:
        for latency in args.latencies:
            keys = {k for r in runs[build] for k in r[latency]}
            med = {k: statistics.median(r[latency].get(k, 0.0) for r in runs[build]) for k in keys}
            print(f"{build:>6} {latency:>4g} ms: " + fmt(med))
        idle = statistics.median(r["idle"] for r in runs[build])
        names = {n for r in runs[build] for n in r["idle_threads"]}
        named = {
            n: tuple(
                statistics.median(r["idle_threads"].get(n, (0.0, 0.0))[i] for r in runs[build])
                for i in (0, 1)
            )
            for n in names
        }
        print(f"{build:>6} idle: " + fmt_idle(idle, named))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
