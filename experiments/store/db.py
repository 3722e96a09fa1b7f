"""The results store: one SQLite file per results directory (``results.sqlite``).

Tables (see ``SCHEMA``): ``runs`` (one per sweep execution: config, manifest, status),
``cells`` (one per grid point measured, with the shaping measured for it), ``requests``
(one per timed write) and ``testbeds`` (the clusters a run started, so that a resumed run
can remove what a killed one left). A cell and its requests are committed in one
transaction: a cell is stored whole or not at all, so a run killed mid-cell resumes by
redoing only that cell.

The file is in WAL mode: readers (analysis, export, a test polling the store) never block
the sweep's commits and are never blocked by them. Every SQL statement lives here.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.errors import ConfigError, StateError, StateFileError, TestbedError
from common.files import check_not_kernel_fs
from common.inputs import json_text, shown

DB_NAME = "results.sqlite"
SCHEMA_VERSION = 7
# What each older schema lacks, by version: cell columns added (nullable, with their
# SCHEMA type) when a writer opens such a store; a reader of one sees NULL in them.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("shard", "cpu_util"),
    2: ("worker",),
    3: ("workload", "threads", "target", "read_cl", "write_cl", "records"),
    4: ("fault", "fault_log", "trace", "trace_log"),
    5: ("sites",),
    6: ("readback",),
}
# How long a statement waits for another connection's lock before failing. In WAL mode
# only writers wait for each other (two sweeps on one directory); readers never wait.
BUSY_TIMEOUT_S = 30.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    name TEXT NOT NULL,
    config TEXT NOT NULL,          -- JSON: the SweepConfig
    manifest TEXT NOT NULL,        -- JSON: versions, machine, shaper, baselines
    status TEXT NOT NULL,          -- running | interrupted | failed | complete
    started REAL NOT NULL,
    finished REAL
);
CREATE TABLE IF NOT EXISTS cells (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    cell_id TEXT NOT NULL,
    nodes INTEGER NOT NULL,
    rf INTEGER NOT NULL,
    cl TEXT NOT NULL,
    policy TEXT NOT NULL,
    profile TEXT NOT NULL,
    latency_ms REAL NOT NULL,
    loss_pct REAL NOT NULL,
    repetition INTEGER NOT NULL,
    writes INTEGER NOT NULL,
    warmup INTEGER NOT NULL,
    key_seed TEXT NOT NULL,
    shaping TEXT NOT NULL,         -- JSON: configured matrix + measured (emulation verify)
    testbed_run TEXT NOT NULL,
    started REAL NOT NULL,
    finished REAL NOT NULL,
    shard TEXT,                    -- the sweep's testbed slot that measured it (s0, s1, ...)
    cpu_util REAL,                 -- the machine's CPU busy fraction (0..1) during the cell
    worker TEXT,                   -- the --workers machine that measured it (NULL: local)
    workload TEXT,                 -- NULL or writes: the paper's writes; else a YCSB workload
    threads INTEGER,               -- YCSB: client threads
    target REAL,                   -- YCSB: target ops/s (NULL: closed loop)
    read_cl TEXT,                  -- YCSB: read level
    write_cl TEXT,                 -- YCSB: write level
    records INTEGER,               -- YCSB: records the keyspace was loaded with
    fault TEXT,                    -- NULL or none: no fault; else experiments.settings.faults' text
    fault_log TEXT,                -- JSON: when each step was applied, the recovery's times
    trace TEXT,                    -- NULL or none: links fixed; else the link trace replayed
    trace_log TEXT,                -- JSON: the trace's achieved schedule (emulation.trace)
    sites TEXT,                    -- NULL: one site; else nodes per site (3x3, 2,3): rf per site
    readback TEXT,                 -- JSON: the acknowledged writes read back (workloads.readback)
    PRIMARY KEY (run_id, cell_id)
);
CREATE TABLE IF NOT EXISTS requests (
    run_id TEXT NOT NULL,
    cell_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    key TEXT NOT NULL,
    coordinator TEXT,              -- host name (e0..), NULL if no node answered
    replicas TEXT NOT NULL,        -- host names of the key's replicas, comma-separated
    coordinator_is_replica INTEGER,
    rtt_ns INTEGER NOT NULL,
    error TEXT,                    -- driver exception type, NULL on success
    t_start_ns INTEGER NOT NULL,   -- wall clock (time.time_ns) at send
    PRIMARY KEY (run_id, cell_id, seq),
    FOREIGN KEY (run_id, cell_id) REFERENCES cells(run_id, cell_id)
);
CREATE TABLE IF NOT EXISTS ycsb_ops (
    run_id TEXT NOT NULL,
    cell_id TEXT NOT NULL,
    op TEXT NOT NULL,              -- READ, UPDATE, INSERT, SCAN, READ-MODIFY-WRITE, DELETE;
                                   -- OVERALL: the cell's operations and throughput
    intended INTEGER NOT NULL,     -- 1: latency from the intended start (open loop, CO-corrected)
    count INTEGER NOT NULL,
    errors INTEGER NOT NULL,
    return_codes TEXT,             -- JSON: YCSB's count per status (OK, ERROR, NOT_FOUND)
    throughput_ops REAL,           -- OVERALL only: operations over their window
    mean_ms REAL, min_ms REAL, max_ms REAL,
    p50_ms REAL, p95_ms REAL, p99_ms REAL, p999_ms REAL,
    hdr TEXT,                      -- YCSB's HdrHistogram log of the op (every percentile)
    PRIMARY KEY (run_id, cell_id, op, intended),
    FOREIGN KEY (run_id, cell_id) REFERENCES cells(run_id, cell_id)
);
CREATE TABLE IF NOT EXISTS ycsb_requests (
    run_id TEXT NOT NULL,
    cell_id TEXT NOT NULL,
    seq INTEGER NOT NULL,          -- order in YCSB's raw file (grouped by operation)
    op TEXT NOT NULL,
    t_ms INTEGER NOT NULL,         -- wall clock (ms) when the operation ended
    latency_us INTEGER NOT NULL,
    PRIMARY KEY (run_id, cell_id, seq),
    FOREIGN KEY (run_id, cell_id) REFERENCES cells(run_id, cell_id)
);
CREATE TABLE IF NOT EXISTS testbeds (
    run_id TEXT NOT NULL,
    testbed_run TEXT PRIMARY KEY,
    nodes INTEGER NOT NULL,
    status TEXT NOT NULL,          -- up | down
    started REAL NOT NULL
);
"""


