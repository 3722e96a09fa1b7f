"""A machine's Dask worker for ``python -m experiments.sweep --workers INVENTORY`` (the
controller, ``experiments.remote.controller``, starts it over SSH), and the commands the controller
runs there through Ansible.

    python -m experiments.remote.worker serve --root DIR --name NAME [--parallel P|auto]
    python -m experiments.remote.worker probe
    python -m experiments.remote.worker clean --root DIR

``serve`` reads one JSON line on stdin (the scheduler's address, the run's TLS
certificates, the sweep's settings; nothing of it is written to disk), computes its
testbed count, and runs a Dask worker with that many ``testbed`` resources for the tasks
of ``experiments.remote.tasks``, staging under ``DIR``. The end of stdin (the controller or its
link is gone), SIGTERM and SIGHUP stop it as Ctrl-C stops a sweep: every testbed goes
down, then it exits. So does silence: a scheduler that has not answered for the run's
``--worker-timeout`` (a partition, a hung controller; its SSH session may well live on)
is gone for this worker as the worker is for the scheduler, which re-queues its cells.

``clean`` removes what a dead ``serve`` of ``DIR`` left: the testbeds its staging store
records as up, after ending that ``serve`` by its PID if it still lives (hung). ``probe``
prints what the controller checks (JSON).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from common.command import Parser, command, leave_terminal, prog
from common.errors import TestbedError
from testbed.ownership import OwnerLock
from testbed.setup_check import check_cassandra

from ..run.launch import LOCK_NAME, choose_parallel, parse_parallel
from ..run.scheduler import remove_stale_testbeds
from ..settings.config import SweepConfig
from ..store.db import Store
from . import tasks


def stop_event() -> threading.Event:
    """Set by SIGTERM, SIGHUP, SIGINT, or the end of stdin (the controller is gone)."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        if signum == signal.SIGHUP:
            leave_terminal()
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_signal)

    def read() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=read, daemon=True, name="stdin").start()
    return stop


def listen_host(wanted: str | None, name: str) -> str | None:
    """The address the Dask worker listens on: the one the controller reaches it at, when
    it is this machine's (behind NAT or a forwarded port it is not: then every interface,
    said on stderr)."""
    if not wanted:
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((wanted, 0))
    except OSError:
        print(
            f"{name}: {wanted} is not an address of this machine (NAT or a forwarded port): "
            f"the worker listens on every interface",
            file=sys.stderr,
            flush=True,
        )
        return None
    return wanted


async def watch_scheduler(worker: Any, stop: threading.Event, silence_s: float, name: str) -> None:
    """Set ``stop`` once the scheduler has not answered for ``silence_s`` (module
    docstring): it is asked who it is every few seconds, each question bounded."""
    every = min(5.0, silence_s / 4)
    last = time.monotonic()
    while not stop.is_set():
        await asyncio.sleep(every)
        try:
            await asyncio.wait_for(worker.scheduler.identity(), timeout=silence_s)
            last = time.monotonic()
        except Exception:  # noqa: BLE001 - any failure to answer is silence
            pass
        if time.monotonic() - last >= silence_s:
            print(
                f"{name}: no answer from the scheduler for {silence_s:g} s (cut off, or the "
                f"controller hangs): taking this worker's testbeds down",
                file=sys.stderr,
                flush=True,
            )
            stop.set()


def serve(root: Path, name: str, parallel: str) -> int:
    """Run a Dask worker for the controller's run (module docstring); its exit code."""
    import dask

    line = sys.stdin.readline()
    if not line.endswith("\n"):
        return 2  # the controller left before it began
    setup = json.loads(line)
    try:
        data = dict(setup["config"], out=str(root / "results"))
        config = SweepConfig.from_dict(data)
        p, why = choose_parallel(config, config.cells(), parse_parallel(parallel, config))
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{name}: {p} testbeds at once ({why})", file=sys.stderr, flush=True)
    tasks.SERVED["root"] = str(root)
    stop = stop_event()
    # Dask's statistical profiler samples every thread 100 times a second: 1.4 % of a
    # core more while idle (benchmarks/dask_idle.py), load beside the measured cells
    dask.config.set({"distributed.worker.profile.enabled": False})
    asyncio.run(_work(setup, root, name, p, stop))
    return 130 if stop.is_set() else 0


async def _work(
    setup: dict[str, Any], root: Path, name: str, p: int, stop: threading.Event
) -> None:
    """The Dask worker of ``serve`` until ``stop`` (or its end), then its testbeds down."""
    from distributed import Worker
    from distributed.security import Security

    security = Security(
        tls_ca_file=setup["ca"],
        tls_worker_cert=setup["cert"],
        tls_worker_key=setup["key"],
        require_encryption=True,
    )
    async with Worker(
        setup["scheduler"],
        host=listen_host(setup.get("host"), name),  # not every interface
        name=name,
        nthreads=p + 1,  # the close task runs beside the units
        resources={"testbed": p},
        security=security,
        local_directory=str(root / "dask"),
        dashboard=False,
    ) as worker:
        loop = asyncio.get_running_loop()
        silence = float(setup.get("silence_s") or 60.0)
        watch = asyncio.ensure_future(watch_scheduler(worker, stop, silence, name))
        # the staging store now: a predecessor's testbeds go before any unit arrives
        opening = loop.run_in_executor(
            None, tasks.open_run, setup["run_id"], setup["config"], setup["links"], worker
        )
        while not stop.is_set() and worker.status.name in ("init", "running", "paused"):
            if opening.done() and opening.exception() is not None:
                break  # the worker cannot measure: its end tells the controller
            await asyncio.sleep(0.5)
        try:
            await opening  # before close_all: a run being opened is closed too
        except TestbedError as exc:
            print(f"error: {exc}", file=sys.stderr)
            stop.set()
        watch.cancel()
        await loop.run_in_executor(None, tasks.close_all)


def probe() -> int:
    """What the controller checks before it starts the workers."""
    problems = []
    try:
        check_cassandra()
    except TestbedError as exc:
        problems.append(str(exc))
    print(json.dumps(dict(tasks.facts(), problems=problems)))
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
        # under -m, sys.argv[0] is the module's file: .../experiments/remote/worker.py serve ...
        if isinstance(pid, int) and "experiments/remote/worker.py serve" in command:
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


@command("python -m experiments.remote.worker")
def main(argv: list[str] | None = None) -> int:
    p = Parser(prog=prog("python -m experiments.remote.worker"), description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run a Dask worker for the controller (reads stdin)")
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
