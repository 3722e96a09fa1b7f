"""YCSB cells through the store, the analysis and the export (synthetic figures: this
checks the plumbing and the arithmetic of the cost table, not YCSB)."""

from __future__ import annotations

import csv

import pytest

from analysis import plots, ycsb
from analysis.results import load
from experiments.run.measure import ycsb_rows
from experiments.settings.cells import Cell
from experiments.store.db import Store
from experiments.store.export import YCSB_EXPORT_COLUMNS, export
from workloads.ycsb import Result

# (read level, throughput, READ p99, UPDATE p99) per repetition
MEASURED = {
    "ONE": [(100.0, 50.0, 60.0), (110.0, 54.0, 64.0)],
    "QUORUM": [(70.0, 90.0, 100.0), (66.0, 94.0, 104.0)],
}


def _result(tp: float, read_p99: float, update_p99: float) -> Result:
    def op(p99: float) -> dict:
        return {
            "count": 500, "errors": 0, "return_codes": {"OK": 500}, "mean_ms": p99 / 3,
            "p50_ms": p99 / 4, "p95_ms": p99 / 2, "p99_ms": p99, "p999_ms": p99 * 2,
            "max_ms": p99 * 3, "min_ms": 1.0,
        }  # fmt: skip

    return Result("run", 10.0, tp, {"READ": op(read_p99), "UPDATE": op(update_p99)}, 1000)


@pytest.fixture
def store_dir(tmp_path):
    with Store(tmp_path) as store:
        store.begin_run("run1", "f" * 16, "ycsb", {"name": "ycsb"}, {})
        t = 0.0
        for level, reps in MEASURED.items():
            for rep, figures in enumerate(reps, 1):
                c = Cell(3, 3, 20.0, 0.5, rep, "ycsb-a", 8, None, level, level, 1000)
                t += 1
                store.commit_cell(
                    {
                        "run_id": "run1",
                        "cell_id": c.cell_id,
                        "nodes": 3,
                        "rf": 3,
                        "cl": level,
                        "policy": "round-robin",
                        "profile": "uniform",
                        "latency_ms": 20.0,
                        "loss_pct": 0.5,
                        "repetition": rep,
                        "writes": 1000,
                        "warmup": 0,
                        "key_seed": "ycsb",
                        "shaping": {},
                        "testbed_run": "tb",
                        "started": t,
                        "finished": t + 0.5,
                        "workload": "ycsb-a",
                        "threads": 8,
                        "target": None,
                        "read_cl": level,
                        "write_cl": level,
                        "records": 1000,
                    },  # fmt: skip
                    [],
                    ycsb_ops=ycsb_rows("run1", c.cell_id, _result(*figures)),
                )
        store.set_status("run1", "complete")
    return tmp_path


def test_the_cost_of_consistency_against_one(store_dir):
    results = load(store_dir)
    assert results.cells == [] and len(results.ycsb) == 4 * 3  # OVERALL, READ, UPDATE
    rows = ycsb.consistency_cost(ycsb.cells(results.ycsb))
    one, quorum = sorted(rows, key=lambda r: r["read_cl"] != "ONE")
    assert one["reference"] == "ONE/ONE" and one["throughput_vs_ref"] == 0
    assert quorum["throughput_ops"] == pytest.approx(68.0)
    assert quorum["throughput_vs_ref"] == pytest.approx(68 / 105 - 1)
    assert quorum["READ_p99_vs_ref"] == pytest.approx(92 / 52 - 1)
    assert quorum["throughput_ci"] == pytest.approx(12.706 * 2, rel=1e-3)  # t(1) * sd / sqrt 2
    text = ycsb.format_cost(rows)
    assert "QUORUM/QUORUM instead of ONE/ONE changes throughput by -35 %" in text


def test_plots_report_and_export_show_ycsb(store_dir, capsys):
    assert plots.main([str(store_dir)]) == 0
    out = store_dir / "analysis"
    assert (out / "ycsb_throughput_threads.png").is_file()
    assert "The cost of consistency" in (out / "ycsb.txt").read_text()
    assert "YCSB: the cost of consistency" in (store_dir / "report.html").read_text()
    written = export(store_dir)
    with open(written["ycsb"]) as f:
        table = list(csv.DictReader(f))
    assert tuple(table[0]) == YCSB_EXPORT_COLUMNS
    overall = [r for r in table if r["op"] == "OVERALL"]
    assert len(overall) == 4 and {r["read_cl"] for r in overall} == {"ONE", "QUORUM"}
    read = next(r for r in table if r["op"] == "READ" and r["read_cl"] == "ONE")
    assert float(read["p99_ms"]) == 50.0 and float(read["throughput_ops"]) == 50.0
