"""Trace replay schedule (issue 14, item 3): how late each step of a link trace is
applied (acknowledged by the shaper) against its planned offset (absolute: a change
started ahead by the median change time may land early), on a network-only
netns testbed of ``--nodes`` edge nodes, with the machine's default shaper (the netem
gateway VM where the kernel has no sch_netem, else tcconfig on the hosts).

Each step changes every ordered pair (delay alternating 10/40 ms, loss 0/1 %), the
worst case for the shaper; steps ``--every`` seconds apart; ``--reps`` replays.

    python benchmarks/trace_schedule.py [--nodes 5] [--steps 20] [--every 0.5] [--reps 3]

Prints its figures; nothing is asserted (the machine is noisy).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from emulation import api, links, shapers
from emulation.trace import Replay, load
from testbed import Testbed, Topology


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--every", type=float, default=0.5)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    path = Path(tempfile.mkdtemp(prefix="edgetb-trace-bench-")) / "alternating.csv"
    rows = ["t_s,src,dst,delay_ms,jitter_ms,loss_pct,rate_mbit"]
    for i in range(args.steps):
        delay, loss = (10, 0) if i % 2 == 0 else (40, 1)
        rows.append(f"{i * args.every:g},*,*,{delay},,{loss},")
    path.write_text("\n".join(rows) + "\n")
    try:
        trace = load(str(path))
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)  # read: not needed any more
    tb = Testbed(Topology(edge_nodes=args.nodes), cassandra=None)
    tb.up()
    try:
        base = links.uniform(tb.topology, 20, 0)
        shaper = api.set_links(tb, base)["shaper"]
        print(
            f"{args.nodes} nodes, shaper {shaper}, {args.steps} steps every {args.every:g} s, "
            f"each changing all {len(list(base.shaped()))} directed links"
        )
        medians, maxima, changes = [], [], []
        for rep in range(args.reps):
            s = shapers.for_testbed(tb, shaper)
            replay = Replay(trace, base, s.apply, s.close)
            replay.start()
            replay._thread.join()  # type: ignore[union-attr]  # every step applied
            got = replay.stop()
            late = [abs(s["late_ms"]) for s in got["schedule"]]
            change = [s["change_ms"] for s in got["schedule"]]
            medians.append(statistics.median(late))
            maxima.append(max(late))
            changes.append(statistics.median(change))
            print(
                f"  replay {rep + 1}: {got['applied']}/{got['steps']} steps; late median "
                f"{medians[-1]:.1f} ms, max {maxima[-1]:.1f} ms; a change takes "
                f"{changes[-1]:.1f} ms (median)"
            )
        print(
            f"median of {args.reps} replays: late median {statistics.median(medians):.1f} ms, "
            f"max {statistics.median(maxima):.1f} ms (target: within 50 ms); change "
            f"{statistics.median(changes):.1f} ms"
        )
    finally:
        tb.down()


if __name__ == "__main__":
    main()
