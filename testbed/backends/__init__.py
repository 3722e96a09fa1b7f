"""Backends build a Topology into running hosts. One registry; strings become classes only
at the CLI edge."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from common import extras
from common.errors import ConfigError

from ..state import RunState
from ..topology import Host, Topology

if TYPE_CHECKING:
    from ..cassandra.launch import CassandraLaunch
    from ..cassandra.node import CassandraNode


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, asked instead of its name (no module outside this registry
    compares backend names). Cheap to import: the sweep's checks read it without loading
    libvirt or Ansible."""

    remote: bool  # commands over SSH, Cassandra through the Ansible playbook
    namespaces: bool  # hosts are network namespaces of this machine: their logs are local
    # files, the host shaper queues in them, faults act on them, bring-ups cost what this
    # machine's calibration measured
    restart_nodes: bool  # a node's JVM can be started again in place (a sweep recovers)
    owns_hosts: bool  # it makes and removes its hosts (not: machines an inventory names,
    # one testbed at a time, never per Dask worker, their network not ours: TLS)
    options: frozenset[str] = frozenset()  # backend options it takes (backend_options)
    required: frozenset[str] = frozenset()  # ... of which it cannot go without
    extra: str | None = None  # the project's extra it needs (common.extras), if any


CAPABILITIES: dict[str, Capabilities] = {
    "netns": Capabilities(
        remote=False, namespaces=True, restart_nodes=True, owns_hosts=True,
        options=frozenset({"resources"}),
    ),
    "libvirt": Capabilities(
        remote=True, namespaces=False, restart_nodes=False, owns_hosts=True,
        options=frozenset({"edge_size"}), extra="vms",
    ),
    "hosts": Capabilities(
        remote=True, namespaces=False, restart_nodes=False, owns_hosts=False,
        options=frozenset({"inventory"}), required=frozenset({"inventory"}), extra="hosts",
    ),
}  # fmt: skip
DEFAULT_BACKEND = "netns"


def capabilities(name: str | None) -> Capabilities:
    """The capabilities of backend ``name`` (None: the default backend); ConfigError
    naming the available ones."""
    try:
        return CAPABILITIES[name or DEFAULT_BACKEND]
    except KeyError:
        raise ConfigError(
            f"unknown backend {name!r} (available: {', '.join(sorted(CAPABILITIES))})"
        ) from None


def _taken_by(option: str) -> str:
    return " or ".join(f"--backend {n}" for n, c in CAPABILITIES.items() if option in c.options)


class Backend(Protocol):
    """What the Testbed needs from a backend (netns, libvirt, hosts).

    ``remote`` backends (libvirt, hosts) run commands over SSH, start Cassandra through
    an Ansible playbook and name the interpreter (``python``) and ``java`` on their hosts.

    A backend class may also have two static checks the Testbed calls before anything is
    created: ``check_options(topology, options)`` looks at the input alone (no root, no
    system access) and runs first; ``validate(topology, options)`` may probe the machine
    (an image present, libvirt reachable) and runs after the root check. A backend
    instance may have ``slowness()``: how many times slower its booted hosts are than
    where Cassandra's deadlines were set (libvirt: ``guest_slowness``); the Testbed
    scales the deadlines by it after ``create()``.
    """

    name: str
    remote: bool

    def __init__(self, topology: Topology, state: RunState) -> None: ...

    def create(self) -> None:
        """Build every host and link of the topology; record each object in the state."""

    def destroy(self) -> None:
        """Remove every object recorded in the state or carrying the run's prefix."""

    def exec_argv(self, host: str, argv: Sequence[str], *, limited: bool = True) -> list[str]:
        """The argument list that runs ``argv`` on ``host`` (``limited``: within the
        host's device limits, where the backend has any)."""

    def pids(self, host: str) -> list[int]:
        """PIDs of processes running on ``host`` (for cleanup)."""

    def cassandra_node(self, host: Host, pid: int | None = None) -> CassandraNode:
        """The Cassandra node on edge host ``host`` (``pid``: its JVM, when recorded)."""
        ...

    def start_cassandra(
        self, launch: CassandraLaunch, nodes: dict[str, CassandraNode]
    ) -> dict[str, float]:
        """Start Cassandra on every edge node this backend's way and wait until it is
        ready; returns the readiness stages' timings. Each node goes into ``nodes`` (by
        host name) as soon as it exists, so a failure part-way leaves the caller the
        nodes to stop."""
        ...

    def stop_cassandra(self, nodes: Sequence[CassandraNode]) -> None:
        """Stop the nodes' JVMs before ``destroy`` (where destroy alone does not)."""

    def tool_java(self, controller_java: str) -> str:
        """The java that runs Cassandra's tools (nodetool) on a host."""
        ...

    @staticmethod
    def place(topology: Topology, options: dict, pool: str | None) -> Topology:
        """``topology`` with the addresses its hosts will have (called under
        ``subnets.allocation()``, before the run exists): a free subnet of ``pool`` for
        the backends that make their networks, the inventory's addresses for ``hosts``."""
        ...

    @staticmethod
    def leftovers(run_id: str | None = None) -> dict[str, list[str]]:
        """Objects of this backend on this machine named by the strict pattern, of run
        ``run_id`` (or of any run), by kind; `clean` and the tests' residue check use it."""
        ...

    @staticmethod
    def remove_leftovers(run_id: str) -> list[str]:
        """Remove every object of run ``run_id`` that ``leftovers`` finds; their names."""
        ...


