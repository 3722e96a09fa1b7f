"""`python -m testbed clean`: remove every leftover of any earlier run.

Leftovers are found two ways, like Mininet's `mn -c`: through the state files of the run
directories, and by the strict name prefix (namespaces ``tb-<run>-*``; JVMs tagged
``edgetb.run=<run>:<host>``). A run whose lock is held by a live command is skipped.
Only processes inside our namespaces or carrying our tag are signalled, each by PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import state as st
from .backends.libvirt import clean_leftovers
from .backends.netns import delete_namespace, list_prefixed_namespaces
from .cassandra.dist import cache_root
from .cassandra.node import pid_alive

# Every process the testbed starts carries "edgetb.run=<run>:<host>" on its command line:
# JVMs as -Dedgetb.run=..., the gateway VM as -name guest=edgetb.run=...
MARKER = b"edgetb.run="


@dataclass
class CleanReport:
    runs: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    processes: list[int] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    libvirt: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.runs or self.namespaces or self.processes or self.libvirt)


def tagged_processes() -> dict[int, str]:
    """PID -> run id of every live process whose command line carries the testbed tag."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        start = cmdline.find(MARKER)
        if start >= 0:
            value = cmdline[start + len(MARKER) :].split(b"\0", 1)[0].decode(errors="replace")
            if pid_alive(int(entry)):
                found[int(entry)] = value.split(":", 1)[0]
    return found


def clean(
    base: Path | None = None, progress: Callable[[str], None] = print, run_id: str | None = None
) -> CleanReport:
    """Remove every leftover (or only those of run ``run_id``); returns what was removed."""
    report = CleanReport()
    busy: set[str] = set()
    for run_dir in st.list_runs(base):
        if run_id is not None and run_dir.name != run_id:
            continue
        lock = st.RunLock(run_dir)
        if not lock.acquire(blocking=False):
            busy.add(run_dir.name)
            report.skipped.append(run_dir.name)
            progress(f"skipping run {run_dir.name}: a running command holds its lock")
            continue
        try:
            try:
                recorded = st.RunState.load(run_dir)
                pids = [
                    p["pid"]
                    for p in recorded.processes.values()
                    if pid_alive(p["pid"], p["marker"])
                ]
            except st.StateError:
                pids = []
            for pid in pids:
                _kill(pid, report)
            # Every namespace of a run carries its prefix, recorded or not.
            for ns in list_prefixed_namespaces(run_dir.name):
                delete_namespace(ns)
                report.namespaces.append(ns)
            # VMs before their overlays (in the run directory) go.
            report.libvirt += clean_leftovers(run_dir.name)
        finally:
            lock.release()
        shutil.rmtree(run_dir, ignore_errors=True)
        report.runs.append(run_dir.name)
    # Objects whose run directory is gone (or was never written).
    for ns in list_prefixed_namespaces(run_id):
        if ns.split("-")[1] not in busy:
            delete_namespace(ns)
            report.namespaces.append(ns)
    for pid, owner in tagged_processes().items():
        if owner not in busy and run_id in (None, owner):
            _kill(pid, report)
    # libvirt domains, networks and overlay pools whose run directory is gone.
    report.libvirt += clean_leftovers(run_id, skip=sorted(busy))
    if (
        not busy and run_id is None
    ):  # a half-written class-data-sharing archive of a killed training run
        for leftover in cache_root().glob("cassandra-*/cds/*.jsa.tmp"):
            leftover.unlink(missing_ok=True)
    progress(
        "nothing to clean"
        if report.empty
        else f"removed {len(report.runs)} run dirs, {len(report.namespaces)} namespaces, "
        f"{len(report.processes)} processes, {len(report.libvirt)} libvirt objects"
    )
    return report


def _kill(pid: int, report: CleanReport) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        report.processes.append(pid)
    except ProcessLookupError:
        return
    for _ in range(100):
        if not pid_alive(pid):
            return
        time.sleep(0.05)


def residue(run_id: str | None = None, base: Path | None = None) -> dict[str, list]:
    """What is left on this machine of run ``run_id`` (or of any run): namespaces,
    tagged processes (JVMs, gateway VM) and run directories. Empty lists = clean."""
    from .backends.libvirt import leftovers

    procs = [pid for pid, rid in tagged_processes().items() if run_id in (None, rid)]
    dirs = [p.name for p in st.list_runs(base) if run_id in (None, p.name)]
    return {
        **{f"libvirt_{kind}": names for kind, names in leftovers(run_id).items()},
        "namespaces": list_prefixed_namespaces(run_id),
        "processes": procs,
        "run_dirs": dirs,
    }
