"""Device-sized hosts: one cgroup per host of a run, limiting what everything started in
that host may use: a CPU quota (``cpu.max``), CPU pinning (``cpuset.cpus``), a memory
limit (``memory.max``, no swap) and disk bandwidth (``io.max``) — a Raspberry-Pi-sized
edge node on a workstation. What a host may use (``Resources``, the device profiles, the
``--node-*`` flags) is ``testbed.resources``; this module makes, joins, measures and
removes the cgroups.

cgroup v2 where the machine has it with these controllers (``/sys/fs/cgroup/edgetb/
tb-<run>-<host>``); else the v1 hierarchies of the same controllers (``cpu``, ``cpuacct``,
``cpuset``, ``memory``, ``blkio``: ``<hierarchy>/<this process's cgroup>/edgetb/
tb-<run>-<host>``, nested in whatever limits the controller itself runs under). The
same limits either way: ``cpu.cfs_quota_us``, ``cpuset.cpus``, ``memory.limit_in_bytes``,
``blkio.throttle.*_bps_device``.

A process joins its host's cgroup before it enters the host's network namespace
(``join_argv``): ``ip netns exec`` mounts a sysfs of its own, under which the cgroup
file systems are not visible. Children stay in their parent's cgroup, so the JVM, the
workload, probes and ``testbed exec`` commands of a host all share its limits.

Ownership: the directories are named by the strict pattern ``tb-<6 hex>-<host>``, recorded
in the run's state before they are made, and removed at ``down`` and by ``clean`` (for a
dead run) after the processes in them — started by the run, by construction — are killed.
Nothing else is ever written: no other cgroup's limits, no process the run did not start.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from common.errors import ConfigError, StateError

from .resources import Resources, format_cpuset, parse_cpuset
from .state import Record

# Shared by every run of the machine (or of the v1 cgroup the run's process is in): made by
# the first run that needs it, removed by the last one out (rmdir fails while another run
# has a child in it; a run whose parent vanished between mkdirs makes it again).
PARENT = "edgetb"
MAKE_ATTEMPTS = 5
NAME_RE = re.compile(r"^tb-([0-9a-f]{6})-([a-z][a-z0-9]{0,11})$")
PERIOD_US = 100_000  # the CFS period the quota is a share of
V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "blkio")


# -- the machine's cgroup file systems ---------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where this machine's cgroups are: v2 (one directory per cgroup) or v1 (one per
    hierarchy, ``v1`` controller -> the directory under which ours are made)."""

    version: int
    v2_parent: Path | None = None
    v1_parents: tuple[tuple[str, Path], ...] = ()

    def dirs(self, name: str) -> dict[str, Path]:
        """controller (``""`` for v2) -> the cgroup directory of ``name``; controllers
        mounted together (v1 ``cpu,cpuacct``) share one directory, named once."""
        if self.version == 2:
            assert self.v2_parent is not None
            return {"": self.v2_parent / name}
        out: dict[str, Path] = {}
        for ctrl, parent in self.v1_parents:
            if parent / name not in out.values():
                out[ctrl] = parent / name
        return out


def _mounts() -> list[tuple[str, Path, set[str]]]:
    """(fstype, mount point, options) of every cgroup file system this process sees."""
    out: list[tuple[str, Path, set[str]]] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        parts, rparts = left.split(), right.split()
        if len(rparts) < 3 or rparts[0] not in ("cgroup", "cgroup2"):
            continue
        point = Path(parts[4].replace("\\040", " "))
        out.append((rparts[0], point, set(rparts[2].split(","))))
    return out


def _own_cgroups() -> dict[str, str]:
    """controller (or ``""`` for v2) -> this process's cgroup path in that hierarchy."""
    out: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        for c in ctrls.split(",") if ctrls else [""]:
            out[c] = path
    return out


def layout() -> Layout | None:
    """This machine's cgroups for device-sized hosts, or None when neither v2 with the
    controllers nor the v1 hierarchies are there."""
    mounts = _mounts()
    own = _own_cgroups()
    for kind, point, _opts in mounts:
        if kind != "cgroup2":
            continue
        try:
            have = set((point / "cgroup.controllers").read_text().split())
        except OSError:
            continue
        if {"cpu", "memory"} <= have:  # the v2 hierarchy owns the controllers
            return Layout(2, v2_parent=point / PARENT)
    parents = []
    for ctrl in V1_CONTROLLERS:
        for kind, point, opts in mounts:
            if kind == "cgroup" and ctrl in opts:
                mine = own.get(ctrl, "/").lstrip("/")
                parents.append((ctrl, point / mine / PARENT if mine else point / PARENT))
                break
    if {"cpu", "memory"} <= {c for c, _ in parents}:
        return Layout(1, v1_parents=tuple(parents))
    return None


