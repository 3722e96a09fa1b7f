"""Bring-up benchmark: seconds from `up` to a ready cluster and to the first LOCAL_QUORUM
write from the endpoint, median of N launches, for 3 and 5 nodes.

    python benchmarks/bringup.py [--runs 3] [--nodes 3 5]

Targets (issue 2): 5 nodes <= 25 s, 3 nodes <= 15 s to the first successful write.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from testbed import Testbed, Topology

TARGET_S = {3: 15.0, 5: 25.0}


def one_launch(nodes: int) -> dict[str, float]:
    t0 = time.monotonic()
    tb = Testbed(Topology(edge_nodes=nodes))
    try:
        tb.up()
        ready = time.monotonic() - t0
        rf = min(3, nodes)
        out = tb.client(["write", "--rf", str(rf), "--consistency", "LOCAL_QUORUM"])
        first_write = time.monotonic() - t0
        write_ms = json.loads(out.stdout)["write_ns"] / 1e6
        cql = tb.timings.get("listening for CQL clients", float("nan"))
    finally:
        t1 = time.monotonic()
        tb.down()
        down = time.monotonic() - t1
    return {
        "ready_s": ready,
        "first_write_s": first_write,
        "cql_stage_s": cql,
        "write_ms": write_ms,
        "down_s": down,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", type=int, nargs="+", default=[3, 5])
    args = parser.parse_args()
    for nodes in args.nodes:
        results = [one_launch(nodes) for _ in range(args.runs)]
        for i, r in enumerate(results, 1):
            print(
                f"  {nodes} nodes, launch {i}: ready {r['ready_s']:.1f} s, first write "
                f"{r['first_write_s']:.1f} s (write {r['write_ms']:.1f} ms), "
                f"down {r['down_s']:.1f} s",
                flush=True,
            )
        med = {k: statistics.median(r[k] for r in results) for k in results[0]}
        target = TARGET_S.get(nodes)
        verdict = (
            ""
            if target is None
            else (
                f" (target <= {target:.0f} s: "
                f"{'met' if med['first_write_s'] <= target else 'MISSED'})"
            )
        )
        print(
            f"{nodes} nodes: median of {args.runs}: all UN + driver {med['ready_s']:.1f} s, "
            f"first LOCAL_QUORUM write {med['first_write_s']:.1f} s{verdict}; "
            f"down {med['down_s']:.1f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
