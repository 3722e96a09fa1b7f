"""The libvirt backend for real: QEMU VMs booted through libvirt (TCG on this machine),
reached through ansible-runner, shaped from inside with tcconfig, the same VMs driven as
an Ansible inventory by the hosts backend, and nothing left behind — also after kill -9.

One pair of small VMs (edge node e0 + endpoint ep) is shared by the module: under TCG a
boot costs about a minute.
"""

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

import pytest

from testbed import images
from testbed.backends import libvirt as lv
from testbed.state import RunState, home

from .conftest import assert_no_residue, rtt_tolerance_ms, run_cli

SMALL = ["--vm-vcpus", "1", "--vm-memory", "768"]


def _run_id(stdout: str) -> str:
    match = re.search(r"run (\w+) is up", stdout)
    assert match, stdout
    return match.group(1)


def ping_ms(run_id: str, src: str, dst_addr: str, count: int = 20) -> list[float]:
    proc = run_cli(
        "exec",
        "--run",
        run_id,
        src,
        "--",
        "ping",
        "-n",
        "-c",
        str(count),
        "-i",
        "0.2",
        dst_addr,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return [float(m) for m in re.findall(r"time=([0-9.]+) ms", proc.stdout)]


@pytest.fixture(scope="module")
def vms():
    images.load()  # `make test` builds the image first
    proc = run_cli(
        "up", "--backend", "libvirt", "--nodes", "1", "--no-cassandra", *SMALL, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    run_id = _run_id(proc.stdout)
    yield run_id, proc.stdout
    if (home() / "runs" / run_id).is_dir():  # a test failed before test_down_leaves_nothing
        run_cli("down", "--run", run_id, timeout=300)


def test_vms_boot_through_libvirt_and_report_their_accelerator(vms):
    run_id, out = vms
    rec = RunState.load(home() / "runs" / run_id).extra["libvirt"]
    assert rec["accel"] in ("kvm", "tcg") and f"VMs: {rec['accel'].upper()}" in out
    assert set(rec["boot_to_ssh_s"]) == {"e0", "ep"}
    found = lv.leftovers(run_id)
    assert found["domains"] == [f"tb-{run_id}-e0", f"tb-{run_id}-ep"]
    assert found["networks"] == [f"tb-{run_id}-net"] and found["pools"] == [f"tb-{run_id}-disks"]
    conn = lv.connect()
    try:
        dom = conn.lookupByName(f"tb-{run_id}-e0")
        assert dom.info()[3] == 1  # vCPUs as asked
        assert dom.maxMemory() == 768 * 1024
        assert not dom.isPersistent()  # transient: nothing defined survives a destroy
    finally:
        conn.close()
    # each VM has its own kernel, address and host name
    proc = run_cli(
        "exec",
        "--run",
        run_id,
        "e0",
        "--",
        "sh",
        "-c",
        "hostname; ip -4 -o addr show eth0; cat /proc/sys/kernel/random/boot_id",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "e0" and "10.77.0.11/24" in proc.stdout


def test_ansible_runner_reaches_every_vm(vms, tmp_path):
    import ansible_runner

    run_id, _ = vms
    inventory = json.loads(run_cli("inventory", "--run", run_id).stdout)
    ssh_dir = home() / "runs" / run_id / "ssh"
    r = ansible_runner.run(
        private_data_dir=str(tmp_path),
        inventory=inventory,
        host_pattern="all",
        module="ansible.builtin.command",
        module_args="cat /etc/hostname",
        quiet=True,
        envvars={
            "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
            "ANSIBLE_SSH_ARGS": f"-o UserKnownHostsFile={ssh_dir / 'known_hosts'} "
            f"-o StrictHostKeyChecking=accept-new",
        },
    )
    assert r.status == "successful", r.stdout.read()[-2000:]
    answers = {
        e["event_data"]["host"]: e["event_data"]["res"]["stdout"]
        for e in r.events
        if e["event"] == "runner_on_ok"
    }
    assert answers == {"e0": "e0", "ep": "ep"}


def test_tcconfig_inside_the_guests_delays_a_measured_ping(vms):
    run_id, _ = vms
    base = statistics.median(ping_ms(run_id, "ep", "10.77.0.11"))
    try:
        proc = run_cli(
            "set",
            "--profile",
            "uniform",
            "--latency",
            "25",
            "--loss",
            "0",
            module="emulation",
            run=run_id,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        assert "via direct" in proc.stdout  # netem inside the guests, set up by tcconfig
        qdiscs = run_cli(
            "exec", "--run", run_id, "e0", "--", "tc", "qdisc", "show", "dev", "eth0"
        ).stdout
        assert "netem" in qdiscs and "delay 25ms" in qdiscs, qdiscs
        shaped = statistics.median(ping_ms(run_id, "ep", "10.77.0.11"))
        assert abs(shaped - base - 50) <= rtt_tolerance_ms(50), (base, shaped)
    finally:
        # the VMs are shared with the next tests: never leave them shaped
        proc = run_cli("clear", "--remove", module="emulation", run=run_id, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert statistics.median(ping_ms(run_id, "ep", "10.77.0.11")) < base + 5


def test_hosts_backend_drives_the_vms_from_an_inventory(vms, tmp_path):
    run_id, _ = vms
    inv = tmp_path / "inventory.json"
    inv.write_text(run_cli("inventory", "--run", run_id).stdout)
    proc = run_cli(
        "up",
        "--backend",
        "hosts",
        "--inventory",
        str(inv),
        "--nodes",
        "1",
        "--no-cassandra",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    hosts_run = _run_id(proc.stdout)
    try:
        proc = run_cli(
            "set",
            "--profile",
            "uniform",
            "--latency",
            "15",
            "--loss",
            "0",
            module="emulation",
            run=hosts_run,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        shaped = statistics.median(ping_ms(hosts_run, "ep", "10.77.0.11"))
        assert abs(shaped - 30) <= rtt_tolerance_ms(30) + 2, shaped
    finally:
        down = run_cli("down", "--run", hosts_run, timeout=300)
    assert down.returncode == 0, down.stderr
    # the machines outlive the run; its shaping and its directory on them do not
    qdiscs = run_cli(
        "exec", "--run", run_id, "e0", "--", "tc", "qdisc", "show", "dev", "eth0"
    ).stdout
    assert "netem" not in qdiscs, qdiscs
    left = run_cli("exec", "--run", run_id, "e0", "--", "ls", str(home() / "runs"))
    assert hosts_run not in left.stdout
    assert_no_residue(hosts_run)


def test_down_leaves_nothing(vms):
    run_id, _ = vms
    proc = run_cli("down", "--run", run_id, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert_no_residue(run_id)


def test_kill_9_during_boot_then_clean_leaves_nothing():
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testbed",
            "up",
            "--backend",
            "libvirt",
            "--nodes",
            "1",
            "--no-cassandra",
            *SMALL,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    run_id = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until both domains exist
        found = lv.leftovers()
        if len(found["domains"]) == 2:
            run_id = found["domains"][0].split("-")[1]
            break
        time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert run_id, proc.stdout.read()
    assert lv.leftovers(run_id)["domains"]  # the VMs outlive the killed command
    clean = run_cli("clean", run=run_id, timeout=300)  # not the session's shared cluster
    assert clean.returncode == 0, clean.stderr
    assert_no_residue(run_id)
