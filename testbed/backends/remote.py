"""What the libvirt and hosts backends share: hosts reached over SSH with the testbed's own
key (``ssh``; host keys checked: ``hostkeys``), provisioned with Ansible (``provision``),
running Cassandra as a systemd unit with the same rendered settings and JVM command line as
under netns.
"""

from __future__ import annotations

import subprocess
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common.files import replacing

from ..cassandra.launch import CassandraLaunch
from ..images import GUEST_JAVA, GUEST_PYTHON, GUEST_SRC
from ..state import RunState
from ..topology import Host, Topology
from .provision import inventory, one_line, playbook
from .ssh import SSH, RemoteHost, UnreachableError, check_control_path


def unit_name(run_id: str) -> str:
    """The systemd unit of run ``run_id``'s Cassandra on a remote host: one per run, so
    that two runs on the same hosts never stop each other's node (the second one's JVM
    finds the ports taken and says so)."""
    return f"edgetb-cassandra-{run_id}"


# -- Cassandra on a remote host ----------------------------------------------------------------


class RemoteLog:
    """Reads a growing log on a remote host incrementally (``tail -c +N`` over SSH)."""

    def __init__(self, exec_argv, host: str, path: Path):
        self.exec_argv = exec_argv
        self.host = host
        self.path = path
        self._offset = 0
        self._partial = ""

    def new_lines(self) -> list[str]:
        proc = subprocess.run(
            self.exec_argv(self.host, ["tail", "-c", f"+{self._offset + 1}", str(self.path)]),
            capture_output=True,
            timeout=30,
        )
        if proc.returncode != 0:
            return []
        self._offset += len(proc.stdout)
        data = self._partial + proc.stdout.decode(errors="replace")
        lines = data.split("\n")
        self._partial = lines.pop()
        return lines


def unit_state(exec_argv, host: str, unit: str) -> tuple[str, int | None]:
    """(ActiveState, MainPID) of Cassandra's ``unit`` on ``host``; UnreachableError when
    SSH cannot reach it (not "stopped": the unit may well be running)."""
    proc = subprocess.run(
        exec_argv(
            host,
            ["systemctl", "show", "-p", "ActiveState", "-p", "MainPID", "--value", unit],
        ),
        capture_output=True,
        text=True,
        timeout=30,
    )
    if proc.returncode == 255:  # ssh's own failure, not systemctl's
        raise UnreachableError(f"{host}: unreachable over SSH: {one_line(proc.stderr)}")
    if proc.returncode != 0:
        return "unknown", None
    lines = proc.stdout.split()
    pid = int(lines[0]) if lines and lines[0].isdigit() and lines[0] != "0" else None
    active = lines[1] if len(lines) > 1 else "unknown"
    return active, pid


def start_unit_argv(java_argv: Sequence[str], node_dir: Path, marker: str, unit: str) -> list[str]:
    """systemd-run of the node's JVM: the same command line as under netns, its output
    appended to the same stdout.log, killed with the unit."""
    out = node_dir / "logs" / "stdout.log"
    return [
        "systemd-run",
        f"--unit={unit}",
        "--collect",
        "--quiet",
        f"--description=Cassandra {marker}",
        f"--working-directory={node_dir}",
        f"--property=StandardOutput=append:{out}",
        f"--property=StandardError=append:{out}",
        "--property=KillMode=mixed",
        "--property=TimeoutStopSec=20",
        "--property=LimitNOFILE=100000",
        "--property=LimitMEMLOCK=0",
        *java_argv,
    ]


# -- what both remote backends do the same way ---------------------------------------------------


