"""The libvirt backend for real: QEMU VMs booted through libvirt (TCG on this machine),
reached through ansible-runner, shaped from inside with tcconfig, the same VMs driven as
an Ansible inventory by the hosts backend (with Cassandra: authentication, JMX on
loopback, checked host keys, qdiscs restored at down), and nothing left behind — also
after kill -9.

The small VMs of the session (edge nodes e0 and e1 on two sites, endpoint ep: the
``vms`` fixture of conftest.py) are shared with test_5, which takes them down: under TCG
a boot costs about a minute.
"""

import json
import os
import signal
import socket
import ssl
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from testbed import images, qdisc
from testbed.backends import hostkeys
from testbed.backends import libvirt as lv
from testbed.backends import libvirt_objects as lvo
from testbed.backends.hosts import HostsRecord
from testbed.state import RunState, home
from testbed.topology import Topology
from workloads.ycsb import client as ycsb_client

from .conftest import (
    GUESTS,
    SMALL_VMS,
    VM_MEMORY_MB,
    VM_VCPUS,
    assert_no_residue,
    guest_rtt_ok,
    ping_rtts_ms,
    refused_for_its_certificate,
    run_cli,
    run_id_in,
    vm_budget,
)

# Node log lines the module provokes on purpose (the journal fixture in conftest.py): a
# TLS handshake to the internode port without a node's certificate, refused
NODE_LOG_EXPECTED = (
    (r"InboundConnectionInitiator.* Failed to properly handshake with peer", "a stranger's "
     "handshake on port 7000, refused as _tls_refuses_strangers asserts"),
)  # fmt: skip


def address(run_id: str, host: str = "e0") -> str:
    """``host``'s address in run ``run_id`` (each run has a subnet of its own)."""
    return Topology.from_dict(RunState.load(home() / "runs" / run_id).topology).host(host).address


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
        timeout=vm_budget(120),
    )
    assert proc.returncode == 0, proc.stderr
    return ping_rtts_ms(proc.stdout)


def test_vms_boot_through_libvirt_and_report_their_accelerator(vms):
    run_id, out = vms
    state = RunState.load(home() / "runs" / run_id)
    rec = state.get(lv.LibvirtRecord)
    assert rec is not None and rec.accel in ("kvm", "tcg") and f"VMs: {rec.accel.upper()}" in out
    assert set(rec.boot_to_ssh_s) == {"e0", "e1", "ep"}
    sites = {h.name: h.site for h in Topology.from_dict(state.topology).hosts}
    assert sites == {"e0": "dc1", "e1": "dc2", "ep": "dc1"}, sites  # --sites 1,1
    found = lvo.leftovers(run_id)
    assert found["domains"] == [f"tb-{run_id}-{h}" for h in ("e0", "e1", "ep")]
    assert found["networks"] == [f"tb-{run_id}-net"] and found["pools"] == [f"tb-{run_id}-disks"]
    conn = lvo.connect()
    try:
        dom = conn.lookupByName(f"tb-{run_id}-e0")
        assert dom.info()[3] == VM_VCPUS  # as asked
        assert dom.maxMemory() == VM_MEMORY_MB * 1024
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
    assert proc.stdout.split()[0] == "e0" and f"{address(run_id)}/24" in proc.stdout
    # what the image keeps off a measurement VM: boot jobs and timers (masked), host
    # keys but the one sshd offers
    units = run_cli("exec", "--run", run_id, "e0", "--", "systemctl", "is-enabled",
                    *images.MASKED_UNITS)  # fmt: skip
    assert units.stdout.split() == ["masked"] * len(images.MASKED_UNITS), units.stdout
    keys = run_cli("exec", "--run", run_id, "e0", "--", "sh", "-c", "ls /etc/ssh/*_key")
    assert keys.stdout.split() == ["/etc/ssh/ssh_host_ed25519_key"], keys.stdout + keys.stderr


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
    assert answers == {"e0": "e0", "e1": "e1", "ep": "ep"}


def _qdiscs(run_id: str) -> dict[str, str]:
    """Each VM's qdiscs on eth0, read through the libvirt run (not the hosts run)."""
    out = {}
    for host in ("e0", "ep"):
        proc = run_cli("exec", "--run", run_id, host, "--", *qdisc.show_argv("eth0"))
        assert proc.returncode == 0, proc.stderr
        out[host] = proc.stdout
    return out


def _client_on_ep(run_id: str, *args: str, timeout_s: int = 10) -> subprocess.CompletedProcess:
    return run_cli(
        "exec",
        "--run",
        run_id,
        "ep",
        "--",
        *args,
        "python",
        "-m",
        "testbed.client",
        "--timeout",
        str(timeout_s),
        "probe",
        "--expect",
        "1",
        timeout=vm_budget(timeout_s + 120),
    )


