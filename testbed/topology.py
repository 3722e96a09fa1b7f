"""Declarative topology: which hosts exist and their addresses. Creates nothing.

A ``Topology`` is only names and addresses (like Mininet's ``Topo``); a backend builds it.
Its addresses come from one of three places: an explicit ``subnet`` (the endpoint .10,
edge node i .11+i), explicit per-host ``addresses`` (machines of the hosts backend keep
their own), or neither: then it is not *placed* yet and the Testbed gives it a free subnet
of the pool (``testbed.subnets``) when it builds it. Until then its hosts are numbered in
``PROVISIONAL_SUBNET`` so names and roles can be checked; nothing is built from those.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from .errors import ConfigError

MAX_EDGE_NODES = 9
PROVISIONAL_SUBNET = "10.77.0.0/24"
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
        subnet: private IPv4 network the hosts are numbered from (RFC 1918); None: a
            free one from the pool when the testbed is built.
        addresses: host name -> IPv4 address for every host (instead of a subnet).
        edge_names: optional names for the edge nodes (default e0..e{k-1}).
        endpoint_name: name of the client host (default ep).

    Raises ConfigError on construction when anything is invalid.
    """

    edge_nodes: int = 3
    subnet: str | None = None
    edge_names: tuple[str, ...] | None = None
    endpoint_name: str = "ep"
    addresses: Mapping[str, str] | None = None
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

        if self.addresses is not None:
            if self.subnet is not None:
                raise ConfigError("a topology has a subnet or per-host addresses, not both")
            addresses = _check_addresses(self.addresses, all_names)
            object.__setattr__(self, "addresses", addresses)
            edges = tuple(Host(n, "edge", addresses[n], 32) for n in names)
            endpoint = Host(self.endpoint_name, "endpoint", addresses[self.endpoint_name], 32)
            object.__setattr__(self, "hosts", (*edges, endpoint))
            return
        text = PROVISIONAL_SUBNET if self.subnet is None else self.subnet
        try:
            net = ipaddress.IPv4Network(text, strict=True)
        except ValueError as exc:
            raise ConfigError(f"invalid subnet {text!r}: {exc}") from exc
        if not net.is_private or net.is_loopback or net.is_link_local:
            raise ConfigError(f"subnet {text} is not a private (RFC 1918) range")
        needed = _FIRST_HOST_OFFSET + len(all_names) + 1
        if net.num_addresses < needed:
            raise ConfigError(
                f"subnet {text} is too small for {len(all_names)} hosts (needs /"
                f"{32 - (needed - 1).bit_length()} or larger)"
            )
        endpoint = Host(self.endpoint_name, "endpoint", str(net[_FIRST_HOST_OFFSET]), net.prefixlen)
        edges = tuple(
            Host(n, "edge", str(net[_FIRST_HOST_OFFSET + 1 + i]), net.prefixlen)
            for i, n in enumerate(names)
        )
        object.__setattr__(self, "hosts", (*edges, endpoint))

    @property
    def placed(self) -> bool:
        """Whether the addresses are the real ones (a subnet or per-host addresses)."""
        return self.subnet is not None or self.addresses is not None

    def on_subnet(self, subnet: str) -> Topology:
        """This topology numbered in ``subnet``."""
        return replace(self, subnet=subnet, addresses=None)

    def with_addresses(self, addresses: Mapping[str, str]) -> Topology:
        """This topology with every host at the address ``addresses`` gives it."""
        return replace(self, subnet=None, addresses=dict(addresses))

    def __hash__(self) -> int:
        return hash(
            (
                self.edge_nodes,
                self.subnet,
                self.edge_names,
                self.endpoint_name,
                tuple(sorted((self.addresses or {}).items())),
            )
        )

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
            "addresses": dict(self.addresses) if self.addresses is not None else None,
            "edge_names": list(self.edge_names or ()),
            "endpoint_name": self.endpoint_name,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Topology:
        """The inverse of ``to_dict`` (a state without ``addresses`` too); ConfigError
        for a dict of another shape."""
        keys = {"edge_nodes", "subnet", "edge_names", "endpoint_name"}
        if not isinstance(data, dict) or not keys <= set(data) <= keys | {"addresses"}:
            raise ConfigError(f"a topology has exactly the keys {sorted(keys)}, got {data!r}")
        if not isinstance(data["edge_names"], (list, tuple)):
            raise ConfigError(f"edge_names must be a list, got {data['edge_names']!r}")
        return cls(
            edge_nodes=data["edge_nodes"],
            subnet=data["subnet"],
            edge_names=tuple(data["edge_names"]),
            endpoint_name=data["endpoint_name"],
            addresses=data.get("addresses"),
        )


def _check_addresses(addresses: object, names: tuple[str, ...]) -> dict[str, str]:
    """Every host's IPv4 address, distinct; ConfigError naming what is wrong."""
    if not isinstance(addresses, Mapping):
        raise ConfigError(f"addresses must map host names to IPv4 addresses, got {addresses!r}")
    missing = [n for n in names if n not in addresses]
    extra = sorted(set(addresses) - set(names))
    if missing or extra:
        raise ConfigError(
            "addresses must name exactly the hosts "
            f"({', '.join(names)}); missing {missing or 'none'}, unknown {extra or 'none'}"
        )
    out: dict[str, str] = {}
    for name in names:
        try:
            out[name] = str(ipaddress.IPv4Address(str(addresses[name])))
        except ValueError:
            raise ConfigError(f"{name}: {addresses[name]!r} is not an IPv4 address") from None
    seen: dict[str, str] = {}
    for name, addr in out.items():
        if addr in seen:
            raise ConfigError(f"{seen[addr]} and {name} have the same address {addr}")
        seen[addr] = name
    return out
