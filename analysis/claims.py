"""The seed paper's claims (sections 5.1-5.5 and 6) checked against measurements and
against the model (pure).

Each claim is a function of mean RTTs keyed (nodes, loss, rf, latency), so the same test
runs on what was measured and on what ``model.rtt`` predicts for the same cells;
claims about node counts or losses a run did not measure are checked on the model's
what-if grid only (the service time of the run's 0 ms cells, or 5 ms). Verdicts: holds,
does not hold, holds only when ..., or cannot tell: the data a claim needs is missing, or
(on measurements, whose means have standard errors) the RFs it ranks differ by less than
APART_SE standard errors, or an order of too few RFs to be significant.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from . import phi as phi_mod
from .stats import (
    APART_SE,
    SIGNIFICANT_P,
    median_line_slope,
    repetitions_to_tell,
    smallest_spearman_p,
    spearman_test,
)

Means = Mapping[tuple[int, float, int, float], float]  # (nodes, loss, rf, latency) -> ms
Errors = Mapping[tuple[int, float, int, float], float]  # the same keys -> standard error, ms
NO_ERRORS: Errors = {}  # the model's means: exact
MIN_LATENCY_MS = 10.0  # the paper's statements are about shaped links
SIMILAR = 0.10  # "similar": within 10 % of each other
STD_CLAIM_MS = 1.5


def _grid(means: Means, nodes: int, loss: float) -> dict[float, dict[int, float]]:
    out: dict[float, dict[int, float]] = defaultdict(dict)
    for (n, l, rf, lat), v in means.items():
        if n == nodes and l == loss and lat >= MIN_LATENCY_MS:
            out[lat][rf] = v
    return dict(sorted(out.items()))


def _verdict(ok: list[tuple[float, bool | None]], what: str = "at latencies") -> str:
    """holds / does not hold / holds only ... over the latencies decided; ``None`` marks a
    latency where the means are too close to tell."""
    if not ok:
        return "cannot tell (no cells for it)"
    decided = [(x, y) for x, y in ok if y is not None]
    close = [x for x, y in ok if y is None]
    if not decided:
        return f"cannot tell (within {APART_SE:g} standard errors at every latency)"
    good = [x for x, y in decided if y]
    if len(good) == len(decided):
        verdict = "holds"
    elif not good:
        verdict = "does not hold"
    else:
        verdict = f"holds only {what} {', '.join(f'{x:g}' for x in good)} ms"
    if close:
        verdict += f"; cannot tell at {', '.join(f'{x:g}' for x in close)} ms"
    return verdict


def _apart(means: Means, se: Errors, a: tuple, b: tuple) -> tuple[bool, str]:
    """Are the means at keys ``a`` and ``b`` told apart (their difference beyond
    APART_SE standard errors; always, without errors)? With a note of the repetitions that would
    tell them apart when not."""
    err = math.hypot(se.get(a, 0.0), se.get(b, 0.0))
    diff = abs(means[a] - means[b])
    if not err > 0 or diff > APART_SE * err:  # no errors (the model), or NaN: as measured
        return True, ""
    need = repetitions_to_tell(diff, err)
    return False, " (equal)" if need is None else f" ({need}x the repetitions to tell)"


def _losses(means: Means, nodes: int) -> list[float]:
    return sorted({k[1] for k in means if k[0] == nodes})


def _ranked(
    means: Means, se: Errors, nodes: int, loss: float, rf: int, pick: Callable
) -> tuple[list[tuple[float, bool | None]], list[str]]:
    """Per latency: is ``rf`` the one ``pick`` (max: worst, min: best) chooses, told
    apart (None: too close to tell) from the runner-up when it is, from the chosen one
    when it is not; and the numbers."""
    ok: list[tuple[float, bool | None]] = []
    parts = []
    for lat, by_rf in _grid(means, nodes, loss).items():
        if rf not in by_rf or len(by_rf) < 2:
            continue
        chosen = pick(by_rf, key=lambda r: by_rf[r])
        other = pick((r for r in by_rf if r != rf), key=lambda r: by_rf[r])
        apart, note = _apart(means, se, (nodes, loss, rf, lat), (nodes, loss, other, lat))
        ok.append((lat, (chosen == rf) if apart else None))
        parts.append(f"{lat:g} ms: RF {rf} {by_rf[rf]:.0f}, RF {other} {by_rf[other]:.0f}" + note)
    return ok, parts


def rf2_worst_at_high_loss(means: Means, nodes: int, se: Errors = NO_ERRORS) -> tuple[str, str]:
    losses = _losses(means, nodes)
    if not losses:
        return "cannot tell (no cells for it)", ""
    ok, parts = _ranked(means, se, nodes, losses[-1], 2, max)
    return _verdict(ok), f"{losses[-1]:g} % loss, worst: " + "; ".join(parts)


def rf2_similar_at_lower_loss(means: Means, nodes: int) -> tuple[str, str]:
    held: dict[float, bool] = {}
    parts: list[str] = []
    for loss in _losses(means, nodes)[:-1]:
        for lat, by_rf in _grid(means, nodes, loss).items():
            others = [v for rf, v in by_rf.items() if rf >= 3]
            if 2 not in by_rf or not others:
                continue
            excess = by_rf[2] / float(np.mean(others)) - 1
            held[loss] = held.get(loss, True) and abs(excess) <= SIMILAR
            parts.append(f"{loss:g} %/{lat:g} ms {100 * excess:+.0f} %")
    if not held:
        return "cannot tell (no cells for it)", ""
    good = [loss for loss, ok in held.items() if ok]
    verdict = (
        "holds"
        if len(good) == len(held)
        else "does not hold"
        if not good
        else f"holds only at {', '.join(f'{x:g}' for x in good)} % loss"
    )
    return verdict, "RF 2 against the mean of RF >= 3: " + ", ".join(parts)


def _slopes(means: Means, nodes: int, loss: float) -> dict[int, float]:
    series: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for lat, by_rf in _grid(means, nodes, loss).items():
        for rf, v in by_rf.items():
            series[rf].append((lat, v))
    return {
        rf: median_line_slope([p[0] for p in pts], [p[1] for p in pts])
        for rf, pts in sorted(series.items())
        if len(pts) >= 2
    }


def rf2_steepest_at_high_loss(means: Means, nodes: int) -> tuple[str, str]:
    losses = _losses(means, nodes)
    if not losses:
        return "cannot tell (no cells for it)", ""
    s = _slopes(means, nodes, losses[-1])
    if 2 not in s or len(s) < 2:
        return "cannot tell (fewer than two latencies >= 10 ms)", ""
    steepest = max(s, key=lambda rf: s[rf])
    text = ", ".join(f"RF {rf} {v:.2f}" for rf, v in s.items())
    return ("holds" if steepest == 2 else "does not hold"), f"median-line slopes: {text}"


def rf5_best_at_high_loss(means: Means, nodes: int, se: Errors = NO_ERRORS) -> tuple[str, str]:
    losses = _losses(means, nodes)
    if not losses:
        return "cannot tell (no cells for it)", ""
    ok, parts = _ranked(means, se, nodes, losses[-1], nodes, min)
    return _verdict(ok), f"{losses[-1]:g} % loss, best: " + "; ".join(parts)


def rf1_best_at_low_loss(means: Means, nodes: int, se: Errors = NO_ERRORS) -> tuple[str, str]:
    losses = _losses(means, nodes)
    if not losses:
        return "cannot tell (no cells for it)", ""
    ok, parts = _ranked(means, se, nodes, losses[0], 1, min)
    return _verdict(ok), f"{losses[0]:g} % loss, best: " + "; ".join(parts)


def rf1_slope_like_rf345_at_high_loss(means: Means, nodes: int) -> tuple[str, str]:
    losses = _losses(means, nodes)
    if not losses:
        return "cannot tell (no cells for it)", ""
    s = _slopes(means, nodes, losses[-1])
    high = [s[rf] for rf in (3, 4, 5) if rf in s]
    if 1 not in s or not high:
        return "cannot tell (no RF 1 or RF >= 3 slopes)", ""
    diff = s[1] / float(np.mean(high)) - 1
    return (
        "holds" if abs(diff) <= SIMILAR else "does not hold",
        f"RF 1 slope {s[1]:.2f} vs RF 3-5 mean {np.mean(high):.2f} ({100 * diff:+.0f} %)",
    )


def rf3_same_across_node_counts(means: Means, nodes: int) -> tuple[str, str]:
    counts = sorted({k[0] for k in means if k[2] == 3})
    if len(counts) < 2:
        return "cannot tell (needs two or more node counts)", ""
    ok, worst = [], (0.0, 0.0, 0.0)
    for loss in sorted({k[1] for k in means}):
        for lat in sorted({k[3] for k in means if k[3] >= MIN_LATENCY_MS}):
            vals = [means[(n, loss, 3, lat)] for n in counts if (n, loss, 3, lat) in means]
            if len(vals) < 2:
                continue
            sd = float(np.std(vals, ddof=1))
            ok.append((lat, sd < STD_CLAIM_MS))
            worst = max(worst, (sd, loss, lat))
    verdict = "holds" if ok and all(y for _, y in ok) else "does not hold" if ok else "cannot tell"
    return verdict, (
        f"nodes {', '.join(map(str, counts))}: worst std {worst[0]:.2f} ms "
        f"({worst[1]:g} %, {worst[2]:g} ms); claim < {STD_CLAIM_MS:g} ms"
    )


def rf345_similar(means: Means, nodes: int) -> tuple[str, str]:
    ok, worst = [], (0.0, 0.0, 0.0)
    for loss in _losses(means, nodes):
        for lat, by_rf in _grid(means, nodes, loss).items():
            vals = [by_rf[rf] for rf in (3, 4, 5) if rf in by_rf]
            if len(vals) < 2:
                continue
            spread = (max(vals) - min(vals)) / float(np.mean(vals))
            ok.append((lat, spread <= SIMILAR))
            worst = max(worst, (spread, loss, lat))
    if not ok:
        return "cannot tell (needs two of RF 3-5)", ""
    verdict = "holds" if all(y for _, y in ok) else "does not hold"
    return (
        verdict,
        f"widest spread of RF 3-5: {100 * worst[0]:.0f} % ({worst[1]:g} %, {worst[2]:g} ms)",
    )


def phi_orders_loss_sensitivity(means: Means, nodes: int, cl: str) -> tuple[str, str]:
    losses = _losses(means, nodes)
    if len(losses) < 2:
        return "cannot tell (needs two losses)", ""
    low, high = _grid(means, nodes, losses[0]), _grid(means, nodes, losses[-1])
    excess: dict[int, list[float]] = defaultdict(list)
    for lat, by_rf in high.items():
        for rf, v in by_rf.items():
            if rf >= 2 and rf in low.get(lat, {}):
                excess[rf].append(v - low[lat][rf])
    rfs = sorted(excess)
    if len(rfs) < 2:
        return "cannot tell (fewer than two RFs >= 2)", ""
    phis = [float(phi_mod.phi(nodes, rf, cl)) for rf in rfs]
    added = [float(np.mean(excess[rf])) for rf in rfs]
    rho, p = spearman_test(phis, added)
    verdict = (
        (
            "holds"
            if p < SIGNIFICANT_P
            else f"cannot tell (the order holds, but {len(rfs)} RFs cannot make it "
            f"significant: the smallest p is {smallest_spearman_p(len(rfs)):.2g})"
        )
        if rho >= 0.999
        else "cannot tell"
        if math.isnan(rho)
        else "holds only in part"
        if rho >= 0.5
        else "does not hold"
    )
    text = ", ".join(
        f"RF {rf} φ {p:.2f} +{a:.0f} ms" for rf, p, a in zip(rfs, phis, added, strict=True)
    )
    return (
        verdict,
        f"RTT {losses[-1]:g} % loss adds over {losses[0]:g} %: {text}; Spearman {rho:+.2f} "
        f"(p = {p:.2g}, {len(rfs)} RFs)",
    )


CLAIMS: list[tuple[str, str, str, Callable[..., tuple[str, str]]]] = [
    ("5.1a", "5.1", "RF 2 is the worst RF under high packet loss", rf2_worst_at_high_loss),
    (
        "5.1b",
        "5.1",
        "RF 2 performs like the others under low and medium loss",
        rf2_similar_at_lower_loss,
    ),
    (
        "5.1c",
        "5.1",
        "RF 2's median line is steeper than any other RF's (high loss)",
        rf2_steepest_at_high_loss,
    ),
    ("5.2", "5.2", "RF 5 is the best RF of 5 nodes under high loss", rf5_best_at_high_loss),
    ("5.3a", "5.3", "RF 1 is best under low loss", rf1_best_at_low_loss),
    (
        "5.3b",
        "5.3",
        "under high loss RF 1's slope is similar to RF 3-5's",
        rf1_slope_like_rf345_at_high_loss,
    ),
    (
        "5.4",
        "5.4",
        "RF 3's mean RTT varies < 1.5 ms (std) across 3, 4 and 5 nodes",
        rf3_same_across_node_counts,
    ),
    ("5.5", "5.5", "RF 3, 4 and 5 perform similarly (within 10 %)", rf345_similar),
    (
        "6",
        "6",
        "the higher φ, the more packet loss adds to the RTT (RF >= 2)",
        phi_orders_loss_sensitivity,
    ),
]


RANKING = ("5.1a", "5.2", "5.3a")  # claims that rank RFs: told apart by standard errors


def check(
    measured: Means,
    predicted: Means,
    what_if: Means,
    cl: str = "LOCAL_QUORUM",
    errors: Errors = NO_ERRORS,
    errors_of: str = "",
) -> list[dict[str, Any]]:
    """Every claim for every node count, on the measurements (``errors``: the standard
    errors of their means), on the model's predictions of the same cells, and (for node
    counts and losses not measured) on its what-if grid. ``errors_of``: what those errors
    measure, said beside each ranking verdict ("within one run": a rerun may differ by
    more)."""
    out = []
    node_counts = sorted({k[0] for k in measured} | {k[0] for k in what_if})
    for cid, section, text, fn in CLAIMS:
        if cid == "5.2":  # a claim about 5 nodes only
            counts = [5] if 5 in node_counts else []
        else:
            counts = [0] if cid == "5.4" else node_counts
        for n in counts:
            args = (n, cl) if cid == "6" else (n,)
            row: dict[str, Any] = {"id": cid, "section": section, "claim": text, "nodes": n or None}
            for name, means in (("measured", measured), ("model", predicted), ("what_if", what_if)):
                ranked = cid in RANKING and name == "measured"
                verdict, numbers = fn(means, *args, *((errors,) if ranked else ()))
                if ranked and errors_of and numbers:
                    numbers += f" [standard errors {errors_of}]"
                row[name] = {"verdict": verdict, "numbers": numbers}
            out.append(row)
    return out


def format_text(rows: list[dict[str, Any]]) -> str:
    lines = [
        "The paper's claims (sections 5.1-5.5, 6): measured / the model on the same cells / "
        "the model's what-if grid (3-5 nodes, the paper's losses)"
    ]
    for r in rows:
        where = f", {r['nodes']} nodes" if r["nodes"] else ""
        lines.append(f"[{r['id']}{where}] {r['claim']}")
        for name in ("measured", "model", "what_if"):
            v = r[name]
            if v["verdict"].startswith("cannot tell") and name != "measured":
                continue
            numbers = f" — {v['numbers']}" if v["numbers"] else ""
            lines.append(f"    {name:<8} {v['verdict']}{numbers}")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    from common.command import not_a_command

    sys.exit(
        not_a_command(
            "analysis.claims", "its verdicts are in `edgetb report DIR` and `edgetb model DIR`"
        )
    )
