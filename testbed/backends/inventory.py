"""The hosts backend's Ansible inventory: read by Ansible's own data plugins (never a
script, never a template rendered), every value checked (addresses, ports, logins,
files; no template syntax), matched to the topology and its sites.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from common.errors import ConfigError
from common.files import read_text

from ..topology import Topology
from .ssh import RemoteHost

DATA_INVENTORY_PLUGINS = ("yaml", "ini")  # Ansible's order; yaml reads .json ones too


def read_inventory(path: str | Path) -> dict[str, dict]:
    """host name -> its variables, from an INI, YAML or JSON inventory (never a script
    or a plugin configuration: those run code)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"inventory not found: {path}")
    if not path.is_file():
        raise ConfigError(f"inventory {path} is not a file (an INI, YAML or JSON inventory)")
    read_text(path, "inventory")  # UTF-8 text of a sane size before Ansible reads it
    from ansible.inventory.helpers import get_group_vars
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import inventory_loader
    from ansible.utils.vars import combine_vars

    class DataOnly(InventoryManager):
        """Ansible's INI and YAML/JSON inventory plugins only: with its defaults an
        executable inventory is a script it runs (as root, here), and `auto` loads any
        plugin a YAML file names."""

        def _fetch_inventory_plugins(self):
            return [inventory_loader.get(name) for name in DATA_INVENTORY_PLUGINS]

    said = io.StringIO()  # Ansible's warnings: the first is the reason, in one line
    with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
        manager = DataOnly(loader=DataLoader(), sources=[str(path)])
    text = path.read_text()
    warning = _first_warning(said.getvalue())
    if warning is not None:  # a part Ansible skipped: hosts it silently left out
        raise ConfigError(
            f"inventory {path}: Ansible did not read all of it ({warning}{_line_of(text, warning)})"
        )
    # a host's own variables over its groups' (``[group:vars]``), as Ansible merges them
    hosts = {
        h.name: dict(combine_vars(get_group_vars(h.get_groups()), h.get_vars()))
        for h in manager.get_hosts()
    }
    if not hosts:
        raise ConfigError(f"inventory {path} lists no hosts")
    for name, variables in hosts.items():
        for where, value in [("its name", name), *_strings(variables)]:
            if TEMPLATE_RE.search(value):
                raise ConfigError(
                    f"inventory {path}: host {name}: {where} {value[:80]!r} holds template "
                    f"syntax ({{{{, {{% or {{#}}; Ansible would run it{_template_line(text, value)}"
                )
    return hosts


# Ansible renders Jinja in every string variable it uses (a lookup('pipe', ...) runs a
# command on the controller, as root here): inventory values are data, never templates.
TEMPLATE_RE = re.compile(r"\{\{|\{%|\{#")


def _strings(value: object, where: str = "") -> list[tuple[str, str]]:
    """(variable path, text) of every string in ``value``, nested values too."""
    if isinstance(value, str):
        return [(where, value)]
    if isinstance(value, dict):
        return [
            pair
            for k, v in value.items()
            for pair in [(f"{where}.{k}" if where else str(k), str(k))]
            + _strings(v, f"{where}.{k}" if where else str(k))
        ]
    if isinstance(value, list | tuple):
        return [pair for i, v in enumerate(value) for pair in _strings(v, f"{where}[{i}]")]
    return []


# Ansible's warnings that it left part of an inventory out
PARTIAL_RE = re.compile(
    r"Failed to parse|Unable to parse|Skipping|Invalid|not a valid|No inventory"
)


def _first_warning(said: str) -> str | None:
    """The first warning Ansible printed, in one line: its innermost cause where it gives
    one ("<<< caused by >>>"), without the origin lines."""
    blocks = [
        b
        for b in re.split(r"^\[WARNING\]: ", said, flags=re.M)[1:]
        if PARTIAL_RE.search(b)  # what Ansible left out, not a remark (a host and a group
    ]  # of one name, as an exported inventory has: `ep` in group `ep`)
    if not blocks:
        return None
    cause = blocks[0].split("<<< caused by >>>")[-1]
    lines = [
        ln.strip()
        for ln in cause.splitlines()
        if ln.strip() and not ln.strip().startswith("Origin:")
    ]
    return " ".join(" ".join(lines).split())[:300]


