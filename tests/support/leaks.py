"""What a test run could leave on this machine, inventoried with the system's own tools
(``ip``, ``tc``, ``iptables-save``, ``nft``, ``virsh``, the process table, the cgroup
and mount tables, the run registry and the session's home), not with the testbed's
detector (``testbed.clean``, which finds only what carries its tags and names, and no
VM while libvirtd is down).

``take()`` is an inventory: kind -> set of lines. ``difference(before, after)`` is what
changed of what the project could have made (``ours``): objects named ``tb-<run>-...``
or ``tb<run>br`` and what hangs off them (a tap on such a bridge, a qdisc on such a
link, a rule naming one), processes this session started (its tag is in their
environment, whatever they run) or that carry a run's tag or run the project's commands
or programs, cgroups under the project's ``edgetb`` directories, mounts of its
namespaces, entries of the run registry that point into this session's home, and that
home's runs. Processes count only when new and alive (this sandbox's PID 1 reaps
zombies late; a process that ended is no leak); every other kind counts both ways,
since removing what the run did not create is as wrong as leaving what it did.
``out_of_scope(before, after)`` names the other changes (another user's cgroups, a
foreign namespace): the machine changed there, but not through anything the project
does, so they are reported, not failed on. ``blind_spots`` names the tools that were
missing, so a check that could not look is never mistaken for a clean one. The tests'
session fixture (``tests/conftest.py``) takes one inventory before the first test and
fails the run when one taken after the last still differs in scope.
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
# The project's object names: a run's namespaces, VMs, networks and pools
# (``tb-<run>-<host>``), its libvirt bridges (``tb<run>br``), the run tag on processes and
# the ``edgetb`` directories (cgroups, caches, homes, the registry); and the objects the
# tests make themselves (``leakcheck<pid>``, tests/integration/test_0c_leak_check.py).
NAMES = re.compile(
    r"\btb-[0-9a-z]+-|\btb[0-9a-f]{6}br\b|tb\\x2d[0-9a-f]{6}|edgetb|\bleakcheck\d+|\bnetemq\d+",
    re.IGNORECASE,  # the host shaper's chain is EDGETB; libvirt escapes '-' in scopes
)
TOOLS = ("ip", "tc", "iptables-save", "ip6tables-save", "nft", "virsh")


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
    """Link names, with the bridge each is enslaved to ("vnet3 master tb1a2b3cbr")."""
    out = set()
    for line in _run(["ip", "-o", "link", "show"]):
        m = re.match(r"\d+: ([^:@]+)", line)
        master = re.search(r" master (\S+)", line)
        name = m.group(1) if m else line
        out.add(f"{name} master {master.group(1)}" if m and master else name)
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
    dirs = _project_dirs()
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
        # in scope when this session's tag is in its environment, whatever it runs (a
        # `sleep` a test forgot is as much a leak as a JVM); without a tag, by its whole
        # command line (a JVM's tag comes after ~1 kB of flags), unless its environment
        # says another test session or home started it; the line keeps only its start,
        # marked
        session = _session(proc)
        named = bool(NAMES.search(cmdline) or PYTHON_COMMANDS.search(cmdline)) or any(
            d in cmdline for d in dirs
        )
        mine = session == "ours" or (
            named and session is None and not in_another_test_home(cmdline)
        )
        if comm in PROGRAMS or mine:
            mark = OURS_MARK if mine else ""
            out.add(f"{proc.name} {fields[19]} {comm} {mark}{cmdline.strip()[:200]}")
    return out


OURS_MARK = "[project] "
# Set by tests/conftest.py for the session and inherited by everything it starts (also
# processes with an EDGETB_HOME of their own, as test_8's workers).
SESSION_VAR = "EDGETB_TEST_SESSION"


def _session(proc: Path) -> str | None:
    """Whose the process is by its environment: "ours" (this test session's tag, which
    everything the session starts inherits), "other" (another session's tag, or another
    ``$EDGETB_HOME``: a researcher's sweep beside the tests), or None where it says
    neither (QEMU and dnsmasq, libvirtd's children: judged by name). A process whose
    environment cannot be read (it ended meanwhile) says neither."""
    try:
        env = dict(
            item.split(b"=", 1)
            for item in (proc / "environ").read_bytes().split(b"\0")
            if b"=" in item
        )
    except OSError:
        return None
    session = env.get(SESSION_VAR.encode())
    if session is not None:
        same = session.decode(errors="replace") == os.environ.get(SESSION_VAR)
        return "ours" if same else "other"
    home = env.get(b"EDGETB_HOME")
    if home is not None:
        ours = os.path.realpath(os.path.expanduser(os.environ.get("EDGETB_HOME", "~/.edgetb")))
        return None if os.path.realpath(home.decode(errors="replace")) == ours else "other"
    return None


# the homes tests/conftest.py makes for a test session (tempfile.mkdtemp's prefix)
TEST_HOME = re.compile(r"(/[^\s:]*/edgetb-tests-[A-Za-z0-9_]+)/")


def in_another_test_home(cmdline: str) -> bool:
    """Whether ``cmdline`` names a path under another test session's home: a process
    whose environment says nothing (an SSH connection master a worker started with an
    environment of its own) but that only that session's runs use."""
    own = os.path.realpath(os.environ.get("EDGETB_HOME", "/nonexistent"))
    return any(os.path.realpath(m.group(1)) != own for m in TEST_HOME.finditer(cmdline))


def _project_dirs() -> list[str]:
    """The directories the project's processes run from: its caches, this session's
    home and this checkout (a nodetool JVM carries no tag, only its dist's path)."""
    from common.paths import cache_root
    from testbed.state import home

    checkout = Path(__file__).resolve().parents[2]
    return [str(p) + "/" for p in (cache_root(), home(), checkout)]


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


def _registry() -> set[str]:
    """The machine-wide run registry (``/run/edgetb/runs``): "run id -> run directory"."""
    from testbed.ownership import registry_dir

    reg = registry_dir()
    out = set()
    for entry in sorted(reg.iterdir()) if reg.is_dir() else []:
        try:
            out.add(f"{entry.name} -> {os.readlink(entry)}")
        except OSError:
            out.add(entry.name)
    return out


def _home() -> set[str]:
    """The runs recorded in this session's ``$EDGETB_HOME``."""
    from testbed.state import home

    runs = home() / "runs"
    return {p.name for p in runs.iterdir()} if runs.is_dir() else set()


KINDS: dict[str, Callable[[], set[str]]] = {
    "network namespaces": _namespaces,
    "links": _links,
    "qdiscs": _qdiscs,
    "netfilter rules": _netfilter,
    "libvirt domains, networks, pools": _libvirt,
    "processes": _processes,
    "cgroups": _cgroups,
    "mounts": _mounts,
    "run registry": _registry,
    "session home": _home,
}


def take() -> Inventory:
    return {kind: fn() for kind, fn in KINDS.items()}


def _our_links(inventory: Inventory) -> set[str]:
    """The links the project could have made: named as its objects, or enslaved to one
    of its bridges (a VM's tap); the link name only."""
    return {line.split()[0] for line in inventory.get("links", set()) if NAMES.search(line)}


def ours(kind: str, line: str, links: set[str], home: str) -> bool:
    """Whether ``line`` of ``kind`` is something the project could have made or changed;
    ``links``: its link names (``_our_links``), ``home``: this session's $EDGETB_HOME."""
    if kind == "session home" or line.startswith("("):
        return True  # a tool that stopped answering: the check cannot see, so it fails
    if kind == "run registry":  # another session's or user's runs are theirs
        return f"-> {os.path.realpath(home)}/" in line
    if kind == "cgroups":  # its own directories, and VM scopes named after its runs
        return "edgetb" in Path(line).parts or bool(NAMES.search(Path(line).name))
    if kind == "qdiscs":
        dev = re.search(r" dev (\S+)", line)
        return bool(NAMES.search(line) or (dev and dev.group(1) in links))
    if kind == "netfilter rules":
        return bool(
            NAMES.search(line) or any(re.search(rf"\b{re.escape(n)}\b", line) for n in links)
        )
    if kind == "processes":  # marked by _processes: this session's tag or its command line
        return OURS_MARK in line
    return bool(NAMES.search(line))


# a run id where the project's objects carry it: namespaces, VMs, networks and pools
# (tb-<run>-), libvirt bridges (tb<run>br) and scopes (tb\x2d<run>), JVMs' tags
RUN_IDS = re.compile(
    r"\btb-([0-9a-f]{6})-|\btb([0-9a-f]{6})br\b|tb\\x2d([0-9a-f]{6})|edgetb\.run=([0-9a-f]{6})"
)


def others_runs(before: Inventory, after: Inventory, home: str) -> set[str]:
    """The runs the registry, in either inventory, places outside this session's home:
    another test session's or a researcher's, running beside this one."""
    inside = f"-> {os.path.realpath(home)}/"
    return {
        line.split()[0]
        for line in before.get("run registry", set()) | after.get("run registry", set())
        if " -> " in line and inside not in line
    }


def of_others(line: str, runs: set[str]) -> bool:
    """Whether ``line`` names runs and every one is in ``runs`` (another's): a line that
    names no run, or one of this session's, or an unknown one, stays in scope."""
    named = {next(g for g in m.groups() if g) for m in RUN_IDS.finditer(line)}
    return bool(named) and named <= runs


def _with_bridges(line: str, taps: dict[str, str]) -> str:
    """``line`` with the bridge of every tap it names appended (the run is the bridge's)."""
    named = [b for tap, b in taps.items() if re.search(rf"\b{re.escape(tap)}\b", line)]
    return " ".join([line, *named])


def _split(before: Inventory, after: Inventory) -> tuple[list[str], list[str]]:
    """(the differences in scope, the others), one line each: what ``after`` has that
    ``before`` had not (``+``) and, but for processes, what it lost (``-``). Objects of
    runs another session registered (``others_runs``) are that session's."""
    links = _our_links(before) | _our_links(after)
    home = os.environ.get("EDGETB_HOME", "/nonexistent")
    theirs = others_runs(before, after, home)
    # a tap names no run: the bridge it is enslaved to does ("vnet3 master tb1a2b3cbr")
    taps = {
        parts[0]: parts[2]
        for line in before.get("links", set()) | after.get("links", set())
        if len(parts := line.split()) == 3 and parts[1] == "master"
    }
    mine: list[str] = []
    other: list[str] = []
    for kind in KINDS:
        old, new = before.get(kind, set()), after.get(kind, set())
        changes = [("+", line) for line in sorted(new - old)]
        if kind != "processes":
            changes += [("-", line) for line in sorted(old - new)]
        for sign, line in changes:
            if ours(kind, line, links, home) and not (
                theirs and of_others(_with_bridges(line, taps), theirs)
            ):
                mine.append(f"{sign} {kind}: {line}")
            elif kind != "processes":  # other processes: the machine's comings and goings
                other.append(f"{sign} {kind}: {line}")
    return mine, other


def difference(before: Inventory, after: Inventory) -> list[str]:
    """What changed of what the project could have made (``ours``), one line each."""
    return _split(before, after)[0]


def out_of_scope(before: Inventory, after: Inventory) -> list[str]:
    """What changed that the project could not have made: named, never failed on."""
    return _split(before, after)[1]


def blind_spots() -> list[str]:
    """The inventory's tools missing on this machine (what the check could not see)."""
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def settled(before: Inventory, grace_s: float = 30.0) -> list[str]:
    """The difference from ``before`` once the machine settles: taken again every second
    for up to ``grace_s`` while it differs (a JVM takes a few seconds to exit)."""
    deadline = time.monotonic() + grace_s
    while True:
        diff = difference(before, take())
        if not diff or time.monotonic() >= deadline:
            return diff
        time.sleep(1.0)
