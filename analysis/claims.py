"""The seed paper's claims (sections 5.1-5.5 and 6) checked against measurements and
against the model: the one computation of each claim's figures, which ``analysis.compare``,
``analysis.model``, the report's claims table and its pages all read (``from_results``).

Each claim is a function of mean RTTs keyed (nodes, loss, rf, latency), so the same test
runs on what was measured and on what ``model.rtt`` predicts for the same cells;
claims about node counts or losses a run did not measure are checked on the model's
what-if grid only (the service time of the run's 0 ms cells, or 5 ms). Each gives a
``Finding``: its verdict, the numbers behind it, and its statistic with a 95 % interval
where the means have standard errors (measurements; the model's means are exact). The
verdict comes from the interval: "does not hold" only where the interval excludes what
the claim says, "holds" where the interval lies where the claim says, "cannot tell"
otherwise (or where the data a claim needs is missing). Claims that rank RFs tell two
means apart beyond APART_SE standard errors of their difference; claims about a spread,
a ratio or a slope take a parametric bootstrap of the means (each drawn from a normal of
its standard error, seeded: the same numbers on every call).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import phi as phi_mod
from .findings import (
    NO_ERRORS,
    SIMILAR,
    Errors,
    Finding,
    Means,
    above,
    ci_text,
    draws,
    grid,
    interval,
    losses_of,
    none,
    one,
    rank_finding,
    ranked,
    se_of,
    slope_draws,
    verdict_over,
    within,
)
from .spread_claims import rf3_same_across_node_counts, rf345_similar
from .stats import (
    APART_SE,
    SIGNIFICANT_P,
    points,
    smallest_spearman_p,
    spearman_test,
    t95,
)

if TYPE_CHECKING:
    from .results import Results

NORMAL95 = 1.959964  # the two-sided 95 % normal quantile


def rf2_worst_at_high_loss(means: Means, nodes: int, se: Errors = NO_ERRORS) -> Finding:
    losses = losses_of(means, nodes)
    if not losses:
        return none()
    ok, parts, margin = ranked(means, se, nodes, losses[-1], 2, max)
    return rank_finding(ok, parts, margin, f"{losses[-1]:g} % loss, worst: ")


def rf2_similar_at_lower_loss(means: Means, nodes: int, se: Errors = NO_ERRORS) -> Finding:
    """RF 2's mean against the mean of RF >= 3's, per lower loss and latency: similar
    where the 95 % interval of the excess lies within SIMILAR, not where it lies outside."""
    held: dict[float, bool | None] = {}
    parts: list[str] = []
    worst: tuple[float, float, float | None, float | None] | None = None
    for loss in losses_of(means, nodes)[:-1]:
        for lat, by_rf in grid(means, nodes, loss).items():
            others = [(nodes, loss, rf, lat) for rf in by_rf if rf >= 3]
            if 2 not in by_rf or not others:
                continue
            d = draws(means, se, [(nodes, loss, 2, lat), *others])
            value, low, high = interval(d[:, 0] / d[:, 1:].mean(axis=1) - 1)
            ok = within(value, low, high, SIMILAR)
            before = held.get(loss, True)
            held[loss] = False if ok is False or before is False else (ok and before)
            if worst is None or abs(value) > abs(worst[0]):
                worst = (value, lat, low, high)
            parts.append(
                f"{loss:g} %/{lat:g} ms {100 * value:+.0f} %{ci_text(low, high, '+.0f', 100)}"
            )
    if not held or worst is None:
        return none()
    verdict = verdict_over(list(held.items()), "at", "% loss")
    ci = " (95 % intervals)" if any(p.endswith("]") for p in parts) else ""
    return Finding(
        verdict, f"RF 2 against the mean of RF >= 3{ci}: " + ", ".join(parts),
        worst[0], worst[2], worst[3], "fraction",
    )  # fmt: skip


def rf2_steepest_at_high_loss(means: Means, nodes: int, se: Errors = NO_ERRORS) -> Finding:
    losses = losses_of(means, nodes)
    if not losses:
        return none()
    s = slope_draws(means, se, nodes, losses[-1])
    if 2 not in s or len(s) < 2:
        return none("fewer than two latencies >= 10 ms")
    steepest_other = np.max([v for rf, v in s.items() if rf != 2], axis=0)
    value, low, high = interval(s[2] - steepest_other)
    text = ", ".join(f"RF {rf} {v[0]:.2f}" for rf, v in s.items())
    return Finding(
        one(above(value, low, high)),
        f"median-line slopes: {text}; RF 2's lead {value:+.2f}{ci_text(low, high, '+.2f')}",
        value, low, high, "ms/ms",
    )  # fmt: skip


def rf5_best_at_high_loss(means: Means, nodes: int, se: Errors = NO_ERRORS) -> Finding:
    losses = losses_of(means, nodes)
    if not losses:
        return none()
    ok, parts, margin = ranked(means, se, nodes, losses[-1], nodes, min)
    return rank_finding(ok, parts, margin, f"{losses[-1]:g} % loss, best: ")


def rf1_best_at_low_loss(means: Means, nodes: int, se: Errors = NO_ERRORS) -> Finding:
    losses = losses_of(means, nodes)
    if not losses:
        return none()
    ok, parts, margin = ranked(means, se, nodes, losses[0], 1, min)
    return rank_finding(ok, parts, margin, f"{losses[0]:g} % loss, best: ")


def rf1_slope_like_rf345_at_high_loss(means: Means, nodes: int, se: Errors = NO_ERRORS) -> Finding:
    losses = losses_of(means, nodes)
    if not losses:
        return none()
    s = slope_draws(means, se, nodes, losses[-1])
    high = [s[rf] for rf in (3, 4, 5) if rf in s]
    if 1 not in s or not high:
        return none("no RF 1 or RF >= 3 slopes")
    mean_high = np.mean(high, axis=0)
    value, low, hi = interval(s[1] / mean_high - 1)
    return Finding(
        one(within(value, low, hi, SIMILAR)),
        f"RF 1 slope {s[1][0]:.2f} vs RF 3-5 mean {mean_high[0]:.2f} "
        f"({100 * value:+.0f} %{ci_text(low, hi, '+.0f', 100)})",
        value, low, hi, "fraction",
    )  # fmt: skip


def _phi_pairs(rfs, phis, added, errs) -> tuple[list[str], list[str], list[str]]:  # noqa: ANN001
    """Every two RFs of distinct φ: those whose added RTT is ordered as φ's beyond
    APART_SE standard errors of their difference, those ordered against it (exact means:
    a tie too), and those too close to tell."""
    agree, against, close = [], [], []
    for i in range(len(rfs)):
        for j in range(len(rfs)):
            if phis[i] <= phis[j]:
                continue
            diff = added[i] - added[j]  # i has the higher φ: the claim says diff > 0
            err = math.hypot(errs[i], errs[j])
            pair = f"RF {rfs[j]} and RF {rfs[i]}"
            if diff > APART_SE * err and (err > 0 or diff > 0):
                agree.append(pair)
            elif diff < -APART_SE * err or (err == 0 and diff <= 0):
                against.append(pair)
            else:
                close.append(pair)
    return agree, against, close


def phi_orders_loss_sensitivity(
    means: Means, nodes: int, cl: str, se: Errors = NO_ERRORS
) -> Finding:
    """Spearman's ρ of φ against the RTT the highest loss adds over the lowest (mean over
    the latencies >= MIN_LATENCY_MS measured at both), RF >= 2. Holds where the order is
    φ's, significant, and every two RFs told apart; does not hold (in part) only where
    two RFs are ordered against φ beyond APART_SE standard errors; cannot tell otherwise."""
    losses = losses_of(means, nodes)
    if len(losses) < 2:
        return none("needs two losses")
    low, high = grid(means, nodes, losses[0]), grid(means, nodes, losses[-1])
    excess: dict[int, list[float]] = defaultdict(list)
    var: dict[int, list[float]] = defaultdict(list)
    for lat, by_rf in high.items():
        for rf, v in by_rf.items():
            if rf >= 2 and rf in low.get(lat, {}):
                excess[rf].append(v - low[lat][rf])
                a, b = (nodes, losses[-1], rf, lat), (nodes, losses[0], rf, lat)
                var[rf].append(se_of(se, a) ** 2 + se_of(se, b) ** 2)
    rfs = sorted(excess)
    if len(rfs) < 2:
        return none("fewer than two RFs >= 2")
    phis = [float(phi_mod.phi(nodes, rf, cl)) for rf in rfs]
    added = [float(np.mean(excess[rf])) for rf in rfs]
    errs = [math.sqrt(sum(var[rf])) / len(var[rf]) for rf in rfs]
    rho, p = spearman_test(phis, added)
    agree, against, close = _phi_pairs(rfs, phis, added, errs)
    if math.isnan(rho):
        verdict = "cannot tell"
    elif rho >= 0.999 and not close:
        verdict = (
            "holds"
            if p < SIGNIFICANT_P
            else f"cannot tell (the order holds, but {len(rfs)} RFs cannot make it "
            f"significant: the smallest p is {smallest_spearman_p(len(rfs)):.2g})"
        )
    elif not against:
        verdict = (
            f"cannot tell ({', '.join(close)} within {APART_SE:g} standard errors of each other)"
        )
    elif rho >= 0.5:
        verdict = "holds only in part"
    else:
        verdict = "does not hold"
    ses = any(e > 0 for e in errs)
    text = ", ".join(
        f"RF {rf} φ {ph:.2f} +{a:.0f}" + (f" ± {e:.1f}" if ses else "") + " ms"
        for rf, ph, a, e in zip(rfs, phis, added, errs, strict=True)
    )
    return Finding(
        verdict,
        f"RTT {losses[-1]:g} % loss adds over {losses[0]:g} %: {text}; Spearman {rho:+.2f} "
        f"(p = {p:.2g}, {len(rfs)} RFs)",
        rho, None, None, "Spearman ρ",
    )  # fmt: skip


CLAIMS: list[tuple[str, str, str, Callable[..., Finding]]] = [
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
KINDS = ("measured", "model", "what_if")


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
    counts and losses not measured) on its what-if grid: each a ``Finding`` as a dict.
    ``errors_of``: what those errors measure, said beside each measured verdict
    ("within one run": a rerun may differ by more)."""
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
            for name, means in zip(KINDS, (measured, predicted, what_if), strict=True):
                found = fn(means, *args, errors if name == "measured" else NO_ERRORS)
                row[name] = found.to_dict()
                has_ci = found.low is not None or cid in RANKING
                if name == "measured" and errors_of and found.numbers and has_ci:
                    row[name]["numbers"] += f" [standard errors {errors_of}]"
            out.append(row)
    return out


