"""Shapers apply a LinkMatrix to a running testbed:

- ``direct``: tcconfig's netem on each host's own eth0 (sender egress), wherever the
  kernel has sch_netem (and always inside VMs and inventory hosts);
- ``host``: where the kernel has no netem, a compiled delayer on the machine fed by
  netfilter queues inside the testbed's namespaces (``emulation.hostshaper``);
- ``gateway``: tcconfig's netem in a gateway VM routing the testbed (kept to test the
  tcconfig-on-netem path on kernels without netem; ``--shaper gateway``).

A shaper records what it built in the run's state file; ``for_testbed`` reattaches.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import secrets
import select
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any, Protocol

from testbed import qdisc
from testbed.backends import backend_class, capabilities
from testbed.backends.netns import BRIDGE, list_prefixed_namespaces, switch_namespace
from testbed.cassandra.dist import cache_root
from testbed.cassandra.node import pid_alive, terminate
from testbed.errors import CommandError, ConfigError, StateError
from testbed.files import append_to
from testbed.runner import run
from testbed.state import Record, namespace_name
from testbed.testbed import Testbed

from . import hostshaper as hs
from . import tcgen
from .gateway import image as gw_image
from .gateway.vm import (
    GatewayError,
    GatewayVM,
    Port,
    ports_for,
    run_all,
    unwire_commands,
    wire_commands,
)
from .links import LinkMatrix
from .tcgen import Rule, Structure

SHAPERS = ("auto", "direct", "host", "gateway")
_netem_cache: bool | None = None


def netem_available() -> bool:
    """Whether this kernel can run netem: tried once on a veth in a scratch namespace."""
    global _netem_cache
    if _netem_cache is None:
        # this process's own name: two processes probing at once (two workers set up on
        # one machine) collided on a name made from the clock
        ns = f"tb-netemprobe{os.getpid()}-{secrets.token_hex(2)}"
        run(["ip", "netns", "add", ns])
        try:
            run(["ip", "-n", ns, "link", "add", "name", "p0", "type", "veth", "peer", "name", "p1"])
            proc = run(
                [
                    "ip",
                    "netns",
                    "exec",
                    ns,
                    "tc",
                    "qdisc",
                    "add",
                    "dev",
                    "p0",
                    "root",
                    "netem",
                    "delay",
                    "1ms",
                ],
                check=False,
            )
            _netem_cache = proc.returncode == 0
        finally:
            run(["ip", "netns", "del", ns], check=False)
    return _netem_cache


def netem_listed() -> bool:
    """Whether this kernel has netem, read without changing anything (for estimates: a
    dry run must not make namespaces or load modules): loaded or built in, or a module
    of the running kernel. ``netem_available`` is the proof."""
    if _netem_cache is not None:
        return _netem_cache
    if Path("/sys/module/sch_netem").exists():
        return True
    modules = Path("/lib/modules") / os.uname().release
    for index in ("modules.builtin", "modules.dep"):
        try:
            if "/sch_netem.ko" in (modules / index).read_text():
                return True
        except OSError:
            continue
    return False


def resolve(name: str, backend: str = "netns", *, probe: bool = True) -> str:
    """auto -> direct where the kernel has netem, else host; ConfigError for unknown names.
    ``probe=False``: judged by ``netem_listed`` (nothing on the machine changes) and
    direct taken as asked.

    VMs and inventory hosts (``libvirt``, ``hosts``) have kernels of their own with netem:
    they are always shaped directly, inside each host, as the paper's scripts did."""
    if name not in SHAPERS:
        raise ConfigError(f"unknown shaper {name!r} (choose from {', '.join(SHAPERS)})")
    if backend_class(backend).remote:
        if name in ("gateway", "host"):
            raise ConfigError(
                f"the {backend} backend shapes inside its hosts: use --shaper direct (or auto)"
            )
        return "direct"
    if name == "auto":
        return "direct" if (netem_available() if probe else netem_listed()) else "host"
    if name == "direct" and probe and not netem_available():
        raise ConfigError("this kernel has no sch_netem: use --shaper host (or auto)")
    return name