def registry() -> dict[str, type[Backend]]:
    """Every backend by name (imported on first use: the VM backends pull in libvirt and
    Ansible). `clean` loops over it; the CLIs turn strings into classes through it."""
    from .hosts import HostsBackend
    from .libvirt import LibvirtBackend
    from .netns import NetnsBackend

    classes: dict[str, type[Backend]] = {
        "netns": NetnsBackend,
        "libvirt": LibvirtBackend,
        "hosts": HostsBackend,
    }
    return {name: classes[name] for name in CAPABILITIES}


def backend_class(name: str) -> type[Backend]:
    """The backend registered as ``name``; ConfigError naming the available ones, or the
    extra it needs when that is not installed."""
    require_extra(name)
    return registry()[name]


def require_extra(name: str | None) -> None:
    """ConfigError naming the extra backend ``name`` needs when it is not installed (the
    one message for an unknown name first)."""
    extra = capabilities(name).extra
    if extra is not None:
        extras.require(extra, f"--backend {name}")


def backend_options(
    backend: str,
    *,
    inventory: str | None = None,
    vm_vcpus: int | None = None,
    vm_memory_mb: int | None = None,
    node_resources: dict | None = None,
) -> dict:
    """The options that shape a testbed of ``backend`` (``testbed up`` and the sweep take
    the same ones); ConfigError for an option the backend does not use."""
    from pathlib import Path

    caps = capabilities(backend)
    opts: dict = {}
    if inventory:
        if "inventory" not in caps.options:
            raise ConfigError(f"--inventory is for {_taken_by('inventory')}")
        opts["inventory"] = str(Path(inventory).resolve())
    if vm_vcpus is not None or vm_memory_mb is not None:
        if "edge_size" not in caps.options:
            raise ConfigError(f"--vm-vcpus/--vm-memory are for {_taken_by('edge_size')}")
        from .libvirt_xml import EDGE_SIZE

        opts["edge_size"] = {
            "vcpus": EDGE_SIZE.vcpus if vm_vcpus is None else vm_vcpus,
            "memory_mb": EDGE_SIZE.memory_mb if vm_memory_mb is None else vm_memory_mb,
        }
    if node_resources:
        if "resources" not in caps.options:
            raise ConfigError(
                f"--node-cpu/--node-memory/--node-profile (cgroups) are for "
                f"{_taken_by('resources')}; VMs have --vm-vcpus/--vm-memory"
            )
        opts["resources"] = {h: dict(v) for h, v in node_resources.items()}
    return opts


def make_backend(name: str, topology: Topology, state: RunState) -> Backend:
    return backend_class(name)(topology, state)
