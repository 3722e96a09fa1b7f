"""The model by Monte Carlo (``simulate``): write after write, as the client sends them,
with jitter, retransmission chains and head-of-line blocking on each connection (pure;
``model.rtt.predict`` uses it where the exact computation is not the whole model)."""

from __future__ import annotations

import numpy as np

from .prediction import Prediction
from .scenario import Scenario, Service, no_loss_max_ms
from .tcp import TCP_RETRIES2

SIM_WRITES = 50  # sequential writes per simulated client (the first SIM_WARMUP unrecorded)
SIM_WARMUP = 10
SIM_CHAINS = 300


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
    net = _Network(s, rng)
    n, h = net.n, net.n + 1
    c, replica = _placements(s, rng, writes, chains, net.index)
    masks, ks, service_ms = _waits_and_service(s, service, rng, c, replica)
    up_d, up_w = net.draw(np.full_like(c, n), c)
    down_d, down_w = net.draw(c, np.full_like(c, n))
    cc = np.broadcast_to(c[..., None], (writes, chains, n))
    rr = np.broadcast_to(np.arange(n), (writes, chains, n))
    to_r = replica & (rr != cc)
    out_d, out_w = net.draw(cc, rr)
    back_d, back_w = net.draw(rr, cc)
    d_cr, d_rc = net.delay[cc, rr], net.delay[rr, cc]
    conn_out, conn_back = cc * h + rr, rr * h + cc
    conns = _Connections(chains, h, hol)
    rows = np.arange(chains)
    recorded = writes - SIM_WARMUP if writes > SIM_WARMUP else writes
    out = np.empty((recorded, chains))
    now = np.zeros(chains)
    for i in range(writes):
        t = now + service_ms[i] + up_d[i] + up_w[i]  # the request is at the coordinator
        rtt = d_cr[i] + d_rc[i]
        arrive = conns.deliver(t[:, None], out_d[i], out_w[i], d_rc[i], rtt, conn_out[i], to_r[i])
        acked = conns.deliver(arrive, back_d[i], back_w[i], d_cr[i], rtt, conn_back[i], to_r[i])
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


def _waits_and_service(
    s: Scenario, service: Service, rng: np.random.Generator, c: np.ndarray, replica: np.ndarray
) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """Per rule of the level: the nodes whose acks count (a mask) and the acks each write
    still needs from other nodes (its coordinator's own counts); and each write's service
    time, drawn from the writes that did (not) wait for another node."""
    c_replica = np.take_along_axis(replica, c[..., None], axis=2)[..., 0]
    masks = [np.array([x in members for x in s.edges]) for members, _ in s.rules]
    ks = [
        kk - (c_replica & mask[c]).astype(int) for mask, (_, kk) in zip(masks, s.rules, strict=True)
    ]
    k = np.max(ks, axis=0)  # > 0: the write waits for another node
    remote_pool, local_pool = service.samples(True), service.samples(False)
    service_ms = np.where(
        k > 0,
        remote_pool[rng.integers(0, remote_pool.size, c.shape)],
        local_pool[rng.integers(0, local_pool.size, c.shape)],
    )
    return masks, ks, service_ms


class _Network:
    """The scenario's links as arrays over (source, destination), the edge nodes then the
    endpoint; ``draw`` gives messages their delays and retransmission waits."""

    def __init__(self, s: Scenario, rng: np.random.Generator):
        self.s, self.rng = s, rng
        hosts = [*s.edges, s.endpoint]
        self.n, h = len(s.edges), len(hosts)
        self.index = {name: i for i, name in enumerate(s.edges)}
        pairs = [(a, b) for a in hosts for b in hosts]
        self.delay = np.array([s.link(a, b).delay_ms for a, b in pairs]).reshape(h, h)
        self.jitter = np.array([s.link(a, b).jitter_ms for a, b in pairs]).reshape(h, h)
        self.loss = np.array([s.link(a, b).loss_pct / 100 for a, b in pairs]).reshape(h, h)
        self.rto = np.array([s.rto_ms(a, b) if a != b else 0.0 for a, b in pairs]).reshape(h, h)

    def draw(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each message's delay and the time its retransmissions add (0: not lost)."""
        rng, tcp = self.rng, self.s.tcp
        d = self.delay[src, dst]
        if self.jitter.any():
            d = np.maximum(d + self.jitter[src, dst] * rng.standard_normal(d.shape), 0.0)
        p = self.loss[src, dst]
        dead = p >= 1
        lost = np.minimum(rng.geometric(np.where(dead, 1.0, 1 - p)) - 1, TCP_RETRIES2)
        wait = np.zeros(d.shape)
        r = self.rto[src, dst]
        for retry in range(int(lost.max()) if lost.size else 0):
            wait += np.where(lost > retry, np.minimum(r * tcp.backoff(retry), tcp.rto_max_ms), 0)
        return d, np.where(dead, np.inf, wait)


def _placements(
    s: Scenario, rng: np.random.Generator, writes: int, chains: int, index: dict[str, int]
) -> tuple[np.ndarray, np.ndarray]:
    """Each write's coordinator (an edge node's index) and replicas (a mask over the edge
    nodes): ``rf`` random replicas in each pool, the coordinator in turn from a random
    start (round robin) or one of the key's replicas in the coordinators' pool."""
    local = np.array([index[x] for x in s.coordinators])
    replica = np.zeros((writes, chains, len(index)), dtype=bool)
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
        return np.take_along_axis(local_replicas, pick, axis=2)[..., 0], replica
    start = rng.integers(0, local.size, chains)[None, :]
    return local[(start + np.arange(writes)[:, None]) % local.size], replica


class _Connections:
    """When each connection last delivered, and the send time of a message on it still
    being recovered: in-order delivery behind a loss, and RACK's earlier resend."""

    def __init__(self, chains: int, h: int, hol: bool):
        self.hol = hol
        self.delivered = np.full((chains, h * h), -np.inf)  # each connection's last delivery
        self.pending = np.full((chains, h * h), np.inf)  # the send time of one in recovery

    def deliver(self, at, d, wait, d_ack, rtt, conn, mask):  # noqa: ANN001, ANN201
        arrive = at + d + wait
        if not self.hol:
            return arrive
        before = np.take_along_axis(self.delivered, conn, axis=1)
        lost_before = np.take_along_axis(self.pending, conn, axis=1)
        behind = np.isfinite(lost_before) & (before > at + d)  # an earlier loss blocks it
        resend = np.maximum(at + d + d_ack, lost_before + 1.25 * rtt) + d  # RACK
        blocked = np.where(behind, np.minimum(before, resend), before)
        done = np.maximum(arrive, blocked)
        np.put_along_axis(self.delivered, conn, np.where(mask, done, before), axis=1)
        # the latest loss still unrecovered sets when a later SACK can get it resent
        now_lost = np.where(wait > 0, at, np.where(behind, lost_before, np.inf))
        np.put_along_axis(self.pending, conn, np.where(mask, now_lost, lost_before), axis=1)
        return done
