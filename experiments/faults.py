"""Faults during a measurement: a schedule per cell, applied while its writes run, and
the testbed made whole again afterwards (timed and stored).

A fault is one of (offsets in % of the cell's writes, or in seconds since its measured
writes began; ``@A-B``: made at A, healed at B; without B it lasts to the cell's end):

    none
    kill:e1@30%               kill -9 of e1's JVM (restarted after the cell)
    kill:e1@30%-70%           ... restarted at 70 %
    pause:e1@30%-60%          SIGSTOP, then SIGCONT (a node that stalls: GC, swap, I/O)
    restart:e1@30%            SIGTERM, then started again at once (a rolling restart)
    partition:e0,e1|e2,e3,e4@20%-60%   the groups cut apart by 100 % loss (the shaper);
                              the endpoint stays connected unless a group names it
    links:e0-e1,e1-e2:delay=200,loss=10@20%-60%   those links (both directions) set
                              so for the period (the shaper; jitter= and rate= too)

The runner records when each step was applied (wall clock, ns) and how long it took,
so every request of the cell — which records its start, coordinator and replicas — can
be placed before, during or after it. After the cell: partitions healed, paused nodes
continued, killed nodes started again, then every node UN seen from every node and no
hints left (``nodetool``), with the time that took.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from emulation import api as emulation_api
from emulation.links import Link, LinkMatrix
from testbed.errors import ConfigError, TestbedError

KINDS = ("kill", "pause", "restart", "partition", "links")
NONE = "none"
_WHEN = re.compile(r"^(\d+(?:\.\d+)?)(%|s)$")
RECOVERY_TIMEOUT_S = 300.0
T = TypeVar("T")


class FaultError(TestbedError):
    """A fault could not be applied, or the testbed not made whole again."""


@dataclass(frozen=True)
class Offset:
    value: float  # a fraction of the writes (unit "%") or seconds (unit "s")
    unit: str

    @classmethod
    def parse(cls, text: str, spec: str) -> Offset:
        m = _WHEN.match(text.strip())
        if not m:
            raise ConfigError(f"fault {spec!r}: offset {text!r} is not like 30% or 5s")
        value, unit = float(m.group(1)), m.group(2)
        if unit == "%":
            if not 0 <= value <= 100:
                raise ConfigError(f"fault {spec!r}: {text} is not within 0-100 %")
            return cls(value / 100, "%")
        return cls(value, "s")

    def due(self, done: int, writes: int, elapsed_s: float) -> bool:
        if self.unit == "%":
            return done >= self.value * writes
        return elapsed_s >= self.value

    def __str__(self) -> str:
        return f"{self.value * 100:g}%" if self.unit == "%" else f"{self.value:g}s"


@dataclass(frozen=True)
class Fault:
    """One fault of a cell (see the module's grammar)."""

    text: str
    kind: str
    nodes: tuple[str, ...] = ()
    groups: tuple[tuple[str, ...], ...] = ()
    pairs: tuple[tuple[str, str], ...] = ()
    values: tuple[tuple[str, float], ...] = ()  # a links fault's settings (the rest: the cell's)
    start: Offset = Offset(0.0, "%")
    end: Offset | None = None

    @property
    def label(self) -> str:
        """The fault in cell ids and paths, one to one with its text: kill:e1@30% ->
        kill_e1@30p, partition:e0,e1|e2@20%-60% -> partition_e0.e1+e2@20p-60p."""
        text = self.text.lower().replace(" ", "")
        for a, b in ((":", "_"), (",", "."), ("|", "+"), ("%", "p"), ("=", "~")):
            text = text.replace(a, b)
        return re.sub(r"[^a-z0-9._+@~\-]", "_", text)

    def hosts(self) -> set[str]:
        return {
            *self.nodes,
            *(h for g in self.groups for h in g),
            *(h for p in self.pairs for h in p),
        }

    def check(self, topology: Any) -> None:
        """ConfigError for a host the topology lacks, or a node fault on the endpoint."""
        names = {h.name for h in topology.hosts}
        unknown = sorted(self.hosts() - names)
        if unknown:
            raise ConfigError(
                f"fault {self.text!r}: unknown host {unknown[0]!r} on {topology.edge_nodes} "
                f"nodes (hosts: {', '.join(sorted(names))})"
            )
        if self.kind in ("kill", "pause", "restart"):
            edges = {h.name for h in topology.edges}
            if not set(self.nodes) <= edges:
                raise ConfigError(f"fault {self.text!r}: only edge nodes run Cassandra")


def parse(text: str) -> Fault | None:
    """A fault from its text (None for ``none``); ConfigError (one line) otherwise."""
    spec = str(text).strip()
    if spec.lower() == NONE:
        return None  # NONE, None: the same
    kind, sep, rest = spec.partition(":")
    if not sep or kind not in KINDS:
        raise ConfigError(
            f"unknown fault {spec!r}: none, or {', '.join(k + ':...' for k in KINDS)} "
            f"(e.g. kill:e1@30%, partition:e0,e1|e2@20%-60%)"
        )
    what, at, when = rest.rpartition("@")
    if not at or not what:
        raise ConfigError(f"fault {spec!r}: say when, e.g. {kind}:...@30% or @20%-60%")
    first, dash, second = when.partition("-")
    start = Offset.parse(first, spec)
    end = Offset.parse(second, spec) if dash else None
    if end is not None and (end.unit != start.unit or end.value <= start.value):
        raise ConfigError(f"fault {spec!r}: the end {end} must come after the start {start}")
    if kind in ("kill", "pause", "restart"):
        nodes = tuple(n.strip() for n in what.split(",") if n.strip())
        if not nodes:
            raise ConfigError(f"fault {spec!r}: which nodes?")
        if kind == "restart" and end is not None:
            raise ConfigError(f"fault {spec!r}: a restart happens at one offset, not a period")
        return Fault(spec, kind, nodes=nodes, start=start, end=end)
    if kind == "partition":
        groups = tuple(tuple(h.strip() for h in g.split(",") if h.strip()) for g in what.split("|"))
        if len(groups) < 2 or not all(groups):
            raise ConfigError(f"fault {spec!r}: at least two groups, e.g. e0,e1|e2")
        flat = [h for g in groups for h in g]
        if len(flat) != len(set(flat)):
            raise ConfigError(f"fault {spec!r}: a host is in two groups")
        return Fault(spec, kind, groups=groups, start=start, end=end)
    pairs_text, colon, settings = what.partition(":")
    if not colon:
        raise ConfigError(f"fault {spec!r}: links:e0-e1:delay=200,loss=10@20%-60%")
    pairs = []
    for p in pairs_text.split(","):
        a, dash2, b = p.strip().partition("-")
        if not dash2 or not a or not b or a == b:
            raise ConfigError(f"fault {spec!r}: {p!r} is not a link like e0-e1")
        pairs.append((a, b))
    values: dict[str, float] = {}
    names = {"delay": "delay_ms", "jitter": "jitter_ms", "loss": "loss_pct", "rate": "rate_mbit"}
    for item in settings.split(","):
        k, eq, v = item.partition("=")
        if not eq or k.strip() not in names:
            raise ConfigError(
                f"fault {spec!r}: {item!r} is not one of delay=, jitter=, loss=, rate="
            )
        try:
            values[names[k.strip()]] = float(v.strip().removesuffix("ms").removesuffix("%"))
        except ValueError:
            raise ConfigError(f"fault {spec!r}: {v!r} is not a number") from None
    Link(**values)  # the values alone must make a link (0..100 % loss, jitter <= delay)
    return Fault(
        spec, "links", pairs=tuple(pairs), values=tuple(values.items()), start=start, end=end
    )


def split_list(text: str) -> list[str]:
    """``--fault`` values: commas separate faults, but a partition's groups have commas of
    their own, so a piece that starts no fault belongs to the one before it."""
    out: list[str] = []
    for piece in str(text).split(","):
        head = piece.strip().split(":", 1)[0].lower()
        if out and head not in (*KINDS, NONE):
            out[-1] += "," + piece
        else:
            out.append(piece.strip())
    return [p for p in out if p]


def faulted_matrix(base: LinkMatrix, fault: Fault) -> LinkMatrix:
    """The cell's matrix with the fault's partition or link settings on top."""
    links = {(s, d): base.link(s, d) for s in (h.name for h in base.topology.hosts)
             for d in (h.name for h in base.topology.hosts) if s != d}  # fmt: skip
    cut = Link(loss_pct=100.0)
    if fault.kind == "partition":
        where = {h: i for i, g in enumerate(fault.groups) for h in g}
        for s, d in list(links):
            if s in where and d in where and where[s] != where[d]:
                links[(s, d)] = cut
    elif fault.kind == "links":
        for a, b in fault.pairs:  # the fault's values over the cell's: the rest stays
            for s, d in ((a, b), (b, a)):
                links[(s, d)] = Link(**{**asdict(links[(s, d)]), **dict(fault.values)})
    return LinkMatrix(
        base.topology, {k: v for k, v in links.items() if v.shaped}, profile=base.profile
    )


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