class RemoteBackend:
    """Shared by the libvirt and hosts backends: SSH exec, the run's inventory, Cassandra
    through the `cassandra` playbook. Subclasses set ``topology``, ``state``, ``ssh`` and
    ``hosts`` (name -> RemoteHost)."""

    name: str
    remote = True
    cassandra_auth = True  # PasswordAuthenticator; see testbed.cassandra.auth
    check_runs_dir = staticmethod(check_control_path)  # its SSH sockets fit their limit
    python = GUEST_PYTHON
    java = GUEST_JAVA
    topology: Topology
    state: RunState
    ssh: SSH
    hosts: dict[str, RemoteHost]

    def exec_argv(self, host: str, argv: Sequence[str], *, limited: bool = True) -> list[str]:
        # `python` and `tcset` are the testbed venv's, as on the controller under netns.
        path = (
            f"{Path(GUEST_PYTHON).parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:"
            f"/usr/bin:/sbin:/bin"
        )
        return self.ssh.argv(
            self.hosts[host], ["env", f"PATH={path}", f"PYTHONPATH={GUEST_SRC}", *argv]
        )

    def pids(self, host: str) -> list[int]:
        return []  # processes on the hosts end with the unit, the run or the VM

    def inventory(self) -> dict:
        """The run's hosts as an Ansible inventory (as data)."""
        roles = {h.name: h.role for h in self.topology.hosts}
        return inventory(list(self.hosts.values()), roles, self.ssh)

    @property
    def ansible_dir(self) -> Path:
        return self.state.run_dir / "ansible"

    def cassandra_node(self, host: Host, pid: int | None = None) -> RemoteCassandraNode:
        node_dir = self.state.run_dir / "nodes" / host.name
        return RemoteCassandraNode(host, node_dir, self.state.run_id, self.exec_argv)

    def start_cassandra(
        self, launch: CassandraLaunch, nodes: dict[str, CassandraNode]
    ) -> dict[str, float]:
        """Cassandra on VMs or inventory hosts: the same rendered files and JVM command
        line as under netns (the image keeps the distribution at the same path), copied
        and started by the `cassandra` playbook as a systemd unit, then the same readiness
        stages over SSH. Returns the stages' timings."""
        from ..cassandra import auth as auth_mod
        from ..cassandra.readiness import wait_for_nodes

        auth = launch.credentials is not None
        if launch.credentials is not None:
            auth_mod.write(launch.credentials, auth_mod.generate(self.state.run_id))
        nodes_vars = {}
        for host in self.topology.edges:
            node = self.cassandra_node(host)
            node.write_config(launch.settings, self.topology, auth=auth, tls=launch.tls)
            node.check_ports(self.exec_argv)
            nodes[host.name] = node
            nodes_vars[host.name] = self._node_vars(launch, node, host.name, auth)
        launch.progress(
            f"starting Cassandra {launch.dist.version} on {', '.join(nodes)} "
            f"({self.name}, heap {launch.settings.heap_mb} MB"
            f"{', quiet nodes' if launch.settings.build == 'quiet' else ''})"
        )
        endpoint_files = [launch.credentials] if launch.credentials is not None else []
        if launch.tls_dir is not None:
            endpoint_files += sorted(launch.tls_dir.iterdir())
        timings = {
            "cassandra playbook": self.run_cassandra_playbook(
                nodes_vars, self._endpoint_archive(endpoint_files)
            )
        }
        timings.update(
            wait_for_nodes(list(nodes.values()), launch.deadlines, launch.progress, poll_s=1.0)
        )
        return timings

    def _node_vars(
        self, launch: CassandraLaunch, node: CassandraNode, host: str, auth: bool
    ) -> dict[str, Any]:
        """What the `cassandra` playbook needs of a node: its directories, its rendered
        configuration as an archive, and the systemd unit's command line."""
        from ..cassandra import config as cfg
        from ..cassandra import jvm, quiet
        from ..cassandra.node import _NO_MLOCK

        jvm_argv = jvm.jvm_args(
            settings=launch.settings,
            classpath=quiet.classpath(launch.dist, launch.settings.build),
            node_dir=node.node_dir,
            run_id=self.state.run_id,
            host=host,
            cds_archive=None,
            cds_dump_to=None,
            system_auth_rf=self.topology.edge_nodes if auth else None,
        )
        return {
            "dir": str(node.node_dir),
            "dirs": [str(node.node_dir / sub) for sub in cfg.NODE_DIRS],
            "conf_archive": str(self._conf_archive(host, node.node_dir / "conf")),
            "argv": start_unit_argv(
                [*_NO_MLOCK, self.java, *jvm_argv],
                node.node_dir,
                node.marker,
                unit_name(self.state.run_id),
            ),
        }

    def _conf_archive(self, host: str, conf: Path) -> Path:
        """``host``'s rendered settings as one tar file (the playbook unpacks it in one
        module run, where copying file by file costs seconds each on a slow host)."""
        path = self.ansible_dir / f"conf-{host}.tar"
        self.ansible_dir.mkdir(parents=True, exist_ok=True)
        # the node's keystore and the run's password inside: 0600 from creation
        with replacing(path, "wb", perm=0o600) as out, tarfile.open(fileobj=out, mode="w") as tar:
            for f in sorted(conf.iterdir()):
                tar.add(f, arcname=f.name)
        return path

    def _endpoint_archive(self, files: list[Path]) -> Path | None:
        """The run's files for its client (the login, the TLS certificates; all in the run
        directory) as one tar, named relative to the run directory (None: none)."""
        if not files:
            return None
        path = self.ansible_dir / "endpoint.tar"
        self.ansible_dir.mkdir(parents=True, exist_ok=True)
        run_dir = self.state.run_dir
        with replacing(path, "wb", perm=0o600) as out, tarfile.open(fileobj=out, mode="w") as tar:
            added: set[Path] = set()
            for f in files:
                rel = f.relative_to(run_dir)
                for parent in reversed(rel.parents[:-1]):  # its directories, owner-only too
                    if parent not in added:
                        tar.add(run_dir / parent, arcname=str(parent), recursive=False)
                        added.add(parent)
                tar.add(f, arcname=str(rel))
        return path

    def stop_cassandra(self, nodes: Sequence[CassandraNode]) -> None:
        """Nothing here: the hosts' units are stopped by ``destroy``."""

    def tool_java(self, controller_java: str) -> str:
        """The java that runs nodetool on a host: the host's own."""
        return self.java

    def run_cassandra_playbook(self, nodes: dict[str, dict], endpoint: Path | None) -> float:
        """Copy each edge node's rendered settings and start its JVM (``nodes``: name ->
        {"dir": node directory, "dirs": its directories, "conf_archive": its settings,
        "argv": systemd-run command}), and unpack the run's files
        for its client on the endpoint (``endpoint``: ``_endpoint_archive``; at the same
        paths, owner-only; copied over SSH, their content in no command line or variable);
        returns seconds."""
        return playbook(
            "cassandra",
            private_dir=self.ansible_dir,
            inv=self.inventory(),
            ssh=self.ssh,
            extravars={
                "edgetb_nodes": nodes,
                "edgetb_run_dir": str(self.state.run_dir),
                "edgetb_endpoint_archive": str(endpoint) if endpoint else "",
                "edgetb_unit": unit_name(self.state.run_id),
            },
        )


