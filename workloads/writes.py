"""The paper's write workload, run on the endpoint host as one long-lived process.

The sweep starts it once per cluster (``python -m workloads.writes`` inside the
endpoint) and sends it one JSON command per line on stdin; it answers with JSON lines on
stdout. Keeping one driver session for the whole cluster means no reconnect, re-prepare
or pool warm-up inside a measurement.

Commands:
    {"op": "schema", "keyspace": K, "rf": R}       create K (SimpleStrategy, R) + table,
                                                   refresh the driver's token map for K;
                                                   R a map {DC: n} on a testbed of sites:
                                                   NetworkTopologyStrategy, n per DC
    {"op": "run", "keyspace": K, "cl": CL, "writes": N, "warmup": W,
     "key_seed": S, "warmup_seed": S2}             W unrecorded writes, then N recorded:
                                                   one {"r": [...]} line per request
                                                   (protocol.ROW_FIELDS), then {"done": ...};
                                                   {"hb": i} lines while warming up
    {"op": "readback", "keyspace": K, "settle_s": T,
     "writes": [[seq, key, t_start_ns], ...]}      those acknowledged writes read back
                                                   from each replica and at ALL
                                                   (``workloads.readback``): one line

Each request: a prepared INSERT of one laureate record (cycled from the shipped data set)
under a uuid key drawn from a seeded generator (same seed, same keys, same replicas);
timed with time.monotonic_ns() from just before the send to the response. For every
request the coordinator that answered and the replica set of its key are recorded.
Retries are off (FallthroughRetryPolicy): a timeout or unavailable is recorded as such.
On clusters with authentication (remote backends) it logs in with the run's credentials
(the 0600 file named by $EDGETB_CREDENTIALS, which ``testbed exec`` sets on the endpoint).
On a testbed of sites (``--local-dc``, or $EDGETB_LOCAL_DC, which ``testbed exec`` sets to
the endpoint's site) coordinators are chosen in that datacenter only, as the driver's
DC-aware policy does: a client uses the nodes of its own site.
"""

from __future__ import annotations

import json
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from common import paths
from common.command import Parser
from testbed.client import LOCAL_DC_ENV, replication

from .protocol import TABLE

DATA = Path(__file__).resolve().parent / "data" / "nobel_laureates.json"
FLUSH_EVERY_S = 0.5


def load_records(path: Path = DATA) -> list[tuple[str, str, int, str]]:
    data = json.loads(path.read_text())["laureates"]
    return [(r["firstname"], r["surname"], int(r["year"]), r["category"]) for r in data]


def keys(seed: str):
    """An endless stream of version-4 UUIDs from a seeded generator."""
    rng = random.Random(seed)
    while True:
        yield uuid.UUID(int=rng.getrandbits(128), version=4)


def make_policy(name: str, local_dc: str | None = None):
    """The load balancing ``name`` (round-robin, token-aware); with ``local_dc`` (a testbed
    of sites) over that datacenter's nodes only (DCAwareRoundRobinPolicy, no remote
    hosts), else over every node."""
    from cassandra.policies import TokenAwarePolicy

    from testbed.client import round_robin

    child = round_robin(local_dc)
    if name == "round-robin":
        return child
    if name == "token-aware":
        # The driver's own default wraps DCAwareRoundRobinPolicy; in one datacenter
        # RoundRobin as the child is equivalent. shuffle_replicas stays at its default
        # (False): the primary replica coordinates.
        return TokenAwarePolicy(child)
    raise SystemExit(f"unknown policy {name!r}")


REFRESH_ATTEMPTS = 3  # schema refreshes before the workload's schema step fails


