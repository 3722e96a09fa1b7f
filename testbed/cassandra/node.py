"""One Cassandra node: its directory, configuration files, process and log."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from common.errors import ConfigError, NodeError, PortInUseError
from common.files import tail
from common.procs import pid_alive

from ..topology import Host, Topology
from . import config, jvm, quiet
from .config import CassandraSettings
from .dist import CassandraDist
from .java import Java
from .tls import RunTls

ExecArgv = Callable[[str, Sequence[str]], list[str]]

_NO_MLOCK = ["setpriv", "--bounding-set=-ipc_lock", "--inh-caps=-ipc_lock"]


class LogLines(Protocol):
    """A node's log read incrementally: here ``LogWatcher``, over SSH ``RemoteLog``."""

    def new_lines(self) -> list[str]: ...


class LogWatcher:
    """Reads a growing log file incrementally (no re-reading from the start)."""

    def __init__(self, path: Path):
        self.path = path
        self._offset = 0
        self._partial = ""

    def new_lines(self) -> list[str]:
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                f.seek(self._offset)
                data = f.read()
                self._offset = f.tell()
        except FileNotFoundError:
            return []
        data = self._partial + data
        lines = data.split("\n")
        self._partial = lines.pop()
        return lines


def _threads_left(pid: int, process: subprocess.Popen | None, marker: str | None) -> bool:
    """Whether any thread of ``pid`` still runs (a zombie leader alone does not count)."""
    if process is not None:
        return process.poll() is None
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    if cmdline and marker is not None and marker.encode() not in cmdline:
        return False  # the PID is another process's now
    return len(tasks) > 1 or pid_alive(pid)


def listening_ports(
    exec_argv: ExecArgv, host: str, *, without_ss_ok: bool = False
) -> set[tuple[str, int]]:
    """(address, port) pairs listening on TCP inside ``host``; ``without_ss_ok``: none
    found when the host has no ``ss`` yet (a bare host, before provisioning installs it)."""
    from common.runner import run

    argv = ["ss", "-Htln"]
    if without_ss_ok:
        argv = ["sh", "-c", "command -v ss >/dev/null || exit 0; exec ss -Htln"]
    out = run(exec_argv(host, argv)).stdout
    found = set()
    for line in out.splitlines():
        fields = line.split()  # State Recv-Q Send-Q Local:Port Peer:Port
        if len(fields) >= 4 and ":" in fields[3]:
            addr, _, port = fields[3].rpartition(":")
            found.add((addr.strip("[]"), int(port)))
    return found


