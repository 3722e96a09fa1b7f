"""Integration fixtures: one real 3-node cluster shared by the tests that need it, up from
its first user to its last (then `test_shared_cluster_down` takes it down: nothing of it
runs beside this session's tests after it); its Cassandra logs scanned after each module
that uses it. Under `make test` the parallel, worker, fault and ownership tests (test_7,
test_8, test_3e, test_6) run in a second pytest session beside this one
(tests/support/suite.py), so beside the shared cluster and the other tests' clusters:
their bounds are physical or measured at the same moment."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import Testbed, Topology
from testbed.cassandra import logscan
from testbed.clean import residue
from testbed.state import RunState, home

# Lines of a Cassandra log that mean something went wrong (as cassandra-dtest scans for).
# None is expected from the shared cluster: no test kills or cuts off its nodes.
LOG_PROBLEM = re.compile(r"^(ERROR|FATAL) |^\S*(Exception|Error)(: |$)|^Caused by: ")
_shared: dict[str, Testbed] = {}
_log_marks: dict[str, int] = {}  # node -> bytes of its log scanned so far
_unscanned: list[str] = []  # the modules run since the shared cluster's logs were scanned
DOWN_MODULE = "test_shared_cluster_down"
VMS_DOWN_TEST = "test_the_shared_vms_go_down_and_leave_nothing"  # in test_5_vm_sweep.py


def uses_cluster(item: pytest.Item) -> bool:
    return "cluster" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(items):
    """Integration tests need root; the unit tests collected in the same session do not.
    The shared cluster's teardown test runs right after the cluster's last other user."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.root)
    items[:] = _after_last_user(items, lambda i: i.path.stem == DOWN_MODULE, uses_cluster)
    # the shared VMs' down after their last user, whatever order the files were given in
    items[:] = _after_last_user(
        items, lambda i: i.name == VMS_DOWN_TEST, lambda i: "vms" in getattr(i, "fixturenames", ())
    )


def _after_last_user(items: list, moved, uses) -> list:
    """``items`` with those ``moved`` right after the module of the last item that
    ``uses`` what they take down (and is not one of them)."""
    down = [i for i in items if moved(i)]
    rest = [i for i in items if not moved(i)]
    users = [n for n, i in enumerate(rest) if uses(i)]
    at = users[-1] + 1 if users else len(rest)
    while at < len(rest) and rest[at].path == rest[at - 1].path:  # that module's end
        at += 1
    return rest[:at] + down + rest[at:]


@pytest.fixture(scope="session")
def cluster():
    tb = Testbed(Topology(edge_nodes=3), progress=print)
    tb.up()
    _shared["cluster"] = tb
    yield tb
    _shared.pop("cluster", None)
    _log_marks.clear()
    tb.down()


def _log_sizes(tb: Testbed) -> dict[str, int]:
    return {
        name: node.system_log.stat().st_size if node.system_log.is_file() else 0
        for name, node in tb.nodes.items()
    }


def log_problems(tb: Testbed, marks: dict[str, int]) -> list[str]:
    """ERROR lines and exceptions in the shared cluster's logs since ``marks``."""
    found = []
    for name, node in tb.nodes.items():
        if not node.system_log.is_file():
            continue
        with open(node.system_log, "rb") as f:
            f.seek(marks.get(name, 0))
            text = f.read().decode(errors="replace")
        for line in text.splitlines():
            if LOG_PROBLEM.search(line):
                found.append(f"{name}: {line.strip()[:300]}")
    return found


@pytest.fixture(scope="module", autouse=True)
def every_clusters_logs_read(request):
    """Every cluster torn down during the module, in this process or in a command it ran
    (a sweep, `edgetb down`), had its nodes' logs read at teardown against the allow-list
    (``testbed.cassandra.logscan``, as cassandra-dtest scans every node's log after every
    test): an ERROR or exception no allowance explains fails the module. Set up before
    the module's own fixtures, so it is torn down after their clusters."""
    base = home()
    _, offset = logscan.journal_since(base, 0)
    yield
    lines, _ = logscan.journal_since(base, offset)
    provoked = [re.compile(rx) for rx, _reason in getattr(request.module, "NODE_LOG_EXPECTED", ())]
    bad = [ln for ln in lines if not _explained(ln, provoked)]
    if bad:
        shown = [f"cluster {ln['run_id']}: {line}" for ln in bad for line in ln["lines"]]
        pytest.fail(
            f"{sum(ln['unexpected'] for ln in bad)} unexpected ERROR/exception lines in the "
            f"node logs of {len(bad)} of the {len(lines)} clusters this module tore down "
            f"({base / logscan.JOURNAL}):\n" + "\n".join(shown[:20]),
            pytrace=False,
        )


def _explained(journaled: dict, provoked: list[re.Pattern]) -> bool:
    """Whether every unexpected line of a cluster's journal line is one its module
    provoked on purpose (``NODE_LOG_EXPECTED``: (pattern, reason) pairs); lines beyond
    those the journal shows are not known, so not explained."""
    shown = journaled["lines"]
    if journaled["unexpected"] > len(shown):
        return False
    return all(any(rx.search(line) for rx in provoked) for line in shown)


