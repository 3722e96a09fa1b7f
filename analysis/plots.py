"""`python -m analysis.plots RESULTS_DIR`: the paper's figures, regenerated from a store.

Writes to RESULTS_DIR/analysis/ the tables (``summary.csv``, the model's comparison as
``model.{txt,json}``, ``paper.txt``; ``levels.txt``, ``ycsb.txt``, ``faults.txt`` where
the results hold such cells) and every figure the registry (``analysis.figures``: what
each kind shows, which function draws it) draws from these results, in PNG, SVG and PDF:
the RTT against latency per (nodes, loss) and on one page, its distribution, Figure 4,
φ against loss's excess, the paper's own curves beside the measured ones, sites and
levels, YCSB, faults. Figures of an earlier call are removed first; ``figures.json``
names the runs drawn. Then refreshes the HTML report (analysis.report).
"""

from __future__ import annotations

import csv
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from common.command import command
from common.errors import ConfigError
from common.files import replacing, write_file

from . import faults as faults_mod
from . import levels as levels_mod
from . import paper as paper_mod
from . import prediction
from . import ycsb as ycsb_mod
from .figsave import (
    FORMATS,
    add_look_flags,
    footer,
    look_from,
    set_look,
)
from .figures import DRAWERS, Inputs, is_figure
from .results import Results, command_parser, open_results
from .stats import points, predicted_means

FIGURES_INDEX = "figures.json"  # {"runs": [...], "figures": [...]}: what was drawn from what


def _model(
    results: Results, out: Path, name: str = "model", claims: bool = True
) -> dict[str, Any] | None:
    """The model's comparison (analysis.model), saved beside the figures as NAME.txt and
    NAME.json; None (and a note on stderr) when the cells give it nothing to work from."""
    try:
        data = prediction.compare(results, claims=claims)
    except Exception as exc:  # noqa: BLE001 - the figures matter more than the curves
        print(f"note: no model curves: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    prediction.save(data, out, name)
    return data


SUMMARY = "summary.csv"
SUMMARY_COLUMNS = (
    "nodes", "loss_pct", "rf", "latency_ms", "repetitions", "writes", "errors", "mean_ms",
    "ci_low_ms", "ci_high_ms", "ci_over", "median_ms", "p95_ms", "p99_ms", "std_ms",
    "rep_sd_ms", "predicted_mean_ms", "acknowledged", "acknowledged_lost",
)  # fmt: skip


def summary_table(
    out: Path, stats_: dict[tuple, dict[str, Any]], model: dict[str, Any] | None = None
) -> Path:
    """One row per grid point (repetitions pooled): its writes, errors, mean with its
    95 % CI (``ci_over`` "repetitions" where two or more, else "writes": the within-run
    CI), median, p95, p99, ``rep_sd_ms`` (the spread of the repetitions' means; empty with
    one), the model's predicted mean (empty without a model), the acknowledged writes
    and how many of them no replica returned when read back (empty where a cell was not
    read back)."""
    predicted = predicted_means(model)
    path = out / SUMMARY
    with replacing(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(SUMMARY_COLUMNS)
        for key, st in sorted(stats_.items()):
            stat = [st[k] for k in ("mean", "ci_low", "ci_high")]
            tail = [st[k] for k in ("median", "p95", "p99", "std", "rep_sd")]
            tail.append(predicted.get(key, np.nan))
            head = [*key, st["repetitions"], st["n"], st["errors"]]
            kept = ["" if st[k] is None else st[k] for k in ("acknowledged", "acknowledged_lost")]
            w.writerow([*head, *map(_num, stat), st["ci_over"], *map(_num, tail), *kept])
    return path


def _num(v: float) -> str:
    return f"{v:.3f}" if np.isfinite(v) else ""


# what make_all writes beside the figures: an earlier call's go before it draws
WRITTEN = (
    "model.txt", "model.json", "levels_model.txt", "levels_model.json", "levels.txt",
    "levels.json", "ycsb.txt", "faults.txt", "paper.txt", SUMMARY, "cells.csv",
)  # fmt: skip


def _remove_earlier(out: Path) -> None:
    """An earlier call's index, tables and figures (in any format) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / FIGURES_INDEX).unlink(missing_ok=True)
    for stale in WRITTEN:
        (out / stale).unlink(missing_ok=True)
    for old in list(out.iterdir()):
        if old.suffix[1:] in FORMATS and is_figure(old.stem) and not old.is_dir():
            old.unlink()


def make_all(results: Results) -> list[dict[str, Any]]:
    """Every figure of ``results`` into its output directory, replacing those of an
    earlier call (which may have drawn other runs, or other node counts and losses): the
    tables first, then each drawer of the registry (``analysis.figures.DRAWERS``), in its
    order, whose data the results hold."""
    out = results.output_dir
    _remove_earlier(out)
    inputs = Inputs(results, out)
    if results.cells:  # the paper's writes
        inputs.model = _model(results, out)
        inputs.stats = points(results.cells)  # per grid point: the table's and the figures'
        summary_table(out, inputs.stats, inputs.model)
        write_file(
            out / "paper.txt", paper_mod.format_table(paper_mod.compare(inputs.stats)) + "\n"
        )
    if results.levels:  # sites, or several levels: their own figures and table
        levels = replace(results, cells=results.levels)
        inputs.levels_model = _model(levels, out, "levels_model", claims=False)
        rows = levels_mod.table(results.levels, inputs.levels_model)
        write_file(out / "levels.txt", levels_mod.format_table(rows) + "\n")
    if results.ycsb:
        inputs.ycsb_cells = ycsb_mod.cells(results.ycsb)
        cost = ycsb_mod.format_cost(ycsb_mod.consistency_cost(inputs.ycsb_cells))
        table = ycsb_mod.percentiles_table(inputs.ycsb_cells)
        write_file(out / "ycsb.txt", f"{cost}\n\n{table}\n")
    if results.faults:
        table = faults_mod.format_availability(faults_mod.availability(results.faults))
        traces = faults_mod.trace_table(results.faults)
        write_file(out / "faults.txt", table + "\n" + (f"\n{traces}\n" if traces else ""))
    made: list[dict[str, Any]] = []
    caveat = results.caveat()  # of the writes cells: YCSB's figures count operations
    for drawer in DRAWERS:
        if getattr(results, drawer.needs):
            with footer(caveat if drawer.needs != "ycsb" else ""):
                made += drawer.draw(inputs)
    index = {
        "runs": results.run_ids,
        "figures": [m["name"] for m in made],
        "model": inputs.model is not None,
    }
    write_file(out / FIGURES_INDEX, json.dumps(index, indent=1))
    return made


@command("python -m analysis.plots")
def main(argv: list[str] | None = None) -> int:
    p = command_parser("analysis.plots", "Regenerate the figures from stored results.")
    add_look_flags(p)
    args = p.parse_args(argv)
    set_look(look_from(args))
    t0 = time.monotonic()
    results = open_results(args)
    print(results.describe())
    if not (results.cells or results.ycsb or results.faults or results.levels):
        raise ConfigError(
            f"{args.results}: run(s) {', '.join(results.run_ids)} hold no measured cells"
        )
    made = make_all(results)
    for fig in made:
        kinds = "{" + ",".join(p.suffix[1:] for p in fig["paths"]) + "}"
        print(f"{fig['paths'][0].with_suffix('.' + kinds)}  ({fig['series']} series)")
    print(f"{len(made)} figures in {time.monotonic() - t0:.1f} s")
    if not args.no_report:
        from .report import write_report  # the report shows these figures: it imports us

        print(f"report: {write_report(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
