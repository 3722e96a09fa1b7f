"""How a sweep spreads its cells over P testbeds on one machine (pure: no testbed here).

The running sweep (``scheduler``) and its estimate (``--dry-run``) use the same rules:

- **Units.** The cells of one network setting (node count, repetition, latency, loss)
  form a unit: one emulation change and one check, then one cell per RF. A unit's cost
  is the model's time (``estimate``); its CPU demand is what its writes cost the machine
  in cores (``estimate.cpu_cores``), the highest of its cells.
- **Longest first.** Each testbed ("shard") takes the longest unit left of its own node
  count; when none is left it moves to the node count with the most work per testbed
  serving it, if that work is worth a bring-up, and otherwise it is done.
- **The machine gate.** A unit is measured only while the demands of the units being
  measured fit ``capacity`` cores (the sweep's budget less the idle cost of the testbeds
  up at that moment); a unit that does not fit even alone is measured alone (the 0 ms and other
  CPU-bound cells, the per-testbed baseline). Set-up work (bring-up, gateway boot,
  warm-up) is CPU-heavy and never overlaps a measurement; up to ``setup_slots`` set-ups
  run together. Requests are admitted in arrival order, so a waiting unit is never
  overtaken (no starvation).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..settings.cells import Cell

EXCLUSIVE = float("inf")  # a demand that runs alone


@dataclass(frozen=True)
class Unit:
    """The cells of one network setting, measured one after another on one testbed."""

    nodes: int
    network: tuple
    cells: tuple[Cell, ...]
    cost_s: float  # the model's time for the unit (its emulation check and cells)
    demand: float  # cores its writes keep busy (EXCLUSIVE: measured alone)
    phase: int = 0  # units of a lower phase are handed out first (the sweep's first pass)

    @property
    def label(self) -> str:
        c = self.cells[0]
        return f"n={c.nodes} L={c.latency_ms:g}ms p={c.loss_pct:g}% rep {c.repetition}"


def units(
    cells: Sequence[Cell],
    cost_s: Callable[[Cell], float],
    check_s: Callable[[Cell], float],
    demand: Callable[[Cell], float],
    phase: Callable[[Cell], int] = lambda c: 0,
) -> list[Unit]:
    """``cells`` grouped by network setting (RFs ascending inside each), by phase, then
    longest first."""
    groups: dict[tuple, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(cell.network, []).append(cell)
    out = [
        Unit(
            nodes=g[0].nodes,
            network=net,
            cells=tuple(sorted(g, key=lambda c: c.rf)),
            cost_s=check_s(g[0]) + sum(cost_s(c) for c in g),
            demand=max(demand(c) for c in g),
            phase=min(phase(c) for c in g),
        )
        for net, g in groups.items()
    ]
    return sorted(out, key=_order)


def _order(u: Unit) -> tuple[int, float]:
    return (u.phase, -u.cost_s)


class Planner:
    """Hands out units to shards (thread-safe). ``bringup_s(nodes)``: what a new cluster
    costs; a shard moves to another node count only for more work than that.

    Phases: every unit of the lowest phase left is handed out before any unit of a later
    one, except that a shard for which no unit of that phase is worth a bring-up takes
    the next unit of its own node count rather than stopping (it runs ahead)."""

    def __init__(self, todo: Sequence[Unit], bringup_s: Callable[[int], float]):
        self._lock = threading.Lock()
        self.queues: dict[int, deque[Unit]] = {}
        self._total: dict[int, float] = {}  # cost of each queue, kept as units leave
        for u in sorted(todo, key=_order):
            self.queues.setdefault(u.nodes, deque()).append(u)
            self._total[u.nodes] = self._total.get(u.nodes, 0.0) + u.cost_s
        self.serving: Counter[int] = Counter()
        self.bringup_s = bringup_s

    def remaining_s(self, nodes: int) -> float:
        return max(0.0, self._total.get(nodes, 0.0)) if self.queues.get(nodes) else 0.0

    def _phase_s(self, nodes: int, phase: int) -> float:
        return sum(u.cost_s for u in self.queues.get(nodes, ()) if u.phase == phase)

    def _pop(self, nodes: int) -> Unit:
        unit = self.queues[nodes].popleft()
        self._total[nodes] -= unit.cost_s
        return unit

    def left(self) -> list[Unit]:
        with self._lock:
            return [u for q in self.queues.values() for u in q]

    def next(self, current: int | None) -> Unit | None:
        """The next unit for a shard whose cluster has ``current`` nodes (None: no
        cluster). A unit of another node count means: tear down, bring up that one.
        None: this shard is done (its cluster goes down)."""
        with self._lock:
            heads = {n: q[0] for n, q in self.queues.items() if q}
            own = heads.get(current) if current is not None else None
            for phase in sorted({u.phase for q in self.queues.values() for u in q}):
                if own is not None and own.phase == phase:
                    return self._pop(own.nodes)
                open_ = [n for n, q in self.queues.items() if any(u.phase == phase for u in q)]

                def share(n: int, phase: int = phase) -> float:
                    return self._phase_s(n, phase) / (self.serving[n] + 1)

                target = max(open_, key=lambda n: (share(n), n))
                if self.serving[target] == 0 or share(target) >= 2 * self.bringup_s(target):
                    self._leave(current)
                    self.serving[target] += 1
                    return self._pop(target)
                # others are on it already, and a new cluster would cost more than it
                # saves: run ahead on this cluster, or look at the next phase
                if own is not None:
                    return self._pop(own.nodes)
            self._leave(current)
            return None

    def rejoin(self, nodes: int | None) -> None:
        """A shard whose cluster stayed up after ``next`` returned None (a --workers shard
        waiting for re-queued work) counts as serving ``nodes`` again."""
        with self._lock:
            if nodes is not None:
                self.serving[nodes] += 1

    def take(self) -> Unit | None:
        """The next unit whatever it costs to bring its cluster up: for a shard that is
        the last one left to measure it (the others that served it are gone)."""
        with self._lock:
            heads = {n: q[0] for n, q in self.queues.items() if q}
            if not heads:
                return None
            target = min(heads, key=lambda n: (heads[n].phase, -self.remaining_s(n), -n))
            self.serving[target] += 1
            return self._pop(target)

    def requeue(self, unit: Unit) -> None:
        """A unit handed out and not finished (its worker died): back in its queue, in
        phase and longest-first order."""
        with self._lock:
            q = self.queues.setdefault(unit.nodes, deque())
            at = next((i for i, u in enumerate(q) if _order(u) > _order(unit)), len(q))
            q.insert(at, unit)
            self._total[unit.nodes] = self._total.get(unit.nodes, 0.0) + unit.cost_s

    def release(self, current: int | None) -> None:
        """A shard that will ask no more (its worker died) stops serving ``current``."""
        with self._lock:
            self._leave(current)

    def _leave(self, current: int | None) -> None:
        if current is not None and self.serving[current] > 0:
            self.serving[current] -= 1


class Stopped(Exception):
    """The sweep is stopping (Ctrl-C, a failure elsewhere): leave the gate's queue."""


