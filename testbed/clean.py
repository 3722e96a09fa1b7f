"""`python -m testbed clean`: remove what crashed runs left, and nothing that is in use.

Runs are found through this $EDGETB_HOME's run directories and the machine-wide registry
(every home's runs), like ccm's cluster directories; objects by the strict naming pattern
``tb-<run id>-<host>`` (namespaces, libvirt objects) and by the tag
``edgetb.run=<run id>:<host>`` as a whole argument of a process (JVMs, the gateway VM, SSH
masters), like Mininet's ``mn -c``. A run is kept when:

- its owner is alive (a sweep, a ``with Testbed(...)``, an ``up`` in progress: the run's
  lock is held), even when it is named; or
- it is a detached testbed (left by ``python -m testbed up``) that is up and healthy,
  unless it is named (``--run``) or ``all_detached`` is given; or
- it is a detached testbed of another ``$EDGETB_HOME`` (someone else's, healthy or not),
  unless it is named.

Everything else of a run is removed: its processes (by PID), namespaces, libvirt objects,
directory and registry entry. An object whose run has no directory anywhere is removed
too. Nothing outside the pattern is ever touched.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from common.errors import StateVersionError, TeardownError, TestbedError
from common.paths import cache_root
from common.procs import pid_alive
from common.tags import tagged_processes

from . import ownership
from . import state as st
from .backends import capabilities, registry


@dataclass
class CleanReport:
    runs: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    processes: list[int] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    libvirt: list[str] = field(default_factory=list)  # and any other backend's objects

    def add(self, backend: str, names: list[str]) -> None:
        (self.namespaces if capabilities(backend).namespaces else self.libvirt).extend(names)

    @property
    def empty(self) -> bool:
        return not (self.runs or self.namespaces or self.processes or self.libvirt)


def _keep_reason(
    run_dir: Path, named: bool, all_detached: bool, base: Path | None = None
) -> str | None:
    """Why run ``run_dir`` must be kept, or None when it may be removed (its owner lock
    must be held by the caller when None is returned for a removal)."""
    try:
        state = st.RunState.load(run_dir)
    except StateVersionError as exc:  # another version's run: maybe alive and well
        return None if named else str(exc)
    except st.StateError:
        return None
    own = run_dir.resolve().parent == st.runs_dir(base).resolve()
    if state.detached and not own and not named:
        # someone else's testbed (another $EDGETB_HOME): theirs to take down, even when a
        # node of it died; --all is about this home's testbeds
        return (
            f"a detached testbed of another home ({run_dir.parent.parent}); "
            f"`clean --run {state.run_id}` removes it"
        )
    if state.detached and state.status == "up" and not (named or all_detached):
        from .testbed import state_problems

        try:
            problems = state_problems(state)
        except TestbedError as exc:  # e.g. libvirtd not answering: health unknown, keep it
            return f"a detached testbed whose health cannot be checked ({exc})"
        if not problems:
            return (
                "a detached testbed that is up and healthy "
                f"(`clean --run {state.run_id}` or `clean --all` removes it)"
            )
    return None


def clean(
    base: Path | None = None,
    progress: Callable[[str], None] = print,
    run_id: str | None = None,
    *,
    all_detached: bool = False,
) -> CleanReport:
    """Remove the leftovers of dead runs (or of run ``run_id`` only); see the module doc."""
    report = CleanReport()
    keep: set[str] = set()
    for rid, run_dir in st.known_runs(base).items():
        if run_id is not None and rid != run_id:
            keep.add(rid)
            continue
        if not run_dir.is_dir():
            ownership.unregister(rid, run_dir)  # its objects, if any, go with the orphans below
            continue
        lock = ownership.RunLock(run_dir)
        try:
            got = lock.acquire(blocking=False)
        except st.StateError:  # removed meanwhile by its owner (`down`) or another clean
            continue
        if not got:
            holder = lock.holder() or {}
            keep.add(rid)
            report.skipped.append(rid)
            progress(f"kept run {rid}: in use by {ownership.describe_holder(holder)}")
            continue
        try:
            reason = _keep_reason(run_dir, run_id is not None, all_detached, base)
            if reason:
                keep.add(rid)
                report.skipped.append(rid)
                progress(f"kept run {rid}: {reason}")
                continue
            _remove_run(rid, run_dir, report, progress)
        finally:
            lock.release()
    _remove_orphans(base, run_id, keep, report)
    if run_id is None:
        _remove_unfinished_dirs(base)
        _remove_stray_registry_entries()
        ownership.remove_dead_sweep_entries()
        if not report.skipped:  # a killed class-data-sharing training run left half a file
            for leftover in cache_root().glob("cassandra-*/cds/*.jsa.tmp"):
                leftover.unlink(missing_ok=True)
    progress(
        "nothing to clean"
        if report.empty
        else f"removed {len(report.runs)} run dirs, {len(report.namespaces)} namespaces, "
        f"{len(report.processes)} processes, {len(report.libvirt)} libvirt objects"
    )
    return report


def _remove_orphans(
    base: Path | None, run_id: str | None, keep: set[str], report: CleanReport
) -> None:
    """Objects of runs that have no directory anywhere (or were never recorded). Listed
    first, the runs read again after: a run is registered before it creates anything,
    so a run created while this command ran is in the second reading, and kept."""
    backends = registry()
    found = {name: cls.leftovers(run_id) for name, cls in backends.items()}
    processes = tagged_processes()
    keep = keep | (set(st.known_runs(base)) - set(report.runs))
    for pid, owner in processes.items():
        if owner not in keep and run_id in (None, owner):
            _kill(pid, report)
    for name, cls in backends.items():
        orphans = {st.run_of(obj) for objs in found[name].values() for obj in objs} - keep
        for orphan in sorted(r for r in orphans if r is not None):
            report.add(name, cls.remove_leftovers(orphan))


def _retry_teardown(recorded: st.RunState) -> None:
    """Undo again, on its machines, a run whose `down` failed there (TeardownError when it
    fails again: the run is then kept for the next try)."""
    from .backends import make_backend
    from .topology import Topology

    make_backend(recorded.backend, Topology.from_dict(recorded.topology), recorded).destroy()


def _remove_run(
    run_id: str, run_dir: Path, report: CleanReport, progress: Callable[[str], None] = print
) -> None:
    try:
        recorded: st.RunState | None = st.RunState.load(run_dir)
    except st.StateError:
        recorded = None
    if recorded is not None and recorded.status == st.TEARDOWN_FAILED:
        try:
            _retry_teardown(recorded)
        except TeardownError as exc:
            report.skipped.append(run_id)
            progress(f"kept run {run_id}: its teardown failed again: {exc}")
            return
    pids = (
        [p["pid"] for p in recorded.processes.values() if pid_alive(p["pid"], p["marker"])]
        if recorded is not None
        else []
    )
    for pid in pids:
        _kill(pid, report)
    # Each backend's objects (VMs before their overlays in the run directory go).
    for name, cls in registry().items():
        report.add(name, cls.remove_leftovers(run_id))
    for pid, owner in tagged_processes().items():
        if owner == run_id:
            _kill(pid, report)
    ownership.unregister(run_id, run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    report.runs.append(run_id)


UNFINISHED_AGE_S = 60.0  # a run's hidden directory lives for milliseconds while it is made


def _remove_unfinished_dirs(base: Path | None) -> None:
    """Hidden ``.<run>.*`` directories of runs whose creator died before renaming them
    (only old ones: a run being created has its directory before it holds the lock)."""
    root = st.runs_dir(base)
    if not root.is_dir():
        return
    for path in root.glob(".*"):
        if not (path.is_dir() and ownership.RUN_ID_RE.fullmatch(path.name[1:7] or "")):
            continue
        try:
            if time.time() - path.stat().st_mtime < UNFINISHED_AGE_S:
                continue
            lock = ownership.RunLock(path)
            if lock.acquire(blocking=False):
                try:
                    shutil.rmtree(path, ignore_errors=True)
                finally:
                    lock.release()
        except (OSError, st.StateError):
            continue


def _remove_stray_registry_entries() -> None:
    """Temporary links (``.<run>.<pid>``) a registering process died before renaming."""
    reg = ownership.registry_dir()
    if not reg.is_dir():
        return
    for entry in reg.glob(".*"):
        try:
            if time.time() - entry.lstat().st_mtime >= UNFINISHED_AGE_S:
                entry.unlink()
        except OSError:
            continue


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
    """What is left on this machine of run ``run_id`` (or of any run): every backend's
    objects (namespaces, libvirt domains, networks, pools), tagged processes (JVMs, the
    gateway VM, SSH masters), run directories and registry entries. Empty lists = clean."""
    procs = [pid for pid, rid in tagged_processes().items() if run_id in (None, rid)]
    dirs = [p.name for p in st.list_runs(base) if run_id in (None, p.name)]
    registered = [rid for rid in ownership.registered_runs() if run_id in (None, rid)]
    objects: dict[str, list] = {}
    for cls in registry().values():
        objects.update(cls.leftovers(run_id))
    return {**objects, "processes": procs, "run_dirs": dirs, "registered": registered}