def require_layout() -> Layout:
    found = layout()
    if found is None:
        raise ConfigError(
            "node resources need cgroups with the cpu and memory controllers (v2 at "
            "/sys/fs/cgroup, or v1 hierarchies); this machine has neither mounted"
        )
    return found


@dataclass
class CgroupRecord(Record):
    """The run's host cgroups: host -> controller -> directory (hosts with limits only)."""

    KEY = "cgroups"
    dirs: dict[str, dict[str, str]] = field(default_factory=dict)


def cgroup_name(run_id: str, host: str) -> str:
    return f"tb-{run_id}-{host}"


# -- making, joining, measuring and removing a host's cgroup ------------------------------


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as exc:
        raise StateError(f"cannot write {value!r} to {path}: {exc.strerror or exc}") from None


def needed_v2(res: Resources) -> list[str]:
    """The v2 controllers ``res`` uses."""
    out = []
    for ctrl, used in (
        ("cpu", res.cpu is not None),
        ("cpuset", res.cpuset is not None),
        ("memory", res.memory_mb is not None),
        ("io", res.read_mbps is not None or res.write_mbps is not None),
    ):
        if used:
            out.append(ctrl)
    return out


def check_v2_root(lay: Layout, controllers: Sequence[str]) -> None:
    """The controllers must be enabled for the root's children already: the testbed
    never changes the root cgroup (not its own; other software manages it)."""
    assert lay.v2_parent is not None
    root = lay.v2_parent.parent
    have = set((root / "cgroup.subtree_control").read_text().split())
    missing = [c for c in controllers if c not in have]
    if missing:
        raise ConfigError(
            f"node resources need the {', '.join(missing)} controller(s) enabled in "
            f"{root}/cgroup.subtree_control, which the testbed does not change: "
            f"echo '{' '.join('+' + c for c in missing)}' > {root}/cgroup.subtree_control"
        )


def _enable_v2(parent: Path, controllers: Sequence[str]) -> None:
    """The controllers enabled for the children of ``parent`` (ours: edgetb/)."""
    have = set((parent / "cgroup.subtree_control").read_text().split())
    missing = [c for c in controllers if c not in have]
    if missing:
        _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in missing))


def block_device(path: Path) -> str:
    """``MAJ:MIN`` of the whole disk holding ``path`` (what io.max throttles)."""
    st = os.stat(path)
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    sys_dev = Path("/sys/dev/block") / dev
    if not sys_dev.exists():
        raise ConfigError(
            f"disk bandwidth limits need {path} on a block device; its file system (device "
            f"{dev}) has none (tmpfs, overlay or a network file system)"
        )
    if (sys_dev / "partition").exists():  # throttling is per disk, not per partition
        dev = (sys_dev.resolve().parent / "dev").read_text().strip()
    return dev


def create(lay: Layout, name: str, res: Resources, data_dir: Path) -> dict[str, str]:
    """Make cgroup ``name`` with ``res``'s limits; returns controller -> directory (what the
    run records). The caller records the name first: a crash midway leaves a directory
    ``clean`` knows."""
    dirs = lay.dirs(name)
    if lay.version == 2:
        check_v2_root(lay, needed_v2(res))
    for _attempt in range(MAKE_ATTEMPTS):
        if _make(lay, dirs, res):
            break
    else:
        raise StateError(
            f"cannot make cgroup {name}: its parent {PARENT}/ was removed {MAKE_ATTEMPTS} "
            "times while it was being made (other runs starting and stopping)"
        )
    try:
        apply(lay, dirs, res, data_dir)
    except BaseException:
        remove(dirs)
        raise
    return {ctrl: str(d) for ctrl, d in dirs.items()}


