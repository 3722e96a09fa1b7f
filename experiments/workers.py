"""``python -m experiments.sweep … --workers INVENTORY``: the grid spread over the machines
of an Ansible inventory, each measuring on testbeds of its own (controller side; the
worker side is ``experiments.worker``; the design is docs/design/workers.md).

- **Provisioning** (ansible-runner, ``testbed/playbooks/worker.yml``): the project's code
  in the worker's directory, its Python environment and Cassandra where missing, then
  ``python -m experiments.worker probe``. A machine that fails is left out, named.
- **One SSH session per worker** runs ``python -m experiments.worker serve`` and carries
  JSON lines both ways: its shards ask for units, it sends each cell it measured.
- **One queue for the fleet**: the controller's ``plan.Planner``, so longest-first and
  node-count affinity hold across machines. A unit handed to a worker is its lease until
  that shard asks again; the cells of a lease that did not come back are re-queued when
  the worker dies (its session ends, or it is silent for ``--worker-timeout`` seconds),
  and the worker's leftovers are removed on it (``worker clean``, through Ansible).
- **One store**: the controller commits every cell it receives once
  (``commit_cell(once=True)``), with the worker's inventory name in ``cells.worker``.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import queue
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from testbed.backends import hostkeys, provision
from testbed.backends.hosts import (
    STORE_NAME,
    USER_KNOWN_HOSTS,
    read_inventory,
    validate_inventory,
)
from testbed.backends.ssh import SSH, RemoteHost
from testbed.command import STOP_SIGNALS, leave_terminal
from testbed.errors import ConfigError, TestbedError
from testbed.state import home

from . import estimate, plan
from .config import Cell, SweepConfig
from .progress import Progress
from .store import Store

WORKER_TIMEOUT_S = 60.0  # silence after which a worker is declared hung (it sends alive every 10 s)
ABORT_WAIT_S = 120.0  # after Ctrl-C: how long the workers get to tear their testbeds down


class WorkerLost(TestbedError):
    """Every worker is gone with cells left, or a unit failed on two workers."""


@dataclass(frozen=True)
class WorkerSpec:
    """One machine (or one directory on a machine) of ``--workers``."""

    name: str
    host: RemoteHost
    key: Path
    known_hosts: Path | None
    dir: str  # edgetb_worker_dir: code, staging results, logs
    home: str  # edgetb_home: the worker's EDGETB_HOME
    python: str | None  # edgetb_python: an interpreter with the project's dependencies
    subnet_pool: str | None
    parallel: str
    interpreter: str  # Ansible's python on the machine

    @property
    def src(self) -> str:
        return f"{self.dir}/src"

    @property
    def py(self) -> str:
        return self.python or f"{self.dir}/venv/bin/python"

    def env(self) -> list[str]:
        out = [f"EDGETB_HOME={self.home}", f"PYTHONPATH={self.src}"]
        if self.subnet_pool:
            out.append(f"EDGETB_SUBNET_POOL={self.subnet_pool}")
        return out


def load_workers(path: str | Path) -> list[WorkerSpec]:
    """The workers of an inventory; ConfigError with one line naming every problem."""
    inv = read_inventory(path)
    validate_inventory(inv, list(inv), path)
    problems = []
    specs = []
    for name, v in inv.items():
        where = f"{name}: "
        wdir = str(v.get("edgetb_worker_dir", ""))
        if not wdir.startswith("/") or any(c.isspace() for c in wdir):
            problems.append(where + "edgetb_worker_dir must be an absolute path without spaces")
            continue
        pool = v.get("edgetb_subnet_pool")
        if pool is not None:
            try:
                ipaddress.IPv4Network(str(pool))
            except ValueError:
                problems.append(where + f"edgetb_subnet_pool {pool!r} is not an IPv4 network")
        parallel = str(v.get("edgetb_parallel", "auto"))
        if parallel != "auto" and not (parallel.isdigit() and 1 <= int(parallel) <= 16):
            problems.append(where + f"edgetb_parallel {parallel!r} is not auto or 1..16")
        specs.append(
            WorkerSpec(
                name=name,
                host=RemoteHost(
                    name,
                    str(v["ansible_host"]),
                    str(v.get("ansible_user", "root")),
                    int(str(v.get("ansible_port", 22)).strip()),
                ),
                key=Path(str(v["ansible_ssh_private_key_file"])).expanduser(),
                known_hosts=Path(str(v["edgetb_known_hosts"])).expanduser()
                if v.get("edgetb_known_hosts")
                else None,
                dir=wdir.rstrip("/"),
                home=str(v.get("edgetb_home", f"{wdir.rstrip('/')}/home")),
                python=str(v["edgetb_python"]) if v.get("edgetb_python") else None,
                subnet_pool=str(pool) if pool is not None else None,
                parallel=parallel,
                interpreter=str(v.get("ansible_python_interpreter", "/usr/bin/python3")),
            )
        )
    seen: Counter[tuple] = Counter((s.host.address, s.host.port, s.dir) for s in specs)
    problems += [
        f"{s.name}: another worker uses {s.dir} on the same machine"
        for s in specs
        if seen[(s.host.address, s.host.port, s.dir)] > 1
    ]
    if len({s.key for s in specs}) > 1:
        problems.append("the workers must share one ansible_ssh_private_key_file")
    if len({s.known_hosts for s in specs} - {None}) > 1:
        problems.append("the workers name several edgetb_known_hosts files; use one")
    if problems:
        raise ConfigError(f"{path}: " + "; ".join(problems))
    return specs


class Fleet:
    """The workers' SSH settings and Ansible runs (one directory under the results)."""

    def __init__(self, specs: list[WorkerSpec], out: Path, run_id: str):
        self.specs = {s.name: s for s in specs}
        self.dir = out / "workers"
        # The SSH directory (trusted keys, Ansible's connection masters) is short-lived and
        # short-named: a socket path must stay under 108 bytes. Its tag is no testbed run
        # id, so `testbed clean` leaves these masters alone.
        key = hashlib.sha256(f"{out.resolve()}:{run_id}".encode()).hexdigest()[:10]
        self.ssh = SSH(f"wk-{key}", home() / "workers" / key, specs[0].key, strict=True)

    def close(self) -> None:
        """End Ansible's connection masters and remove the SSH directory."""
        for s in self.specs.values():
            subprocess.run(
                ["ssh", "-O", "exit", "-o", f"ControlPath={self.ssh.control_path}",
                 "-p", str(s.host.port), f"{s.host.user}@{s.host.address}"],
                capture_output=True, timeout=10, check=False,
            )  # fmt: skip
        shutil.rmtree(self.ssh.dir, ignore_errors=True)

    def inventory(self, names: list[str] | None = None) -> dict:
        hosts = {}
        for s in self.specs.values():
            if names is not None and s.name not in names:
                continue
            hosts[s.name] = {
                "ansible_host": s.host.address,
                "ansible_port": s.host.port,
                "ansible_user": s.host.user,
                "ansible_ssh_private_key_file": str(s.key),
                "ansible_python_interpreter": s.interpreter,
                "ansible_remote_tmp": f"{s.dir}/tmp",
                "edgetb_worker_dir": s.dir,
                "edgetb_home": s.home,
                "edgetb_python": s.py,
                "edgetb_make_venv": s.python is None,
            }
        return {"all": {"hosts": hosts}}

    def trust_host_keys(self) -> None:
        """The workers' host keys from the inventory's known_hosts, else the user's or
        the first-contact store (the hosts backend's rules, ``hostkeys``)."""
        explicit = {s.known_hosts for s in self.specs.values()} - {None}  # one (load_workers)
        self.ssh.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        hostkeys.trust(
            [s.host for s in self.specs.values()],
            run_file=self.ssh.known_hosts,
            store=home() / STORE_NAME,
            explicit=next(iter(explicit), None),
            user_files=[USER_KNOWN_HOSTS.expanduser(), hostkeys.SYSTEM_KNOWN_HOSTS],
            timeout_s=15,
        )

    def provision(self, say, *, ycsb: bool = False) -> dict[str, dict]:
        """Provision and probe every worker (``ycsb``: with YCSB and the project's binding
        built there); the probes of those that are ready. A worker that failed is dropped
        and named; none ready is a WorkerLost."""
        archive = provision.project_archive(
            self.dir / "project.tar.gz", extra=("pyproject.toml", "scripts")
        )
        say(f"provisioning {len(self.specs)} workers: {', '.join(self.specs)}")
        secs, failures, output = provision.run_playbook(
            "worker",
            private_dir=self.dir / "ansible",
            inv=self.inventory(),
            ssh=self.ssh,
            extravars={"edgetb_archive": str(archive), "edgetb_ycsb": ycsb},
        )
        failed = {line.split(":", 1)[0] for line in failures}
        if "*" in failed:
            raise WorkerLost("provisioning the workers failed:\n" + output[-2000:])
        for line in failures:
            say(f"worker left out: {line}")
        probes = {}
        for name in self.specs:
            if name in failed:
                continue
            ok, text = self.command(
                name, [self.specs[name].py, "-m", "experiments.worker", "probe"]
            )
            try:
                probe = json.loads(text) if ok else None
            except ValueError:
                probe = None
            if probe is None or not probe.get("root"):
                say(f"worker left out: {name}: probe failed ({text if not ok else 'not root'})")
                continue
            probes[name] = probe
        if not probes:
            raise WorkerLost("no worker is ready (see above)")
        say(f"workers ready in {secs:.0f} s: {', '.join(probes)}")
        return probes

    def command(self, name: str, argv: list[str]) -> tuple[bool, str]:
        s = self.specs[name]
        return provision.command(
            ["env", *s.env(), *argv],
            host=name,
            private_dir=self.dir / f"ansible-{name}",  # cleaners run at once: one dir each
            inv=self.inventory([name]),
            ssh=self.ssh,
        )

    def session_argv(self, name: str) -> list[str]:
        s = self.specs[name]
        remote = [
            "env",
            *s.env(),
            s.py,
            "-m",
            "experiments.worker",
            "serve",
            "--root",
            s.dir,
            "--name",
            name,
            "--parallel",
            s.parallel,
        ]
        options = ["-i", str(s.key)]
        # a connection of its own (no shared master): its end is this worker's end; a
        # link that is gone shows in 3 x 5 s
        for setting in [*self.ssh.settings(), "ControlMaster=no", "ServerAliveCountMax=3"]:
            options += ["-o", setting]
        return [
            "ssh",
            *options,
            "-p",
            str(s.host.port),
            f"{s.host.user}@{s.host.address}",
            "--",
            shlex.join(remote),
        ]


