"""A Cassandra node that dies at any moment of a cell is started again and the cell
measured again; the sweep never ends on it as "the testbed broke".

The sweep's own code runs here (``units.measure_unit``, ``measure``, ``Conditions``,
``watch.check_components``, ``recover``, ``Testbed.restart_node``,
``CassandraNode.alive``); the JVM is a real process standing in for one (its command
line carries the node's marker), and the writer, the shaper, the store and nodetool are
fakes. A JVM killed with ``kill -9`` dies in two steps: its main thread is a zombie at
once (``/proc``: Z, no command line) while its ~100 other threads still exit, and only
then can waitpid() see it. The stand-in dies the same way on SIGUSR1 (its main thread
exits alone, a second thread lingers until the test closes its stdin: ``release``), so
the window the race lived in is held open for as long as the test needs, whatever the
machine's load, instead of being hit by chance.
"""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from common.procs import pid_alive
from experiments.plan import shards as plan
from experiments.run import nemesis, units, watch
from experiments.run.watch import ComponentLost, NodeLost
from experiments.settings.cells import Cell
from experiments.settings.config import SweepConfig
from testbed.cassandra import readiness
from testbed.cassandra.node import CassandraNode
from testbed.testbed import Testbed
from testbed.topology import Host
from workloads import readback

pytestmark = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "aarch64") or not Path("/proc/self/task").is_dir(),
    reason="needs Linux /proc and a known exit(2) syscall number",
)

SYS_EXIT = {"x86_64": 60, "aarch64": 93}.get(platform.machine(), 60)

# The stand-in JVM: on SIGUSR1 its main thread exits alone (exit(2), not exit_group)
# while another thread lives on until its stdin closes, as a killed JVM's threads
# outlive its main thread; SIGKILL ends it at once.
STAND_IN = f"""
import ctypes, os, signal, sys, threading, time
def die_slowly(*_):
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(137))).start()
    ctypes.CDLL(None).syscall({SYS_EXIT}, 0)
signal.signal(signal.SIGUSR1, die_slowly)
print("up", flush=True)
while True:
    time.sleep(1)
"""

WRITES = 20


class StandInNode(CassandraNode):
    """A node whose "JVM" is the stand-in process (started with the node's marker)."""

    def start(self, **_: Any) -> int:
        self.process = subprocess.Popen(
            [sys.executable, "-c", STAND_IN, f"-D{self.marker}"],
            stdout=subprocess.PIPE,
            stdin=subprocess.PIPE,
            text=True,
        )
        STARTED.append(self.process)
        assert self.process.stdout is not None
        assert self.process.stdout.readline() == "up\n"
        self.pid = self.process.pid
        return self.pid


STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _end_stand_ins():
    yield
    for proc in STARTED:  # only what this module started, by PID
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
    STARTED.clear()
    DYING.clear()


DYING: list[subprocess.Popen] = []  # stand-ins held between their two deaths


def release() -> None:
    """Let every stand-in held dying finish dying (its last thread exits)."""
    for proc in DYING:
        assert proc.stdin is not None
        proc.stdin.close()
    DYING.clear()


def die(node: CassandraNode, how: str) -> None:
    """End the node's process: ``at once`` (SIGKILL, reaped by nobody yet) or ``slowly``
    (held in the state between its main thread's death and its last thread's)."""
    assert node.pid is not None
    if how == "at once":
        os.kill(node.pid, signal.SIGKILL)
        while pid_alive(node.pid):
            time.sleep(0.005)
        return
    os.kill(node.pid, signal.SIGUSR1)
    while pid_alive(node.pid):  # the main thread is a zombie: /proc says Z
        time.sleep(0.005)
    assert node.process is not None and node.process.poll() is None  # waitpid: not yet
    DYING.append(node.process)


class Bed:
    """The part of a Testbed the cell's code uses; ``restart_node`` is the real one."""

    backend_name = "netns"
    restart_node = Testbed.restart_node

    def __init__(self, tmp: Path):
        edges = [Host(f"e{i}", "edge", f"10.9.0.{i + 2}", 24) for i in range(3)]
        endpoint = Host("endpoint", "endpoint", "10.9.0.1", 24)
        self.topology = SimpleNamespace(edges=edges, hosts=[*edges, endpoint], endpoint=endpoint)
        self.run_id = "deadbeef"
        self.state = SimpleNamespace(processes={}, save=lambda: None, get=lambda _cls: None)
        self.settings, self.java, self.dist = object(), object(), object()
        self.backend = SimpleNamespace(exec_argv=lambda _host, argv: list(argv))
        self.deadlines = None
        self.nodes: dict[str, StandInNode] = {}
        self.inside_problems: list = []  # called inside problems(): a death mid-check
        for host in edges:
            node = StandInNode(host, tmp / host.name, self.run_id)
            node.start()
            self.nodes[host.name] = node
            self.state.processes[host.name] = {"pid": node.pid, "marker": node.marker}

    def problems(self) -> list[str]:
        """As ``testbed.state_problems`` reads a run: each recorded process by PID."""
        for hook in self.inside_problems:
            hook()
        self.inside_problems = []
        return [
            f"{name}: process {proc['pid']} is not running"
            for name, proc in self.state.processes.items()
            if not pid_alive(proc["pid"], proc["marker"])
        ]


