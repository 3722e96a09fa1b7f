"""The Dask tasks of a sweep's workers (``experiments.remote.controller`` submits them; ``python -m
experiments.remote.worker serve`` is one way to run a worker for them).

``measure_unit`` measures one unit (the cells of one network setting) on one testbed slot
of this process (``Slots``): the slot's cluster stays up between units of its node count,
as a local sweep's shard keeps it. The slots are the ordinary ``scheduler.Sweep``'s
shards, with its gate, recovery, component checks and baselines; each cell is committed
to a staging store under ``ROOT/results`` (what ``worker clean`` reads after a kill) and
returned to the controller with the task's result. Progress and manifest entries go to
the controller as Dask events (topic ``edgetb``). ``ROOT`` is serve's ``--root``, else
``$EDGETB_WORKER_DIR``, else ``~/.edgetb/worker``; ``close_run`` takes the run's testbeds
down.
"""

from __future__ import annotations

import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

from common import paths
from common.errors import RunInUseError
from common.files import write_file
from testbed.ownership import OwnerLock, describe_holder
from testbed.state import home

from ..plan import estimate
from ..plan import shards as plan
from ..run import units
from ..run.launch import CORES, LOCK_NAME, calibrate_from, meminfo_mb
from ..run.manifest import static_manifest
from ..run.scheduler import Shard, Sweep, remove_stale_testbeds
from ..settings.config import SweepConfig
from ..store.db import Store

TOPIC = "edgetb"  # the Dask event topic of progress and manifest entries
LOCK_WAIT_S = 120.0  # for the staging directory a previous serve may still hold
WROTE_EVERY_S = 1.0  # progress of a running cell, at most this often per slot
FREE_WAIT_S = 300.0  # at close: how long running units get to stop


class Events:
    """What the controller shows and keeps, sent as Dask events from any thread."""

    def __init__(self, worker: Any):
        self.worker = worker
        self._wrote: dict[str, float] = {}
        self.collected: dict[int, list[dict[str, Any]]] | None = None  # the staging's

    def send(self, kind: str, **data: Any) -> None:
        self.worker.log_event(TOPIC, {"kind": kind, "name": self.worker.name, **data})

    # -- progress.Progress of this worker --------------------------------------------------

    def note(self, message: str, shard: str | None = None) -> None:
        print(message, file=sys.stderr, flush=True)  # the worker's log
        self.send("note", message=message, shard=shard)

    def shard_status(self, shard: str, text: str) -> None:
        self.send("status", shard=shard, text=text)

    def cell_started(self, shard: str, cell: Any, writes: int) -> None:
        self.send("cell_started", shard=shard, cell_id=cell.cell_id, writes=writes)

    def wrote(self, shard: str, n: int) -> None:
        now = time.monotonic()
        if now - self._wrote.get(shard, 0.0) >= WROTE_EVERY_S:
            self._wrote[shard] = now
            self.send("wrote", shard=shard, n=n)

    def cell_done(self, shard: str, cell: Any, estimated_s: float, summary: str) -> None:
        """Kept with the cell (just committed by this thread): the controller shows it."""
        records = (self.collected or {}).get(threading.get_ident())
        if records:
            records[-1]["summary"] = summary

    def shard_done(self, shard: str) -> None:
        pass

    def close(self) -> None:
        pass