def _schema() -> dict[str, dict[str, str]]:
    """Every table's columns and their types as SCHEMA declares them, read from SCHEMA by
    SQLite itself: the columns are written once, there."""
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(SCHEMA)
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {
            t: {r[1]: r[2].lower() for r in db.execute(f"PRAGMA table_info({t})")} for t in tables
        }
    finally:
        db.close()


TABLES = _schema()
CELL_COLUMNS = tuple(TABLES["cells"])
YCSB_OP_COLUMNS = tuple(TABLES["ycsb_ops"])
REQUEST_COLUMNS = tuple(TABLES["requests"])
YCSB_REQUEST_COLUMNS = tuple(TABLES["ycsb_requests"])
YCSB_CELL = MIGRATIONS[3]
FAULT_CELL = MIGRATIONS[4]
# cell columns that may be left NULL (a writes cell has no YCSB settings, most no fault)
OPTIONAL = (*MIGRATIONS[1], *MIGRATIONS[2], *YCSB_CELL, *FAULT_CELL, *MIGRATIONS[5],
            *MIGRATIONS[6])  # fmt: skip
# cell columns holding JSON (or NULL), besides the shaping's (never NULL)
JSON_CELL = ("fault_log", "trace_log", "readback")
# The type of every column of the measured tables: exports write these types whatever
# values a chunk of rows happens to hold (an error column NULL in a whole chunk is text).
COLUMN_TYPES = {
    c: t
    for table in ("cells", "ycsb_ops", "ycsb_requests", "requests")
    for c, t in TABLES[table].items()
}


