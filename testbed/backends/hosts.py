"""hosts backend: machines that already exist (edge boards, VMs of another tool), listed in
an Ansible inventory, get the same provisioning, Cassandra and shaping as the testbed's
own VMs.

The inventory names each host after the topology (``e0`` .. ``e{k-1}`` and ``ep``); each
host keeps its own address (``edgetb_address``, else ``ansible_host``): the run's
topology is numbered from the inventory, and Cassandra's settings and the shaping rules
are rendered from it. Two runs may not use one address at once. SSH uses the inventory's
user, port and key (``ansible_user``, ``ansible_port``, ``ansible_ssh_private_key_file``)
and checks host keys (``hostkeys``: ``edgetb_known_hosts``, the user's known_hosts, or the
keys recorded on first contact). Every value is validated before anything starts.

These machines sit on real networks: Cassandra runs with authentication (a login made
for the run; ``testbed.cassandra.auth``) and JMX on each node's loopback only.

Nothing is created or destroyed on the machines themselves: `down` restores the qdiscs
the run's shaping replaced (as recorded before), stops Cassandra and removes the run's
directory on every host; a host it cannot reach is an error naming it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from common.errors import CommandError, ConfigError, TeardownError, TestbedError
from common.runner import run

from .. import qdisc, subnets
from ..state import Record, RunState, home
from ..topology import Topology
from . import hostkeys, provision, remote
from .inventory import inventory_addresses, load
from .ssh import SSH

SSH_TIMEOUT_S = 60.0


def _not_restored(host: str, dev: str, recorded: str, exc: Exception) -> str:
    detail = exc.stderr if isinstance(exc, CommandError) and exc.stderr else str(exc)
    line = f"{host}: qdiscs of {dev} not restored ({' '.join(detail.split())[:300]})"
    if recorded:
        line += f"; before the run they were: {qdisc.normalize(recorded)!r}"
    return line


@dataclass
class HostsRecord(Record):
    """What the run did to the machines: the inventory, the host keys it trusted, and
    whether it provisioned them (then ``down`` has something to undo there)."""

    KEY = "hosts"
    inventory: str = ""
    host_keys: dict[str, dict] = field(default_factory=dict)
    touched: bool = False
    provision_s: float | None = None


class HostsBackend(remote.RemoteBackend):
    """Existing machines from an Ansible inventory; exec over SSH with checked host keys."""

    name = "hosts"
    cassandra_tls = True  # real networks: client and internode TLS unless --no-tls

    def __init__(self, topology: Topology, state: RunState):
        self.topology = topology
        self.state = state
        self.inv = load(topology, state.options)
        self.inventory_path = self.inv.path
        self.hosts = self.inv.hosts
        self.ssh = SSH(state.run_id, state.run_dir / "ssh", self.inv.key, strict=True)

    @staticmethod
    def leftovers(run_id: str | None = None) -> dict[str, list[str]]:
        """Nothing on this machine but SSH masters, which `clean` finds by their tag."""
        return {}

    @staticmethod
    def remove_leftovers(run_id: str) -> list[str]:
        return []

    @staticmethod
    def check_options(topology: Topology, options: dict) -> None:
        """The inventory, read and validated (no system change, no root)."""
        if topology.subnet is not None:
            raise ConfigError(
                "the hosts backend takes each host's address from the inventory "
                "(edgetb_address or ansible_host); leave --subnet out"
            )
        load(topology, options)

    @staticmethod
    def place(topology: Topology, options: dict, pool: str | None) -> Topology:
        """The hosts at their inventory addresses; ConfigError when another hosts run on
        this machine uses one of them (both would shape and restart the same machine).
        A subnet of a libvirt run may hold them: its VMs can serve as existing hosts."""
        inv = load(topology, options)
        placed = topology.with_addresses(inventory_addresses(topology, inv.raw))
        taken = subnets.recorded_subnets(hosts_only=True)
        clash = [
            f"{h.name} ({h.address}): {t.by}"
            for h in placed.hosts
            for t in subnets.conflicts(ipaddress.IPv4Network(f"{h.address}/32"), taken)
        ]
        if clash:
            raise ConfigError("hosts already used by another run: " + "; ".join(clash))
        return placed

    def trust_host_keys(self) -> dict[str, dict]:
        """The run's known_hosts from the trusted sources (see ``hostkeys``)."""
        return hostkeys.trust(
            list(self.hosts.values()),
            run_file=self.ssh.known_hosts,
            store=home() / hostkeys.STORE_NAME,
            explicit=self.inv.known_hosts,
            user_files=[hostkeys.USER_KNOWN_HOSTS.expanduser(), hostkeys.SYSTEM_KNOWN_HOSTS],
            timeout_s=SSH_TIMEOUT_S,
        )

    def create(self) -> None:
        self.ssh.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        rec = self.state.put(HostsRecord(str(self.inventory_path)))
        rec.host_keys = self.trust_host_keys()
        self.state.save()
        for host in self.hosts.values():
            self.ssh.wait(host, SSH_TIMEOUT_S)
        if self.state.cassandra is not None:
            # before anything is copied or installed: where another run's Cassandra (or
            # anything else) holds a node's ports, refused with nothing of this run on
            # the hosts (its provisioning would replace the code that run's hosts use)
            for edge in self.topology.edges:
                self.cassandra_node(edge).check_ports(self.exec_argv, without_ss_ok=True)
        from .libvirt import provision_extravars

        archive = provision.project_archive(self.ansible_dir / "project.tar.gz")
        cassandra = provision.cassandra_archive(self.ansible_dir, list(self.hosts), self.exec_argv)
        rec.touched = True  # from here on `down` has something to undo on the hosts
        self.state.save()
        secs = provision.playbook(
            "provision",
            private_dir=self.ansible_dir,
            inv=self.inventory(),
            ssh=self.ssh,
            extravars=provision_extravars(self.state.run_id, archive, cassandra),
        )
        rec.provision_s = round(secs, 1)
        self.state.save()

    def restore_qdiscs(self) -> list[str]:
        """Put back the qdiscs recorded before the run shaped its hosts (when shaping is
        still on); one line per host where that failed."""
        rec = self.state.get(qdisc.QdiscRecord)
        if rec is None:
            return []
        before = rec.before
        problems = []
        for name in self.hosts:

            def on_host(argv, check, host=name):
                return run(self.exec_argv(host, argv), check=check, timeout=60)

            for dev, recorded in before.get(name, {}).items():
                try:
                    qdisc.restore(on_host, name, dev, recorded)
                except (TestbedError, OSError) as exc:
                    problems.append(_not_restored(name, dev, recorded, exc))
        return problems

    def destroy(self) -> None:
        """Undo the run on every host; TeardownError naming each host where that failed
        (the run's state is then kept: `clean --run RUN` retries this)."""
        problems: list[str] = []
        try:
            rec = self.state.get(HostsRecord)
            if rec is not None and rec.touched:
                problems += self.restore_qdiscs()
                try:
                    provision.playbook(
                        "teardown",
                        private_dir=self.ansible_dir,
                        inv=self.inventory(),
                        ssh=self.ssh,
                        extravars={
                            "edgetb_run_dir": str(self.state.run_dir),
                            "edgetb_run": self.state.run_id,
                            "edgetb_unit": remote.unit_name(self.state.run_id),
                        },
                        timeout_s=120,
                    )
                except provision.ProvisionError as exc:
                    problems.append(str(exc))
        finally:
            self.ssh.close(list(self.hosts.values()))
        if problems:
            raise TeardownError(
                "down could not undo the run on every host (Cassandra unit "
                f"{remote.unit_name(self.state.run_id)}, shaping, {self.state.run_dir} may be "
                "left):\n" + "\n".join(problems)
            )
