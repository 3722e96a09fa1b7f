"""A running sweep owns its testbed and its results directory: `clean` naming its run, a
second sweep on the same directory, and `emulation set` / `down` without --run all leave
it measuring, and its cells come out whole and shaped as configured. The same sweep then
loses its shaper (the host shaper's delayer, kill -9) in the middle of a cell, and a
Cassandra node (kill -9 of its JVM) in the middle of the next: each time the cell is
voided, the shaper or the node started again, the cell measured again, and the fault
stored with the run. The node dies at a random moment of its cell (before, during or
after its writes, in the check after them; seeded, printed: ``EDGETB_TEST_SEED`` repeats
one); ``tests/unit/test_node_death.py`` drives each moment on purpose."""

import os
import random
import signal
import statistics
import subprocess
import sys
import time

from emulation.shapers import EmulationRecord, HostShaperRecord
from experiments.store.db import Store
from testbed.state import RunState, home

from .conftest import assert_no_residue, run_cli, sweep_failure

LATENCY = 20.0
ARGS = [
    "--nodes", "3", "--rf", "1,2,3", "--latency", str(LATENCY), "--loss", "0.5",
    "--profile", "uniform", "--writes", "150", "--warmup", "10", "--cluster-warmup", "60",
    "--verify-probes", "0", "--shaper", "host",
]  # fmt: skip


def _running(sweep) -> None:
    assert sweep.poll() is None, sweep_failure(sweep.stdout.read())


def _wait_for_shaped_testbed(out, sweep, timeout_s=600) -> str:
    """The sweep's testbed run id, once the cell's network setting is applied."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _running(sweep)
        if (out / "results.sqlite").is_file():
            with Store(out, create=False) as store:
                up = store.testbeds_up()
            if up:
                try:
                    state = RunState.load(home() / "runs" / up[0])
                except Exception:  # not written yet
                    state = None
                rec = state and state.get(EmulationRecord)
                matrix = rec and rec.matrix
                if matrix and matrix["profile"] == "uniform":
                    return up[0]
        time.sleep(0.5)
    raise AssertionError("the sweep never shaped its testbed")


def _cells_done(out) -> int:
    with Store(out, create=False) as store:
        return len(store.cells())


def _wait_for_cells(out, sweep, n: int, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while _cells_done(out) < n:
        _running(sweep)
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_a_running_sweep_survives_clean_a_second_sweep_emulation_set_a_dead_shaper_and_node(
    tmp_path,
):
    out = tmp_path / "results"
    cmd = [sys.executable, "-m", "experiments.sweep", *ARGS, "--out", str(out)]
    sweep = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert sweep.stdout is not None  # PIPE
    try:
        testbed_run = _wait_for_shaped_testbed(out, sweep)

        # Named, the strongest case: a named run loses the protection a healthy detached
        # testbed has, so only its live owner keeps it. (Not a bare `clean`: on a shared
        # machine that would also remove other test runs' crashed runs they still check.)
        cleaned = run_cli("clean", run=testbed_run)
        assert cleaned.returncode == 0, cleaned.stderr
        assert f"kept run {testbed_run}: in use by pid {sweep.pid}" in cleaned.stdout

        second = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2, second.stderr
        assert f"is in use by a running sweep (pid {sweep.pid}" in second.stderr
        assert "Traceback" not in second.stderr

        for module, args in (("emulation", ["set", "--latency", "80"]), ("testbed", ["down"])):
            proc = run_cli(*args, module=module)
            assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
            assert f"{testbed_run} (in use by pid {sweep.pid}" in proc.stderr, proc.stderr

        # the delayer dies while the second cell is measured
        _wait_for_cells(out, sweep, 1)
        shaper = RunState.load(home() / "runs" / testbed_run).get(HostShaperRecord)
        assert shaper is not None and shaper.pid is not None
        os.kill(shaper.pid, signal.SIGKILL)  # a process of the sweep this test started
        # a node dies at a random moment of the third: from its start to near the end of
        # its writes and check (9/10 of the time the first cell's took: the third, at RF 3,
        # takes at least as long, so the death never falls after the sweep's end)
        _wait_for_cells(out, sweep, 2, timeout_s=600)
        with Store(out, create=False) as store:
            first = min(store.cells(), key=lambda c: c["finished"])
        seed = int(os.environ.get("EDGETB_TEST_SEED") or random.randrange(1 << 30))
        after_s = random.Random(seed).uniform(0.0, 0.9 * (first["finished"] - first["started"]))
        print(f"e1 killed {after_s:.2f} s into the third cell (EDGETB_TEST_SEED={seed})")
        time.sleep(after_s)
        node = RunState.load(home() / "runs" / testbed_run).processes["e1"]
        os.kill(node["pid"], signal.SIGKILL)  # the sweep's own JVM

        output, _ = sweep.communicate(timeout=900)
        assert sweep.returncode == 0, sweep_failure(output)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    with Store(out, create=False) as store:
        (run,) = store.runs()
        assert run.status == "complete"
        cells = store.cells(run.run_id)
        assert len(cells) == 3
        lost_shaper, lost_node = run.manifest["faults"]
        assert f"host shaper (pid {shaper.pid}) is not running" in lost_shaper["problem"]
        assert lost_shaper["recovery_s"] > 0
        assert lost_node["node"] == "e1" and "e1: Cassandra died" in lost_node["problem"]
        assert lost_node["cell_id"] == sorted(c["cell_id"] for c in cells)[2]
        # started again, seen UN from every node, the writes it missed handed over
        assert 0 < lost_node["restart_s"] <= lost_node["all_up_s"] <= lost_node["hints_delivered_s"]
        assert lost_node["restarted"] == ["e1"]
        for cell in cells:
            rtts_ms = [r / 1e6 for r in store.rtts_ns(run.run_id, cell["cell_id"])]
            assert len(rtts_ms) == 150
            assert store.errors(run.run_id, cell["cell_id"]) <= 3, cell
            # still shaped, and at 20 ms one-way: >= one round trip of 2L; far below what
            # 80 ms (>= 160 ms) would give if `emulation set` had reached it
            median = statistics.median(rtts_ms)
            assert 2 * LATENCY - 1 <= median < 4 * LATENCY + 40, (cell["cell_id"], median)
    assert_no_residue(testbed_run)