class CassandraNode:
    """A Cassandra node of one run; stateless apart from its directory and PID."""

    poll_s = 0.05  # how often wait_exit() asks gone()

    def __init__(self, host: Host, node_dir: Path, run_id: str, pid: int | None = None):
        self.host = host
        self.node_dir = node_dir
        self.run_id = run_id
        self.pid = pid
        self.process: subprocess.Popen | None = None
        self.log: LogLines = LogWatcher(self.system_log)

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def system_log(self) -> Path:
        return self.node_dir / "logs" / "system.log"

    @property
    def stdout_log(self) -> Path:
        return self.node_dir / "logs" / "stdout.log"

    @property
    def marker(self) -> str:
        return jvm.marker_property(self.run_id, self.name)

    def write_config(
        self,
        settings: CassandraSettings,
        topology: Topology,
        *,
        auth: bool = False,
        tls: RunTls | None = None,
    ) -> None:
        """The node's directories and settings; with ``settings.tls``, its certificate
        (``tls``, the run's) beside them."""
        for sub in config.NODE_DIRS:
            (self.node_dir / sub).mkdir(parents=True, exist_ok=True)
        if settings.tls:
            if tls is None:
                raise ConfigError(f"{self.name}: TLS is on but the run has no certificates")
            tls.write_node(self.name, self.node_dir / "conf")
        values = config.node_settings(settings, topology, self.host, self.node_dir, auth=auth)
        (self.node_dir / "conf" / "cassandra.yaml").write_text(config.render_yaml(values))
        (self.node_dir / "conf" / "logback.xml").write_text(config.LOGBACK_XML)
        (self.node_dir / "conf" / config.RACKDC_FILE).write_text(
            config.rackdc_properties(self.host)
        )

    def check_ports(self, exec_argv: ExecArgv, *, without_ss_ok: bool = False) -> None:
        """Raise PortInUseError if a port this node needs is already bound in its host."""
        wanted = {
            (self.host.address, config.STORAGE_PORT),
            (self.host.address, config.CQL_PORT),
            ("127.0.0.1", config.JMX_PORT),
        }
        for addr, port in listening_ports(exec_argv, self.name, without_ss_ok=without_ss_ok):
            for want_addr, want_port in wanted:
                if port == want_port and addr in (want_addr, "0.0.0.0", "*", "::"):
                    raise PortInUseError(
                        f"{self.name}: port {port} is already in use on {addr} inside "
                        f"{self.name}; Cassandra needs it ({want_addr}:{want_port})"
                    )

    def start(
        self,
        *,
        java: Java,
        dist: CassandraDist,
        settings: CassandraSettings,
        exec_argv: ExecArgv,
        cds_archive: Path | None = None,
        cds_dump_to: Path | None = None,
    ) -> int:
        """Launch the JVM inside the node's host, detached into its own session."""
        (self.node_dir / "tmp").mkdir(exist_ok=True)  # a node dir of an older version lacks it
        args = jvm.jvm_args(
            settings=settings,
            classpath=quiet.classpath(dist, settings.build),
            node_dir=self.node_dir,
            run_id=self.run_id,
            host=self.name,
            cds_archive=cds_archive,
            cds_dump_to=cds_dump_to,
        )
        # Without CAP_IPC_LOCK, Cassandra's mlockall() fails harmlessly and RSS stays ~350 MB
        # instead of ~600 MB per node.
        argv = exec_argv(self.name, [*_NO_MLOCK, java.path, *args])
        with open(self.stdout_log, "ab") as out:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.node_dir,
                start_new_session=True,
            )
        self.pid = self.process.pid
        return self.pid

    def alive(self) -> bool:
        """Whether the JVM runs. Dead from the moment it starts to die: a killed JVM's main
        thread is a zombie (``/proc``: Z, no command line) while its other threads still
        exit, and waitpid() sees nothing until the last is gone. The run's own process
        check (``pid_alive``) says dead from that first moment, so this answers the same,
        never "alive" beside a check that says "not running"."""
        if self.pid is None:
            return False
        if self.process is not None:  # our child: its PID is ours until reaped, and
            # between fork and exec its command line is still ours, without the marker
            return self.process.poll() is None and pid_alive(self.pid)
        return pid_alive(self.pid, self.marker)

    def gone(self) -> bool:
        """Dead and done dying: its last thread exited (ports and files free again)."""
        return not self.alive() and (
            self.pid is None or not _threads_left(self.pid, self.process, self.marker)
        )

    def exit_code(self) -> int | None:
        return self.process.poll() if self.process is not None else None

    def log_tail(self, lines: int = 25) -> str:
        text = tail(self.system_log, lines)
        # stdout holds what never reached the log (JVM errors); skip lines shown already.
        extra = [
            line
            for line in tail(self.stdout_log, 10).splitlines()
            if line.strip() and line not in text
        ]
        if extra:
            text = (text + "\n--- stdout ---\n" if text else "") + "\n".join(extra)
        return text

    def error(self, message: str) -> NodeError:
        return NodeError(self.name, message, self.log_tail())

    def signal(self, sig: int) -> None:
        if self.pid is not None and self.alive():
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def wait_exit(self, timeout_s: float) -> bool:
        """Whether the node is ``gone`` within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.gone():
                return True
            time.sleep(self.poll_s)
        return self.gone()


def stop_nodes(nodes: Sequence[CassandraNode], *, timeout_s: float = 20.0) -> None:
    """SIGTERM every live node at once, wait, then SIGKILL what is left."""
    live = [n for n in nodes if not n.gone()]  # a dying one too: it is waited for
    for node in live:
        node.signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for node in live:
        node.wait_exit(max(0.0, deadline - time.monotonic()))
    for node in live:
        if node.alive():  # (one that is dying needs no SIGKILL: its threads are exiting)
            node.signal(signal.SIGKILL)
        node.wait_exit(5.0)
