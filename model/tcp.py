"""The host's TCP as the model sees it (RTO, backoff, ``tcp_from_proc``) and the exact
discrete distributions of a message's delay under loss (pure; ``model.rtt`` is the
model these serve)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

RTO_MIN_MS = 200.0  # Linux TCP_RTO_MIN, unless net.ipv4.tcp_rto_min_us says otherwise
RTO_MAX_MS = 120_000.0  # Linux TCP_RTO_MAX
THIN_LINEAR_RETRIES = 6  # TCP_THIN_LINEAR_RETRIES
TCP_RETRIES2 = 15  # net.ipv4.tcp_retries2: Linux gives a connection up after this many resends
TAIL_PROB = 1e-12  # retransmission chains less likely than this are lumped together
PROC_TCP = Path("/proc/sys/net/ipv4")


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
