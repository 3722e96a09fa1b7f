"""Results store: atomic cells, resume bookkeeping, concurrent readers, a full store,
export (SQLite in a temp dir)."""

import csv
import json
import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from experiments.store.db import DB_NAME, SCHEMA_VERSION, Store, StoreError, StoreFullError
from experiments.store.export import export


def cell(cell_id="n3-rf1-l0-p0.5-r1", run_id="run1", **extra):
    base = {
        "run_id": run_id,
        "cell_id": cell_id,
        "nodes": 3,
        "rf": 1,
        "cl": "LOCAL_QUORUM",
        "policy": "round-robin",
        "profile": "paper",
        "latency_ms": 0.0,
        "loss_pct": 0.5,
        "repetition": 1,
        "writes": 2,
        "warmup": 0,
        "key_seed": "1:r1",
        "shaping": {"measured": {"median_rtt_ms": 0.6}},
        "testbed_run": "tb1",
        "started": 1.0,
        "finished": 2.0,
    }
    return {**base, **extra}


def requests(cell_id="n3-rf1-l0-p0.5-r1", run_id="run1", n=2):
    return [
        {
            "run_id": run_id,
            "cell_id": cell_id,
            "seq": i,
            "key": f"k{i}",
            "coordinator": f"e{i % 3}",
            "replicas": "e0",
            "coordinator_is_replica": int(i == 0),
            "rtt_ns": 1_000_000 * (i + 1),
            "error": None if i else "WriteTimeout",
            "t_start_ns": i,
        }
        for i in range(n)
    ]


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "res")
    s.begin_run("run1", "fp", "test", {"writes": 2}, {"baseline": {}})
    yield s
    s.close()


def test_cell_is_committed_whole_or_not_at_all(store):
    bad = requests()
    bad[1]["rtt_ns"] = None  # NOT NULL violated by the second request
    with pytest.raises(StoreError, match="NOT NULL constraint failed: requests.rtt_ns"):
        store.commit_cell(cell(), bad)
    assert store.done_cells("run1") == set()
    assert store.request_count() == 0
    store.commit_cell(cell(), requests())
    assert store.done_cells("run1") == {"n3-rf1-l0-p0.5-r1"}
    with pytest.raises(StoreError, match="UNIQUE constraint failed"):  # not stored twice
        store.commit_cell(cell(), requests())
    assert store.rtts_ns("run1", "n3-rf1-l0-p0.5-r1") == [1_000_000, 2_000_000]
    assert store.errors("run1", "n3-rf1-l0-p0.5-r1") == 1


def test_resume_finds_the_unfinished_run(store):
    assert store.resumable_run("fp").run_id == "run1"
    store.set_status("run1", "complete")
    assert store.resumable_run("fp") is None
    assert store.latest_run("fp").status == "complete"
    assert store.resumable_run("other") is None


def test_manifest_merges_and_testbeds_are_tracked(store):
    store.update_manifest("run1", baseline={"3": {"median": 2.5}})
    store.update_manifest("run1", baseline={"5": {"median": 2.9}}, wall_s=10)
    m = store.run("run1").manifest
    assert m["baseline"] == {"3": {"median": 2.5}, "5": {"median": 2.9}} and m["wall_s"] == 10
    store.testbed_started("run1", "tbA", 3)
    assert store.testbeds_up() == ["tbA"]
    store.testbed_down("tbA")
    assert store.testbeds_up() == []


def test_a_reader_never_blocks_a_commit_nor_sees_half_a_cell(store, tmp_path):
    store.commit_cell(cell(), requests())
    reader = Store(tmp_path / "res", read_only=True, busy_timeout_s=0)
    rows = reader.iter_request_rows()
    next(rows)  # the reader is now inside a read transaction
    # No busy timeout: a commit that had to wait for the reader would fail at once with
    # "database is locked" (as with a rollback journal, where a long analysis query
    # would break a running sweep), so its success is the proof, not a clock.
    writer = Store(tmp_path / "res", busy_timeout_s=0)
    writer.commit_cell(cell("n3-rf1-l20-p0.5-r1"), requests("n3-rf1-l20-p0.5-r1"))
    writer.close()
    assert len(list(rows)) == 1  # its snapshot: the two requests there when it began
    assert reader.request_count() == 4  # a new read sees the commit
    reader.close()


