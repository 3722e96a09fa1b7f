"""VM boot-to-SSH time of the libvirt backend (KVM or TCG, as the backend chooses).

    python benchmarks/vm_boot.py [--repeats 3] [--nodes 1]

Each repeat runs `python -m testbed up --backend libvirt --no-cassandra` (edge VMs of 1
vCPU/768 MB, the endpoint 1 vCPU/1 GB), reads the boot-to-SSH seconds of every VM and the
provisioning time from the run's state, then `down`. Prints the medians.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time

from testbed.backends.libvirt import LibvirtRecord
from testbed.state import RunState, home


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "testbed", *args], capture_output=True, text=True, timeout=1800
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--nodes", type=int, default=1)
    args = p.parse_args()
    boots: list[float] = []
    lasts: list[float] = []
    provs: list[float] = []
    ups: list[float] = []
    downs: list[float] = []
    accel = "?"
    for i in range(args.repeats):
        t0 = time.monotonic()
        up = cli(
            "up",
            "--backend",
            "libvirt",
            "--nodes",
            str(args.nodes),
            "--no-cassandra",
            "--vm-vcpus",
            "1",
            "--vm-memory",
            "768",
        )
        if up.returncode != 0:
            print(up.stdout, up.stderr, file=sys.stderr)
            return 1
        ups.append(time.monotonic() - t0)
        found = re.search(r"run (\w+) is up", up.stdout)
        if found is None:
            print("`up` did not report its run:", up.stdout, file=sys.stderr)
            return 1
        run_id = found.group(1)
        rec = RunState.load(home() / "runs" / run_id).get(LibvirtRecord)
        assert rec is not None
        accel = rec.accel
        boots += rec.boot_to_ssh_s.values()
        lasts.append(max(rec.boot_to_ssh_s.values()))
        provs.append(rec.provision_s or 0.0)
        t1 = time.monotonic()
        cli("down", "--run", run_id)
        downs.append(time.monotonic() - t1)
        print(
            f"repeat {i + 1}: boot to SSH {rec.boot_to_ssh_s}, provisioning "
            f"{provs[-1]:.1f} s, up {ups[-1]:.1f} s, down {downs[-1]:.1f} s"
        )
    med = statistics.median
    print(
        f"{accel.upper()}, {args.nodes + 1} VMs booting together, medians of "
        f"{args.repeats}: boot to SSH per VM {med(boots):.1f} s, last VM {med(lasts):.1f} s, "
        f"provisioning {med(provs):.1f} s, whole `up` {med(ups):.1f} s, `down` "
        f"{med(downs):.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