def test_hosts_backend_drives_the_vms_from_an_inventory(vms, tmp_path):
    run_id, _ = vms
    inv = tmp_path / "inventory.json"
    inv.write_text(run_cli("inventory", "--run", run_id).stdout)
    before = _qdiscs(run_id)
    proc = run_cli(
        "up",
        "--backend",
        "hosts",
        "--inventory",
        str(inv),
        "--nodes",
        "1",
        "--cql-timeout",
        str(round(vm_budget(600))),  # one JVM in a 1-vCPU TCG guest
        timeout=vm_budget(1800),
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    hosts_run = run_id_in(proc.stdout)
    run_dir = home() / "runs" / hosts_run
    hosts_run_left = True  # until the test's own teardown (failed, then retried) removed it
    try:
        # host keys: exactly those the libvirt run recorded (its inventory names the file)
        hosts_rec = RunState.load(run_dir).get(HostsRecord)
        assert hosts_rec is not None
        trusted = hosts_rec.host_keys
        libvirt_known_hosts = str(home() / "runs" / run_id / "ssh" / "known_hosts")
        assert {k: v["source"] for k, v in trusted.items()} == {
            "e0": libvirt_known_hosts,
            "ep": libvirt_known_hosts,
        }
        # the run's login: 0600 here and on the endpoint, where the workload reads it
        creds = run_dir / "credentials.json"
        assert stat.S_IMODE(creds.stat().st_mode) == 0o600
        remote_mode = run_cli(
            "exec", "--run", hosts_run, "ep", "--", "stat", "-c", "%a %U", str(creds)
        )
        assert remote_mode.stdout.split() == ["600", "root"], remote_mode.stderr
        # the node's directories on its host (its keystore in conf): root's JVM only
        node_dir = run_dir / "nodes" / "e0"
        node_modes = run_cli(
            "exec", "--run", hosts_run, "e0", "--", "stat", "-c", "%a %U %n",
            *(str(node_dir / sub) for sub in ("conf", "data", "logs")),
        )  # fmt: skip
        modes = [line.split()[:2] for line in node_modes.stdout.splitlines()]
        assert modes == [["700", "root"]] * 3, node_modes.stdout + node_modes.stderr
        # it works (a driver session from the endpoint) ...
        ok = _client_on_ep(hosts_run, timeout_s=round(vm_budget(60)))
        assert ok.returncode == 0, ok.stderr[-2000:]
        assert json.loads(ok.stdout.strip().splitlines()[-1])["hosts_up"] == [address(run_id)]
        # ... the default superuser's does not, nor no login at all
        default = run_cli(
            "exec",
            "--run",
            hosts_run,
            "ep",
            "--",
            "sh",
            "-c",
            'umask 077 && printf %s "$0" > /tmp/edgetb-default-login.json',
            json.dumps({"username": "cassandra", "password": "cassandra"}),
        )
        assert default.returncode == 0, default.stderr
        refused = _client_on_ep(  # a refusal is final: no need to retry for 10 s
            hosts_run, "env", "EDGETB_CREDENTIALS=/tmp/edgetb-default-login.json", timeout_s=6
        )
        assert refused.returncode != 0 and "AuthenticationFailed" in refused.stderr, refused.stderr
        anonymous = _client_on_ep(hosts_run, "env", "EDGETB_CREDENTIALS=", timeout_s=6)
        assert anonymous.returncode != 0 and "AuthenticationFailed" in anonymous.stderr
        _tls_refuses_strangers(hosts_run, run_dir)
        # the JVM listens on e0's address for gossip and CQL only; JMX (and its RMI
        # port) on loopback; nodetool, run on the node itself, reports it UN
        listening = run_cli("exec", "--run", hosts_run, "e0", "--", "ss", "-Htlnp").stdout
        java = {ln.split()[3] for ln in listening.splitlines() if '"java"' in ln}
        assert "127.0.0.1:7199" in java, listening
        assert {a for a in java if not a.startswith("127.0.0.1:")} == {
            f"{address(run_id)}:7000",
            f"{address(run_id)}:9042",
        }, listening
        status = run_cli("status", "--run", hosts_run, "--json", timeout=vm_budget(300))
        assert status.returncode == 0, status.stderr
        e0 = next(h for h in json.loads(status.stdout)["hosts"] if h["name"] == "e0")
        assert e0["cassandra"] == "UN", status.stdout
        # shaping inside the hosts, after recording what they had
        unshaped = ping_ms(hosts_run, "ep", address(hosts_run))
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
            timeout=vm_budget(300),
        )
        assert proc.returncode == 0, proc.stderr
        assert "via direct" in proc.stdout  # netem inside the guests, set up by tcconfig
        shaping = run_cli("exec", "--run", run_id, "e0", "--", *qdisc.show_argv("eth0")).stdout
        assert "netem" in shaping and "delay 15ms" in shaping, shaping
        qdisc_rec = RunState.load(run_dir).get(qdisc.QdiscRecord)
        assert qdisc_rec is not None
        recorded = qdisc_rec.before
        for host in ("e0", "ep"):
            assert qdisc.normalize(recorded[host]["eth0"]) == qdisc.normalize(before[host])
        # iputils ping ep -> e0 through both guests' netem (15 ms each way), against the
        # same path unshaped just before `set`: the fastest echoes, the least moved by
        # the load beside the guests
        shaped = ping_ms(hosts_run, "ep", address(hosts_run))
        base = min(unshaped)
        assert guest_rtt_ok(min(shaped), 30, slack_ms=2, base_ms=base), (unshaped, shaped, GUESTS)
        _ycsb_on_the_endpoint(hosts_run, tmp_path)
        _a_second_run_leaves_the_first_alone(run_id, hosts_run, inv)
        _a_failed_teardown_is_kept_and_clean_retries_it(run_id, hosts_run, run_dir)
        hosts_run_left = False
    finally:
        down = (
            run_cli("down", "--run", hosts_run, timeout=vm_budget(600)) if hosts_run_left else None
        )
    assert down is None or down.returncode == 0, down.stderr  # not in finally: a failure
    # above is reported as itself
    # the machines outlive the run: their qdiscs are those recorded before it shaped them,
    # Cassandra is stopped, the run's directory (login included) is gone
    after = _qdiscs(run_id)
    for host in ("e0", "ep"):
        assert qdisc.normalize(after[host]) == qdisc.normalize(before[host]), (host, after)
        assert "netem" not in after[host]
    unit = run_cli(
        "exec", "--run", run_id, "e0", "--", "systemctl", "is-active",
        f"edgetb-cassandra-{hosts_run}",
    )  # fmt: skip
    assert unit.stdout.strip() in ("inactive", "failed"), unit.stdout  # the run's own unit
    for host in ("e0", "ep"):
        left = run_cli("exec", "--run", run_id, host, "--", "ls", str(home() / "runs"))
        assert hosts_run not in left.stdout
    # the YCSB client whose owner was killed mid-run: ended by down's teardown, by its PID
    client = run_cli(
        "exec", "--run", run_id, "ep", "--", "pgrep", "-f", f"edgetb[.]run={hosts_run}:"
    )
    assert client.returncode == 1, client.stdout
    assert_no_residue(hosts_run)


