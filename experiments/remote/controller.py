"""A sweep's cells measured on Dask workers (``--workers INVENTORY`` or ``--scheduler
ADDRESS``), committed by the controller into its one store (docs/design/workers.md).

- **Dask carries the work**: one task per unit (the cells of one network setting),
  ``experiments.remote.tasks.measure_unit``, needing one ``testbed`` resource of its worker.
  With ``--workers``, the controller runs the scheduler itself (TLS with certificates made
  for the run) and starts a worker on each machine over SSH (``fleet.Fleet``); with
  ``--scheduler`` it joins a Dask cluster whose workers have ``testbed`` resources
  (``dask worker --resources testbed=1``, or ``dask-jobqueue`` on Slurm/PBS).
- **One queue**: the controller's ``plan.Planner`` decides which unit goes to which
  testbed slot of which worker (longest first, node-count affinity: a slot's cluster
  stays up between units of its node count), one task in flight per slot, pinned to its
  worker. Dask tells when a worker is gone; its units are taken back and re-queued, and
  what it left on its machine removed (``worker clean``, through Ansible).
- **One store**: each unit's cells come back as its task's result and are committed
  once (``commit_cell(once=True)``), with the worker's name in ``cells.worker``; the
  result is then released, so Dask never recomputes it. Progress and the workers'
  manifest entries arrive as Dask events.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.command import stop_signals

from ..plan import estimate
from ..plan import shards as plan
from ..run.progress import Progress
from ..settings.cells import Cell
from ..settings.config import SweepConfig
from ..store.db import Store
from . import tasks
from .fleet import Fleet, WorkerLost
from .workers import ABORT_WAIT_S, Reports, Workers


@dataclass
class Slot:
    worker: str  # the Dask worker's name
    index: int
    nodes: int | None = None  # the node count of the cluster it keeps up
    unit: plan.Unit | None = None  # in flight
    future: Any = None
    idle: bool = False  # the planner had nothing for it (no longer counted as serving)


class Remote:
    """Runs ``todo`` on the Dask workers of ``client``; replaces ``scheduler.Sweep.run``."""

    def __init__(
        self,
        config: SweepConfig,
        store: Store,
        run_id: str,
        progress: Progress,
        client: Any,
        *,
        fleet: Fleet | None = None,
        sessions: dict[str, Any] | None = None,
        task: Any = tasks.measure_unit,
    ):
        self.config, self.store, self.run_id = config, store, run_id
        self.progress, self.client = progress, client
        self.task = task
        self.config_data = config.to_dict()  # what each unit's task rebuilds the config from
        self.links = Path(config.links_file).read_text() if config.links_file else None
        self.cells = {c.cell_id: c for c in config.cells()}
        self.planner: plan.Planner | None = None
        self.slots: list[Slot] = []
        self.failures: Counter[tuple] = Counter()  # unit network -> failures
        self.errors: list[str] = []
        self.requeued: list[dict[str, Any]] = []
        self.duplicates = 0
        self.reports = Reports(store, run_id, progress, self.cells)
        self.workers = Workers(client, run_id, progress, self.reports, fleet, sessions or {})
        self.gone = self.workers.gone  # retired or lost: no more units
        self.aborting = False
        self.wake = False  # a re-queue: idle slots ask the planner again
        self.on_cell: Any = None  # called with each cell id once it is stored

    # -- the loop --------------------------------------------------------------------------

    def run(self, todo: list[Cell]) -> None:
        """Measure ``todo``; KeyboardInterrupt after Ctrl-C (once every worker's testbeds
        are down, or ABORT_WAIT_S passed), WorkerLost when cells are left that no worker
        can measure or a unit failed on two workers."""
        self.planner = plan.Planner(estimate.units(self.config, todo), estimate.bringup_s)
        self.client.subscribe_topic(tasks.TOPIC, lambda event: self.reports.events.put(event[1]))
        self.slots = [Slot(n, i) for n, p in self.workers.join(store_=self.store) for i in range(p)]
        ended = False
        try:
            with stop_signals() as signals:
                try:
                    self.loop(signals)
                    ended = True
                finally:
                    status = "complete" if ended and not self.aborting else "interrupted"
                    if status != "complete" and not self.aborting:
                        self.abort("stopping: the workers tear their testbeds down")
                    flying = [s.future for s in self.slots if s.future is not None]
                    self.workers.close(status, flying)
        finally:
            self.record()
        if signals[0]:
            raise KeyboardInterrupt
        left = [c.cell_id for u in self.planner.left() for c in u.cells]
        if self.errors or left:
            raise WorkerLost(
                "; ".join(self.errors or ["every worker is gone"])
                + (f"; {len(left)} cells not measured" if left else "")
            )

    def loop(self, signals: list[int]) -> None:
        """Units out to free slots and results in, until none is in flight and none can
        be handed out; after a stop, until the running ones stopped or ABORT_WAIT_S."""
        from distributed import wait

        deadline = None
        while True:
            if signals[0] and not self.aborting:
                self.abort("interrupted: the workers tear their testbeds down")
            if self.aborting and deadline is None:
                deadline = time.monotonic() + ABORT_WAIT_S
            self.check_workers()
            self.fill()
            flying = [s.future for s in self.slots if s.future is not None]
            if not flying or (deadline is not None and time.monotonic() > deadline):
                return
            try:
                wait(flying, timeout=1.0, return_when="FIRST_COMPLETED")
            except TimeoutError:
                pass
            for s in self.slots:
                if s.future is not None and s.future.done():
                    self.finished(s)
            self.reports.drain()

    def fill(self) -> None:
        """Every free slot of a live worker gets the planner's next unit for it (an idle
        one only after a re-queue: it serves its node count again, ``rejoin``)."""
        assert self.planner is not None
        wake, self.wake = self.wake, False
        for s in self.slots:
            if s.future is not None or s.worker in self.gone or self.aborting:
                continue
            if s.idle:
                if not wake:
                    continue
                self.planner.rejoin(s.nodes)
            unit = self.planner.next(s.nodes)  # None: it no longer counts s as serving
            if unit is None and not any(x.future is not None for x in self.slots):
                unit = self.planner.take()  # nobody else is left to measure it
            s.idle = unit is None
            if unit is None:
                continue  # its cluster stays up in case work is re-queued
            s.unit, s.nodes = unit, unit.nodes
            s.future = self.client.submit(
                self.task,
                self.run_id,
                self.config_data,
                self.links,
                s.index,
                [c.cell_id for c in unit.cells],
                workers=[self.workers.addresses[s.worker]],
                allow_other_workers=False,  # its slot's cluster is there; re-queued if gone
                resources={"testbed": 1},
                pure=False,
                key=f"unit-{s.worker}-{s.index}-{unit.cells[0].cell_id}-{time.monotonic_ns()}",
            )

    def finished(self, s: Slot) -> None:
        """A slot's task ended: its cells stored, or its failure counted."""
        future, unit = s.future, s.unit
        assert future is not None and unit is not None and self.planner is not None
        s.future, s.unit = None, None
        try:
            result = future.result()
        except BaseException as exc:  # noqa: BLE001 - a worker's failure (or cancel), counted below
            future.release()
            self.leave(s)
            s.nodes = None  # the worker took its cluster down
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            if isinstance(exc, plan.Stopped) or self.aborting or s.worker in self.gone:
                if not self.aborting:
                    self.requeue(s.worker, list(unit.cells), "its worker stopped")
                return
            self.failures[unit.network] += 1
            error = f"{type(exc).__name__}: {exc}"
            if self.failures[unit.network] >= 2:
                self.errors.append(f"{unit.label} failed on two workers: {error}")
                self.abort(f"{unit.label} failed on two workers; stopping")
                return
            self.retire(s.worker, "failed", error)
            self.requeue(s.worker, list(unit.cells), f"worker failed: {error}")
            return
        future.release()  # Dask must not recompute it if the worker goes
        for record in result["cells"]:
            self.commit(str(result["worker"]), record)
        came = {r["cell"]["cell_id"] for r in result["cells"]}
        missing = [c for c in unit.cells if c.cell_id not in came]
        if missing and not self.aborting:  # a unit cut short must not pass for measured
            self.requeue(s.worker, missing, "its unit ended before them")

    def leave(self, s: Slot) -> None:
        """The slot no longer serves its node count (its cluster is gone, or its worker)."""
        assert self.planner is not None
        if not s.idle and s.nodes is not None:
            self.planner.release(s.nodes)
        s.idle = True

    def commit(self, name: str, record: dict[str, Any]) -> None:
        cell = dict(record["cell"], run_id=self.run_id, worker=name)
        requests, ycsb_ops = record["requests"], record["ycsb_ops"]
        for r in [*requests, *ycsb_ops]:
            r["run_id"] = self.run_id
        stored = self.store.commit_cell(
            cell,
            requests,
            once=True,
            ycsb_ops=ycsb_ops,
            ycsb_requests=[tuple(r) for r in record["ycsb_requests"]],
        )
        if not stored:
            self.duplicates += 1
            return
        if self.on_cell is not None:
            self.on_cell(cell["cell_id"])
        c = self.cells.get(cell["cell_id"])
        if c is not None:
            text = f"{record.get('summary', '')} (on {name})"
            shard = f"{name}/{cell.get('shard')}"
            self.progress.cell_done(shard, c, estimate.cell_s(self.config, c), text)

    # -- workers that go -------------------------------------------------------------------

    def check_workers(self) -> None:
        """A worker whose session ended, or that the scheduler removed, is lost."""
        for name, why in self.workers.dead():
            if name not in self.gone:
                self.lost(name, why)
            elif any(s.worker == name and s.future is not None for s in self.slots):
                self.take_back(name, why)  # retired after a failure, then gone

    def lost(self, name: str, why: str) -> None:
        self.retire(name, "lost", why)
        self.workers.clean_after(name)
        self.take_back(name, why)

    def take_back(self, name: str, why: str) -> None:
        """The units in flight on a worker that is gone: cancelled (pinned to it, they
        could never run) and re-queued."""
        for s in self.slots:
            if s.worker == name and s.future is not None:
                assert s.unit is not None
                s.future.cancel()
                self.requeue(name, list(s.unit.cells), f"worker lost: {why}")
                s.future, s.unit = None, None

    def retire(self, name: str, status: str, why: str) -> None:
        """No more units to ``name`` (its units in flight finish; its testbeds go down
        with ``close_run`` at the end, or ``clean_after`` once it is lost)."""
        self.gone.add(name)
        for s in self.slots:
            if s.worker == name:
                self.leave(s)
        self.reports.worker_entry(name, status=status, reason=why)
        self.progress.note(f"worker {name} {status}: {why}", shard=name)

    def requeue(self, name: str, cells: list[Cell], why: str) -> None:
        assert self.planner is not None
        for unit in estimate.units(self.config, cells):
            self.planner.requeue(unit)
        ids = [c.cell_id for c in cells]
        self.requeued.append({"worker": name, "why": why, "cells": ids, "at": time.time()})
        self.progress.note(f"{len(cells)} cells of worker {name} re-queued ({why})")
        self.wake = True  # idle slots may take them

    def abort(self, why: str) -> None:
        """Every running unit stops at its next check (``tasks.abort_run``)."""
        self.aborting = True
        self.progress.note(why)
        self.workers.abort()

    def record(self) -> None:
        self.reports.drain()
        self.store.update_manifest(self.run_id, requeued=self.requeued, duplicates=self.duplicates)

    # -- the ETA -----------------------------------------------------------------------------

    def remaining_s(self, scale: float) -> float:
        if self.planner is None:
            return 0.0
        cells = [c for u in self.planner.left() for c in u.cells]
        cells += [c for s in self.slots if s.unit is not None for c in s.unit.cells]
        if not cells:
            return 0.0
        sizes = list(Counter(s.worker for s in self.slots if s.worker not in self.gone).values())
        return scale * estimate.wall_s(
            self.config, cells, max(1, sum(sizes)), os.cpu_count() or 1, machines=sizes or [1]
        )
