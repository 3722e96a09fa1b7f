"""Analysis: φ (Table 1 exact), statistics on hand-computed arrays, plots and comparison
from synthetic stores whose answers are known."""

import csv
import math
import re
from fractions import Fraction

import numpy as np
import pytest

from analysis import compare as compare_mod
from analysis import phi as phi_mod
from analysis import phi_excess, plots, report
from analysis.figures import FIGURES, caption, figure_rank, is_figure
from analysis.results import load
from analysis.stats import (
    cell_stats,
    high_rf_average,
    ls_slope,
    median_line_slope,
    rank,
    slopes,
    spearman,
    std_across_nodes,
    t95,
)
from analysis.synthetic import make_store
from common.errors import ConfigError
from model.consistency import WRITE_LEVELS

# Table 1 of the paper, exactly as printed.
TABLE_1 = {
    (3, 2): 1,
    (3, 3): 0.5,
    (4, 2): 1,
    (4, 3): 0.54,
    (4, 4): 0.66,
    (5, 2): 1,
    (5, 3): 0.56,
    (5, 4): 0.68,
    (5, 5): 0.5,
}


def test_table_1_exactly_as_printed():
    assert phi_mod.paper_table((3, 4, 5)) == TABLE_1


def test_exact_values_and_where_the_paper_truncated():
    assert phi_mod.phi(4, 4) == Fraction(2, 3)  # printed 0.66, rounds to 0.67
    assert phi_mod.phi(5, 3) == Fraction(17, 30)  # printed 0.56, rounds to 0.57
    assert phi_mod.phi(5, 4) == Fraction(41, 60)  # the paper's worked example: 0.68
    assert round(float(phi_mod.phi(4, 4)), 2) != TABLE_1[(4, 4)]
    assert round(float(phi_mod.phi(5, 3)), 2) != TABLE_1[(5, 3)]


@pytest.mark.parametrize("n", range(2, 10))
def test_rf2_is_one_under_local_quorum(n):
    assert phi_mod.phi(n, 2) == 1


@pytest.mark.parametrize("n", range(1, 10))
def test_rf1_needs_a_remote_ack_only_when_coordinated_elsewhere(n):
    assert phi_mod.phi(n, 1) == 1 - Fraction(1, n)


def test_phi_is_a_ratio_for_every_level():
    for level in WRITE_LEVELS:
        for n in range(1, 10):
            for rf in range(1, n + 1):
                try:
                    value = phi_mod.phi(n, rf, level)
                except ConfigError:
                    assert level in ("TWO", "THREE") and rf < {"TWO": 2, "THREE": 3}[level]
                    continue
                assert 0 <= value <= 1, (level, n, rf, value)
    assert phi_mod.phi(5, 5, "ALL") == 1  # every ack needed
    assert phi_mod.phi(5, 5, "ONE") == 0  # the coordinator alone suffices
    assert phi_mod.phi(5, 3, "ONE") == Fraction(2, 5) * Fraction(1, 3)


def test_phi_rejects_impossible_input():
    with pytest.raises(ConfigError):
        phi_mod.phi(3, 4)
    with pytest.raises(ConfigError):
        phi_mod.phi(3, 2, "THREE")
    with pytest.raises(ConfigError):
        phi_mod.phi(3, 2, "SERIAL")


def test_phi_from_measured_coordinators():
    flags = [1] * 2 + [0] * 3  # P_c = 0.4 measured, on 5 nodes RF 2
    value, p_c = phi_mod.phi_measured(5, 2, flags)
    assert p_c == 0.4 and value == pytest.approx(1.0)
    value, p_c = phi_mod.phi_measured(5, 3, [1, 1, 1, 0, 0])  # = RF/n: the model's φ
    assert value == pytest.approx(float(phi_mod.phi(5, 3)))
    value, _ = phi_mod.phi_measured(5, 3, [1, 1, 1, 1, 1])
    assert value == pytest.approx(0.5)


