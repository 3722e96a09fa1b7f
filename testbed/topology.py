"""Declarative topology: which hosts exist and their addresses. Creates nothing.

A ``Topology`` is only names and addresses (like Mininet's ``Topo``); a backend builds it.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Literal

from .errors import ConfigError

MAX_EDGE_NODES = 9
DEFAULT_SUBNET = "10.77.0.0/24"
_NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,11}$")
_RESERVED_NAMES = frozenset({"sw", "lo"})
# Hosts get addresses from this offset on: .10 the endpoint, .11, .12, ... the edge nodes.
_FIRST_HOST_OFFSET = 10

Role = Literal["edge", "endpoint"]


@dataclass(frozen=True)
class Host:
    """One machine of the testbed: an edge node (runs Cassandra) or the endpoint (client)."""

    name: str
    role: Role
    address: str
    prefixlen: int

    @property
    def is_edge(self) -> bool:
        return self.role == "edge"

    @property
    def cidr(self) -> str:
        return f"{self.address}/{self.prefixlen}"


@dataclass(frozen=True)
class Topology:
    """k edge nodes plus one endpoint on one private subnet.

    Args:
        edge_nodes: number of Cassandra nodes, 1..9.
        subnet: private IPv4 network the hosts are numbered from (RFC 1918).
        edge_names: optional names for the edge nodes (default e0..e{k-1}).
        endpoint_name: name of the client host (default ep).

    Raises ConfigError on construction when anything is invalid.
    """

    edge_nodes: int = 3
    subnet: str = DEFAULT_SUBNET
    edge_names: tuple[str, ...] | None = None
    endpoint_name: str = "ep"
    hosts: tuple[Host, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.edge_nodes, bool) or not isinstance(self.edge_nodes, int):
            raise ConfigError(f"edge_nodes must be an integer, got {self.edge_nodes!r}")
        if not 1 <= self.edge_nodes <= MAX_EDGE_NODES:
            raise ConfigError(
                f"edge_nodes must be between 1 and {MAX_EDGE_NODES}, got {self.edge_nodes}"
            )
        names = self.edge_names
        if names is None:
            names = tuple(f"e{i}" for i in range(self.edge_nodes))
        else:
            names = tuple(names)
            if len(names) != self.edge_nodes:
                raise ConfigError(
                    f"edge_names has {len(names)} names for {self.edge_nodes} edge nodes"
                )
        object.__setattr__(self, "edge_names", names)
        all_names = (*names, self.endpoint_name)
        for name in all_names:
            if not isinstance(name, str) or not _NAME_RE.match(name) or name in _RESERVED_NAMES:
                raise ConfigError(
                    f"invalid host name {name!r}: use 1-12 lowercase letters/digits starting "
                    f"with a letter, not {sorted(_RESERVED_NAMES)}"
                )
        duplicates = sorted({n for n in all_names if all_names.count(n) > 1})
        if duplicates:
            raise ConfigError(f"duplicate host names: {', '.join(duplicates)}")

        try:
            net = ipaddress.IPv4Network(self.subnet, strict=True)
        except ValueError as exc:
            raise ConfigError(f"invalid subnet {self.subnet!r}: {exc}") from exc
        if not net.is_private or net.is_loopback or net.is_link_local:
            raise ConfigError(f"subnet {self.subnet} is not a private (RFC 1918) range")
        needed = _FIRST_HOST_OFFSET + len(all_names) + 1
        if net.num_addresses < needed:
            raise ConfigError(
                f"subnet {self.subnet} is too small for {len(all_names)} hosts (needs /"
                f"{32 - (needed - 1).bit_length()} or larger)"
            )
        endpoint = Host(self.endpoint_name, "endpoint", str(net[_FIRST_HOST_OFFSET]), net.prefixlen)
        edges = tuple(
            Host(n, "edge", str(net[_FIRST_HOST_OFFSET + 1 + i]), net.prefixlen)
            for i, n in enumerate(names)
        )
        object.__setattr__(self, "hosts", (*edges, endpoint))

    @property
    def edges(self) -> tuple[Host, ...]:
        return tuple(h for h in self.hosts if h.is_edge)

    @property
    def endpoint(self) -> Host:
        return self.hosts[-1]

    def host(self, name: str) -> Host:
        """The host called ``name``; raises ConfigError naming the known hosts otherwise."""
        for h in self.hosts:
            if h.name == name:
                return h
        known = ", ".join(h.name for h in self.hosts)
        raise ConfigError(f"unknown host {name!r} (hosts: {known})")

    def to_dict(self) -> dict:
        return {
            "edge_nodes": self.edge_nodes,
            "subnet": self.subnet,
            "edge_names": list(self.edge_names or ()),
            "endpoint_name": self.endpoint_name,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Topology:
        """The inverse of ``to_dict``; ConfigError for a dict of another shape."""
        keys = {"edge_nodes", "subnet", "edge_names", "endpoint_name"}
        if not isinstance(data, dict) or set(data) != keys:
            raise ConfigError(f"a topology has exactly the keys {sorted(keys)}, got {data!r}")
        if not isinstance(data["edge_names"], (list, tuple)):
            raise ConfigError(f"edge_names must be a list, got {data['edge_names']!r}")
        return cls(
            edge_nodes=data["edge_nodes"],
            subnet=data["subnet"],
            edge_names=tuple(data["edge_names"]),
            endpoint_name=data["endpoint_name"],
        )
