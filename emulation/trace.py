"""Links that change over time: a link trace replayed through the shaper during a cell.

A trace is a CSV file with a header row and these columns (``jitter_ms``, ``loss_pct``
and ``rate_mbit`` may be empty or left out)::

    t_s,src,dst,delay_ms,jitter_ms,loss_pct,rate_mbit
    0,*,*,20,0,0.5,
    10,e0,e1,80,10,2,
    10,e1,e0,80,10,2,
    25,*,*,20,0,0.5,

Rows with the same ``t_s`` form one step, applied at that offset from the start of the
cell's measured writes, on top of the matrix the step before left (the first step on
top of the cell's own). ``*`` is every host: ``*,*`` every ordered pair, ``e0,*`` every
link leaving e0. A step is *applied* when the shaper acknowledges it (tcconfig's command
returned on every host it changed: ``Shaper.apply``); the replay records, per step, the
planned offset, when the change was started and acknowledged, and how far off the offset
the acknowledgement was. A change is started ahead of its offset by the median time the
changes before it took, so that it is in effect at the offset rather than that much
later; the shaper is called directly (``Shaper.apply``), not through
``emulation.api.set_links``, which also checks the shaper and saves the run's state.
"""

from __future__ import annotations

import csv
import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.errors import ConfigError
from common.files import read_text

from .links import Link, LinkMatrix

COLUMNS = ("t_s", "src", "dst", "delay_ms", "jitter_ms", "loss_pct", "rate_mbit")
REQUIRED = ("t_s", "src", "dst", "delay_ms")
MAX_STEPS = 10_000
SAMPLES = Path(__file__).resolve().parent / "traces"


@dataclass(frozen=True)
class Step:
    t_s: float
    links: tuple[tuple[str, str, Link], ...]  # (src or *, dst or *, link)


@dataclass(frozen=True)
class Trace:
    path: str
    steps: tuple[Step, ...]
    digest: str

    @property
    def label(self) -> str:
        """The trace in cell ids: its file's stem and a digest of its content."""
        return f"{Path(self.path).stem}-{self.digest[:6]}"

    @property
    def duration_s(self) -> float:
        return self.steps[-1].t_s if self.steps else 0.0

    def check(self, topology: Any) -> None:
        names = {h.name for h in topology.hosts}
        for step in self.steps:
            for src, dst, _ in step.links:
                for h in (src, dst):
                    if h != "*" and h not in names:
                        raise ConfigError(
                            f"trace {self.path}: t={step.t_s:g} s names host {h!r}, not one of "
                            f"{', '.join(sorted(names))} ({topology.edge_nodes} nodes)"
                        )

    def matrices(self, base: LinkMatrix) -> list[tuple[float, LinkMatrix]]:
        """Each step's whole matrix (the steps before it applied on top of ``base``)."""
        hosts = [h.name for h in base.topology.hosts]
        current = {(s, d): base.link(s, d) for s in hosts for d in hosts if s != d}
        out = []
        for step in self.steps:
            for src, dst, link in step.links:
                for s in hosts if src == "*" else [src]:
                    for d in hosts if dst == "*" else [dst]:
                        if s != d:
                            current[(s, d)] = link
            shaped = {k: v for k, v in current.items() if v.shaped}
            out.append((step.t_s, LinkMatrix(base.topology, shaped, profile=base.profile)))
        return out


def resolve(name: str) -> Path:
    """A shipped sample (its stem, e.g. ``lte-handover``) or a file."""
    sample = SAMPLES / f"{name}.csv"
    if "/" not in name and sample.is_file():
        return sample
    path = Path(name)
    if path.is_file():
        return path
    shipped = ", ".join(sorted(p.stem for p in SAMPLES.glob("*.csv")))
    raise ConfigError(f"trace {name!r}: no such file, nor a shipped sample ({shipped})")


