"""Smoke job: a 3-node testbed, 20 LOCAL_QUORUM writes (RF 3) from the endpoint, down.

`make sweep` runs this until the full sweep (`python -m experiments.sweep`) exists.
"""

from __future__ import annotations

import json
import sys

from testbed import Testbed, Topology


def main() -> int:
    with Testbed(Topology(edge_nodes=3), progress=print) as tb:
        rtts = []
        for _ in range(20):
            out = tb.client(["write", "--rf", "3", "--consistency", "LOCAL_QUORUM"])
            rtts.append(json.loads(out.stdout)["write_ns"] / 1e6)
        rtts.sort()
        print(f"20 LOCAL_QUORUM writes from {tb.topology.endpoint.name} (RF 3, one process "
              f"each): median {rtts[len(rtts) // 2]:.2f} ms, max {rtts[-1]:.2f} ms")
    print("testbed down; nothing left behind")
    return 0


if __name__ == "__main__":
    sys.exit(main())
