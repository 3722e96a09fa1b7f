"""Bad input and failures: a clear error, a non-zero exit, and nothing left behind.

Every `clean` here names its run: a test never cleans the machine at large.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from common.tags import tagged_processes
from testbed import PortInUseError, Testbed, Topology
from testbed.clean import residue
from testbed.state import home

from .conftest import assert_no_residue, run_cli, run_id_in

# Node log lines the module provokes on purpose (the journal fixture in conftest.py)
NODE_LOG_EXPECTED = (
    (r"Invalid yaml\. Please remove properties \[no_such_option\]", "`up --yaml no_such_option=1`"),
)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--nodes", "0"], "from 1 to 9, got '0'"),
        (["--nodes", "10"], "from 1 to 9, got '10'"),
        (["--subnet", "8.8.8.0/24"], "not a private"),
        (["--heap-mb", "16"], "--heap-mb: expected an integer >= 128 MB, got '16'"),
        (["--java", "/nonexistent/bin/java"], "Java not found"),
    ],
)
def test_bad_input_is_rejected_before_anything_changes(args, message):
    before = _runs()
    proc = run_cli("up", *args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    # no run was even registered (everything a testbed makes is its run's, by id); the
    # machine as a whole is the session's independent leak check's, not a scan here
    # that another testbed alive on the machine would disturb
    assert _runs() == before


def _runs() -> set[str]:
    runs = home() / "runs"
    return set(os.listdir(runs)) if runs.is_dir() else set()


def test_cassandra_dying_during_start_is_reported_and_cleaned():
    proc = run_cli("up", "--nodes", "1", "--yaml", "no_such_option=1")
    assert proc.returncode == 1
    assert "e0: Cassandra exited" in proc.stderr
    assert "no_such_option" in proc.stderr  # the tail of the node's own log
    assert_no_residue(run_id_in(proc.stdout))


def test_port_already_in_use_is_a_clear_error():
    tb = Testbed(Topology(edge_nodes=2))
    tb.create_hosts()
    run_id = tb.run_id
    squatter = tb.popen(
        "e1",
        [
            sys.executable,
            "-c",
            "import socket,time;s=socket.socket();"
            "s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
            f"s.bind(('{tb.address('e1')}',9042));s.listen();time.sleep(120)",
        ],
    )
    try:
        deadline = time.monotonic() + 10
        while "9042" not in tb.exec("e1", ["ss", "-Htln"]).stdout:
            assert time.monotonic() < deadline, "squatter did not start listening"
            time.sleep(0.05)
        with pytest.raises(PortInUseError, match="e1: port 9042 is already in use"):
            tb.start_cassandra()
    finally:
        squatter.wait(timeout=10)  # killed by the teardown: it ran inside our namespace
    assert_no_residue(run_id)


def test_two_ups_of_one_name_at_the_same_moment_register_one_testbed():
    """Two `up --name` at once (issue 42): both saw the name free before either had
    registered it, and both came up. The name is checked again under the machine-wide
    lock that registers a run: one testbed has it, the other is refused in one line
    before anything of it exists."""
    import threading

    from common.errors import ConfigError

    name = f"race-{os.getpid()}"
    start = threading.Barrier(2)
    outcomes: list = []

    def up() -> None:
        tb = Testbed(Topology(edge_nodes=1), cassandra=None, name=name)
        start.wait()
        try:
            tb.create_hosts()
            outcomes.append(tb)
        except ConfigError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=up) for _ in range(2)]
    before = _runs()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    up_ones = [o for o in outcomes if isinstance(o, Testbed)]
    try:
        assert len(outcomes) == 2 and len(up_ones) == 1, outcomes
        (refused,) = [o for o in outcomes if isinstance(o, ConfigError)]
        assert f"a testbed named {name!r} exists" in str(refused)
        assert len(_runs() - before) == 1  # the loser registered nothing
    finally:
        for tb in up_ones:
            run_id = tb.run_id
            tb.down()
            assert_no_residue(run_id)


def test_sigkilled_up_is_removed_by_clean():
    # the run is the one that appears in this session's home: another session's runs
    # (the VM tests beside this one) start tagged processes meanwhile too
    runs = home() / "runs"
    before = set(os.listdir(runs)) if runs.is_dir() else set()
    up = subprocess.Popen(
        [sys.executable, "-m", "testbed", "up", "--nodes", "3"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )

    def new_runs() -> set[str]:
        return set(os.listdir(runs)) - before if runs.is_dir() else set()

    try:
        deadline = time.monotonic() + 90
        while True:
            fresh = new_runs()  # once per look, not once per tagged process
            mine = {p: r for p, r in tagged_processes().items() if r in fresh}
            if len(mine) >= 3:
                break
            assert up.poll() is None, "up ended before it could be killed"
            assert time.monotonic() < deadline, "no Cassandra JVM appeared"
            time.sleep(0.1)
        os.kill(up.pid, signal.SIGKILL)
        up.wait()
        (run_id,) = set(mine.values())
        left = residue(run_id)
        assert len(left["namespaces"]) == 5 and len(left["processes"]) == 3, left
        # the killed `up` owned it and never detached it: a crashed run's leftover, which
        # a machine-wide `clean` may remove too; the test names it (and only it)
        proc = run_cli("clean", run=run_id)
        assert proc.returncode == 0, proc.stderr
        assert_no_residue(run_id)
        assert run_cli("clean", run=run_id).stdout.strip() == "nothing to clean"
    finally:  # a failure above leaves nothing of the run either
        if up.poll() is None:
            os.kill(up.pid, signal.SIGKILL)
            up.wait()
        for run_id in new_runs():
            run_cli("clean", run=run_id)


def test_gateway_left_by_a_killed_emulation_command_is_removed_by_clean():
    up = run_cli("up", "--nodes", "2", "--no-cassandra")
    assert up.returncode == 0, up.stderr
    run_id = run_id_in(up.stdout)
    # --shaper gateway: the gateway VM is what this test is about, also where netem exists
    setter = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "emulation",
            "set",
            "--latency",
            "10",
            "--shaper",
            "gateway",
            "--run",
            run_id,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not any(
        rid == run_id and ":gateway" in _cmdline(p) for p, rid in tagged_processes().items()
    ):
        assert setter.poll() is None, "emulation set ended before its gateway VM was seen"
        assert time.monotonic() < deadline, "no gateway VM appeared"
        time.sleep(0.05)
    os.kill(setter.pid, signal.SIGKILL)
    setter.wait()
    assert any(":gateway" in _cmdline(p) for p in residue(run_id)["processes"])
    proc = run_cli("clean", run=run_id)
    assert proc.returncode == 0, proc.stderr
    assert_no_residue(run_id)
    assert not any(f"edgetb.run={run_id}" in _cmdline(p) for p in _all_pids())


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]
