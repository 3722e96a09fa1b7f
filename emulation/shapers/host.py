"""``host``: where the kernel has no netem, a compiled delayer on the machine fed by
netfilter queues inside the testbed's namespaces (``emulation.hostshaper``)."""

from __future__ import annotations

import json
import select
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common.errors import CommandError, ConfigError
from common.files import append_to
from common.procs import pid_alive, terminate
from common.runner import run
from testbed.backends import capabilities
from testbed.backends.netns import list_prefixed_namespaces, switch_namespace
from testbed.state import namespace_name
from testbed.testbed import Testbed

from .. import hostshaper as hs
from ..links import LinkMatrix
from .base import (
    HostShaperRecord,
    _drop,
    _put,
    _save,
)

START_TIMEOUT_S = 10.0  # the delayer binds its queues in milliseconds
# A release this late is a stall (the delayer stopped or starved), not timer noise: its
# p99.9 is a few ms on a loaded 2-core VM. The cell measured across it is void.
STALL_MS = 100


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
    inside_hosts = False
    loss_location = (
        "in the network (dropped in the switch, between the hosts: the sender is not told "
        "and recovers by its timer)"
    )

    @staticmethod
    def preflight() -> None:
        """The delayer built (or what builds it), its tools, bridge netfilter."""
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

    @staticmethod
    def prepare(*, force: bool = False) -> None:
        """The delayer compiled (cached on its source)."""
        hs.build(force=force)

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
