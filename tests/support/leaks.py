"""What a test run could leave on this machine, inventoried with the system's own tools
(``ip``, ``tc``, ``iptables-save``, ``nft``, ``virsh``, the process table, the cgroup
and mount tables), not with the testbed's detector (``testbed.clean``, which finds only
what carries its tags and names, and no VM while libvirtd is down).

``take()`` is an inventory: kind -> set of lines. ``difference(before, after)`` is what
changed, as lines a person can act on. Processes count only when new and alive (this
sandbox's PID 1 reaps zombies late; a process that ended is no leak); every other kind
counts both ways, since removing what the run did not create is as wrong as leaving what
it did. The tests' session fixture (``tests/conftest.py``) takes one before the first
test and fails the run when one taken after the last still differs.

It sees the whole machine: a testbed another user starts or stops during the test run
is a difference too (``EDGETB_LEAK_CHECK=off`` turns the check off on a shared machine).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

Inventory = dict[str, set[str]]

# the programs a testbed runs (Cassandra's JVM, the VMs, SSH to them, the host shaper,
# libvirt's DHCP, YCSB) and the Python processes of the project's own commands
PROGRAMS = {"java", "qemu-system-x86", "qemu-system-x86_64", "ssh", "sshd", "edgetb-shaper",
            "dnsmasq", "tcpdump", "virtiofsd"}  # fmt: skip
PYTHON_COMMANDS = re.compile(
    r"-m (testbed|emulation|experiments|workloads|analysis|edgetb|distributed|tests\.support)"
    r"\b|dask[-_ ]|/edgetb\b"
)
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_DEPTH = 6
COUNTERS = re.compile(r"\[\d+:\d+\]")  # iptables-save's packet and byte counters


def _run(argv: list[str]) -> list[str]:
    """The lines ``argv`` prints; one line naming the failure when it cannot run (a tool
    that stops answering between two inventories is itself a difference)."""
    if shutil.which(argv[0]) is None:
        return [f"({argv[0]} not installed)"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"({' '.join(argv)}: {type(exc).__name__})"]
    if proc.returncode != 0:
        return [f"({' '.join(argv)}: exit {proc.returncode})"]
    return [line.rstrip() for line in proc.stdout.splitlines() if line.strip()]


def _namespaces() -> set[str]:
    return {line.split()[0] for line in _run(["ip", "netns", "list"]) if not line.startswith("(")}


def _links() -> set[str]:
    out = set()
    for line in _run(["ip", "-o", "link", "show"]):
        m = re.match(r"\d+: ([^:@]+)", line)
        out.add(m.group(1) if m else line)
    return out


def _qdiscs() -> set[str]:
    return {re.sub(r" refcnt \d+", "", line) for line in _run(["tc", "qdisc", "show"])}


def _netfilter() -> set[str]:
    lines: set[str] = set()
    for tool in ("iptables-save", "ip6tables-save"):
        for line in _run([tool]):
            if not line.startswith("#"):
                lines.add(f"{tool}: {COUNTERS.sub('', line)}")
    if shutil.which("nft"):
        lines |= {f"nft: {line.strip()}" for line in _run(["nft", "list", "ruleset"])}
    return lines


def _libvirt() -> set[str]:
    out = set()
    for what in ("list", "net-list", "pool-list"):
        for line in _run(["virsh", "-q", "-c", "qemu:///system", what, "--all", "--name"]):
            out.add(f"{what}: {line}")
    return out


def _processes() -> set[str]:
    """Live processes of the watched programs: "pid start comm cmdline"."""
    out = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z":  # a zombie: ended, waiting for PID 1
            continue
        python = comm.startswith("python") and PYTHON_COMMANDS.search(cmdline)
        if comm in PROGRAMS or python:
            out.add(f"{proc.name} {fields[19]} {comm} {cmdline.strip()[:200]}")
    return out


def _cgroups() -> set[str]:
    out: set[str] = set()
    if not CGROUP_ROOT.is_dir():
        return out
    for top in CGROUP_ROOT.iterdir():
        base = len(top.parts)
        for dirpath, dirnames, _ in os.walk(top):
            depth = len(Path(dirpath).parts) - base
            if depth >= CGROUP_DEPTH:
                dirnames.clear()
            if depth:
                out.add(dirpath)
    return out


def _mounts() -> set[str]:
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return {" ".join(line.split()[4:5] + line.split(" - ")[1].split()[:1]) for line in lines}


KINDS: dict[str, Callable[[], set[str]]] = {
    "network namespaces": _namespaces,
    "links": _links,
    "qdiscs": _qdiscs,
    "netfilter rules": _netfilter,
    "libvirt domains, networks, pools": _libvirt,
    "processes": _processes,
    "cgroups": _cgroups,
    "mounts": _mounts,
}


def take() -> Inventory:
    return {kind: fn() for kind, fn in KINDS.items()}


def difference(before: Inventory, after: Inventory) -> list[str]:
    """What ``after`` has that ``before`` had not (``+``) and, but for processes, what it
    lost (``-``), one line each."""
    out = []
    for kind in KINDS:
        old, new = before.get(kind, set()), after.get(kind, set())
        out += [f"+ {kind}: {line}" for line in sorted(new - old)]
        if kind != "processes":
            out += [f"- {kind}: {line}" for line in sorted(old - new)]
    return out


def settled(before: Inventory, grace_s: float = 30.0) -> list[str]:
    """The difference from ``before`` once the machine settles: taken again every second
    for up to ``grace_s`` while it differs (a JVM takes a few seconds to exit)."""
    deadline = time.monotonic() + grace_s
    while True:
        diff = difference(before, take())
        if not diff or time.monotonic() >= deadline:
            return diff
        time.sleep(1.0)