def _a_second_run_leaves_the_first_alone(vm_run: str, hosts_run: str, inv: Path) -> None:
    """Another controller's run on the same hosts (issue 25; a home and a registry of its
    own, so this machine's registry does not refuse it first): its Cassandra cannot start
    where the first one's holds the ports, and its failure and teardown stop nothing of
    the first (each run has a unit of its own); nothing of it is left in its home."""
    unit = f"edgetb-cassandra-{hosts_run}"
    pid = run_cli("exec", "--run", vm_run, "e0", "--", "systemctl", "show", "-p", "MainPID",
                  "--value", unit).stdout.strip()  # fmt: skip
    assert pid not in ("", "0"), pid
    # a short home: its run's SSH sockets must fit their path limit (checked by `up`)
    with tempfile.TemporaryDirectory(prefix="edgetb-other-") as other:
        env = {**os.environ, "EDGETB_HOME": other, "EDGETB_REGISTRY": f"{other}/registry"}
        second = subprocess.run(
            [sys.executable, "-m", "testbed", "up", "--backend", "hosts", "--inventory",
             str(inv), "--nodes", "1"],
            capture_output=True, text=True, timeout=vm_budget(1800), env=env,
        )  # fmt: skip
        assert second.returncode != 0, second.stdout[-2000:]
        assert "already in use" in second.stderr, second.stderr[-2000:]
        assert not any(Path(other, "runs").iterdir()), list(Path(other, "runs").iterdir())
    after = run_cli("exec", "--run", vm_run, "e0", "--", "systemctl", "show", "-p", "MainPID",
                    "--value", unit).stdout.strip()  # fmt: skip
    assert after == pid, (pid, after)  # the same JVM, never restarted
    ok = _client_on_ep(hosts_run, timeout_s=round(vm_budget(60)))
    assert ok.returncode == 0, ok.stderr[-2000:]


