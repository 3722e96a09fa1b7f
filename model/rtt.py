"""Predict the RTT of a Cassandra write in milliseconds, cell by cell (pure).

A write goes from the endpoint to a coordinator c (round robin: every edge node in turn;
token-aware: one of the key's replicas). c writes locally when it is a replica, sends the
mutation to every other replica and answers the client once A replicas have acknowledged
(A: the level's required acks, e.g. LOCAL_QUORUM: RF//2 + 1). So, for one write,

    RTT = S + (ep -> c -> ep) + the k-th fastest remote round trip c -> r -> c,
    k = A - 1 when c is a replica, else A        (k = 0: no remote wait)

Assumptions (each one a way for the model to be wrong; ``explain`` names the one a
measurement contradicts):

- **Service time S** does not depend on the network: it is the run's 0 ms cell of the
  same nodes, RF, level, policy and profile, with each request's configured fixed delay
  subtracted and the requests a retransmission slowed removed (every TCP recovery costs at
  least ``rto_min``; a request above median + rto_min/2 is one), kept apart for writes that
  waited for a remote ack and writes that did not. Without a 0 ms cell: the run's
  unshaped RF 1 baseline (its mean, a constant), or ``--baseline-ms``.
- **Placement**: keys are uniform, so the replica set is a uniform RF-subset of the edge
  nodes; round-robin coordinators are uniform and independent of the key.
- **Messages**: every message is one TCP segment on a connection of its own direction
  (Cassandra 4 answers on the replica's outbound connection; the driver's request and
  response share one), lost independently with its link's loss.
- **Recovery**: a lost segment is resent by the retransmission timer, the first time
  RTO = srtt + max(4·mdev, rto_min) after it was sent, then after 2·RTO, 4·RTO, ...
  (Linux; linear for the first 6 with ``tcp_thin_linear_timeouts``), with srtt the path's
  configured round trip and mdev its jitter's mean deviation. A tail-loss probe fires at
  min(2·srtt + rto_min, RTO) with one segment in flight, so it changes nothing here. Where
  the loss is applied does not matter: netem returns success for a random drop
  (net/sched/sch_netem.c), so TCP learns of it only by its timer, at the sender's egress
  (direct shaper) as in the gateway.
- **Delays** are the configured ones (netem's jitter: normal, truncated at 0).
- **Timeouts**: a link that loses every packet (a partition) delivers nothing; the
  coordinator answers WriteTimeout ``write_timeout_ms`` after the request reached it
  when too few acks came, and the client gives up ``client_timeout_ms`` after sending.
  A request that errs so counts with the time it took, as the sweep records it.

Without jitter the distribution is computed exactly: every link is a discrete
distribution (its delay plus 0, RTO, 3·RTO, ... with geometric probabilities), the k-th
order statistic of independent discrete round trips is exact (a Poisson-binomial tail),
placements are enumerated, and S enters as its empirical distribution, so mean and
quantiles are exact for the model. With jitter, Monte Carlo over the same model.

    python -m analysis.model RESULTS_DIR [--json]     predicted vs measured, per cell
    python -m analysis.model predict --nodes 5 --rf 1..5 --latency 0..100..10 --loss 7.5
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from common.errors import ConfigError
from emulation import links
from emulation.links import Link, LinkMatrix
from testbed.topology import Topology, parse_sites

from .consistency import ack_rules, check_level, required_acks

RTO_MIN_MS = 200.0  # Linux TCP_RTO_MIN, unless net.ipv4.tcp_rto_min_us says otherwise
RTO_MAX_MS = 120_000.0  # Linux TCP_RTO_MAX
THIN_LINEAR_RETRIES = 6  # TCP_THIN_LINEAR_RETRIES
TCP_RETRIES2 = 15  # net.ipv4.tcp_retries2: Linux gives a connection up after this many resends
WRITE_TIMEOUT_MS = 2000.0  # Cassandra's write_request_timeout: the coordinator stops waiting
CLIENT_TIMEOUT_MS = 12_000.0  # the driver's request timeout (the sweep's --timeout default)
POLICIES = ("round-robin", "token-aware")
SIM_WRITES = 50  # sequential writes per simulated client (the first SIM_WARMUP unrecorded)
SIM_WARMUP = 10
SIM_CHAINS = 300
MAX_EXACT_PLACEMENTS = 20_000
TAIL_PROB = 1e-12  # retransmission chains less likely than this are lumped together
PROC_TCP = Path("/proc/sys/net/ipv4")


# -- the host's TCP -------------------------------------------------------------------------


@dataclass(frozen=True)
class Tcp:
    """What the model takes from the host's TCP (``from_proc``)."""

    rto_min_ms: float = RTO_MIN_MS
    rto_max_ms: float = RTO_MAX_MS
    thin_linear_timeouts: bool = False
    source: str = "Linux defaults"

    def to_dict(self) -> dict[str, Any]:
        return {
            "rto_min_ms": self.rto_min_ms,
            "rto_max_ms": self.rto_max_ms,
            "thin_linear_timeouts": self.thin_linear_timeouts,
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Tcp:
        return cls(
            float(data.get("rto_min_ms", RTO_MIN_MS)),
            float(data.get("rto_max_ms", RTO_MAX_MS)),
            bool(data.get("thin_linear_timeouts", False)),
            str(data.get("source", "recorded")),
        )

    def rto_ms(self, srtt_ms: float, mdev_ms: float = 0.0) -> float:
        return min(srtt_ms + max(4 * mdev_ms, self.rto_min_ms), self.rto_max_ms)

    def backoff(self, retry: int) -> float:
        """The factor of the RTO before retransmission ``retry`` (0: the first); past
        TCP_RETRIES2 the connection is given up, so the exponent stops there."""
        if self.thin_linear_timeouts and retry < THIN_LINEAR_RETRIES:
            return 1.0
        shift = THIN_LINEAR_RETRIES if self.thin_linear_timeouts else 0
        return float(2 ** (min(retry, TCP_RETRIES2) - shift))


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def tcp_from_proc(root: Path = PROC_TCP) -> Tcp:
    """The host's settings from /proc/sys/net/ipv4 (tcp_rto_min_us and tcp_rto_max_ms
    exist from Linux 6.11 on; older kernels have the compiled-in 200 ms and 120 s)."""
    rto_min = _read(root / "tcp_rto_min_us")
    rto_max = _read(root / "tcp_rto_max_ms")
    thin = _read(root / "tcp_thin_linear_timeouts")
    return Tcp(
        rto_min_ms=int(rto_min) / 1000 if rto_min and rto_min.isdigit() else RTO_MIN_MS,
        rto_max_ms=float(rto_max) if rto_max and rto_max.isdigit() else RTO_MAX_MS,
        thin_linear_timeouts=thin == "1",
        source=f"{root} on {_read(Path('/proc/sys/kernel/hostname')) or 'this host'}",
    )


# -- discrete distributions ------------------------------------------------------------------


@dataclass(frozen=True)
class Discrete:
    """A distribution on finitely many values (sorted, distinct) with their probabilities."""

    values: np.ndarray
    probs: np.ndarray

    @staticmethod
    def of(values: npt.ArrayLike, probs: npt.ArrayLike) -> Discrete:
        v = np.round(np.asarray(values, dtype=float), 9)
        p = np.asarray(probs, dtype=float)
        u, inv = np.unique(v, return_inverse=True)
        return Discrete(u, np.bincount(inv, weights=p, minlength=u.size))

    @staticmethod
    def point(value: float) -> Discrete:
        return Discrete(np.array([float(value)]), np.array([1.0]))

    def __add__(self, other: Discrete) -> Discrete:
        return Discrete.of(
            np.add.outer(self.values, other.values).ravel(),
            np.multiply.outer(self.probs, other.probs).ravel(),
        )

    def clip(self, high: float) -> Discrete:
        """min(X, high): what a timeout at ``high`` makes of X."""
        return Discrete.of(np.minimum(self.values, high), self.probs)

    def cdf(self, t: np.ndarray) -> np.ndarray:
        c = np.cumsum(self.probs)
        i = np.searchsorted(self.values, t, side="right")
        return np.where(i > 0, c[np.maximum(i - 1, 0)], 0.0)

    @property
    def mean(self) -> float:
        return float(self.values @ self.probs)


def retransmission_delay(loss: float, rto_ms: float, tcp: Tcp) -> Discrete:
    """The time a segment waits for retransmissions: 0 with probability 1 - p, then the
    RTO, then the RTO plus the backed-off one, ... (geometric)."""
    if loss <= 0:
        return Discrete.point(0.0)
    if loss >= 1:  # a partition: nothing arrives (the timeouts end the write)
        return Discrete.point(math.inf)
    values, probs, wait, p_here = [0.0], [1 - loss], 0.0, loss
    for retry in itertools.count():
        wait = wait + min(rto_ms * tcp.backoff(retry), tcp.rto_max_ms)
        if p_here * loss < TAIL_PROB or retry >= TCP_RETRIES2:
            values.append(wait)
            probs.append(p_here)  # this and every longer chain
            break
        values.append(wait)
        probs.append(p_here * (1 - loss))
        p_here *= loss
    return Discrete.of(values, probs)


def maximum(dists: Sequence[Discrete]) -> Discrete:
    """Exact distribution of the largest of independent variables."""
    if len(dists) == 1:
        return dists[0]
    support = np.unique(np.concatenate([d.values for d in dists]))
    cdf = np.prod([d.cdf(support) for d in dists], axis=0)
    probs = np.clip(np.diff(np.concatenate([[0.0], cdf])), 0, None)
    keep = probs > 1e-15
    return Discrete.of(support[keep], probs[keep])


def kth_smallest(dists: Sequence[Discrete], k: int) -> Discrete:
    """Exact distribution of the k-th smallest (1-based) of independent variables."""
    if k < 1:
        return Discrete.point(0.0)
    if k > len(dists):
        raise ValueError(f"the {k}-th of {len(dists)} variables")
    support = np.unique(np.concatenate([d.values for d in dists]))
    cdfs = np.array([d.cdf(support) for d in dists])  # (m, T): P(X_i <= t)
    # P(at least k of m are <= t): Poisson-binomial by dynamic programming over variables.
    count = np.zeros((len(dists) + 1, support.size))
    count[0] = 1.0
    for f in cdfs:
        count[1:] = count[1:] * (1 - f) + count[:-1] * f
        count[0] = count[0] * (1 - f)
    at_least = count[k:].sum(axis=0)
    probs = np.clip(np.diff(np.concatenate([[0.0], at_least])), 0, None)
    keep = probs > 1e-15
    return Discrete.of(support[keep], probs[keep])


# -- the cell -------------------------------------------------------------------------------


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


# -- predictions ----------------------------------------------------------------------------


class Prediction:
    """A write's predicted RTT distribution: an exact mixture (components: probability,
    service samples, network value) or Monte-Carlo samples."""

    def __init__(
        self,
        *,
        weights: np.ndarray | None = None,
        shifts: np.ndarray | None = None,
        services: list[np.ndarray] | None = None,
        which: np.ndarray | None = None,
        samples: np.ndarray | None = None,
        no_loss_max: float = 0.0,
        method: str = "exact",
    ) -> None:
        self.method = method
        self.no_loss_max = no_loss_max
        self._samples = None if samples is None else np.sort(samples)
        if self._samples is None:
            assert weights is not None and shifts is not None
            assert services is not None and which is not None
            self._w, self._v, self._which = weights, shifts, which
            self._s = [np.sort(a) for a in services]
            self._cum = [np.concatenate([[0.0], np.cumsum(a)]) for a in self._s]

    @property
    def samples(self) -> np.ndarray:
        """The simulated RTTs (sorted); a ValueError for an exact prediction."""
        if self._samples is None:
            raise ValueError("an exact prediction has no samples")
        return self._samples

    def cdf(self, t: float) -> float:
        if self._samples is not None:
            return float(np.searchsorted(self._samples, t, side="right") / self._samples.size)
        total = 0.0
        for i, s in enumerate(self._s):
            m = self._which == i
            if m.any():
                idx = np.searchsorted(s, t - self._v[m], side="right")
                total += float(self._w[m] @ (idx / s.size))
        return total

    def partial_mean(self, t: float) -> float:
        """E[RTT; RTT <= t]: the part of the mean that the writes at or below t make up."""
        if self._samples is not None:
            k = np.searchsorted(self._samples, t, side="right")
            return float(self._samples[:k].sum() / self._samples.size)
        total = 0.0
        for i, s in enumerate(self._s):
            m = self._which == i
            if m.any():
                idx = np.searchsorted(s, t - self._v[m], side="right")
                part = self._cum[i][idx] / s.size + self._v[m] * idx / s.size
                total += float(self._w[m] @ part)
        return total

    @property
    def mean(self) -> float:
        if self._samples is not None:
            return float(self._samples.mean())
        return float(
            sum(
                self._w[self._which == i] @ (self._v[self._which == i] + s.mean())
                for i, s in enumerate(self._s)
            )
        )

    def quantile(self, q: float) -> float:
        if self._samples is not None:
            return float(np.quantile(self._samples, q, method="inverted_cdf"))
        lo = min(float(s[0]) for s in self._s) + float(self._v.min())
        hi = max(float(s[-1]) for s in self._s) + float(self._v.max())
        for _ in range(100):  # bisection to the exact value: the smallest t with F(t) >= q
            mid = (lo + hi) / 2
            if self.cdf(mid) >= q - 1e-12:
                hi = mid
            else:
                lo = mid
            if hi - lo < 1e-7:
                break
        return hi

    def summary(self) -> dict[str, float]:
        return {
            "mean": self.mean,
            "median": self.quantile(0.5),
            "p95": self.quantile(0.95),
            "p99": self.quantile(0.99),
        }


def predict(
    s: Scenario,
    service: Service,
    *,
    method: str = "auto",
    seed: int = 12,
) -> Prediction:
    """The predicted RTT distribution of a write of ``s``. ``method``: ``exact`` (writes
    independent; no jitter), ``simulation`` (``simulate``), or ``auto``: exact where it
    is the whole model (no jitter, no loss between edge nodes, so no message can wait
    behind another's retransmission), the simulation otherwise."""
    if method == "auto":
        exact = (
            not s.jittered and not s.internode_loss and s.placement_count() <= MAX_EXACT_PLACEMENTS
        )
        method = "exact" if exact else "simulation"
    if method == "simulation":
        return simulate(s, service, seed=seed)
    if method != "exact":
        raise ConfigError(f"unknown method {method!r} (auto, exact, simulation)")
    if s.jittered:
        raise ConfigError("links with jitter have no exact prediction here: use simulation")
    weights, shifts, which = [], [], []
    no_loss_max = 0.0
    for w, remote, dist, no_loss in network(s):
        weights.append(w * dist.probs)
        shifts.append(dist.values)
        which.append(np.full(dist.values.size, 0 if remote else 1))
        no_loss_max = max(no_loss_max, no_loss)
    return Prediction(
        weights=np.concatenate(weights),
        shifts=np.concatenate(shifts),
        services=[service.samples(True), service.samples(False)],
        which=np.concatenate(which),
        no_loss_max=no_loss_max,
    )


def simulate(
    s: Scenario,
    service: Service,
    *,
    writes: int = SIM_WRITES,
    chains: int = SIM_CHAINS,
    hol: bool = True,
    seed: int = 12,
) -> Prediction:
    """The model by Monte Carlo, write after write as the client sends them: ``chains``
    independent clients, each sending ``writes`` sequential writes (the first
    ``SIM_WARMUP`` unrecorded), coordinators in turn from a random start (round robin) or
    a random replica (token-aware), a random replica set per write, delays with jitter
    (normal, truncated at 0) and retransmission chains per message.

    ``hol``: TCP delivers a connection's messages in order, so a mutation or an answer
    waits for an earlier message still being recovered on its connection, also one a
    previous write did not wait for (a spare replica's); and a later segment's SACK lets
    RACK resend a lost one at max(that SACK, its send + 1.25·rtt) instead of at the
    timer. This is why a lost message costs more than its own write at high RF, and less
    than a full RTO when the connection is busy. The exact computation (``hol=False``
    here) leaves both out. The client's own connections need neither: it sends the next
    write only after the answer to the last one."""
    rng = np.random.default_rng(seed)
    edges, ep = s.edges, s.endpoint
    n = len(edges)
    hosts = [*edges, ep]
    h = n + 1
    pairs = [(a, b) for a in hosts for b in hosts]
    delay = np.array([s.link(a, b).delay_ms for a, b in pairs]).reshape(h, h)
    jitter = np.array([s.link(a, b).jitter_ms for a, b in pairs]).reshape(h, h)
    loss = np.array([s.link(a, b).loss_pct / 100 for a, b in pairs]).reshape(h, h)
    rto = np.array([s.rto_ms(a, b) if a != b else 0.0 for a, b in pairs]).reshape(h, h)

    def draw(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each message's delay and the time its retransmissions add (0: not lost)."""
        d = delay[src, dst]
        if jitter.any():
            d = np.maximum(d + jitter[src, dst] * rng.standard_normal(d.shape), 0.0)
        p = loss[src, dst]
        dead = p >= 1
        lost = np.minimum(rng.geometric(np.where(dead, 1.0, 1 - p)) - 1, TCP_RETRIES2)
        wait = np.zeros(d.shape)
        r = rto[src, dst]
        for retry in range(int(lost.max()) if lost.size else 0):
            wait += np.where(
                lost > retry, np.minimum(r * s.tcp.backoff(retry), s.tcp.rto_max_ms), 0
            )
        return d, np.where(dead, np.inf, wait)

    index = {name: i for i, name in enumerate(edges)}
    local = np.array([index[x] for x in s.coordinators])
    replica = np.zeros((writes, chains, n), dtype=bool)
    local_replicas = None  # the key's replicas in the coordinators' pool
    for pool in s.pools():
        members = np.array([index[x] for x in pool])
        order = np.argsort(rng.random((writes, chains, members.size)), axis=2)
        chosen = members[order[..., : s.rf]]
        np.put_along_axis(replica, chosen, True, axis=2)
        if set(pool) >= set(s.coordinators):
            local_replicas = chosen
    assert local_replicas is not None
    if s.policy == "token-aware":
        pick = rng.integers(0, s.rf, (writes, chains, 1))
        c = np.take_along_axis(local_replicas, pick, axis=2)[..., 0]
    else:
        c = local[
            (rng.integers(0, local.size, chains)[None, :] + np.arange(writes)[:, None]) % local.size
        ]
    c_replica = np.take_along_axis(replica, c[..., None], axis=2)[..., 0]
    masks = [np.array([x in members for x in edges]) for members, _ in s.rules]
    # per rule: the acks still needed from other nodes (the coordinator's own counts)
    ks = [
        kk - (c_replica & mask[c]).astype(int) for mask, (_, kk) in zip(masks, s.rules, strict=True)
    ]
    k = np.max(ks, axis=0)  # > 0: the write waits for another node
    remote_pool, local_pool = service.samples(True), service.samples(False)
    service_ms = np.where(
        k > 0,
        remote_pool[rng.integers(0, remote_pool.size, (writes, chains))],
        local_pool[rng.integers(0, local_pool.size, (writes, chains))],
    )
    up_d, up_w = draw(np.full_like(c, n), c)
    down_d, down_w = draw(c, np.full_like(c, n))
    cc = np.broadcast_to(c[..., None], (writes, chains, n))
    rr = np.broadcast_to(np.arange(n), (writes, chains, n))
    to_r = replica & (rr != cc)
    out_d, out_w = draw(cc, rr)
    back_d, back_w = draw(rr, cc)
    d_cr, d_rc = delay[cc, rr], delay[rr, cc]
    conn_out, conn_back = cc * h + rr, rr * h + cc

    delivered = np.full((chains, h * h), -np.inf)  # each connection's last delivery
    pending = np.full((chains, h * h), np.inf)  # the send time of a message being recovered

    def deliver(at, d, wait, d_ack, rtt, conn, mask):
        arrive = at + d + wait
        if not hol:
            return arrive
        before = np.take_along_axis(delivered, conn, axis=1)
        lost_before = np.take_along_axis(pending, conn, axis=1)
        behind = np.isfinite(lost_before) & (before > at + d)  # an earlier loss blocks it
        resend = np.maximum(at + d + d_ack, lost_before + 1.25 * rtt) + d  # RACK
        blocked = np.where(behind, np.minimum(before, resend), before)
        done = np.maximum(arrive, blocked)
        np.put_along_axis(delivered, conn, np.where(mask, done, before), axis=1)
        # the latest loss still unrecovered sets when a later SACK can get it resent
        now_lost = np.where(wait > 0, at, np.where(behind, lost_before, np.inf))
        np.put_along_axis(pending, conn, np.where(mask, now_lost, lost_before), axis=1)
        return done

    rows = np.arange(chains)
    recorded = writes - SIM_WARMUP if writes > SIM_WARMUP else writes
    out = np.empty((recorded, chains))
    now = np.zeros(chains)
    for i in range(writes):
        t = now + service_ms[i] + up_d[i] + up_w[i]  # the request is at the coordinator
        rtt = d_cr[i] + d_rc[i]
        arrive = deliver(t[:, None], out_d[i], out_w[i], d_rc[i], rtt, conn_out[i], to_r[i])
        acked = deliver(arrive, back_d[i], back_w[i], d_cr[i], rtt, conn_back[i], to_r[i])
        ready = t
        for mask, kg in zip(masks, ks, strict=True):
            got = np.sort(np.where(to_r[i] & mask, acked, np.inf), axis=1)
            ready = np.maximum(ready, np.where(kg[i] > 0, got[rows, np.maximum(kg[i] - 1, 0)], t))
        ready = np.minimum(ready, t + s.write_timeout_ms)  # WriteTimeout
        end = np.minimum(ready + down_d[i] + down_w[i], now + s.client_timeout_ms)
        if i >= writes - recorded:
            out[i - (writes - recorded)] = end - now
        now = end
    return Prediction(samples=out.ravel(), no_loss_max=no_loss_max_ms(s), method="simulation")


# -- the service time from a baseline ------------------------------------------------------


def service_from_baseline(
    rtt_ms: npt.ArrayLike,
    coordinator_is_replica: npt.ArrayLike,
    baseline: Scenario,
    source: str,
) -> Service:
    """S from a measured cell (normally at 0 ms): each request's RTT minus the configured
    delay of its kind of placement, without the requests that waited for a retransmission
    (above median + rto_min/2: every recovery costs at least rto_min)."""
    rtt = np.asarray(rtt_ms, dtype=float)
    cir = np.asarray(coordinator_is_replica, dtype=int)
    if rtt.size == 0:
        raise ConfigError(f"{source}: no requests to take the service time from")
    cut = float(np.median(rtt)) + baseline.tcp.rto_min_ms / 2
    keep = rtt <= cut
    likely = baseline.replica_coordinator_share > 0.5  # coordinator unknown: the likelier
    replica = np.where(cir >= 0, cir == 1, likely)
    needs = np.where(replica, baseline.needs_remote(True), baseline.needs_remote(False))
    remote = rtt[keep & needs] - expected_fixed_ms(baseline, True)
    local = rtt[keep & ~needs] - expected_fixed_ms(baseline, False)
    if remote.size + local.size == 0:
        raise ConfigError(f"{source}: no request to take the service time from")
    return Service(
        np.sort(np.maximum(remote, 0.0)),
        np.sort(np.maximum(local, 0.0)),
        f"{source}: {int(keep.sum())} of {rtt.size} requests "
        f"({rtt.size - int(keep.sum())} above {cut:.0f} ms left out as retransmitted)",
    )


def link_matrix_of(
    topology_nodes: int,
    shaping: Mapping[str, Any] | None,
    profile: str,
    latency_ms: float,
    loss_pct: float,
    sites: str | None = None,
) -> LinkMatrix:
    """A stored cell's matrix: the one its shaping recorded, else the profile's (on
    ``sites``: nodes per site, the endpoint in the first)."""
    sizes = parse_sites(sites) if sites else None
    topo = Topology(edge_nodes=topology_nodes, sites=sizes)
    stored = (shaping or {}).get("matrix")
    if isinstance(stored, Mapping) and isinstance(stored.get("links"), list):
        entries = {
            (e["src"], e["dst"]): Link(
                float(e.get("delay_ms", 0)),
                float(e.get("jitter_ms", 0)),
                float(e.get("loss_pct", 0)),
                e.get("rate_mbit"),
            )
            for e in stored["links"]
        }
        return LinkMatrix(topo, entries, profile=str(stored.get("profile", profile)))
    if profile == "file":
        raise ConfigError("a 'file' profile cell without its recorded matrix cannot be modelled")
    return links.build(profile, topo, delay_ms=latency_ms, loss_pct=loss_pct)


__all__ = [
    "Discrete",
    "Prediction",
    "Scenario",
    "Service",
    "Tcp",
    "kth_smallest",
    "maximum",
    "predict",
    "retransmission_delay",
    "tcp_from_proc",
]