@dataclass
class _Ticket:
    kind: str  # "setup" | "measure"
    demand: float
    owner: str = ""
    alone: bool = False  # admitted as a measurement that runs alone


@dataclass
class Gate:
    """What may use the CPU at once (thread-safe; see the module's docstring).

    ``budget``: cores the sweep's testbeds may keep busy; the idle cost of the testbeds
    up (``add_testbed``/``remove_testbed``) comes off it, the rest is the ``capacity``
    measurements share."""

    budget: float
    setup_slots: int = 2
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _queue: deque = field(default_factory=deque)
    idle: float = 0.0  # cores the testbeds that are up use doing nothing
    measuring: float = 0.0  # demand of the measurements running (those that share)
    measures: int = 0
    alone: int = 0  # a measurement that does not fit ``capacity`` even alone is running
    setups: int = 0

    @property
    def capacity(self) -> float:
        return max(0.0, self.budget - self.idle)

    def add_testbed(self, idle_cores: float) -> None:
        with self._cond:
            self.idle += idle_cores
            self._cond.notify_all()

    def remove_testbed(self, idle_cores: float) -> None:
        with self._cond:
            self.idle = max(0.0, self.idle - idle_cores)
            self._cond.notify_all()

    def admits(self, t: _Ticket) -> bool:
        if t.kind == "setup":
            return self.measures == 0 and self.setups < self.setup_slots
        if self.setups or self.alone:
            return False
        return self.measures == 0 or self.measuring + t.demand <= self.capacity

    @contextmanager
    def hold(
        self, kind: str, demand: float = 0.0, *, stop: threading.Event | None = None, owner=""
    ) -> Iterator[None]:
        ticket = _Ticket(kind, demand, owner)
        with self._cond:
            self._queue.append(ticket)
            while not (self._queue[0] is ticket and self.admits(ticket)):
                if stop is not None and stop.is_set():
                    self._queue.remove(ticket)
                    self._cond.notify_all()
                    raise Stopped()
                self._cond.wait(0.5)
            self._queue.popleft()
            self._take(ticket, +1)
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._take(ticket, -1)
                self._cond.notify_all()

    def _take(self, t: _Ticket, sign: int) -> None:
        if t.kind == "setup":
            self.setups += sign
            return
        if sign > 0:  # decided once: the capacity may change before the release
            t.alone = t.demand > self.capacity
        if t.alone:
            self.measures += sign
            self.alone += sign
        else:
            self.measures += sign
            self.measuring = max(0.0, self.measuring + sign * t.demand) if self.measures else 0.0


