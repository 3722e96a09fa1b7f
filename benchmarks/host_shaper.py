"""The host shaper's accuracy and cost (issue 23), on a 3-node netns testbed without
Cassandra (the network alone):

1. RTT e0-e1 at 0/10/50/100 ms per link: median of ``--probes`` echoes, ``--reps`` times;
   the error against 2x the delay, and against 2x the delay plus the unshaped RTT (what
   the prober and the path cost without any shaper).
2. Loss at 0.5/2.5/7.5 % each way (5 ms links): the round-trip loss of ``--loss-probes``
   echoes against the binomial 99 % interval of the configured one.
3. Jitter (normal, 1 and 2 ms each way at 20 ms): the RTT's standard deviation against
   sqrt(2) x jitter.
4. A runtime change: seconds `apply` takes, parameters only (20 <-> 40 ms) and when
   links become shaped or unshaped (0 <-> 20 ms: queue rules change too).
5. Rate: the goodput of one TCP transfer over a link limited to 2 and 10 mbit/s.
6. CPU: per packet under a flood of echoes (1 ms apart, 5 ms links), and idle with the
   links shaped, for the host shaper's delayer and (``--gateway``) the gateway VM.

    python benchmarks/host_shaper.py [--reps 3] [--probes 300] [--gateway]

Prints its figures; nothing is asserted (the machine is noisy).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time

from emulation import api, links, shapers
from emulation.verify import binomial_interval, echo_rtts
from testbed import Testbed, Topology

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def echoes(tb: Testbed, count: int, interval: float = 0.005) -> tuple[list[float], int]:
    return echo_rtts(tb, "e0", "e1", count, interval_s=interval)


def shaper_pid(tb: Testbed) -> int:
    assert tb.state is not None
    rec = tb.state.get(shapers.HostShaperRecord) or tb.state.get(shapers.GatewayRecord)
    assert rec is not None and rec.pid is not None
    return rec.pid


def accuracy(tb: Testbed, reps: int, probes: int) -> None:
    api.set_links(tb, links.uniform(tb.topology, 0, 0), "host")
    base = statistics.median(
        statistics.median(echoes(tb, probes)[0]) for _ in range(reps)
    )  # nothing queued at 0 ms: the machine's own RTT (prober included)
    print(f"1. RTT e0-e1, median of {probes} echoes, median of {reps} runs")
    print(f"   unshaped RTT (no queue at 0 ms): {base:.3f} ms")
    print(f"   {'delay':>6} {'2x delay':>9} {'measured':>9} {'error':>7} {'-unshaped':>10}")
    for delay in (0, 10, 50, 100):
        api.set_links(tb, links.uniform(tb.topology, delay, 0), "host")
        medians = [statistics.median(echoes(tb, probes)[0]) for _ in range(reps)]
        m = statistics.median(medians)
        print(
            f"   {delay:>4} ms {2 * delay:>6} ms {m:>9.3f} {m - 2 * delay:>+7.3f} "
            f"{m - 2 * delay - base:>+10.3f}   runs {', '.join(f'{x:.3f}' for x in medians)}"
        )


def loss(tb: Testbed, count: int) -> None:
    print(f"2. loss each way, 5 ms links, {count} echoes: round trip vs 99 % interval")
    for p in (0.5, 2.5, 7.5):
        matrix = links.uniform(tb.topology, 5, p)
        api.set_links(tb, matrix, "host")
        rtts, sent = echoes(tb, count, 0.002)
        expected = matrix.round_trip_loss_pct("e0", "e1")
        low, high = binomial_interval(expected, sent, 0.99)
        got = 100 * (1 - len(rtts) / sent)
        inside = "inside" if low <= got <= high else "OUTSIDE"
        print(f"   {p:>4} %: {got:.2f} % of {sent} (expected {expected:.2f}, {low:.2f}-{high:.2f}) "
              f"{inside}")  # fmt: skip


def jitter(tb: Testbed, count: int) -> None:
    print(f"3. jitter (normal) each way at 20 ms, {count} echoes: RTT sd vs sqrt(2) x jitter")
    for j in (1.0, 2.0):
        api.set_links(tb, links.uniform(tb.topology, 20, 0, jitter_ms=j), "host")
        rtts, _ = echoes(tb, count)
        sd, want = statistics.stdev(rtts), j * 2**0.5
        print(f"   {j:g} ms: sd {sd:.3f} ms vs {want:.3f} ({100 * (sd / want - 1):+.1f} %), "
              f"median {statistics.median(rtts):.3f}")  # fmt: skip


def change(tb: Testbed, reps: int) -> None:
    print(f"4. a runtime change, median of {2 * reps} (apply's own time)")
    for label, a, b in (("parameters only", 20, 40), ("links (un)shaped", 0, 20)):
        took = []
        for _ in range(reps):
            for d in (a, b):
                took.append(api.set_links(tb, links.uniform(tb.topology, d, 0), "host")["change_s"])
        print(f"   {label}: median {1000 * statistics.median(took):.1f} ms, "
              f"max {1000 * max(took):.1f} ms")  # fmt: skip


SINK = """
import socket, sys, time
s = socket.socket(); s.bind((sys.argv[1], 5999)); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); n = 0; t0 = None
while True:
    b = c.recv(65536)
    if not b: break
    t0 = t0 or time.monotonic(); n += len(b)
