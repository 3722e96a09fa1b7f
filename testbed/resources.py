"""What a device-sized host may use, as a sweep or `edgetb up` names it: ``Resources``
(a CPU quota, CPU pinning, memory, disk bandwidth), the named device profiles, the
``--node-*`` flags and config-file entries per host, and the machine's online CPUs.
``testbed.cgroups`` turns them into the host's cgroup.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from common.errors import ConfigError

JVM_OVERHEAD_MB = 160  # metaspace, code cache, threads, direct buffers of a small node


@dataclass(frozen=True)
class Resources:
    """What one host may use (None: unlimited).

    cpu: cores of CPU time per wall second (the quota), e.g. 0.5.
    cpuset: the machine's CPUs it may run on, e.g. "1" or "0-1".
    memory_mb: its memory, page cache included; no swap.
    read_mbps / write_mbps: disk bandwidth, MB/s, on the device of the run directory.
    profile: the named profile these came from (recorded; see PROFILES)."""

    cpu: float | None = None
    cpuset: str | None = None
    memory_mb: int | None = None
    read_mbps: float | None = None
    write_mbps: float | None = None
    profile: str | None = None

    @property
    def limited(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self) if f.name != "profile")

    def check(self, cpus: Sequence[int] | None = None) -> None:
        """ConfigError (one line) for a value no cgroup would take."""
        if self.cpu is not None:
            if isinstance(self.cpu, bool) or not isinstance(self.cpu, (int, float)):
                raise ConfigError(f"node cpu must be a number of cores, got {self.cpu!r}")
            online = len(cpus) if cpus else os.cpu_count() or 1
            if not 0.01 <= self.cpu <= online:
                raise ConfigError(
                    f"node cpu must be 0.01..{online} cores (this machine's), got {self.cpu:g}"
                )
        if self.cpuset is not None:
            wanted = parse_cpuset(self.cpuset)
            have = set(cpus if cpus is not None else online_cpus())
            if not wanted <= have:
                raise ConfigError(
                    f"node cpuset {self.cpuset!r}: CPU {min(wanted - have)} is not online "
                    f"(online: {format_cpuset(have)})"
                )
        if self.memory_mb is not None and (
            isinstance(self.memory_mb, bool)
            or not isinstance(self.memory_mb, int)
            or not 64 <= self.memory_mb <= 1 << 20
        ):
            raise ConfigError(f"node memory must be 64..1048576 MB, got {self.memory_mb!r}")
        for name in ("read_mbps", "write_mbps"):
            v = getattr(self, name)
            if v is not None and (
                isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.1 <= v <= 100_000
            ):
                raise ConfigError(f"node {name} must be 0.1..100000 MB/s, got {v!r}")

    def check_heap(self, heap_mb: int, host: str) -> None:
        """The JVM must fit: heap plus what a JVM uses besides it, under the memory limit."""
        if self.memory_mb is not None and heap_mb + JVM_OVERHEAD_MB > self.memory_mb:
            raise ConfigError(
                f"{host}: a {heap_mb} MB heap needs about {heap_mb + JVM_OVERHEAD_MB} MB with "
                f"the JVM's own memory, more than the node's {self.memory_mb} MB: a smaller "
                f"--heap-mb or a larger --node-memory"
            )


# Named profiles. Approximations of a device's capacity on one x86-64 core of this class,
# to be checked against the device with benchmarks/resources.py, not taken as measured:
# a cgroup gives a share of the host's cores, not slower cores, and emulates neither the
# ARM instruction set and its JIT, nor memory bandwidth, caches, thermal throttling or an
# SD card's latency (only its bandwidth).
PROFILES: dict[str, Resources] = {
    # Raspberry Pi 4 (4 x Cortex-A72, 1.5 GHz; 2 GB): its four cores together do about
    # 0.6 of one current x86 core's work; an SD card (A1 class) reads ~40 MB/s, writes ~20.
    "rpi4": Resources(cpu=0.6, memory_mb=2048, read_mbps=40, write_mbps=20, profile="rpi4"),
    # Raspberry Pi 3 B+ (4 x Cortex-A53, 1.4 GHz; 1 GB): about half a Pi 4.
    "rpi3": Resources(cpu=0.3, memory_mb=1024, read_mbps=20, write_mbps=10, profile="rpi3"),
    # A small VM or gateway box: half a core, 1 GB.
    "small": Resources(cpu=0.5, memory_mb=1024, profile="small"),
}


def profile(name: str) -> Resources:
    try:
        return PROFILES[name]
    except KeyError:
        raise ConfigError(
            f"unknown node profile {name!r} (one of {', '.join(sorted(PROFILES))})"
        ) from None


def resolve(base: Resources | None, overrides: Mapping[str, Any] | None = None) -> Resources | None:
    """A profile's resources with single settings on top (None: no limit at all)."""
    out = base or Resources()
    if overrides:
        out = replace(out, **{k: v for k, v in overrides.items() if v is not None})
    return out if out.limited else None