def _line_of(text: str, message: str) -> str:
    """The ", line N" of ``text`` where a token ``message`` quotes first appears (a value
    in quotes or parentheses, or what follows "got:"), else "" (Ansible 2.19's messages
    name no line)."""
    tokens = re.findall(r"'([^']+)'|\"([^\"]+)\"|\(([^)]+)\)|got:\s*(.+)$", message)
    return _line_with(text, [t for group in tokens for t in group if t])


def _line_with(text: str, tokens: list[str]) -> str:
    """The ", line N" of the first line of ``text`` holding one of ``tokens``, else ""."""
    for token in (t.strip() for t in tokens):
        for number, line in enumerate(text.splitlines(), 1):
            if token and token in line:
                return f", line {number}"
    return ""


def _template_line(text: str, value: str) -> str:
    """The ", line N" where ``value``'s template appears in ``text`` (quotes and escapes
    may differ there: its first marker and what follows, up to a quote)."""
    found = TEMPLATE_RE.search(value)
    start = value[found.start() :] if found else value
    return _line_with(text, [value, re.split(r"['\"]", start)[0], start[:2]])


def _ipv4(value: object) -> str | None:
    """Why ``value`` is not a usable IPv4 address, or None when it is one."""
    try:
        addr = ipaddress.IPv4Address(str(value))
    except ValueError:
        return "is not an IPv4 address"
    if addr.is_unspecified or addr.is_multicast or str(addr) == "255.255.255.255":
        return "is not a host address"
    return None


def _port(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return "is not a port (1..65535)"
    text = str(value).strip()
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        return "is not a port (1..65535)"
    return None


def _login(value: object) -> str | None:
    text = str(value)
    if not text:
        return "is empty"
    if text.startswith("-"):
        return "starts with '-'"
    if any(c.isspace() or not c.isprintable() for c in text):
        return "contains whitespace or control characters"
    return None


def _file(value: object) -> str | None:
    path = Path(str(value)).expanduser()
    return None if path.is_file() else "is not a file"


# inventory variable -> check (None: fine, else why not) and whether it must be there
_CHECKS = {
    "ansible_host": (_ipv4, True),
    "edgetb_address": (_ipv4, False),
    "ansible_port": (_port, False),
    "ansible_user": (_login, False),
    "ansible_ssh_private_key_file": (_file, True),
    "edgetb_known_hosts": (_file, False),
}


def validate_inventory(
    inventory: dict[str, dict], names: Iterable[str], source: str | Path = "inventory"
) -> None:
    """Check the variables of the hosts ``names`` (those the run uses); ConfigError with
    one line listing every problem, each naming the host, variable and value."""
    problems = []
    for name in names:
        if name not in inventory:
            continue  # remote_hosts names every missing host
        v = inventory[name]
        for var, (check, required) in _CHECKS.items():
            if var not in v:
                if required:
                    problems.append(f"{name}: {var} is missing")
                continue
            why = check(v[var])
            if why:
                problems.append(f"{name}: {var} {str(v[var])!r} {why}")
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))