def load(name: str) -> Trace:
    """Read and check a trace file (ConfigError, one line, naming the row)."""
    path = resolve(name)
    data = read_text(path, "trace")
    rows = list(csv.DictReader(data.splitlines()))
    for i, row in enumerate(rows, start=2):
        if None in row:  # DictReader keeps a row's surplus fields under None
            raise ConfigError(f"trace {path}: row {i} has more fields than the header")
    if not rows:
        raise ConfigError(
            f"trace {path}: no rows (a header {','.join(COLUMNS)} and a row a change)"
        )
    missing = [c for c in REQUIRED if c not in (rows[0].keys())]
    if missing:
        raise ConfigError(f"trace {path}: no column {missing[0]!r} (columns: {','.join(COLUMNS)})")
    unknown = sorted(set(rows[0]) - set(COLUMNS))
    if unknown:
        raise ConfigError(
            f"trace {path}: unknown column {unknown[0]!r} (columns: {','.join(COLUMNS)})"
        )
    by_t: dict[float, list[tuple[str, str, Link]]] = {}
    last = -1.0
    for i, row in enumerate(rows, start=2):
        where = f"trace {path} line {i}"
        try:
            t = float(row["t_s"])
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: t_s {row['t_s']!r} is not a number") from None
        if not 0 <= t <= 86_400 or t < last:
            raise ConfigError(f"{where}: t_s {t:g} must be 0..86400 s and not before the row above")
        last = t
        src, dst = (row.get("src") or "").strip(), (row.get("dst") or "").strip()
        if not src or not dst or (src == dst and src != "*"):
            raise ConfigError(f"{where}: src and dst must be two hosts or *")
        values: dict[str, float | None] = {}
        for col in ("delay_ms", "jitter_ms", "loss_pct", "rate_mbit"):
            text = (row.get(col) or "").strip()
            if not text:
                continue
            try:
                values[col] = float(text)
            except ValueError:
                raise ConfigError(f"{where}: {col} {text!r} is not a number") from None
        try:
            link = Link(**values)  # type: ignore[arg-type]
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        by_t.setdefault(t, []).append((src, dst, link))
    if len(by_t) > MAX_STEPS:
        raise ConfigError(f"trace {path}: {len(by_t)} steps, more than {MAX_STEPS}")
    steps = tuple(Step(t, tuple(links)) for t, links in sorted(by_t.items()))
    return Trace(str(path), steps, hashlib.sha256(data.encode()).hexdigest())


@dataclass
class Replay:
    """Replays a trace from ``start()`` on, in a thread: each step's matrix applied through
    ``apply`` (e.g. ``emulation.api.set_links``) at its offset; ``stop()`` ends it and
    returns the achieved schedule."""

    trace: Trace
    base: LinkMatrix
    apply: Callable[[LinkMatrix], Any]
    close: Callable[[], None] = lambda: None  # after the last step (the shaper's channel)
    schedule: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _t0: float = 0.0
    _t0_ns: int = 0

    def start(self) -> None:
        plans = self.trace.matrices(self.base)
        self._t0, self._t0_ns = time.monotonic(), time.time_ns()
        self._thread = threading.Thread(target=self._run, args=(plans,), name="trace", daemon=True)
        self._thread.start()

    def _run(self, plans: list[tuple[float, LinkMatrix]]) -> None:
        took: list[float] = []
        for t, matrix in plans:
            # Start a change as long before its offset as changes have taken (the median
            # so far), so that its acknowledgement, not its start, lands on the offset.
            lead = sorted(took)[len(took) // 2] if took else 0.0
            if self._stop.wait(max(0.0, self._t0 + t - lead - time.monotonic())):
                return
            started = time.monotonic()
            try:
                self.apply(matrix)
            except Exception as exc:  # noqa: BLE001 - reported by stop(), the cell fails
                self.error = f"step at {t:g} s: {exc}"
                return
            acked = time.monotonic()
            took.append(acked - started)
            self.schedule.append(
                {
                    "t_planned_s": t,
                    "at_ns": self._t0_ns + int((started - self._t0) * 1e9),
                    "started_s": round(started - self._t0, 4),
                    "acked_s": round(acked - self._t0, 4),
                    "late_ms": round((acked - self._t0 - t) * 1000, 2),  # < 0: early
                    "lead_ms": round(lead * 1000, 2),
                    "change_ms": round((acked - started) * 1000, 2),
                }
            )

    def stop(self) -> dict[str, Any]:
        """End the replay (steps not yet due are skipped) and return what was applied."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            if self._thread.is_alive():  # a change still under way could land after this
                self.error = self.error or "a change did not return within 30 s of the stop"
        self.close()
        late = [abs(s["late_ms"]) for s in self.schedule]  # off schedule, either way
        return {
            "trace": self.trace.path,
            "digest": self.trace.digest,
            "steps": len(self.trace.steps),
            "applied": len(self.schedule),
            "max_late_ms": max(late) if late else None,
            "schedule": self.schedule,
            "error": self.error,
        }
