"""Emulation fidelity: median and p99 RTT error per delay, loss error per loss rate, and
the time a runtime change of the whole matrix takes, medians of N runs.

    python benchmarks/fidelity.py [--runs 3]

Goals (issue 3): median RTT error <= 1 ms; measured loss inside its 95 % binomial
interval; a new (L, p) for 6 hosts in <= 1 s.
"""

from __future__ import annotations

import argparse
import statistics

from emulation import api, links
from emulation.verify import measure_pair
from testbed import Testbed, Topology


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with Testbed(Topology(edge_nodes=5), cassandra=None) as tb:
        first = api.set_links(tb, links.uniform(tb.topology, 0, 0))
        print(
            f"shaper {first['shaper']}, set-up {first['setup_s']:.1f} s "
            f"(6 hosts, 30 directed links)"
        )
        for delay in (0, 10, 50, 100):
            matrix = links.uniform(tb.topology, delay, 0)
            api.set_links(tb, matrix)
            med, p99 = [], []
            for _ in range(args.runs):
                r = measure_pair(tb, matrix, "e0", "e1", rtt_probes=200)
                if r.median_rtt_ms is None or r.p99_rtt_ms is None:
                    raise SystemExit(f"e0 -> e1 at {delay} ms: no echo replies at all")
                med.append(r.median_rtt_ms - r.configured_rtt_ms)
                p99.append(r.p99_rtt_ms - r.configured_rtt_ms)
            print(
                f"delay {delay:>3} ms/direction (RTT {2 * delay:>3}): median error "
                f"{statistics.median(med):+.2f} ms, p99 error {statistics.median(p99):+.2f} ms"
                f"  (runs: {', '.join(f'{m:+.2f}' for m in med)})",
                flush=True,
            )
        for loss in (0.5, 2.5, 7.5):
            matrix = links.uniform(tb.topology, 5, loss)
            api.set_links(tb, matrix)
            inside, errors = 0, []
            for _ in range(args.runs):
                r = measure_pair(tb, matrix, "e0", "e1", loss_probes=2000)
                errors.append(r.measured_loss_pct - r.configured_loss_pct)
                inside += r.loss_ok
            print(
                f"loss {loss:>3} %/direction "
                f"(round trip {matrix.round_trip_loss_pct('e0', 'e1'):.2f} %):"
                f" median error {statistics.median(errors):+.2f} points, "
                f"{inside}/{args.runs} runs inside the 95 % interval",
                flush=True,
            )
        changes = []
        for i in range(5 * args.runs):
            result = api.set_links(tb, links.paper(tb.topology, 10 * (i % 10), 2.5 * (i % 4)))
            changes.append(result["change_s"])
        print(
            f"runtime change of the whole matrix (6 hosts, paper profile): median "
            f"{statistics.median(changes) * 1000:.0f} ms, max {max(changes) * 1000:.0f} ms "
            f"over {len(changes)} changes"
        )


if __name__ == "__main__":
    main()
