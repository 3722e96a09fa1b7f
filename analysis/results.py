"""Load a results directory for analysis: the runs chosen, their cells with RTT arrays.

Reads the store written by the sweep (experiments/store/db.py) read-only; needs no testbed.
Runs are chosen deliberately (``select_runs``), never pooled by accident: by default the
newest complete run and every other complete run of the same configuration (the same
fingerprint, e.g. a ``--new-run`` repetition); otherwise exactly the runs named, which may
be incomplete.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from common import extras
from common.command import Parser, prog
from common.errors import ConfigError
from common.files import write_file
from experiments.store.db import RunInfo, Store, check_writable_dir

from .stats import TAIL_WRITES, per_cell

DEFAULT_SELECTION = "the newest complete run and every complete run of its configuration"
# a cell's statistics (analysis.stats.cell_stats) under summary.csv's column names
AS_SUMMARY = {"n": "writes", "mean": "mean_ms", "ci_low": "ci_low_ms", "ci_high": "ci_high_ms",
              "median": "median_ms", "p95": "p95_ms", "p99": "p99_ms", "std": "std_ms",
              "lost": "acknowledged_lost"}  # fmt: skip


@dataclass
class Results:
    directory: Path
    cells: list[dict[str, Any]]  # cell columns + rtt_ms, cir, failed (arrays), errors, error_types
    runs: list[dict[str, Any]]  # the runs used: run_id, fingerprint, status, config, ...
    selection: str = "named"  # how the runs were chosen
    others: tuple[str, ...] = ()  # "RUN (status)" of each run in the store not used
    # YCSB's rows (experiments.store.db.Store.ycsb_ops: per cell and operation, with the
    # cell's columns); its cells are not in ``cells``, which are the paper's writes
    ycsb: list[dict[str, Any]] = field(default_factory=list)
    # the writes cells with a fault (experiments.settings.faults) or a link trace (emulation.trace),
    # each with its requests (t_start, coordinator, replicas, error); kept out of
    # ``cells``: a cell whose node was killed or whose links changed is not a point of
    # the paper's RTT curves
    faults: list[dict[str, Any]] = field(default_factory=list)
    # the writes cells of a testbed of sites or of a run of several consistency levels
    # (analysis.levels): kept out of ``cells``, whose curves are one level's on one site
    levels: list[dict[str, Any]] = field(default_factory=list)

    def frame(self) -> Any:
        """The cells as a pandas DataFrame, one row per cell (repetitions apart): its id,
        run, grid point, level, policy and profile, and its statistics under summary.csv's
        names (writes, errors, mean_ms, ci_low_ms, ci_high_ms, median_ms, p95_ms, p99_ms,
        std_ms, acknowledged, acknowledged_lost). pandas is an optional extra
        (``pip install -e '.[pandas]'``)."""
        pd = _pandas()
        rows = []
        cells = [*self.cells, *self.levels]
        for c, st in zip(cells, per_cell(cells), strict=True):
            named = {AS_SUMMARY.get(k, k): v for k, v in st.items()}
            rows.append({"cell_id": c["cell_id"], "cl": c["cl"], "policy": c["policy"],
                         "profile": c["profile"], "sites": c.get("sites"), **named})  # fmt: skip
        return pd.DataFrame(rows)

    @property
    def output_dir(self) -> Path:
        """Where analysis writes its figures and tables (DIR/analysis)."""
        return self.directory / "analysis"

    @property
    def run_ids(self) -> list[str]:
        return [r["run_id"] for r in self.runs]

    def caveat(self) -> str:
        """The line a reader needs beside every figure and table of these cells: writes
        timed per cell, repetitions per grid point, the sweep's name (a preset's, or the
        user's; not the default "custom"), and that tails of grid points of fewer than
        ``TAIL_WRITES`` writes (repetitions pooled, as the figures do) are indicative; ""
        without cells."""
        cells = [*self.cells, *self.levels, *self.faults]
        if not cells:
            return ""

        def timed(c: dict[str, Any]) -> int:
            return int(c.get("writes") or len(c.get("rtt_ms", ())))

        writes = sorted({timed(c) for c in cells})
        # a grid point: its cells' id without the repetition (the grid's own identity, by
        # which two runs of one configuration are two repetitions of each point)
        points: defaultdict[str, list[int]] = defaultdict(list)  # a point's cells' writes
        for c in cells:
            points[c["cell_id"].removesuffix(f"-r{c.get('repetition', 1)}")].append(timed(c))
        reps = sorted({len(w) for w in points.values()})
        names = {str((r["config"] or {}).get("name")) for r in self.runs} - {"custom", "None"}

        def span(values: list[int], one: str, many: str) -> str:
            shown = f"{values[0]}" if len(values) == 1 else f"{values[0]}-{values[-1]}"
            return f"{shown} {one if values == [1] else many}"

        line = (
            f"{span(writes, 'write', 'writes')} per cell, "
            f"{span(reps, 'repetition', 'repetitions')}"
            + (f" (sweep {', '.join(sorted(names))})" if names else "")
        )
        if min(sum(w) for w in points.values()) < TAIL_WRITES:  # figures pool repetitions
            line += f"; p95/p99 of points under {TAIL_WRITES} writes: indicative"
        return line

    def describe(self) -> str:
        """Which runs this analysis uses and why, for the user (a few lines)."""
        count: defaultdict[str, int] = defaultdict(int)
        for c in (*self.cells, *self.levels, *self.faults):
            count[c["run_id"]] += 1
        for r in self.ycsb:  # a YCSB cell: one OVERALL row each
            count[r["run_id"]] += r["op"] == "OVERALL"
        lines = [f"runs used ({self.selection}):"]
        for r in self.runs:
            lines.append(
                f"  {r['run_id']}  {r['status']}, {r['config'].get('name', '?')!r}, "
                f"{count[r['run_id']]} cells, configuration {r['fingerprint'][:8]}"
            )
        if len({r["fingerprint"] for r in self.runs}) > 1:
            lines.append("  note: these runs have different configurations; their cells are pooled")
        caveat = self.caveat()
        if caveat:
            lines.append(f"sample: {caveat}")
        if self.others:
            shown = ", ".join(self.others[-5:])
            more = f" and {len(self.others) - 5} earlier" if len(self.others) > 5 else ""
            lines.append(f"not used: {shown}{more}; choose runs with --run RUN_ID")
        return "\n".join(lines)


def select_runs(
    runs: Sequence[RunInfo], named: Sequence[str] | None, where: object
) -> tuple[list[RunInfo], str]:
    """The runs to analyse and a phrase saying why (pure).

    ``named``: exactly those runs, in that order, whatever their status. None: the newest
    complete run (by finishing time) and every complete run with its fingerprint. Raises
    ConfigError for an unknown run, or when no run is complete.
    """
    by_id = {r.run_id: r for r in runs}
    listing = ", ".join(f"{r.run_id} ({r.status})" for r in runs[-5:]) or "none"
    if named is not None:
        unknown = [n for n in named if n not in by_id]
        if unknown:
            raise ConfigError(f"no run {unknown[0]!r} in {where} (runs: {listing})")
        return [by_id[n] for n in dict.fromkeys(named)], "named"
    complete = [r for r in runs if r.status == "complete"]
    if not complete:
        if not runs:
            raise ConfigError(f"no runs in {where} yet")
        raise ConfigError(
            f"no complete run in {where} (runs: {listing}); name one with --run RUN_ID "
            f"to analyse it as it is"
        )
    newest = max(complete, key=lambda r: (r.finished or r.started, r.started))
    chosen = [r for r in complete if r.fingerprint == newest.fingerprint]
    reason = "the newest complete run"
    if len(chosen) > 1:
        reason = DEFAULT_SELECTION
    return chosen, reason


def add_run_option(parser: argparse.ArgumentParser) -> None:
    """The analysis CLIs' ``--run RUN_ID`` (repeatable, or a comma-separated list)."""
    parser.add_argument(
        "--run",
        action="append",
        metavar="RUN_ID",
        help="analyse this run (repeatable or comma-separated; incomplete runs too). "
        "Default: the newest complete run and every complete run of its configuration",
    )


