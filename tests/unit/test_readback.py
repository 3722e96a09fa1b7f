"""The read-back's judgement of what it read (pure logic; the reads themselves run
against a real cluster in tests/integration/test_1f_readback.py), and how a cell's
read-back is stored, exported and summed up."""

import csv
import json

import pytest

from analysis.stats import acknowledged_lost, point_stats
from workloads.readback import VERDICTS, lost, summary, tally, verdict

VALUE = ("Marie", "Curie", 1903, "physics")
T_NS = 1_700_000_000_000_000_000  # when the write was sent (wall clock, ns)


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ((*VALUE, T_NS // 1000), "ok"),  # written the microsecond it was sent
        ((*VALUE, T_NS // 1000 + 5), "ok"),
        ((*VALUE, T_NS // 1000 - 1), "stale"),  # an earlier cell's write of the key
        (("Marie", "Curie", 1911, "chemistry", T_NS // 1000), "stale"),  # another value
        ((*VALUE, None), "stale"),  # a row without the column written
        (None, "missing"),
    ],
)
def test_a_read_is_judged_by_value_and_by_when_it_was_written(row, expected):
    assert verdict(row, VALUE, T_NS) == expected


def test_tally_names_every_verdict_and_refuses_others():
    assert tally(["ok", "ok", "missing"]) == {"ok": 2, "stale": 0, "missing": 1, "unreadable": 0}
    assert list(tally([])) == list(VERDICTS)
    with pytest.raises(ValueError, match="gone"):
        tally(["ok", "gone"])


def test_lost_is_what_all_did_not_return_and_unreadable_is_unknown():
    replicas = {
        "10.0.0.2": {"k1": "ok", "k2": "missing", "k3": "ok", "k4": "missing"},
        "10.0.0.1": {"k1": "ok", "k2": "missing", "k3": "stale", "k4": "unreadable"},
    }
    at_all = {"k2": "missing", "k3": "ok", "k4": "unreadable"}
    s = summary(4, replicas, at_all, {"read": 0.1234, "settle": 0.0, "all": 0.2})
    assert s["acknowledged"] == 4
    assert s["replicas"]["10.0.0.1"] == {"ok": 1, "stale": 1, "missing": 1, "unreadable": 1}
    assert list(s["replicas"]) == ["10.0.0.1", "10.0.0.2"]
    assert s["all"] == {"read": 3, "ok": 1, "stale": 0, "missing": 1, "unreadable": 1}
    assert (s["lost"], s["unknown"], s["lost_keys"], s["repaired_keys"]) == (1, 1, ["k2"], ["k3"])
    assert s["read_s"] == 0.123
    assert lost(s) == 1
    assert lost(None) is None and lost({"error": "x", "acknowledged": 4}) is None


def _cell(readback):
    return {"rtt_ms": [1.0, 2.0], "errors": 0, "readback": readback}


def test_a_points_losses_are_summed_only_when_every_cell_was_read_back():
    a = {"acknowledged": 100, "lost": 0}
    b = {"acknowledged": 98, "lost": 3}
    assert acknowledged_lost([_cell(a), _cell(b)]) == (198, 3)
    assert point_stats([_cell(a), _cell(b)])["acknowledged_lost"] == 3
    # a store from before read-backs, or a read-back that failed: not a zero
    assert acknowledged_lost([_cell(a), _cell(None)]) == (None, None)
    assert acknowledged_lost([_cell(a), _cell({"error": "x", "acknowledged": 9})]) == (None, None)


def test_summary_csv_has_the_acknowledged_and_lost_columns(tmp_path):
    from analysis.plots import SUMMARY_COLUMNS, summary_table

    stats_ = {
        (3, 0.5, 3, 20.0): point_stats([_cell({"acknowledged": 2, "lost": 1})]),
        (3, 0.5, 3, 50.0): point_stats([_cell(None)]),
    }
    rows = list(csv.DictReader(summary_table(tmp_path, stats_).open()))
    assert list(rows[0]) == list(SUMMARY_COLUMNS)
    assert (rows[0]["acknowledged"], rows[0]["acknowledged_lost"]) == ("2", "1")
    assert (rows[1]["acknowledged"], rows[1]["acknowledged_lost"]) == ("", "")


def test_a_cells_read_back_is_stored_and_exported_as_json(tmp_path):
    from experiments.store.db import Store
    from experiments.store.export import export

    from .test_store import cell, requests

    found = {"acknowledged": 3, "lost": 0, "replicas": {"e0": {"ok": 3}}}
    with Store(tmp_path / "res") as store:
        store.begin_run("run1", "fp", "test", {"writes": 2}, {"baseline": {}})
        store.commit_cell(cell("c1", readback=found), requests("c1"))
        store.commit_cell(cell("c2"), requests("c2"))
        by_id = {c["cell_id"]: c for c in store.cells("run1")}
    assert by_id["c1"]["readback"] == found and by_id["c2"]["readback"] is None
    written = export(tmp_path / "res", "csv")
    exported = {r["cell_id"]: r for r in csv.DictReader(written["cells"].open())}
    assert json.loads(exported["c1"]["readback"]) == found and exported["c2"]["readback"] == ""
    assert json.loads(exported["c1"]["shaping"])  # JSON, not a Python repr


def test_a_fault_cells_losses_are_in_its_table_row_and_marked_on_its_figure(tmp_path):
    from analysis.faults import availability, figures, format_availability

    reqs = [
        {"t_start_ns": 10**9 * i, "rtt_ns": 40_000_000, "error": None, "key": f"k{i}",
         "replicas": "e1"}
        for i in range(10)
    ]  # fmt: skip
    cell = {
        "cell_id": "n3-rf1-l0-p0.5-fkill_e1@30p-r1", "run_id": "r", "fault": "kill:e1@30%",
        "trace": None, "nodes": 3, "rf": 1, "cl": "ONE", "latency_ms": 0.0, "loss_pct": 0.5,
        "requests": reqs,
        "fault_log": {"events": [{"step": "make", "what": "kill", "at_ns": 3 * 10**9}]},
        "readback": {"acknowledged": 10, "lost": 2, "lost_keys": ["k3", "k4"],
                     "repaired_keys": ["k5"], "expected": True},
    }  # fmt: skip
    (row,) = availability([cell])
    assert (row["acknowledged"], row["lost"], row["repaired"], row["lost_expected"]) == (
        10, 2, 1, True,
    )  # fmt: skip
    assert "2/10*" in format_availability([row]).splitlines()[1]
    unread = availability([{**cell, "readback": None}])[0]
    assert unread["lost"] is None and format_availability([unread]).splitlines()[1].endswith("-")
    (made,) = figures([cell], tmp_path)
    svg = (tmp_path / f"{made['name']}.svg").read_text()
    assert "acknowledged, then lost (2)" in svg and "a replica lacked it (1)" in svg


def test_the_sweeps_table_says_losses_loudly_and_expected_ones_quietly():
    from experiments.run.summary import losses, lost_said

    ok = {"cell_id": "a", "readback": {"acknowledged": 5, "lost": 0}}
    gone = {"cell_id": "b", "readback": {"acknowledged": 5, "lost": 2}}
    killed = {"cell_id": "c", "readback": {"acknowledged": 5, "lost": 1, "expected": True}}
    failed = {"cell_id": "d", "readback": {"error": "workload: x", "acknowledged": 5}}
    old = {"cell_id": "e", "readback": None}
    assert [lost_said(c) for c in (ok, gone, killed, failed, old)] == ["0", "2", "1*", "-", "-"]
    said = losses([ok, gone, killed, failed, old])
    assert said[0] == "LOST: 2 acknowledged writes in 1 cell(s) are on no replica: b (2)"
    assert said[1].startswith("* lost where expected") and said[2].endswith(": d")
    assert losses([ok, old]) == []


class _Replays:
    """ReadBack's settling with the reads replaced: each re-read of a replica's lacking
    keys finds ``arrive`` more of them (0: none ever arrives)."""

    def __init__(self, arrive: int):
        from workloads.readback import ReadBack

        self.rb = ReadBack.__new__(ReadBack)
        self.rb.settle_s = 5.0
        self.arrive, self.reads = arrive, 0
        self.rb._per_replica = self._per_replica  # type: ignore[method-assign]

    def _per_replica(self, lacking, want):
        self.reads += 1
        return {h: {k: "ok" for k in ks[: self.arrive]} for h, ks in lacking.items()}


def test_settling_reads_until_copies_stop_arriving(monkeypatch):
    import time

    from workloads import readback

    monkeypatch.setattr(readback, "STALL_S", 0.6)
    keys = [f"k{i}" for i in range(4)]
    coming = _Replays(arrive=1)  # a hint at a time: read until all four came
    seen = {"e2": dict.fromkeys(keys, "missing")}
    coming.rb._settle({"e2": keys}, {}, seen, time.monotonic())
    assert seen["e2"] == dict.fromkeys(keys, "ok") and coming.reads == 4
    stuck = _Replays(arrive=0)  # nothing comes: it gives up after the stall, not settle_s
    seen = {"e2": dict.fromkeys(keys, "missing")}
    t0 = time.monotonic()
    stuck.rb._settle({"e2": keys}, {}, seen, t0)
    assert time.monotonic() - t0 < 2.5 and seen["e2"]["k0"] == "missing" and stuck.reads >= 1