class Session:
    """One worker's ``serve`` over SSH: its lines go to ``events`` as (session, message),
    and (session, None) once its output ends."""

    def __init__(self, name: str, argv: list[str], log: Path, events: queue.Queue):
        self.name = name
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log, "ab")  # noqa: SIM115 - closed in finish()
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            bufsize=1,
            start_new_session=True,  # Ctrl-C on the terminal is the controller's to handle
        )
        self.events = events
        self.last = time.monotonic()
        self.hello: dict[str, Any] = {}
        self.done: dict[str, Any] | None = None
        self.lost: str | None = None
        self.shard_nodes: dict[str, int | None] = {}
        self._send_lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True, name=f"worker-{name}").start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        out: IO[str] = self.proc.stdout
        for line in out:
            if not line.endswith("\n"):
                break  # cut off by the worker's end: dropped (the cell stays staged there)
            try:
                message = json.loads(line)
            except ValueError:
                continue
            self.last = time.monotonic()  # when it arrived, not when the loop got to it
            self.events.put((self, message))
        self.events.put((self, None))

    @property
    def finished(self) -> bool:
        return self.done is not None or self.lost is not None

    def send(self, kind: str, **data: Any) -> None:
        line = json.dumps({"kind": kind, **data}, separators=(",", ":"))
        with self._send_lock:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(line + "\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                pass  # its end arrives as (self, None)

    def close(self) -> None:
        with self._send_lock:
            try:
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
            except OSError:
                pass

    def kill(self) -> None:
        """End the ssh client (ours): the worker sees the end of its input."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def reap(self) -> int | None:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.wait()
        self._log.close()
        return code


@dataclass
class Lease:
    unit: plan.Unit
    committed: set[str] = field(default_factory=set)

    def left(self) -> list[Cell]:
        return [c for c in self.unit.cells if c.cell_id not in self.committed]


class Dispatcher:
    """Runs ``todo`` on the workers; replaces ``scheduler.Sweep.run`` for ``--workers``."""

    def __init__(
        self,
        config: SweepConfig,
        store: Store,
        run_id: str,
        progress: Progress,
        fleet: Fleet,
        names: list[str],
        *,
        timeout_s: float = WORKER_TIMEOUT_S,
    ):
        self.config = config
        self.store = store
        self.run_id = run_id
        self.progress = progress
        self.fleet = fleet
        self.names = names
        self.timeout_s = timeout_s
        self.cells = {c.cell_id: c for c in config.cells()}
        self.events: queue.Queue = queue.Queue()
        self.sessions: dict[str, Session] = {}
        self.leases: dict[tuple[str, str], Lease] = {}
        self.deferred: list[tuple[Session, int, str, int | None]] = []  # (…, its nodes)
        self.planner: plan.Planner | None = None
        self.failures: Counter[tuple] = Counter()  # unit network -> workers it failed on
        self.errors: list[str] = []
        self.requeued: list[dict[str, Any]] = []
        self.duplicates = 0
        self.cleaners: list[threading.Thread] = []
        self.cleaned: dict[str, dict[str, Any]] = {}  # worker -> outcome of `worker clean`
        self.aborting = False
        self.lock = threading.Lock()
        self.on_cell: Any = None  # called with each cell id once it is stored

    # -- the loop --------------------------------------------------------------------------

    def run(self, todo: list[Cell]) -> None:
        """Measure ``todo`` on the workers; KeyboardInterrupt after Ctrl-C (once every
        worker has torn down, or ABORT_WAIT_S passed), WorkerLost when cells are left
        that no worker can measure."""
        self.planner = plan.Planner(estimate.units(self.config, todo), estimate.bringup_s)
        logs = Path(self.config.out) / "logs"
        signals = [0]

        def on_signal(signum: int, _frame: Any) -> None:
            if signum == signal.SIGHUP:
                leave_terminal()
            signals[0] += 1

        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                previous[sig] = signal.signal(sig, on_signal)
        deadline = None
        try:
            for name in self.names:
                self.sessions[name] = Session(
                    name,
                    self.fleet.session_argv(name),
                    logs / f"{self.run_id}-worker-{name}.log",
                    self.events,
                )
            while not all(s.finished for s in self.sessions.values()):
                if signals[0] and not self.aborting:
                    self.abort("interrupted: the workers tear their testbeds down")
                    deadline = time.monotonic() + ABORT_WAIT_S
                if deadline is not None and time.monotonic() > deadline:
                    for s in self.sessions.values():
                        s.kill()
                try:
                    session, message = self.events.get(timeout=1.0)
                except queue.Empty:
                    self.check_silence()
                    continue
                if message is None:
                    self.ended(session)
                else:
                    self.handle(session, message)
                self.check_silence()
        finally:
            for s in self.sessions.values():
                s.close()
                s.reap()
            for t in self.cleaners:
                t.join(timeout=300)
            for sig, handler in previous.items():
                if handler is not None:
                    signal.signal(sig, handler)
            self.record()
        if signals[0]:
            raise KeyboardInterrupt
        left = [c.cell_id for u in self.planner.left() for c in u.cells]
        if self.errors or left:
            raise WorkerLost(
                "; ".join(self.errors or ["every worker is gone"])
                + (f"; {len(left)} cells not measured" if left else "")
            )

    def abort(self, why: str) -> None:
        self.aborting = True
        self.progress.note(why)
        for s in self.sessions.values():
            if not s.finished:
                s.send("abort")
        for s, ident, _shard, _nodes in self.deferred:
            s.send("none", id=ident)
        self.deferred.clear()

    def check_silence(self) -> None:
        now = time.monotonic()
        for s in self.sessions.values():
            if not s.finished and s.lost is None and now - s.last > self.timeout_s:
                self.progress.note(
                    f"worker {s.name} silent for {now - s.last:.0f} s: declared hung", shard=s.name
                )
                s.last = float("inf")  # once
                s.kill()  # its end arrives as (s, None)

    # -- messages --------------------------------------------------------------------------

    def handle(self, s: Session, m: dict[str, Any]) -> None:
        kind = m.get("kind")
        label = f"{s.name}/{m.get('shard')}"
        if kind == "hello":
            s.hello = m
            self.store.update_manifest(
                self.run_id,
                workers={
                    s.name: {
                        k: m.get(k)
                        for k in ("hostname", "pid", "cores", "mem_mb", "python", "versions")
                    }
                    | {
                        "clock_offset_s": round(m.get("clock", time.time()) - time.time(), 3),
                        "status": "running",
                    }
                },
            )
            links = Path(self.config.links_file).read_text() if self.config.links_file else None
            s.send("begin", run_id=self.run_id, config=self.config.to_dict(), links=links)
        elif kind == "started":
            s.hello["p"] = m.get("p")
            self._worker_entry(s, p=m.get("p"), why=m.get("why"))
            self.progress.note(f"worker {s.name}: {m.get('p')} testbeds at once ({m.get('why')})")
        elif kind == "want":
            self.want(s, int(m["id"]), str(m["shard"]), m.get("nodes"))
        elif kind == "cell":
            self.cell(
                s,
                m["cell"],
                m["requests"],
                m.get("ycsb_ops") or [],
                [tuple(r) for r in m.get("ycsb_requests") or []],
            )
        elif kind == "manifest":
            self.manifest(s, m.get("entries") or {})
        elif kind == "note":
            self.progress.note(str(m.get("message")), shard=label if m.get("shard") else s.name)
        elif kind == "status":
            self.progress.shard_status(label, str(m.get("text")))
        elif kind == "cell_started" and m.get("cell_id") in self.cells:
            self.progress.cell_started(label, self.cells[m["cell_id"]], int(m.get("writes", 0)))
        elif kind == "wrote":
            self.progress.wrote(label, int(m.get("n", 0)))
        elif kind == "shard_done":
            self.progress.shard_done(label)
        elif kind == "done":
            s.done = m
            self.finish_worker(s, str(m.get("status")), m.get("error"))

    def want(self, s: Session, ident: int, shard: str, nodes: int | None) -> None:
        assert self.planner is not None
        key = (s.name, shard)
        self.end_lease(key)
        s.shard_nodes[shard] = nodes
        if self.aborting or s.finished:
            s.send("none", id=ident)
            return
        unit = self.planner.next(nodes)
        if unit is None and not self.leases:
            unit = self.planner.take()  # nobody else is left to measure it
        if unit is not None:
            self.lease(s, ident, shard, unit)
            return
        s.shard_nodes[shard] = None  # the planner no longer counts it as serving
        if self.leases:
            # another worker may die: this shard waits (its testbed stays up) for a re-queue
            self.deferred.append((s, ident, shard, nodes))
        else:
            s.send("none", id=ident)
            self.release_deferred()

    def lease(self, s: Session, ident: int, shard: str, unit: plan.Unit) -> None:
        self.leases[(s.name, shard)] = Lease(unit)
        s.shard_nodes[shard] = unit.nodes
        s.send("unit", id=ident, cells=[c.cell_id for c in unit.cells])

    def end_lease(self, key: tuple[str, str]) -> None:
        lease = self.leases.pop(key, None)
        if lease is not None and lease.left():
            self.requeue(key[0], lease.left(), why="its shard left them")
        self.release_deferred()

    def release_deferred(self) -> None:
        """Hand re-queued work to the shards waiting for it, or tell them the grid is done."""
        assert self.planner is not None
        waiting, self.deferred = self.deferred, []
        for s, ident, shard, nodes in waiting:
            if s.finished:
                continue
            unit = None
            if not self.aborting and self.planner.left():
                self.planner.rejoin(nodes)  # its cluster is still up: affinity counts
                unit = self.planner.next(nodes)
                if unit is None and not self.leases:
                    unit = self.planner.take()
            if unit is not None:
                self.lease(s, ident, shard, unit)
            elif self.leases and not self.aborting:
                self.deferred.append((s, ident, shard, nodes))
            else:
                s.send("none", id=ident)

    def requeue(self, worker: str, cells: list[Cell], why: str) -> None:
        assert self.planner is not None
        for unit in estimate.units(self.config, cells):
            self.planner.requeue(unit)
        self.requeued.append(
            {"worker": worker, "why": why, "cells": [c.cell_id for c in cells], "at": time.time()}
        )
        self.progress.note(f"{len(cells)} cells of worker {worker} re-queued ({why})")

    def cell(
        self,
        s: Session,
        cell: dict[str, Any],
        requests: list[dict[str, Any]],
        ycsb_ops: list[dict[str, Any]] = (),  # type: ignore[assignment]
        ycsb_requests: list[tuple[str, int, int]] = (),  # type: ignore[assignment]
    ) -> None:
        cell_id = cell["cell_id"]
        cell = dict(cell, run_id=self.run_id, worker=s.name)
        for r in [*requests, *ycsb_ops]:
            r["run_id"] = self.run_id
        stored = self.store.commit_cell(
            cell, requests, once=True, ycsb_ops=ycsb_ops, ycsb_requests=ycsb_requests
        )
        if not stored:
            self.duplicates += 1
        for (w, _shard), lease in self.leases.items():
            if w == s.name and any(c.cell_id == cell_id for c in lease.unit.cells):
                lease.committed.add(cell_id)
                break
        if stored and self.on_cell is not None:
            self.on_cell(cell_id)
        if stored and cell_id in self.cells and ycsb_ops:
            overall = next((r for r in ycsb_ops if r["op"] == "OVERALL"), {})
            self.progress.cell_done(
                f"{s.name}/{cell.get('shard')}",
                self.cells[cell_id],
                estimate.cell_s(self.config, self.cells[cell_id]),
                f"{overall.get('throughput_ops') or 0:.0f} ops/s, {overall.get('errors', 0)} "
                f"errors, CPU {100 * (cell.get('cpu_util') or 0):.0f} % on {s.name}",
            )
        elif stored and cell_id in self.cells:
            rtts = sorted(r["rtt_ns"] for r in requests)
            errors = sum(r["error"] is not None for r in requests)
            median = rtts[len(rtts) // 2] / 1e6 if rtts else float("nan")
            self.progress.cell_done(
                f"{s.name}/{cell.get('shard')}",
                self.cells[cell_id],
                estimate.cell_s(self.config, self.cells[cell_id]),
                f"median {median:.2f} ms, {errors} errors, CPU "
                f"{100 * (cell.get('cpu_util') or 0):.0f} % on {s.name}",
            )

    def manifest(self, s: Session, entries: dict[str, Any]) -> None:
        current = self.store.run(self.run_id).manifest
        out: dict[str, Any] = {}
        for key, value in entries.items():
            if key == "clusters":
                out["clusters"] = {tb: dict(v, worker=s.name) for tb, v in value.items()}
            elif key == "baseline":  # the first testbed of a node count, fleet-wide
                have = current.get("baseline", {})
                new = {n: v for n, v in value.items() if n not in have}
                if new:
                    out["baseline"] = new
            elif key == "faults":
                self._worker_entry(s, faults=value)
        if out:
            self.store.update_manifest(self.run_id, **out)

    def _worker_entry(self, s: Session, **values: Any) -> None:
        entry = dict(self.store.run(self.run_id).manifest.get("workers", {}).get(s.name, {}))
        entry.update(values)
        self.store.update_manifest(self.run_id, workers={s.name: entry})

    # -- ends ------------------------------------------------------------------------------

    def ended(self, s: Session) -> None:
        """The session's output ended: after ``done``, the normal end; else the worker is lost."""
        if s.done is not None or s.lost is not None:
            return
        code = s.proc.poll()
        s.lost = "its session ended" + (f" (ssh exit {code})" if code is not None else "")
        self.finish_worker(s, "lost", s.lost)

    def finish_worker(self, s: Session, status: str, error: Any) -> None:
        assert self.planner is not None
        mine = [k for k in self.leases if k[0] == s.name]
        blamed = set((s.done or {}).get("shards") or [])  # the shards whose failure it was
        for key in mine:
            lease = self.leases.pop(key)
            left = lease.left()
            if not left:
                continue
            if status == "failed" and (not blamed or key[1] in blamed):
                self.failures[lease.unit.network] += 1
                if self.failures[lease.unit.network] >= 2:
                    self.errors.append(f"{lease.unit.label} failed on two workers: {error}")
                    self.abort(f"{lease.unit.label} failed on two workers; stopping")
                    continue
            self.requeue(s.name, left, why=f"worker {status}: {error}")
        for nodes in s.shard_nodes.values():
            if nodes is not None:  # shards the planner still counts as serving
                self.planner.release(nodes)
        s.shard_nodes.clear()
        self._worker_entry(s, status=status, reason=error)
        if status in ("lost", "failed"):
            self.progress.note(f"worker {s.name} {status}: {error}", shard=s.name)
            self.clean_after(s)
        s.close()
        self.release_deferred()
        if not self.aborting and all(x.finished for x in self.sessions.values()):
            if self.planner.left():
                self.errors.append("every worker is gone with cells left")

    def clean_after(self, s: Session) -> None:
        """Remove what the dead worker left on its machine (in the background)."""

        def clean() -> None:
            s.kill()
            spec = self.fleet.specs[s.name]
            argv = [spec.py, "-m", "experiments.worker", "clean", "--root", spec.dir]
            ok, text = self.fleet.command(s.name, argv)
            with self.lock:
                self.cleaned[s.name] = {"ok": ok, "output": text[-500:]}

        t = threading.Thread(target=clean, daemon=True, name=f"clean-{s.name}")
        t.start()
        self.cleaners.append(t)

    def record(self) -> None:
        for name, outcome in self.cleaned.items():
            entry = dict(self.store.run(self.run_id).manifest.get("workers", {}).get(name, {}))
            entry["cleaned"] = outcome
            self.store.update_manifest(self.run_id, workers={name: entry})
        self.store.update_manifest(self.run_id, requeued=self.requeued, duplicates=self.duplicates)

    # -- the ETA -----------------------------------------------------------------------------

    def remaining_s(self, scale: float) -> float:
        if self.planner is None:
            return 0.0
        cells = [c for u in self.planner.left() for c in u.cells]
        cells += [c for lease in list(self.leases.values()) for c in lease.left()]
        if not cells:
            return 0.0
        # the testbeds of the workers still measuring, each machine with a gate of its own
        sizes = [int(s.hello.get("p") or 1) for s in self.sessions.values() if not s.finished] or [
            1
        ]
        cores = os.cpu_count() or 1
        return scale * estimate.wall_s(self.config, cells, sum(sizes), cores, machines=sizes)
