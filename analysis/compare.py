"""`python -m analysis.compare RESULTS_DIR`: measured RTT against φ's predictions.

For every (nodes, loss): φ per RF; the measured mean RTT per latency; each RF's
least-squares slope of RTT vs latency; its *excess slope* over the same RF at the lowest
loss measured (what loss added per ms of latency), with its standard error; and
Spearman's rank correlation between φ and that excess slope across RFs, with its exact
p-value and a plain verdict on whether φ orders the RFs' excess slopes as the
measurements do. The verdict is firm only where the data can carry it: two RFs whose
excess differs by less than two standard errors are not ordered, and 3 or 4 RFs cannot
make a rank correlation significant (the smallest two-sided p-values are 0.33 and 0.083).
The excess slope is not the paper's section 6 claim ("the higher φ, the more packet loss
adds to the RTT"), which ranks the mean RTT loss adds: that claim and section 5.4's (the
std of RF 3's mean RTT across node counts < 1.5 ms) are printed from
``analysis.claims.from_results``, the same findings the model and the report show.

Prints the comparison and saves it as RESULTS_DIR/analysis/compare.{txt,json}.
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from typing import Any

from common.command import command
from common.errors import ConfigError

from . import claims as claims_mod
from . import phi as phi_mod
from .results import Results, command_parser, open_results, save_text_and_json
from .stats import (
    APART_SE,
    SIGNIFICANT_P,
    mean_rtt,
    repetitions_to_tell,
    slopes,
    smallest_spearman_p,
    spearman_test,
)

SHOWN_CLAIMS = ("5.4", "6")  # the claims about what this comparison shows


def unresolved(rows: list[dict[str, Any]], repetitions: int = 1) -> list[dict[str, Any]]:
    """Neighbours in φ's order (RFs of distinct φ) whose excess slopes differ by less than
    APART_SE standard errors of their difference, each with ``repetitions_needed``:
    how many repetitions of every cell would make that difference APART_SE standard
    errors, if it stays and its standard error shrinks as 1/√repetitions (None: the
    difference is nil or unknown, no number would)."""
    by_phi = sorted(rows, key=lambda r: r["phi"])
    out = []
    for a, b in zip(by_phi, by_phi[1:], strict=False):
        if a["phi"] == b["phi"]:
            continue
        se = math.hypot(a["excess_se"], b["excess_se"])
        diff = abs(b["excess_slope"] - a["excess_slope"])
        if not diff > APART_SE * se:  # NaN: unknown
            need = repetitions_to_tell(diff, se, repetitions)
            out.append(
                {"pair": f"RF {a['rf']} and RF {b['rf']}", "diff": diff, "se": se,
                 "repetitions_needed": need}
            )  # fmt: skip
    return out


def _need(close: list[dict[str, Any]]) -> str:
    if any(not math.isfinite(c["se"]) for c in close):
        return "their standard errors are unknown (a slope over two latencies has none)"
    needs = [c["repetitions_needed"] for c in close]
    if any(n is None for n in needs):
        return "a measured difference between them is nil"
    return (
        f"about {max(needs)} repetitions of each cell might tell them apart (if the "
        f"difference is real and its error shrinks as 1/√repetitions)"
    )


def verdict(rho: float, p: float, count: int, close: list[dict[str, Any]] | None = None) -> str:
    """A plain answer to "does φ order the RFs as the measured excess slope does": "yes" only
    when the order is significant and every two neighbours are told apart; "cannot tell"
    when they are not (naming them, with the repetitions that would resolve it)."""
    if count < 2 or math.isnan(rho):
        return "cannot tell (fewer than two RFs, or no variation)"
    sig = f"exact p = {p:.2g} over {count} RFs"
    if rho >= 0.999:
        if close:
            pairs = ", ".join(c["pair"] for c in close)
            return (
                f"cannot tell: the measured excess slope ranks the RFs as φ does, but {pairs} "
                f"are not {APART_SE:g} standard errors apart; {_need(close)} ({sig})"
            )
        if p >= SIGNIFICANT_P:
            return (
                f"cannot tell: the same order as φ's, but {count} RFs cannot make it "
                f"significant ({sig}; the smallest p of {count} RFs is "
                f"{smallest_spearman_p(count):.2g})"
            )
        return f"yes: φ orders the RFs exactly as the measured excess slope does ({sig})"
    if p >= SIGNIFICANT_P:
        return (
            f"cannot tell: φ's order and the measured excess slope are not significantly "
            f"related ({sig})"
        )
    if rho >= 0.5:
        return f"partly: φ's ordering mostly agrees with the measured excess slope ({sig})"
    if rho > -0.5:
        return f"no: φ's ordering is unrelated to the measured excess slope ({sig})"
    return f"no: the measured excess slope runs opposite to φ ({sig})"


def repetitions(cells: list[dict[str, Any]], nodes: int, losses: tuple[float, ...]) -> int:
    """The fewest repetitions of any grid point of ``nodes`` at ``losses``."""
    count: dict[tuple, int] = defaultdict(int)
    for c in cells:
        if c["nodes"] == nodes and c["loss_pct"] in losses:
            count[(c["loss_pct"], c["rf"], c["latency_ms"])] += 1
    return min(count.values(), default=1)


def compare(results: Results) -> dict[str, Any]:
    cells = results.cells
    if not cells:
        raise ConfigError("no measured cells to compare")
    levels = sorted({c["cl"] for c in cells})
    cl = levels[0]
    means = mean_rtt(cells)
    slope = slopes(cells)
    losses: dict[int, list[float]] = defaultdict(list)
    for n, loss, _rf, _lat in means:
        if loss not in losses[n]:
            losses[n].append(loss)
    groups = []
    for n in sorted(losses):
        low = min(losses[n])
        for loss in sorted(losses[n]):
            rfs = sorted({k[2] for k in means if k[0] == n and k[1] == loss})
            lats = sorted({k[3] for k in means if k[0] == n and k[1] == loss})
            rows = [_rf_row(n, loss, low, rf, lats, means, slope, cl) for rf in rfs]
            group: dict[str, Any] = {
                "nodes": n,
                "loss": loss,
                "base_loss": low,
                "latencies": lats,
                "rfs": rows,
            }
            if loss != low:
                group.update(_correlation(rows, repetitions(cells, n, (low, loss))))
            groups.append(group)
    return {
        "runs": results.run_ids,
        "consistency_level": cl,
        "groups": groups,
        # the measured findings of every claim, as the model and the report show them
        "claims": [
            {k: v for k, v in r.items() if k not in ("model", "what_if")}
            for r in claims_mod.from_results(results)
        ],
    }


def _rf_row(n, loss, low, rf, lats, means, slope, cl) -> dict[str, Any]:  # noqa: ANN001
    """One RF of a (nodes, loss) group: its φ, mean RTT per latency, slope, and the
    slope's excess over the group's lowest loss (with its standard error)."""
    fit = slope.get((n, loss, rf), {})
    base_fit = slope.get((n, low, rf), {})
    s, base = fit.get("ls", math.nan), base_fit.get("ls", math.nan)
    return {
        "rf": rf,
        "phi": float(phi_mod.phi(n, rf, cl)),
        "mean_rtt_ms": {f"{lat:g}": means.get((n, loss, rf, lat)) for lat in lats},
        "slope": s,
        "slope_se": fit.get("se", math.nan),
        "excess_slope": s - base if loss != low else None,
        "excess_se": (
            math.hypot(fit.get("se", math.nan), base_fit.get("se", math.nan))
            if loss != low
            else None
        ),
    }


def _correlation(rows: list[dict[str, Any]], reps: Any) -> dict[str, Any]:
    """Spearman's ρ of φ against the excess slope, with and without RF 1, and verdicts."""
    usable = [r for r in rows if not math.isnan(r["excess_slope"])]
    rho, p = spearman_test([r["phi"] for r in usable], [r["excess_slope"] for r in usable])
    no_rf1 = [r for r in usable if r["rf"] > 1]
    rho2, p2 = spearman_test([r["phi"] for r in no_rf1], [r["excess_slope"] for r in no_rf1])
    return {
        "spearman": rho,
        "spearman_p": p,
        "verdict": verdict(rho, p, len(usable), unresolved(usable, reps)),
        "spearman_without_rf1": rho2,
        "spearman_without_rf1_p": p2,
        "verdict_without_rf1": verdict(rho2, p2, len(no_rf1), unresolved(no_rf1, reps)),
    }


