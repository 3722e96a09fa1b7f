"""Measure the emulated network and compare it with the configured matrix.

RTT: median and p99 of >= 100 ICMP echoes between two hosts (their configured RTT is the
sum of both directions). Loss: >= 1000 echoes when loss is configured; an echo is lost if
the request or the reply is, so the expected round-trip loss is 1 - (1-p_ab)(1-p_ba).
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import asdict, dataclass
from typing import Any

from testbed.testbed import Testbed

from .links import LinkMatrix

_RTT = re.compile(r"time=([\d.]+) ms")
_SUMMARY = re.compile(r"(\d+) packets transmitted, (\d+) received")
Z = {0.95: 1.959964, 0.99: 2.575829}


@dataclass(frozen=True)
class PairResult:
    a: str
    b: str
    configured_rtt_ms: float
    median_rtt_ms: float | None
    p99_rtt_ms: float | None
    configured_loss_pct: float
    measured_loss_pct: float
    probes: int
    loss_interval_pct: tuple[float, float]

    @property
    def rtt_error_ms(self) -> float | None:
        return None if self.median_rtt_ms is None else self.median_rtt_ms - self.configured_rtt_ms

    @property
    def loss_ok(self) -> bool:
        low, high = self.loss_interval_pct
        return low <= self.measured_loss_pct <= high


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def binomial_interval(p_pct: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Range (in %) a loss rate measured over ``n`` probes falls in with probability ~level
    when the true rate is ``p_pct`` (normal approximation, plus half a probe of slack)."""
    p = p_pct / 100
    half = Z[level] * math.sqrt(p * (1 - p) / n) + 0.5 / n
    return (max(0.0, 100 * (p - half)), min(100.0, 100 * (p + half)))


def parse_ping(text: str) -> tuple[list[float], int, int]:
    """RTTs (ms), transmitted and received counts from `ping -n` output."""
    rtts = [float(m) for m in _RTT.findall(text)]
    summary = _SUMMARY.search(text)
    if not summary:
        raise ValueError(f"no ping summary in: {text[-200:]!r}")
    return rtts, int(summary.group(1)), int(summary.group(2))


def pairs_to_check(matrix: LinkMatrix, sample: int | None = None,
                   seed: int = 0) -> list[tuple[str, str]]:
    """Unordered host pairs (every pair, or a seeded sample of ``sample`` of them)."""
    names = [h.name for h in matrix.topology.hosts]
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    if sample is not None and sample < len(pairs):
        pairs = sorted(random.Random(seed).sample(pairs, sample))
    return pairs


def measure_pair(tb: Testbed, matrix: LinkMatrix, a: str, b: str, *, rtt_probes: int = 100,
                 loss_probes: int = 1000, level: float = 0.95) -> PairResult:
    loss = matrix.round_trip_loss_pct(a, b)
    count = loss_probes if loss > 0 else rtt_probes
    rtt = matrix.rtt_ms(a, b)
    # Probes 5 ms apart (many in flight at 100 ms); wait for the last replies.
    out = tb.exec(a, ["ping", "-n", "-c", str(count), "-i", "0.005",
                      "-W", str(max(2, math.ceil(rtt / 1000 * 4))), tb.address(b)],
                  check=False, timeout=count * 0.02 + rtt / 100 + 30).stdout
    rtts, sent, received = parse_ping(out)
    return PairResult(
        a, b, rtt,
        percentile(rtts, 50) if rtts else None,
        percentile(rtts, 99) if rtts else None,
        loss,
        100 * (sent - received) / sent,
        sent,
        binomial_interval(loss, sent, level),
    )


def verify(tb: Testbed, matrix: LinkMatrix, *, sample: int | None = None,
           rtt_probes: int = 100, loss_probes: int = 1000, level: float = 0.95,
           shaper: str | None = None, loss_location: str | None = None) -> dict[str, Any]:
    """Measure every (or a sample of) host pair; returns data a sweep can store."""
    results = [measure_pair(tb, matrix, a, b, rtt_probes=rtt_probes, loss_probes=loss_probes,
                            level=level)
               for a, b in pairs_to_check(matrix, sample)]
    return {
        "shaper": shaper,
        "loss_location": loss_location,
        "profile": matrix.profile,
        "level": level,
        "pairs": [{**asdict(r), "rtt_error_ms": r.rtt_error_ms, "loss_ok": r.loss_ok}
                  for r in results],
    }