print(n, time.monotonic() - t0, flush=True)
"""
SOURCE = """
import socket, sys
c = socket.create_connection((sys.argv[1], 5999)); c.sendall(b"x" * int(sys.argv[2])); c.close()
"""


def rate(tb: Testbed, reps: int) -> None:
    print(f"5. rate: one TCP transfer e0 -> e1 (2 ms links), goodput vs rate, median of {reps}")
    for mbit, size in ((2, 500_000), (10, 2_500_000)):
        api.set_links(tb, links.LinkMatrix(tb.topology, {
            (s.name, d.name): links.Link(2, rate_mbit=mbit if s.name == "e0" else None)
            for s in tb.topology.hosts for d in tb.topology.hosts if s is not d
        }), "host")  # fmt: skip
        got = []
        for _ in range(reps):
            sink = subprocess.Popen(
                tb.exec_argv("e1", [tb.python, "-c", SINK, tb.address("e1")]),
                stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            assert sink.stdout is not None
            sink.stdout.readline()
            tb.exec("e0", [tb.python, "-c", SOURCE, tb.address("e1"), str(size)], timeout=120)
            n, took = sink.stdout.readline().split()
            sink.wait()
            got.append(int(n) * 8 / float(took) / 1e6)
        # goodput: TCP/IP and Ethernet headers take 66 of every 1514 bytes on the wire
        print(f"   {mbit:>3} mbit: goodput {statistics.median(got):.2f} mbit/s "
              f"(payload share of the wire {mbit * 1448 / 1514:.2f})")  # fmt: skip


def cost(tb: Testbed, shaper: str, echo_count: int, idle_s: float) -> None:
    if shaper == "gateway" or shapers.emulation(tb).shaper != shaper:
        api.clear(tb, remove=True)
    api.set_links(tb, links.uniform(tb.topology, 5, 0), shaper)
    pid = shaper_pid(tb)
    time.sleep(2)
    c0, t0 = cpu_s(pid), time.monotonic()
    time.sleep(idle_s)
    idle = (cpu_s(pid) - c0) / (time.monotonic() - t0)
    c0 = cpu_s(pid)
    rtts, sent = echoes(tb, echo_count, 0.001)
    used = cpu_s(pid) - c0
    packets = 2 * sent  # each echo: a request and a reply through the shaper
    print(f"   {shaper:>7}: {1e6 * used / packets:.0f} us CPU per packet ({packets} packets, "
          f"{used:.2f} s), idle {100 * idle:.2f} % of a core, "
          f"median RTT {statistics.median(rtts):.3f} ms at 10 ms")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--probes", type=int, default=300)
    p.add_argument("--loss-probes", type=int, default=5000)
    p.add_argument("--gateway", action="store_true", help="also the gateway VM's cost")
    args = p.parse_args()
    tb = Testbed(Topology(edge_nodes=3), progress=lambda _m: None)
    tb.create_hosts()
    try:
        accuracy(tb, args.reps, args.probes)
        loss(tb, args.loss_probes)
        jitter(tb, 1000)
        change(tb, 5)
        rate(tb, args.reps)
        print("6. CPU (the delayer's process; the gateway's QEMU), 10 ms RTT")
        cost(tb, "host", 3000, 20)
        if args.gateway:
            cost(tb, "gateway", 3000, 20)
    finally:
        tb.down()


if __name__ == "__main__":
    main()