def test_phi_cli_prints_the_table(capsys):
    assert phi_mod.main(["--nodes", "3", "4", "5"]) == 0
    out = capsys.readouterr().out
    assert "0.54" in out and "0.68" in out and "truncate" in out


def test_cell_stats_by_hand():
    s = cell_stats([1.0, 2.0, 3.0, 4.0], errors=1)
    assert s["mean"] == 2.5 and s["median"] == 2.5 and s["n"] == 4 and s["errors"] == 1
    assert s["std"] == pytest.approx(math.sqrt(5 / 3))
    half = 3.1824 * math.sqrt(5 / 3) / 2  # t(0.975, 3 dof)
    assert (s["ci_low"], s["ci_high"]) == pytest.approx((2.5 - half, 2.5 + half), rel=1e-4)
    assert s["p95"] == pytest.approx(3.85)
    assert math.isnan(cell_stats([])["mean"])


def test_slopes_by_hand():
    assert ls_slope([0, 10, 20], [5, 25, 45]) == pytest.approx(2.0)
    assert math.isnan(ls_slope([10, 10], [1, 2]))
    # median-median line: outer thirds (0,10) and (50,60) -> medians (5, 1) and (55, 101)
    x = [0, 10, 20, 30, 50, 60]
    y = [0, 2, 40, 60, 100, 102]
    assert median_line_slope(x, y) == pytest.approx((101 - 1) / (55 - 5))
    # one wild point moves least squares, not the median line
    x = list(range(0, 101, 10))
    y = [2 * v for v in x]
    y[5] += 500
    assert median_line_slope(x, y) == pytest.approx(2.0)
    assert ls_slope(x, y) == pytest.approx(2.0)  # symmetric position: slope unchanged
    y[10] += 500
    assert ls_slope(x, y) > 4 and median_line_slope(x, y) < 3


def test_ranks_and_spearman():
    assert rank([10, 30, 20, 20]) == [1, 4, 2.5, 2.5]
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1)
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))


def cells(*points):
    return [
        {"nodes": n, "rf": rf, "latency_ms": lat, "loss_pct": loss, "rtt_ms": rtts}
        for n, rf, lat, loss, rtts in points
    ]


def test_grouped_statistics_by_hand():
    data = cells(
        (3, 3, 0, 0.5, [10, 12]),
        (4, 3, 0, 0.5, [12, 14]),
        (5, 3, 0, 0.5, [14, 16]),
        (3, 4, 0, 0.5, [99]),
        (5, 4, 0, 0.5, [20]),
        (5, 5, 0, 0.5, [30]),
        (3, 3, 10, 0.5, [31]),
        (3, 3, 20, 0.5, [51]),
    )
    spread = std_across_nodes(data)
    assert spread[(3, 0)]["std"] == pytest.approx(2.0)  # means 11, 13, 15
    avg = high_rf_average(data)
    assert avg[(5, 0.5, 0)] == pytest.approx((15 + 20 + 30) / 3)
    assert avg[(3, 0.5, 0)] == pytest.approx((11 + 99) / 2)
    assert slopes(data)[(3, 0.5, 3)]["ls"] == pytest.approx(2.0)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    directory = tmp_path_factory.mktemp("synthetic")
    return make_store(directory, nodes=(3, 5), losses=(0.5, 7.5), latencies=(0, 50, 100), writes=50)


