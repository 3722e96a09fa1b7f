"""What a testbed beside costs a write, and where the write waits for it (issue 39).

``parallel_fidelity.py`` finds that two 5-node testbeds side by side slow a cell's median
by ~0.35 ms on 2 cores, with the machine ~15 % busy. This benchmark looks for where that
time goes. Two testbeds (A, measured; B, its neighbour) stay up for the whole run; each
cell is measured on A in three conditions, in the order ABCCBA (the next cell CBAABC),
so that a drift linear over a cell's minutes falls on every condition alike:

- ``alone``: B's JVMs and writer stopped (SIGSTOP by PID; SIGCONT when its turn ends);
- ``idle``: B up, nothing to do;
- ``busy``: B writing the same cell without pause, as a parallel sweep's neighbour does.

Around A's timed writes it reads, per thread, ``/proc/PID/task/TID/schedstat`` (CPU ns,
**ns waited on a run queue**, timeslices) of A's JVMs, A's writer and A's delayer (the
kernel's figures, not the project's), and the delayer's own release lateness. It prints
per cell and condition the median RTT and the run-queue wait per write by thread group:
if the neighbour's cost is queueing for a core, the wait grows by about what the median
does; if not, the time goes elsewhere (late timers, the hypervisor).

``--slice-us N`` asks the kernel (EEVDF, Linux ≥ 6.12) for an N µs slice on every thread
of both testbeds' JVMs and writers (``sched_setattr``'s ``sched_runtime`` for
SCHED_OTHER; new threads inherit it): a short slice gives a woken thread an earlier
deadline, so it takes a core from a longer-running one sooner. Nothing outside the two
testbeds is touched. Run it alone.

    python benchmarks/beside.py [--nodes 5] [--rf 3] [--latency 0,20,50] [--slice-us 0]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import signal
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from ab_interleaved import Side
from write_cpu import group, is_sep, thread_stats

from emulation import links, shapers
from experiments.settings.config import SweepConfig
from testbed.cassandra.config import HOUSEKEEPING, JVM_PROFILES

CONDITIONS = ("alone", "idle", "busy")
SYS_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}  # asm/unistd.h


def order(index: int) -> list[str]:
    seq = list(CONDITIONS) if index % 2 == 0 else list(CONDITIONS[::-1])
    return seq + seq[::-1]


def set_slice(pids: list[int], slice_us: int) -> tuple[int, int, set[str]]:
    """An EEVDF slice of ``slice_us`` for every thread of ``pids`` (SCHED_OTHER, nice
    kept): (threads that took it, threads tried, why the others refused)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    number = SYS_SCHED_SETATTR[platform.machine()]
    done = tried = 0
    refused: set[str] = set()
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                nice = os.getpriority(os.PRIO_PROCESS, int(tid))
                policy = os.sched_getscheduler(int(tid))
            except OSError:
                continue
            if policy not in (os.SCHED_OTHER, os.SCHED_BATCH):
                continue
            # struct sched_attr: size, policy, flags, nice, priority, runtime, deadline, period
            attr = struct.pack("IIQiIQQQ", 48, policy, 0, nice, 0, slice_us * 1000, 0, 0)
            buf = ctypes.create_string_buffer(attr, 48)
            tried += 1
            if libc.syscall(ctypes.c_long(number), ctypes.c_long(int(tid)), buf, 0) == 0:
                done += 1
            else:
                refused.add(os.strerror(ctypes.get_errno()))
    return done, tried, refused


class Neighbour(threading.Thread):
    """B writing chunk after chunk until told to stop."""

    def __init__(self, side: Side, seed: str):
        super().__init__(daemon=True)
        self.side, self.seed, self.stop = side, seed, threading.Event()
        self.writes = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        n = 0
        try:
            while not self.stop.is_set():
                rows = self.side.write(self.side.args.rf[0], f"{self.seed}:{n}", 25, 0)
                self.writes += len(rows)
                n += 1
        except BaseException as e:  # reported by the main thread
            self.error = e


