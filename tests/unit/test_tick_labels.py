"""No figure's tick labels overlap (issue 43, item 3): every figure the analysis draws from
stores of several shapes is checked as drawn, before it is saved; and the log axis that
overlapped (12-250 ms: matplotlib's 3x10^1 on its 4x10^1) is labelled 10, 20, 50, ...
Nothing of a figure runs past its edges or under its footer, at the default look and at
a journal column's (3.4 x 2.4 in, --style paper), as saved."""

import sys

import numpy as np
import pytest

import analysis.figures  # noqa: F401 - every drawer's module imported
from analysis import figsave, plots
from analysis.results import load
from analysis.synthetic import make_store


@pytest.fixture
def checked(monkeypatch):
    found: dict[str, list[str]] = {}
    drawn: list[str] = []
    save = figsave.save_figure

    def checking(fig, out, name):
        drawn.append(name)
        overlaps = figsave.label_overlaps(fig)
        paths = save(fig, out, name)
        overlaps += figsave.outside(fig)  # as laid out and saved
        if overlaps:
            found[name] = overlaps
        return paths

    # in every module of the analysis that saves figures (a drawer moved to a module of
    # its own is checked still): those that imported figsave's save_figure
    for name, module in list(sys.modules.items()):
        if name.startswith("analysis.") and getattr(module, "save_figure", None) is save:
            monkeypatch.setattr(module, "save_figure", checking)
    return found, drawn


@pytest.mark.parametrize(
    "latencies, losses", [((0, 50, 100), (0.5, 7.5)), ((0, 10), (0.5,)), ((0, 5, 20), (7.5,))]
)
def test_no_figure_has_tick_labels_over_each_other(tmp_path, checked, latencies, losses):
    found, drawn = checked
    make_store(tmp_path, nodes=(3, 5), losses=losses, latencies=latencies, writes=100)
    plots.make_all(load(tmp_path))
    assert len(drawn) >= 6 and not found, found


@pytest.fixture
def column():
    figsave.set_look(figsave.Look(size=(3.4, 2.4), style="paper", formats=("png",)))
    yield
    figsave.set_look(figsave.Look())


def test_in_a_journal_column_nothing_runs_past_the_figure(tmp_path, checked, column):
    """Titles past a 3.4-inch figure (the CDFs', φ's), a legend of a grid wider than it,
    the footer over the grid's x label, a pinned legend over its axes' title: each was
    found here, and is fitted by save_figure (or drawn at the final size: ``sized``)."""
    found, drawn = checked
    make_store(tmp_path, nodes=(3, 5), losses=(0.5, 7.5), latencies=(0, 50, 100), writes=100)
    plots.make_all(load(tmp_path))
    assert len(drawn) >= 10 and not found, found


def test_a_log_axis_over_a_decade_and_a_bit_is_labelled_in_plain_numbers():
    fig, ax = figsave.plt.subplots(figsize=(6.4, 4.2))
    ax.step(np.geomspace(12, 250, 100), np.linspace(0, 1, 100))
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(figsave.matplotlib.ticker.ScalarFormatter())  # as it was
    assert figsave.label_overlaps(fig)  # the detector sees what a reader saw
    figsave.log_ticks(ax.xaxis, 12, 250)
    assert figsave.label_overlaps(fig) == []
    shown = [t.get_text() for t in ax.xaxis.get_ticklabels(which="both") if t.get_text()]
    assert shown == ["10", "20", "50", "100", "200", "500"]
    figsave.plt.close(fig)
