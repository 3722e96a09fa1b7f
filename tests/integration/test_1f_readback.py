"""Read-back of acknowledged writes (issue 41) on a real 3-node cluster at RF 3: a node
killed -9 while its peers keep no hints for it misses what was written meanwhile; once it
is back, the read-back finds exactly those writes missing on it (new keys) or stale
(keys it held an older write of), and nothing on the others; the read at ALL returns
every write and repairs the node. ``nodetool getsstables`` on the node, an instrument
the read-back does not use, agrees: the keys are not in its SSTables before the read-back
and are after it."""

import signal
import time

from testbed import Testbed, Topology
from workloads import WriteWorker

from .conftest import assert_no_residue

KS = "readback_it"
WRITES = 60


def in_sstables(tb: Testbed, node: str, keys: list[str]) -> list[bool]:
    """Whether each key is in ``node``'s own SSTables, after a flush of its memtables."""
    tb.nodetool(node, "flush", KS, timeout=120)
    out = []
    for key in keys:
        listed = tb.nodetool(node, "getsstables", KS, "laureates", key, timeout=60)
        out.append(any(ln.strip().endswith("-Data.db") for ln in listed.splitlines()))
    return out


def test_a_replica_that_missed_writes_is_found_by_value_and_all_repairs_it(tmp_path):
    tb = Testbed(Topology(edge_nodes=3))
    with tb:
        worker = WriteWorker(tb, policy="round-robin", timeout_s=12.0, log_path=tmp_path / "w.log")
        try:
            worker.schema(KS, 3)

            def write(cl: str, seed: str) -> list[dict]:
                rows = worker.run(keyspace=KS, cl=cl, writes=WRITES, warmup=0,
                                  key_seed=seed, warmup_seed="w")  # fmt: skip
                assert not [r for r in rows if r["error"]], rows[:3]
                return rows

            before = write("ALL", "old")
            found = worker.readback(KS, before, 10.0)
            ok = {"ok": WRITES, "stale": 0, "missing": 0, "unreadable": 0}
            assert found["replicas"] == dict.fromkeys(sorted(found["replicas"]), ok), found
            assert len(found["replicas"]) == 3 and found["lost"] == 0 and found["all"]["read"] == 0
            # e2 away; e0 and e1 keep no hints for it
            for node in ("e0", "e1"):
                tb.nodetool(node, "disablehandoff")
            tb.nodetool("e2", "flush", timeout=120)  # its schema survives the kill
            tb.faulted = True  # its peers log what they saw of it (logscan)
            tb.nodes["e2"].signal(signal.SIGKILL)
            assert tb.nodes["e2"].wait_exit(60)
            rewritten = write("ONE", "old")  # keys e2 holds an older write of
            new = write("ONE", "new")  # keys e2 never saw
            tb.restart_node("e2")
            deadline = time.monotonic() + 60  # until e2 serves the table
            while "laureates" not in tb.nodetool("e2", "tablestats", KS, timeout=60):
                assert time.monotonic() < deadline
                time.sleep(1)
            sample = [r["key"] for r in new[:: WRITES // 5]]
            assert in_sstables(tb, "e2", sample) == [False] * len(sample)
            assert in_sstables(tb, "e0", sample) == [True] * len(sample)
            t0 = time.monotonic()
            found = worker.readback(KS, rewritten + new, 10.0)
            took = time.monotonic() - t0
        finally:
            worker.close()
        e2, others = tb.address("e2"), [tb.address(n) for n in ("e0", "e1")]
        print(f"read-back of {2 * WRITES} writes with a replica short: {took:.1f} s, {found}")
        assert found["acknowledged"] == 2 * WRITES
        assert found["replicas"][e2] == {"ok": 0, "stale": WRITES, "missing": WRITES,
                                         "unreadable": 0}, found  # fmt: skip
        for a in others:
            assert found["replicas"][a] == {**ok, "ok": 2 * WRITES}, found
        # ALL reads what some replica lacked: every write returned, none lost
        assert found["all"] == {**ok, "ok": 2 * WRITES, "read": 2 * WRITES}, found
        assert (found["lost"], found["unknown"]) == (0, 0), found
        # ... and repaired e2 (blocking read repair): its own SSTables hold the keys now
        assert in_sstables(tb, "e2", sample) == [True] * len(sample)
        run_id = tb.run_id
    assert_no_residue(run_id)
