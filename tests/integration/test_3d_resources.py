"""Device-sized nodes for real (netns backend, cgroups): a CPU quota measured inside a
node's cgroup caps every process of the node together; the JVM of a memory-limited
node starts and stays under its limit; nothing of the cgroups is left after `down`, nor
after kill -9 of the owner and `clean`."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed import Testbed, Topology, cgroups
from testbed.backends import backend_options

from .conftest import assert_no_residue, run_cli, run_id_in


def cgroup_file(pid: int, controller: str, v1_name: str, v2_name: str) -> Path:
    """The file of ``pid``'s cgroup that holds ``controller``'s limit, found as the kernel
    tells it (/proc/PID/cgroup and the mount table), not as the testbed recorded it: the
    v1 hierarchy of that controller where one is mounted, else the v2 one."""
    mounts: dict[str, str] = {}  # controller ("" for cgroup2) -> mount point
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, right = line.split(" - ", 1)
        fstype, _source, options = right.split()[:3]
        if fstype == "cgroup2":
            mounts[""] = left.split()[4]
        elif fstype == "cgroup":
            mounts |= dict.fromkeys(options.split(","), left.split()[4])
    lines = [ln.split(":", 2) for ln in Path(f"/proc/{pid}/cgroup").read_text().splitlines()]
    for _, controllers, path in lines:
        if controller in controllers.split(",") and controller in mounts:
            return Path(mounts[controller] + path) / v1_name
    for _, controllers, path in lines:
        if controllers == "" and "" in mounts:
            return Path(mounts[""] + path) / v2_name
    raise AssertionError(f"pid {pid} has no {controller} cgroup: {lines}")


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
        # the quota as the kernel holds it, read from the node's own process
        pid = int(tb.exec("e0", ["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"]).stdout)
        quota = cgroup_file(pid, "cpu", "cpu.cfs_quota_us", "cpu.max").read_text().split()
        if len(quota) == 1:  # v1: the period beside it
            period = cgroup_file(pid, "cpu", "cpu.cfs_period_us", "cpu.max").read_text()
            quota.append(period.strip())
        assert int(quota[0]) / int(quota[1]) == pytest.approx(0.5), quota
        os.kill(pid, signal.SIGKILL)
        # one loop or three: the node gets at most half a core (unshaped, three loops would
        # take both cores); how close to 0.5 it gets is benchmarks/' business, not this
        one = busy_usage(tb, "e0", 1)
        three = busy_usage(tb, "e0", 3)
        assert one <= 0.6 and three <= 0.6, (one, three)
        ep = busy_usage(tb, "ep", 1)
        assert ep >= 0.6, ep  # the endpoint's own quota: one core, more than e0's half
        # every process run in a host is in its cgroup (ip netns exec keeps it)
        inside = tb.exec("e0", ["cat", "/proc/self/cgroup"]).stdout
        assert f"tb-{run_id}-e0" in inside, inside
        parents = {Path(d).parent for ds in tb.backend.cgroup_dirs.values() for d in ds.values()}  # type: ignore[union-attr]
    finally:
        tb.down()
    assert_no_residue(run_id)
    assert cgroups.find(run_id) == {}
    # the shared edgetb/ parents go with the last run out: left only where another run
    # still has a node in them
    left = [p for p in parents if p.exists() and not any(p.glob("tb-*"))]
    assert left == [], left


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
        assert pid is not None and pid in cgroups.pids(dirs)
        # the limit as the kernel holds it for the JVM, read back from its own cgroup
        limit = cgroup_file(pid, "memory", "memory.limit_in_bytes", "memory.max")
        assert int(limit.read_text()) == 640 << 20, limit
        status = run_cli("status", "--run", run_id, "--json", timeout=120)
        assert '"UN"' in status.stdout, status.stdout
        # more than the limit, allocated inside the node (first in line for the OOM
        # killer): killed, and the node's Cassandra lives on
        hog = "echo 1000 > /proc/self/oom_score_adj; exec python3 -c 'x = b\"1\" * (1 << 30)'"
        hogged = tb.exec("e0", ["sh", "-c", hog], check=False, timeout=120)
        assert hogged.returncode in (-9, 137), (hogged.returncode, hogged.stderr)
        events = limit.with_name(
            "memory.oom_control" if limit.name.endswith("in_bytes") else "memory.events"
        ).read_text()
        assert re.search(r"^oom_kill [1-9]", events, re.M), events
        assert tb.nodes["e0"].alive()
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
        while not _own_cgroups(tmp_path / "up.log"):  # this run's, not any on the machine
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


def _own_cgroups(log: Path) -> dict:
    """The cgroups of the run whose `up` writes ``log``, once it has said its id."""
    match = re.search(r"\brun ([0-9a-f]{6})\b", log.read_text())
    return cgroups.find(match.group(1)) if match else {}