def _make(lay: Layout, dirs: Mapping[str, Path], res: Resources) -> bool:
    """Make ``dirs`` (and the shared parents they need); False, with nothing of ours left
    made, when another run's ``remove`` took a parent away between two mkdirs. Once a
    child of ours is in it, a parent stays (the kernel refuses to remove it): only then
    are its settings made sure of, as another run may have made it anew meanwhile."""
    made: list[Path] = []
    parents = {d.parent for d in dirs.values()}
    try:
        for ctrl, d in dirs.items():
            d.parent.mkdir(parents=True, exist_ok=True)
            d.mkdir(exist_ok=False)
            made.append(d)
            if ctrl == "cpuset":  # v1: a cpuset has no CPUs until given its parent's
                _inherit_cpuset(d.parent)
                for f in ("cpuset.cpus", "cpuset.mems"):
                    _write(d / f, (d.parent / f).read_text().strip())
        if lay.version == 2:
            _enable_v2(dirs[""].parent, needed_v2(res))
    except (FileNotFoundError, StateError):
        vanished = not all(p.is_dir() for p in parents)  # before our own cleanup below
        for d in reversed(made):
            _rmdir_quietly(d)
        for p in parents:
            if p.name == PARENT:
                _rmdir_quietly(p)
        if not vanished:
            raise
        return False
    return True


def _rmdir_quietly(d: Path) -> None:
    try:
        os.rmdir(d)
    except OSError:
        pass


def _inherit_cpuset(parent: Path) -> None:
    """``parent``'s CPUs and memory nodes, where empty, from its own parent's."""
    for f in ("cpuset.cpus", "cpuset.mems"):
        if not (parent / f).read_text().strip():
            _write(parent / f, (parent.parent / f).read_text().strip())


def apply(lay: Layout, dirs: Mapping[str, Path], res: Resources, data_dir: Path) -> None:
    """Write ``res`` into a host's cgroup (also to change them at run time)."""
    if lay.version == 2:
        d = dirs[""]
        if res.cpu is not None:
            _write(d / "cpu.max", f"{max(1000, round(res.cpu * PERIOD_US))} {PERIOD_US}")
        if res.cpuset is not None:
            _write(d / "cpuset.cpus", format_cpuset(parse_cpuset(res.cpuset)))
        if res.memory_mb is not None:
            _write(d / "memory.max", str(res.memory_mb << 20))
            if (d / "memory.swap.max").exists():
                _write(d / "memory.swap.max", "0")
        if res.read_mbps is not None or res.write_mbps is not None:
            dev = block_device(data_dir)
            rb = "max" if res.read_mbps is None else str(int(res.read_mbps * 1e6))
            wb = "max" if res.write_mbps is None else str(int(res.write_mbps * 1e6))
            _write(d / "io.max", f"{dev} rbps={rb} wbps={wb}")
        return
    if "cpu" in dirs:
        _write(dirs["cpu"] / "cpu.cfs_period_us", str(PERIOD_US))
        quota_us = -1 if res.cpu is None else max(1000, round(res.cpu * PERIOD_US))
        _write(dirs["cpu"] / "cpu.cfs_quota_us", str(quota_us))
    if res.cpuset is not None:
        if "cpuset" not in dirs:
            raise ConfigError("node cpuset needs the cpuset controller, not mounted here")
        _write(dirs["cpuset"] / "cpuset.cpus", format_cpuset(parse_cpuset(res.cpuset)))
    if res.memory_mb is not None:
        _write(dirs["memory"] / "memory.limit_in_bytes", str(res.memory_mb << 20))
        memsw = dirs["memory"] / "memory.memsw.limit_in_bytes"
        if memsw.exists():  # no swap: the limit is the device's RAM
            _write(memsw, str(res.memory_mb << 20))
    if res.read_mbps is not None or res.write_mbps is not None:
        if "blkio" not in dirs:
            raise ConfigError("node disk bandwidth needs the blkio controller, not mounted here")
        dev = block_device(data_dir)
        for what, v in (("read", res.read_mbps), ("write", res.write_mbps)):
            if v is not None:
                _write(dirs["blkio"] / f"blkio.throttle.{what}_bps_device", f"{dev} {int(v * 1e6)}")


def procs_files(dirs: Mapping[str, str | Path]) -> list[str]:
    """The ``cgroup.procs`` a process writes its PID to, to join the host's cgroup."""
    return [str(Path(d) / "cgroup.procs") for d in dirs.values()]


