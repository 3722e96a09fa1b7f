"""netns backend: one network namespace per host, veth pairs to a bridge.

The bridge lives in a namespace of its own (``tb-<run>-sw``), so nothing is ever created
in, or moved out of, the machine's own network namespace: every interface the testbed
makes is inside a namespace it made, and deleting the namespaces deletes them all.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Sequence

from common.errors import CommandError, StateError
from common.runner import run

from .. import cgroups, resources, subnets
from ..cassandra.launch import CassandraLaunch
from ..cassandra.node import CassandraNode, stop_nodes
from ..cassandra.readiness import wait_for_nodes
from ..state import RunState, namespace_name, run_of
from ..topology import Host, Topology

log = logging.getLogger(__name__)

SWITCH = "sw"
BRIDGE = "br0"
HOST_IF = "eth0"


def switch_namespace(run_id: str) -> str:
    return namespace_name(run_id, SWITCH)


def planned_namespaces(run_id: str, topology: Topology) -> list[str]:
    """Every namespace the run will create, switch first."""
    return [switch_namespace(run_id)] + [namespace_name(run_id, h.name) for h in topology.hosts]


def bridge_add_argv(ns: str, name: str) -> list[str]:
    """A plain learning bridge in namespace ``ns``: no STP, no forwarding delay, no
    multicast snooping: every port forwards at once."""
    return [
        "ip", "-n", ns, "link", "add", "name", name, "type", "bridge",
        "stp_state", "0", "forward_delay", "0", "mcast_snooping", "0",
    ]  # fmt: skip


def build_commands(run_id: str, topology: Topology) -> list[list[str]]:
    """The ``ip`` commands that build the topology, in order (pure; unit-tested)."""
    sw = switch_namespace(run_id)
    cmds = [
        ["ip", "netns", "add", sw],
        bridge_add_argv(sw, BRIDGE),
        ["ip", "-n", sw, "link", "set", BRIDGE, "up"],
    ]
    for host in topology.hosts:
        ns = namespace_name(run_id, host.name)
        cmds += [
            ["ip", "netns", "add", ns],
            ["ip", "-n", ns, "link", "set", "lo", "up"],
            # The switch-side end is named after the host; the host side is eth0. Always
            # say "name" and "dev": `ip link add a ...` would read "a" as "address".
            [
                "ip",
                "-n",
                sw,
                "link",
                "add",
                "name",
                host.name,
                "type",
                "veth",
                "peer",
                "name",
                HOST_IF,
                "netns",
                ns,
            ],
            ["ip", "-n", sw, "link", "set", "dev", host.name, "master", BRIDGE, "up"],
            ["ip", "-n", ns, "addr", "add", host.cidr, "dev", HOST_IF],
            ["ip", "-n", ns, "link", "set", HOST_IF, "up"],
        ]
    return cmds


def list_prefixed_namespaces(run_id: str | None = None) -> list[str]:
    """Namespaces on this machine named by the strict pattern (of one run, or of any)."""
    out = run(["ip", "netns", "list"]).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return [n for n in names if run_of(n) is not None and run_id in (None, run_of(n))]


def namespace_pids(ns: str) -> list[int]:
    """PIDs of every process inside namespace ``ns`` ([] if it does not exist)."""
    proc = run(["ip", "netns", "pids", ns], check=False)
    if proc.returncode != 0:
        return []
    return [int(p) for p in proc.stdout.split()]


def kill_namespace_processes(ns: str, *, timeout_s: float = 5.0) -> list[int]:
    """SIGKILL every process inside ``ns`` (a namespace this testbed made) and wait for it.

    Only processes inside our own namespace are touched: by construction we started them.
    """
    killed = []
    for pid in namespace_pids(ns):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    while killed and time.monotonic() < deadline and namespace_pids(ns):
        time.sleep(0.05)
    return killed


def delete_namespace(ns: str) -> None:
    kill_namespace_processes(ns)
    try:
        run(["ip", "netns", "del", ns])
    except CommandError as exc:
        if "No such file" not in exc.stderr:
            raise


class NetnsBackend:
    """Builds a Topology as network namespaces joined by a bridge."""

    name = "netns"
    remote = False

    def __init__(self, topology: Topology, state: RunState):
        self.topology = topology
        self.state = state

    @staticmethod
    def check_options(topology: Topology, options: dict) -> None:
        """Node resources: known hosts, profiles and values (the input alone)."""
        if options.get("resources"):
            resources.resolve_spec(options["resources"], topology)

    @staticmethod
    def validate(topology: Topology, options: dict) -> None:
        """Node resources need cgroups with the cpu and memory controllers (v2: enabled
        at the root already; the testbed does not change the root cgroup)."""
        if options.get("resources"):
            lay = cgroups.require_layout()
            if lay.version == 2:
                for res in resources.resolve_spec(options["resources"], topology).values():
                    cgroups.check_v2_root(lay, cgroups.needed_v2(res))

    @property
    def resources(self) -> dict[str, resources.Resources]:
        spec = self.state.options.get("resources") or {}
        return resources.resolve_spec(spec, self.topology) if spec else {}

    def create(self) -> None:
        # Record first, create second: a crash in between leaves only names `clean` ignores.
        self.state.namespaces = planned_namespaces(self.state.run_id, self.topology)
        limits = self.resources
        lay = cgroups.require_layout() if limits else None
        if lay is not None:
            self.state.put(cgroups.CgroupRecord({
                host: {
                    c: str(d)
                    for c, d in lay.dirs(cgroups.cgroup_name(self.state.run_id, host)).items()
                }
                for host in limits
            }))  # fmt: skip
        self.state.save()
        for cmd in build_commands(self.state.run_id, self.topology):
            run(cmd)
        if lay is not None:
            for host, res in limits.items():
                cgroups.create(
                    lay, cgroups.cgroup_name(self.state.run_id, host), res, self.state.run_dir
                )

    @property
    def cgroup_dirs(self) -> dict[str, dict[str, str]]:
        """host -> controller -> its cgroup directory (hosts with resources only)."""
        rec = self.state.get(cgroups.CgroupRecord)
        return rec.dirs if rec else {}

    def destroy(self) -> None:
        names = set(self.state.namespaces) | set(list_prefixed_namespaces(self.state.run_id))
        # Every process first (a VM in the switch namespace must stop before its TAPs go:
        # otherwise QEMU spins at 100 % CPU), then the namespaces, the switch last.
        for ns in names:
            kill_namespace_processes(ns)
        for ns in sorted(names, key=lambda n: n.endswith(f"-{SWITCH}")):
            delete_namespace(ns)
        for dirs in self.cgroup_dirs.values():  # what is left in them: the run's, killed
            cgroups.remove(dirs)
        for dirs in cgroups.find(self.state.run_id).values():
            cgroups.remove(dirs)

    @staticmethod
    def place(topology: Topology, options: dict, pool: str | None) -> Topology:
        return subnets.place(topology, pool)

    @staticmethod
    def leftovers(run_id: str | None = None) -> dict[str, list[str]]:
        return {
            "namespaces": list_prefixed_namespaces(run_id),
            "cgroups": sorted(cgroups.find(run_id)),
        }

    @staticmethod
    def remove_leftovers(run_id: str) -> list[str]:
        """Every namespace of the run (its processes killed first), the switch last;
        then its hosts' cgroups (what is left in them killed first)."""
        names = list_prefixed_namespaces(run_id)
        for ns in names:
            kill_namespace_processes(ns)
        for ns in sorted(names, key=lambda n: n.endswith(f"-{SWITCH}")):
            delete_namespace(ns)
        found = cgroups.find(run_id)
        for dirs in found.values():
            cgroups.remove(dirs)
        return names + sorted(found)

    @staticmethod
    def problems(state: RunState) -> list[str]:
        """Recorded namespaces and host cgroups that are gone."""
        present = set(list_prefixed_namespaces(state.run_id))
        out = [f"namespace {ns} is missing" for ns in state.namespaces if ns not in present]
        rec = state.get(cgroups.CgroupRecord)
        for host, dirs in (rec.dirs if rec else {}).items():
            out += [
                f"cgroup of {host} is missing: {d}" for d in dirs.values() if not os.path.isdir(d)
            ]
        return out

    def exec_argv(self, host: str, argv: Sequence[str], *, limited: bool = True) -> list[str]:
        self.topology.host(host)  # raises ConfigError for an unknown host
        inside = ["ip", "netns", "exec", namespace_name(self.state.run_id, host), *argv]
        dirs = self.cgroup_dirs.get(host) if limited else None
        # the cgroup first: under `ip netns exec` the cgroup file systems are not mounted
        return cgroups.join_argv(dirs, inside) if dirs else inside

    def pids(self, host: str) -> list[int]:
        return namespace_pids(namespace_name(self.state.run_id, host))

    # -- Cassandra: JVMs started as processes inside the namespaces ----------------------

    def cassandra_node(self, host: Host, pid: int | None = None) -> CassandraNode:
        node_dir = self.state.run_dir / "nodes" / host.name
        return CassandraNode(host, node_dir, self.state.run_id, pid=pid)

    def start_cassandra(
        self, launch: CassandraLaunch, nodes: dict[str, CassandraNode]
    ) -> dict[str, float]:
        """Start a JVM per edge node (the controller's Java, inside the node's namespace)
        and wait for the readiness stages; returns the stages' timings."""
        if launch.java is None:
            raise StateError("the netns backend runs Cassandra with the controller's Java")
        state = self.state
        for host in self.topology.edges:
            node = self.cassandra_node(host)
            node.write_config(launch.settings, self.topology, tls=launch.tls)
            node.check_ports(self.exec_argv)
            nodes[host.name] = node
        launch.progress(
            f"starting Cassandra {launch.dist.version} on {', '.join(nodes)} "
            f"(heap {launch.settings.heap_mb} MB, jvm profile {launch.settings.jvm_profile}"
            f"{', quiet nodes' if launch.settings.build == 'quiet' else ''}"
            f"{', class-data sharing' if launch.cds_archive else ''})"
        )
        for i, node in enumerate(nodes.values()):
            pid = node.start(
                java=launch.java,
                dist=launch.dist,
                settings=launch.settings,
                exec_argv=self.exec_argv,
                cds_archive=launch.cds_archive,
                cds_dump_to=launch.cds_dump_to if i == 0 else None,
            )
            state.processes[node.name] = {"pid": pid, "marker": node.marker}
        state.save()
        return wait_for_nodes(list(nodes.values()), launch.deadlines, launch.progress)

    def stop_cassandra(self, nodes: Sequence[CassandraNode]) -> None:
        stop_nodes(list(nodes))

    def tool_java(self, controller_java: str) -> str:
        """The java that runs nodetool on a host: the controller's, as the JVMs do."""
        return controller_java