def measured_inputs(results: Results) -> tuple[dict, dict, str, str]:
    """The measured means of ``results`` per grid point, their standard errors, the
    write level, and what the errors measure (``check``'s ``errors_of``)."""
    stats_ = points(results.cells)
    levels = sorted({c["cl"] for c in results.cells})
    over = {st["ci_over"] for st in stats_.values()}
    errors_of = (
        "within one run: a rerun may differ by more"
        if over == {"writes"}
        else ("over repetitions" if over == {"repetitions"} else "over repetitions where several")
    )
    return (
        {k: st["mean"] for k, st in stats_.items()},
        {k: _claim_se(st) for k, st in stats_.items()},
        levels[0] if levels else "LOCAL_QUORUM",
        errors_of,
    )


def _claim_se(st: Mapping[str, Any]) -> float:
    """A grid point's standard error as the claims use it (normal draws, APART_SE = 2):
    over k repetitions widened by t95(k - 1) / 1.96, so that 2 of them are a 95 % bound
    with k - 1 degrees of freedom (3 repetitions: 4.3 standard errors of the mean)."""
    if st["ci_over"] == "repetitions" and st["repetitions"] > 1:
        return st["se"] * t95(st["repetitions"] - 1) / NORMAL95
    return st["se"]


def from_results(
    results: Results, predicted: Means | None = None, what_if: Means | None = None
) -> list[dict[str, Any]]:
    """The paper's claims on ``results``: the one computation of each claim's figures
    (``check``) that compare, model and the report read. Without the model's means
    (``predicted``, ``what_if``) only the measured findings are filled in."""
    measured, errors, cl, errors_of = measured_inputs(results)
    return check(measured, predicted or {}, what_if or {}, cl, errors, errors_of)