@pytest.fixture(scope="module", autouse=True)
def cassandra_logs_checked(request):
    """After each module that uses the shared cluster, its logs are scanned for ERROR
    lines and exceptions (as cassandra-dtest does) written since the last scan: during
    this module, or the modules without it that ran since (named with it); the logs are
    kept when a test failed."""
    tb = _shared.get("cluster")
    if tb is not None and tb.state is not None and not _log_marks:
        _log_marks.update(_log_sizes(tb))
    failed_before = request.session.testsfailed
    yield
    module = request.module.__name__.rsplit(".", 1)[-1]
    tb = _shared.get("cluster")
    if tb is not None:  # the modules since the last scan, while the cluster was up
        _unscanned.append(module)
    mine = any(uses_cluster(i) for i in request.session.items if i.module is request.module)
    if tb is None or tb.state is None or not mine:
        return
    problems = log_problems(tb, _log_marks)
    _log_marks.update(_log_sizes(tb))
    during = ", ".join(_unscanned)
    _unscanned.clear()
    if problems or request.session.testsfailed > failed_before:
        kept = home() / "logs" / f"{tb.run_id}-{module}"
        for name, node in tb.nodes.items():
            if node.system_log.parent.is_dir():
                shutil.copytree(node.system_log.parent, kept / name, dirs_exist_ok=True)
        print(f"\nshared cluster's Cassandra logs kept in {kept}")
    if problems:
        pytest.fail(
            f"{len(problems)} ERROR/exception lines in the shared cluster's logs during "
            f"{during}:\n" + "\n".join(problems[:20]),
            pytrace=False,
        )


# The guests' speed, measured on the first VMs this session boots (the shared ``vms``):
# ``factor`` = testbed.backends.libvirt.guest_slowness of their boots to SSH.
GUESTS: dict[str, float] = {}
# The VMs every VM test shares (issue 38: under TCG a boot costs a minute of both cores):
# two small edge VMs on two sites and the endpoint, no Cassandra; test_4 drives them
# through libvirt, then as an inventory of the hosts backend, test_5 sweeps on them
# through that backend, and its last test takes them down.
VM_SITES = "1,1"
# one vCPU each: under TCG two made every guest command slower (measured once each on
# the same tests: the hosts backend's `up` 203 s against 171 s, YCSB 105 s against 76 s)
VM_VCPUS, VM_MEMORY_MB = 1, 768
SMALL_VMS = ["--vm-vcpus", str(VM_VCPUS), "--vm-memory", str(VM_MEMORY_MB)]