def delayer(side: Side) -> int | None:
    """The host shaper's delayer process of ``side``'s testbed (None with another shaper)."""
    assert side.tb.state is not None
    rec = side.tb.state.get(shapers.HostShaperRecord)
    return rec.pid if rec else None


def snapshot(a: Side) -> dict[str, Any]:
    pids = {"jvm": a.jvms(), "writer": a.writer()}
    d = delayer(a)
    if d:
        pids["delayer"] = [d]
    return {
        "t": time.monotonic(),
        "threads": {kind: {p: thread_stats(p) for p in ps} for kind, ps in pids.items()},
    }


def waits(before: dict[str, Any], after: dict[str, Any], writes: int) -> dict[str, float]:
    """ms of run-queue wait (and CPU) per write by thread group."""
    out: dict[str, float] = defaultdict(float)
    for kind, procs in after["threads"].items():
        for pid, tids in procs.items():
            old = before["threads"].get(kind, {}).get(pid, {})
            for tid, (comm, run, wait, _sl) in tids.items():
                _, run0, wait0, _ = old.get(tid, (comm, 0, 0, 0))
                name = ("SEP" if is_sep(comm) else group(comm)) if kind == "jvm" else kind
                out[f"wait:{name}"] += (wait - wait0) / 1e6 / writes
                out[f"cpu:{name}"] += (run - run0) / 1e6 / writes
                out["wait:total"] += (wait - wait0) / 1e6 / writes
                out["cpu:total"] += (run - run0) / 1e6 / writes
    return dict(out)