# -- CPUs ------------------------------------------------------------------------------

MAX_CPUS = 8192  # Linux's largest CONFIG_NR_CPUS


def parse_cpuset(text: str) -> set[int]:
    """``0-2,5`` -> {0, 1, 2, 5}; ConfigError for anything else."""
    out: set[int] = set()
    for part in str(text).split(","):
        m = re.fullmatch(r"\s*(\d+)(?:-(\d+))?\s*", part)
        if not m:
            raise ConfigError(f"cpuset {text!r}: use CPU numbers and ranges, e.g. 0-1,3")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ConfigError(f"cpuset {text!r}: range {lo}-{hi} is descending")
        if hi >= MAX_CPUS:  # checked before the range is made: 0-99999999999 is a typo
            raise ConfigError(
                f"cpuset {text!r}: CPU {hi} is beyond what Linux numbers (0-{MAX_CPUS - 1})"
            )
        out.update(range(lo, hi + 1))
    return out


def format_cpuset(cpus: set[int] | Sequence[int]) -> str:
    """{0, 1, 2, 5} -> ``0-2,5``."""
    runs: list[list[int]] = []
    for c in sorted(set(cpus)):
        if runs and runs[-1][1] == c - 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def online_cpus() -> list[int]:
    try:
        return sorted(parse_cpuset(Path("/sys/devices/system/cpu/online").read_text().strip()))
    except (OSError, ConfigError):
        return list(range(os.cpu_count() or 1))


# -- node resources from flags and config files -------------------------------------------

FLAG_KINDS: dict[str, type] = {
    "profile": str,
    "cpu": float,
    "cpuset": str,
    "memory_mb": int,
    "read_mbps": float,
    "write_mbps": float,
}
FLAGS = {
    "profile": "--node-profile",
    "cpu": "--node-cpu",
    "cpuset": "--node-cpuset",
    "memory_mb": "--node-memory",
    "read_mbps": "--node-read-mbps",
    "write_mbps": "--node-write-mbps",
}
EVERY_EDGE = "*"


def parse_flag(name: str, text: str | None) -> dict[str, Any]:
    """``--node-<name>`` text -> {host or "*": value}: one value for every edge node
    (``0.5``) or per host (``e0=1,e1=0.5``; ``ep=`` limits the endpoint too)."""
    if text is None or str(text).strip() == "":
        return {}
    kind = FLAG_KINDS[name]
    out: dict[str, Any] = {}
    flag = FLAGS[name]
    # per host: e0=1,e1=0.5 (or ; between hosts, for cpusets with commas: e0=0,1;e1=2)
    sep_hosts = ";" if ";" in str(text) else ","
    parts = str(text).split(sep_hosts) if "=" in str(text) else [str(text)]
    if len(parts) > 1 and not all("=" in p for p in parts):
        raise ConfigError(
            f"{flag} {text!r}: per host, every part is HOST=VALUE (between hosts ';' when a "
            f"value has commas: e0=0,1;e1=2)"
        )
    for part in parts:
        host, sep, value = part.partition("=")
        if not sep:
            host, value = EVERY_EDGE, part
        host = host.strip()
        try:
            out[host] = value.strip() if kind is str else kind(value)
        except ValueError:
            raise ConfigError(f"{flag}: cannot read {value.strip()!r} as {kind.__name__}") from None
    return out


def spec_from(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """{setting: {host or "*": value}} (from ``parse_flag`` or a config file) -> the
    backend option: {host or "*": {setting: value}}."""
    spec: dict[str, dict[str, Any]] = {}
    for name, per_host in values.items():
        if name not in FLAG_KINDS:
            raise ConfigError(f"unknown node resource {name!r} (known: {', '.join(FLAG_KINDS)})")
        for host, value in (per_host or {}).items():
            spec.setdefault(host, {})[name] = value
    return spec


def resolve_spec(spec: Mapping[str, Mapping[str, Any]], topology: Any) -> dict[str, Resources]:
    """host -> its Resources (profile, then single settings; "*" is every edge node, a
    host's own entry on top); hosts without a limit are left out. ConfigError for an
    unknown host, profile or value."""
    names = {h.name for h in topology.hosts}
    for host in spec:
        if host != EVERY_EDGE and host not in names:
            raise ConfigError(
                f"node resources for unknown host {host!r} (hosts: {', '.join(sorted(names))})"
            )
    out: dict[str, Resources] = {}
    for h in topology.hosts:
        merged: dict[str, Any] = {}
        if h.is_edge:
            merged.update(spec.get(EVERY_EDGE, {}))
        merged.update(spec.get(h.name, {}))
        if not merged:
            continue
        base = profile(merged.pop("profile")) if merged.get("profile") else None
        res = resolve(base, merged)
        if res is None:
            continue
        res.check()
        out[h.name] = res
    return out
