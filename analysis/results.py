"""Load a results directory for analysis: cells with their RTT arrays, and run manifests.

Reads the store written by the sweep (experiments/store.py) read-only; needs no testbed.
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from experiments.store import DB_NAME, check_store_file
from testbed.errors import ConfigError


@dataclass
class Results:
    directory: Path
    cells: list[dict[str, Any]]  # cell columns + rtt_ms, cir (arrays), errors, error_types
    runs: list[dict[str, Any]]  # run_id, status, config, manifest

    @property
    def output_dir(self) -> Path:
        """Where analysis writes its figures and tables (DIR/analysis)."""
        return self.directory / "analysis"


def load(directory: str | Path, run_id: str | None = None) -> Results:
    """Every stored cell (of one run, or of all runs) with its requests as arrays."""
    directory = Path(directory)
    path = directory / DB_NAME
    if not path.exists():
        raise ConfigError(
            f"no results in {directory} (expected {DB_NAME}; run "
            f"`python -m experiments.sweep --out {directory}` first)"
        )
    check_store_file(path)  # StateFileError for a file that is not a store
    if path.stat().st_size == 0:
        raise ConfigError(f"{path} holds no results yet")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        where, args = ("WHERE run_id=?", (run_id,)) if run_id else ("", ())
        runs = [
            {
                "run_id": r[0],
                "status": r[1],
                "config": json.loads(r[2]),
                "manifest": json.loads(r[3]),
                "started": r[4],
                "finished": r[5],
            }
            for r in con.execute(
                "SELECT run_id, status, config, manifest, started, "
                f"finished FROM runs {where} ORDER BY started",
                args,
            )
        ]
        if run_id and not runs:
            raise ConfigError(f"no run {run_id!r} in {path}")
        cells = {}
        for r in con.execute(
            "SELECT run_id, cell_id, nodes, rf, cl, policy, profile, latency_ms, loss_pct, "
            f"repetition, writes, shaping FROM cells {where} ORDER BY started",
            args,
        ):
            cells[(r[0], r[1])] = {
                "run_id": r[0],
                "cell_id": r[1],
                "nodes": r[2],
                "rf": r[3],
                "cl": r[4],
                "policy": r[5],
                "profile": r[6],
                "latency_ms": r[7],
                "loss_pct": r[8],
                "repetition": r[9],
                "writes": r[10],
                "shaping": json.loads(r[11]),
            }
        rtts: dict[tuple, list] = defaultdict(list)
        cirs: dict[tuple, list] = defaultdict(list)
        errors: dict[tuple, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for run, cell, rtt, cir, err in con.execute(
            f"SELECT run_id, cell_id, rtt_ns, coordinator_is_replica, error FROM requests "
            f"{where} ORDER BY run_id, cell_id, seq",
            args,
        ):
            key = (run, cell)
            rtts[key].append(rtt)
            cirs[key].append(-1 if cir is None else cir)
            if err is not None:
                errors[key][err] += 1
    finally:
        con.close()
    if not cells:
        raise ConfigError(
            f"{path} holds no measured cells yet" + (f" for run {run_id}" if run_id else "")
        )
    out = []
    for key, cell in cells.items():
        cell["rtt_ms"] = np.asarray(rtts[key], dtype=float) / 1e6
        cell["cir"] = np.asarray(cirs[key], dtype=int)
        cell["error_types"] = dict(errors[key])
        cell["errors"] = sum(errors[key].values())
        out.append(cell)
    return Results(directory, out, runs)
