"""`python -m experiments.export DIR --format csv|parquet`: one row per request.

Writes DIR/export/requests.{csv,parquet} (every request joined with its cell: see
``Store.EXPORT_COLUMNS``), plus cells.csv|parquet (one row per cell, shaping as JSON) and
runs.json (the manifests). ``--run`` limits the export to one run.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from testbed.errors import TestbedError

from .store import CELL_COLUMNS, Store

FORMATS = ("csv", "parquet")
CHUNK = 100_000


def export(
    directory: str | Path,
    fmt: str = "csv",
    run_id: str | None = None,
    out: str | Path | None = None,
) -> dict[str, Path]:
    """Export the store in ``directory``; returns the files written."""
    if fmt not in FORMATS:
        raise TestbedError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")
    store = Store(directory, create=False)
    try:
        if run_id is not None:
            store.run(run_id)  # raises for an unknown run
        target = Path(out) if out else Path(directory) / "export"
        target.mkdir(parents=True, exist_ok=True)
        written = {}
        rows = store.iter_request_rows(run_id)
        written["requests"] = _write(target / f"requests.{fmt}", fmt, Store.EXPORT_COLUMNS, rows)
        cells = store.cells(run_id)
        cell_rows = (
            [json.dumps(c[k]) if k == "shaping" else c[k] for k in CELL_COLUMNS] for c in cells
        )
        written["cells"] = _write(target / f"cells.{fmt}", fmt, CELL_COLUMNS, cell_rows)
        runs = [
            {
                "run_id": r.run_id,
                "status": r.status,
                "started": r.started,
                "finished": r.finished,
                "config": r.config,
                "manifest": r.manifest,
            }
            for r in store.runs()
            if run_id in (None, r.run_id)
        ]
        written["runs"] = target / "runs.json"
        written["runs"].write_text(json.dumps(runs, indent=1))
        return written
    finally:
        store.close()


def _write(path: Path, fmt: str, columns: Sequence[str], rows) -> Path:
    tmp = path.with_suffix(path.suffix + ".tmp")
    if fmt == "csv":
        with open(tmp, "w", newline="") as f:
            csv_writer = csv.writer(f)
            csv_writer.writerow(columns)
            csv_writer.writerows(rows)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        writer: pq.ParquetWriter | None = None
        batch: list[tuple] = []

        def flush() -> None:
            nonlocal writer
            table = pa.table({c: [r[i] for r in batch] for i, c in enumerate(columns)})
            if writer is None:
                writer = pq.ParquetWriter(tmp, table.schema)
            writer.write_table(table.cast(writer.schema))
            batch.clear()

        for row in rows:
            batch.append(tuple(row))
            if len(batch) >= CHUNK:
                flush()
        if batch or writer is None:
            flush()
        assert writer is not None  # the last flush() made it
        writer.close()
    tmp.replace(path)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m experiments.export",
        description="Export a results directory, one row per request.",
    )
    p.add_argument("directory", help="results directory (holds results.sqlite)")
    p.add_argument("--format", choices=FORMATS, default="csv")
    p.add_argument("--run", help="only this run id")
    p.add_argument("--out", help="output directory (default DIR/export)")
    args = p.parse_args(argv)
    try:
        written = export(args.directory, args.format, args.run, args.out)
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for kind, path in written.items():
        print(f"{kind}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
