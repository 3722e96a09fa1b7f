"""What a Dask worker costs a measuring machine while it waits: CPU seconds per minute of
an idle `distributed.Worker` (TLS, as `experiments.remote.worker serve` runs it) connected to a
scheduler in this process, and its resident memory.

    python benchmarks/dask_idle.py [--runs 3] [--seconds 60]

The sweep's fidelity budget is a share of the cores (12 % on this machine's host
shaper): the worker's idle load is part of it on every machine of --workers. Prints each
run and the median; nothing is asserted (the machine is noisy).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

WORKER = """
import asyncio, json, sys
from distributed import Worker
from distributed.security import Security
d = json.loads(sys.stdin.readline())
sec = Security(tls_ca_file=d["ca"], tls_worker_cert=d["cert"], tls_worker_key=d["key"],
               require_encryption=True)
async def main():
    async with Worker(d["address"], nthreads=2, resources={"testbed": 1}, security=sec,
                      dashboard=False) as w:
        print("joined", flush=True)
        await w.finished()
asyncio.run(main())
"""


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, clock ticks of 10 ms


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def one_run(seconds: float) -> tuple[float, float]:
    from distributed import LocalCluster
    from distributed.security import Security

    security = Security.temporary()
    cluster = LocalCluster(
        n_workers=0,
        protocol="tls://",
        host="127.0.0.1",
        scheduler_port=0,
        dashboard_address=None,
        security=security,
    )
    setup = {
        "address": cluster.scheduler_address,
        "ca": security.tls_ca_file,
        "cert": security.tls_worker_cert,
        "key": security.tls_worker_key,
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(setup) + "\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "joined"
        time.sleep(5)  # past start-up
        before = cpu_s(proc.pid)
        time.sleep(seconds)
        return (cpu_s(proc.pid) - before) * 60 / seconds, rss_mb(proc.pid)
    finally:
        proc.kill()
        proc.wait()
        cluster.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seconds", type=float, default=60.0)
    args = p.parse_args()
    cpus, rss = [], []
    for i in range(args.runs):
        c, r = one_run(args.seconds)
        cpus.append(c)
        rss.append(r)
        print(f"run {i + 1}: {c:.2f} CPU s per minute ({100 * c / 60:.2f} % of a core), {r:.0f} MB")
    c = statistics.median(cpus)
    print(
        f"median over {args.runs}: {c:.2f} CPU s per minute idle ({100 * c / 60:.2f} % of a "
        f"core), {statistics.median(rss):.0f} MB resident"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
