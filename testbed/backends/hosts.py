"""hosts backend: machines that already exist (edge boards, VMs of another tool), listed in
an Ansible inventory, get the same provisioning, Cassandra and shaping as the testbed's
own VMs.

The inventory names each host after the topology (``e0`` .. ``e{k-1}`` and ``ep``); each
host's address (``edgetb_address``, else ``ansible_host``) must be the topology's address
for it (``--subnet``: the endpoint is .10, edge node i is .11+i), because Cassandra's
settings and the shaping rules are rendered from the topology. SSH uses the inventory's
user, port and key (``ansible_user``, ``ansible_port``, ``ansible_ssh_private_key_file``).

Nothing is created or destroyed on the machines themselves: `down` stops Cassandra,
removes the shaping and the run's directory on every host.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

from ..errors import ConfigError
from ..state import RunState
from ..topology import Topology
from . import remote
from .remote import SSH, RemoteHost

SSH_TIMEOUT_S = 60.0


def read_inventory(path: str | Path) -> dict[str, dict]:
    """host name -> its variables, from any inventory Ansible reads (INI, YAML, JSON)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"inventory not found: {path}")
    if not path.is_file():
        raise ConfigError(f"inventory {path} is not a file (an INI, YAML or JSON inventory)")
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    manager = InventoryManager(loader=DataLoader(), sources=[str(path)])
    hosts = {h.name: dict(h.get_vars()) for h in manager.get_hosts()}
    if not hosts:
        raise ConfigError(f"inventory {path} lists no hosts")
    return hosts


def remote_hosts(topology: Topology, inventory: dict[str, dict]) -> dict[str, RemoteHost]:
    """The topology's hosts as found in the inventory; ConfigError naming every mismatch."""
    missing = [h.name for h in topology.hosts if h.name not in inventory]
    if missing:
        raise ConfigError(
            f"the inventory has no host for {', '.join(missing)} "
            f"(it has {', '.join(sorted(inventory))})"
        )
    found = {}
    problems = []
    for h in topology.hosts:
        v = inventory[h.name]
        ssh_address = _ssh_host(h.name, v.get("ansible_host", h.name))
        address = str(v.get("edgetb_address", ssh_address))
        if address != h.address:
            problems.append(f"{h.name} is {address}, the topology needs {h.address}")
        found[h.name] = RemoteHost(
            h.name,
            ssh_address,
            _ssh_user(h.name, v.get("ansible_user", "root")),
            _ssh_port(h.name, v.get("ansible_port", 22)),
        )
    if problems:
        raise ConfigError(
            "inventory addresses do not match the topology (set edgetb_address "
            "or --subnet): " + "; ".join(problems)
        )
    return found


# What ssh and Ansible take as a host, user and port; anything else (a value starting with
# "-" would be read by ssh as an option) is refused.
_HOST_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
_USER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")


def _ssh_host(name: str, value: object) -> str:
    text = str(value)
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if not _HOST_RE.match(text):
        raise ConfigError(
            f"inventory host {name}: ansible_host {text!r} is not a host name or IP address"
        )
    return text


def _ssh_user(name: str, value: object) -> str:
    text = str(value)
    if not _USER_RE.match(text):
        raise ConfigError(
            f"inventory host {name}: ansible_user {text!r} is not a user name (letters, "
            f"digits, '_', '.', '-'; not starting with '-')"
        )
    return text


def _ssh_port(name: str, value: object) -> int:
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ConfigError(
            f"inventory host {name}: ansible_port {value!r} is not a port (an integer "
            f"from 1 to 65535)"
        )
    return int(text)


def inventory_key(inventory: dict[str, dict]) -> Path | None:
    keys = {
        str(v["ansible_ssh_private_key_file"])
        for v in inventory.values()
        if v.get("ansible_ssh_private_key_file")
    }
    if len(keys) > 1:
        raise ConfigError("the inventory names several SSH keys; use one for all hosts")
    return Path(keys.pop()) if keys else None


def load(topology: Topology, options: dict) -> tuple[Path, dict[str, RemoteHost], Path]:
    """The inventory file, the topology's hosts in it and its SSH key (ConfigError when
    any is missing or does not match the topology)."""
    if not options.get("inventory"):
        raise ConfigError("the hosts backend needs --inventory FILE")
    path = Path(options["inventory"])
    inv = read_inventory(path)
    found = remote_hosts(topology, inv)
    key = inventory_key(inv)
    if key is None:
        raise ConfigError("the inventory names no ansible_ssh_private_key_file")
    return path, found, key


class HostsBackend(remote.RemoteBackend):
    """Existing machines from an Ansible inventory; exec over SSH."""

    name = "hosts"

    def __init__(self, topology: Topology, state: RunState):
        self.topology = topology
        self.state = state
        self.inventory_path, self.hosts, key = load(topology, state.extra.get("backend", {}))
        self.ssh = SSH(state.run_id, state.run_dir / "ssh", key)

    @staticmethod
    def check_options(topology: Topology, options: dict) -> None:
        """The inventory and its key, read and checked (no system change, no root)."""
        _, _, key = load(topology, options)
        if not key.is_file():
            raise ConfigError(f"SSH key of the inventory not found: {key}")

    def create(self) -> None:
        self.ssh.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for host in self.hosts.values():
            self.ssh.wait(host, SSH_TIMEOUT_S)
        from .libvirt import provision_extravars

        archive = remote.project_archive(self.ansible_dir / "project.tar.gz")
        cassandra = self._cassandra_archive()
        secs = remote.playbook(
            "provision",
            private_dir=self.ansible_dir,
            inv=self.inventory(),
            ssh=self.ssh,
            extravars=provision_extravars(self.state.run_id, archive, str(cassandra)),
        )
        self.state.extra["hosts"] = {
            "provision_s": round(secs, 1),
            "inventory": str(self.inventory_path),
        }
        self.state.save()

    def _cassandra_archive(self) -> Path:
        """The testbed's Cassandra as a tarball, for hosts that do not have it yet."""
        import tarfile

        from ..cassandra import dist as dist_mod

        dist = dist_mod.load()
        _ = dist.tools_logback  # written on first use; the hosts' nodetool needs it
        path = self.state.run_dir / "ansible" / "cassandra.tar.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w:gz", compresslevel=1) as tar:
            for sub in ("lib", "conf"):
                if (dist.root / sub).is_dir():
                    tar.add(dist.root / sub, arcname=sub)
        return path

    def destroy(self) -> None:
        # The hosts outlive the run: the shaping inside them (direct shaper: tcconfig's
        # qdiscs on eth0) goes with it.
        shaped = "direct" in self.state.extra.get("emulation", {})
        with remote.suppress_failures():
            remote.playbook(
                "teardown",
                private_dir=self.ansible_dir,
                inv=self.inventory(),
                ssh=self.ssh,
                extravars={
                    "edgetb_run_dir": str(self.state.run_dir),
                    "edgetb_shaped_devices": ["eth0"] if shaped else [],
                },
                timeout_s=120,
            )
        self.ssh.close(list(self.hosts.values()))