def format_text(data: dict[str, Any]) -> str:
    lines = [
        f"Measured write RTT vs φ ({data['consistency_level']}, round-robin "
        f"coordinators). slope: ms of RTT per ms of one-way latency (least squares);",
        "excess: slope minus the same RF's slope at the lowest loss measured.",
        f"Runs: {', '.join(data['runs'])}",
        "",
    ]
    for g in data["groups"]:
        lats = g["latencies"]
        lines.append(
            f"== {g['nodes']} nodes, loss {g['loss']:g} %"
            + (" (baseline loss)" if g["loss"] == g["base_loss"] else "")
        )
        head = (
            f"{'RF':>3} {'φ':>6} "
            + " ".join(f"{f'{lat:g}ms':>8}" for lat in lats)
            + f" {'slope':>7} {'excess':>7} {'± se':>6}"
        )
        lines.append(head)
        for r in g["rfs"]:
            vals = " ".join(
                f"{r['mean_rtt_ms'][f'{lat:g}']:>8.2f}"
                if r["mean_rtt_ms"][f"{lat:g}"] is not None
                else f"{'-':>8}"
                for lat in lats
            )
            excess = (
                ""
                if r["excess_slope"] is None
                else f"{r['excess_slope']:>7.3f} {r['excess_se']:>6.3f}"
            )
            lines.append(f"{r['rf']:>3} {r['phi']:>6.3f} {vals} {r['slope']:>7.3f} {excess}")
        if "spearman" in g:
            lines.append(
                f"  rank correlation φ vs excess slope: {g['spearman']:+.2f} -> {g['verdict']}"
            )
            lines.append(
                f"  without RF 1 (as the paper argues): "
                f"{g['spearman_without_rf1']:+.2f} -> {g['verdict_without_rf1']}"
            )
        lines.append("")
    shown = [r for r in data.get("claims", []) if r["id"] in SHOWN_CLAIMS]
    if shown:
        lines.append(
            "The paper's claims on these measurements (section 6 ranks the mean RTT loss "
            "adds, not the excess slope above; [low, high]: 95 % intervals; every claim: "
            "edgetb model DIR, or the report):"
        )
        for r in sorted(shown, key=lambda r: r["id"] != "6"):
            lines.append(f"{claims_mod.label(r)} {r['claim']}")
            lines.append(f"    measured {claims_mod.claim_line(r)}")
    return "\n".join(lines)


@command("python -m analysis.compare")
def main(argv: list[str] | None = None) -> int:
    p = command_parser("analysis.compare", "Compare measured RTT with φ's predictions.")
    args = p.parse_args(argv)
    results = open_results(args)
    print(results.describe())
    data = compare(results)
    text = format_text(data)
    print(text)
    txt, js = save_text_and_json(results.output_dir, "compare", text, data)
    print(f"saved: {txt}, {js}")
    if not args.no_report:
        from .report import write_report  # the report shows this comparison: it imports us

        print(f"report: {write_report(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
