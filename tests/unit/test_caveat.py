"""The sample's caveat (issue 43, item 2): every console page, the report (opening and
footer) and every figure of measured cells say how many writes each cell timed and how
many repetitions each grid point has, and that tails of fewer than 1000 writes are
indicative. Synthetic stores whose samples are known."""

from typing import Any

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from analysis import plots, report
from analysis.figsave import DEFAULT_SIZE, Look, footer, plt, save_figure, set_look, sized
from analysis.results import load
from analysis.synthetic import make_store

GRID: dict[str, Any] = {"nodes": (3,), "losses": (0.5,), "latencies": (0, 20)}


def test_a_quick_sample_says_its_size_and_that_its_tails_are_indicative(tmp_path):
    make_store(tmp_path, writes=100, **GRID)
    line = load(tmp_path).caveat()
    assert line == (
        "100 writes per cell, 1 repetition (sweep synthetic); "
        "p95/p99 of points under 1000 writes: indicative"
    )


def test_repetitions_are_counted_per_grid_point_and_full_points_carry_no_tail_note(tmp_path):
    make_store(tmp_path, writes=400, repetitions=3, **GRID)  # 1200 writes a point, pooled
    assert load(tmp_path).caveat() == "400 writes per cell, 3 repetitions (sweep synthetic)"


def test_two_runs_of_one_configuration_are_two_repetitions(tmp_path):
    make_store(tmp_path, writes=1000, run_id="a", **GRID)
    make_store(tmp_path, writes=1200, run_id="b", seed=1, **GRID)
    assert load(tmp_path).caveat().startswith("1000-1200 writes per cell, 2 repetitions")


def test_every_page_and_figure_carries_it(tmp_path):
    make_store(tmp_path, writes=100, **GRID)
    results = load(tmp_path)
    line = results.caveat()
    assert f"sample: {line}" in results.describe().splitlines()  # plots, compare, model
    made = plots.make_all(results)
    assert made
    for fig in made:  # the SVGs keep their text as text
        svg = fig["paths"][0].with_suffix(".svg").read_text()
        assert "100 writes per cell, 1 repetition" in svg, fig["name"]
    html = report.write_report(results).read_text()
    assert html.count(f"Sample: {line}.") == 2  # under the opening, and the footer


def test_a_store_without_writes_cells_has_none(tmp_path):
    make_store(tmp_path, writes=100, **GRID)
    results = load(tmp_path)
    results.cells = []
    assert results.caveat() == ""
    assert not any(x.startswith("sample:") for x in results.describe().splitlines())


@pytest.mark.parametrize("size", [None, (3.4, 2.4)])
def test_the_footer_sits_under_everything_drawn_at_any_size(tmp_path, size):
    """Under the captions an axis carries (tight box), or in a strip of its own (a fixed
    --size, constrained layout): never over a drawn text, and inside what is saved."""
    set_look(Look(size=size, formats=("png",)))
    try:
        fig, ax = plt.subplots(figsize=sized(*DEFAULT_SIZE))
        ax.plot([0, 50, 100], [10, 60, 110])
        ax.set_xlabel("one-way latency (ms)")
        caption = ax.annotate("LOCAL_QUORUM, round-robin, profile paper; bands: 95 % CI",
                              (0, -0.22), xycoords="axes fraction", fontsize=8)  # fmt: skip
        with footer("100 writes per cell, 1 repetition (sweep quick); p95/p99 of points "
                    "under 1000 writes: indicative"):  # fmt: skip
            save_figure(fig, tmp_path, "f")
        canvas = FigureCanvasAgg(fig)  # save_figure closed it: a canvas to measure on
        canvas.draw()
        r = canvas.get_renderer()
        text = fig.texts[-1].get_window_extent(r)
        drawn = ax.get_tightbbox(r)
        assert drawn is not None
        for other in (caption.get_window_extent(r), drawn):
            assert text.y1 <= other.y0 + 0.5, (text, other)  # below, not over
        if size is not None:  # the asked size exactly, the footer inside it
            assert tuple(fig.get_size_inches()) == pytest.approx(size)
            assert text.y0 >= 0 and text.x1 <= fig.bbox.x1 + 0.5
    finally:
        set_look(Look())