def test_plots_from_a_synthetic_store(synthetic):
    results = load(synthetic)
    made = {m["name"]: m for m in plots.make_all(results)}
    assert set(made) == {
        "rtt_n3_loss0.5",
        "rtt_n3_loss7.5",
        "rtt_n5_loss0.5",
        "rtt_n5_loss7.5",
        "rtt_cdf_n3_loss0.5",
        "rtt_cdf_n3_loss7.5",
        "rtt_cdf_n5_loss0.5",
        "rtt_cdf_n5_loss7.5",
        "high_rf_n5",  # not high_rf_n3: RF 3 alone is no average of RF 3-5
        "phi_vs_excess",
        "rtt_grid_mean",  # the four (nodes, loss) panels on one page, shared axes
        "rtt_grid_p99",
        # the paper's published curves where this grid has their points: Figure 2 (5
        # nodes, 7.5 %, RF 1-5), Figure 3 (5 nodes, 0.5 %: RF 1, 2 and 3-5); not Figure 4
        # (every node count: RF 4 and 5 were not measured on 3 nodes)
        "paper_fig2_n5_loss7.5",
        "paper_fig3_n5_loss0.5",
    }
    assert made["rtt_grid_mean"]["series"] == made["rtt_grid_p99"]["series"] == 5
    # each is a registered kind (analysis.figures): a caption of its own, a place in the
    # report's order, removed by the next call
    assert all(is_figure(n) and caption(n) != n and figure_rank(n)[0] < len(FIGURES)
               for n in made), [n for n in made if not is_figure(n)]  # fmt: skip
    grid = next(p for p in made["rtt_grid_mean"]["paths"] if p.suffix == ".svg").read_text()
    for n, loss in ((3, 0.5), (3, 7.5), (5, 0.5), (5, 7.5)):
        assert f">{n} nodes, loss {loss:g} %<" in grid
    assert "within-run 95 % CI of the writes (1 repetition)" in grid
    assert made["rtt_n3_loss0.5"]["series"] == 3 and made["rtt_n5_loss7.5"]["series"] == 5
    assert made["rtt_cdf_n3_loss7.5"]["series"] == 3 and made["rtt_cdf_n5_loss0.5"]["series"] == 5
    assert made["high_rf_n5"]["series"] == 2  # one line per loss
    assert made["phi_vs_excess"]["series"] == 2  # (3 nodes, 7.5 %) and (5 nodes, 7.5 %)
    for m in made.values():
        assert sorted(p.suffix for p in m["paths"]) == [".pdf", ".png", ".svg"]
        for path in m["paths"]:
            assert path.stat().st_size > 2000, path
            if path.suffix == ".png":
                assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            if path.suffix == ".pdf":
                assert path.read_bytes()[:5] == b"%PDF-"
    # the legend names each RF as a reader writes it, and says what the model's dots are
    svg = next(p for p in made["rtt_n5_loss7.5"]["paths"] if p.suffix == ".svg").read_text()
    assert all(f">RF {rf}<" in svg for rf in range(1, 6)) and "RF_" not in svg
    assert ">model (same colour)<" in svg
    page = report.write_report(results).read_text()
    assert page.count("<img") == len(made) and "0.54" in page
    # the figures are inside the page (it still shows them when moved), with captions
    assert page.count("src='data:image/png;base64,") == len(made)
    assert "Mean write RTT against one-way latency, 5 nodes, 7.5 % loss" in page
    assert "<figcaption>rtt_n" not in page
    assert "The paper's own curves" in page and "Loganathan" in page
    assert (
        made["paper_fig2_n5_loss7.5"]["series"] == 5
        and made["paper_fig3_n5_loss0.5"]["series"] == 3
    )
    # the page opens with its findings: the paper cited, its claims counted, before
    # any figure
    findings = page[page.index("<h2 id='findings'>") : page.index("<h2>Figures</h2>")]
    assert "Loganathan" in findings and "<table class='claims'>" in findings
    said = re.search(r"<b>(\d+) hold</b>", findings)
    assert said, findings[:500]
    held = int(said.group(1))
    measured = [  # each claim's first verdict: on the measurements
        re.findall(r"<td class='v' title='[^']*'>([^<]*)</td>", row)[0]
        for row in findings.split("<tr>")[2:]
    ]
    assert measured and held == measured.count("holds")
    assert "8 of its published curves were measured" in findings  # paper.txt's rows
    # the paper's claims as a table: a row per claim and node count, three verdicts each
    claims_html = page[page.index("<table class='claims'>") :].split("</table>")[0]
    assert (
        claims_html.count("<tr>") > 9
        and "RF 2 is the worst RF under high packet loss" in claims_html
    )
    assert claims_html.count("<td class='v'") == 3 * (claims_html.count("<tr>") - 1)
    # one summary row per grid point, its numbers those of the stored requests
    from experiments.store.db import Store

    with open(results.output_dir / plots.SUMMARY) as f:
        rows = list(csv.DictReader(f))
    points = {(c["nodes"], c["loss_pct"], c["rf"], c["latency_ms"]) for c in results.cells}
    assert len(rows) == len(points)
    row = next(r for r in rows if (r["nodes"], r["rf"], r["latency_ms"]) == ("5", "4", "50.0"))
    with Store(synthetic, read_only=True) as store:
        cell = f"n5-rf4-l50-p{float(row['loss_pct']):g}-r1"
        rtts = np.asarray(store.rtts_ns("synthetic", cell)) / 1e6
    assert row["writes"] == str(len(rtts)) and row["repetitions"] == "1"
    assert float(row["mean_ms"]) == pytest.approx(rtts.mean(), abs=1e-3)
    assert float(row["p95_ms"]) == pytest.approx(np.percentile(rtts, 95), abs=1e-3)
    assert row["rep_sd_ms"] == ""  # one repetition: no run-to-run spread to show


