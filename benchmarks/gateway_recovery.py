"""How long a sweep takes to recover from a dead gateway VM (kill -9 in the middle of a
cell): the time from the fault being detected to the cell's network set again on a new,
re-wired gateway and the driver seeing every node up. Prints the median of the runs.

    python benchmarks/gateway_recovery.py --runs 3
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from emulation.shapers import GatewayRecord
from experiments.store.db import Store
from testbed.state import RunState, home

SWEEP = [
    "--nodes", "3", "--rf", "1,2,3", "--latency", "20", "--loss", "0.5", "--profile",
    "uniform", "--writes", "150", "--warmup", "10", "--cluster-warmup", "60",
    "--verify-probes", "0", "--shaper", "gateway",
]  # fmt: skip


def one_run(out: Path) -> dict:
    cmd = [sys.executable, "-m", "experiments.sweep", *SWEEP, "--out", str(out)]
    sweep = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600
        while True:  # the first cell stored: the second one is being measured
            if sweep.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the sweep ended (or stalled) early: {sweep.returncode}")
            if (out / "results.sqlite").is_file():
                with Store(out, read_only=True) as store:
                    up, cells = store.testbeds_up(), store.cells()
                if up and cells:
                    break
            time.sleep(0.1)
        state = RunState.load(home() / "runs" / up[0])
        rec = state.get(GatewayRecord)
        assert rec is not None and rec.pid is not None
        gateway = rec.pid
        os.kill(gateway, signal.SIGKILL)  # a process of the sweep this script started
        killed = time.monotonic()
        sweep.wait(timeout=900)
        finished = time.monotonic() - killed
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    with Store(out, read_only=True) as store:
        (run,) = store.runs()
        faults = run.manifest.get("faults", [])
        errors = sum(store.errors(run.run_id, c["cell_id"]) for c in store.cells(run.run_id))
        return {
            "status": run.status,
            "cells": len(store.cells(run.run_id)),
            "errors": errors,
            "recovery_s": faults[0]["recovery_s"] if faults else None,
            "kill_to_end_s": round(finished, 1),
        }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    results = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="edgetb-recovery-") as tmp:
            r = one_run(Path(tmp) / "results")
        print(f"run {i + 1}: {r}", flush=True)
        results.append(r)
    recoveries = [r["recovery_s"] for r in results if r["recovery_s"] is not None]
    if recoveries:
        print(
            f"gateway recovery: median {statistics.median(recoveries):.1f} s over "
            f"{len(recoveries)} runs (min {min(recoveries):.1f}, max {max(recoveries):.1f}); "
            f"cells complete in {sum(r['status'] == 'complete' for r in results)}/{len(results)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
