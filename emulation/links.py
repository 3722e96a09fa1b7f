"""Declarative link model: a directed matrix of link properties over a topology's hosts.

Creates nothing; a shaper applies it. Profiles build a matrix from a few numbers:

- ``uniform``: every ordered pair (endpoint links included) gets delay L and loss p, so the
  RTT between any two hosts is 2L.
- ``paper``: what the seed paper's scripts did: every edge node shapes its egress toward
  every other edge node with (L, p) and toward the endpoint with a fixed 10 ms, no loss;
  the endpoint's own egress is not shaped.
- ``sites``: an edge deployment of several sites (a topology with sites): hosts of one
  site talk over its LAN (``LAN_DELAY_MS`` each way, no loss), hosts of different sites
  over the WAN (delay L, jitter, loss p, each way); the endpoint is on its site's LAN.
- ``file``: a matrix read from a TOML file (see ``from_toml``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from common import inputs
from common.errors import ConfigError
from common.files import read_text
from testbed.topology import MAX_EDGE_NODES, Topology

MAX_DELAY_MS = 10_000.0
PAPER_ENDPOINT_DELAY_MS = 10.0
LAN_DELAY_MS = 0.25  # one way: a round trip of 0.5 ms inside a site
PROFILES = ("uniform", "paper", "sites", "file")


def _number(name: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    if not low <= value <= high:
        raise ConfigError(f"{name} must be between {low:g} and {high:g}, got {value:g}")
    return float(value)


@dataclass(frozen=True)
class Link:
    """Properties of one direction src -> dst. Validated on construction."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0
    rate_mbit: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "delay_ms", _number("delay_ms", self.delay_ms, 0, MAX_DELAY_MS))
        object.__setattr__(self, "jitter_ms", _number("jitter_ms", self.jitter_ms, 0, MAX_DELAY_MS))
        object.__setattr__(self, "loss_pct", _number("loss_pct", self.loss_pct, 0, 100))
        if self.jitter_ms > self.delay_ms:
            raise ConfigError(
                f"jitter_ms ({self.jitter_ms:g}) cannot exceed delay_ms ({self.delay_ms:g})"
            )
        if self.rate_mbit is not None:
            object.__setattr__(
                self, "rate_mbit", _number("rate_mbit", self.rate_mbit, 0.001, 100_000)
            )

    @property
    def shaped(self) -> bool:
        """Whether anything needs to be applied for this direction."""
        return bool(self.delay_ms or self.jitter_ms or self.loss_pct or self.rate_mbit)


UNSHAPED = Link()


@dataclass(frozen=True)
class LinkMatrix:
    """Link properties for ordered host pairs; pairs not listed are unshaped.

    Raises ConfigError for an unknown host or a self-link.
    """

    topology: Topology
    links: Mapping[tuple[str, str], Link] = field(default_factory=dict)
    profile: str = "file"

    def __post_init__(self) -> None:
        names = {h.name for h in self.topology.hosts}
        for (src, dst), link in self.links.items():
            for host in (src, dst):
                if host not in names:
                    raise ConfigError(
                        f"link {src} -> {dst}: unknown host {host!r} "
                        f"(hosts: {', '.join(h.name for h in self.topology.hosts)})"
                    )
            if src == dst:
                raise ConfigError(f"link {src} -> {dst}: a host has no link to itself")
            if not isinstance(link, Link):
                raise ConfigError(f"link {src} -> {dst}: expected a Link, got {link!r}")
        object.__setattr__(self, "links", dict(self.links))

    def link(self, src: str, dst: str) -> Link:
        return self.links.get((src, dst), UNSHAPED)

    def shaped(self) -> Iterator[tuple[str, str, Link]]:
        """Every ordered pair that needs shaping, in topology order."""
        for s in self.topology.hosts:
            for d in self.topology.hosts:
                link = self.links.get((s.name, d.name))
                if link is not None and link.shaped:
                    yield s.name, d.name, link

    def rtt_ms(self, a: str, b: str) -> float:
        """Configured round-trip delay between two hosts (sum of both directions)."""
        return self.link(a, b).delay_ms + self.link(b, a).delay_ms

    def round_trip_loss_pct(self, a: str, b: str) -> float:
        """Probability (%) that a request a -> b or its reply b -> a is lost."""
        ok = (1 - self.link(a, b).loss_pct / 100) * (1 - self.link(b, a).loss_pct / 100)
        return 100 * (1 - ok)

    def to_dict(self) -> dict:
        return {
            "profile": self.profile,
            "links": [
                {
                    "src": s,
                    "dst": d,
                    "delay_ms": l.delay_ms,
                    "jitter_ms": l.jitter_ms,
                    "loss_pct": l.loss_pct,
                    "rate_mbit": l.rate_mbit,
                }
                for s, d, l in self.shaped()
            ],
        }