def test_with_repetitions_the_ci_is_over_them_and_says_so(tmp_path):
    # three runs of each cell, each shifted by a run-to-run offset (sd 3 ms) far larger
    # than the writes' own standard error (2 ms / sqrt(200)): the band must show the former
    make_store(tmp_path, nodes=(3,), losses=(0.5, 7.5), latencies=(0, 100), writes=200,
               repetitions=3, rep_sd_ms=3.0)  # fmt: skip
    results = load(tmp_path)
    made = {m["name"]: m for m in plots.make_all(results)}
    with open(results.output_dir / plots.SUMMARY) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 2 * 3 and {r["repetitions"] for r in rows} == {"3"}
    row = next(
        r for r in rows if (r["rf"], r["latency_ms"], r["loss_pct"]) == ("2", "100.0", "7.5")
    )
    means = [
        float(np.mean(c["rtt_ms"]))
        for c in results.cells
        if (c["rf"], c["latency_ms"], c["loss_pct"]) == (2, 100.0, 7.5)
    ]
    half = t95(2) * np.std(means, ddof=1) / math.sqrt(3)
    assert row["ci_over"] == "repetitions"
    assert float(row["ci_high_ms"]) - float(row["ci_low_ms"]) == pytest.approx(2 * half, abs=2e-3)
    assert float(row["rep_sd_ms"]) == pytest.approx(np.std(means, ddof=1), abs=2e-3)
    assert float(row["predicted_mean_ms"]) > 0  # the model's mean beside the measured one
    svg = next(p for p in made["rtt_n3_loss7.5"]["paths"] if p.suffix == ".svg").read_text()
    assert "bands: 95 % CI over 3 repetitions" in svg


def follows_phi(n, rf, lat, loss):  # excess slope = φ x loss: a perfect rank match
    return 15 + 2 * lat + float(phi_mod.phi(n, rf)) * loss * lat / 10


def high_loss_group(tmp_path, nodes: int, mean_ms=follows_phi) -> dict:
    """compare's group at 7.5 % loss of a synthetic store of ``nodes`` nodes."""
    results = load(
        make_store(
            tmp_path,
            nodes=(nodes,),
            losses=(0.5, 7.5),
            latencies=(0, 50, 100),
            writes=40,
            mean_ms=mean_ms,
            sd_ms=0.01,
        )
    )
    (high,) = [g for g in compare_mod.compare(results)["groups"] if g["loss"] == 7.5]
    return high