class StoreError(TestbedError):
    """The results store refused a write; the transaction was rolled back."""


class StoreFullError(StoreError):
    """The results store could not grow (disk or database full); the transaction that
    hit it was rolled back, so the run stays resumable."""

    def __init__(self, directory: object, detail: str):
        self.directory = directory
        super().__init__(
            f"no space left for results in {directory} ({detail}): free space there and "
            f"rerun the same command to resume; nothing half-written was kept"
        )


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    fingerprint: str
    status: str
    config: dict[str, Any]
    manifest: dict[str, Any]
    started: float
    finished: float | None


def check_writable_dir(directory: str | Path, what: str = "results directory") -> Path:
    """``directory`` if it is, or can be created as, a directory this process may write
    in; ConfigError naming it otherwise. Creates nothing."""
    path = Path(directory)
    check_not_kernel_fs(path, what)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{what} {path} is not a directory")
    existing = path
    while not existing.exists():  # the nearest ancestor that exists must take a new entry
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{what} {path} cannot be created: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{what} {path} is not writable"
            + ("" if existing == path else f" (cannot create it in {existing})")
        )
    return path


def refuse_planted(directory: Path) -> None:
    """StateFileError where a file of the store in ``directory`` is a symbolic link:
    SQLite follows links, its -wal and -shm files' too, and a name planted in a results
    directory others can write to would have root write through it."""
    for name in (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", f"{DB_NAME}-journal"):
        if (directory / name).is_symlink():
            raise StateFileError(
                f"{directory / name} is a symbolic link: refused (the store's files are "
                f"the sweep's own; remove it if you did not plant it)"
            )


def check_store_file(path: Path) -> None:
    """Raise StateFileError unless ``path`` is a results store of this tool (read-only
    check: a file that is not a store is never changed). An empty file is a store whose
    creation a kill interrupted, and passes."""
    if not path.is_file():
        raise StateFileError(f"{path} is not a file (expected a results store, {DB_NAME})")
    if path.stat().st_size == 0:
        return
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise StateFileError(f"{path} cannot be opened as a results store: {exc}") from None
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        missing = {"meta", "runs", "cells", "requests", "testbeds"} - tables
        if missing:
            raise StateFileError(
                f"{path} is not a results store of this tool (no table "
                f"{', '.join(sorted(missing))})"
            )
        row = con.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    except sqlite3.Error as exc:  # not SQLite at all, or damaged
        raise StateFileError(f"{path} is not a readable results store: {exc}") from None
    finally:
        con.close()
    readable = {str(SCHEMA_VERSION), *map(str, MIGRATIONS)}
    if row is None or row[0] not in readable:
        raise StateFileError(
            f"{path} has results schema {row[0] if row else 'none'}, this tool reads "
            f"schema {', '.join(sorted(readable))}"
        )


def _ensure_schema(db: sqlite3.Connection) -> None:
    """Every table of this schema (those a store lacks are added), and the schema's
    version where none is recorded yet."""
    db.executescript(SCHEMA)
    if db.execute("SELECT value FROM meta WHERE key='schema'").fetchone() is None:
        db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))


