"""The figures and report of a sweep while it runs: written once the first pass is stored
(``SweepConfig.first_pass``: every RF and loss at a few latencies), then refreshed every
``every_s`` while new cells arrive, so the curves exist long before the grid ends; and at
the end of every complete sweep.

Each refresh is the caller's command with ``OUT --run RUN`` (the command line gives
``python -m analysis.plots``: figures under ``OUT/analysis/``, ``OUT/report.html``; the
engine names no module above it) in a process of its own at the lowest CPU priority, in a
thread of its own so no shard waits for it. On a machine that measures, it holds the
sweep's gate as set-up work: it never runs beside a measurement (plotting is CPU-heavy,
and the cells' timing must not pay for it). No command: nothing drawn."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from common.files import append_to

from ..settings.cells import Cell
from ..settings.config import SweepConfig

REFRESH_EVERY_S = 900.0


class Figures:
    def __init__(
        self,
        config: SweepConfig,
        run_id: str,
        stored: Iterable[str],
        say: Callable[[str], None],
        command: Sequence[str] | None,
        *,
        hold: Callable[[], AbstractContextManager] = nullcontext,
        every_s: float = REFRESH_EVERY_S,
    ):
        self.out = Path(config.out)
        self.run_id = run_id
        self.say = say
        self.hold = hold
        self.every_s = every_s
        self.first = {c.cell_id for c in config.cells() if _first(config, c)}
        self.stored = set(stored)
        self.written_at: float | None = None  # monotonic time of the last refresh started
        self.written_with = 0  # cells stored when it started
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.refreshes = 0
        self.failures: list[str] = []
        self.log = self.out / "logs" / f"{run_id}-figures.log"
        self.command = tuple(command) if command else None  # None: nothing drawn

    def cell_stored(self, cell_id: str) -> None:
        """Called after each cell is committed (from any thread)."""
        with self._lock:
            self.stored.add(cell_id)
            if self._thread is not None and self._thread.is_alive():
                return
            if not self._due():
                return
            self.written_at, self.written_with = time.monotonic(), len(self.stored)
            first = self.refreshes == 0
            self._thread = threading.Thread(
                target=self._refresh, args=(first,), daemon=True, name="figures"
            )
            self._thread.start()

    def _due(self) -> bool:
        if self.command is None or not self.first or not self.first <= self.stored:
            return False
        if self.written_at is None:
            return True
        return (
            time.monotonic() - self.written_at >= self.every_s
            and len(self.stored) > self.written_with
        )

    def _refresh(self, first: bool) -> None:
        t0 = time.monotonic()
        try:
            with self.hold():
                self.log.parent.mkdir(parents=True, exist_ok=True)
                with append_to(self.log) as log:
                    assert self.command is not None
                    code = subprocess.run(
                        ["nice", "-n", "19", *self.command, str(self.out), "--run", self.run_id],
                        stdout=log, stderr=subprocess.STDOUT, cwd=os.getcwd(), check=False,
                    ).returncode  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - a figure never stops the sweep
            self.failures.append(str(exc))
            return
        self.refreshes += 1
        if code != 0:
            self.failures.append(f"figures: exit {code}")
            self.say(f"figures: {self.command[-1]} failed (exit {code}); see {self.log}")
            return
        if not first:
            what = "figures refreshed"
        else:  # the first drawing: of a first pass, or of a sweep's end
            what = "first pass stored: figures" if self.first else "figures"
        self.say(
            f"{what} ({self.written_with} cells) in {self.out / 'analysis'} and "
            f"{self.out / 'report.html'} ({time.monotonic() - t0:.0f} s)"
        )

    def close(self) -> None:
        """Wait for a refresh under way."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout=300)

    def finish(self) -> None:
        """At the end of a complete sweep: figures, ``analysis/summary.csv`` and the report
        with every cell, unless no cell arrived since the last refresh. Every sweep ends
        with them, one without a first pass too."""
        self.close()
        with self._lock:
            if self.command is None or not self.stored or len(self.stored) <= self.written_with:
                return
            self.written_at, self.written_with = time.monotonic(), len(self.stored)
        self._refresh(first=self.refreshes == 0)


def _first(config: SweepConfig, cell: Cell) -> bool:
    return config.first_pass is not None and config.phase(cell) == 0