def test_a_writer_inside_a_cell_transaction_does_not_break_a_reader(store, tmp_path):
    store.commit_cell(cell(), requests())
    inside, release, failures = threading.Event(), threading.Event(), []

    class SlowRequests:  # the cell's transaction stays open until `release`
        def __iter__(self) -> Iterator[dict[str, Any]]:
            reqs = requests("n3-rf1-l20-p0.5-r1", n=4)
            yield from reqs[:2]
            inside.set()
            release.wait(10)
            yield from reqs[2:]

    def write() -> None:
        try:
            with Store(tmp_path / "res", busy_timeout_s=0.5) as writer:
                writer.commit_cell(cell("n3-rf1-l20-p0.5-r1"), SlowRequests())
        except Exception as exc:  # reported below, in the test's thread
            failures.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    try:
        assert inside.wait(10)
        # no busy timeout: a read that had to wait for the writer would fail at once
        with Store(tmp_path / "res", read_only=True, busy_timeout_s=0) as reader:
            assert {c["cell_id"] for c in reader.cells()} == {"n3-rf1-l0-p0.5-r1"}
            assert reader.request_count() == 2  # nothing of the open transaction
    finally:
        release.set()
        thread.join(10)
    assert not failures
    assert store.request_count() == 6 and len(store.done_cells("run1")) == 2


def test_a_full_store_is_a_clear_error_and_the_run_resumes(tmp_path):
    directory = tmp_path / "res"
    with Store(directory) as s:
        s.begin_run("run1", "fp", "test", {"writes": 2}, {})
    pages = (directory / DB_NAME).stat().st_size // 4096  # WAL checkpointed on close
    big = "n3-rf1-l20-p0.5-r1"
    # SQLite's own size cap raises SQLITE_FULL exactly as a full disk does.
    with Store(directory, max_pages=pages + 2) as s:
        s.commit_cell(cell(), requests())  # fits into the pages it has
        with pytest.raises(StoreFullError) as info:
            s.commit_cell(cell(big, writes=3000), requests(big, n=3000))
        message = str(info.value)
        assert str(directory) in message and "rerun" in message and "\n" not in message
        assert s.done_cells("run1") == {"n3-rf1-l0-p0.5-r1"}  # no half cell
        assert s.request_count() == 2
        s.set_status("run1", "failed")  # the connection is still usable
    with Store(directory) as s:  # space freed: the rerun stores the cell
        resumed = s.resumable_run("fp")
        assert resumed is not None and resumed.run_id == "run1"
        s.commit_cell(cell(big, writes=3000), requests(big, n=3000))
        assert s.request_count() == 3002 and s.cell_count("run1") == 2


def test_export_csv_has_one_row_per_request(store, tmp_path):
    store.commit_cell(cell(), requests())
    store.commit_cell(cell("n3-rf1-l20-p0.5-r1", latency_ms=20.0), requests("n3-rf1-l20-p0.5-r1"))
    written = export(tmp_path / "res", "csv")
    with open(written["requests"]) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4
    required = {
        "run_id",
        "cell_id",
        "nodes",
        "rf",
        "cl",
        "policy",
        "profile",
        "latency_ms",
        "loss_pct",
        "repetition",
        "seq",
        "coordinator",
        "coordinator_is_replica",
        "rtt_ns",
        "error",
    }
    assert required <= set(rows[0])
    assert {r["latency_ms"] for r in rows} == {"0.0", "20.0"}
    assert json.loads(written["runs"].read_text())[0]["run_id"] == "run1"


