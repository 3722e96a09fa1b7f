"""Quiet nodes (issue 39): the shared 3-node cluster, of the default build (quiet), runs
the rebuilt SEPWorker class, and its shared executor pool wakes far less per write than a
stock testbed's beside it, measured side by side from /proc (each thread's schedstat: the
kernel's count of the times it ran), not from anything the testbed reports. The run
records its build. The stock testbed also takes the housekeeping of write-only testbeds:
its nodes' approximate clock ticks less often (counted the same way) and their dynamic
snitch updates every 10 s, as the node itself reports (system_views.settings)."""

import json
import os
import subprocess
import sys
import time

from testbed import Testbed, Topology
from testbed.cassandra import quiet
from testbed.cassandra.config import CassandraSettings
from workloads import WriteWorker

from .conftest import assert_no_residue

# 15 characters of a thread's name: SEP workers are named after the stage they run a task
# of, "SharedPool-Worker-N" before their first
SEP = ("SharedPool-Work", "Native-Transpor", "MutationStage", "RequestResponse", "ReadStage")


# the thread that refreshes the approximate clock (and runs other fast periodic tasks)
CLOCK = ("ScheduledFastTa",)


def wakeups(pids: list[int], names: tuple[str, ...] = SEP) -> int:
    """Timeslices run so far by the threads named ``names`` (by default the SEP workers)
    of the JVMs ``pids`` (/proc schedstat)."""
    total = 0
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    if not f.read().startswith(names):
                        continue
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[2])
            except FileNotFoundError:
                continue  # a thread that ended
    return total


def pids_of(tb: Testbed) -> list[int]:
    return [n.pid for n in tb.nodes.values() if n.pid is not None]


def wakeups_per_write(tb: Testbed, tmp_path, writes: int = 300) -> float:
    pids = pids_of(tb)
    assert len(pids) == 3
    worker = WriteWorker(tb, policy="round-robin", timeout_s=12.0, log_path=tmp_path / "w.log")
    try:
        worker.schema("quiet_ab", 3)
        before: list[int] = []
        rows = worker.run(
            keyspace="quiet_ab", cl="LOCAL_QUORUM", writes=writes, warmup=100,
            key_seed=f"q{tb.run_id}", warmup_seed=f"w{tb.run_id}",
            on_measuring=lambda: before.append(wakeups(pids)),
        )  # fmt: skip
        after = wakeups(pids)
    finally:
        worker.close()
    assert not [r for r in rows if r["error"]], rows[:3]
    return (after - before[0]) / writes


def snitch_interval(tb: Testbed) -> str:
    """The dynamic snitch's update interval as a node reports it."""
    shown = tb.client(
        ["cql", "--consistency", "ONE",
         "SELECT value FROM system_views.settings WHERE name = 'dynamic_snitch_update_interval'"]
    )  # fmt: skip
    return json.loads(shown.stdout.splitlines()[0])["value"]


def test_quiet_nodes_wake_far_less_per_write_than_stock(cluster, tmp_path):
    """The shared cluster has the default build, quiet; a stock testbed beside it."""
    assert cluster.dist is not None and cluster.settings is not None
    assert cluster.settings.build == "quiet"  # the default
    argv = open(f"/proc/{next(iter(cluster.nodes.values())).pid}/cmdline").read().split("\0")
    assert f"-D{quiet.PROPERTY}={quiet.STOP_CHECK_NS}" in argv
    assert argv[argv.index("-cp") + 1].startswith(str(quiet.jar_path(cluster.dist)))
    shown = subprocess.run(
        [sys.executable, "-m", "testbed", "status", "--run", cluster.run_id, "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["cassandra"]["build"] == "quiet"
    assert "-Dcassandra.approximate_time_precision_ms=20" in argv  # standard housekeeping
    settings = CassandraSettings(build="stock", housekeeping="writes")
    tb = Testbed(Topology(edge_nodes=3), cassandra=settings)
    with tb:
        argv = open(f"/proc/{next(iter(tb.nodes.values())).pid}/cmdline").read().split("\0")
        assert not any(a.startswith(f"-D{quiet.PROPERTY}=") for a in argv)  # Apache's jars
        assert "-Dcassandra.approximate_time_precision_ms=100" in argv
        # both testbeds idle, side by side: clock ticks per second and JVM
        clock0 = wakeups(pids_of(tb), CLOCK), wakeups(pids_of(cluster), CLOCK)
        t0 = time.monotonic()
        time.sleep(6)
        elapsed = time.monotonic() - t0
        clock1 = wakeups(pids_of(tb), CLOCK), wakeups(pids_of(cluster), CLOCK)
        coarse, standard = ((b - a) / elapsed / 3 for a, b in zip(clock0, clock1, strict=True))
        assert snitch_interval(tb) == "10000ms"
        assert snitch_interval(cluster) == "100ms"
        stock_rate = wakeups_per_write(tb, tmp_path)
        quiet_rate = wakeups_per_write(cluster, tmp_path)
        run_id = tb.run_id
    print(f"SEP wake-ups per write: quiet {quiet_rate:.0f}, stock {stock_rate:.0f}")
    print(f"approximate-clock wake-ups/s per JVM: writes {coarse:.1f}, standard {standard:.1f}")
    # writes: ~10/s (every 100 ms), standard: ~50/s (every 20 ms); both are timers
    assert coarse <= 15 and standard >= 2.5 * coarse, (coarse, standard)
    # stock: 370-880 per write (workers spin 10 ms after each task); quiet: ~35
    assert quiet_rate < stock_rate / 3, (quiet_rate, stock_rate)
    assert_no_residue(run_id)
