"""The nemesis of a cell (as Jepsen calls it): a fault's schedule applied while the
cell's writes run (``Runner``: each step when due, recorded with when it was applied and
how long it took), then the testbed made whole again and timed (``whole_again``:
partitions healed, paused nodes continued, killed nodes started again, every node UN
seen from every node, no hints left). The faults themselves: ``experiments.settings.faults``."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from common.errors import TestbedError
from emulation import api as emulation_api
from emulation.links import LinkMatrix

from ..settings.faults import Fault, FaultError, Offset, faulted_matrix, window_ns

RECOVERY_TIMEOUT_S = 300.0
T = TypeVar("T")


@dataclass
class Runner:
    """Applies one cell's fault while its writes run: ``progress(done)`` from the writes'
    progress (and a timer thread for offsets in seconds) fires each step when it is due;
    ``finish()`` after the writes undoes what is still in effect; ``recover()`` makes the
    cluster whole (killed nodes started, all UN, hints delivered) and times it."""

    tb: Any
    fault: Fault
    writes: int
    base: LinkMatrix | None = None
    shaper: str = "auto"
    say: Callable[[str], None] = lambda _m: None
    events: list[dict[str, Any]] = field(default_factory=list)
    _t0: float | None = None
    _done: int = 0
    _steps: list[tuple[Offset, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    killed: set[str] = field(default_factory=set)
    starts: list[tuple[threading.Thread, dict[str, Any]]] = field(default_factory=list)
    paused: set[str] = field(default_factory=set)
    shaped: bool = False
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self.fault.check(self.tb.topology)
        if self.fault.kind in ("partition", "links") and self.base is None:
            raise FaultError(f"fault {self.fault.text!r} needs the cell's link matrix")
        self._steps = [(self.fault.start, "make")]
        if self.fault.end is not None:
            self._steps.append((self.fault.end, "heal"))

    def prepare(self) -> None:
        """Before the cell: the nodes it will kill or restart flush their memtables. The
        fast JVM profile (like ccm's tests) runs with ``cassandra.unsafesystem``: the
        system keyspaces skip the commit log, so a node killed -9 would come back
        without the schema created since its last flush ("keyspace ... does not exist"
        on every write it coordinates, seen here), which no production node would."""
        if self.fault.kind in ("kill", "restart"):
            for n in self.fault.nodes:
                self.tb.nodetool(n, "flush", timeout=120)

    def begin(self) -> None:
        """The measured writes start now."""
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._tick, name="fault", daemon=True)
        self._thread.start()
        self._fire()

    def progress(self, done: int) -> None:
        self._done = done
        self._fire()

    def _tick(self) -> None:
        while not self._stop.wait(0.02):
            try:
                self._fire()
            except Exception as exc:  # noqa: BLE001 - kept, raised by finish()
                self.error = self.error or exc
                return

    def _fire(self) -> None:
        if self._t0 is None:
            return
        with self._lock:
            elapsed = time.monotonic() - self._t0
            while self._steps and self._steps[0][0].due(self._done, self.writes, elapsed):
                offset, step = self._steps.pop(0)
                self._apply(step, offset)

    def _apply(self, step: str, offset: Offset) -> None:
        f, tb = self.fault, self.tb
        at_ns = time.time_ns()
        t = time.monotonic()
        what = f.kind if step == "make" else f"heal {f.kind}"
        try:
            if f.kind == "kill":
                for n in f.nodes:
                    if step == "make":
                        self.killed.add(n)  # first: the sweep's watch expects it dead
                        tb.nodes[n].signal(signal.SIGKILL)
                        tb.nodes[n].wait_exit(10)
                    else:
                        self._start_later(n)
            elif f.kind == "pause":
                for n in f.nodes:
                    tb.nodes[n].signal(signal.SIGSTOP if step == "make" else signal.SIGCONT)
                    (self.paused.add if step == "make" else self.paused.discard)(n)
            elif f.kind == "restart":
                for n in f.nodes:
                    self.killed.add(n)
                    self._start_later(n, stop_first=True)
            else:
                assert self.base is not None
                matrix = faulted_matrix(self.base, f) if step == "make" else self.base
                emulation_api.set_links(tb, matrix, self.shaper)
                self.shaped = step == "make"
        except TestbedError as exc:
            raise FaultError(f"fault {f.text!r}: {what} failed: {exc}") from exc
        took = time.monotonic() - t
        self.events.append(
            {
                "step": step,
                "what": what,
                "planned": str(offset),
                "at_ns": at_ns,
                "took_ms": round(took * 1000, 2),
                "writes_done": self._done,
                "elapsed_s": round(time.monotonic() - (self._t0 or t), 3),
            }
        )
        self.say(f"fault {f.text}: {what} at {self._done} writes ({took * 1000:.0f} ms)")

    def _start(self, name: str) -> None:
        self.tb.restart_node(name)
        self.killed.discard(name)

    def _start_later(self, name: str, *, stop_first: bool = False) -> None:
        """Start a node in a thread of its own: its start takes seconds, and the writes'
        progress (which calls this) must keep being read meanwhile. Its event gets the
        time the node served CQL again."""
        event: dict[str, Any] = {"what": f"start {name}", "at_ns": time.time_ns()}

        def start() -> None:
            t = time.monotonic()
            try:
                if stop_first:  # SIGTERM: Cassandra's own shutdown, then SIGKILL after 30 s
                    node = self.tb.nodes[name]
                    node.signal(signal.SIGTERM)
                    if not node.wait_exit(30):
                        node.signal(signal.SIGKILL)
                        node.wait_exit(10)
                    event["stopped_s"] = round(time.monotonic() - t, 3)
                self._start(name)
                event["ready_s"] = round(time.monotonic() - t, 3)
            except Exception as exc:  # noqa: BLE001 - recover() tries again, loudly
                event["error"] = (str(exc).splitlines() or [type(exc).__name__])[0]

        thread = threading.Thread(target=start, name=f"start-{name}", daemon=True)
        self.starts.append((thread, event))
        thread.start()

    def finish(self) -> None:
        """After the writes: the timer stopped; a partition healed and paused nodes
        continued at once (the rest is ``recover``'s)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for thread, event in self.starts:  # node starts under way: done, or failed
            thread.join(timeout=RECOVERY_TIMEOUT_S)
            self.events.append({"step": "started", **event})
        self.starts.clear()
        with self._lock:
            self._steps.clear()
            for n in sorted(self.paused):
                self.tb.nodes[n].signal(signal.SIGCONT)
            self.paused.clear()
            if self.shaped and self.base is not None:
                emulation_api.set_links(self.tb, self.base, self.shaper)
                self.shaped = False
        if self.error is not None:
            raise FaultError(f"fault {self.fault.text!r}: {self.error}") from self.error

    def recover(self, timeout_s: float = RECOVERY_TIMEOUT_S) -> dict[str, Any]:
        """Killed nodes started again, then every node UN as seen from every node and no
        hints pending anywhere; returns the timings and what nodetool said last."""
        restarted = sorted(self.killed)
        for n in restarted:
            if self.tb.nodes[n].alive():  # a start thread got it up after all
                self.killed.discard(n)
        out = whole_again(self.tb, sorted(self.killed), self._start, timeout_s)
        return {**out, "restarted": restarted}


HELD_SAMPLE = 5  # keys checked per node that was away: one nodetool call each
HELD_SETTLE_NS = 1_000_000_000  # writes this soon after the fault may have reached it
HELD_PATIENCE_S = 40.0  # hints Cassandra still buffers are in no pending list: wait


def away(fault: Fault, events: list[dict[str, Any]]) -> dict[str, tuple[int, int | None]]:
    """The nodes a kill, pause or restart took away, each with when (wall clock, ns) it
    went and came back (None: it was still away when the cell's writes ended)."""
    went, back = window_ns(events)
    if fault.kind not in ("kill", "pause", "restart") or went is None:
        return {}
    return {n: (went, back) for n in fault.nodes}


def writes_held(
    tb: Any,
    fault: Fault,
    events: list[dict[str, Any]],
    rows: list[dict[str, Any]],
    keyspace: str,
    table: str,
    fresh: bool,
    patience_s: float = HELD_PATIENCE_S,
) -> dict[str, dict[str, Any]]:
    """After ``recover``: does each node that was away hold the writes acknowledged
    without it (they reach it only as hints)? Up to HELD_SAMPLE of those keys, evenly
    spread over the outage (less its first second, when a write may still have reached
    the node itself), are looked up in the node's own SSTables after a flush
    (``nodetool getsstables``: that node's data only, whichever node a read would ask).
    A key not found yet is looked up again for ``patience_s``: Cassandra sends hints in
    periods of 10 s and lists none while it still buffers them. The cell's keys must be
    ``fresh`` on this cluster (never written before: an SSTable of an earlier write
    proves nothing): else nothing is checked. Per node: how many writes were
    acknowledged while it was away, how many were checked, how many it held, the keys
    it lacked."""
    out: dict[str, dict[str, Any]] = {}
    for node, (went, back) in away(fault, events).items():
        addr = tb.address(node)
        acked = [
            r
            for r in rows
            if r["error"] is None
            and addr in r["replicas"]
            and r["t_start_ns"] >= went
            and (back is None or r["t_start_ns"] < back)
        ]
        entry: dict[str, Any] = {"acknowledged": len(acked), "checked": 0, "held": 0}
        if not fresh:
            out[node] = {**entry, "missing": [], "skipped": "the cell's keys were written before"}
            continue
        later = [r["key"] for r in acked if r["t_start_ns"] >= went + HELD_SETTLE_NS]
        n = min(HELD_SAMPLE, len(later))
        picked = [later[(2 * i + 1) * len(later) // (2 * n)] for i in range(n)]
        try:
            missing = _not_in_sstables(tb, node, keyspace, table, picked, patience_s)
        except TestbedError as exc:  # a diagnostic: the cell was measured whole all the same
            entry["error"] = (str(exc).splitlines() or [type(exc).__name__])[0]
            out[node] = {**entry, "missing": []}
            continue
        out[node] = {**entry, "checked": n, "held": n - len(missing), "missing": missing}
    return out


def _not_in_sstables(
    tb: Any, node: str, keyspace: str, table: str, keys: list[str], patience_s: float
) -> list[str]:
    """The ``keys`` that ``node``'s SSTables of the table still lack after ``patience_s``
    (flushed first, each time)."""
    deadline = time.monotonic() + patience_s
    missing = list(keys)
    while missing:
        tb.nodetool(node, "flush", keyspace, table, timeout=120)
        missing = [
            key
            for key in missing
            if not any(
                ln.strip().endswith("-Data.db")
                for ln in tb.nodetool(
                    node, "getsstables", keyspace, table, key, timeout=60
                ).splitlines()
            )
        ]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(5)
    return missing


def whole_again(
    tb: Any,
    dead: list[str],
    start: Callable[[str], Any],
    timeout_s: float = RECOVERY_TIMEOUT_S,
) -> dict[str, Any]:
    """The cluster whole again: the ``dead`` nodes started (``start``), then every node
    UN as seen from every node, one schema version (a killed node may come back without
    the schema changes it had not flushed, ``unsafesystem``, and refuses a keyspace
    until it has pulled them), and no hints pending anywhere (a node that was away is
    sent the writes it missed; a measurement during that would share the links with
    them). Returns the timings and what nodetool said last (FaultError on timeout)."""
    t0 = time.monotonic()
    out: dict[str, Any] = {"restarted": list(dead)}
    for n in dead:
        start(n)
    out["restart_s"] = round(time.monotonic() - t0, 3)
    deadline = time.monotonic() + timeout_s
    nodes = [h.name for h in tb.topology.edges]
    views = _until(
        lambda: {n: tb.status_from(n) for n in nodes},
        lambda views: all(
            all(v == "UN" for v in view.values()) and len(view) == len(nodes)
            for view in views.values()
        ),
        deadline,
        lambda views: f"the cluster is not whole {timeout_s:g} s after the cell: {views}",
    )
    out["all_up_s"] = round(time.monotonic() - t0, 3)
    _until(
        lambda: schema_versions(tb.nodetool(nodes[0], "describecluster", timeout=60)),
        lambda versions: len(versions) == 1,
        deadline,
        lambda versions: (
            f"the nodes disagree on the schema {timeout_s:g} s after the cell: {versions}"
        ),
    )
    out["schema_agreed_s"] = round(time.monotonic() - t0, 3)
    hints = _until(
        lambda: {n: tb.nodetool(n, "listpendinghints", timeout=60).strip() for n in nodes},
        lambda hints: all(_no_hints(text) for text in hints.values()),
        deadline,
        lambda hints: f"hints still pending {timeout_s:g} s after the cell: {hints}",
    )
    out["hints_delivered_s"] = round(time.monotonic() - t0, 3)
    out["nodetool"] = {"status": views, "listpendinghints": hints}
    return out


def _until(
    look: Callable[[], T],
    done: Callable[[T], bool],
    deadline: float,
    failure: Callable[[T], str],
) -> T:
    """``look`` once a second until ``done`` with what it saw (returned); FaultError with
    ``failure`` of the last look once past ``deadline`` (monotonic)."""
    while True:
        seen = look()
        if done(seen):
            return seen
        if time.monotonic() > deadline:
            raise FaultError(failure(seen))
        time.sleep(1)


def schema_versions(describecluster: str) -> list[str]:
    """The schema versions ``nodetool describecluster`` lists (one line each, under
    "Schema versions:", ``<uuid>: [addresses]``); UNREACHABLE counts as one."""
    out, inside = [], False
    for line in describecluster.splitlines():
        if line.strip().startswith("Schema versions:"):
            inside = True
        elif inside and ": [" in line:
            out.append(line.split(":", 1)[0].strip())
        elif inside and line.strip() and not line.startswith((" ", "\t")):
            break  # the next section
    return out


def _no_hints(text: str) -> bool:
    """``nodetool listpendinghints``: "This node does not have any pending hints" or a
    table with a header line and one line per target."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return not lines or "does not have any pending hints" in text or len(lines) <= 1
