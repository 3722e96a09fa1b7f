"""The paper's claims on how little the RTT spreads (``analysis.claims``' table): [5.4]
RF 3's mean the same across node counts, [5.5] RF 3, 4 and 5 similar. Each decides point
by point against the noise of the means (the spread of noisy means is inflated by their
errors), and says "does not hold" only where a point is beyond what the claim allows by
more than the noise gives at 2.5 % over all the claim's points."""

from __future__ import annotations

import math

import numpy as np

from .findings import (
    MIN_LATENCY_MS,
    NO_ERRORS,
    SIMILAR,
    STD_CLAIM_MS,
    Errors,
    Finding,
    Means,
    bonferroni_z,
    grid,
    losses_of,
    none,
    pair_within,
    se_of,
    std_below,
)
from .stats import APART_SE


def rf3_across_node_counts(means: Means) -> dict[tuple[float, float], tuple[list[int], float]]:
    """(loss, latency >= MIN_LATENCY_MS) -> the node counts with an RF 3 mean there, and
    the std (sample) of those means: what section 5.4's claim is about."""
    counts = sorted({k[0] for k in means if k[2] == 3})
    out = {}
    for loss in sorted({k[1] for k in means}):
        for lat in sorted({k[3] for k in means if k[3] >= MIN_LATENCY_MS}):
            have = [n for n in counts if (n, loss, 3, lat) in means]
            if len(have) >= 2:
                vals = [means[(n, loss, 3, lat)] for n in have]
                out[(loss, lat)] = (have, float(np.std(vals, ddof=1)))
    return out


def rf3_same_across_node_counts(means: Means, nodes: int, se: Errors = NO_ERRORS) -> Finding:
    """RF 3's mean RTT the same across node counts: its std across them below
    STD_CLAIM_MS at every loss and latency. Each point is decided against the noise of
    its means (the std of noisy means is inflated by their errors: with k means of
    error s, (k-1) std^2 / s^2 is a noncentral chi-square of k-1 degrees of freedom):
    "does not hold" where some point's std is beyond what a true STD_CLAIM_MS gives in
    97.5 % of draws, "holds" where every point's is below what it gives in 2.5 %. The
    value shown is the worst point's std with the noise taken out."""
    counts = sorted({k[0] for k in means if k[2] == 3})
    if len(counts) < 2:
        return none("needs two or more node counts")
    spread = rf3_across_node_counts(means)
    if not spread:
        return Finding("cannot tell")
    decided: list[bool | None] = []
    worst = (0.0, 0.0, 0.0)
    for (loss, lat), (have, sd) in spread.items():
        noise = float(np.mean([se_of(se, (n, loss, 3, lat)) ** 2 for n in have]))
        decided.append(std_below(sd, len(have), noise, STD_CLAIM_MS, len(spread)))
        corrected = math.sqrt(max(0.0, sd**2 - noise)) if math.isfinite(noise) else sd
        worst = max(worst, (corrected, loss, lat))
    verdict = (
        "does not hold" if False in decided
        else "holds" if all(decided)
        else "cannot tell (within the noise of the means at some loss and latency)"
    )  # fmt: skip
    return Finding(
        verdict,
        f"nodes {', '.join(map(str, counts))}: worst std {worst[0]:.2f} ms, its means' noise "
        f"taken out ({worst[1]:g} %, {worst[2]:g} ms); claim < {STD_CLAIM_MS:g} ms",
        worst[0], None, None, "ms",
    )  # fmt: skip


def rf345_similar(means: Means, nodes: int, se: Errors = NO_ERRORS) -> Finding:
    """RF 3, 4 and 5 similar: within SIMILAR of their mean at every loss and latency.
    Each point is decided by its pairs: "does not hold" where two differ by more than
    SIMILAR of the point's mean beyond APART_SE standard errors of their difference,
    "holds" where every pair is within it by as much."""
    decided: list[bool | None] = []
    worst = (0.0, 0.0, 0.0)
    groups = [
        [(nodes, loss, rf, lat) for rf in (3, 4, 5) if rf in by_rf]
        for loss in losses_of(means, nodes)
        for lat, by_rf in grid(means, nodes, loss).items()
    ]
    groups = [keys for keys in groups if len(keys) >= 2]
    beyond = bonferroni_z(sum(len(k) * (len(k) - 1) // 2 for k in groups))
    for keys in groups:
        vals = [means[k] for k in keys]
        centre = float(np.mean(vals))
        worst = max(worst, ((max(vals) - min(vals)) / centre, keys[0][1], keys[0][3]))
        pairs = [
            pair_within(
                means[a] - means[b],
                SIMILAR * centre,
                math.hypot(se_of(se, a), se_of(se, b)),
                beyond,
            )
            for i, a in enumerate(keys)
            for b in keys[i + 1 :]
        ]
        decided.append(False if False in pairs else True if all(pairs) else None)
    if not decided:
        return none("needs two of RF 3-5")
    verdict = (
        "does not hold" if False in decided
        else "holds" if all(decided)
        else f"cannot tell (within {APART_SE:g} standard errors at some loss and latency)"
    )  # fmt: skip
    return Finding(
        verdict,
        f"widest spread of RF 3-5: {100 * worst[0]:.0f} % ({worst[1]:g} %, {worst[2]:g} ms)",
        worst[0], None, None, "fraction",
    )  # fmt: skip