def preflight(name: str) -> None:
    """What a resolved shaper needs on this machine, checked before anything starts
    (ConfigError saying what to install)."""
    if name == "host":
        missing = hs.needed_tools()
        if not hs.binary_path().is_file():
            missing += hs.missing_build_inputs()
        if missing:
            raise ConfigError(
                f"the host shaper needs {', '.join(missing)}: `make shaper` installs "
                f"{hs.PACKAGES} and builds it"
            )
        if not hs.bridge_netfilter():
            raise ConfigError(hs.NO_BRIDGE_NETFILTER)


class Shaper(Protocol):
    """What ``api`` needs from a shaper (direct, gateway); REGISTRY maps names to them."""

    name: str
    loss_location: str

    def __init__(self, tb: Testbed) -> None: ...

    def start(self) -> float:
        """Build the shaping (unshaped links) unless it is up; returns the seconds taken."""

    def apply(self, matrix: LinkMatrix) -> float:
        """Give every ordered pair its link; returns the seconds the change took."""

    def stop(self) -> None:
        """Remove everything the shaper built."""

    def close(self) -> None:
        """Let go of what this object holds open (the gateway's command channel, which
        takes one client at a time); the shaping stays."""

    def problems(self, *, thorough: bool = False) -> list[str]:
        """What of the shaping is gone (empty when intact)."""

    def show(self) -> list[str]:
        """The qdiscs as tc shows them."""


@dataclass
class EmulationRecord(Record):
    """Which shaper the run uses and the matrix last applied (none before the first set)."""

    KEY = "emulation"
    shaper: str | None = None
    loss_location: str = ""
    matrix: dict[str, Any] | None = None


@dataclass
class GatewayRecord(Record):
    """The gateway VM of the run: its QEMU pid, how it booted, its qdisc structure."""

    KEY = "shaper.gateway"
    pid: int | None = None
    boot_s: float = 0.0
    accel: str | None = None
    structure: dict[str, Any] = field(default_factory=dict)


@dataclass
class DirectRecord(Record):
    """The qdisc structure tcconfig made on each host (host -> Structure.to_dict())."""

    KEY = "shaper.direct"
    structures: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class HostShaperRecord(Record):
    """The host shaper of the run: the delayer's pid and control socket, the iptables back
    end that took its chain (in the switch namespace), the queued links (source address,
    destination address, queue) and the offloads before, per host."""

    KEY = "shaper.host"
    pid: int | None = None
    socket: str = ""
    iptables: str = "nft"
    links: list[list[Any]] = field(default_factory=list)
    offloads: dict[str, dict[str, str]] = field(default_factory=dict)


def emulation(tb: Testbed) -> EmulationRecord:
    """The emulation record of a running testbed (an empty one on first use)."""
    if tb.state is None:
        raise StateError("testbed is not up")
    return tb.state.get(EmulationRecord) or tb.state.put(EmulationRecord())


def _save(tb: Testbed) -> None:
    assert tb.state is not None
    tb.state.save()


def _put(tb: Testbed, rec: Any) -> Any:
    """``rec`` recorded in the run's state, and saved."""
    assert tb.state is not None
    tb.state.put(rec)
    tb.state.save()
    return rec


def _drop(tb: Testbed, cls: type[Record]) -> None:
    assert tb.state is not None
    tb.state.drop(cls)
    tb.state.save()


