"""The sweep's figures while it runs (``experiments.run.figures``): nothing before the first
pass is stored, then real figures and report from the stored cells (analysis.plots in a
process of its own, under the sweep's gate), refreshed only when new cells arrived."""

import json
import threading
from contextlib import contextmanager

from analysis.synthetic import make_store
from experiments.run.figures import Figures
from experiments.settings.config import SweepConfig
from experiments.sweep import FIGURES_COMMAND


def test_figures_come_after_the_first_pass_and_refresh_with_new_cells(tmp_path):
    config = SweepConfig(
        nodes=(3,),
        latency_ms=(0.0, 50.0, 100.0),
        loss_pct=(0.5,),
        first_pass=(0.0, 100.0),
        out=str(tmp_path),
    )
    make_store(tmp_path, nodes=(3,), losses=(0.5,), latencies=(0, 50, 100), writes=30,
               run_id="run1", status="running")  # fmt: skip
    held = []

    @contextmanager
    def hold():
        held.append(threading.current_thread().name)
        yield

    notes: list[str] = []
    figures = Figures(config, "run1", [], notes.append, FIGURES_COMMAND, hold=hold, every_s=0.0)
    first = [c.cell_id for c in config.cells() if c.latency_ms in (0.0, 100.0)]
    assert len(first) == 6
    for cell_id in first[:-1]:
        figures.cell_stored(cell_id)
    figures.close()
    assert figures.refreshes == 0 and not (tmp_path / "analysis").exists()
    figures.cell_stored(first[-1])  # the first pass is whole
    figures.close()
    assert figures.refreshes == 1 and held == ["figures"], (notes, figures.failures)
    index = json.loads((tmp_path / "analysis" / "figures.json").read_text())
    assert index["runs"] == ["run1"] and index["figures"]
    assert (tmp_path / "report.html").is_file()
    assert notes and notes[-1].startswith("first pass stored: figures (6 cells)")
    figures.cell_stored(first[0])  # stored before: nothing new, no refresh
    figures.close()
    assert figures.refreshes == 1
    figures.cell_stored("n3-rf1-l50-p0.5-r1")
    figures.close()
    assert figures.refreshes == 2 and notes[-1].startswith("figures refreshed (7 cells)")
    figures.finish()  # nothing new since: no refresh
    assert figures.refreshes == 2
    figures.every_s = 3600.0
    figures.cell_stored("n3-rf2-l50-p0.5-r1")  # not due for an hour...
    figures.close()
    assert figures.refreshes == 2
    figures.finish()  # ...but the sweep's end writes the last cells in
    assert figures.refreshes == 3 and notes[-1].startswith("figures refreshed (8 cells)")


def test_no_first_pass_means_figures_only_at_the_end(tmp_path):
    config = SweepConfig(nodes=(3,), latency_ms=(0.0,), loss_pct=(0.5,), out=str(tmp_path))
    make_store(tmp_path, nodes=(3,), losses=(0.5,), latencies=(0,), writes=30, run_id="run1")
    figures = Figures(config, "run1", [], print, FIGURES_COMMAND)
    figures.finish()  # nothing stored by this sweep: nothing to draw
    assert figures.refreshes == 0
    for cell in config.cells():
        figures.cell_stored(cell.cell_id)
    figures.close()
    assert figures.refreshes == 0
    figures.finish()  # every sweep ends with its summary, figures and report
    assert figures.refreshes == 1, figures.failures
    with open(tmp_path / "analysis" / "summary.csv") as f:
        assert len(f.read().splitlines()) == 1 + 3  # a row per RF at 0 ms, 0.5 %
    assert (tmp_path / "report.html").is_file()


def test_without_a_command_nothing_is_drawn(tmp_path):
    """The engine draws through the command its caller gives (run_sweep's ``figures``):
    none given, none drawn, whatever is stored."""
    config = SweepConfig(nodes=(3,), latency_ms=(0.0,), loss_pct=(0.5,), out=str(tmp_path))
    make_store(tmp_path, nodes=(3,), losses=(0.5,), latencies=(0,), writes=30, run_id="run1")
    figures = Figures(config, "run1", [], print, None)
    for cell in config.cells():
        figures.cell_stored(cell.cell_id)
    figures.finish()
    assert figures.refreshes == 0 and not (tmp_path / "report.html").exists()
