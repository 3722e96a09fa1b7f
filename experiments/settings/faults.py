"""Faults during a measurement, as a sweep names them: what happens to which hosts and
when (``parse``; applied and healed by ``experiments.run.nemesis``).

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

The nemesis records when each step was applied (wall clock, ns) and how long it took,
so every request of the cell — which records its start, coordinator and replicas — can
be placed before, during or after it; after the cell it makes the testbed whole again
and times that.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from common.errors import ConfigError, TestbedError
from emulation.links import Link, LinkMatrix

KINDS = ("kill", "pause", "restart", "partition", "links")
NONE = "none"
_WHEN = re.compile(r"^(\d+(?:\.\d+)?)(%|s)$")


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


def window_ns(events: list[dict[str, Any]]) -> tuple[int | None, int | None]:
    """When a cell's fault was made and healed (wall clock, ns) from its events; the heal
    is None for a fault lasting to the cell's end."""
    made = next((e["at_ns"] for e in events if e.get("step") == "make"), None)
    healed = next((e["at_ns"] for e in events if e.get("step") == "heal"), None)
    # a node started again (kill@A-B, restart) is back when it serves CQL, not when its
    # start began: the fault lasts until the last one is back
    back = [
        e["at_ns"] + int(e["ready_s"] * 1e9)
        for e in events
        if e.get("step") == "started" and e.get("ready_s") is not None
    ]
    if back and (healed is not None or any(e.get("what") == "restart" for e in events)):
        healed = max(back)
    return made, healed
