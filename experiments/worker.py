"""The worker side of ``python -m experiments.sweep --workers INVENTORY``: one machine's
share of the grid, run by the controller over one SSH session (``experiments.workers``).

    python -m experiments.worker serve --root DIR --name NAME [--parallel P|auto]
    python -m experiments.worker probe
    python -m experiments.worker clean --root DIR

``serve`` speaks JSON lines: one object per line on stdin (from the controller) and on
stdout (to it); everything else this process or a library prints goes to stderr. It runs
the ordinary ``scheduler.Sweep`` on local testbeds with two substitutions: its shards ask
the controller for their next unit (``RemotePlanner``), and each cell, committed to the
worker's own staging store under ``DIR/results`` first, is then sent to the controller
(``ForwardingStore``). So the gate, the recovery, the component checks and the baselines
are the local sweep's, and a cell the controller never received is still on the worker.

Messages, controller to worker: ``begin{run_id, config, parallel}``, ``unit{id, cells}``,
``none{id}``, ``abort``. Worker to controller: ``hello{pid, hostname, cores, mem_mb,
versions}``, ``started{p, why}``, ``want{id, shard, nodes}``, ``cell{cell, requests}``,
``manifest{entries}``, ``note/status/cell_started/wrote/cell_done/shard_done``,
``alive{cpu}``, ``done{status, error}``. The end of stdin (the controller or its link is
gone), ``abort``, SIGTERM and SIGHUP stop the worker as Ctrl-C stops a sweep: every
testbed goes down, then it exits.

``clean`` removes what a dead ``serve`` of ``DIR`` left: the testbeds its staging store
records as up (by run id, ``testbed.clean``), after ending that ``serve`` by its PID if it
still lives (hung). ``probe`` prints what the controller checks (JSON).
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import platform
import signal
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from testbed.command import command, prog
from testbed.errors import RunInUseError, TestbedError
from testbed.setup_check import check_cassandra
from testbed.state import OwnerLock, describe_holder

from . import estimate, plan
from .config import Cell, SweepConfig
from .launch import CORES, LOCK_NAME, calibrate_from, choose_parallel, parse_parallel
from .scheduler import Sweep, cpu_busy, cpu_times, remove_stale_testbeds, static_manifest
from .store import Store

ALIVE_EVERY_S = 10.0  # the heartbeat; the controller declares a worker hung after --worker-timeout
LOCK_WAIT_S = 120.0  # for the staging directory a previous serve may still hold
WROTE_EVERY_S = 1.0  # progress of a running cell, at most this often per shard


class Channel:
    """JSON lines both ways; ``send`` from any thread. A controller that is gone makes
    ``send`` a no-op (``closed`` is set) rather than an error in a shard's thread."""

    def __init__(self, rfile: IO[str], wfile: IO[str]):
        self.rfile, self.wfile = rfile, wfile
        self.lock = threading.Lock()
        self.closed = threading.Event()

    def send(self, kind: str, **data: Any) -> None:
        line = json.dumps({"kind": kind, **data}, separators=(",", ":"))
        with self.lock:
            if self.closed.is_set():
                return
            try:
                self.wfile.write(line + "\n")
                self.wfile.flush()
            except (BrokenPipeError, OSError, ValueError):
                self.closed.set()

    def recv(self) -> dict[str, Any] | None:
        """The next message; None at the end of the input (a cut-off last line too)."""
        while True:
            line = self.rfile.readline()
            if not line.endswith("\n"):
                self.closed.set()
                return None
            if line.strip():
                return json.loads(line)


class RemotePlanner:
    """``plan.Planner``'s ``next`` for the worker's shards: the controller decides."""

    def __init__(self, channel: Channel, config: SweepConfig, stopping=lambda: False):
        self.channel = channel
        self.stopping = stopping  # the sweep is stopping (a shard failed, a signal)
        self.config = config
        self.cells: dict[str, Cell] = {c.cell_id: c for c in config.cells()}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._waiting: dict[int, list[Any]] = {}  # id -> [event, answer]
        self.stop = threading.Event()

    def next(self, current: int | None) -> plan.Unit | None:
        shard = threading.current_thread().name.removeprefix("shard-")
        event = threading.Event()
        with self._lock:
            ident = next(self._ids)
            self._waiting[ident] = [event, None]
        self.channel.send("want", id=ident, shard=shard, nodes=current)
        while not event.wait(0.5):
            if self.stop.is_set() or self.channel.closed.is_set() or self.stopping():
                return None
        with self._lock:
            answer = self._waiting.pop(ident)[1]
        if answer is None or answer["kind"] == "none":
            return None
        cells = [self.cells[c] for c in answer["cells"]]
        (unit,) = estimate.units(self.config, cells)
        return unit

    def answer(self, message: dict[str, Any]) -> None:
        with self._lock:
            waiting = self._waiting.get(message["id"])
            if waiting is not None:
                waiting[1] = message
                waiting[0].set()

    def left(self) -> list[plan.Unit]:
        return []  # the controller's queue; this worker's ETA is not shown anywhere