class Writer:
    def __init__(
        self,
        points: list[str],
        policy: str,
        timeout_s: float,
        expect: int,
        local_dc: str | None = None,
    ):
        from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
        from cassandra.policies import FallthroughRetryPolicy

        from testbed.client import auth_provider, tls_context

        def cluster(balancing) -> Cluster:
            profile = ExecutionProfile(
                load_balancing_policy=balancing,
                retry_policy=FallthroughRetryPolicy(),
                request_timeout=timeout_s,
            )
            return Cluster(
                contact_points=points,
                protocol_version=5,
                execution_profiles={EXEC_PROFILE_DEFAULT: profile},
                connect_timeout=10,
                control_connection_timeout=10,
                auth_provider=auth_provider(),  # the run's login ($EDGETB_CREDENTIALS), if any
                ssl_context=tls_context(),  # the run's certificate ($EDGETB_TLS), if any
            )

        self.cluster = cluster(make_policy(policy, local_dc))
        # the read-back's: connected to every node, also another site's (a DC-aware
        # session has no connections there), made when first needed
        self._reader_cluster = lambda: cluster(make_policy("round-robin"))
        self._reader: Any = None
        self.local_dc = local_dc
        self.timeout_s = timeout_s
        self.session = self.cluster.connect()
        if local_dc:  # every node known to the cluster; then its own site's, all up
            known = len(self.cluster.metadata.all_hosts())
            if known < expect:
                raise RuntimeError(f"the cluster knows {known} nodes, expected {expect}")
            expect = len(self.used_hosts())
            if not expect:
                raise RuntimeError(f"no node of datacenter {local_dc!r} in the cluster")
        deadline = time.monotonic() + 60
        while sum(bool(h.is_up) for h in self.used_hosts()) < expect:
            if time.monotonic() > deadline:
                raise RuntimeError(f"driver sees fewer than {expect} hosts up after 60 s")
            time.sleep(0.1)
        self.records = load_records()
        self.prepared: dict[tuple[str, str], object] = {}
        self.said: set[str] = set()

    def used_hosts(self) -> list:
        """The hosts this client coordinates through: its datacenter's, or all."""
        hosts = self.cluster.metadata.all_hosts()
        return [h for h in hosts if not self.local_dc or h.datacenter == self.local_dc]

    def hello(self) -> dict:
        import cassandra

        return {
            "driver": cassandra.__version__,
            "connection_class": self.cluster.connection_class.__name__,
            "protocol_version": self.cluster.protocol_version,
            "hosts": sorted(h.address for h in self.cluster.metadata.all_hosts()),
            "records": len(self.records),
            "local_dc": self.local_dc,
        }

    def schema(self, keyspace: str, rf: int | dict[str, int]) -> dict:
        t0 = time.monotonic()
        self.session.execute(
            f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = {replication(rf)}"
        )
        self.session.execute(
            f"CREATE TABLE IF NOT EXISTS {keyspace}.{TABLE} (id uuid PRIMARY KEY, "
            f"firstname text, surname text, year int, category text)"
        )
        # Without a refresh the token map may not know the new keyspace: get_replicas
        # would then return [] and every coordinator-is-replica flag would be wrong.
        self.refresh_schema()
        probe = uuid.UUID(int=0, version=4)
        replicas = self.cluster.metadata.get_replicas(keyspace, probe.bytes)
        want = sum(rf.values()) if isinstance(rf, dict) else rf
        if len(replicas) != want:
            raise RuntimeError(
                f"token map of {keyspace} gives {len(replicas)} replicas for a key, expected {want}"
            )
        return {"keyspace": keyspace, "rf": rf, "took_s": time.monotonic() - t0}

    def refresh_schema(self, attempts: int = REFRESH_ATTEMPTS) -> None:
        """The driver's schema metadata refreshed, trying again after a failed refresh:
        right after a sweep restarted the shaper it failed once in CI ("Schema metadata
        was not refreshed"; the driver's reason was not logged), which ended the sweep."""
        from cassandra import DriverException

        for attempt in range(1, attempts + 1):
            try:
                self.cluster.refresh_schema_metadata(max_schema_agreement_wait=30)
                return
            except DriverException as exc:
                if attempt == attempts:
                    raise
                print(f"schema refresh failed ({exc}); again in 2 s", file=sys.stderr, flush=True)
                time.sleep(2)

    def statement(self, keyspace: str, cl: str):
        from cassandra import ConsistencyLevel

        key = (keyspace, cl)
        if key not in self.prepared:
            stmt = self.session.prepare(
                f"INSERT INTO {keyspace}.{TABLE} (id, firstname, surname, year, category) "
                f"VALUES (?, ?, ?, ?, ?)"
            )
            stmt.consistency_level = getattr(ConsistencyLevel, cl)
            self.prepared[key] = stmt
        return self.prepared[key]

    def write(self, stmt, keyspace: str, seq: int, key: uuid.UUID) -> list:
        bound = stmt.bind((key, *self.records[seq % len(self.records)]))
        replicas = self.cluster.metadata.get_replicas(keyspace, bound.routing_key)
        t_start = time.time_ns()
        t0 = time.monotonic_ns()
        future = self.session.execute_async(bound)
        error = None
        try:
            future.result()
        except Exception as exc:  # noqa: BLE001 - every failure is data, recorded by type
            error = type(exc).__name__
            if error not in self.said:  # its words, once per type, in the worker's log
                self.said.add(error)
                print(f"first {error}: {str(exc)[:500]}", file=sys.stderr, flush=True)
        rtt = time.monotonic_ns() - t0
        coordinator = future.coordinator_host or getattr(future, "_current_host", None)
        return [
            seq,
            str(key),
            coordinator.address if coordinator else None,
            [h.address for h in replicas],
            rtt,
            error,
            t_start,
        ]

    def run(
        self, keyspace: str, cl: str, writes: int, warmup: int, key_seed: str, warmup_seed: str, out
    ) -> dict:
        stmt = self.statement(keyspace, cl)
        warm_keys = keys(warmup_seed)
        last = time.monotonic()
        for i in range(warmup):
            self.write(stmt, keyspace, i, next(warm_keys))
            if time.monotonic() - last >= FLUSH_EVERY_S:  # alive, not hung: a heartbeat
                emit(out, {"hb": i + 1})
                last = time.monotonic()
        emit(out, {"warmup_done": warmup})
        cell_keys = keys(key_seed)
        batch, last = [], time.monotonic()
        errors = 0
        t0 = time.monotonic()
        for seq in range(writes):
            row = self.write(stmt, keyspace, seq, next(cell_keys))
            errors += row[5] is not None
            batch.append(row)
            if time.monotonic() - last >= FLUSH_EVERY_S:
                emit(out, {"r": batch})
                batch, last = [], time.monotonic()
        if batch:
            emit(out, {"r": batch})
        return {"done": writes, "errors": errors, "took_s": time.monotonic() - t0}

    def readback(self, keyspace: str, writes: list, settle_s: float) -> dict:
        """The acknowledged ``writes`` ((seq, key, t_start_ns) each) read back by value,
        replica by replica and at ALL (``readback.ReadBack``), judged and counted; on a
        testbed of sites through a session of its own that reaches every site."""
        from .readback import ReadBack

        if self._reader is None:
            if self.local_dc is None:
                self._reader = (self.cluster, self.session)
            else:
                reader = self._reader_cluster()
                self._reader = (reader, reader.connect())
        cluster, session = self._reader
        return ReadBack(cluster, session, self, keyspace, TABLE, settle_s).run(writes)

    def close(self) -> None:
        if self._reader is not None and self._reader[0] is not self.cluster:
            self._reader[0].shutdown()
        self.cluster.shutdown()