def uniform(
    topology: Topology, delay_ms: float, loss_pct: float, jitter_ms: float = 0.0
) -> LinkMatrix:
    link = Link(delay_ms, jitter_ms, loss_pct)
    names = [h.name for h in topology.hosts]
    return LinkMatrix(
        topology, {(s, d): link for s in names for d in names if s != d}, profile="uniform"
    )


def paper(
    topology: Topology, delay_ms: float, loss_pct: float, jitter_ms: float = 0.0
) -> LinkMatrix:
    edge_link = Link(delay_ms, jitter_ms, loss_pct)
    to_endpoint = Link(PAPER_ENDPOINT_DELAY_MS)
    links: dict[tuple[str, str], Link] = {}
    ep = topology.endpoint.name
    for s in topology.edges:
        for d in topology.edges:
            if s != d:
                links[(s.name, d.name)] = edge_link
        links[(s.name, ep)] = to_endpoint
    return LinkMatrix(topology, links, profile="paper")


def sites(
    topology: Topology,
    delay_ms: float,
    loss_pct: float,
    jitter_ms: float = 0.0,
    lan_delay_ms: float = LAN_DELAY_MS,
) -> LinkMatrix:
    """Every pair of hosts on one site's LAN (``lan_delay_ms`` each way) or across the WAN
    between sites (``delay_ms``, ``jitter_ms``, ``loss_pct`` each way)."""
    if topology.sites is None:
        raise ConfigError(
            "profile 'sites' needs a topology of sites (a testbed made with "
            "`edgetb up --sites 3x3`)"
        )
    lan, wan = Link(lan_delay_ms), Link(delay_ms, jitter_ms, loss_pct)
    links = {
        (s.name, d.name): lan if s.site == d.site else wan
        for s in topology.hosts
        for d in topology.hosts
        if s != d
    }
    return LinkMatrix(topology, links, profile="sites")


def read_toml(path: Path | str, what: str) -> dict:
    """A TOML file's contents; ConfigError naming ``what`` and the path when it is missing,
    not a regular file, unreadable, not UTF-8 text or not valid TOML."""
    return inputs.toml(read_text(path, what), f"{what} {path}")


LINK_FIELDS = ("delay_ms", "jitter_ms", "loss_pct", "rate_mbit")


def _link_fields(path: Path | str, entry: object, where: str) -> dict:
    """The link fields of a table of a link file (ConfigError on anything else)."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{path}: {where} must be a table, got {entry!r}")
    extra = set(entry) - set(LINK_FIELDS) - {"src", "dst"}
    if extra:
        raise ConfigError(
            f"{path}: {where}: unknown keys {sorted(extra)} "
            f"(allowed: src, dst, {', '.join(LINK_FIELDS)})"
        )
    return {k: entry[k] for k in LINK_FIELDS if k in entry}


def _make_link(path: Path | str, fields: dict, where: str) -> Link:
    try:
        return Link(**fields)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {where}: {exc}") from None


def _apply_entries(
    path: Path | str,
    entries: object,
    names: list[str],
    members: dict[str, list[str]],
    links: dict[tuple[str, str], Link],
) -> None:
    """A link file's ``[[link]]`` entries onto ``links``, in order (later ones win)."""
    if not isinstance(entries, list):
        raise ConfigError(
            f"{path}: link must be an array of tables ([[link]] entries), got {entries!r}"
        )
    for i, entry in enumerate(entries):
        where = f"[[link]] #{i + 1}"
        given = _link_fields(path, entry, where)
        if "src" not in entry or "dst" not in entry:
            raise ConfigError(f"{path}: {where}: needs src and dst")
        ends = {"*": names, **{s: hs for s, hs in members.items() if s not in names}}
        srcs = ends.get(entry["src"], [entry["src"]])
        dsts = ends.get(entry["dst"], [entry["dst"]])
        for name in (*srcs, *dsts):
            if name not in names:
                sites = f", a site ({', '.join(members)})" if members else ""
                raise ConfigError(
                    f"{path}: {where}: unknown host {name!r} (hosts: {', '.join(names)}"
                    f"{sites}, or *)"
                )
        if entry["src"] == entry["dst"] and entry["src"] in names:  # never leaves the host
            raise ConfigError(
                f"{path}: {where}: src and dst are both {entry['src']!r}: a link joins two "
                f"hosts (a host's traffic to itself is not shaped)"
            )
        for s in srcs:
            for d in dsts:
                if s != d:
                    current = links.get((s, d), UNSHAPED)
                    links[(s, d)] = _make_link(path, {**current.__dict__, **given}, where)


