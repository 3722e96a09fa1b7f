"""The paper's published curves beside measured ones (analysis.paper): read from the
digitized file, matched to measured points at the same nodes, loss, RF and latency,
their slopes and differences computed, and drawn."""

import math

from analysis import paper


def _stats(shift_ms: float, half_ci: float, rfs=(1, 2, 3, 4, 5), skip=()):
    """point_stats-like entries at every Figure 2 point (5 nodes, 7.5 % loss), each the
    published mean plus ``shift_ms``."""
    out = {}
    for c in paper.curves():
        if c.figure != "fig2" or c.rfs[0] not in rfs:
            continue
        for x, y in c.points:
            if (c.rfs[0], x) in skip:
                continue
            m = y + shift_ms
            out[(5, 7.5, c.rfs[0], x)] = {"mean": m, "ci_low": m - half_ci, "ci_high": m + half_ci}
    return out


def test_the_published_curves_are_read_whole():
    curves = paper.curves()
    assert sum(len(c.points) for c in curves) == 100  # every data line of the file
    labels = {(c.figure, c.nodes, c.loss_pct, c.label) for c in curves}
    assert ("fig2", 5, 7.5, "RF 2") in labels and ("fig3", 5, 0.5, "RF 3-5") in labels
    assert ("fig4", None, 7.5, "RF 3-5, every node count") in labels
    fig2_rf2 = next(c for c in curves if c.figure == "fig2" and c.rfs == (2,))
    assert fig2_rf2.points[0] == (0.0, 52.5) and fig2_rf2.points[-1] == (100.0, 334.0)


def test_measured_curves_are_compared_slope_by_slope():
    rows = {(r["figure"], r["curve"]): r for r in paper.compare(_stats(2.0, 1.5))}
    rf2 = rows[("fig2", "RF 2")]
    assert rf2["latencies"] == 11 and rf2["median_diff_ms"] == 2.0
    assert math.isclose(rf2["paper_slope"], rf2["measured_slope"])  # a shift, not a tilt
    assert rf2["within_ci"] == 11  # 2 ms off: inside a 1.5 ms CI widened by the 3 ms
    far = {(r["figure"], r["curve"]): r for r in paper.compare(_stats(6.0, 1.5))}
    assert far[("fig2", "RF 2")]["within_ci"] == 0 and far[("fig2", "RF 2")]["max_abs_diff_ms"] == 6
    # Figure 4 at 7.5 %: the mean of RF 3-5 at every node count measured (5 here), no CI
    avg = rows[("fig4", "RF 3-5, every node count")]
    assert avg["latencies"] == 11 and avg["within_ci"] is None
    assert ("fig3", "RF 1") not in rows  # 0.5 % loss was not measured


def test_an_averaged_point_missing_one_of_its_rfs_is_left_out():
    stats_ = _stats(0.0, 1.0, skip={(4, 50.0)})
    stats_[(5, 7.5, 3, 60.0)]["mean"] = float("nan")  # no write succeeded there
    (curve,) = [c for c in paper.curves() if c.figure == "fig4" and c.loss_pct == 7.5]
    got = paper.measured(curve, stats_)
    assert 50.0 not in got and 60.0 not in got and 40.0 in got
    rf3, rf4, rf5 = (stats_[(5, 7.5, rf, 40.0)]["mean"] for rf in (3, 4, 5))
    assert math.isclose(got[40.0]["mean"], (rf3 + rf4 + rf5) / 3)


def test_the_table_and_the_figures_name_the_paper(tmp_path):
    stats_ = _stats(2.0, 1.5)
    table = paper.format_table(paper.compare(stats_))
    assert "Loganathan" in table and "fig2" in table.splitlines()[1]
    assert "no measured curve" in paper.format_table(paper.compare({}))
    made = {m["name"]: m for m in paper.figures(stats_, tmp_path)}
    assert set(made) == {"paper_fig2_n5_loss7.5", "paper_fig4_nall_loss7.5"}
    assert made["paper_fig2_n5_loss7.5"]["series"] == 5
    svg = (tmp_path / "paper_fig2_n5_loss7.5.svg").read_text()
    assert "RF 2: paper (fig2)" in svg and "RF 2: measured" in svg