def _a_failed_teardown_is_kept_and_clean_retries_it(
    vm_run: str, hosts_run: str, run_dir: Path
) -> None:
    """A teardown that fails on a host (here: a file of the run's directory on the endpoint
    made immutable, so the directory cannot be removed) keeps the run, marked
    teardown-failed; once the host is fixed, `clean --run` finishes it."""
    pinned = str(run_dir / "tls" / "ca.pem")
    assert run_cli("exec", "--run", vm_run, "ep", "--", "chattr", "+i", pinned).returncode == 0
    try:
        down = run_cli("down", "--run", hosts_run, timeout=vm_budget(600))
        assert down.returncode != 0, down.stdout[-2000:]
        assert RunState.load(run_dir).status == "teardown-failed"
    finally:
        run_cli("exec", "--run", vm_run, "ep", "--", "chattr", "-i", pinned)
    clean = run_cli("clean", "--run", hosts_run, timeout=vm_budget(600))
    assert clean.returncode == 0, clean.stderr[-2000:]
    assert not run_dir.exists()


def _tls_refuses_strangers(hosts_run: str, run_dir: Path) -> None:
    """TLS is on by default on the hosts backend: the client's files are owner-only here
    and on the endpoint; with the run's login but without its certificate a client is
    refused on the CQL port, and a TLS handshake without a client certificate is refused
    on both the CQL and the internode port (from this machine: a stranger on the network)."""
    files = sorted(f.name for f in (run_dir / "tls").iterdir())
    assert files == ["ca.pem", "client.key", "client.pem"], files
    remote = run_cli(
        "exec", "--run", hosts_run, "ep", "--", "stat", "-c", "%a %n",
        str(run_dir / "tls"), *(str(run_dir / "tls" / f) for f in files),
    )  # fmt: skip
    assert [ln.split()[0] for ln in remote.stdout.splitlines()] == ["700", "600", "600", "600"]
    plain = _client_on_ep(hosts_run, "env", "EDGETB_TLS=", timeout_s=6)
    assert plain.returncode != 0 and "Connection reset by peer" in plain.stderr, plain.stderr
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(run_dir / "tls" / "ca.pem")  # it trusts the nodes, has no cert
    for port in (9042, 7000):
        with socket.create_connection((address(hosts_run), port), timeout=30) as raw:
            with pytest.raises((ssl.SSLError, ConnectionError)) as refused:
                with ctx.wrap_socket(raw, suppress_ragged_eofs=False) as s:
                    s.settimeout(30)
                    s.sendall(b"\x00" * 9)
                    if not s.recv(16):  # TLS 1.3: the refusal comes after the handshake
                        raise ConnectionError("closed")
        assert refused_for_its_certificate(str(refused.value)), (port, refused.value)


