"""Progress of a sweep: current cell, done/total, writes, elapsed and ETA, on stderr.

On a terminal one status line is redrawn in place; otherwise (CI, a log file) one line is
printed per finished cell. The ETA is the model's estimate of the remaining cells scaled by
how the measured time compared with the model so far.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from .config import Cell
from .estimate import fmt_duration

REDRAW_S = 0.5


def describe(cell: Cell) -> str:
    return (
        f"n={cell.nodes} RF{cell.rf} L={cell.latency_ms:g}ms p={cell.loss_pct:g}% "
        f"rep {cell.repetition}"
    )


class Progress:
    def __init__(
        self,
        total: int,
        done: int,
        remaining_estimate: Callable[[], tuple[float, float]],
        stream: TextIO = sys.stderr,
    ):
        self.total, self.done = total, done
        self.remaining_estimate = remaining_estimate
        self.stream = stream
        self.tty = stream.isatty()
        self.start = time.monotonic()
        self.model_cells_s = 0.0  # the model's time for the cells finished here
        self.measured_cells_s = 0.0
        self._cell_t0 = 0.0
        self.cell: Cell | None = None
        self.writes = (0, 0)
        self._last = 0.0

    def _eta(self) -> str:
        """Remaining cells by the model, rescaled by measured/model time of finished
        cells; bring-ups and checks by the model."""
        cells_s, fixed_s = self.remaining_estimate()
        scale = 1.0
        if self.model_cells_s > 5:
            scale = min(5.0, max(0.3, self.measured_cells_s / self.model_cells_s))
        if self.cell is not None:
            cells_s -= min(cells_s, (time.monotonic() - self._cell_t0) / scale)
        return fmt_duration(cells_s * scale + fixed_s)

    def _status(self) -> str:
        pct = 100 * self.done / self.total if self.total else 100
        width = 20
        filled = int(width * self.done / self.total) if self.total else width
        bar = "#" * filled + "-" * (width - filled)
        where = describe(self.cell) if self.cell else ""
        writes = f" {self.writes[0]}/{self.writes[1]} writes" if self.writes[1] else ""
        return (
            f"[{bar}] {self.done}/{self.total} ({pct:.0f}%) {where}{writes} | "
            f"elapsed {fmt_duration(time.monotonic() - self.start)} ETA {self._eta()}"
        )

    def _draw(self, force: bool = False) -> None:
        if not self.tty:
            return
        now = time.monotonic()
        if force or now - self._last >= REDRAW_S:
            self._last = now
            self.stream.write("\r\033[K" + self._status())
            self.stream.flush()

    def note(self, message: str) -> None:
        """A line of its own (cluster up, network change...), keeping the bar below it."""
        if self.tty:
            self.stream.write("\r\033[K")
        self.stream.write(message + "\n")
        self.stream.flush()
        self._draw(force=True)

    def cell_started(self, cell: Cell, writes: int) -> None:
        self.cell = cell
        self.writes = (0, writes)
        self._cell_t0 = time.monotonic()
        self._draw(force=True)

    def wrote(self, n: int) -> None:
        self.writes = (n, self.writes[1])
        self._draw()

    def cell_done(self, cell: Cell, estimated_s: float, summary: str) -> None:
        self.done += 1
        self.model_cells_s += estimated_s
        self.measured_cells_s += time.monotonic() - self._cell_t0
        self.cell, self.writes = None, (0, 0)
        line = f"[{self.done}/{self.total}] {describe(cell)}: {summary}"
        if not self.tty:
            line += f" | elapsed {fmt_duration(time.monotonic() - self.start)} ETA {self._eta()}"
        self.note(line)

    def close(self) -> None:
        if self.tty:
            self.stream.write("\r\033[K")
            self.stream.flush()