def claim_line(row: Mapping[str, Any], name: str = "measured") -> str:
    """One claim's verdict and numbers as every page prints them."""
    v = row[name]
    numbers = f" — {v['numbers']}" if v["numbers"] else ""
    return f"{v['verdict']}{numbers}"


def label(row: Mapping[str, Any]) -> str:
    where = f", {row['nodes']} nodes" if row["nodes"] else ""
    return f"[{row['id']}{where}]"


def format_text(rows: list[dict[str, Any]], kinds: Sequence[str] = KINDS) -> str:
    lines = [
        "The paper's claims (sections 5.1-5.5, 6): measured / the model on the same cells / "
        "the model's what-if grid (3-5 nodes, the paper's losses); [low, high]: 95 % "
        "intervals"
        if len(kinds) > 1
        else "The paper's claims (sections 5.1-5.5, 6) on the measurements; [low, high]: "
        "95 % intervals"
    ]
    for r in rows:
        lines.append(f"{label(r)} {r['claim']}")
        for name in kinds:
            if r[name]["verdict"].startswith("cannot tell") and name != "measured":
                continue
            lines.append(f"    {name:<8} {claim_line(r, name)}")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    from common.command import not_a_command

    sys.exit(
        not_a_command(
            "analysis.claims", "its verdicts are in `edgetb report DIR` and `edgetb model DIR`"
        )
    )