def _ycsb_on_the_endpoint(hosts_run: str, tmp_path: Path) -> None:
    """YCSB from the endpoint host (the jars copied there, checksummed), through shaped
    links (15 ms one way): a workload A load and run record reads and updates with their
    percentiles and histogram logs copied back; then a run whose owner is killed -9
    midway, which `down` must end."""
    out = tmp_path / "ycsb"
    proc = run_cli(
        "run", "--run", hosts_run, "--rf", "1", "--workload", "a", "--records", "200",
        "--operations", "300", "--threads", "2", "--out", str(out), "--json",
        module="workloads.ycsb", timeout=vm_budget(900),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    load, ran = json.loads(proc.stdout)["phases"]
    assert load["ops"]["INSERT"]["count"] == 200 and load["ops"]["INSERT"]["errors"] == 0
    ops = ran["ops"]
    assert ops["READ"]["count"] + ops["UPDATE"]["count"] == 300, ops
    for op in ("READ", "UPDATE"):
        d = ops[op]
        assert d["errors"] == 0, d
        # one round trip ep -> e0 -> ep is 30 ms; RF 1 at ONE never leaves e0
        assert 30 <= d["p50_ms"] <= d["p95_ms"] <= d["p99_ms"] <= d["max_ms"], d
        assert Path(d["hdr"]).is_file() and Path(d["hdr"]).parent.parent == out
    killed = subprocess.Popen(
        [sys.executable, "-m", "workloads.ycsb", "run", "--run", hosts_run, "--rf", "1",
         "--workload", "c", "--records", "200", "--duration", "600", "--no-load",
         "--out", str(tmp_path / "killed")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    # killed once its client reads: YCSB's status line counts operations (a client
    # killed before it connected could end on its own, proving nothing of `down`)
    log = tmp_path / "killed" / "run.log"
    deadline = time.monotonic() + vm_budget(300)
    while not any(int(m.group(2)) for m in ycsb_client.STATUS.finditer(_text(log))):
        assert killed.poll() is None, f"the YCSB run ended by itself: {_text(log)[-1500:]}"
        assert time.monotonic() < deadline, f"no YCSB client read: {_text(log)[-1500:]}"
        time.sleep(2)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    alive = run_cli(
        "exec", "--run", hosts_run, "ep", "--", "pgrep", "-f", f"edgetb[.]run={hosts_run}:"
    )
    if alive.returncode != 0:  # what the endpoint has instead, and what its kernel said
        look = "ps -eo pid,etime,args | grep -v ' \\[' | tail -n 25; dmesg | tail -n 5"
        seen = run_cli("exec", "--run", hosts_run, "ep", "--", "sh", "-c", look)
        raise AssertionError(
            "the client should outlive its killed owner until down; on ep:\n" + seen.stdout
        )


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def _edited_known_hosts(source: Path, address: str, tmp_path: Path) -> str:
    """``source`` with every key recorded for ``address`` replaced by a new one."""
    if not (tmp_path / "other").exists():  # one stand-in key per test, reused
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")],
            check=True,
        )
    other = (tmp_path / "other.pub").read_text().split()[:2]
    lines = []
    for line in source.read_text().splitlines():
        if hostkeys.lookup(line, address):
            line = " ".join([line.split()[0], *other])
        lines.append(line)
    return "\n".join(lines) + "\n"


def _up_hosts_refused(inventory: dict, tmp_path: Path, e0: str) -> subprocess.CompletedProcess:
    path = tmp_path / "inventory-edited.json"
    path.write_text(json.dumps(inventory))
    runs = set(os.listdir(home() / "runs"))
    proc = run_cli(
        "up", "--backend", "hosts", "--inventory", str(path), "--nodes", "1", "--no-cassandra"
    )
    assert proc.returncode != 0, proc.stdout
    assert f"e0 ({e0} port 22): SSH host key changed" in proc.stderr, proc.stderr
    assert set(os.listdir(home() / "runs")) == runs  # nothing of the refused run is left
    return proc


def test_hosts_backend_refuses_a_changed_host_key(vms, tmp_path):
    """e0's recorded key edited (as if e0 were reinstalled, or another machine took its
    address): refused before anything runs on any host, naming e0 — through the known_hosts
    the inventory names, and through the per-user store of first contacts."""
    run_id, _ = vms
    inventory = json.loads(run_cli("inventory", "--run", run_id).stdout)
    hosts_vars = [
        v for group in inventory["all"]["children"].values() for v in group["hosts"].values()
    ]
    recorded = Path(hosts_vars[0]["edgetb_known_hosts"])
    edited = tmp_path / "known_hosts"
    edited.write_text(_edited_known_hosts(recorded, address(run_id), tmp_path))
    for v in hosts_vars:
        v["edgetb_known_hosts"] = str(edited)
    proc = _up_hosts_refused(inventory, tmp_path, address(run_id))
    assert str(edited) in proc.stderr
    # no edgetb_known_hosts: the keys recorded on first contact decide
    store = home() / "known_hosts"
    saved = store.read_text() if store.exists() else None
    store.write_text(_edited_known_hosts(recorded, address(run_id), tmp_path))
    try:
        for v in hosts_vars:
            del v["edgetb_known_hosts"]
        _up_hosts_refused(inventory, tmp_path, address(run_id))
    finally:
        if saved is None:
            store.unlink()
        else:
            store.write_text(saved)


def test_kill_9_during_boot_then_clean_leaves_nothing():
    others = set(lvo.leftovers()["domains"])  # other testbeds' VMs on this machine
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
            *SMALL_VMS,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None  # PIPE
    run_id = None
    deadline = time.monotonic() + vm_budget(120)
    while time.monotonic() < deadline:  # until both domains of its run exist
        ids = {d.split("-")[1] for d in set(lvo.leftovers()["domains"]) - others}
        mine = [i for i in ids if len(lvo.leftovers(i)["domains"]) == 2]
        if len(mine) == 1:
            (run_id,) = mine
            break
        time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert run_id, proc.stdout.read()
    assert lvo.leftovers(run_id)["domains"]  # the VMs outlive the killed command
    clean = run_cli("clean", run=run_id, timeout=vm_budget(300))  # not the session's shared cluster
    assert clean.returncode == 0, clean.stderr
    assert_no_residue(run_id)