def test_compare_agrees_when_loss_cost_follows_phi(tmp_path):
    high = high_loss_group(tmp_path, 5)
    assert high["spearman"] == pytest.approx(1.0, abs=0.01)
    assert high["verdict"].startswith("yes")
    excess = {r["rf"]: r["excess_slope"] for r in high["rfs"]}
    assert excess[2] == pytest.approx(7.0 / 10, abs=0.01)  # φ(RF 2) = 1, loss 7.5 - 0.5


def test_compare_says_so_when_the_ordering_is_reversed(tmp_path):
    def against_phi(n, rf, lat, loss):
        return 15 + 2 * lat + (1 - float(phi_mod.phi(n, rf))) * loss * lat / 10

    high = high_loss_group(tmp_path, 5, against_phi)
    assert high["spearman"] == pytest.approx(-1.0, abs=0.01)
    assert high["verdict"].startswith("no: the measured excess slope runs opposite")
    text = compare_mod.format_text(compare_mod.compare(load(tmp_path)))
    assert "rank correlation" in text and "± se" in text


def test_analysis_of_a_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="no results in"):
        load(tmp_path / "none")


def test_analysis_of_an_empty_or_foreign_store_is_a_clear_error(tmp_path):
    from common.errors import StateFileError
    from experiments.store.db import Store

    Store(tmp_path / "empty").close()
    with pytest.raises(ConfigError, match="no runs in .*empty yet"):
        load(tmp_path / "empty")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.sqlite").write_bytes(b"not sqlite at all" * 64)
    with pytest.raises(StateFileError, match="is not a readable results store"):
        load(tmp_path / "bad")


def test_each_series_differs_in_colour_marker_and_dashes():
    from analysis.figsave import series_style

    styles = [series_style(i) for i in range(5)]  # RF 1..5 of a 5-node figure
    for key in ("color", "marker"):
        assert len({s[key] for s in styles}) == 5, key
    assert len({str(s["ls"]) for s in styles}) == 5  # greyscale: markers and dashes


def test_compare_does_not_order_rfs_its_data_cannot_tell_apart(tmp_path):
    # RF 4's loss cost is RF 3's by construction; the noise happens to rank them as φ
    # does (rho = 1), which is no evidence: the verdict names the pair instead
    def same_3_4(n, rf, lat, loss):
        return 15 + 2 * lat + float(phi_mod.phi(n, 3 if rf == 4 else rf)) * loss * lat / 10

    results = load(
        make_store(
            tmp_path,
            nodes=(5,),
            losses=(0.5, 7.5),
            latencies=(0, 25, 50, 75, 100),
            writes=40,
            mean_ms=same_3_4,
            sd_ms=2.0,
            seed=0,
        )
    )
    (high,) = [g for g in compare_mod.compare(results)["groups"] if g["loss"] == 7.5]
    assert high["spearman"] == pytest.approx(1.0)
    assert high["spearman_p"] == pytest.approx(2 / 120)  # exact: 2 of the 5! pairings
    assert high["verdict"].startswith("cannot tell:") and "RF 3 and RF 4" in high["verdict"]
    assert "RF 2 and" not in high["verdict"] and "and RF 2" not in high["verdict"]
    # how many repetitions would separate them, if their difference stayed: 2 SE/diff, squared
    (close,) = compare_mod.unresolved([r for r in high["rfs"] if r["rf"] in (3, 4)])
    expected = math.ceil((compare_mod.APART_SE * close["se"] / close["diff"]) ** 2)
    assert close["repetitions_needed"] == expected > 1
    assert f"about {expected} repetitions of each cell" in high["verdict"]


def test_compare_with_four_rfs_is_never_significant(tmp_path):
    high = high_loss_group(tmp_path, 4)
    assert high["spearman"] == pytest.approx(1.0) and high["spearman_p"] == pytest.approx(2 / 24)
    assert high["verdict"].startswith("cannot tell: the same order as φ's, but 4 RFs cannot")