@pytest.fixture(scope="session")
def vms():
    """``(run_id, up's output)`` of the session's shared VMs, booted on first use; down
    at the session's end unless a test took them down (test_5's last)."""
    from testbed import images

    images.load()  # `make test` builds the image first
    proc = run_cli("up", "--backend", "libvirt", "--sites", VM_SITES, "--no-cassandra",
                   *SMALL_VMS, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    run_id = run_id_in(proc.stdout)
    measure_guests(run_id)  # every later budget of the VM tests scales with it
    yield run_id, proc.stdout
    if (home() / "runs" / run_id).is_dir():  # the down test failed or was not selected
        down_leaves_nothing(run_id)


def down_leaves_nothing(run_id: str) -> None:
    """`down` of the VM run ``run_id`` succeeds and nothing of it is left."""
    proc = run_cli("down", "--run", run_id, timeout=vm_budget(300))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert_no_residue(run_id)


def pytest_terminal_summary(terminalreporter):
    """The guests' measured speed at the end of every session that booted VMs: what each
    VM budget was scaled by, shown whether the tests passed or not (issue 38)."""
    if GUESTS:
        terminalreporter.write_line(
            f"guests: last boot to SSH {GUESTS['boot_s']:.1f} s for {GUESTS['vms']:.0f} VMs, "
            f"{GUESTS['factor']:.2f}x the reference; VM budgets scaled by as much"
        )


def measure_guests(run_id: str) -> float:
    """The slowness of run ``run_id``'s VMs against the reference (at least 1), kept as
    the session's measure of its guests; printed, so a slow run says why it is slow."""
    from testbed.backends.libvirt import LibvirtRecord, guest_slowness

    rec = RunState.load(home() / "runs" / run_id).get(LibvirtRecord)
    assert rec is not None and rec.boot_to_ssh_s, run_id
    factor = guest_slowness(rec.boot_to_ssh_s)
    GUESTS.update(factor=factor, boot_s=max(rec.boot_to_ssh_s.values()),
                  vms=len(rec.boot_to_ssh_s))  # fmt: skip
    print(f"guests ({rec.accel}): last boot to SSH {GUESTS['boot_s']:.1f} s for "
          f"{len(rec.boot_to_ssh_s)} VMs: {factor:.2f}x the reference")  # fmt: skip
    return factor


def vm_budget(seconds: float) -> float:
    """``seconds`` (a time set on the development machine's guests) scaled to this
    machine's guests, as measured (unscaled before any VM booted)."""
    return seconds * GUESTS.get("factor", 1.0)


def guest_rtt_ok(
    rtt_ms: float, expected_rtt_ms: float, slack_ms: float = 0.0, base_ms: float = 0.0
) -> bool:
    """Whether a round trip shaped by netem inside the guests is the one asked for: not
    early by more than ``rtt_tolerance_ms`` (+ ``slack_ms``): both one-way delays were
    applied; and late by less than one more one-way delay (half the round trip): no
    delay was applied twice. Not a tighter upper bound: netem's timers in a TCG guest
    fire later the slower the guest runs, and how slow that is changes with the load
    beside it while the test runs (+12.5 ms on a 30 ms round trip with the other test
    session beside it, 2026-11-29, where a bound scaled by the guests' speed at boot
    failed); an unshaped round trip (``expected_rtt_ms`` 0) may be late by the tolerance
    scaled with that speed. ``base_ms``: the same path's unshaped round trip measured at
    the same moment, taken off for the upper bound only (netem never delivers early, so
    the lower bound needs none, and a base slowed by load cannot fail it)."""
    tolerance = rtt_tolerance_ms(expected_rtt_ms) + slack_ms
    late = expected_rtt_ms / 2 if expected_rtt_ms else vm_budget(tolerance)
    return -tolerance <= rtt_ms - expected_rtt_ms and rtt_ms - base_ms - expected_rtt_ms < late


def over_budget(argv: list[str], timeout: float) -> str:
    """The one line a command that ran past its budget fails with."""
    speed = (
        f"guests measured {GUESTS['factor']:.1f}x slower than the reference (last boot to "
        f"SSH {GUESTS['boot_s']:.0f} s for {GUESTS['vms']:.0f} VMs)"
        if GUESTS
        else "no guest speed measured"
    )
    command = " ".join(argv[2:])[:160]
    return f"`{command}` did not finish within its budget of {timeout:.0f} s ({speed})"


def _run(argv: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as exc:
        said = [
            out if isinstance(out, str) else out.decode(errors="replace")
            for out in (exc.stdout, exc.stderr)
            if out
        ]
        tail = "\n".join(said)[-1500:]
        pytest.fail(over_budget(argv, timeout) + ("\n" + tail if tail else ""), pytrace=False)


def edgetb(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `edgetb ARGS` (the project's command) as a user would."""
    return _run([sys.executable, "-m", "edgetb", *args], timeout)


def run_cli(
    *args: str, module: str = "testbed", run: str | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run `python -m MODULE ARGS [--run RUN]` as a user would; past ``timeout``, the
    test fails in one line naming the command, its budget and the guests' speed."""
    extra = ["--run", run] if run else []
    return _run([sys.executable, "-m", module, *args, *extra], timeout, env=os.environ.copy())


def ping_rtts_ms(output: str) -> list[float]:
    """The round trips iputils ping printed, in ms (``time=… ms`` of each reply)."""
    return [float(x) for x in re.findall(r"time=([\d.]+) ms", output)]


def assert_no_residue(run_id: str) -> None:
    """Nothing of run ``run_id`` is left (namespaces, processes, VMs, directory, registry)."""
    assert run_id
    left = residue(run_id)
    assert not any(left.values()), left


def sweep_failure(output: str, tail_chars: int = 2000) -> str:
    """A failed sweep's output as a test reports it: the sweep's own error lines first
    (``error: ...`` and "N of M cells stored"), then the tail of what it printed."""
    own = [
        line
        for line in output.splitlines()
        if line.startswith("error: ") or re.search(r"\d+ of \d+ cells stored", line)
    ]
    return (
        "\n".join(own or ["(the sweep printed no error line)"]) + "\n---\n" + output[-tail_chars:]
    )


def run_id_in(output: str) -> str:
    """The testbed run id a CLI printed ("run 3fa2c1: ..." or "run 3fa2c1 is up")."""
    match = re.search(r"\brun ([0-9a-f]{6})\b", output)
    assert match, output[-2000:]
    return match.group(1)


def refused_for_its_certificate(error: str) -> bool:
    """Whether a TLS client without a certificate was refused by the handshake: the
    alert says why, or, when the node closes before the client reads the alert (seen in
    CI beside other work, on a node's CQL port), the connection ends mid-protocol."""
    return "CERTIFICATE_REQUIRED" in error or "EOF occurred in violation of protocol" in error


def rtt_tolerance_ms(expected_rtt_ms: float) -> float:
    """How far a measured median RTT may be from the configured one: 2 ms of forwarding
    and scheduling (the netem gateway runs under TCG on the same two cores as the
    cluster) plus 3 % of the delay (netem's timers in a TCG guest fire late in
    proportion to load). 100 ms must read 95-105 ms: far from 0, 50 or 200."""
    return 2.0 + 0.03 * expected_rtt_ms
