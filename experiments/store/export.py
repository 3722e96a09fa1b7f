"""`python -m experiments.store.export DIR --format csv|parquet`: one row per request.

Writes DIR/export/requests.{csv,parquet} (every request joined with its cell: see
``Store.EXPORT_COLUMNS``), plus cells.csv|parquet (one row per cell, shaping as JSON),
ycsb.csv|parquet when there are YCSB cells (one row per cell and operation, OVERALL for
the cell's throughput: ``YCSB_EXPORT_COLUMNS``) and runs.json (the manifests). ``--run``
limits the export to one run.
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from common import extras
from common.command import Parser, command, prog
from common.errors import ConfigError, TestbedError
from common.files import replacing, write_file

from .db import CELL_COLUMNS, COLUMN_TYPES, JSON_CELL, Store, check_writable_dir

FORMATS = ("csv", "parquet")
YCSB_EXPORT_COLUMNS = (
    "run_id",
    "cell_id",
    "nodes",
    "rf",
    "latency_ms",
    "loss_pct",
    "profile",
    "policy",
    "repetition",
    "workload",
    "threads",
    "target",
    "read_cl",
    "write_cl",
    "records",
    "op",
    "intended",
    "count",
    "errors",
    "throughput_ops",
    "mean_ms",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "p999_ms",
    "max_ms",
    "return_codes",
)
CHUNK_ROWS = 100_000  # rows per Parquet row group (bounds the memory an export needs)


def export(
    directory: str | Path,
    fmt: str = "csv",
    run_id: str | None = None,
    out: str | Path | None = None,
    *,
    chunk_rows: int = CHUNK_ROWS,
) -> dict[str, Path]:
    """Export the store in ``directory``; returns the files written."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")
    if fmt == "parquet":
        extras.require("parquet", "--format parquet")
    store = Store(directory, read_only=True)
    try:
        if run_id is not None:
            store.run(run_id)  # raises for an unknown run
        cells = store.cells(run_id)
        if not cells:
            raise ConfigError(
                f"{store.path} holds no measured cells yet"
                + (f" for run {run_id}" if run_id else "")
                + ": nothing to export"
            )
        runs = [  # read before anything is written: a damaged manifest stops it here
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
        target = Path(out) if out else Path(directory) / "export"
        check_writable_dir(target, "export directory")
        created = not target.exists()
        target.mkdir(parents=True, exist_ok=True)
        # written whole into a directory of its own first, then moved in: a failure
        # half-way (a damaged store, a full disk, Ctrl-C) keeps nothing of this export
        stage = Path(tempfile.mkdtemp(prefix=".export-", dir=target))
        try:
            staged = _write_all(store, stage, fmt, run_id, cells, runs, chunk_rows)
            written = {}
            for kind, path in staged.items():
                written[kind] = path.replace(target / path.name)
        except BaseException:
            shutil.rmtree(target if created else stage, ignore_errors=True)
            raise
        stage.rmdir()
        return written
    finally:
        store.close()


def _write_all(store, target, fmt, run_id, cells, runs, chunk_rows) -> dict[str, Path]:
    """Every file of an export into ``target``: kind -> its path."""
    written = {}
    # closed here, not by the garbage collector after the store is (a failure half-way
    # would leave a generator reading a closed database)
    with contextlib.closing(store.iter_request_rows(run_id)) as rows:
        written["requests"] = _write(
            target / f"requests.{fmt}", fmt, Store.EXPORT_COLUMNS, rows, chunk_rows
        )
    if fmt == "parquet":  # nested columns as Arrow structs and lists, not JSON text
        path = target / "cells.parquet"
        with replacing(path, "wb") as f:
            import pyarrow.parquet as pq

            pq.write_table(cells_table(cells), f)
        written["cells"] = path
    else:
        cell_rows = ([_cell_value(c, k) for k in CELL_COLUMNS] for c in cells)
        written["cells"] = _write(target / "cells.csv", fmt, CELL_COLUMNS, cell_rows, chunk_rows)
    ycsb_rows = store.ycsb_ops(run_id)
    if ycsb_rows:
        written["ycsb"] = _write(
            target / f"ycsb.{fmt}",
            fmt,
            YCSB_EXPORT_COLUMNS,
            (
                [json.dumps(r[c]) if c == "return_codes" else r[c] for c in YCSB_EXPORT_COLUMNS]
                for r in ycsb_rows
            ),
            chunk_rows,
        )
    with contextlib.closing(store.iter_ycsb_requests(run_id)) as raw:
        first = next(raw, None)
        if first is not None:  # cells measured with --ycsb-raw
            written["ycsb_requests"] = _write(
                target / f"ycsb_requests.{fmt}",
                fmt,
                Store.YCSB_REQUEST_COLUMNS,
                itertools.chain([first], raw),
                chunk_rows,
            )
    written["runs"] = target / "runs.json"
    write_file(written["runs"], json.dumps(runs, indent=1))
    return written


def _cell_value(cell: dict, column: str):
    """A cell's value as exported: its JSON columns as JSON text (not Python's repr)."""
    value = cell[column]
    if column == "shaping" or (column in JSON_CELL and value is not None):
        return json.dumps(value)
    return value


# text "e1,e3" in the store and in CSV, list<string> in Parquet
LIST_COLUMNS = ("replicas",)


def arrow_type(column: str):
    """A column's Parquet type, from the store's column type (a list for LIST_COLUMNS)."""
    import pyarrow as pa

    if column in LIST_COLUMNS:
        return pa.list_(pa.string())
    return {"text": pa.string(), "integer": pa.int64(), "real": pa.float64()}[COLUMN_TYPES[column]]


def arrow_schema(columns: Sequence[str]):
    """The Parquet schema of ``columns``, from the store's column types."""
    import pyarrow as pa

    return pa.schema([(c, arrow_type(c)) for c in columns])


def _arrow_value(column: str, value):
    if column in LIST_COLUMNS and isinstance(value, str):
        return [x for x in value.split(",") if x]
    return value


def cells_table(cells: Sequence[dict]):
    """The cells as an Arrow table: plain columns typed as the store's, the JSON ones
    (shaping, fault and trace logs, read-back) as Arrow structs and lists wherever their
    values share one shape that Parquet can hold, else as JSON text."""
    import pyarrow as pa

    data = {}
    for column in CELL_COLUMNS:
        values = [c[column] for c in cells]
        if column == "shaping" or column in JSON_CELL:
            data[column] = _nested(values)
        else:
            data[column] = pa.array([_arrow_value(column, v) for v in values], arrow_type(column))
    return pa.table(data)


def _nested(values: list):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        array = pa.array(values)
        pq.write_table(pa.table({"v": array}), pa.BufferOutputStream())  # Parquet holds it
        return array
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return pa.array([None if v is None else json.dumps(v) for v in values], pa.string())


def _write(path: Path, fmt: str, columns: Sequence[str], rows, chunk_rows: int) -> Path:
    """``rows`` into ``path`` whole or not at all (a failure half-way, a damaged store or
    a full disk, keeps nothing), never through a name planted there (``replacing``)."""
    with replacing(path, "w" if fmt == "csv" else "wb", newline="" if fmt == "csv" else None) as f:
        if fmt == "csv":
            csv_writer = csv.writer(f)
            csv_writer.writerow(columns)
            csv_writer.writerows(rows)
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            schema = arrow_schema(columns)
            batch: list[tuple] = []
            with pq.ParquetWriter(f, schema) as writer:

                def flush() -> None:
                    data = {
                        c: [_arrow_value(c, r[i]) for r in batch] for i, c in enumerate(columns)
                    }
                    writer.write_table(pa.table(data, schema=schema))
                    batch.clear()

                for row in rows:
                    batch.append(tuple(row))
                    if len(batch) >= chunk_rows:
                        flush()
                if batch:
                    flush()
    return path


@command("python -m experiments.store.export")
def main(argv: list[str] | None = None) -> int:
    p = Parser(
        prog=prog("python -m experiments.store.export"),
        description="Export a results directory, one row per request.",
    )
    p.add_argument("directory", help="results directory (holds results.sqlite)")
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="csv",
        help="requests, cells (and YCSB) as CSV or as typed Parquet (default csv)",
    )
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