def command_parser(
    module: str, description: str, *, report: bool = True
) -> argparse.ArgumentParser:
    """The parser every analysis command of a results directory shares: RESULTS,
    ``--run`` and (``report``) ``--no-report``."""
    p = Parser(prog=prog(f"python -m {module}"), description=description)
    p.add_argument("results", help="results directory (holds results.sqlite)")
    add_run_option(p)
    if report:
        p.add_argument("--no-report", action="store_true", help="do not refresh report.html")
    return p


def open_results(args: argparse.Namespace, *, writes: str = "analysis") -> Results:
    """The runs ``args`` chose (``command_parser``), after checking that where the
    command writes (``writes``: the analysis directory, or the results directory itself)
    can be written: a ConfigError, one line, before anything is made."""
    results = load(args.results, run_ids(args.run))
    if writes == "analysis":
        check_writable_dir(results.output_dir, "analysis directory")
    else:
        check_writable_dir(results.directory)
    return results


def save_text_and_json(out: Path, stem: str, text: str, data: Any) -> tuple[Path, Path]:
    """``stem``.txt (``text``) and ``stem``.json (``data``) in ``out``, each replaced whole."""
    out.mkdir(parents=True, exist_ok=True)
    paths = (out / f"{stem}.txt", out / f"{stem}.json")
    for path, body in zip(paths, (text + "\n", json.dumps(data, indent=1)), strict=True):
        write_file(path, body)
    return paths