class Writer:
    """The endpoint's writer: warm-up, then ``writes`` rows, the sweep's watch called
    between batches as ``WriteWorker`` calls it while it waits; ``hooks`` run at a point."""

    def __init__(self, tb: Bed, hooks: dict[str, Any]):
        self.tb, self.hooks = tb, hooks
        self.watch = watch.component_watch(tb, every_s=0.0)  # type: ignore[arg-type]
        self.hello = {"driver": "fake"}

    def _at(self, point: str) -> None:
        hook = self.hooks.pop(point, None)
        if hook is not None:
            hook()
        self.watch()

    def run(self, *, writes: int, on_progress=None, on_measuring=None, **_: Any) -> list[dict]:
        self._at("warm-up")
        assert on_measuring is not None and on_progress is not None
        on_measuring()
        rows = []
        for seq in range(writes):
            if seq == writes // 2:
                self._at("writes")
            rows.append(
                {
                    "seq": seq,
                    "key": f"k{seq}",
                    "coordinator": "10.9.0.2",
                    "replicas": ["10.9.0.2"],
                    "rtt_ns": 1_000_000,
                    "error": None,
                    "t_start_ns": seq,
                }  # fmt: skip
            )
            on_progress(len(rows))
        hook = self.hooks.pop("after the writes", None)  # after the writer's last look
        if hook is not None:
            hook()
        return rows

    def readback(self, keyspace: str, rows: list[dict], settle_s: float) -> dict:
        """The read-back of the acknowledged writes: the sweep's watch called while it
        waits, as ``WriteWorker`` does; every write found on its replica."""
        self._at("read-back")
        acked = sum(r["error"] is None for r in rows)
        return readback.summary(acked, {"10.9.0.2": {r["key"]: "ok" for r in rows}}, {}, {})

    def abort(self) -> None:
        pass


class Shard:
    """``scheduler.Shard`` as a cell sees it; the sweep, its gate and store are records."""

    def __init__(self, tb: Bed, hooks: dict[str, Any]):
        self.name, self.tb, self.hooks = "s1", tb, hooks
        self.config = SweepConfig(nodes=(3,), rf=(1,), latency_ms=(20.0,), loss_pct=(0.5,))
        self.loaded: set[str] = set()
        self.seeds: dict[str, set[str]] = {}
        self.fault = None
        self.restarts: Counter[str] = Counter()
        self.notes: list[str] = []
        self.committed: list[str] = []
        self.manifest: dict[str, Any] = {}
        self.sweep = SimpleNamespace(
            run_id="run1",
            gate=SimpleNamespace(capacity=2.0, hold=lambda *a, **k: contextlib.nullcontext()),
            progress=SimpleNamespace(
                **{
                    n: lambda *a, **k: None
                    for n in ("shard_status", "cell_started", "wrote", "cell_done", "note")
                }
            ),  # fmt: skip
            stop=threading.Event(),
            lock=threading.Lock(),
            faults=[],
            finished=set(),
            on_cell=None,
            store=SimpleNamespace(
                commit_cell=lambda cell, *a, **k: self.committed.append(cell["cell_id"]),
                update_manifest=lambda _run, **entries: self.manifest.update(entries),
            ),
        )
        self.worker: Writer | None = self.start_worker()

    def note(self, message: str) -> None:
        self.notes.append(message)

    def start_worker(self) -> Writer:
        return Writer(self.tb, self.hooks)


def whole_again(tb: Bed, dead: list[str], start) -> dict[str, Any]:
    """nemesis.whole_again without nodetool: the dead started, the cluster taken as UN.
    A stand-in held dying is let go here, as late as the sweep could ever look at it."""
    release()
    for name in dead:
        start(name)
    return {"restarted": list(dead), "restart_s": 0.1, "all_up_s": 0.2, "hints_delivered_s": 0.3}


