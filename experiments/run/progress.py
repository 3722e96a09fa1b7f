"""Progress of a sweep on stderr: every running shard, and the whole grid's ETA.

A sweep measures its cells in one or more shards (a testbed each, measuring its own cells
in a thread of its own). Every method of ``Progress`` may be called from any of those
threads at once.

On a terminal a rich live display keeps one row for the grid (cells done/total, elapsed,
ETA) and one row per running shard (its cell, the cell's writes done, what the shard is
doing), redrawn in place; notes and finished cells are printed above it. Otherwise (CI, a
log file) nothing is redrawn: one plain line per note and one per finished cell, flushed at
once.

The ETA is ``remaining_s(scale)``: the scheduler's estimate of the grid's remaining wall
time with the model's cell times multiplied by ``scale``, how the measured time of the cells
finished so far compared with the model (1.0 until more than 5 s of model time finished,
then clamped to [0.3, 5]). It is called when a cell starts or finishes and when a shard's
status changes (on a terminal) or ends, from the thread calling that method and without
any lock of this module held; it must not wait for a lock that thread holds while calling
Progress. Between calls the display counts the last estimate down.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from time import monotonic
from typing import TextIO

from rich.console import Console, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table

from ..plan.estimate import fmt_duration
from ..settings.cells import Cell

REFRESH_PER_S = 4
BAR_WIDTH = 24
MIN_MODEL_S = 5.0  # model time of finished cells before their measured time rescales it
SCALE_RANGE = (0.3, 5.0)


def describe(cell: Cell) -> str:
    ycsb = ""
    if cell.ycsb:
        rate = f" {cell.target:g} ops/s" if cell.target is not None else ""
        ycsb = f" {cell.workload} {cell.threads}t{rate} {cell.read_cl}/{cell.write_cl}"
    where = f"sites {cell.sites} RF{cell.rf}/site" if cell.sites else f"n={cell.nodes} RF{cell.rf}"
    level = f" {cell.cl}" if cell.cl else ""
    return (
        f"{where} L={cell.latency_ms:g}ms p={cell.loss_pct:g}%{level}{ycsb} rep {cell.repetition}"
    )


@dataclass
class ShardRow:
    """What one shard is doing: its cell (None between cells), writes done of it, and a
    status text for what happens outside a cell."""

    shard: str
    status: str = ""
    cell: Cell | None = None
    writes: int = 0
    written: int = 0
    started: float | None = None  # monotonic time of cell_started


def _isatty(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return isatty is not None and bool(isatty())
    except ValueError:  # closed
        return False


class Progress:
    def __init__(
        self,
        total: int,
        done: int,
        remaining_s: Callable[[float], float],
        stream: TextIO = sys.stderr,
    ):
        self.total, self.done = total, done
        self.remaining_s = remaining_s
        self.stream = stream
        self.tty = _isatty(stream)
        self.start = monotonic()
        self.model_cells_s = 0.0  # the model's time for the cells finished here
        self.measured_cells_s = 0.0  # their measured time, each from its cell_started
        self._lock = threading.Lock()  # guards the counters, the rows and the ETA
        self._rows: dict[str, ShardRow] = {}
        self._eta: tuple[float, float] | None = None  # (remaining_s, when computed)
        self._closed = False
        # Plain text on anything but a terminal, whatever FORCE_COLOR/TTY_COMPATIBLE say;
        # no markup ("[3/10]" is text), no highlighting.
        self.console = Console(
            file=stream,
            force_terminal=self.tty,
            force_jupyter=False,
            force_interactive=self.tty,
            color_system="auto" if self.tty else None,
            no_color=None if self.tty else True,
            markup=False,
            emoji=False,
            highlight=False,
            soft_wrap=not self.tty,
        )
        self._live: Live | None = None
        if self.tty:
            # Other output to the same terminal goes above the display, not through it;
            # a redirected stdout stays where it was sent.
            self._live = Live(
                console=self.console,
                get_renderable=self._render,
                refresh_per_second=REFRESH_PER_S,
                transient=True,
                redirect_stdout=_isatty(sys.stdout),
                redirect_stderr=_isatty(sys.stderr),
            )
            self._live.start(refresh=True)

    # -- state ---------------------------------------------------------------------------

    def _scale(self) -> float:
        """Measured/model time of the finished cells (lock held)."""
        if self.model_cells_s <= MIN_MODEL_S:
            return 1.0
        lo, hi = SCALE_RANGE
        return min(hi, max(lo, self.measured_cells_s / self.model_cells_s))

    def scale(self) -> float:
        with self._lock:
            return self._scale()

    def _update_eta(self) -> float:
        """The scheduler's remaining wall time, now (called with no lock held)."""
        eta = self.remaining_s(self.scale())
        with self._lock:
            self._eta = (eta, monotonic())
        return eta

    def _row(self, shard: str) -> ShardRow:
        row = self._rows.get(shard)
        if row is None:
            row = self._rows[shard] = ShardRow(shard)
        return row

    def rows(self) -> list[ShardRow]:
        """A copy of the running shards' rows, in the order they appeared."""
        with self._lock:
            return [replace(r) for r in self._rows.values()]

    # -- output --------------------------------------------------------------------------

    def _print(self, line: str) -> None:
        # Never with self._lock held: during the live display console.print waits for the
        # display's lock, which its refresh thread holds while it calls _render.
        self.console.print(line)

    def _refresh(self) -> None:
        live = self._live
        if live is not None:
            live.refresh()

    def _render(self) -> RenderableType:
        """The live display (called by rich, from its refresh thread too)."""
        now = monotonic()
        with self._lock:
            done, rows, eta = self.done, [replace(r) for r in self._rows.values()], self._eta
        total = self.total
        eta_text = "--" if eta is None else fmt_duration(max(0.0, eta[0] - (now - eta[1])))
        table = Table.grid(padding=(0, 1))
        table.add_column(no_wrap=True)  # name
        table.add_column(no_wrap=True)  # bar
        table.add_column(no_wrap=True, justify="right")  # counts
        table.add_column(no_wrap=True, overflow="ellipsis")  # what
        pct = 100 * done / total if total else 100.0
        table.add_row(
            "grid",
            ProgressBar(total=max(total, 1), completed=done if total else 1, width=BAR_WIDTH),
            f"{done}/{total} cells {pct:3.0f}%",
            f"elapsed {fmt_duration(now - self.start)} ETA {eta_text}",
        )
        for r in rows:
            if r.cell is None:
                table.add_row(r.shard, "", "", r.status)
                continue
            what = describe(r.cell) + (f" | {r.status}" if r.status else "")
            table.add_row(
                r.shard,
                ProgressBar(total=max(r.writes, 1), completed=r.written, width=BAR_WIDTH),
                f"{r.written}/{r.writes} writes",
                what,
            )
        return table

    # -- the API -------------------------------------------------------------------------

    def note(self, message: str, shard: str | None = None) -> None:
        """A line of its own (cluster up, network change...); the live display stays below
        it."""
        self._print(f"[{shard}] {message}" if shard is not None else message)

    def shard_status(self, shard: str, text: str) -> None:
        """What ``shard`` is doing outside a cell ("bringing up 5 nodes"...); shown in its
        row (created if needed), not printed as a line."""
        with self._lock:
            self._row(shard).status = text
        if self.tty:
            self._update_eta()
            self._refresh()

    def cell_started(self, shard: str, cell: Cell, writes: int) -> None:
        with self._lock:
            row = self._row(shard)
            row.cell, row.writes, row.written, row.started = cell, writes, 0, monotonic()
            row.status = ""
        if self.tty:
            self._update_eta()
            self._refresh()

    def wrote(self, shard: str, n: int) -> None:
        """``n`` writes of ``shard``'s current cell done (the display picks it up at its
        next refresh)."""
        with self._lock:
            row = self._rows.get(shard)
            if row is not None:
                row.written = n

    def cell_done(self, shard: str, cell: Cell, estimated_s: float, summary: str) -> None:
        """``cell`` stored; ``estimated_s`` is the model's time for it, compared with the
        time since its cell_started to rescale the ETA."""
        now = monotonic()
        with self._lock:
            self.done += 1
            done = self.done
            row = self._rows.get(shard)
            if row is not None:
                if row.started is not None:  # no measured time without a start: not counted
                    self.model_cells_s += estimated_s
                    self.measured_cells_s += now - row.started
                row.cell, row.writes, row.written, row.started = None, 0, 0, None
        eta = self._update_eta()
        line = f"[{done}/{self.total}] {shard} {describe(cell)}: {summary}"
        if not self.tty:  # on a terminal the grid's row shows them
            line += f" | elapsed {fmt_duration(now - self.start)} ETA {fmt_duration(eta)}"
        self._print(line)
        self._refresh()

    def shard_done(self, shard: str) -> None:
        """``shard`` has finished (or stopped): its row goes away."""
        with self._lock:
            self._rows.pop(shard, None)
        if self.tty:
            self._update_eta()
            self._refresh()

    def close(self) -> None:
        """Remove the live display (idempotent); notes can still be printed after it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            live, self._live = self._live, None
        if live is not None:
            live.stop()
