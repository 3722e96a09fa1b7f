"""Measure the emulated network and compare it with the configured matrix.

RTT: median and p99 of >= 100 ICMP echoes between two hosts (their configured RTT is the
sum of both directions). Loss: >= 1000 echoes when loss is configured; an echo is lost if
the request or the reply is, so the expected round-trip loss is 1 - (1-p_ab)(1-p_ba).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass
from typing import Any

from testbed.testbed import Testbed

from .links import LinkMatrix

PROBE_INTERVAL_S = 0.005
LEVELS = (0.95, 0.99, 0.999)  # confidence levels a loss interval is given at


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
    """Range (in %) a loss rate measured over ``n`` probes falls in with probability at
    least ``level`` when the true rate is ``p_pct``: the exact binomial interval."""
    from scipy.stats import binom  # here, not at import: 0.9 s of every command's start

    low, high = binom.interval(level, n, p_pct / 100)
    return (100 * float(low) / n, 100 * float(high) / n)


def pairs_to_check(
    matrix: LinkMatrix, sample: int | None = None, seed: int = 0
) -> list[tuple[str, str]]:
    """Unordered host pairs (every pair, or a seeded sample of ``sample`` of them)."""
    names = [h.name for h in matrix.topology.hosts]
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    if sample is not None and sample < len(pairs):
        pairs = sorted(random.Random(seed).sample(pairs, sample))
    return pairs


def echo_rtts(
    tb: Testbed,
    a: str,
    b: str,
    count: int,
    *,
    interval_s: float = PROBE_INTERVAL_S,
    wait_s: float = 1.0,
) -> tuple[list[float], int]:
    """``count`` ICMP echoes from a to b (emulation.probe): the RTTs of those answered,
    in ms, and how many were sent."""
    argv = [tb.python, "-m", "emulation.probe", tb.address(b), "--count", str(count),
            "--interval", str(interval_s), "--wait", str(wait_s)]  # fmt: skip
    data = json.loads(tb.exec(a, argv, timeout=count * interval_s + wait_s + 30).stdout)
    return [us / 1000 for us in data["rtt_us"]], data["sent"]


def measure_pair(
    tb: Testbed,
    matrix: LinkMatrix,
    a: str,
    b: str,
    *,
    rtt_probes: int = 100,
    loss_probes: int = 1000,
    level: float = 0.95,
) -> PairResult:
    """Probe b from a (ICMP echo, see emulation.probe) and compare with the matrix."""
    loss = matrix.round_trip_loss_pct(a, b)
    count = loss_probes if loss > 0 else rtt_probes
    rtt = matrix.rtt_ms(a, b)
    wait_s = max(1.0, 4 * rtt / 1000 + 4 * matrix.link(a, b).jitter_ms / 1000)
    rtts, sent = echo_rtts(tb, a, b, count, wait_s=wait_s)
    return PairResult(
        a,
        b,
        rtt,
        percentile(rtts, 50) if rtts else None,
        percentile(rtts, 99) if rtts else None,
        loss,
        100 * (sent - len(rtts)) / sent,
        sent,
        binomial_interval(loss, sent, level),
    )


def verify(
    tb: Testbed,
    matrix: LinkMatrix,
    *,
    sample: int | None = None,
    rtt_probes: int = 100,
    loss_probes: int = 1000,
    level: float = 0.95,
    shaper: str | None = None,
    loss_location: str | None = None,
) -> dict[str, Any]:
    """Measure every (or a sample of) host pair; returns data a sweep can store."""
    results = [
        measure_pair(tb, matrix, a, b, rtt_probes=rtt_probes, loss_probes=loss_probes, level=level)
        for a, b in pairs_to_check(matrix, sample)
    ]
    return {
        "shaper": shaper,
        "loss_location": loss_location,
        "profile": matrix.profile,
        "level": level,
        "pairs": [
            {**asdict(r), "rtt_error_ms": r.rtt_error_ms, "loss_ok": r.loss_ok} for r in results
        ],
    }