def from_toml(topology: Topology, path: Path | str) -> LinkMatrix:
    """A matrix from TOML: optional ``[default]`` for every pair; on a topology of sites
    optional ``[lan]`` for every pair inside a site and ``[wan]`` for every pair between
    two; then ``[[link]]`` tables with ``src``, ``dst`` and any of delay_ms, jitter_ms,
    loss_pct, rate_mbit (``src`` or ``dst`` may be ``"*"``, or a site: all its hosts).
    Later entries win. Raises ConfigError naming the file, the entry and the problem."""
    data = read_toml(path, "link file")
    unknown = set(data) - {"default", "lan", "wan", "link"}
    if unknown:
        raise ConfigError(
            f"{path}: unknown tables {sorted(unknown)} (use [default], [lan], [wan], [[link]])"
        )
    if topology.sites is None and ({"lan", "wan"} & set(data)):
        raise ConfigError(
            f"{path}: [lan] and [wan] need a topology of sites (edgetb up --sites 3x3)"
        )
    names = [h.name for h in topology.hosts]
    site_of = {h.name: h.site for h in topology.hosts}
    members = {s: [h for h in names if site_of[h] == s] for s in topology.site_names or ()}
    links: dict[tuple[str, str], Link] = {}

    if "default" in data:
        link = _make_link(path, _link_fields(path, data["default"], "[default]"), "[default]")
        links = {(s, d): link for s in names for d in names if s != d}
    for table, inside in (("lan", True), ("wan", False)):
        if table in data:
            link = _make_link(path, _link_fields(path, data[table], f"[{table}]"), f"[{table}]")
            for s in names:
                for d in names:
                    if s != d and (site_of[s] == site_of[d]) == inside:
                        links[(s, d)] = link
    _apply_entries(path, data.get("link", []), names, members, links)
    return LinkMatrix(topology, links, profile="file")


def check_file(path: Path | str) -> None:
    """Check a link file's shape and values without a testbed (ConfigError naming the
    file and the entry); host names are checked against the largest topology here and
    against the testbed's own when it is applied."""
    # the largest topology's hosts, as sites dc1..dc9 of one node each: every host and
    # site a file may name, and [lan] and [wan], are then checked
    from_toml(Topology(edge_nodes=MAX_EDGE_NODES, sites=(1,) * MAX_EDGE_NODES), path)


def build(
    profile: str,
    topology: Topology,
    *,
    delay_ms: float = 0.0,
    loss_pct: float = 0.0,
    jitter_ms: float = 0.0,
    path: Path | str | None = None,
) -> LinkMatrix:
    """The matrix of ``profile`` (uniform, paper, sites, file); ConfigError for anything
    invalid."""
    if profile == "uniform":
        return uniform(topology, delay_ms, loss_pct, jitter_ms)
    if profile == "sites":
        return sites(topology, delay_ms, loss_pct, jitter_ms)
    if profile == "paper":
        return paper(topology, delay_ms, loss_pct, jitter_ms)
    if profile == "file":
        if path is None:
            raise ConfigError("profile 'file' needs a path to a TOML link file")
        return from_toml(topology, path)
    raise ConfigError(f"unknown profile {profile!r} (choose from {', '.join(PROFILES)})")
