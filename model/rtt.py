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

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from common.errors import ConfigError
from emulation import links
from emulation.links import Link, LinkMatrix
from testbed.topology import Topology, parse_sites

from .prediction import Prediction
from .scenario import (
    CLIENT_TIMEOUT_MS,
    POLICIES,
    WRITE_TIMEOUT_MS,
    Scenario,
    Service,
    expected_fixed_ms,
    network,
    rto_ms,
)
from .simulation import simulate
from .tcp import Discrete, Tcp, kth_smallest, maximum, retransmission_delay, tcp_from_proc

MAX_EXACT_PLACEMENTS = 20_000
# the model's parts, one module each, named here too: ``model.rtt`` is where a caller
# finds the model (``from model import rtt as m; m.predict(m.Scenario(...), ...)``)
__all__ = [
    "CLIENT_TIMEOUT_MS", "MAX_EXACT_PLACEMENTS", "POLICIES", "WRITE_TIMEOUT_MS", "Discrete",
    "Prediction", "Scenario", "Service", "Tcp", "kth_smallest", "link_matrix_of", "maximum",
    "predict",
    "retransmission_delay", "rto_ms", "service_from_baseline", "simulate", "tcp_from_proc",
]  # fmt: skip


# -- predictions ----------------------------------------------------------------------------


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
