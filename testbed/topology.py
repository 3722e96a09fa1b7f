"""Declarative topology: which hosts exist and their addresses. Creates nothing.

A ``Topology`` is only names and addresses (like Mininet's ``Topo``); a backend builds it.
Its addresses come from one of three places: an explicit ``subnet`` (the endpoint .10,
edge node i .11+i), explicit per-host ``addresses`` (machines of the hosts backend keep
their own), or neither: then it is not *placed* yet and the Testbed gives it a free subnet
of the pool (``testbed.subnets``) when it builds it. Until then its hosts are numbered in
``PROVISIONAL_SUBNET`` so names and roles can be checked; nothing is built from those.

An edge deployment of several *sites* (``sites=(3, 3, 3)``: three sites of three nodes)
makes each site a Cassandra datacenter of one rack; the edge nodes are numbered site by
site (e0..e2 in the first), and the endpoint is attached to one named site (its LAN).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from common.errors import ConfigError
from common.inputs import shown

MAX_EDGE_NODES = 9
DEFAULT_RACK = "rack1"
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
    site: str | None = None  # its datacenter, in a topology of sites

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
        sites: nodes per site, summing to ``edge_nodes`` (None: one site, as Cassandra's
            SimpleSnitch sees a cluster); each site is a datacenter.
        site_names: the sites' (datacenters') names (default dc1, dc2, ...).
        endpoint_site: the site whose LAN the endpoint is on (default the first).

    Raises ConfigError on construction when anything is invalid.
    """

    edge_nodes: int = 3
    subnet: str | None = None
    edge_names: tuple[str, ...] | None = None
    endpoint_name: str = "ep"
    addresses: Mapping[str, str] | None = None
    sites: tuple[int, ...] | None = None
    site_names: tuple[str, ...] | None = None
    endpoint_site: str | None = None
    hosts: tuple[Host, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = self._checked_names()
        site_of = self._place_sites(names)
        if self.addresses is not None:
            if self.subnet is not None:
                raise ConfigError("a topology has a subnet or per-host addresses, not both")
            addresses = _check_addresses(self.addresses, (*names, self.endpoint_name))
            object.__setattr__(self, "addresses", addresses)
            place = {n: (addresses[n], 32) for n in (*names, self.endpoint_name)}
        else:
            place = self._places_in_subnet(names)
        edges = tuple(Host(n, "edge", *place[n], site_of.get(n)) for n in names)
        ep = self.endpoint_name
        object.__setattr__(
            self, "hosts", (*edges, Host(ep, "endpoint", *place[ep], site_of.get(ep)))
        )

    def _checked_names(self) -> tuple[str, ...]:
        """The edge nodes' names (e0, e1, ... unless given), every host name checked."""
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
        return names

    def _places_in_subnet(self, names: tuple[str, ...]) -> dict[str, tuple[str, int]]:
        """Each host's address and prefix in the subnet (the endpoint first, then the
        edge nodes in order; a provisional one until ``up`` takes a free /24)."""
        text = PROVISIONAL_SUBNET if self.subnet is None else self.subnet
        try:
            net = ipaddress.IPv4Network(text, strict=True)
        except ValueError as exc:
            raise ConfigError(f"invalid subnet {text!r}: {exc}") from exc
        if not net.is_private or net.is_loopback or net.is_link_local:
            raise ConfigError(f"subnet {text} is not a private (RFC 1918) range")
        count = len(names) + 1
        needed = _FIRST_HOST_OFFSET + count + 1
        if net.num_addresses < needed:
            raise ConfigError(
                f"subnet {text} is too small for {count} hosts (needs /"
                f"{32 - (needed - 1).bit_length()} or larger)"
            )
        place = {self.endpoint_name: (str(net[_FIRST_HOST_OFFSET]), net.prefixlen)}
        for i, n in enumerate(names):
            place[n] = (str(net[_FIRST_HOST_OFFSET + 1 + i]), net.prefixlen)
        return place

    def _place_sites(self, names: tuple[str, ...]) -> dict[str, str]:
        """Host name -> site name (empty without sites); checks and normalizes the three
        site fields."""
        if self.sites is None:
            if self.site_names is not None or self.endpoint_site is not None:
                raise ConfigError("site_names and endpoint_site need sites")
            return {}
        sizes = tuple(self.sites)
        if not sizes or any(isinstance(n, bool) or not isinstance(n, int) for n in sizes):
            raise ConfigError(f"sites must be node counts per site, got {self.sites!r}")
        if any(n < 1 for n in sizes):
            raise ConfigError(f"every site needs at least one node, got {format_sites(sizes)}")
        if sum(sizes) != self.edge_nodes:
            raise ConfigError(
                f"sites {format_sites(sizes)} hold {sum(sizes)} nodes, not {self.edge_nodes}"
            )
        site_names = self.site_names
        if site_names is None:
            site_names = tuple(f"dc{i + 1}" for i in range(len(sizes)))
        site_names = tuple(site_names)
        if len(site_names) != len(sizes):
            raise ConfigError(f"{len(site_names)} site names for {len(sizes)} sites")
        for name in site_names:
            if not isinstance(name, str) or not _NAME_RE.match(name):
                raise ConfigError(
                    f"invalid site name {name!r}: use 1-12 lowercase letters/digits "
                    f"starting with a letter"
                )
        if len(set(site_names)) != len(site_names):
            raise ConfigError(f"duplicate site names: {', '.join(site_names)}")
        endpoint_site = self.endpoint_site if self.endpoint_site is not None else site_names[0]
        if endpoint_site not in site_names:
            raise ConfigError(
                f"the endpoint's site {endpoint_site!r} is not a site "
                f"(sites: {', '.join(site_names)})"
            )
        object.__setattr__(self, "sites", sizes)
        object.__setattr__(self, "site_names", site_names)
        object.__setattr__(self, "endpoint_site", endpoint_site)
        out: dict[str, str] = {}
        it = iter(names)
        for size, site in zip(sizes, site_names, strict=True):
            for _ in range(size):
                out[next(it)] = site
        out[self.endpoint_name] = endpoint_site
        return out

    def per_site(self, count: int) -> dict[str, int]:
        """``count`` for each site (a keyspace's replicas per datacenter)."""
        return {site: count for site in self.site_names or ()}

    def site_nodes(self, site: str) -> tuple[Host, ...]:
        """The edge nodes of ``site`` (ConfigError naming the sites for another name)."""
        if site not in (self.site_names or ()):
            raise ConfigError(f"unknown site {site!r} (sites: {', '.join(self.site_names or ())})")
        return tuple(h for h in self.edges if h.site == site)

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
                self.sites,
                self.site_names,
                self.endpoint_site,
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
        out: dict[str, object] = {
            "edge_nodes": self.edge_nodes,
            "subnet": self.subnet,
            "addresses": dict(self.addresses) if self.addresses is not None else None,
            "edge_names": list(self.edge_names or ()),
            "endpoint_name": self.endpoint_name,
        }
        if self.sites is not None:  # a one-site topology keeps the shape states had
            out["sites"] = {
                "sizes": list(self.sites),
                "names": list(self.site_names or ()),
                "endpoint": self.endpoint_site,
            }
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Topology:
        """The inverse of ``to_dict`` (a state without ``addresses`` too); ConfigError
        for a dict of another shape."""
        keys = {"edge_nodes", "subnet", "edge_names", "endpoint_name"}
        if not isinstance(data, dict) or not keys <= set(data) <= keys | {"addresses", "sites"}:
            raise ConfigError(f"a topology has exactly the keys {sorted(keys)}, got {data!r}")
        if not isinstance(data["edge_names"], (list, tuple)):
            raise ConfigError(f"edge_names must be a list, got {data['edge_names']!r}")
        sites = data.get("sites")
        if sites is not None and (
            not isinstance(sites, dict) or set(sites) != {"sizes", "names", "endpoint"}
        ):
            raise ConfigError(f"sites has the keys endpoint, names and sizes, got {sites!r}")
        return cls(
            sites=tuple(sites["sizes"]) if sites else None,
            site_names=tuple(sites["names"]) if sites else None,
            endpoint_site=sites["endpoint"] if sites else None,
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


_SITES_RE = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*$")


def parse_sites(text: str) -> tuple[int, ...]:
    """``"3x3"`` (three sites of three nodes) or ``"2,3"`` (a site of 2, one of 3) as node
    counts per site; ConfigError naming the forms for anything else."""
    if len(str(text)) > 64:  # far above 9 nodes written any way
        raise ConfigError(f"sites {shown(text)}: give SITESxNODES (e.g. 3x3) or nodes per site")
    match = _SITES_RE.match(str(text))
    if match and int(match.group(1)) < 1:
        raise ConfigError(f"sites {text!r}: a topology of sites has at least one site")
    if match and int(match.group(1)) > MAX_EDGE_NODES:  # before a tuple of that length
        raise ConfigError(f"sites {text!r}: a testbed has at most {MAX_EDGE_NODES} nodes")
    try:
        if match:
            sizes = (int(match.group(2)),) * int(match.group(1))
        else:
            sizes = tuple(int(part) for part in str(text).split(","))
    except ValueError:
        sizes = ()
    if not sizes:
        raise ConfigError(
            f"sites {text!r}: give SITESxNODES (e.g. 3x3) or nodes per site (e.g. 2,3)"
        )
    if any(n < 1 for n in sizes):
        raise ConfigError(f"every site needs at least one node, got {text!r}")
    if sum(sizes) > MAX_EDGE_NODES:
        raise ConfigError(
            f"sites {text!r} hold {sum(sizes)} nodes; a testbed has at most {MAX_EDGE_NODES}"
        )
    return sizes


def sites_topology(text: str) -> Topology:
    """The topology of ``text`` (``3x3``, ``2,3``: see ``parse_sites``), unplaced."""
    sizes = parse_sites(text)
    return Topology(edge_nodes=sum(sizes), sites=sizes)


def format_sites(sizes: tuple[int, ...]) -> str:
    """The short form of node counts per site: 3x3 when equal, else 2,3."""
    if len(sizes) > 1 and len(set(sizes)) == 1:
        return f"{len(sizes)}x{sizes[0]}"
    return ",".join(map(str, sizes))