def emit(out, obj: dict) -> None:
    out.write(json.dumps(obj, separators=(",", ":")) + "\n")
    out.flush()


def serve(writer: Writer, inp, out) -> None:
    for line in inp:
        if not line.strip():
            continue
        cmd = json.loads(line)
        try:
            if cmd["op"] == "schema":
                rf = cmd["rf"]
                rf = {str(k): int(v) for k, v in rf.items()} if isinstance(rf, dict) else int(rf)
                emit(out, writer.schema(cmd["keyspace"], rf))
            elif cmd["op"] == "run":
                emit(
                    out,
                    writer.run(
                        cmd["keyspace"],
                        cmd["cl"],
                        int(cmd["writes"]),
                        int(cmd["warmup"]),
                        cmd["key_seed"],
                        cmd["warmup_seed"],
                        out,
                    ),
                )
            elif cmd["op"] == "readback":
                found = writer.readback(cmd["keyspace"], cmd["writes"], float(cmd["settle_s"]))
                emit(out, {"readback": found})
            elif cmd["op"] == "quit":
                return
            else:
                emit(out, {"error": f"unknown op {cmd['op']!r}"})
        except Exception as exc:  # noqa: BLE001 - reported to the sweep, which decides
            emit(out, {"error": f"{type(exc).__name__}: {exc}"})


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m workloads.writes")
    parser.add_argument("--hosts", default=paths.get("EDGETB_EDGE_ADDRESSES") or "")
    parser.add_argument("--policy", default="round-robin")
    parser.add_argument("--timeout", type=float, default=12.0)
    parser.add_argument("--local-dc", default=paths.get(LOCAL_DC_ENV))
    args = parser.parse_args(argv)
    points = [h for h in args.hosts.split(",") if h]
    if not points:
        print("error: no contact points (--hosts or $EDGETB_EDGE_ADDRESSES)", file=sys.stderr)
        return 2
    try:
        writer = Writer(points, args.policy, args.timeout, len(points), args.local_dc)
    except Exception as exc:  # noqa: BLE001
        emit(sys.stdout, {"error": f"{type(exc).__name__}: {exc}"})
        return 1
    try:
        emit(sys.stdout, {"hello": writer.hello()})
        serve(writer, sys.stdin, sys.stdout)
    finally:
        writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