# $1: the cgroup.procs files, space-separated; then the command. Exit 125 (and no
# command) when a file takes no PID: the host's limits would silently not apply.
JOIN = 'for f in $1; do echo $$ > "$f" || exit 125; done; shift; exec "$@"'


def join_argv(dirs: Mapping[str, str | Path], argv: Sequence[str]) -> list[str]:
    """``argv`` run inside the cgroup (the same PID: ``sh`` joins, then execs)."""
    files = procs_files(dirs)
    if any(" " in f for f in files):
        raise StateError(f"a cgroup path with a space: {files}")
    return ["sh", "-c", JOIN, "sh", " ".join(files), *argv]


def pids(dirs: Mapping[str, str | Path]) -> set[int]:
    out: set[int] = set()
    for d in dirs.values():
        try:
            out.update(int(p) for p in (Path(d) / "cgroup.procs").read_text().split())
        except (OSError, ValueError):
            pass
    return out


def cpu_usage_s(dirs: Mapping[str, str | Path]) -> float:
    """CPU seconds used by the cgroup's processes so far (v2 cpu.stat; v1 cpuacct)."""
    if "" in dirs:
        for line in (Path(dirs[""]) / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        raise StateError(f"no usage_usec in {dirs['']}/cpu.stat")
    for d in dirs.values():  # cpuacct's own hierarchy, or mounted with cpu
        if (Path(d) / "cpuacct.usage").is_file():
            return int((Path(d) / "cpuacct.usage").read_text()) / 1e9
    raise StateError("no CPU accounting for this cgroup (cpuacct is not mounted)")


def memory_peak_mb(dirs: Mapping[str, str | Path]) -> float | None:
    """The most memory the cgroup has used (v2 memory.peak where the kernel has it; v1
    memory.max_usage_in_bytes)."""
    for ctrl, name in (("", "memory.peak"), ("memory", "memory.max_usage_in_bytes")):
        if ctrl in dirs:
            try:
                return int((Path(dirs[ctrl]) / name).read_text()) / 2**20
            except (OSError, ValueError):
                return None
    return None


def remove(dirs: Mapping[str, str | Path], *, timeout_s: float = 10.0) -> list[int]:
    """Kill every process left in the cgroup (the run's, by construction) and remove its
    directories; returns the PIDs killed. A directory already gone is fine."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout_s
    while True:
        left = pids(dirs)
        for pid in left - set(killed):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        busy = []
        for d in dirs.values():
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError:
                busy.append(str(d))
        if not busy:
            for d in dirs.values():  # the last run out removes the shared parent
                if Path(d).parent.name == PARENT:
                    _rmdir_quietly(Path(d).parent)
            return killed
        if time.monotonic() > deadline:
            raise StateError(f"cgroups still in use after {timeout_s:g} s: {', '.join(busy)}")
        time.sleep(0.05)


def _hierarchies() -> list[tuple[str, Path]]:
    """(controller or "" for v2, mount point) of every hierarchy ours may be made in."""
    lay = layout()
    if lay is None:
        return []
    if lay.version == 2:
        assert lay.v2_parent is not None
        return [("", lay.v2_parent.parent)]
    out = []
    for ctrl, _parent in lay.v1_parents:
        for kind, point, opts in _mounts():
            if kind == "cgroup" and ctrl in opts:
                out.append((ctrl, point))
                break
    return out


def find(run_id: str | None = None, *, depth: int = 4) -> dict[str, dict[str, str]]:
    """Every host cgroup on this machine named by the strict pattern (of one run, or of
    any), in an ``edgetb`` directory up to ``depth`` levels into each hierarchy (v1: a
    run made them under the cgroup its process was in, which another session's process
    may not share): ``tb-<run>-<host>`` -> controller -> directory."""
    out: dict[str, dict[str, str]] = {}
    for ctrl, point in _hierarchies():
        stack = [(point, 0)]
        while stack:
            d, level = stack.pop()
            try:
                children = [c for c in d.iterdir() if c.is_dir()]
            except OSError:
                continue
            for c in children:
                m = NAME_RE.match(c.name)
                if d.name == PARENT and m:
                    if run_id in (None, m.group(1)):
                        out.setdefault(c.name, {})[ctrl] = str(c)
                elif level < depth and not m:
                    stack.append((c, level + 1))
    return out