def _structure_cache(key_data: dict, build) -> Structure:
    """Cached tcconfig output: tcconfig takes ~0.5 s per rule, the topology decides it all."""
    key = hashlib.sha256(json.dumps(key_data, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_root() / "tc" / f"{key}.json"
    if path.is_file():
        return Structure.from_dict(json.loads(path.read_text()))
    structure = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(structure.to_dict()))
    tmp.replace(path)
    return structure


def gateway_rules(topology, ports: Sequence[Port]) -> list[Rule]:
    """Gateway: on the guest port facing each source, incoming traffic per destination."""
    return [
        Rule(src.name, dst.name, port.guest_if, "incoming", f"{dst.address}/32")
        for src, port in zip(topology.hosts, ports, strict=True)
        for dst in topology.hosts
        if dst is not src
    ]


def direct_rules(topology, src) -> list[Rule]:
    """Direct: on the source host's own eth0, outgoing traffic per destination."""
    return [
        Rule(src.name, dst.name, "eth0", "outgoing", f"{dst.address}/32")
        for dst in topology.hosts
        if dst is not src
    ]


class GatewayShaper:
    """Links through the netem gateway VM; tcconfig rules on each port's ingress (IFB)."""

    name = "gateway"
    loss_location = "in the network (gateway VM), not at the sender"

    def __init__(self, tb: Testbed):
        self.tb = tb
        self.hosts = [h.name for h in tb.topology.hosts]
        self.ports = ports_for(self.hosts)
        self.switch_ns = switch_namespace(tb.run_id)
        assert tb.state is not None
        saved = tb.state.get(GatewayRecord)
        self.vm = GatewayVM(
            tb.state.run_dir, self.switch_ns, self.ports, pid=saved.pid if saved else None
        )
        self.structure = Structure.from_dict(saved.structure) if saved else None

    def rules(self) -> list[Rule]:
        return gateway_rules(self.tb.topology, self.ports)

    def _generate(self) -> Structure:
        ns = namespace_name(self.tb.run_id, "tcgen")
        run(["ip", "netns", "add", ns])
        try:
            # Stand-ins named like the guest's ports: tcconfig checks the device exists.
            for port in self.ports:
                run(
                    [
                        "ip",
                        "-n",
                        ns,
                        "link",
                        "add",
                        "name",
                        port.guest_if,
                        "type",
                        "veth",
                        "peer",
                        "name",
                        f"x{port.guest_if}",
                    ]
                )
            return tcgen.generate(self.rules(), tcgen.run_tcset_in(["ip", "netns", "exec", ns]))
        finally:
            run(["ip", "netns", "del", ns], check=False)

    def start(self) -> float:
        """Boot and wire the gateway (once per run); returns the seconds it took."""
        if self.structure is not None and self.vm.alive():
            return 0.0
        t0 = time.monotonic()
        image = gw_image.load()
        key = {
            "kind": "gateway",
            "rules": [r.__dict__ for r in self.rules()],
            "limit": tcgen.NETEM_LIMIT,
            "tcconfig": version("tcconfig"),
        }
        self.structure = _structure_cache(key, self._generate)
        try:
            boot_s = self.vm.start(image, self.structure.ifb_devices)
            _put(self.tb, GatewayRecord(
                self.vm.pid, boot_s, self.vm.accel, self.structure.to_dict()
            ))  # fmt: skip
            # A gateway that died leaves its per-host bridges behind: back to the shared
            # bridge first, or re-wiring fails with "RTNETLINK answers: File exists".
            run_all(unwire_commands(self.switch_ns, self.ports, BRIDGE), ignore_missing=True)
            run_all(wire_commands(self.switch_ns, self.ports, BRIDGE))
            self.vm.batch(self.structure.tc_lines)
        except BaseException:
            self.stop()
            raise
        return time.monotonic() - t0

    def apply(self, matrix: LinkMatrix) -> float:
        self.start()
        assert self.structure is not None
        t0 = time.monotonic()
        self.vm.batch(tcgen.change_lines(self.structure, matrix.links))
        return time.monotonic() - t0

    def show(self) -> list[str]:
        """The guest's qdiscs on its ports and IFBs. Not a bare `qdisc show`: that lists
        lo's sentinel qdisc first, which ends the batch's output before anything else."""
        if not self.vm.alive():
            return []
        devices = [p.guest_if for p in self.ports]
        if self.structure is not None:
            devices += self.structure.ifb_devices
        return self.vm.batch([f"qdisc show dev {d}" for d in devices])

    def problems(self, *, thorough: bool = False) -> list[str]:
        """The gateway VM is not running (cheap), or answers without its netem qdiscs."""
        if self.structure is None:
            return []
        if not self.vm.alive():
            return [f"the gateway VM (pid {self.vm.pid}) is not running"]
        if thorough:
            try:
                shown = self.show()
            except (GatewayError, OSError) as exc:
                return [f"the gateway VM does not answer: {exc}"]
            netems = sum("netem" in line for line in shown)
            expected = self.structure.netem_qdiscs
            if netems < expected:
                return [f"the gateway has {netems} of its {expected} netem qdiscs"]
        return []

    def close(self) -> None:
        self.vm.close()

    def stop(self) -> None:
        self.vm.stop()
        run_all(unwire_commands(self.switch_ns, self.ports, BRIDGE), ignore_missing=True)
        _drop(self.tb, GatewayRecord)
        self.structure = None


DIRECT_DEVICE = "eth0"
START_TIMEOUT_S = 10.0  # the delayer binds its queues in milliseconds
# A release this late is a stall (the delayer stopped or starved), not timer noise: its
# p99.9 is a few ms on a loaded 2-core VM. The cell measured across it is void.
STALL_MS = 100


class DirectShaper:
    """netem on each host's own eth0, per destination (tcconfig's outgoing rules).

    Before the first shaping, each host's qdiscs on eth0 are recorded in the run's state
    (``qdisc_before``); ``stop`` — and the hosts backend's ``down`` if shaping is still
    on — puts exactly those back (``testbed.qdisc``). A host whose qdiscs could not be
    put back is refused before anything on any host changes.
    """

    name = "direct"
    # netem returns success for a random drop (net/sched/sch_netem.c): TCP is not told and
    # recovers by its timer, as it does from a drop in the gateway (model.rtt)
    loss_location = "at the sender's egress (netem reports success: TCP recovers by its timer)"

    def __init__(self, tb: Testbed):
        self.tb = tb
        assert tb.state is not None
        saved = tb.state.get(DirectRecord)
        self.structures = (
            {h: Structure.from_dict(s) for h, s in saved.structures.items()} if saved else None
        )

    def record(self) -> dict[str, dict[str, str]]:
        """Each host's qdiscs on eth0 as they are now, checked to be restorable, saved."""
        assert self.tb.state is not None
        rec = self.tb.state.get(qdisc.QdiscRecord)
        if rec is not None:  # a crash after recording, before shaping ended
            return rec.before
        before = {}
        for host in self.tb.topology.hosts:
            text = self.tb.exec(host.name, qdisc.show_argv(DIRECT_DEVICE)).stdout
            qdisc.check_restorable(host.name, DIRECT_DEVICE, text)
            before[host.name] = {DIRECT_DEVICE: text}
        _put(self.tb, qdisc.QdiscRecord(before))
        return before

    def start(self) -> float:
        if self.structures is not None:
            return 0.0
        t0 = time.monotonic()
        self.record()
        structures = {}
        for host in self.tb.topology.hosts:
            structures[host.name] = tcgen.generate(
                direct_rules(self.tb.topology, host),
                tcgen.run_tcset_via(
                    functools.partial(self.tb.exec_argv, host.name, limited=False),
                    str(Path(self.tb.python).parent / "tcset"),
                ),
            )
        self.structures = structures
        _put(self.tb, DirectRecord({h: s.to_dict() for h, s in structures.items()}))
        try:
            for name, structure in structures.items():
                self._batch(name, structure.tc_lines)
        except BaseException:
            self.stop()  # no half-shaped hosts, and no record of shaping that is not there
            raise
        return time.monotonic() - t0

    def _batch(self, host: str, lines: Sequence[str]) -> None:
        argv = self.tb.exec_argv(host, ["tc", "-batch", "-"], limited=False)
        proc = subprocess.run(
            argv,
            input="".join(f"{ln}\n" for ln in lines),
            capture_output=True,
            text=True,
            timeout=30,
        )
        if proc.returncode != 0:
            raise CommandError(argv, proc.returncode, proc.stdout, proc.stderr)

    def apply(self, matrix: LinkMatrix) -> float:
        self.start()
        assert self.structures is not None
        t0 = time.monotonic()
        for host, structure in self.structures.items():
            self._batch(host, tcgen.change_lines(structure, matrix.links))
        return time.monotonic() - t0

    def problems(self, *, thorough: bool = False) -> list[str]:
        """A host lost its netem qdiscs (checked only when ``thorough``: one exec per host)."""
        if self.structures is None or not thorough:
            return []
        found = []
        for host, structure in self.structures.items():
            proc = self.tb.exec(host, ["tc", "qdisc", "show", "dev", "eth0"], check=False)
            netems = proc.stdout.count("netem")
            expected = structure.netem_qdiscs
            if proc.returncode != 0 or netems < expected:
                found.append(f"{host}: {netems} of its {expected} netem qdiscs on eth0")
        return found

    def show(self) -> list[str]:
        lines = []
        for host in self.tb.topology.hosts:
            out = self.tb.exec(host.name, ["tc", "qdisc", "show", "dev", "eth0"]).stdout
            lines += [f"{host.name}: {ln}" for ln in out.splitlines()]
        return lines

    def close(self) -> None:
        """Nothing held open: each change is a tcconfig command."""

    def stop(self) -> None:
        """Every host's eth0 back to the qdiscs recorded before the first shaping.

        Every host is tried; QdiscRestoreError lists those that failed, and the record
        stays in the run state so that a second ``clear --remove`` can finish the job.
        """
        assert self.tb.state is not None
        rec = self.tb.state.get(qdisc.QdiscRecord)
        before = rec.before if rec else {}
        problems = []
        for host in self.tb.topology.hosts:
            recorded = before.get(host.name, {}).get(DIRECT_DEVICE)
            try:
                if recorded is None:  # a run shaped before qdiscs were recorded
                    self.tb.exec(
                        host.name, ["tc", "qdisc", "del", "dev", "eth0", "root"], check=False
                    )
                else:
                    qdisc.restore(
                        lambda argv, check, h=host.name: self.tb.exec(h, argv, check=check),
                        host.name,
                        DIRECT_DEVICE,
                        recorded,
                    )
            except qdisc.QdiscRestoreError as exc:
                problems.append(str(exc))
            except CommandError as exc:
                problems.append(f"{host.name}: {' '.join(str(exc).split())[:400]}")
        if problems:
            raise qdisc.QdiscRestoreError("\n".join(problems))
        self.tb.state.drop(DirectRecord)
        _drop(self.tb, qdisc.QdiscRecord)
        self.structures = None


class HostShaper:
    """A compiled delayer on the machine, fed by netfilter queues in the testbed's own
    switch namespace (``emulation.hostshaper``): the default where the kernel has no netem.

    The switch's bridge queues what it forwards on a shaped link to the queue of the
    link's destination; one delayer process per testbed, in that namespace, holds each
    packet for its link's delay and drops it with the link's loss. A change of the matrix
    is one message to the delayer (and new queue rules only where a link becomes shaped or
    unshaped). Its state in the run: the delayer's pid and control socket, the queued
    links, and each host's offload settings before (put back by ``stop``).
    """

    name = "host"
    loss_location = (
        "in the network (dropped in the switch, between the hosts: the sender is not told "
        "and recovers by its timer)"
    )

    def __init__(self, tb: Testbed):
        self.tb = tb
        assert tb.state is not None
        self.saved = tb.state.get(HostShaperRecord)
        self.control = hs.Control(hs.socket_path(tb.state.run_dir, tb.run_id))

    @property
    def tag(self) -> str:
        return f"edgetb.run={self.tb.run_id}:shaper"

    def _ns(self, host: str) -> str:
        return namespace_name(self.tb.run_id, host)

    def _in(self, host: str, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self._ns(host), *argv]

    def alive(self) -> bool:
        return (
            self.saved is not None
            and self.saved.pid is not None
            and pid_alive(self.saved.pid, f"--tag={self.tag}")
        )

    def start(self) -> float:
        """Start the delayer and queue nothing yet (unshaped links are not queued)."""
        if self.alive():
            return 0.0
        if not capabilities(self.tb.backend_name).namespaces:
            raise ConfigError("the host shaper queues in network namespaces of this machine")
        if self.saved is not None:  # a delayer that died: its rules and record go first
            self.stop()
        t0 = time.monotonic()
        binary = hs.build()
        hosts = self.tb.topology.hosts
        switch = f"/run/netns/{switch_namespace(self.tb.run_id)}"
        members = [hs.Member(h.name, h.address, switch, i) for i, h in enumerate(hosts)]
        # Recorded before anything is made, so a crash midway leaves what `stop` undoes.
        self.saved = _put(self.tb, HostShaperRecord(socket=self.control.path))
        try:
            offloads = {}
            for h in hosts:
                shown = run(self._in(h.name, ["ethtool", "-k", hs.DEVICE])).stdout
                offloads[h.name] = hs.parse_offloads(shown)
            self.saved.offloads = offloads
            _save(self.tb)
            for h in hosts:
                wanted = {f: "off" for f in offloads[h.name]}
                if wanted:
                    run(self._in(h.name, hs.offload_argv(wanted)))
            self.saved.iptables = self._chain()
            self.saved.pid = self._spawn(binary, members)
            _save(self.tb)
        except BaseException:
            self.stop()
            raise
        return time.monotonic() - t0

    def _in_switch(self, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", switch_namespace(self.tb.run_id), *argv]

    def _chain(self) -> str:
        """The chain and its jump made in the switch namespace, after its bridge was set to
        pass IPv4 through iptables; returns the iptables back end that took them (the
        faster one where the kernel has its tables)."""
        proc = run(self._in_switch(hs.sysctl_argv()), check=False)
        if proc.returncode != 0:
            said = (proc.stderr.strip().splitlines() or ["sysctl failed"])[-1]
            raise hs.ShaperError(f"{hs.NO_BRIDGE_NETFILTER}: {said}")
        found = hs.variants()
        if not found:
            raise hs.ShaperError("no iptables-restore on this machine (`make shaper`)")
        for variant in found:
            proc = run(self._in_switch(hs.restore_argv(variant)),
                       input=hs.chain_setup_text(), check=False)  # fmt: skip
            if proc.returncode == 0:
                return variant
        # not one back end took it: the last one's error
        raise CommandError(proc.args, proc.returncode, proc.stdout, proc.stderr)

    def _spawn(self, binary: Path, members: Sequence[hs.Member]) -> int:
        assert self.tb.state is not None
        sock = Path(self.control.path)
        sock.parent.mkdir(parents=True, exist_ok=True)
        argv = [
            "ip", "netns", "exec", switch_namespace(self.tb.run_id),
            *hs.delayer_argv(binary, sock, self.tag, members, dists=hs.dist_dir()),
        ]  # fmt: skip
        log_path = self.tb.state.run_dir / "shaper.log"
        with append_to(log_path, binary=True) as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )
        assert proc.stdout is not None
        ready = ""  # "ready PID", or nothing when it ended or hangs
        if select.select([proc.stdout], [], [], START_TIMEOUT_S)[0]:
            ready = proc.stdout.readline().decode(errors="replace")
        proc.stdout.close()
        if not ready and proc.poll() is None:
            proc.kill()
        if not ready.startswith("ready"):
            proc.wait(timeout=10)
            tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
            raise hs.ShaperError(
                f"the host shaper did not start (exit {proc.returncode}): " + " / ".join(tail)
            )
        return proc.pid

    def _queue(self, wanted: list[hs.Queued]) -> None:
        """The switch's queue rules rewritten when the set of shaped links changed."""
        assert self.saved is not None
        if sorted(tuple(x) for x in self.saved.links) == sorted(wanted):
            return
        argv = self._in_switch(hs.restore_argv(self.saved.iptables))
        run(argv, input=hs.chain_rules_text(wanted))
        self.saved.links = [list(x) for x in wanted]
        _save(self.tb)

    def apply(self, matrix: LinkMatrix) -> float:
        self.start()
        for link in matrix.links.values():
            hs.check_link_supported(link)
        t0 = time.monotonic()
        # Links first, queues second: a newly queued packet finds its link's setting. The
        # lateness record starts with the setting (``problems`` judges it).
        self.control.send([*hs.matrix_lines(matrix.links), "resetlate"])
        addresses = {h.name: h.address for h in self.tb.topology.hosts}
        self._queue(hs.shaped_links(matrix.links, addresses))
        return time.monotonic() - t0

    def stats(self) -> dict[str, Any]:
        """The delayer's counters: per link packets, drops, held; release lateness."""
        return json.loads(self.control.send(["stats"])[0])

    def problems(self, *, thorough: bool = False) -> list[str]:
        """The delayer is not running (cheap); ``thorough``: it does not answer, or a
        host's queue rules are not the ones set."""
        if self.saved is None:
            return []
        if not self.alive():
            return [f"the host shaper (pid {self.saved.pid}) is not running"]
        if not thorough:
            return []
        found = []
        try:
            late_ms = self.stats()["late_us"]["max"] / 1000
            # the lateness record starts again: each check judges the time since the last
            self.control.send(["resetlate"])
            if late_ms > STALL_MS:
                found.append(
                    f"the host shaper stalled: a packet was released {late_ms:.0f} ms late "
                    f"(more than {STALL_MS} ms; what was measured meanwhile is void)"
                )
        except (hs.ShaperError, KeyError, TypeError, ValueError) as exc:
            found.append(str(exc))
        proc = run(self._in_switch(hs.list_argv(self.saved.iptables)), check=False)
        present = hs.queued_links(proc.stdout) if proc.returncode == 0 else None
        if present != {tuple(x) for x in self.saved.links}:
            found.append("the switch's queue rules are gone or changed")
        return found

    def show(self) -> list[str]:
        if not self.alive():
            return []
        data = self.stats()
        lines = [
            f"{l['src']} -> {l['dst']}: delay {l['delay_ns'] / 1e6:g} ms"
            f" jitter {l['jitter_ns'] / 1e6:g} ms ({l['dist']})"
            f" loss {100 * l['loss_threshold'] / hs.LOSS_SCALE:.4g} %"
            + (f" rate {l['rate_bps'] / 1e6:g} mbit" if l["rate_bps"] else "")
            + f"; {l['packets']} packets, {l['dropped']} dropped, {l['held']} held"
            for l in data["links"]
            if l["packets"] or l["delay_ns"] or l["loss_threshold"]
        ]
        late = data["late_us"]
        return lines + [
            f"releases late by p50 {late['p50']} us, p99 {late['p99']} us "
            f"(pid {data['pid']}, {data['released']} released)"
        ]

    def close(self) -> None:
        """Nothing held open: each change is one connection to the control socket."""

    def stop(self) -> None:
        """Queue rules out first (traffic flows unshaped), then the delayer ended (it lets
        what it holds go), offloads back as they were. Namespaces that are gone are
        skipped: their rules went with them."""
        assert self.tb.state is not None
        saved = self.saved or self.tb.state.get(HostShaperRecord) or HostShaperRecord()
        present = set(list_prefixed_namespaces(self.tb.run_id))
        if switch_namespace(self.tb.run_id) in present:
            for argv in hs.chain_remove_argvs(saved.iptables):
                run(self._in_switch(argv), check=False)
        for host in self.tb.topology.hosts:
            if self._ns(host.name) not in present:
                continue
            before = saved.offloads.get(host.name)
            if before:
                run(self._in(host.name, hs.offload_argv(before)), check=False)
        if saved.pid is not None:
            terminate(saved.pid, f"--tag={self.tag}")
        Path(saved.socket or self.control.path).unlink(missing_ok=True)
        _drop(self.tb, HostShaperRecord)
        self.saved = None


REGISTRY: dict[str, type[Shaper]] = {
    "direct": DirectShaper,
    "host": HostShaper,
    "gateway": GatewayShaper,
}


def for_testbed(tb: Testbed, name: str = "auto") -> Shaper:
    """The shaper of a running testbed: the one it already uses, else ``name`` resolved."""
    if tb.state is None:
        raise StateError("testbed is not up")
    current = emulation(tb).shaper
    chosen = resolve(name, tb.backend_name) if current is None or name != "auto" else current
    if current is not None and chosen != current:
        raise ConfigError(
            f"this testbed already shapes with {current}; `edgetb net clear --remove` first"
        )
    if current is None:
        preflight(chosen)  # before anything is made
    return REGISTRY[chosen](tb)