# -- the same rules in virtual time: the --dry-run's wall-time estimate --------------------


def simulate(
    todo: Sequence[Unit],
    shards: int,
    *,
    budget: float,
    idle_cores: Callable[[int], float],
    bringup_s: Callable[[int], float],
    prepare_s: Callable[[int], float],
    setup_slots: int = 2,
    up: Sequence[int | None] = (),
    machines: Sequence[int] = (),
) -> float:
    """Wall seconds until every unit is measured by ``shards`` testbeds under the
    Planner's and the Gate's rules (``prepare_s(nodes)``: warm-up and baseline after a
    bring-up, measured alone; ``up``: node counts of the clusters already running, on the
    first machine). ``machines``: shards per machine (``--workers``), each machine with a
    gate of its own and the planner shared; default one machine with ``shards``."""
    sim = _Simulation(todo, list(machines) or [shards], budget, setup_slots, idle_cores, bringup_s)
    for n in up:
        if n is not None:
            sim.planner.serving[n] += 1
            sim.gates[0].idle += idle_cores(n)
    sim.clusters.update(enumerate(up))
    for s in range(len(sim.owner)):
        sim.plan(s)
    sim.admit()
    while sim.events:
        sim.now, _, shard, (ticket, then) = heapq.heappop(sim.events)
        sim.gates[sim.owner[shard]]._take(ticket, -1)
        step, unit = then
        if step == "prepare":  # warm-up and baseline: alone
            sim.request(
                shard, _Ticket("measure", EXCLUSIVE), prepare_s(unit.nodes), ("measure", unit)
            )
        elif step == "measure":
            sim.request(shard, _Ticket("measure", unit.demand), unit.cost_s, ("next", None))
        else:
            sim.plan(shard)
        sim.admit()
    return sim.now


class _Simulation:
    """The state of ``simulate``: one gate per machine, the shared planner, the clock and
    the events (a ticket released at a time), what waits for each gate."""

    def __init__(self, todo, sizes: list[int], budget, setup_slots, idle_cores, bringup_s):  # noqa: ANN001
        self.owner = [m for m, k in enumerate(sizes) for _ in range(k)]  # shard -> machine
        self.planner = Planner(todo, bringup_s)
        self.gates = [Gate(budget, setup_slots) for _ in sizes]
        self.idle_cores, self.bringup_s = idle_cores, bringup_s
        self.now = 0.0
        self.seq = itertools.count()
        # (time, seq, shard, (ticket, then))
        self.events: list[tuple[float, int, int, tuple[_Ticket, tuple]]] = []
        self.waiting: list[deque] = [deque() for _ in sizes]  # (shard, ticket, duration, then)
        self.clusters: dict[int, int | None] = {s: None for s in range(len(self.owner))}

    def request(self, shard: int, ticket: _Ticket, duration: float, then: tuple) -> None:
        self.waiting[self.owner[shard]].append((shard, ticket, duration, then))

    def admit(self) -> None:
        for gate, queue in zip(self.gates, self.waiting, strict=True):
            while queue and gate.admits(queue[0][1]):
                shard, ticket, duration, then = queue.popleft()
                gate._take(ticket, +1)
                heapq.heappush(
                    self.events, (self.now + duration, next(self.seq), shard, (ticket, then))
                )

    def plan(self, shard: int) -> None:
        gate = self.gates[self.owner[shard]]
        current = self.clusters[shard]
        unit = self.planner.next(current)
        if unit is None or unit.nodes != current:  # this cluster goes down
            if current is not None:
                gate.idle = max(0.0, gate.idle - self.idle_cores(current))
            self.clusters[shard] = None
        if unit is None:
            return
        if unit.nodes != current:
            self.clusters[shard] = unit.nodes
            gate.idle += self.idle_cores(unit.nodes)
            self.request(
                shard, _Ticket("setup", 0.0), self.bringup_s(unit.nodes), ("prepare", unit)
            )
        else:
            self.request(shard, _Ticket("measure", unit.demand), unit.cost_s, ("next", None))
