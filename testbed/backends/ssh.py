"""SSH for the libvirt and hosts backends: how to reach a host (``RemoteHost``), the
run's argument lists (its key, known_hosts and tagged connection masters: ``SSH``), and the
errors of a host that does not answer or shows another host key.

Every SSH process carries the run's tag in its ControlPath (``edgetb.run=<run>:<host>``),
so `python -m testbed clean` finds the connection masters of a killed run by PID.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from common.errors import ConfigError, TestbedError
from common.runner import run
from common.tags import tagged_processes


class HostKeyError(TestbedError):
    """A host showed an SSH host key other than the one trusted for it."""


class UnreachableError(TestbedError):
    """A host did not answer over SSH."""


def host_key_refused(ssh_stderr: str) -> bool:
    """Whether ssh failed because the host key did not match (never worth a retry)."""
    return (
        "Host key verification failed" in ssh_stderr
        or "REMOTE HOST IDENTIFICATION HAS CHANGED" in ssh_stderr
        or ("host key for" in ssh_stderr.lower() and "has changed" in ssh_stderr.lower())
    )


# A UNIX socket's path holds at most 107 bytes, and ssh makes the master's socket under
# the ControlPath plus a random suffix of 17 characters before renaming it into place.
MAX_CONTROL_PATH = 107 - 17
LONGEST_ADDRESS = "255.255.255.255"


def check_control_path(runs: Path) -> None:
    """ConfigError, before anything is made, when the SSH control sockets of a run under
    ``runs`` (``$EDGETB_HOME/runs``) would not fit a socket's path: ssh would refuse every
    connection, and the run would wait out its SSH timeout."""
    longest = SSH("000000", runs / "000000" / "ssh").control_path.replace("%h", LONGEST_ADDRESS)
    if len(longest.encode()) > MAX_CONTROL_PATH:
        raise ConfigError(
            f"the runs directory {runs} is too long for SSH's control sockets "
            f"({len(longest.encode())} bytes of at most {MAX_CONTROL_PATH} in {longest}): "
            f"set EDGETB_HOME to a shorter directory"
        )


@dataclass(frozen=True)
class RemoteHost:
    """How to reach one host of the topology."""

    name: str
    address: str  # where SSH connects (for VMs: the topology address)
    user: str = "root"
    port: int = 22


class SSH:
    """SSH argument lists for one run: its key, known_hosts and tagged connection masters.

    ``strict`` (hosts backend): only the keys in the run's known_hosts are accepted,
    written there before the first connection (``hostkeys.trust``). Otherwise (libvirt
    VMs, which make their host keys on their first boot) the first key each VM shows is
    recorded in the run's known_hosts and required from then on (accept-new): the VMs sit
    on the run's own isolated bridge, which only root on this machine can join.
    """

    def __init__(self, run_id: str, ssh_dir: Path, key: Path | None = None, *, strict=False):
        self.run_id = run_id
        self.dir = ssh_dir
        self.key = key or ssh_dir / "id_ed25519"
        self.strict = strict

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def control_path(self) -> str:
        # The tag on every ssh command line; %h keeps the socket path short (108-byte limit).
        return str(self.dir / f"edgetb.run={self.run_id}:%h")

    def settings(self, *, connect_timeout: int = 10) -> list[str]:
        """``-o`` settings without the connection sharing ones."""
        return [
            "IdentitiesOnly=yes",
            "BatchMode=yes",
            f"StrictHostKeyChecking={'yes' if self.strict else 'accept-new'}",
            f"UserKnownHostsFile={self.known_hosts}",
            # the run's file is the whole truth (hostkeys.trust read the system's file)
            *(["GlobalKnownHostsFile=/dev/null"] if self.strict else []),
            f"ConnectTimeout={connect_timeout}",
            "LogLevel=ERROR",
            "ServerAliveInterval=5",
        ]

    def options(self, *, connect_timeout: int = 10) -> list[str]:
        out = ["-i", str(self.key)]
        for setting in [
            *self.settings(connect_timeout=connect_timeout),
            "ControlMaster=auto",
            f"ControlPath={self.control_path}",
            "ControlPersist=30",
        ]:
            out += ["-o", setting]
        return out

    def argv(self, host: RemoteHost, argv: Sequence[str], **kw) -> list[str]:
        return [
            "ssh",
            *self.options(**kw),
            "-p",
            str(host.port),
            f"{host.user}@{host.address}",
            "--",
            shlex.join(argv) if argv else "true",
        ]

    def generate_key(self) -> str:
        """A new ed25519 key pair for this run only; returns the public key."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not self.key.is_file():
            run(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    f"edgetb-{self.run_id}",
                    "-f",
                    str(self.key),
                ]
            )
        return self.key.with_suffix(".pub").read_text().strip()

    def close(self, hosts: Sequence[RemoteHost]) -> None:
        """End the connection masters (and anything else carrying this run's tag)."""
        for host in hosts:
            subprocess.run(
                [
                    "ssh",
                    "-o",
                    f"ControlPath={self.control_path}",
                    "-O",
                    "exit",
                    f"{host.user}@{host.address}",
                ],
                capture_output=True,
                timeout=10,
            )
        kill_tagged_ssh(self.run_id)

    def wait(self, host: RemoteHost, timeout_s: float, alive=lambda: True) -> float:
        """Seconds until ``ssh host true`` works; TestbedError after ``timeout_s``."""
        t0 = time.monotonic()
        last = ""
        while time.monotonic() - t0 < timeout_s:
            if not alive():
                raise TestbedError(f"{host.name}: stopped while waiting for SSH")
            proc = subprocess.run(
                self.argv(host, ["true"], connect_timeout=5),
                capture_output=True,
                text=True,
                timeout=30,
            )
            if proc.returncode == 0:
                return time.monotonic() - t0
            last = proc.stderr.strip()
            if host_key_refused(last):
                raise HostKeyError(
                    f"{host.name} ({host.address} port {host.port}): SSH refused its host key "
                    f"(not the one in {self.known_hosts}): {' '.join(last.split())[:300]}"
                )
            time.sleep(1.0)
        raise TestbedError(
            f"{host.name} ({host.address}): no SSH within {timeout_s:.0f} s"
            f"{f' ({last})' if last else ''}"
        )


def kill_tagged_ssh(run_id: str) -> list[int]:
    """SIGTERM our ssh processes of run ``run_id`` (found by the tag in their ControlPath)."""
    killed = []
    for pid, owner in tagged_processes().items():
        if owner != run_id:
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != "ssh":
                    continue
            os.kill(pid, signal.SIGTERM)
            killed.append(pid)
        except (OSError, ProcessLookupError):
            pass
    return killed
