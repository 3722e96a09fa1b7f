"""How a testbed's hosts are reached: addresses, the environment of a command, commands
and processes on a host, nodetool against a node, the CQL client on the endpoint.

``HostAccess`` is a part of ``Testbed`` (testbed/testbed.py): the attributes below are
the Testbed's, set by its ``__init__`` or ``attach``.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common.errors import CommandError, StateError
from common.runner import run

from . import state as st
from .backends import Backend, backend_class
from .cassandra import auth as auth_mod
from .cassandra import dist as dist_mod
from .cassandra import tls as tls_mod
from .cassandra.config import CassandraSettings
from .cassandra.java import Java
from .cassandra.jvm import nodetool_args
from .cassandra.node import CassandraNode
from .topology import Topology

log = logging.getLogger(__name__)


class HostAccess:
    """Commands on a testbed's hosts and what they are given (a part of ``Testbed``)."""

    topology: Topology
    backend_name: str
    backend: Backend | None
    state: st.RunState | None
    settings: CassandraSettings | None
    java: Java | None
    dist: dist_mod.CassandraDist | None
    nodes: dict[str, CassandraNode]

    def address(self, host: str) -> str:
        return self.topology.host(host).address

    @property
    def run_id(self) -> str:
        if self.state is None:
            raise StateError("testbed is not up")
        return self.state.run_id

    def environment(self, host: str) -> dict[str, str]:
        """Variables set for commands run on a host: run id, host, edge addresses and, on
        the endpoint, the path of the login file (a cluster with authentication) and of
        the TLS files (a cluster with TLS); never their content: these variables are on
        the command line."""
        env = {
            "EDGETB_RUN": self.run_id,
            "EDGETB_HOST": host,
            "EDGETB_EDGE_ADDRESSES": ",".join(h.address for h in self.topology.edges),
        }
        site = self.topology.host(host).site
        if site is not None:  # a client uses the nodes of its own host's site
            env["EDGETB_LOCAL_DC"] = site  # client.LOCAL_DC_ENV (not imported: see there)
        if self.settings is not None and host == self.topology.endpoint.name:
            if self.auth:
                env[auth_mod.ENV] = str(self.credentials_path)  # copied to the endpoint only
            if self.settings.tls:
                env[tls_mod.ENV] = str(self.tls_dir)  # the same
        return env

    def exec_argv(self, host: str, argv: Sequence[str], *, limited: bool = True) -> list[str]:
        """The argument list that runs ``argv`` on ``host`` with its environment set.
        ``limited=False``: outside the host's device limits (netns cgroups) — the
        testbed's own tools (nodetool, tc), which no device would run on itself and
        which must not eat the node's CPU quota or memory."""
        if self.backend is None:
            raise StateError("testbed is not up")
        env = [f"{k}={v}" for k, v in self.environment(host).items()]
        return self.backend.exec_argv(host, ["env", *env, *argv], limited=limited)

    def exec(
        self,
        host: str,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float | None = 60,
        input: str | None = None,
    ) -> subprocess.CompletedProcess:
        """Run ``argv`` on ``host`` and return the result (CommandError if it fails)."""
        return run(self.exec_argv(host, argv), check=check, timeout=timeout, input=input)

    def popen(self, host: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` on ``host`` without waiting (the caller owns the process)."""
        return subprocess.Popen(self.exec_argv(host, argv), **kwargs)

    def nodetool(self, host: str, *command: str, timeout: float = 60) -> str:
        """Run nodetool against ``host``'s Cassandra (JMX on its own loopback)."""
        if self.java is None or self.dist is None:
            raise StateError("this testbed runs no Cassandra")
        if self.backend is None:
            raise StateError("testbed is not up")  # as exec_argv would say
        java = self.backend.tool_java(self.java.path)
        argv = [java, *nodetool_args(self.dist.classpath, self.dist.tools_logback, *command)]
        return run(self.exec_argv(host, argv, limited=False), timeout=timeout).stdout

    def status(self) -> list[dict[str, Any]]:
        """Per host: name, role, address, and Cassandra's state as one live node sees it."""
        ring: dict[str, str] = {}
        dcs: dict[str, str] = {}
        for node in self.nodes.values():
            if node.alive():
                try:
                    text = self.nodetool(node.name, "status")
                    ring, dcs = parse_nodetool_status(text), parse_nodetool_datacenters(text)
                    break
                except CommandError as exc:
                    log.debug("nodetool on %s failed: %s", node.name, exc)
        hosts = []
        for host in self.topology.hosts:
            entry: dict[str, Any] = {"name": host.name, "role": host.role, "address": host.address}
            if host.site is not None:
                entry["site"] = host.site
            if host.is_edge:
                if host.address in dcs:
                    entry["datacenter"] = dcs[host.address]  # as Cassandra sees it
                edge = self.nodes.get(host.name)
                alive = bool(edge and edge.alive())
                entry["cassandra"] = ring.get(host.address, "?") if alive else "stopped"
                entry["pid"] = edge.pid if edge else None
            hosts.append(entry)
        return hosts

    def status_from(self, host: str) -> dict[str, str]:
        """Every node's state (UN, DN, ...) as ``host``'s own Cassandra sees it, by host
        name; {} when its nodetool does not answer (the node is down or starting)."""
        names = {h.address: h.name for h in self.topology.edges}
        try:
            ring = parse_nodetool_status(self.nodetool(host, "status"))
        except CommandError:
            return {}
        return {names.get(a, a): v for a, v in ring.items()}

    @property
    def tls_dir(self) -> Path:
        """The client's TLS files (on TLS clusters; the endpoint has a copy at the same path)."""
        if self.state is None:
            raise StateError("testbed is not up")
        return self.state.run_dir / tls_mod.DIR

    @property
    def auth(self) -> bool:
        """Whether Cassandra runs with authentication (the remote backends: their hosts
        sit on real networks; namespaces on this machine do not)."""
        return bool(getattr(backend_class(self.backend_name), "cassandra_auth", False))

    @property
    def credentials_path(self) -> Path:
        """The run's CQL login (0600; on authenticated clusters only). The endpoint has a
        copy at the same path."""
        if self.state is None:
            raise StateError("testbed is not up")
        return self.state.run_dir / auth_mod.FILE_NAME

    def driver_probe(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """Connect a driver session from the endpoint and wait until it sees every node up."""
        out = self.client(["probe", "--expect", str(self.topology.edge_nodes)], timeout_s=timeout_s)
        return json.loads(out.stdout.strip().splitlines()[-1])

    @property
    def python(self) -> str:
        """The Python interpreter on the hosts (this one under netns; the image's venv on
        VMs and inventory hosts): it runs the client, the probes and the workload."""
        return getattr(self.backend, "python", None) or sys.executable

    def client_argv(self, args: Sequence[str], timeout_s: float = 60.0) -> list[str]:
        """The command line of ``python -m testbed.client ARGS`` on the hosts."""
        return [self.python, "-m", "testbed.client", "--timeout", str(timeout_s), *args]

    def client(
        self, args: Sequence[str], *, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess:
        """Run ``python -m testbed.client ARGS`` on the endpoint; raises CommandError on failure."""
        return self.exec(
            self.topology.endpoint.name, self.client_argv(args, timeout_s), timeout=timeout_s + 30
        )


def parse_nodetool_datacenters(text: str) -> dict[str, str]:
    """Map address -> datacenter from `nodetool status` output (a "Datacenter: NAME"
    line heads each datacenter's nodes)."""
    result, dc = {}, None
    for line in text.splitlines():
        if line.startswith("Datacenter:"):
            dc = line.split(":", 1)[1].strip()
            continue
        for address in parse_nodetool_status(line):
            if dc is not None:
                result[address] = dc
    return result


def parse_nodetool_status(text: str) -> dict[str, str]:
    """Map address -> two-letter state (UN, DN, UJ, ...) from `nodetool status` output."""
    result = {}
    for line in text.splitlines():
        fields = line.split()
        if (
            len(fields) >= 2
            and len(fields[0]) == 2
            and fields[0][0] in "UD"
            and fields[0][1] in "NLJM"
        ):
            result[fields[1]] = fields[0]
    return result