class ForwardingStore:
    """The staging store, forwarding what the controller keeps: cells (after they are
    committed here) and manifest entries."""

    def __init__(self, store: Store, channel: Channel):
        self._store = store
        self.channel = channel

    def commit_cell(
        self,
        cell: dict[str, Any],
        requests: list[dict[str, Any]],
        *,
        ycsb_ops: Iterable[dict[str, Any]] = (),
        ycsb_requests: Iterable[tuple[str, int, int]] = (),
    ) -> None:
        requests, ycsb_ops, ycsb_requests = list(requests), list(ycsb_ops), list(ycsb_requests)
        self._store.commit_cell(
            cell, requests, once=True, ycsb_ops=ycsb_ops, ycsb_requests=ycsb_requests
        )
        self.channel.send(
            "cell",
            cell=cell,
            requests=requests,
            ycsb_ops=ycsb_ops,
            ycsb_requests=[list(r) for r in ycsb_requests],
        )

    def update_manifest(self, run_id: str, **entries: Any) -> dict:
        manifest = self._store.update_manifest(run_id, **entries)
        self.channel.send("manifest", entries=entries)
        return manifest

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class RemoteProgress:
    """``progress.Progress`` of a worker: every event goes to the controller's display."""

    def __init__(self, channel: Channel):
        self.channel = channel
        self._wrote: dict[str, float] = {}

    def note(self, message: str, shard: str | None = None) -> None:
        print(message, file=sys.stderr, flush=True)  # the worker's log
        self.channel.send("note", message=message, shard=shard)

    def shard_status(self, shard: str, text: str) -> None:
        self.channel.send("status", shard=shard, text=text)

    def cell_started(self, shard: str, cell: Cell, writes: int) -> None:
        self.channel.send("cell_started", shard=shard, cell_id=cell.cell_id, writes=writes)

    def wrote(self, shard: str, n: int) -> None:
        now = time.monotonic()
        if now - self._wrote.get(shard, 0.0) >= WROTE_EVERY_S:
            self._wrote[shard] = now
            self.channel.send("wrote", shard=shard, n=n)

    def cell_done(self, shard: str, cell: Cell, estimated_s: float, summary: str) -> None:
        self.channel.send("cell_done", shard=shard, cell_id=cell.cell_id, summary=summary)

    def shard_done(self, shard: str) -> None:
        self.channel.send("shard_done", shard=shard)

    def close(self) -> None:
        pass


def _versions() -> dict[str, str | None]:
    return static_manifest(SweepConfig(), [])["packages"]


def _memory_mb() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _protocol_stdout() -> IO[str]:
    """The protocol's own stream on the process's stdout; fd 1 then points at stderr,
    so nothing else (a library's print, a child process) can corrupt the protocol."""
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", buffering=0), write_through=True)
    return proto


