"""Run the netem gateway VM for one testbed run.

QEMU runs inside the run's switch namespace, so the TAP of each port is created there
(nothing appears in the machine's own namespace). Port i faces host i of the topology:
each host's switch-side veth and its TAP share a bridge ``g-<host>``; inside the guest all
ports join one bridge, and netem shapes what enters each port per destination.

The command channel is the guest's second serial port on a unix socket (mode 0600 in the
run directory) feeding a persistent ``tc -batch``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from common.errors import CommandError, TestbedError
from common.files import tail
from common.procs import pid_alive, terminate
from common.runner import run
from testbed.accel import known_accel, record_accel
from testbed.backends.netns import bridge_add_argv

from .image import GatewayImage

# lo gets this qdisc at boot; `qdisc show dev lo` then prints a line nothing else prints,
# which marks the end of a batch's output on the channel.
SYNC_COMMAND = "qdisc show dev lo"
SYNC_REPLY = "qdisc pfifo 7777: root refcnt 2 limit 4242p"
VIRTIO_NO_OFFLOAD = (
    "csum=off,guest_csum=off,gso=off,guest_tso4=off,guest_tso6=off,guest_ecn=off,"
    "guest_ufo=off,host_tso4=off,host_tso6=off,host_ecn=off,host_ufo=off,mrg_rxbuf=off"
)
GUEST_MEMORY_MB = 160
BOOT_TIMEOUT_S = 60.0


class GatewayError(TestbedError):
    """The gateway VM failed to boot or to apply a command."""


KVM_TRIAL_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Port:
    host: str
    tap: str  # TAP name inside the switch namespace
    guest_if: str  # ethN inside the guest


def ports_for(hosts: Sequence[str]) -> list[Port]:
    return [Port(h, f"t-{h}", f"eth{i}") for i, h in enumerate(hosts)]


def qemu_argv(
    image: GatewayImage,
    ports: Sequence[Port],
    console: Path,
    channel: Path,
    ifbs: Sequence[str],
    accel: str,
    run_id: str,
) -> list[str]:
    """The QEMU command line (pure; unit-tested)."""
    append = "console=ttyS0 panic=-1 quiet"
    if ifbs:
        append += " gw.ifb=" + ",".join(ifbs)
    argv = [
        # The tag `clean` looks for, as on the Cassandra JVMs.
        "qemu-system-x86_64",
        "-name",
        f"guest=edgetb.run={run_id}:gateway",
        "-accel",
        accel,
        "-m",
        str(GUEST_MEMORY_MB),
        "-smp",
        "1",
        "-display",
        "none",
        "-nodefaults",
        "-no-reboot",
        "-no-user-config",
        "-kernel",
        str(image.kernel),
        "-initrd",
        str(image.initrd),
        "-append",
        append,
        "-serial",
        f"file:{console}",
        "-chardev",
        f"socket,id=cmd,path={channel},server=on,wait=off",
        "-serial",
        "chardev:cmd",
    ]
    for i, port in enumerate(ports):
        argv += [
            "-netdev",
            f"tap,id=n{i},ifname={port.tap},script=no,downscript=no",
            "-device",
            f"virtio-net-pci,netdev=n{i},{VIRTIO_NO_OFFLOAD}",
        ]
    return argv


class GatewayVM:
    """One running gateway; reattachable from its PID and paths (the CLI does)."""

    def __init__(
        self, run_dir: Path, switch_ns: str, ports: Sequence[Port], pid: int | None = None
    ):
        self.run_id = run_dir.name
        self.dir = run_dir / "gateway"
        self.switch_ns = switch_ns
        self.ports = list(ports)
        self.pid = pid
        self.accel: str | None = None
        self._sock: socket.socket | None = None

    @property
    def console(self) -> Path:
        return self.dir / "console.log"

    @property
    def channel(self) -> Path:
        return self.dir / "channel.sock"

    @property
    def marker(self) -> str:
        return f"edgetb.run={self.run_id}:gateway"

    def start(self, image: GatewayImage, ifbs: Sequence[str]) -> float:
        """Boot the VM (KVM where it really boots a guest, else TCG); returns boot seconds."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        accel = known_accel()
        if accel is None:  # first boot on this machine: does KVM really work?
            try:
                boot_s = self._boot(image, ifbs, "kvm", KVM_TRIAL_TIMEOUT_S)
                record_accel("kvm", f"guest booted in {boot_s:.1f} s")
                self.accel = "kvm"
                return boot_s
            except GatewayError as exc:
                self.stop()
                record_accel("tcg", f"KVM trial failed: {str(exc)[:200]}")
            accel = "tcg"
        self.accel = accel
        return self._boot(image, ifbs, accel, BOOT_TIMEOUT_S)

    def _boot(
        self, image: GatewayImage, ifbs: Sequence[str], accel: str, timeout_s: float
    ) -> float:
        self.console.unlink(missing_ok=True)
        argv = [
            "ip",
            "netns",
            "exec",
            self.switch_ns,
            *qemu_argv(image, self.ports, self.console, self.channel, ifbs, accel, self.run_id),
        ]
        t0 = time.monotonic()
        old_umask = os.umask(0o077)  # the channel socket is created 0600
        try:
            with open(self.dir / "qemu.log", "ab") as log:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        finally:
            os.umask(old_umask)
        self.pid = proc.pid
        while "gateway: ready" not in _read(self.console):
            if proc.poll() is not None:
                raise GatewayError(
                    f"gateway VM ({accel}) exited with {proc.returncode}:\n"
                    f"{tail(self.dir / 'qemu.log')}\n{tail(self.console)}"
                )
            if time.monotonic() - t0 > timeout_s:
                raise GatewayError(
                    f"gateway VM ({accel}) not ready within {timeout_s:.0f} s:"
                    f"\n{tail(self.console)}"
                )
            time.sleep(0.05)
        boot_s = time.monotonic() - t0
        self._realtime()
        return boot_s

    def _realtime(self) -> None:
        """SCHED_FIFO for QEMU's threads: under CPU contention (5 JVMs on 2 cores) netem's
        timers otherwise fire late (p99 46-62 ms at 10 ms delay; ~21 ms with this)."""
        for task in os.listdir(f"/proc/{self.pid}/task"):
            try:
                os.sched_setscheduler(int(task), os.SCHED_FIFO, os.sched_param(10))
            except (PermissionError, ProcessLookupError, OSError):
                pass

    def alive(self) -> bool:
        return self.pid is not None and pid_alive(self.pid, self.marker)

    def batch(self, lines: Sequence[str], timeout_s: float = 10.0) -> list[str]:
        """Run tc batch lines in the guest; returns their output. Raises GatewayError
        with the failing lines when tc reports an error."""
        if self._sock is None:
            self._sock = socket.socket(socket.AF_UNIX)
            self._sock.settimeout(timeout_s)
            self._sock.connect(str(self.channel))
        payload = "".join(f"{line}\n" for line in lines) + SYNC_COMMAND + "\n"
        self._sock.sendall(payload.encode())
        buf = ""
        deadline = time.monotonic() + timeout_s
        while SYNC_REPLY not in buf:
            if time.monotonic() > deadline:
                raise GatewayError(f"no answer from the gateway within {timeout_s} s: {buf!r}")
            chunk = self._sock.recv(65536)
            if not chunk:
                raise GatewayError("gateway command channel closed")
            buf += chunk.decode(errors="replace")
        output = [ln.rstrip("\r") for ln in buf.split(SYNC_REPLY)[0].splitlines() if ln.strip()]
        if any(ln.startswith("Command failed") for ln in output):
            raise GatewayError("tc in the gateway failed:\n" + "\n".join(output[-20:]))
        return output

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop QEMU (before its TAPs or namespace go: otherwise it spins at 100 % CPU)."""
        self.close()
        if self.pid is not None:
            terminate(self.pid, self.marker, timeout_s)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def wire_commands(switch_ns: str, ports: Sequence[Port], bridge: str) -> list[list[str]]:
    """Move each host's switch-side veth from the shared bridge to a bridge of its own with
    the gateway's TAP for that host (pure; unit-tested)."""
    cmds = []
    for port in ports:
        br = f"g-{port.host}"
        cmds += [
            bridge_add_argv(switch_ns, br),
            ["ip", "-n", switch_ns, "link", "set", "dev", port.host, "nomaster"],
            ["ip", "-n", switch_ns, "link", "set", "dev", port.host, "master", br],
            ["ip", "-n", switch_ns, "link", "set", "dev", port.tap, "master", br, "up"],
            ["ip", "-n", switch_ns, "link", "set", "dev", br, "up"],
        ]
    return cmds


def unwire_commands(switch_ns: str, ports: Sequence[Port], bridge: str) -> list[list[str]]:
    """Back to the shared bridge (when the gateway is removed)."""
    cmds = []
    for port in ports:
        cmds += [
            ["ip", "-n", switch_ns, "link", "set", "dev", port.host, "master", bridge],
            ["ip", "-n", switch_ns, "link", "del", "dev", f"g-{port.host}"],
        ]
    return cmds


def run_all(cmds: Sequence[Sequence[str]], *, ignore_missing: bool = False) -> None:
    for cmd in cmds:
        try:
            run(cmd)
        except CommandError as exc:
            if not (ignore_missing and ("Cannot find" in exc.stderr or "No such" in exc.stderr)):
                raise
