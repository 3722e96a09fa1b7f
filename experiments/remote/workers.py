"""The Dask workers of a remote sweep as its controller (``remote.Remote``) sees them:
``Workers`` (which joined, which are gone, what a dead one left, their units stopped and
their testbeds closed) and ``Reports`` (what they tell: progress shown, manifest entries
kept under the controller's run)."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from ..run.progress import Progress
from ..settings.cells import Cell
from ..store.db import Store
from . import tasks
from .fleet import Fleet, WorkerLost

ABORT_WAIT_S = 120.0  # after Ctrl-C: how long the workers get to tear their testbeds down


class Reports:
    """What the workers tell (Dask events, and the cleaners' outcomes): progress shown,
    manifest entries kept under the controller's run."""

    def __init__(self, store: Store, run_id: str, progress: Progress, cells: dict[str, Cell]):
        self.store, self.run_id, self.progress, self.cells = store, run_id, progress, cells
        self.events: queue.Queue = queue.Queue()

    def drain(self) -> None:
        """The workers' events: progress shown, manifest entries kept."""
        while True:
            try:
                m = self.events.get_nowait()
            except queue.Empty:
                return
            name, kind = str(m.get("name")), m.get("kind")  # Dask sets "worker": its address
            label = f"{name}/{m.get('shard')}"
            if kind == "note":
                self.progress.note(str(m.get("message")), shard=label if m.get("shard") else name)
            elif kind == "status":
                self.progress.shard_status(label, str(m.get("text")))
            elif kind == "cell_started" and m.get("cell_id") in self.cells:
                self.progress.cell_started(label, self.cells[m["cell_id"]], int(m["writes"]))
            elif kind == "wrote":
                self.progress.wrote(label, int(m.get("n", 0)))
            elif kind == "manifest":
                self.manifest(name, m.get("entries") or {})
            elif kind == "cleaned":
                self.worker_entry(name, cleaned={"ok": m["ok"], "output": m["out"]})

    def manifest(self, name: str, entries: dict[str, Any]) -> None:
        current = self.store.run(self.run_id).manifest
        out: dict[str, Any] = {}
        for key, value in entries.items():
            if key == "clusters":
                out["clusters"] = {tb: dict(v, worker=name) for tb, v in value.items()}
            elif key == "baseline":  # the first testbed of a node count, fleet-wide
                new = {n: v for n, v in value.items() if n not in current.get("baseline", {})}
                if new:
                    out["baseline"] = new
            elif key == "faults":
                self.worker_entry(name, faults=value)
        if out:
            self.store.update_manifest(self.run_id, **out)

    def worker_entry(self, name: str, **values: Any) -> None:
        entry = dict(self.store.run(self.run_id).manifest.get("workers", {}).get(name, {}))
        self.store.update_manifest(self.run_id, workers={name: entry | values})


class Workers:
    """The Dask workers of a remote run as the controller sees them: those that joined
    (``join``), those gone (``dead``), what a dead one left (``clean_after``), their
    units stopped (``abort``) and their testbeds closed (``close``)."""

    def __init__(self, client, run_id, progress, reports, fleet, sessions):  # noqa: ANN001
        self.client, self.run_id, self.progress = client, run_id, progress
        self.reports: Reports = reports
        self.fleet: Fleet | None = fleet
        self.sessions: dict[str, Any] = sessions  # name -> the ssh Popen of one we started
        self.addresses: dict[str, str] = {}  # name -> Dask address
        self.gone: set[str] = set()
        self.cleaners: list[threading.Thread] = []

    def join(self, store_: Store) -> list[tuple[str, int]]:
        """The workers that joined the scheduler: their slots, and their facts in the
        manifest."""
        info = self.client.scheduler_info(n_workers=-1)["workers"]
        facts = self.client.run(tasks.facts)
        entries, out = {}, []
        for address, w in sorted(info.items(), key=lambda kv: str(kv[1].get("name"))):
            p = int(w.get("resources", {}).get("testbed", 0))
            if p < 1:
                continue  # a worker without testbeds: not ours to use
            name = str(w.get("name") or address)
            self.addresses[name] = address
            out.append((name, p))
            fact = dict(facts.get(address, {}))
            fact["clock_offset_s"] = round(fact.pop("clock", time.time()) - time.time(), 3)
            entries[name] = fact | {"status": "running", "p": p}
            self.progress.note(f"worker {name}: {p} testbeds at once")
        if not out:
            raise WorkerLost("no Dask worker offers a testbed resource")
        parallel = {"workers": {n: e["p"] for n, e in entries.items()}, "why": "dask"}
        store_.update_manifest(self.run_id, workers=entries, parallel=parallel)
        return out

    def dead(self) -> list[tuple[str, str]]:
        """(name, why) of every worker whose session ended or that the scheduler removed."""
        info = self.client.scheduler_info(n_workers=-1)["workers"].values()
        alive = {str(w.get("name")) for w in info}
        out = []
        for name in self.addresses:
            proc = self.sessions.get(name)
            if proc is not None and proc.poll() is not None:
                out.append((name, f"its session ended (ssh exit {proc.poll()})"))
            elif name not in alive:
                out.append((name, "the scheduler removed it"))
        return out

    def abort(self) -> None:
        """Every running unit of the run stops at its next check (``tasks.abort_run``)."""
        live = [self.addresses[n] for n in self.addresses if n not in self.gone]
        try:
            self.client.run(tasks.abort_run, self.run_id, workers=live, on_error="ignore")
        except Exception as exc:  # noqa: BLE001 - the close that follows reports what is left
            self.progress.note(f"telling the workers to stop failed: {exc}")

    def clean_after(self, name: str) -> None:
        """Remove what the dead worker left on its machine (in the background)."""
        fleet = self.fleet
        if fleet is None:
            return  # a --scheduler worker: no SSH to its machine

        def clean() -> None:
            proc = self.sessions.get(name)
            if proc is not None and proc.poll() is None:
                proc.kill()  # our ssh client: the worker sees the end of its input
            spec = fleet.specs[name]
            argv = [spec.py, "-m", "experiments.remote.worker", "clean", "--root", spec.dir]
            ok, text = fleet.command(name, argv)
            self.reports.events.put({"kind": "cleaned", "name": name, "ok": ok, "out": text[-500:]})

        t = threading.Thread(target=clean, daemon=True, name=f"clean-{name}")
        t.start()
        self.cleaners.append(t)

    def close(self, status: str, flying: list[Any]) -> None:
        """Every worker's testbeds down (``tasks.close_run``), once the units in flight
        stopped (at most ABORT_WAIT_S); one that did not close is cleaned after."""
        from distributed import wait

        try:
            wait(flying, timeout=ABORT_WAIT_S)
        except TimeoutError:
            pass
        # every worker still there, retired ones too: their idle clusters are up
        alive = {str(w.get("name")) for w in self.client.scheduler_info()["workers"].values()}
        names = [n for n in self.addresses if n in alive]
        closing = {
            n: self.client.submit(
                tasks.close_run, self.run_id, status, workers=[self.addresses[n]], pure=False
            )
            for n in names
        }
        try:
            wait(list(closing.values()), timeout=tasks.FREE_WAIT_S + 60)
        except TimeoutError:
            pass
        for n, future in closing.items():
            if future.status != "finished":
                self.progress.note(f"worker {n} did not take its testbeds down ({future.status})")
                self.clean_after(n)
            elif n not in self.gone:
                self.reports.worker_entry(n, status=status)
        for t in self.cleaners:
            t.join(timeout=300)
