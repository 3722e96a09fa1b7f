"""A cell's conditions: the link trace replayed and the fault applied while its workload
runs, as one context manager (the nemesis beside the client, as Jepsen composes them).

    with Conditions(shard, cell) as around:
        ...warm-up...
        around.measuring()         # the trace starts, the fault begins
        around.wrote(n)            # progress; the fault follows the writes
    around.cpu, around.trace_log, around.fault_log
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Protocol

from emulation import api as emulation
from emulation import shapers
from emulation.trace import Replay
from emulation.trace import load as load_trace
from testbed import Testbed

from ..plan import shards as plan
from ..settings import faults
from ..settings.cells import Cell
from ..settings.config import SweepConfig
from . import nemesis
from .launch import cpu_busy, cpu_times
from .watch import ComponentLost


class Shard(Protocol):
    """What a workload uses of the testbed slot measuring it (``scheduler.Shard``)."""

    name: str
    config: SweepConfig
    sweep: Any  # scheduler.Sweep: store, run id, progress, lock
    tb: Testbed | None
    worker: Any  # workloads.WriteWorker, the endpoint's write process
    loaded: set[str]  # YCSB keyspaces loaded on this cluster
    seeds: dict[str, set[str]]  # keyspace -> the key seeds its cells used, on this cluster
    fault: Any  # the running cell's nemesis.Runner
    restarts: Counter[str]  # nodes started again after they died, on this testbed

    def note(self, message: str) -> None: ...

    def start_worker(self) -> Any: ...


class Conditions:
    """The cell's link trace and fault around its timed writes. The trace starts and the
    fault begins when the warm-up ends (``measuring``); the fault follows the writes
    (``wrote``). On leaving, whatever happened: the trace stopped and the cell's links
    back, the partition healed, paused nodes continued, each step tried even when another
    failed. A failure, or a step that failed, voids the cell (its cluster whole again for
    the next attempt, unless the sweep is stopping); else the fault's recovery is timed.
    ``cpu``: the machine's busy share while the cell ran; ``trace_log``, ``fault_log``."""

    def __init__(self, shard: Shard, cell: Cell):
        self.shard, self.cell = shard, cell
        self.cpu0 = cpu_times()  # the cell's CPU window opens before its fault is prepared
        self.fault = shard.fault = fault_runner(shard, cell)
        if self.fault is not None and shard.tb is not None:
            shard.tb.faulted = True  # its peers' logs will tell of it (logscan)
        self.replay = trace_replay(shard.tb, cell)
        self.trace_log: dict[str, Any] | None = None
        self.fault_log: dict[str, Any] | None = None
        self.cpu: float | None = None

    def measuring(self) -> None:
        if self.replay is not None:
            self.replay.start()
        if self.fault is not None:
            self.fault.begin()

    def wrote(self, n: int) -> None:
        self.shard.sweep.progress.wrote(self.shard.name, n)
        if self.fault is not None:
            self.fault.progress(n)

    def __enter__(self) -> Conditions:
        return self

    def __exit__(self, _type: Any, failed: BaseException | None, _tb: Any) -> None:
        shard, cell, fault, replay = self.shard, self.cell, self.fault, self.replay
        problems: list[str] = []
        if replay is not None and shard.tb is not None:
            try:
                self.trace_log = replay.stop()
                emulation.set_links(shard.tb, replay.base, replay_shaper(shard.tb))
                if self.trace_log["error"]:
                    problems.append(f"the link trace failed: {self.trace_log['error']}")
            except Exception as exc:  # noqa: BLE001 - the cell fails below, with this
                problems.append(f"restoring the links after the trace: {exc}")
        if fault is not None:
            try:
                fault.finish()
            except Exception as exc:  # noqa: BLE001 - the cell fails below, with this
                problems.append(str(exc))
        if failed is not None or problems:
            if fault is not None and not isinstance(failed, (KeyboardInterrupt, plan.Stopped)):
                try:
                    fault.recover()
                except Exception as exc:  # noqa: BLE001 - the check after says what is broken
                    shard.note(f"fault {cell.fault}: the cluster is not whole again: {exc}")
            shard.fault = None
            if failed is not None:
                return  # raised as it is
            raise ComponentLost("; ".join(problems), recoverable=True)
        if self.trace_log is not None:
            t = self.trace_log
            shard.note(
                f"trace {cell.trace}: {t['applied']} of {t['steps']} steps, "
                f"at most {t['max_late_ms'] or 0:.1f} ms off schedule"
            )
        self.cpu = cpu_busy(self.cpu0, cpu_times())
        if fault is not None:  # the testbed whole again before its check and the next cell
            if not fault.events:
                shard.note(f"fault {cell.fault}: never due (the writes ended first)")
            try:
                recovery = fault.recover()
            finally:
                shard.fault = None
            shard.note(
                f"recovered from {cell.fault} in {recovery['hints_delivered_s']:.1f} s "
                f"(restart {recovery['restart_s']:.1f} s, all UN {recovery['all_up_s']:.1f} s)"
            )
            self.fault_log = {"fault": cell.fault, "events": fault.events, "recovery": recovery}


def replay_shaper(tb: Testbed | None) -> str:
    """The shaper the testbed's links were set with (a trace or a fault changes them the
    same way)."""
    assert tb is not None
    return shapers.emulation(tb).shaper or "auto"


def trace_replay(tb: Testbed | None, cell: Cell) -> Any:
    """The cell's link trace, ready to replay from its first measured write."""
    if cell.trace == "none":
        return None
    assert tb is not None
    shaper = shapers.for_testbed(tb, replay_shaper(tb))
    return Replay(load_trace(cell.trace), emulation.configured(tb), shaper.apply, shaper.close)


def fault_runner(shard: Shard, cell: Cell) -> Any:
    """The cell's fault, ready to apply while its writes run (None: no fault)."""
    fault = faults.parse(cell.fault)
    if fault is None:
        return None
    tb = shard.tb
    assert tb is not None
    runner = nemesis.Runner(
        tb,
        fault,
        shard.config.writes,
        base=emulation.configured(tb),
        shaper=replay_shaper(tb),
        say=shard.note,
    )
    runner.prepare()
    return runner