# -- a Cassandra node on a remote host ----------------------------------------------------------

from ..cassandra.node import CassandraNode  # noqa: E402  (after the helpers it uses)


class RemoteCassandraNode(CassandraNode):
    """A node whose JVM runs as its run's unit (``unit_name``) on a remote host: the same
    directory layout (at the same absolute path), watched over SSH."""

    poll_s = 1.0  # alive() is an SSH round trip

    def __init__(self, host, node_dir: Path, run_id: str, exec_argv, pid: int | None = None):
        super().__init__(host, node_dir, run_id, pid)
        self.exec_argv = exec_argv
        self.log = RemoteLog(exec_argv, host.name, self.system_log)

    def alive(self) -> bool:
        active, pid = unit_state(self.exec_argv, self.name, unit_name(self.run_id))
        if pid:
            self.pid = pid
        return active in ("active", "activating", "reloading")

    def gone(self) -> bool:
        """Stopped, its last process ended (not while the unit is still deactivating)."""
        active, _pid = unit_state(self.exec_argv, self.name, unit_name(self.run_id))
        return active not in ("active", "activating", "reloading", "deactivating")

    def exit_code(self) -> int | None:
        return None

    def log_tail(self, lines: int = 25) -> str:
        proc = subprocess.run(
            self.exec_argv(
                self.name, ["tail", "-n", str(lines), str(self.system_log), str(self.stdout_log)]
            ),
            capture_output=True,
            text=True,
            timeout=30,
        )
        return proc.stdout.strip()

    def signal(self, sig: int) -> None:
        subprocess.run(
            self.exec_argv(
                self.name, ["systemctl", "kill", "-s", str(int(sig)), unit_name(self.run_id)]
            ),
            capture_output=True,
            timeout=30,
        )