def serve(root: Path, name: str, parallel: str) -> int:

    channel = Channel(sys.stdin, _protocol_stdout())
    channel.send(
        "hello",
        name=name,
        pid=os.getpid(),
        hostname=platform.node(),
        cores=CORES,
        mem_mb=round(_memory_mb()),
        python=platform.python_version(),
        versions=_versions(),
        clock=time.time(),
    )

    def alive() -> None:
        before = cpu_times()
        while not channel.closed.wait(ALIVE_EVERY_S):
            now = cpu_times()
            channel.send("alive", cpu=cpu_busy(before, now))
            before = now

    # from the start: removing a killed run's testbeds may take longer than the timeout
    threading.Thread(target=alive, daemon=True, name="alive").start()
    begin = channel.recv()
    if begin is None or begin.get("kind") != "begin":
        return 2  # the controller left before it began
    out = root / "results"
    status, error, code = "failed", None, 1
    try:
        data = dict(begin["config"], out=str(out))
        if begin.get("links") is not None:  # --profile file: the controller's links file
            root.mkdir(parents=True, exist_ok=True)
            (root / "links.toml").write_text(begin["links"])
            data["links_file"] = str(root / "links.toml")
        data["subnet_pool"] = os.environ.get("EDGETB_SUBNET_POOL") or data.get("subnet_pool")
        config = SweepConfig.from_dict(data)
        out.mkdir(parents=True, exist_ok=True)
        owner = OwnerLock(out / LOCK_NAME)
        # the previous serve of this directory may still be tearing its testbeds down
        if not owner.acquire(blocking=False, wait_s=LOCK_WAIT_S):
            raise RunInUseError(
                f"{out} is in use ({describe_holder(owner.holder() or {})}) after "
                f"{LOCK_WAIT_S:.0f} s"
            )
    except TestbedError as exc:
        channel.send("done", status="failed", error=str(exc))
        return 2
    store = Store(out)
    run_id = begin["run_id"]
    failed_shards: list[str] = []  # the shards whose failure ended the sweep
    sweep: Sweep | None = None
    try:
        if run_id in {r.run_id for r in store.runs()}:
            store.set_status(run_id, "running")
        else:
            manifest = static_manifest(config, ["(worker)", name])
            store.begin_run(run_id, config.fingerprint(), config.name, config.to_dict(), manifest)
        remove_stale_testbeds(store, lambda m: print(m, file=sys.stderr, flush=True))
        calibrate_from(config, out)
        asked = parse_parallel(parallel, config)
        p, why = choose_parallel(config, config.cells(), asked)
        channel.send("started", p=p, why=why)
        progress = RemoteProgress(channel)
        sweep = Sweep(config, ForwardingStore(store, channel), run_id, progress, parallel=p)  # type: ignore[arg-type]
        planner = RemotePlanner(channel, config, stopping=lambda: sweep.stop.is_set())

        def stop() -> None:
            planner.stop.set()
            sweep.abort.set()
            sweep.stop.set()

        def read() -> None:
            while True:
                message = channel.recv()
                if message is None or message["kind"] == "abort":
                    stop()
                    return
                if message["kind"] in ("unit", "none"):
                    planner.answer(message)

        signal.signal(signal.SIGHUP, lambda _s, _f: stop())
        threading.Thread(target=read, daemon=True, name="read").start()
        sweep.run([], planner=planner)
        if planner.stop.is_set() or channel.closed.is_set():  # aborted, or the controller is gone
            raise plan.Stopped()
        status, code = "complete", 0
    except (KeyboardInterrupt, plan.Stopped):
        status, code = "interrupted", 130
    except TestbedError as exc:
        status, error = "failed", str(exc)
        failed_shards = list(sweep.failed_shards) if sweep is not None else []
    except Exception as exc:  # noqa: BLE001 - the controller must hear why
        status, error = "failed", f"{type(exc).__name__}: {exc}"
        failed_shards = list(sweep.failed_shards) if sweep is not None else []
        raise
    finally:
        try:
            store.set_status(run_id, status)
        finally:
            channel.send("done", status=status, error=error, shards=failed_shards)
            store.close()
            owner.release()
    return code


def probe() -> int:
    """What the controller checks before it hands out cells."""
    problems = []
    try:
        check_cassandra()
    except TestbedError as exc:
        problems.append(str(exc))
    print(
        json.dumps(
            {
                "hostname": platform.node(),
                "root": os.geteuid() == 0,
                "cores": os.cpu_count(),
                "mem_mb": round(_memory_mb()),
                "python": platform.python_version(),
                "versions": _versions(),
                "problems": problems,
            }
        )
    )
    return 0


def clean_root(root: Path) -> int:
    """Remove what a dead ``serve`` of ``root`` left (see the module's docstring)."""

    out = root / "results"
    if not out.is_dir():
        print(f"{out}: nothing to clean")
        return 0
    lock = OwnerLock(out / LOCK_NAME)
    if not lock.acquire(blocking=False, wait_s=1.0):
        holder = lock.holder() or {}
        pid = holder.get("pid")
        command = str(holder.get("command"))
        # under -m, sys.argv[0] is the module's file: .../experiments/worker.py serve ...
        if isinstance(pid, int) and "experiments/worker.py serve" in command:
            print(f"ending the worker that still holds {out} (pid {pid})")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not lock.acquire(blocking=False, wait_s=30.0):
            print(f"error: {out} is still in use ({holder})", file=sys.stderr)
            return 1
    try:
        with Store(out) as store:
            remove_stale_testbeds(store, print)
    finally:
        lock.release()
    return 0


@command("python -m experiments.worker")
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=prog("python -m experiments.worker"), description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run cells the controller hands out (JSON lines)")
    s.add_argument("--root", required=True, type=Path)
    s.add_argument("--name", required=True)
    s.add_argument("--parallel", default="auto")
    sub.add_parser("probe", help="print this machine's facts and set-up problems (JSON)")
    c = sub.add_parser("clean", help="remove what a dead serve of --root left")
    c.add_argument("--root", required=True, type=Path)
    args = p.parse_args(argv)
    if args.command == "serve":
        return serve(args.root.resolve(), args.name, args.parallel)
    if args.command == "probe":
        return probe()
    return clean_root(args.root.resolve())


if __name__ == "__main__":
    sys.exit(main())