class StagingStore:
    """The staging store (the sweep's ``SharedStore`` serialises the calls): cells
    committed here, and kept for the running task's result (by thread: one task per
    slot); manifest entries also sent to the controller."""

    def __init__(self, store: Store, events: Events):
        self._store = store
        self.events = events
        self.collected: dict[int, list[dict[str, Any]]] = {}

    def commit_cell(self, cell, requests, *, ycsb_ops=(), ycsb_requests=()) -> None:  # noqa: ANN001
        requests, ycsb_ops, ycsb_requests = list(requests), list(ycsb_ops), list(ycsb_requests)
        self._store.commit_cell(
            cell, requests, once=True, ycsb_ops=ycsb_ops, ycsb_requests=ycsb_requests
        )
        record = {
            "cell": cell,
            "requests": requests,
            "ycsb_ops": ycsb_ops,
            "ycsb_requests": [list(r) for r in ycsb_requests],
        }
        self.collected.setdefault(threading.get_ident(), []).append(record)

    def update_manifest(self, run_id: str, **entries: Any) -> dict:
        manifest = self._store.update_manifest(run_id, **entries)
        self.events.send("manifest", entries=entries)
        return manifest

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class Slots:
    """This process's testbeds for one run: the shards of a worker-side ``Sweep``, driven
    one unit at a time by ``measure_unit`` (slot ``i`` is shard ``i``)."""

    def __init__(self, config: SweepConfig, run_id: str, root: Path, p: int, worker: Any):
        out = root / "results"
        out.mkdir(parents=True, exist_ok=True)
        self.owner = OwnerLock(out / LOCK_NAME)
        # the previous serve of this directory may still be tearing its testbeds down
        if not self.owner.acquire(blocking=False, wait_s=LOCK_WAIT_S):
            raise RunInUseError(
                f"{out} is in use ({describe_holder(self.owner.holder() or {})}) after "
                f"{LOCK_WAIT_S:.0f} s"
            )
        try:
            self.store = Store(out)
            if run_id in {r.run_id for r in self.store.runs()}:
                self.store.set_status(run_id, "running")
            else:
                manifest = static_manifest(config, ["(worker)", str(worker.name)])
                self.store.begin_run(
                    run_id, config.fingerprint(), config.name, config.to_dict(), manifest
                )
            remove_stale_testbeds(self.store, lambda m: print(m, file=sys.stderr, flush=True))
            calibrate_from(config, out)
        except BaseException:
            self.owner.release()
            raise
        self.run_id = run_id
        self.events = Events(worker)
        self.staging = StagingStore(self.store, self.events)
        self.events.collected = self.staging.collected
        self.sweep = Sweep(config, self.staging, run_id, self.events, parallel=p)  # type: ignore[arg-type]
        self.sweep.logs.mkdir(parents=True, exist_ok=True)
        self.sweep.gate = plan.Gate(estimate.budget(self.sweep.cores))
        self.sweep.shards = [Shard(self.sweep, f"s{i}") for i in range(p)]
        self.cells = {c.cell_id: c for c in config.cells()}
        self.busy: set[int] = set()
        self.lock = threading.Lock()
        self.closing = threading.Lock()
        self.closed = False

    def measure(self, slot: int, cell_ids: list[str]) -> list[dict[str, Any]]:
        (unit,) = estimate.units(self.sweep.config, [self.cells[c] for c in cell_ids])
        shard = self.sweep.shards[slot]
        with self.lock:
            if self.closed or slot in self.busy:
                raise plan.Stopped()
            self.busy.add(slot)
        me = threading.get_ident()
        self.staging.collected[me] = []
        try:
            shard.unit = unit
            if unit.nodes != shard.nodes:
                shard.down()
                shard.up(unit.nodes)
            units.measure_unit(shard, unit)
            if len(self.staging.collected[me]) < len(unit.cells):
                raise plan.Stopped()  # cut short (the run is stopping): not a measured unit
            return self.staging.collected.pop(me)
        except BaseException as exc:
            self.sweep.errors.append(exc)  # down() then stops the endpoint's writes at once
            try:
                shard.down()
            finally:
                self.sweep.errors.remove(exc)
            raise
        finally:
            shard.unit = None
            self.staging.collected.pop(me, None)
            with self.lock:
                self.busy.discard(slot)

    def abort(self) -> None:
        """Running units stop at their next check (``plan.Stopped``)."""
        self.sweep.abort.set()
        self.sweep.stop.set()

    def close(self, status: str = "complete") -> None:
        """Every slot's testbed down (after the running units stopped), the store closed;
        a second caller waits for the first one's close."""
        with self.closing:
            self._close(status)

    def _close(self, status: str) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        deadline = time.monotonic() + FREE_WAIT_S
        while self.busy and time.monotonic() < deadline:
            time.sleep(0.2)
        try:
            for shard in self.sweep.shards:
                shard.down()
        finally:
            try:
                self.store.set_status(self.run_id, status)
            finally:
                self.store.close()
                self.owner.release()


_SLOTS: dict[str, Slots] = {}
_SLOTS_LOCK = threading.Lock()
SERVED: dict[str, Any] = {}  # serve's own settings: root and testbed count


def open_run(
    run_id: str, config_data: dict[str, Any], links: str | None, worker: Any = None
) -> Slots:
    """This process's slots for the run (made on the first call: the staging store
    opened and locked, a dead predecessor's testbeds removed); ``worker``: this
    process's Dask worker (default: the running task's)."""
    from distributed import get_worker

    with _SLOTS_LOCK:
        slots = _SLOTS.get(run_id)
        if slots is not None:
            return slots
        worker = worker or get_worker()
        root = Path(SERVED.get("root") or paths.get("EDGETB_WORKER_DIR") or home() / "worker")
        data = dict(config_data, out=str(root / "results"))
        if links is not None:  # --profile file: the controller's links file
            root.mkdir(parents=True, exist_ok=True)
            write_file(root / "links.toml", links)
            data["links_file"] = str(root / "links.toml")
        data["subnet_pool"] = paths.get("EDGETB_SUBNET_POOL") or data.get("subnet_pool")
        config = SweepConfig.from_dict(data)
        p = int(worker.state.total_resources.get("testbed", 1))
        slots = _SLOTS[run_id] = Slots(config, run_id, root, p, worker)
        return slots


def measure_unit(
    run_id: str, config_data: dict[str, Any], links: str | None, slot: int, cell_ids: list[str]
) -> dict[str, Any]:
    """The Dask task: measure ``cell_ids`` (one unit) on slot ``slot`` of this worker;
    the cells as the controller commits them."""
    from distributed import get_worker

    slots = open_run(run_id, config_data, links)
    cells = slots.measure(slot, cell_ids)
    return {"worker": get_worker().name, "cells": cells}


def close_run(run_id: str, status: str = "complete") -> bool:
    """The Dask task that ends a run on this worker: its testbeds down."""
    with _SLOTS_LOCK:
        slots = _SLOTS.get(run_id)
    if slots is None:
        return False
    slots.close(status)
    with _SLOTS_LOCK:
        _SLOTS.pop(run_id, None)  # registered until closed: close_all waits for it too
    return True


def abort_run(run_id: str) -> None:
    """On each worker (``Client.run``): the run's running units stop at their next check."""
    slots = _SLOTS.get(run_id)
    if slots is not None:
        slots.abort()


def facts() -> dict[str, Any]:
    """What the controller records of a worker (``Client.run`` on each)."""
    return {
        "hostname": platform.node(),
        "pid": os.getpid(),
        "cores": CORES,
        "mem_mb": round(meminfo_mb()["MemTotal"]),
        "python": platform.python_version(),
        "versions": static_manifest(SweepConfig(), [])["packages"],
        "clock": time.time(),  # the controller records its offset from its own
        "root": os.geteuid() == 0,
    }


def close_all() -> None:
    """Every run of this process: its units stopped, its testbeds down."""
    for slots in list(_SLOTS.values()):
        slots.abort()
    for run_id in list(_SLOTS):
        close_run(run_id, "interrupted")