def run_ids(values: Sequence[str] | None) -> list[str] | None:
    """The run ids of ``--run`` options (None when none was given)."""
    if values is None:
        return None
    ids = [v.strip() for value in values for v in value.split(",")]
    if not all(ids):
        raise ConfigError(f"--run {','.join(values)!r}: empty run id (RUN_ID[,RUN_ID...])")
    return list(dict.fromkeys(ids))


def _changing(cell: dict[str, Any]) -> bool:
    """A cell whose testbed changed while it was measured: a fault, or a link trace."""
    return cell.get("fault") not in (None, "none") or cell.get("trace") not in (None, "none")


def is_levels_cell(cell: dict[str, Any], levels_in_run: int) -> bool:
    """Whether a writes cell is one of ``Results.levels``: of a testbed of sites, or of a
    run that swept several consistency levels."""
    return bool(cell.get("sites")) or levels_in_run > 1


def load(directory: str | Path, runs: str | Sequence[str] | None = None) -> Results:
    """The chosen runs' cells with their requests as arrays (see ``select_runs``)."""
    directory = Path(directory)
    named = [runs] if isinstance(runs, str) else runs
    with Store(directory, read_only=True) as store:
        all_runs = store.runs()
        chosen, selection = select_runs(all_runs, named, directory)
        ids = [r.run_id for r in chosen]
        cells = {(c["run_id"], c["cell_id"]): c for c in store.cells(ids)}
        ycsb_rows = store.ycsb_ops(ids)
        if not cells:
            raise ConfigError(
                f"{directory / 'results.sqlite'} holds no measured cells yet for run(s) "
                f"{', '.join(ids)}"
            )
        rtts: dict[tuple, list] = defaultdict(list)
        cirs: dict[tuple, list] = defaultdict(list)
        failed: dict[tuple, list] = defaultdict(list)
        errors: dict[tuple, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for run, cell, rtt, cir, err in store.iter_outcomes(ids):
            key = (run, cell)
            rtts[key].append(rtt)
            cirs[key].append(-1 if cir is None else cir)
            failed[key].append(err is not None)
            if err is not None:
                errors[key][err] += 1
        faulted = []
        for key, cell in cells.items():
            if cell.get("workload") in (None, "writes") and _changing(cell):
                faulted.append(dict(cell, requests=store.requests(*key)))
    out: list[dict[str, Any]] = []
    levels: list[dict[str, Any]] = []
    run_levels = {r.run_id: len(str((r.config or {}).get("cl", "")).split(",")) for r in chosen}
    for key, cell in cells.items():
        if cell.get("workload") not in (None, "writes"):
            continue  # a YCSB cell: its numbers are in ycsb_ops
        if _changing(cell):
            continue  # in ``faults``
        cell["rtt_ms"] = np.asarray(rtts[key], dtype=float) / 1e6
        cell["cir"] = np.asarray(cirs[key], dtype=int)
        cell["failed"] = np.asarray(failed[key], dtype=bool)
        cell["error_types"] = dict(errors[key])
        cell["errors"] = sum(errors[key].values())
        (levels if is_levels_cell(cell, run_levels[key[0]]) else out).append(cell)
    used = [
        {
            "run_id": r.run_id,
            "fingerprint": r.fingerprint,
            "status": r.status,
            "config": r.config,
            "manifest": r.manifest,
            "started": r.started,
            "finished": r.finished,
        }
        for r in chosen
    ]
    others = tuple(f"{r.run_id} ({r.status})" for r in all_runs if r.run_id not in ids)
    return Results(directory, out, used, selection, others, ycsb_rows, faulted, levels)


def frame(directory: str | Path, runs: str | Sequence[str] | None = None) -> Any:
    """``load(directory, runs).frame()``: the chosen runs' cells as a pandas DataFrame."""
    return load(directory, runs).frame()


def requests_frame(directory: str | Path, runs: str | Sequence[str] | None = None) -> Any:
    """The chosen runs' requests as a pandas DataFrame, one row per request with its
    cell's grid point (the export's columns; ``rtt_ms`` for rtt_ns, ``replicas`` a list)."""
    pd = _pandas()
    directory = Path(directory)
    named = [runs] if isinstance(runs, str) else runs
    with Store(directory, read_only=True) as store:
        chosen, _ = select_runs(store.runs(), named, directory)
        rows = list(store.iter_request_rows([r.run_id for r in chosen]))
    df = pd.DataFrame(rows, columns=list(Store.EXPORT_COLUMNS))
    df.insert(df.columns.get_loc("rtt_ns"), "rtt_ms", df.pop("rtt_ns") / 1e6)
    df["replicas"] = [v.split(",") if v else [] for v in df["replicas"]]
    return df


def _pandas() -> Any:
    extras.require("pandas", "a DataFrame")
    import pandas as pd

    return pd