def test_phi_vs_excess_labels_cover_no_label_and_no_point(tmp_path):
    # the synthetic grid puts RF 3 of 3 nodes and RF 5 of 5 nodes on one spot (φ 0.5, the
    # same excess), and other points a label's width apart: labelled naively, each point
    # to its right, their labels print over each other and over the next point
    from analysis.figsave import plt

    grid = make_store(tmp_path, nodes=(3, 4, 5), losses=(0.5, 2.5, 7.5), latencies=(0, 50, 100),
                      writes=30)  # fmt: skip
    rows = phi_excess.loss_excess(load(grid))
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot([r["phi"] for r in rows], [r["excess_ms"] for r in rows], "o", ms=6)
    phi_excess._annotate_apart(ax, phi_excess._label_spots(rows))
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]  # Agg's canvas
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    labels = sorted(t.get_text() for t in ax.texts)
    plt.close(fig)
    assert len(labels) == len(phi_excess._label_spots(rows)) < len(rows) and "RF 3, 5" in labels
    assert not [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :] if a.overlaps(b)]
    points = ax.transData.transform([(r["phi"], r["excess_ms"]) for r in rows])
    assert not [(x, y) for x, y in points for b in boxes if b.contains(x, y)]


def test_results_as_a_dataframe_one_row_per_cell(synthetic):
    import pandas as pd  # an optional extra; the dev extra (make test) installs it

    from analysis.results import frame

    df = frame(synthetic)
    assert isinstance(df, pd.DataFrame)
    results = load(synthetic)
    assert len(df) == len(results.cells)
    cell = next(c for c in results.cells if c["cell_id"] == "n5-rf4-l50-p7.5-r1")
    row = df.set_index("cell_id").loc["n5-rf4-l50-p7.5-r1"]
    assert (row["nodes"], row["rf"], row["latency_ms"], row["loss_pct"]) == (5, 4, 50.0, 7.5)
    assert row["mean_ms"] == pytest.approx(float(np.mean(cell["rtt_ms"])))
    assert row["writes"] == len(cell["rtt_ms"]) and row["repetition"] == 1
    # the statistics under summary.csv's names (that table pools repetitions; these are
    # the same figures per cell)
    summary = set(plots.SUMMARY_COLUMNS) - {"repetitions", "ci_over", "rep_sd_ms",
                                            "predicted_mean_ms"}  # fmt: skip
    assert summary <= set(df.columns), sorted(summary - set(df.columns))


def test_requests_as_a_dataframe_one_row_per_request(synthetic):
    from analysis.results import requests_frame

    df = requests_frame(synthetic)
    results = load(synthetic)
    assert len(df) == sum(len(c["rtt_ms"]) for c in results.cells)
    one = df[df["cell_id"] == "n5-rf4-l50-p7.5-r1"].sort_values("seq")
    cell = next(c for c in results.cells if c["cell_id"] == "n5-rf4-l50-p7.5-r1")
    assert one["rtt_ms"].tolist() == pytest.approx(cell["rtt_ms"].tolist())
    assert all(isinstance(r, list) for r in df["replicas"])


def test_a_new_call_removes_the_last_calls_figures_and_nothing_else(synthetic):
    out = load(synthetic).output_dir
    out.mkdir(parents=True, exist_ok=True)
    (out / "rtt_n9_loss1.svg").write_text("<svg/>")  # a figure of a grid no longer drawn
    (out / "my_notes.png").write_bytes(b"mine")  # not the analysis' own
    plots.make_all(load(synthetic))
    assert not (out / "rtt_n9_loss1.svg").exists() and (out / "my_notes.png").exists()


def test_the_figure_registry_holds_each_kind_once_with_its_drawer():
    from analysis.figures import DRAWERS
    from analysis.results import Results

    kinds = [k for d in DRAWERS for k in d.kinds]
    assert sorted(k.order for k in kinds) == list(range(len(kinds)))  # one reading order
    assert len({k.pattern for k in kinds}) == len(kinds) == len(FIGURES)
    fields = set(Results.__dataclass_fields__)
    assert all(d.needs in fields and callable(d.draw) for d in DRAWERS), fields
