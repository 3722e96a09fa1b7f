"""The paper's claims are computed once (``analysis.claims.from_results``) and shown with
the same numbers by compare, model, the report's claims table and its pages; a claim's
verdict comes from its 95 % interval (issue 43, item 2)."""

import html
import json
import math
import re

import numpy as np
import pytest

from analysis import claims, report
from analysis import compare as compare_mod
from analysis import model as model_cli
from analysis.findings import MIN_LATENCY_MS
from analysis.results import load
from analysis.stats import std_across_nodes
from analysis.synthetic import make_store, paper_like


def _unequal_rf3(n, rf, lat, loss):  # RF 3 a little slower on 5 nodes: a 5.4 to compute
    return paper_like(n, rf, lat, loss) + (1.5 if rf == 3 and n == 5 else 0.0)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A synthetic store (no real one here has a grid the claims need): 3 and 5 nodes,
    three losses, 60 writes a cell, the analysis commands run over it as a user would."""
    d = make_store(tmp_path_factory.mktemp("claims"), nodes=(3, 5), losses=(0.5, 2.5, 7.5),
                   latencies=(0, 50, 100), writes=60, sd_ms=6.0, mean_ms=_unequal_rf3)  # fmt: skip
    assert compare_mod.main([str(d), "--no-report"]) == 0
    assert model_cli.main([str(d), "--no-report"]) == 0
    report.write_report(load(d))
    return d


def _lines(row: dict) -> str:
    """A claim as the text outputs print it: its label line and its measured line."""
    return f"{claims.label(row)} {row['claim']}\n    measured {claims.claim_line(row)}"


def test_each_claim_shows_the_same_numbers_everywhere(store):
    out = store / "analysis"
    compared = json.loads((out / "compare.json").read_text())
    modelled = json.loads((out / "model.json").read_text())
    compare_txt, model_txt = (out / "compare.txt").read_text(), (out / "model.txt").read_text()
    page = (store / "report.html").read_text()
    table = page[page.index("<table class='claims'>") :].split("</table>")[0]
    by_model = {(r["id"], r["nodes"]): r for r in modelled["claims"]}
    by_compare = {(r["id"], r["nodes"]): r for r in compared["claims"]}
    assert set(by_model) >= set(by_compare) and len(by_compare) >= 9
    shown_by_compare = 0
    for key, row in by_compare.items():
        # the one computation: the same verdict, numbers, value and interval in both files
        assert row["measured"] == by_model[key]["measured"], key
        measured = row["measured"]
        # the report's claims table: the verdict, its numbers on hover and under it
        cell = (f"<td class='v' title='{html.escape(measured['numbers'])}'>"
                f"{html.escape(measured['verdict'])}</td>")  # fmt: skip
        assert cell in table, key
        assert html.escape(_lines(row)) in page, key
        assert _lines(row) in model_txt, key
        if row["id"] in compare_mod.SHOWN_CLAIMS and measured["numbers"]:
            assert _lines(row) in compare_txt, key  # and so in the report's copy of it
            assert html.escape(_lines(row)) in page[page.index("<h2>Measured RTT vs φ") :]
            shown_by_compare += 1
    assert shown_by_compare >= 2  # [5.4] and [6] at least once
    # the figures behind [5.4] as the report's spread table shows them (per loss, RF 3
    # at >= 10 ms, as measured): the claim shows the worst with its means' noise taken
    # out, so at most the table's largest
    (rf3,) = [r["measured"] for r in compared["claims"] if r["id"] == "5.4"]
    cells = load(store).cells
    spread = [v["std"] for loss in (0.5, 2.5, 7.5)
              for (rf, lat), v in std_across_nodes(cells, loss).items()
              if rf == 3 and lat >= MIN_LATENCY_MS]  # fmt: skip
    assert 0 <= rf3["value"] <= max(spread) + 1e-9
    assert f"worst std {rf3['value']:.2f} ms" in rf3["numbers"]
    section = page[page.index("(section 5.4)</h2>") :].split("</table>")[0]
    assert f"<td>{max(spread):.2f}</td>" in section
    # a p99 of 60 writes is marked as such, never an error of the model
    assert "p99 of 60 writes: indicative" in model_txt and "ind." in model_txt
    assert "p99 of 60 writes: indicative" in page
    assert all(math.isnan(g["mare_p99"]) for g in modelled["groups"])


def test_a_claim_whose_interval_covers_the_claim_is_cannot_tell():
    # [5.1b] RF 2 11 % above RF 3-5 at 0.5 % loss: past the 10 % the claim allows, but with
    # standard errors of 5 ms on means near 100 ms the 95 % interval of that excess spans
    # roughly 0-22 %: inside and outside 10 %. Not "does not hold"; with errors of 0.1 ms
    # it is one
    def rf2_above(n, rf, lat, loss):
        return (10 + lat) * (1.11 if rf == 2 else 1.0)

    means = {(5, loss, rf, lat): rf2_above(5, rf, lat, loss)
             for loss in (0.5, 7.5) for rf in range(1, 6) for lat in (50.0, 100.0)}  # fmt: skip
    wide, narrow = dict.fromkeys(means, 5.0), dict.fromkeys(means, 0.1)
    row = lambda se: next(  # noqa: E731
        r for r in claims.check(means, {}, {}, "LOCAL_QUORUM", se) if r["id"] == "5.1b"
    )
    found = row(wide)["measured"]
    assert found["verdict"].startswith("cannot tell"), found
    assert found["low"] < claims.SIMILAR < found["high"]
    assert re.search(r"\+11 % \[[+-]\d+, \+\d+\]", found["numbers"]), found["numbers"]
    assert row(narrow)["measured"]["verdict"] == "does not hold"
    assert row({})["measured"]["verdict"] == "does not hold"  # exact (the model's) means
    # [5.4] a std of 2 ms across node counts (claim: < 1.5 ms) from means whose errors
    # are as large: cannot tell; with small errors it does not hold
    rf3 = {(n, 0.5, 3, 50.0): 100.0 + d for n, d in ((3, -2.0), (4, 0.0), (5, 2.0))}
    found = claims.rf3_same_across_node_counts(rf3, 0, dict.fromkeys(rf3, 2.0))
    assert found.verdict.startswith("cannot tell") and found.value == pytest.approx(0.0)
    assert claims.rf3_same_across_node_counts(rf3, 0, dict.fromkeys(rf3, 0.05)).verdict == (
        "does not hold"
    )


def test_equal_means_with_noise_at_many_points_rarely_fail_a_spread_claim():
    # [5.4] and [5.5] true at every point (equal means), each mean off by its standard
    # error, 3 losses x 10 latencies: the std of noisy means is inflated by the noise and
    # one point of 30 is past its own 2.5 % by chance; neither may turn into "does not
    # hold" more than the 2.5 % the claims allow over all their points (from a review:
    # the first version said so in 92 of 100 draws at 1 ms errors)
    rng = np.random.default_rng(7)
    failed = {"5.4": 0, "5.5": 0}
    points = [(loss, float(lat)) for loss in (0.5, 2.5, 7.5) for lat in range(10, 101, 10)]
    for _ in range(100):
        rf3 = {
            (n, loss, 3, lat): 100 + rng.normal(0, 1.0) for n in (3, 4, 5) for loss, lat in points
        }
        found = claims.rf3_same_across_node_counts(rf3, 0, dict.fromkeys(rf3, 1.0))
        failed["5.4"] += found.verdict == "does not hold"
        high = {
            (5, loss, rf, lat): 100 + rng.normal(0, 8.0) for rf in (3, 4, 5) for loss, lat in points
        }
        found = claims.rf345_similar(high, 5, dict.fromkeys(high, 8.0))
        failed["5.5"] += found.verdict == "does not hold"
    assert failed["5.4"] <= 6 and failed["5.5"] <= 6, failed