def _create(path: Path) -> None:
    """Make an empty store at ``path`` in one step: built beside it under a name of this
    process's own, then linked into place. A reader (analysis, a test polling a running
    sweep) never sees a file that has no schema yet, and a kill midway leaves no
    half-made store. When another process made the store first, its store is kept."""
    tmp = path.with_name(f".{path.name}.new-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        con = sqlite3.connect(tmp)
        try:
            con.execute("PRAGMA journal_mode = WAL")
            with con:
                _ensure_schema(con)
        finally:
            con.close()  # the last connection: SQLite checkpoints and removes the WAL
        try:
            os.link(tmp, path)  # unlike rename, never replaces a store made meanwhile
        except FileExistsError:
            pass
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
            leftover.unlink(missing_ok=True)


# The parts of a run's manifest that the sweep and the analysis read, and their types
MANIFEST_TYPES: dict[str, type | tuple[type, ...]] = {
    "clusters": dict, "teardowns": dict, "baseline": dict, "parallel": dict,
    "workers": dict, "faults": list, "packages": dict,
    "wall_s": (int, float), "cpu_util": (int, float),
}  # fmt: skip
NESTED_OBJECTS = ("clusters", "teardowns", "baseline", "workers")


class Reads:
    """The store's read side: what export, plots and the analysis query (no writes)."""

    db: sqlite3.Connection
    path: Path
    _cell_select: str

    def _json(self, text: str | None, what: str, kind: type | None = None) -> Any:
        """A JSON column's value; StateFileError naming the store and the value where
        it is not JSON (or, with ``kind``, not a value of that type)."""
        try:
            value = json_text(text, what) if text is not None else None
        except ConfigError as exc:
            detail = str(exc).split(": invalid JSON: ", 1)[-1]
            raise StateFileError(
                f"{self.path}: {what} is not JSON ({detail}): damaged, or changed by another tool"
            ) from None
        if kind is not None and value is not None and not isinstance(value, kind):
            raise StateFileError(
                f"{self.path}: {what} is {type(value).__name__}, not "
                f"{'an object' if kind is dict else kind.__name__}: damaged, or changed by "
                f"another tool"
            )
        return value

    def _manifest(self, text: str | None, run_id: str) -> dict[str, Any]:
        """A run's manifest, its parts of the types the sweep and the analysis read."""
        what = f"the manifest of run {run_id}"
        manifest = self._json(text, what, dict) or {}
        for key, kinds in MANIFEST_TYPES.items():
            value = manifest.get(key)
            if key not in manifest or (value is None and key == "cpu_util"):  # unmeasured
                continue
            if not isinstance(value, kinds) or isinstance(value, bool):
                raise StateFileError(
                    f"{self.path}: {what}: {key} is {type(value).__name__} "
                    f"{shown(value)}: damaged, or changed by another tool"
                )
            entries = value.values() if isinstance(value, dict) else ()
            if key in NESTED_OBJECTS and not all(isinstance(v, dict) for v in entries):
                raise StateFileError(
                    f"{self.path}: {what}: an entry of {key} is not an object: damaged, or "
                    f"changed by another tool"
                )
        return manifest

    YCSB_REQUEST_COLUMNS = YCSB_REQUEST_COLUMNS

    def iter_ycsb_requests(self, run_ids: str | Sequence[str] | None = None) -> Iterator[tuple]:
        """YCSB's raw rows (YCSB_REQUEST_COLUMNS), for the cells measured with them."""
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master")}
        if "ycsb_requests" not in tables:
            return
        where, args = _where_runs(run_ids)
        yield from self.db.execute(
            f"SELECT {', '.join(self.YCSB_REQUEST_COLUMNS)} FROM ycsb_requests{where} "
            "ORDER BY run_id, cell_id, seq",
            args,
        )

    def ycsb_ops(
        self, run_ids: str | Sequence[str] | None = None, *, hdr: bool = False
    ) -> list[dict[str, Any]]:
        """The YCSB rows (per cell and operation) of the runs, with their cell's columns;
        ``hdr``: with the HdrHistogram logs too. Empty for a store from before YCSB."""
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master")}
        if "ycsb_ops" not in tables:
            return []
        where, args = _where_runs(run_ids, "o.run_id")
        op_cols = [
            c for c in YCSB_OP_COLUMNS if c not in ("run_id", "cell_id") and (hdr or c != "hdr")
        ]
        cell_cols = [c for c in CELL_COLUMNS if c not in ("shaping", "key_seed", "testbed_run")]
        rows = self.db.execute(
            f"SELECT {', '.join(['c.' + c for c in cell_cols] + ['o.' + c for c in op_cols])} "
            "FROM ycsb_ops o JOIN cells c ON o.run_id = c.run_id AND o.cell_id = c.cell_id"
            f"{where} ORDER BY c.started, o.intended, o.op",
            args,
        )
        out = []
        for row in rows:
            d = dict(zip(cell_cols + op_cols, row, strict=True))
            d["return_codes"] = self._json(d["return_codes"] or "{}", "a YCSB cell's return codes")
            out.append(d)
        return out

    def cells_per_worker(self, run_id: str) -> dict[str, int]:
        """Cells of the run by the worker that measured them ("local": this machine)."""
        return {
            w or "local": n
            for w, n in self.db.execute(
                "SELECT worker, count(*) FROM cells WHERE run_id=? GROUP BY worker ORDER BY worker",
                (run_id,),
            )
        }

    def cells(self, run_ids: str | Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Cells of one run, of several, or (None) of every run, in the order measured."""
        where, args = _where_runs(run_ids)
        out = []
        for row in self.db.execute(
            f"SELECT {self._cell_select} FROM cells{where} ORDER BY started", args
        ):
            cell = dict(zip(CELL_COLUMNS, row, strict=True))
            cell["shaping"] = self._json(cell["shaping"], f"the shaping of cell {cell['cell_id']}")
            for c in JSON_CELL:
                cell[c] = self._json(cell[c] or None, f"the {c} of cell {cell['cell_id']}")
            out.append(cell)
        return out

    def cell_count(self, run_ids: str | Sequence[str] | None = None) -> int:
        where, args = _where_runs(run_ids)
        return self.db.execute(f"SELECT COUNT(*) FROM cells{where}", args).fetchone()[0]

    def request_count(self, run_ids: str | Sequence[str] | None = None) -> int:
        where, args = _where_runs(run_ids)
        return self.db.execute(f"SELECT COUNT(*) FROM requests{where}", args).fetchone()[0]

    def rtts_ns(self, run_id: str, cell_id: str) -> list[int]:
        return [
            r[0]
            for r in self.db.execute(
                "SELECT rtt_ns FROM requests WHERE run_id=? AND cell_id=? ORDER BY seq",
                (run_id, cell_id),
            )
        ]

    def errors(self, run_id: str, cell_id: str) -> int:
        (n,) = self.db.execute(
            "SELECT COUNT(*) FROM requests WHERE run_id=? AND cell_id=? AND error IS NOT NULL",
            (run_id, cell_id),
        ).fetchone()
        return n

    def coordinator_is_replica_share(self, run_id: str, cell_id: str) -> float | None:
        """The share of a cell's requests whose coordinator held a replica (None when no
        request of it reached a coordinator)."""
        (share,) = self.db.execute(
            "SELECT AVG(coordinator_is_replica) FROM requests WHERE run_id=? AND cell_id=?",
            (run_id, cell_id),
        ).fetchone()
        return share

    def iter_outcomes(self, run_ids: str | Sequence[str] | None = None) -> Iterator[tuple]:
        """(run_id, cell_id, rtt_ns, coordinator_is_replica, error) per request, ordered by
        run, cell and sequence number: what analysis needs of each request."""
        where, args = _where_runs(run_ids)
        yield from self.db.execute(
            "SELECT run_id, cell_id, rtt_ns, coordinator_is_replica, error FROM requests"
            f"{where} ORDER BY run_id, cell_id, seq",
            args,
        )

    def total_rtt_ns(self, run_id: str) -> int:
        (total,) = self.db.execute(
            "SELECT COALESCE(SUM(rtt_ns), 0) FROM requests WHERE run_id=?", (run_id,)
        ).fetchone()
        return total

    # -- export ----------------------------------------------------------------------------

    # A request's cell (its grid point, up to the repetition), then the request itself.
    EXPORT_COLUMNS = (
        CELL_COLUMNS[: CELL_COLUMNS.index("repetition") + 1]
        + REQUEST_COLUMNS[REQUEST_COLUMNS.index("seq") :]
    )

    def requests(self, run_id: str, cell_id: str) -> list[dict[str, Any]]:
        """Every request of one cell, in order (REQUEST_COLUMNS)."""
        rows = self.db.execute(
            f"SELECT {', '.join(REQUEST_COLUMNS)} FROM requests WHERE run_id=? AND cell_id=? "
            "ORDER BY seq",
            (run_id, cell_id),
        )
        return [dict(zip(REQUEST_COLUMNS, r, strict=True)) for r in rows]

    def iter_request_rows(self, run_ids: str | Sequence[str] | None = None) -> Iterator[tuple]:
        """One tuple per request, joined with its cell (EXPORT_COLUMNS order)."""
        where, args = _where_runs(run_ids, "r.run_id")
        yield from self.db.execute(
            "SELECT r.run_id, r.cell_id, c.nodes, c.rf, c.cl, c.policy, c.profile, "
            "c.latency_ms, c.loss_pct, c.repetition, r.seq, r.key, r.coordinator, "
            "r.replicas, r.coordinator_is_replica, r.rtt_ns, r.error, r.t_start_ns "
            "FROM requests r JOIN cells c ON r.run_id = c.run_id AND r.cell_id = c.cell_id"
            f"{where} ORDER BY c.started, r.seq",
            args,
        )


class Store(Reads):
    """A results directory's SQLite store. Safe against kill -9 (SQLite transactions).

    Raises ConfigError when ``directory`` holds no store and ``create`` is false, and
    StateFileError when its results.sqlite is not a store of this tool (nothing is
    written to it then)."""

    def __init__(
        self,
        directory: str | Path,
        *,
        create: bool = True,
        read_only: bool = False,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
        max_pages: int | None = None,
    ):
        """Open (or, with ``create``, make) the store in ``directory``.

        ``read_only`` opens an existing store for reading (analysis, export): it writes
        nothing. ``max_pages`` caps the database's size in pages, so tests can reach
        "database or disk is full" without filling a disk. Raises ConfigError when there
        is no store and ``create`` is false (or ``read_only``), StateError on a schema
        this code does not write.
        """
        self.dir = Path(directory)
        self.path = self.dir / DB_NAME
        self._find_or_make(create=create, read_only=read_only)
        if read_only:
            self.db = sqlite3.connect(
                f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=busy_timeout_s
            )
        else:
            # The sweep's shards share one writer connection, one call at a time
            # (scheduler.SharedStore): SQLite's own thread check would refuse that.
            self.db = sqlite3.connect(self.path, timeout=busy_timeout_s, check_same_thread=False)
            # Persistent in the file: every later connection, reader or writer, uses WAL.
            self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA foreign_keys = ON")
        if max_pages is not None:
            self.db.execute(f"PRAGMA max_page_count = {int(max_pages)}")
        if not read_only:
            with self._writing():
                _ensure_schema(self.db)
            if self._schema_version() in MIGRATIONS:
                self._migrate()
        version = self._schema_version()
        if version != SCHEMA_VERSION and not (read_only and version in MIGRATIONS):
            self.db.close()
            raise StateFileError(
                f"{self.path} has schema {version}, this tool writes {SCHEMA_VERSION}"
            )
        if version == SCHEMA_VERSION:
            self._check_columns()
        present = {r[1] for r in self.db.execute("PRAGMA table_info(cells)")}
        self._cell_select = ", ".join(c if c in present else f"NULL AS {c}" for c in CELL_COLUMNS)

    def _find_or_make(self, *, create: bool, read_only: bool) -> None:
        """Check the store's file, or make an empty store (``create``, not ``read_only``)."""
        if not read_only:
            refuse_planted(self.dir)
        if self.path.exists():
            check_store_file(self.path)  # StateFileError for a file that is not a store
            if read_only and self.path.stat().st_size == 0:
                raise ConfigError(f"{self.path} holds no results yet")
        elif read_only or not create:
            raise ConfigError(
                f"no results in {self.dir} (expected {DB_NAME}; run "
                f"`edgetb sweep --out {self.dir}` first)"
            )
        else:
            check_writable_dir(self.dir)
            self.dir.mkdir(parents=True, exist_ok=True)
            _create(self.path)

    def _check_columns(self) -> None:
        """StateFileError unless every table has every column SCHEMA gives it (a store
        of this version that lost one was changed by something else than this tool)."""
        for table, columns in TABLES.items():
            present = {r[1] for r in self.db.execute(f"PRAGMA table_info({table})")}
            missing = [c for c in columns if c not in present]
            if missing:
                self.db.close()
                raise StateFileError(
                    f"{self.path}: table {table} has no column {', '.join(missing)}: "
                    f"damaged, or changed by another tool"
                )

    def _migrate(self) -> None:
        """Bring an older schema to SCHEMA_VERSION in one transaction: DDL outside one
        (what the sqlite3 module does with ALTER TABLE) would commit each statement
        apart, and a kill between them leave columns whose ADD fails at every later
        open. The version is read again under the write lock (another writer may have
        migrated meanwhile); a column already there is not added again."""
        with self._writing():
            self.db.execute("BEGIN IMMEDIATE")
            version = self._schema_version()
            if version not in MIGRATIONS:
                return
            present = {r[1] for r in self.db.execute("PRAGMA table_info(cells)")}
            for v in range(version, SCHEMA_VERSION):
                for column in MIGRATIONS[v]:
                    if column not in present:
                        kind = TABLES["cells"][column].upper()
                        self.db.execute(f"ALTER TABLE cells ADD COLUMN {column} {kind}")
            self.db.execute("UPDATE meta SET value=? WHERE key='schema'", (str(SCHEMA_VERSION),))

    def _schema_version(self) -> int | None:
        row = self.db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        return None if row is None else int(row[0])

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """One transaction: committed whole or rolled back. A full disk or database
        (SQLITE_FULL, on a statement or on the commit) becomes StoreFullError."""
        try:
            with self.db:  # commits, or rolls back on an exception (also a failed commit)
                yield
        except sqlite3.OperationalError as exc:
            if self.db.in_transaction:
                self.db.rollback()
            if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
                raise StoreFullError(self.dir, str(exc)) from exc
            raise
        except sqlite3.IntegrityError as exc:  # a cell id twice: two grid points, one id
            if self.db.in_transaction:
                self.db.rollback()
            raise StoreError(f"{self.dir}: {exc}; nothing of it was kept") from exc

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs ------------------------------------------------------------------------------

    def begin_run(
        self, run_id: str, fingerprint: str, name: str, config: dict, manifest: dict
    ) -> None:
        with self._writing():
            self.db.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?, 'running', ?, NULL)",
                (run_id, fingerprint, name, json.dumps(config), json.dumps(manifest), time.time()),
            )

    def latest_run(self, fingerprint: str) -> RunInfo | None:
        matching = [r for r in self.runs() if r.fingerprint == fingerprint]
        return matching[-1] if matching else None

    def resumable_run(self, fingerprint: str) -> RunInfo | None:
        """The newest run with this fingerprint, if it did not complete."""
        latest = self.latest_run(fingerprint)
        return latest if latest is not None and latest.status != "complete" else None

    def runs(self) -> list[RunInfo]:
        rows = self.db.execute(
            "SELECT run_id, fingerprint, status, config, manifest, started, finished "
            "FROM runs ORDER BY started"
        ).fetchall()
        return [
            RunInfo(
                r[0],
                r[1],
                r[2],
                self._json(r[3], f"the configuration of run {r[0]}", dict),
                self._manifest(r[4], r[0]),
                r[5],
                r[6],
            )
            for r in rows
        ]

    def run(self, run_id: str) -> RunInfo:
        for r in self.runs():
            if r.run_id == run_id:
                return r
        raise StateError(f"no run {run_id!r} in {self.path}")

    def set_status(self, run_id: str, status: str) -> None:
        finished = time.time() if status != "running" else None
        with self._writing():
            self.db.execute(
                "UPDATE runs SET status=?, finished=? WHERE run_id=?", (status, finished, run_id)
            )

    def update_manifest(self, run_id: str, **entries: Any) -> dict:
        """Merge ``entries`` into the run's manifest (one level deep for dict values)."""
        with self._writing():
            (text,) = self.db.execute(
                "SELECT manifest FROM runs WHERE run_id=?", (run_id,)
            ).fetchone()
            manifest = self._manifest(text, run_id)
            for key, value in entries.items():
                if isinstance(value, dict) and isinstance(manifest.get(key), dict):
                    manifest[key].update(value)
                else:
                    manifest[key] = value
            self.db.execute(
                "UPDATE runs SET manifest=? WHERE run_id=?", (json.dumps(manifest), run_id)
            )
        return manifest

    # -- testbeds --------------------------------------------------------------------------

    def testbed_started(self, run_id: str, testbed_run: str, nodes: int) -> None:
        with self._writing():
            self.db.execute(
                "INSERT INTO testbeds VALUES (?, ?, ?, 'up', ?)",
                (run_id, testbed_run, nodes, time.time()),
            )

    def testbed_down(self, testbed_run: str) -> None:
        with self._writing():
            self.db.execute("UPDATE testbeds SET status='down' WHERE testbed_run=?", (testbed_run,))

    def testbed_runs(self) -> list[str]:
        """Every testbed the store's runs started, up or down."""
        return [r[0] for r in self.db.execute("SELECT testbed_run FROM testbeds ORDER BY started")]

    def testbeds_up(self) -> list[str]:
        """Testbeds a run started and did not record as down (a killed sweep's)."""
        return [
            r[0]
            for r in self.db.execute(
                "SELECT testbed_run FROM testbeds WHERE status='up' ORDER BY started"
            )
        ]

    # -- cells -----------------------------------------------------------------------------

    def done_cells(self, run_id: str) -> set[str]:
        return {
            r[0] for r in self.db.execute("SELECT cell_id FROM cells WHERE run_id=?", (run_id,))
        }

    def commit_cell(
        self,
        cell: dict[str, Any],
        requests: Iterable[dict[str, Any]],
        *,
        once: bool = False,
        ycsb_ops: Iterable[dict[str, Any]] = (),
        ycsb_requests: Iterable[tuple[str, int, int]] = (),
    ) -> bool:
        """Store a cell and all its requests (iterated once), or a YCSB cell and its
        per-operation rows, atomically. ``once``: a cell already stored (a worker's cell
        sent again after a re-queue or a resume) is left as it is and nothing is
        inserted; returns whether the cell was stored."""
        verb = "INSERT OR IGNORE" if once else "INSERT"
        with self._writing():
            cur = self.db.execute(
                f"{verb} INTO cells ({', '.join(CELL_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(CELL_COLUMNS))})",
                [
                    json.dumps(cell[c])
                    if c == "shaping"
                    else (json.dumps(cell[c]) if cell.get(c) is not None else None)
                    if c in JSON_CELL
                    else cell.get(c)
                    if c in OPTIONAL
                    else cell[c]
                    for c in CELL_COLUMNS
                ],
            )
            if cur.rowcount == 0:
                return False
            self.db.executemany(
                f"INSERT INTO requests ({', '.join(REQUEST_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(REQUEST_COLUMNS))})",
                ([r[c] for c in REQUEST_COLUMNS] for r in requests),
            )
            self.db.executemany(
                f"INSERT INTO ycsb_ops ({', '.join(YCSB_OP_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(YCSB_OP_COLUMNS))})",
                (
                    [json.dumps(r[c]) if c == "return_codes" else r.get(c) for c in YCSB_OP_COLUMNS]
                    for r in ycsb_ops
                ),
            )
            self.db.executemany(
                "INSERT INTO ycsb_requests VALUES (?, ?, ?, ?, ?, ?)",
                (
                    (cell["run_id"], cell["cell_id"], seq, op, t_ms, latency_us)
                    for seq, (op, t_ms, latency_us) in enumerate(ycsb_requests)
                ),
            )
        return True


def _where_runs(run_ids: str | Sequence[str] | None, column: str = "run_id") -> tuple[str, tuple]:
    """A WHERE clause limiting ``column`` to the given run ids (none: every run)."""
    if run_ids is None:
        return "", ()
    ids = (run_ids,) if isinstance(run_ids, str) else tuple(run_ids)
    return f" WHERE {column} IN ({', '.join('?' * len(ids))})", ids