def test_export_parquet(store, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    store.commit_cell(cell(), requests())
    written = export(tmp_path / "res", "parquet")
    table = pq.read_table(written["requests"])
    assert table.num_rows == 2
    assert table.column("rtt_ns").to_pylist() == [1_000_000, 2_000_000]
    assert table.column("error").to_pylist() == ["WriteTimeout", None]


def test_parquet_types_come_from_the_schema_not_from_the_first_chunk(store, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    ok = requests("n3-rf1-l0-p0.5-r1", n=4)
    for r in ok:
        r["error"] = None
        r["coordinator_is_replica"] = None  # no coordinator answered: NULL, as stored
    store.commit_cell(cell(), ok)
    later = cell("n3-rf1-l20-p0.5-r1", latency_ms=20.0, started=3.0, finished=4.0)
    store.commit_cell(later, requests("n3-rf1-l20-p0.5-r1"))
    # 2 rows per chunk: the first two chunks have no error at all, the third has one.
    written = export(tmp_path / "res", "parquet", chunk_rows=2)
    parquet = pq.ParquetFile(written["requests"])
    assert parquet.metadata.num_row_groups == 3
    table = parquet.read()
    assert str(table.schema.field("error").type) == "string"
    assert str(table.schema.field("coordinator_is_replica").type) == "int64"
    assert table.column("error").to_pylist() == [None] * 4 + ["WriteTimeout", None]
    assert table.column("latency_ms").to_pylist() == [0.0] * 4 + [20.0] * 2
    cells = pq.read_table(written["cells"])
    assert str(cells.schema.field("finished").type) == "double"


def test_parquet_holds_lists_and_structs_not_json_text(store, tmp_path):
    """Issue 43: a request's replicas are a list, a cell's shaping and logs are structs
    (as the store's JSON has them), readable without parsing text; a JSON column whose
    values do not share one shape stays JSON text that reads back as the store holds it."""
    pq = pytest.importorskip("pyarrow.parquet")
    reqs = requests()
    reqs[1]["replicas"] = "e0,e2"
    readback = {"lost": 0, "verdicts": {"ok": 2}}
    first = cell(fault_log={"events": [{"step": "make", "at_ns": 5}]}, readback=readback)
    store.commit_cell(first, reqs)
    other = cell("n3-rf1-l20-p0.5-r1", latency_ms=20.0, started=3.0, finished=4.0,
                 fault_log={"events": "not a list"})  # fmt: skip
    store.commit_cell(other, requests("n3-rf1-l20-p0.5-r1"))
    written = export(tmp_path / "res", "parquet")
    table = pq.read_table(written["requests"])
    assert str(table.schema.field("replicas").type) == "list<element: string>"
    assert table.column("replicas").to_pylist()[:2] == [["e0"], ["e0", "e2"]]
    cells = pq.read_table(written["cells"]).to_pylist()
    assert str(pq.read_schema(written["cells"]).field("shaping").type).startswith("struct<")
    assert cells[0]["shaping"] == {"measured": {"median_rtt_ms": 0.6}}
    assert cells[0]["readback"] == readback and cells[1]["readback"] is None
    # two shapes of fault_log: JSON text, as CSV has it
    assert [json.loads(c["fault_log"]) for c in cells] == [
        {"events": [{"step": "make", "at_ns": 5}]},
        {"events": "not a list"},
    ]


def test_export_of_a_store_without_cells_is_a_clear_error(store, tmp_path):
    from common.errors import ConfigError

    with pytest.raises(ConfigError, match="holds no measured cells yet: nothing to export"):
        export(tmp_path / "res", "parquet")
    assert not (tmp_path / "res" / "export").exists()


def test_export_of_a_missing_store_is_a_clear_error(tmp_path):
    from common.errors import ConfigError

    with pytest.raises(ConfigError, match="no results in"):
        export(tmp_path / "nothing")


def test_a_file_that_is_not_a_store_is_refused_and_left_unchanged(tmp_path):
    from common.errors import StateFileError

    other = tmp_path / "other"
    other.mkdir()
    con = sqlite3.connect(other / "results.sqlite")  # someone else's SQLite database
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    before = (other / "results.sqlite").read_bytes()
    with pytest.raises(StateFileError, match="is not a results store of this tool"):
        Store(other)
    with pytest.raises(StateFileError, match="is not a results store of this tool"):
        export(other)
    assert (other / "results.sqlite").read_bytes() == before
    (other / "results.sqlite").write_bytes(b"\x00garbage" * 100)
    with pytest.raises(StateFileError, match="file is not a database"):
        Store(other)


def test_an_empty_store_file_left_by_a_kill_is_reused(tmp_path):
    (tmp_path / "results.sqlite").write_bytes(b"")
    with Store(tmp_path) as s:
        assert s.runs() == []


def test_a_reader_polling_a_store_being_made_sees_no_store_or_a_whole_one(tmp_path):
    """A test or an analysis polling a sweep that is just starting: the store appears
    whole (schema in it) or not at all, never as an empty or schema-less file."""
    from common.errors import ConfigError

    dirs = [tmp_path / f"out{i}" for i in range(30)]
    seen: list[str] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            for d in dirs:
                if (d / DB_NAME).exists():
                    try:
                        with Store(d, read_only=True) as s:
                            seen.append(f"ok {len(s.runs())}")
                    except (ConfigError, sqlite3.Error) as exc:
                        seen.append(f"{type(exc).__name__}: {exc}")

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        for d in dirs:
            Store(d).close()
    finally:
        done.set()
        reader.join()
    assert seen and all(s == "ok 0" for s in seen), sorted(set(seen))
    assert not [p for d in dirs for p in d.iterdir() if ".new-" in p.name]  # nothing left


def test_a_store_made_meanwhile_by_another_process_is_kept(tmp_path):
    from experiments.store.db import _create

    with Store(tmp_path) as s:
        s.begin_run("run1", "fp", "name", {}, {})
    _create(tmp_path / DB_NAME)  # lost the race: links nothing, removes its own copy
    with Store(tmp_path, read_only=True) as s:
        assert [r.run_id for r in s.runs()] == ["run1"]
    assert not [p for p in tmp_path.iterdir() if ".new-" in p.name]


def test_results_directory_must_be_a_writable_directory(tmp_path):
    from common.errors import ConfigError
    from experiments.store.db import check_writable_dir

    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="file is not a directory"):
        check_writable_dir(tmp_path / "file", "--out")
    with pytest.raises(ConfigError, match="cannot be created: .*file is not a directory"):
        check_writable_dir(tmp_path / "file" / "sub")
    assert check_writable_dir(tmp_path / "new" / "sub") == tmp_path / "new" / "sub"
    assert not (tmp_path / "new").exists()  # checked, not created


def test_export_of_a_store_without_cells_writes_nothing(store, tmp_path):
    from common.errors import ConfigError

    with pytest.raises(ConfigError, match="holds no measured cells yet: nothing to export"):
        export(tmp_path / "res")
    assert not (tmp_path / "res" / "export").exists()


def test_a_schema_1_store_is_read_as_is_and_migrated_by_a_writer(tmp_path):
    """Stores written before cells had shard and cpu_util: readable, and a sweep resuming
    into one adds the columns (NULL for the cells it already has)."""
    with Store(tmp_path) as s:
        s.begin_run("run1", "fp", "custom", {}, {})
        s.commit_cell(cell(shard="s1", cpu_util=0.25), requests())
    con = sqlite3.connect(tmp_path / DB_NAME)
    with con:
        con.execute("ALTER TABLE cells DROP COLUMN shard")
        con.execute("ALTER TABLE cells DROP COLUMN cpu_util")
        con.execute("ALTER TABLE cells DROP COLUMN worker")
        con.execute("UPDATE meta SET value='1' WHERE key='schema'")
    con.close()
    with Store(tmp_path, read_only=True) as r:
        (old,) = r.cells("run1")
        assert old["shard"] is None and old["cpu_util"] is None and old["rf"] == 1
        assert old["worker"] is None
    with Store(tmp_path) as w:
        w.commit_cell(
            cell("n3-rf2-l0-p0.5-r1", shard="s0", cpu_util=0.5), requests("n3-rf2-l0-p0.5-r1")
        )
        assert [(c["shard"], c["cpu_util"]) for c in w.cells("run1")] == [(None, None), ("s0", 0.5)]
    con = sqlite3.connect(tmp_path / DB_NAME)
    assert con.execute("SELECT value FROM meta WHERE key='schema'").fetchone() == (
        str(SCHEMA_VERSION),
    )
    con.close()


def test_a_migration_a_kill_cut_short_is_finished_at_the_next_open(tmp_path):
    """The sqlite3 module commits each ALTER TABLE apart: a kill after the first left a
    schema-1 store with the shard column and no cpu_util, which the next writer must
    complete (not fail on adding shard again)."""
    with Store(tmp_path) as s:
        s.begin_run("run1", "fp", "custom", {}, {})
        s.commit_cell(cell(), requests())
    con = sqlite3.connect(tmp_path / DB_NAME)
    with con:
        con.execute("ALTER TABLE cells DROP COLUMN cpu_util")
        con.execute("ALTER TABLE cells DROP COLUMN worker")
        con.execute("UPDATE meta SET value='1' WHERE key='schema'")
    con.close()
    with Store(tmp_path) as w:
        w.commit_cell(
            cell("n3-rf2-l0-p0.5-r1", shard="s0", cpu_util=0.5), requests("n3-rf2-l0-p0.5-r1")
        )
        assert [c["cpu_util"] for c in w.cells("run1")] == [None, 0.5]
    with Store(tmp_path) as again:  # already migrated: nothing to do
        assert len(again.cells("run1")) == 2
    con = sqlite3.connect(tmp_path / DB_NAME)
    assert con.execute("SELECT value FROM meta WHERE key='schema'").fetchone() == (
        str(SCHEMA_VERSION),
    )
    con.close()


def test_a_schema_2_store_gains_the_worker_column(tmp_path):
    with Store(tmp_path) as s:
        s.begin_run("run1", "fp", "custom", {}, {})
        s.commit_cell(cell(shard="s0"), requests())
    con = sqlite3.connect(tmp_path / DB_NAME)
    with con:
        con.execute("ALTER TABLE cells DROP COLUMN worker")
        con.execute("UPDATE meta SET value='2' WHERE key='schema'")
    con.close()
    with Store(tmp_path, read_only=True) as r:
        assert r.cells("run1")[0]["worker"] is None
    with Store(tmp_path) as w:
        w.commit_cell(cell("n3-rf2-l0-p0.5-r1", worker="w1"), requests("n3-rf2-l0-p0.5-r1"))
        assert [c["worker"] for c in w.cells("run1")] == [None, "w1"]


def test_a_cell_committed_once_is_not_stored_twice(store):
    """A worker's cell sent again (a re-queued unit, a resume's replay) is dropped whole:
    the first copy and its requests stay as they were."""
    assert store.commit_cell(cell(worker="w1"), requests(), once=True)
    again = requests()
    for r in again:
        r["rtt_ns"] += 1
    assert not store.commit_cell(cell(worker="w2"), again, once=True)
    (c,) = store.cells("run1")
    assert c["worker"] == "w1"
    assert store.request_count("run1") == len(requests())
    assert store.rtts_ns("run1", c["cell_id"]) == sorted(r["rtt_ns"] for r in requests())