@pytest.fixture
def bed(tmp_path, monkeypatch):
    monkeypatch.setattr(nemesis, "whole_again", whole_again)
    monkeypatch.setattr(readiness, "wait_for_nodes", lambda *a, **k: None)
    monkeypatch.setattr(watch.emulation, "problems", lambda tb, thorough=False: [])
    tb = Bed(tmp_path)
    monkeypatch.setattr(watch.RunState, "load", staticmethod(lambda _dir: tb.state))
    tb.state.run_dir = tmp_path
    return tb


def unit_of(cfg: SweepConfig) -> plan.Unit:
    cell = Cell(nodes=3, rf=1, latency_ms=20.0, loss_pct=0.5, repetition=1)
    return plan.Unit(nodes=3, network=(20.0, 0.5), cells=(cell,), cost_s=1.0, demand=1.0)


MOMENTS = [
    "verification", "warm-up", "writes", "after the writes", "inside the check", "read-back",
]  # fmt: skip


@pytest.mark.parametrize("how", ["at once", "slowly"])
@pytest.mark.parametrize("moment", MOMENTS)
def test_a_node_that_dies_at_any_moment_of_a_cell_is_restarted_and_the_cell_measured_again(
    bed, monkeypatch, moment, how
):
    node = bed.nodes["e1"]
    old_pid = node.pid
    kill = lambda: die(node, how)  # noqa: E731
    hooks: dict[str, Any] = {}
    if moment == "inside the check":  # between the run's process check and the nodes'
        hooks["after the writes"] = lambda: bed.inside_problems.append(kill)
    elif moment != "verification":
        hooks[moment] = kill
    set_network_calls = []

    def set_network(shard, cell):  # the cell's shaping set and one pair verified
        set_network_calls.append(cell.cell_id)
        if moment == "verification" and len(set_network_calls) == 1:
            kill()
        return {"shaper": "host", "matrix": {}, "measured": None}

    monkeypatch.setattr(units, "set_network", set_network)
    shard = Shard(bed, hooks)

    units.measure_unit(shard, unit_of(shard.config))  # type: ignore[arg-type]

    assert not hooks, f"the death was never staged: {hooks}"
    assert shard.committed == ["n3-rf1-l20-p0.5-r1"]  # measured again, stored once
    assert len(set_network_calls) == 2  # the cell's network set again after the restart
    (fault,) = shard.sweep.faults
    assert fault["node"] == "e1" and "e1: Cassandra died" in fault["problem"]
    assert fault["restarted"] == ["e1"] and shard.restarts == Counter({"e1": 1})
    assert bed.faulted  # its peers' lines of its death are expected when the logs are read
    assert node.pid != old_pid and node.alive()
    assert bed.state.processes["e1"]["pid"] == node.pid
    assert not _threads_of(old_pid)  # started again only once the old one had gone


def _threads_of(pid: int) -> list[str]:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []
    return [t for t in tasks if pid_alive(int(t))]


def test_a_dying_jvm_is_dead_to_every_look_at_once(bed):
    """The window itself: the main thread gone, waitpid() still blind. The node, the
    run's process check and the sweep's component check all say dead."""
    node = bed.nodes["e2"]
    die(node, "slowly")
    assert not node.alive()
    assert not node.gone()  # its last thread still exits: not yet restartable
    assert any(p.startswith("e2: process ") for p in bed.problems())
    with pytest.raises(NodeLost) as lost:
        watch.check_components(bed)
    assert lost.value.node == "e2" and lost.value.recoverable
    assert not node.wait_exit(0.2)  # held: still exiting
    release()
    assert node.wait_exit(30) and node.gone()


def test_a_broken_testbed_that_is_not_a_dead_node_still_ends_the_sweep(bed):
    """Only a node's own death is a node lost: another broken process is not restarted."""
    bed.state.processes["endpoint-dns"] = {"pid": 2**22 + 1, "marker": "not-running"}
    with pytest.raises(ComponentLost) as lost:
        watch.check_components(bed)
    assert not isinstance(lost.value, NodeLost) and not lost.value.recoverable
    assert "endpoint-dns: process" in str(lost.value)


def test_a_node_just_started_is_alive_before_its_command_line_is_the_jvms(tmp_path):
    """Between fork and exec a child's command line is its parent's, without the node's
    marker: a node started a moment ago is alive all the same (its PID is ours)."""
    node = StandInNode(Host("e0", "edge", "10.9.0.2", 24), tmp_path, "deadbeef")
    node.process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                    stdin=subprocess.PIPE)  # fmt: skip
    STARTED.append(node.process)
    node.pid = node.process.pid
    assert not pid_alive(node.pid, node.marker)  # the marker is not (yet) there
    assert node.alive() and not node.gone()