def check_sites(topology: Topology, inventory: dict[str, dict]) -> None:
    """Where the inventory says which site each edge host is at (``edgetb_site``), the
    topology must place it there (nodes are numbered site by site); ConfigError naming
    the ``--sites`` that would, when it does not."""
    named = {h.name: inventory[h.name].get("edgetb_site") for h in topology.edges}
    if not any(named.values()):
        return
    missing = [name for name, site in named.items() if not site]
    if missing:
        raise ConfigError(
            f"the inventory names the sites of some edge hosts, not of {', '.join(missing)} "
            f"(edgetb_site): name every one, or none"
        )
    wanted = {name: str(site) for name, site in named.items()}
    placed = {h.name: h.site for h in topology.edges}
    if wanted == placed:
        return
    runs: list[list] = []  # the inventory's sites in node order, as --sites would make them
    for name in named:
        if runs and runs[-1][0] == wanted[name]:
            runs[-1][1] += 1
        else:
            runs.append([wanted[name], 1])
    names = [site for site, _ in runs]
    default = [f"dc{i + 1}" for i in range(len(runs))]
    if len(set(names)) != len(names):
        hint = "number the hosts site by site (e0.. in the first site, then the next)"
    elif names != default:
        hint = f"the testbed names its sites {', '.join(default)} in order"
    else:
        hint = f"give --sites {','.join(str(n) for _, n in runs)}"
    raise ConfigError(
        "the inventory places the edge hosts at "
        + ", ".join(f"{n}: {s}" for n, s in wanted.items())
        + f", the testbed's topology does not: {hint}"
    )


def remote_hosts(topology: Topology, inventory: dict[str, dict]) -> dict[str, RemoteHost]:
    """The topology's hosts as found in the inventory; ConfigError naming missing ones."""
    missing = [h.name for h in topology.hosts if h.name not in inventory]
    if missing:
        raise ConfigError(
            f"the inventory has no host for {', '.join(missing)} "
            f"(it has {', '.join(sorted(inventory))})"
        )
    found = {}
    for h in topology.hosts:
        v = inventory[h.name]
        found[h.name] = RemoteHost(
            h.name,
            str(v.get("ansible_host", h.name)),  # checked by validate_inventory
            str(v.get("ansible_user", "root")),
            int(str(v.get("ansible_port", 22)).strip()),
        )
    return found


def inventory_addresses(topology: Topology, inventory: dict[str, dict]) -> dict[str, str]:
    """Each host's testbed address: ``edgetb_address``, else ``ansible_host``."""
    return {
        h.name: str(inventory[h.name].get("edgetb_address", inventory[h.name]["ansible_host"]))
        for h in topology.hosts
    }


def inventory_key(inventory: dict[str, dict]) -> Path | None:
    keys = {
        str(v["ansible_ssh_private_key_file"])
        for v in inventory.values()
        if v.get("ansible_ssh_private_key_file")
    }
    if len(keys) > 1:
        raise ConfigError("the inventory names several SSH keys; use one for all hosts")
    return Path(keys.pop()).expanduser() if keys else None


def inventory_known_hosts(inventory: dict[str, dict], names: Iterable[str]) -> Path | None:
    """The ``edgetb_known_hosts`` file of the run's hosts (one for all), or None."""
    files = {
        str(inventory[n]["edgetb_known_hosts"])
        for n in names
        if inventory.get(n, {}).get("edgetb_known_hosts")
    }
    if len(files) > 1:
        raise ConfigError(
            "the inventory names several edgetb_known_hosts files; use one for all hosts"
        )
    return Path(files.pop()).expanduser() if files else None


@dataclass(frozen=True)
class Inventory:
    """What the hosts backend takes from an inventory: validated, matched to the topology."""

    path: Path
    hosts: dict[str, RemoteHost]
    key: Path
    known_hosts: Path | None  # edgetb_known_hosts: the only keys trusted, when given
    raw: dict[str, dict]  # every host's variables as read


def load(topology: Topology, options: dict) -> Inventory:
    """The inventory of ``--inventory``, checked (ConfigError when a value is invalid,
    a host or the key is missing, or it does not match the topology)."""
    if not options.get("inventory"):
        raise ConfigError("the hosts backend needs --inventory FILE")
    path = Path(options["inventory"])
    inv = read_inventory(path)
    names = [h.name for h in topology.hosts]
    validate_inventory(inv, names, path)
    found = remote_hosts(topology, inv)
    check_sites(topology, inv)
    key = inventory_key(inv)
    if key is None:
        raise ConfigError("the inventory names no ansible_ssh_private_key_file")
    return Inventory(path, found, key, inventory_known_hosts(inv, names), inv)
