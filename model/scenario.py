"""One cell as the model sees it: the service time (``Service``), the links, RF, level,
policy and timeouts (``Scenario``: placements, what a write waits for), and the network
part of a write computed exactly (``network``; pure, see ``model.rtt``)."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from common.errors import ConfigError
from emulation.links import Link, LinkMatrix

from .consistency import ack_rules, check_level, required_acks
from .tcp import Discrete, Tcp, kth_smallest, maximum, retransmission_delay

WRITE_TIMEOUT_MS = 2000.0  # Cassandra's write_request_timeout: the coordinator stops waiting
CLIENT_TIMEOUT_MS = 12_000.0  # the driver's request timeout (the sweep's --timeout default)
POLICIES = ("round-robin", "token-aware")


@dataclass(frozen=True)
class Service:
    """The service time S (ms): samples of writes that waited for a remote ack, and of
    writes that did not; either may be empty (then the other stands for it)."""

    remote: np.ndarray
    local: np.ndarray
    source: str

    @staticmethod
    def constant(ms: float, source: str = "") -> Service:
        a = np.array([float(ms)])
        return Service(a, a, source or f"a constant {ms:g} ms")

    def samples(self, needs_remote: bool) -> np.ndarray:
        a, b = (self.remote, self.local) if needs_remote else (self.local, self.remote)
        return a if a.size else b


@dataclass(frozen=True)
class Scenario:
    """Everything the prediction of one cell depends on. On a topology of sites (each a
    Cassandra datacenter, NetworkTopologyStrategy): ``rf`` replicas in each site, the
    coordinators in the endpoint's site (the driver's DC-aware policy), and a write
    acknowledged by the rules of ``model.consistency.ack_rules``."""

    matrix: LinkMatrix
    rf: int
    cl: str = "LOCAL_QUORUM"
    policy: str = "round-robin"
    tcp: Tcp = field(default_factory=Tcp)
    write_timeout_ms: float = WRITE_TIMEOUT_MS
    client_timeout_ms: float = CLIENT_TIMEOUT_MS
    # what a write waits for: (the nodes whose acks count, how many), every rule at once
    rules: tuple[tuple[frozenset[str], int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        topo = self.matrix.topology
        n = min(topo.sites) if topo.sites else len(topo.edges)
        if not 1 <= self.rf <= n:
            where = "in the smallest site" if topo.sites else "edge nodes"
            raise ConfigError(f"RF {self.rf} needs 1..{n} {where}")
        object.__setattr__(self, "cl", check_level(self.cl))
        if self.policy not in POLICIES:
            raise ConfigError(f"unknown policy {self.policy!r} (choose from {', '.join(POLICIES)})")
        object.__setattr__(self, "rules", self._rules())
        if not topo.sites and self.acks > self.rf:
            raise ConfigError(f"{self.cl} needs {self.acks} acks; RF {self.rf} has {self.rf}")
        if not 0 < self.write_timeout_ms <= self.client_timeout_ms:
            raise ConfigError(
                f"timeouts: need 0 < write {self.write_timeout_ms:g} ms <= "
                f"client {self.client_timeout_ms:g} ms"
            )

    @property
    def acks(self) -> int:
        """The acks a write waits for in all."""
        return sum(k for _, k in self.rules)

    def _rules(self) -> tuple[tuple[frozenset[str], int], ...]:
        """What a write waits for: (the nodes whose acks count, how many), all at once."""
        topo = self.matrix.topology
        if not topo.sites:
            return ((frozenset(self.edges), required_acks(self.cl, self.rf)),)
        rules = ack_rules(self.cl, topo.per_site(self.rf), str(topo.endpoint_site))
        return tuple(
            (frozenset(h.name for h in (topo.site_nodes(s) if s else topo.edges)), k)
            for s, k in rules
        )

    @property
    def edges(self) -> list[str]:
        return [h.name for h in self.matrix.topology.edges]

    @property
    def coordinators(self) -> list[str]:
        """The nodes the client sends writes to: the endpoint's site's (sites), else all."""
        topo = self.matrix.topology
        if topo.sites:
            return [h.name for h in topo.site_nodes(str(topo.endpoint_site))]
        return self.edges

    def waits(self, c: str, replicas: Sequence[str]) -> list[tuple[tuple[str, ...], int]]:
        """Per rule: the replicas other than ``c`` whose acks count, and how many of them
        the write waits for (its coordinator's own write counts where it is one)."""
        out = []
        for members, k in self.rules:
            counted = [r for r in replicas if r in members]
            out.append((tuple(r for r in counted if r != c), k - (c in counted)))
        return out

    def needs_remote(self, coordinator_is_replica: bool) -> bool:
        """Whether a write waits for an ack from another node than its coordinator."""
        return any(
            k - (coordinator_is_replica and bool(set(self.coordinators) & members)) > 0
            for members, k in self.rules
        )

    @property
    def replica_coordinator_share(self) -> float:
        """The share of writes whose coordinator is one of the key's replicas."""
        return 1.0 if self.policy == "token-aware" else self.rf / len(self.coordinators)

    @property
    def endpoint(self) -> str:
        return self.matrix.topology.endpoint.name

    def link(self, src: str, dst: str) -> Link:
        return self.matrix.link(src, dst)

    def rto_ms(self, a: str, b: str) -> float:
        """The RTO of the connection a -> b (see ``rto_ms``)."""
        return rto_ms(self.tcp, self.link(a, b), self.link(b, a))

    @property
    def internode_loss(self) -> bool:
        return any(
            link.loss_pct and self.endpoint not in (a, b) for a, b, link in self.matrix.shaped()
        )

    @property
    def jittered(self) -> bool:
        return any(link.jitter_ms for _, _, link in self.matrix.shaped())

    def pools(self) -> list[list[str]]:
        """The groups of nodes each holding ``rf`` replicas of a key: every site, else
        all nodes."""
        topo = self.matrix.topology
        if topo.sites:
            return [[h.name for h in topo.site_nodes(s)] for s in topo.site_names or ()]
        return [self.edges]

    def placements(self) -> list[tuple[float, str, tuple[str, ...]]]:
        """(probability, coordinator, replicas) of every placement."""
        local = self.coordinators
        sets = [
            tuple(r for part in choice for r in part)
            for choice in itertools.product(
                *(itertools.combinations(pool, self.rf) for pool in self.pools())
            )
        ]
        out = []
        for replicas in sets:
            coordinators = (
                [r for r in replicas if r in local] if self.policy == "token-aware" else local
            )
            for c in coordinators:
                out.append((1 / len(sets) / len(coordinators), c, replicas))
        return out

    def placement_count(self) -> int:
        sets = math.prod(math.comb(len(pool), self.rf) for pool in self.pools())
        return sets * (self.rf if self.policy == "token-aware" else len(self.coordinators))


def rto_ms(tcp: Tcp, there: Link, back: Link) -> float:
    """The RTO of a connection whose segments go ``there`` and whose ACKs come ``back``.

    srtt: the configured round trip. Cassandra's internode connections are one-way (the
    answer comes on another connection), but each sees a message far less often than
    once per RTO here, and Linux acknowledges at once after such a gap (quickack:
    tcp_event_data_recv), so no delayed ACK enters srtt. mdev: the mean absolute
    deviation of the round trip under the jitter (netem: normal)."""
    sigma = math.hypot(there.jitter_ms, back.jitter_ms)
    return tcp.rto_ms(there.delay_ms + back.delay_ms, sigma * math.sqrt(2 / math.pi))


def round_trip(tcp: Tcp, there: Link, back: Link) -> Discrete:
    """A message there and its answer back, each resent on its connection's RTO when lost."""
    rto = rto_ms(tcp, there, back)
    trip = Discrete.point(there.delay_ms + back.delay_ms)
    trip = trip + retransmission_delay(there.loss_pct / 100, rto, tcp)
    return trip + retransmission_delay(back.loss_pct / 100, rto, tcp)


def _pair_key(pair: tuple[Link, Link]) -> tuple[float, ...]:
    return tuple(
        v
        for link in pair
        for v in (link.delay_ms, link.jitter_ms, link.loss_pct, link.rate_mbit or 0)
    )


def network(s: Scenario) -> list[tuple[float, bool, Discrete, float]]:
    """The network part of a write per class of placements: (probability, whether it
    waits for a remote ack, its distribution, its value without loss). Exact; no jitter."""
    groups: dict[tuple, float] = defaultdict(float)
    for weight, c, replicas in s.placements():
        waits = tuple(
            (tuple(sorted(((s.link(c, r), s.link(r, c)) for r in others), key=_pair_key)), k)
            for others, k in s.waits(c, replicas)
        )
        client = (s.link(s.endpoint, c), s.link(c, s.endpoint))
        groups[(client, waits)] += weight
    out = []
    for (client, waits), weight in groups.items():  # each class once
        acked = maximum(
            [kth_smallest([round_trip(s.tcp, *pair) for pair in remote], k) for remote, k in waits]
        ).clip(s.write_timeout_ms)
        dist = (round_trip(s.tcp, *client) + acked).clip(s.client_timeout_ms)
        no_loss = (
            client[0].delay_ms
            + client[1].delay_ms
            + max(
                sorted(t.delay_ms + b.delay_ms for t, b in remote)[k - 1] if k > 0 else 0.0
                for remote, k in waits
            )
        )
        out.append((weight, any(k > 0 for _, k in waits), dist, no_loss))
    return out


def no_loss_max_ms(s: Scenario) -> float:
    """The slowest placement's network time without loss (configured delays only), the
    wait for acks at most the write timeout."""
    worst = 0.0
    for _, c, replicas in s.placements():
        client = s.link(s.endpoint, c).delay_ms + s.link(c, s.endpoint).delay_ms
        remote = max(
            sorted(s.link(c, r).delay_ms + s.link(r, c).delay_ms for r in others)[k - 1]
            if k > 0
            else 0.0
            for others, k in s.waits(c, replicas)
        )
        worst = max(worst, client + min(remote, s.write_timeout_ms))
    return worst


def expected_fixed_ms(s: Scenario, needs_remote: bool) -> float:
    """The mean configured delay (no loss) of the writes that do (not) wait for a remote
    ack: what a baseline request spent on the network besides its service time."""
    total = weight = every = 0.0
    for w, remote, _dist, no_loss in network(s):
        every += w * no_loss
        if remote == needs_remote:
            total += w * no_loss
            weight += w
    return total / weight if weight else every  # no such write here: all writes' mean