def measure(a: Side, b: Side, cell_id: str, condition: str, rep: int) -> dict[str, Any]:
    seed = f"{cell_id}:{condition}:{rep}"
    neighbour = None
    if condition == "alone":
        b.freeze()
    else:
        b.thaw()
        if condition == "busy":
            neighbour = Neighbour(b, seed + ":b")
            neighbour.start()
            time.sleep(1.0)
    shaper = shapers.for_testbed(a.tb)
    host = shaper if isinstance(shaper, shapers.HostShaper) else None
    snap: dict[str, Any] = {}

    def start() -> None:
        if host is not None:  # its lateness counters, over the timed writes only
            host.control.send(["resetlate"])
        snap["a"] = snapshot(a)

    try:
        rows = a.write(a.args.rf[0], seed, a.args.writes, a.args.warmup, on_measuring=start)
        end = snapshot(a)
    finally:
        if neighbour is not None:
            neighbour.stop.set()
            neighbour.join()
    if neighbour is not None and neighbour.error is not None:
        raise RuntimeError("the neighbour's writes failed") from neighbour.error
    rtts = sorted(r["rtt_ns"] / 1e6 for r in rows if r["error"] is None)
    if not rtts:
        raise RuntimeError(f"{seed}: every timed write of A failed")
    m = {
        "median": statistics.median(rtts),
        "p99": rtts[int(0.99 * (len(rtts) - 1))],
        "errors": sum(r["error"] is not None for r in rows),
        **waits(snap["a"], end, len(rows)),
    }
    if host is not None:
        late = host.stats()["late_us"]
        m["late_p99"], m["late_p999"] = late["p99"], late["p999"]
    if neighbour is not None:
        m["b_writes"] = neighbour.writes
    return m


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=5)
    p.add_argument("--rf", type=int, default=3)
    p.add_argument("--latency", default="0,20,50", help="one-way ms, comma separated")
    p.add_argument("--loss", type=float, default=0.5)
    p.add_argument("--profile", default="paper", choices=links.PROFILES)
    p.add_argument("--writes", type=int, default=300)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--cluster-warmup", type=int, default=500)
    p.add_argument("--reps", type=int, default=1, help="ABCCBA rounds per latency")
    p.add_argument("--build", default="quiet", choices=("stock", "quiet"))
    p.add_argument("--jvm-profile", default="fast", choices=JVM_PROFILES)
    p.add_argument("--housekeeping", default="standard", choices=HOUSEKEEPING)
    p.add_argument("--shaper", default="auto", choices=shapers.SHAPERS)
    p.add_argument("--settle", type=float, default=1.0)
    p.add_argument("--slice-us", type=int, default=0, help="EEVDF slice for both testbeds")
    args = p.parse_args()
    if not 1 <= args.rf <= args.nodes:
        p.error(f"--rf must be within 1..{args.nodes}")
    args.rf, args.freeze = [args.rf], True  # as ab_interleaved.Side reads them
    if args.slice_us and not 100 <= args.slice_us <= 100000:
        p.error("--slice-us must be within 100..100000 (the kernel's bounds)")
    if args.slice_us and platform.machine() not in SYS_SCHED_SETATTR:
        p.error(f"--slice-us: sched_setattr's number on {platform.machine()} is not known here")
    latencies = [float(x) for x in args.latency.split(",") if x]
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cfg = SweepConfig.from_dict(
        {"nodes": [args.nodes], "writes": args.writes, "jvm_profile": args.jvm_profile}
    )
    cells = [(f"l{lat:g}-{r}", lat) for lat in latencies for r in range(args.reps)]
    results: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    with tempfile.TemporaryDirectory(prefix="edgetb-beside-") as tmp, ExitStack() as stack:
        kw = {"build": args.build, "housekeeping": args.housekeeping}
        a = stack.enter_context(Side(args.build, cfg, args, Path(tmp), name="A", cassandra=kw))
        b = stack.enter_context(Side(args.build, cfg, args, Path(tmp), name="B", cassandra=kw))
        if args.slice_us:
            n, tried, why = set_slice(a.jvms() + a.writer() + b.jvms() + b.writer(), args.slice_us)
            refused = f"; refused: {', '.join(sorted(why))}" if why else ""
            print(
                f"slice {args.slice_us} us on {n} of {tried} threads (JVMs, writers){refused}",
                file=sys.stderr,
            )
        for i, (cell_id, latency) in enumerate(cells):
            for side in (a, b):
                side.thaw()
                side.shape(links.build(args.profile, side.tb.topology, delay_ms=latency,
                                       loss_pct=args.loss))  # fmt: skip
            for k, condition in enumerate(order(i)):
                m = measure(a, b, cell_id, condition, k)
                results[f"{latency:g}"][condition].append(m)
                print(
                    f"{cell_id} {condition}: median {m['median']:.3f} ms p99 "
                    f"{m['p99']:.2f}, wait {m['wait:total']:.3f} ms/write, cpu "
                    f"{m['cpu:total']:.3f}"
                    + (f", B wrote {m['b_writes']}" if "b_writes" in m else ""),
                    file=sys.stderr,
                    flush=True,
                )
        b.thaw()
    print(
        f"\n## Beside a neighbour: {args.nodes} nodes, RF {args.rf[0]}, {args.loss:g} % loss, "
        f"{args.build} nodes, {args.housekeeping} housekeeping, JVM profile "
        f"{args.jvm_profile}, {args.warmup} + {args.writes} writes, slice "
        f"{args.slice_us or 'default'} us; medians over the measurements\n"
    )
    print("| links | condition | median RTT | Δ vs alone | p99 | run-queue wait ms/write "
          "| Δ wait | CPU ms/write | late p99.9 µs | top waits (Δ vs alone) |")  # fmt: skip
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for lat, conds in results.items():
        med = {c: {k: statistics.median(m.get(k, 0.0) for m in ms) for k in
                   {k for m in ms for k in m}} for c, ms in conds.items()}  # fmt: skip
        base = med["alone"]
        for c in CONDITIONS:
            f = med[c]
            deltas = sorted(
                ((k[5:], f.get(k, 0.0) - base.get(k, 0.0)) for k in f
                 if k.startswith("wait:") and k != "wait:total"),
                key=lambda kv: -abs(kv[1]),
            )[:4]  # fmt: skip
            print(
                f"| {lat} ms | {c} | {f['median']:.3f} | {f['median'] - base['median']:+.3f} "
                f"| {f['p99']:.2f} | {f['wait:total']:.3f} "
                f"| {f['wait:total'] - base['wait:total']:+.3f} | {f['cpu:total']:.2f} "
                f"| {f.get('late_p999', 0):.0f} | "
                + ", ".join(f"{n} {d:+.3f}" for n, d in deltas)
                + " |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
