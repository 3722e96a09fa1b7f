"""Device-sized nodes for real (netns backend, cgroups): a CPU quota measured inside a
node's cgroup caps every process of the node together; the JVM of a memory-limited
node starts and stays under its limit; nothing of the cgroups is left after `down`, nor
after kill -9 of the owner and `clean`."""

import os
import signal
import subprocess
import sys
import time

import pytest

from testbed import Testbed, Topology, cgroups
from testbed.backends import backend_options

from .conftest import assert_no_residue, run_cli, run_id_in

pytestmark = pytest.mark.skipif(cgroups.layout() is None, reason="no cgroup cpu/memory here")


def busy_usage(tb: Testbed, host: str, loops: int, seconds: float = 4.0) -> float:
    """Cores used by ``loops`` busy shell loops in ``host`` over ``seconds`` of wall time,
    read from the host's own cgroup accounting."""
    dirs = tb.backend.cgroup_dirs[host]  # type: ignore[union-attr]
    script = " ".join(["while :; do :; done &"] * loops) + f" sleep {seconds}; kill 0"
    before, t0 = cgroups.cpu_usage_s(dirs), time.monotonic()
    tb.exec(host, ["timeout", "-s", "KILL", str(seconds + 5), "sh", "-c", script], check=False)
    return (cgroups.cpu_usage_s(dirs) - before) / (time.monotonic() - t0)


def test_a_cpu_quota_caps_the_whole_node_and_down_removes_its_cgroup():
    spec = {"*": {"cpu": 0.5}, "ep": {"cpu": 1.0, "memory_mb": 256}}
    tb = Testbed(
        Topology(edge_nodes=1),
        cassandra=None,
        backend_options=backend_options("netns", node_resources=spec),
    )
    tb.up()
    try:
        run_id = tb.run_id
        names = sorted(cgroups.find(run_id))
        assert names == [f"tb-{run_id}-e0", f"tb-{run_id}-ep"], names
        # one loop or three: the node gets half a core either way (the cap is the node's)
        one = busy_usage(tb, "e0", 1)
        three = busy_usage(tb, "e0", 3)
        assert 0.40 <= one <= 0.55, one
        assert 0.40 <= three <= 0.55, three
        ep = busy_usage(tb, "ep", 1)
        assert ep >= 0.8, ep  # the endpoint's own quota: one core
        # every process run in a host is in its cgroup (ip netns exec keeps it)
        inside = tb.exec("e0", ["cat", "/proc/self/cgroup"]).stdout
        assert f"tb-{run_id}-e0" in inside, inside
    finally:
        tb.down()
    assert_no_residue(run_id)
    assert cgroups.find(run_id) == {}


def test_a_memory_limited_node_runs_cassandra_within_its_limit_and_clean_after_kill_9(
    tmp_path,
):
    """`up` with --node-memory 640 (heap 256 MB) comes up; its JVM's peak stays under the
    limit. Then a second `up` is killed -9 once its cgroups exist: `clean` removes them."""
    proc = run_cli("up", "--nodes", "1", "--node-memory", "640", "--node-cpu", "1", timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    run_id = run_id_in(proc.stdout)
    try:
        tb = Testbed.attach(run_id)
        dirs = tb.backend.cgroup_dirs["e0"]  # type: ignore[union-attr]
        pid = tb.nodes["e0"].pid
        assert pid in cgroups.pids(dirs)
        peak = cgroups.memory_peak_mb(dirs)
        assert peak is None or peak <= 640, peak
        status = run_cli("status", "--run", run_id, "--json", timeout=120)
        assert '"UN"' in status.stdout, status.stdout
    finally:
        down = run_cli("down", "--run", run_id, timeout=300)
    assert down.returncode == 0, down.stderr
    assert_no_residue(run_id)

    log = open(tmp_path / "up.log", "w")  # noqa: SIM115 - closed below
    up = subprocess.Popen(
        [sys.executable, "-m", "testbed", "up", "--nodes", "2", "--node-profile", "small"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=os.environ.copy(),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not cgroups.find():
            assert up.poll() is None and time.monotonic() < deadline, (
                tmp_path / "up.log"
            ).read_text()
            time.sleep(0.2)
        time.sleep(3)  # a JVM or two started inside them
        os.killpg(up.pid, signal.SIGKILL)
        up.wait()
    finally:
        log.close()
    killed = run_id_in((tmp_path / "up.log").read_text())
    assert cgroups.find(killed)
    clean = run_cli("clean", "--run", killed, timeout=300)
    assert clean.returncode == 0, clean.stderr
    assert_no_residue(killed)
    assert cgroups.find(killed) == {}
