"""Every acknowledged write of a cell read back by value: Jepsen's final read.

After a cell (and after its fault's recovery) the writer reads each write the cluster
acknowledged, from each of the key's replicas alone, then, for the keys some replica does
not hold, from the cluster at ALL:

- **per replica**: a read at NODE_LOCAL sent to that replica (``host=``), so it answers from
  its own data and no other replica answers for it (a read at ONE may be served by any
  replica the coordinator picks). Cassandra serves NODE_LOCAL only where
  ``cassandra.enable_nodelocal_queries`` is set, which the testbed's nodes have.
  Reads go by replica in ``IN`` batches of ``BATCH`` keys, ``IN_FLIGHT`` at once per node.
- **settling**: the driver is given ``settle_s`` to see every replica up (a node started
  again after a fault), and what a replica lacks is read again until it holds everything,
  or ``settle_s`` passed, or no copy arrived for ``STALL_S`` (hints of a node that was
  away arrive within seconds).
- **at ALL**, only the keys some replica still lacks (every replica holding a write is
  what ALL would read): ALL answers with the newest copy any replica has and repairs the
  others; a write that ALL does not return is lost.

Each read is judged against what was written (``verdict``): ``ok`` (the value, written
at or after this cell's write started), ``stale`` (an older write of the key, a
previous cell's, or another value), ``missing`` (no row), ``unreadable`` (the read
failed). Write times are the client's (the driver's timestamps, from the endpoint's
clock, which also timed the writes).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

NODE_LOCAL = 11  # Cassandra's ConsistencyLevel.NODE_LOCAL (4.0+); the driver has no name for it
ALL = 5  # ConsistencyLevel.ALL
BATCH = 100  # keys per IN read of one replica
IN_FLIGHT = 8  # reads outstanding per replica
ALL_BATCH = 10  # keys per read at ALL (each a read repair when replicas differ)
ALL_ATTEMPTS = 3
SETTLE_S = 10.0
STALL_S = 3.0  # settling ends sooner when no copy arrived for this long
VERDICTS = ("ok", "stale", "missing", "unreadable")


def verdict(row: Sequence[Any] | None, value: Sequence[Any], t_start_ns: int) -> str:
    """One read of one key judged: ``row`` the (firstname, surname, year, category,
    writetime) read (None: no row), ``value`` what the write wrote, ``t_start_ns`` when
    it was sent (the wall clock; a write time is in microseconds)."""
    if row is None:
        return "missing"
    *read, written_us = row
    if tuple(read) != tuple(value) or written_us is None or written_us * 1000 < t_start_ns:
        return "stale"
    return "ok"


def tally(verdicts: Iterable[str]) -> dict[str, int]:
    """Counts of each verdict (all four named, zeros included)."""
    counts = Counter(verdicts)
    unknown = set(counts) - set(VERDICTS)
    if unknown:
        raise ValueError(f"unknown verdicts {sorted(unknown)}")
    return {v: counts.get(v, 0) for v in VERDICTS}


def summary(
    acknowledged: int,
    replicas: Mapping[str, Mapping[str, str]],
    at_all: Mapping[str, str],
    took: Mapping[str, float],
) -> dict[str, Any]:
    """The cell's read-back as stored: per replica (host -> key -> verdict) the counts,
    at ALL the counts over the keys read so, ``lost`` (ALL read no value or an older
    one: gone from every replica) and their keys, ``repaired_keys`` (some replica lacked
    them, ALL returned them: under-replicated, not lost), ``unknown`` (unreadable at
    ALL)."""
    lost = sorted(k for k, v in at_all.items() if v in ("missing", "stale"))
    return {
        "acknowledged": acknowledged,
        "replicas": {h: tally(v.values()) for h, v in sorted(replicas.items())},
        "all": {"read": len(at_all), **tally(at_all.values())},
        "lost": len(lost),
        "unknown": sum(v == "unreadable" for v in at_all.values()),
        "lost_keys": lost,
        "repaired_keys": sorted(k for k, v in at_all.items() if v == "ok"),
        **{f"{k}_s": round(v, 3) for k, v in took.items()},
    }


def lost(readback: Mapping[str, Any] | None) -> int | None:
    """Acknowledged writes no replica returned (None: not read back, or the read-back
    failed): the one test of whether a stored cell was read back, for every table and
    figure that shows it."""
    if not readback or "error" in readback:
        return None
    return int(readback["lost"])


class ReadBack:
    """The reads of one cell's acknowledged writes through a driver ``session`` of
    ``cluster`` connected to every replica, for ``writer`` (``writes.Writer``: what it
    wrote, its request timeout, the errors it said)."""

    def __init__(
        self,
        cluster: Any,
        session: Any,
        writer: Any,
        keyspace: str,
        table: str,
        settle_s: float = SETTLE_S,
    ):
        self.cluster, self.session, self.writer = cluster, session, writer
        self.keyspace, self.settle_s = keyspace, settle_s
        columns = "firstname, surname, year, category, writetime(firstname)"
        # one statement, prepared once: each read binds it at its own level
        self.select = session.prepare(f"SELECT id, {columns} FROM {keyspace}.{table} WHERE id IN ?")

    def run(self, acknowledged: Sequence[Sequence[Any]]) -> dict[str, Any]:
        """``acknowledged``: (seq, key, t_start_ns) of each acknowledged write."""
        import uuid

        records = self.writer.records
        want = {
            uuid.UUID(key): (records[seq % len(records)], int(t)) for seq, key, t in acknowledged
        }
        meta = self.cluster.metadata
        hosts: dict[Any, list[uuid.UUID]] = {}
        for key in want:
            for host in meta.get_replicas(self.keyspace, key.bytes):
                hosts.setdefault(host, []).append(key)
        t0 = time.monotonic()
        self._wait_up(hosts, t0 + self.settle_s)
        seen = self._per_replica(hosts, want)
        t1 = time.monotonic()
        self._settle(hosts, want, seen, t1)
        t2 = time.monotonic()
        short = sorted({k for h in seen for k, v in seen[h].items() if v != "ok"}, key=str)
        at_all = self._at_all(short, want)
        took = {"read": t1 - t0, "settle": t2 - t1, "all": time.monotonic() - t2}
        replicas = {h.address: {str(k): v for k, v in seen[h].items()} for h in hosts}
        return summary(len(want), replicas, {str(k): v for k, v in at_all.items()}, took)

    def _settle(self, hosts: Mapping[Any, list], want: Mapping, seen: dict, t1: float) -> None:
        """What replicas lack read again every half second until they hold it all, or
        ``settle_s`` passed, or STALL_S went by without one more copy arriving (after a
        fault's recovery the hints were delivered already: what is still missing then
        will not come, and ALL repairs it)."""
        deadline, best, since = t1 + self.settle_s, None, t1
        while time.monotonic() < deadline:
            lacking = {h: [k for k in ks if seen[h][k] != "ok"] for h, ks in hosts.items()}
            lacking = {h: ks for h, ks in lacking.items() if ks}
            count = sum(map(len, lacking.values()))
            if not count:
                return
            if best is None or count < best:
                best, since = count, time.monotonic()
            elif time.monotonic() - since >= STALL_S:
                return
            time.sleep(0.5)
            for h, found in self._per_replica(lacking, want).items():
                seen[h].update(found)

    def _wait_up(self, hosts: Iterable[Any], deadline: float) -> None:
        """Until the driver sees every replica up, or ``deadline``: a node started again
        after a fault is reconnected to after a delay (a read sent to it before then is
        not sent at all: unreadable)."""
        while any(not h.is_up for h in hosts) and time.monotonic() < deadline:
            time.sleep(0.2)

    def _per_replica(self, hosts: Mapping[Any, list], want: Mapping) -> dict[Any, dict]:
        """host -> key -> verdict, each host's keys read from it alone."""
        seen: dict[Any, dict] = {h: {} for h in hosts}
        queue = [
            (h, ks[i : i + BATCH]) for h, ks in hosts.items() for i in range(0, len(ks), BATCH)
        ]
        pending: list[tuple[Any, list, Any]] = []
        window = IN_FLIGHT * max(1, len(hosts))
        timeout = self.writer.timeout_s
        while queue or pending:
            while queue and len(pending) < window:
                h, keys = queue.pop(0)
                future = self.session.execute_async(
                    self._bound(keys, NODE_LOCAL), timeout=timeout, host=h
                )
                pending.append((h, keys, future))
            h, keys, future = pending.pop(0)
            seen[h].update(self._judge(future, keys, want))
        return seen

    def _at_all(self, keys: list, want: Mapping) -> dict[Any, str]:
        found: dict[Any, str] = {}
        for i in range(0, len(keys), ALL_BATCH):
            batch = keys[i : i + ALL_BATCH]
            for attempt in range(ALL_ATTEMPTS):
                future = self.session.execute_async(
                    self._bound(batch, ALL), timeout=self.writer.timeout_s
                )
                judged = self._judge(future, batch, want)
                if "unreadable" not in judged.values() or attempt == ALL_ATTEMPTS - 1:
                    break
                time.sleep(1)
            found.update(judged)
        return found

    def _bound(self, keys: list, level: int) -> Any:
        bound = self.select.bind((keys,))
        bound.consistency_level = level
        return bound

    def _judge(self, future: Any, keys: list, want: Mapping) -> dict[Any, str]:
        try:
            rows = {r[0]: tuple(r[1:]) for r in future.result()}
        except Exception as exc:  # noqa: BLE001 - a failed read is a verdict, not a crash
            said = f"read-back {type(exc).__name__}"
            if said not in self.writer.said:  # its words, once per type, in the log
                self.writer.said.add(said)
                print(f"first {said}: {str(exc)[:500]}", file=sys.stderr, flush=True)
            return dict.fromkeys(keys, "unreadable")
        return {k: verdict(rows.get(k), want[k][0], want[k][1]) for k in keys}
