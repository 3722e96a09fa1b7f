"""CQL client that runs on the endpoint host (inside its namespace), as the paper's
endpoint did. The testbed calls it as a subprocess through ``exec``; researchers can too:

    python -m testbed exec ep -- python -m testbed.cql "SELECT * FROM system.local"

Contact points come from --hosts or from $EDGETB_EDGE_ADDRESSES (set by ``testbed exec``).
On clusters with authentication (remote backends) the login comes from the 0600 file
named by --credentials or $EDGETB_CREDENTIALS (also set by ``testbed exec``); on clusters
with TLS the client's certificate from the directory $EDGETB_TLS (set the same way).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass

from common import paths
from common.command import Parser

from . import argtypes
from .topology import MAX_EDGE_NODES

PROTOCOL_VERSION = 5


def contact_points(hosts: str | None) -> list[str]:
    raw = hosts or (paths.get("EDGETB_EDGE_ADDRESSES") or "")
    points = [h.strip() for h in raw.split(",") if h.strip()]
    if not points:
        raise ValueError("no contact points: pass --hosts or run via `edgetb exec`")
    for point in points:
        if point.startswith("-") or any(c.isspace() for c in point):
            raise ValueError(f"contact point {point!r} is not a host name or address")
    return points


def consistency_level(text: str) -> str:
    """argparse type: a consistency level the driver knows, upper-case."""
    from cassandra import ConsistencyLevel

    name = text.upper()
    if name not in ConsistencyLevel.name_to_value:
        raise argparse.ArgumentTypeError(
            f"unknown consistency level {text!r} (choose from "
            f"{', '.join(ConsistencyLevel.name_to_value)})"
        )
    return name


def credentials(path: str | None = None):
    """The login in ``path`` (default: $EDGETB_CREDENTIALS), or None when neither names
    a file (clusters without authentication)."""
    from .cassandra import auth

    path = path or paths.get(auth.ENV)
    return auth.read(path) if path else None


def auth_provider(creds=None):
    """A PlainTextAuthProvider for ``creds`` (default: ``credentials()``), or None."""
    creds = creds if creds is not None else credentials()
    if creds is None:
        return None
    from cassandra.auth import PlainTextAuthProvider

    return PlainTextAuthProvider(username=creds.username, password=creds.password)


def tls_context():
    """The run's TLS context ($EDGETB_TLS: the client's certificate and the run's CA), or
    None on clusters without TLS."""
    from .cassandra import tls

    return tls.ssl_context()


LOCAL_DC_ENV = "EDGETB_LOCAL_DC"  # set by `testbed exec` on a host of a site
# (testbed.access spells it out: importing this module with the package would make
# `python -m testbed.client` warn that it was imported before it ran)


def round_robin(local_dc: str | None = None):
    """Round robin over every node, or with ``local_dc`` (a testbed of sites) over that
    datacenter's nodes only, as the driver's DC-aware policy does (no remote hosts)."""
    from cassandra.policies import DCAwareRoundRobinPolicy, RoundRobinPolicy

    return DCAwareRoundRobinPolicy(local_dc) if local_dc else RoundRobinPolicy()


def replication(rf: int | dict[str, int]) -> str:
    """The replication map of a keyspace with ``rf`` replicas, or ``{DC: n}`` per
    datacenter (NetworkTopologyStrategy)."""
    if isinstance(rf, dict):
        per_dc = ", ".join(f"'{dc}': {int(n)}" for dc, n in sorted(rf.items()))
        return f"{{'class': 'NetworkTopologyStrategy', {per_dc}}}"
    return f"{{'class': 'SimpleStrategy', 'replication_factor': {int(rf)}}}"


def connect(points: list[str], timeout_s: float, creds=None, local_dc: str | None = None):
    """A driver Cluster and Session with an explicit round-robin policy (over ``local_dc``
    only, if given), logged in with ``creds`` (default: the run's credentials, if any)."""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile

    profile = ExecutionProfile(
        load_balancing_policy=round_robin(local_dc), request_timeout=timeout_s
    )
    cluster = Cluster(
        contact_points=points,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        protocol_version=PROTOCOL_VERSION,
        connect_timeout=min(timeout_s, 10),
        control_connection_timeout=min(timeout_s, 10),
        auth_provider=auth_provider(creds),
        ssl_context=tls_context(),
    )
    try:
        return cluster, cluster.connect()
    except BaseException:
        cluster.shutdown()
        raise


def auth_refused(exc: BaseException) -> bool:
    """Whether a failed connection failed because every host refused the login."""
    from cassandra import AuthenticationFailed
    from cassandra.cluster import NoHostAvailable

    if isinstance(exc, AuthenticationFailed):
        return True
    errors = getattr(exc, "errors", None) if isinstance(exc, NoHostAvailable) else None
    if not errors:
        return False
    return all(isinstance(e, AuthenticationFailed) for e in errors.values())


def per_dc_counts(text: str) -> dict[str, int]:
    """``dc1=3,dc2=3`` as {datacenter: count} (argparse's type: ValueError names it)."""
    out = {}
    for part in text.split(","):
        name, _, count = part.partition("=")
        if not name.strip() or not count.strip().isdigit() or int(count) < 1:
            raise ValueError(f"cannot read {part!r}: give DC=N,... (e.g. dc1=3,dc2=3)")
        out[name.strip()] = int(count)
    return out


def auth_setup(
    points: list[str], timeout_s: float, creds, per_dc: dict[str, int] | None = None
) -> dict:
    """Replace the default superuser by the run's role ``creds``; returns what was done.

    Waits (until the deadline) for the default role, which each node creates about 10 s
    after its start; on a cluster of sites (``per_dc``: nodes per datacenter) makes
    ``system_auth`` NetworkTopologyStrategy with every node a replica, as it was (the
    run's logins are read at LOCAL_QUORUM, which a SimpleStrategy keyspace spread over
    several datacenters cannot serve: its quorum counts every node, its live replicas
    only the local ones); creates the run's superuser; drops ``cassandra`` logged in as
    the new role; then waits until every node refuses ``cassandra``/``cassandra`` (a
    node may accept it until its 2 s credentials cache entry expires). Idempotent: when
    the run's role logs in already, only the last two steps run.
    """
    from .cassandra import auth

    t0 = time.monotonic()
    steps = _AuthSteps(points, timeout_s, t0 + timeout_s)
    created = False
    try:
        cluster, session = connect(points, timeout_s, creds)
    except Exception:  # noqa: BLE001 - the usual case: the run's role does not exist yet
        cluster, session = steps.create_role(creds, per_dc)
        created = True
    try:
        steps.execute(session, auth.DROP_DEFAULT_ROLE_CQL)
    finally:
        cluster.shutdown()
    steps.wait_default_refused()
    return {
        "role": creds.username,
        "created": created,
        "default_refused_by": list(points),
        "took_s": round(time.monotonic() - t0, 1),
    }


@dataclass
class _AuthSteps:
    """``auth_setup``'s steps, each retried until one deadline (``at``, monotonic)."""

    points: list[str]
    timeout_s: float
    at: float

    def session_as(self, who, what: str):
        """A (cluster, session) logged in as ``who``, retried until the deadline; a
        ClientError saying ``what`` failed, and the last reason, after it."""
        last = "no attempt"
        while time.monotonic() < self.at:
            try:
                # each attempt to connect is capped at 10 s (connect()); the requests
                # made on the session (schema changes, which a slow guest took over
                # 10 s to agree on) get what is left of the deadline
                return connect(self.points, max(1.0, self.at - time.monotonic()), who)
            except Exception as exc:  # noqa: BLE001 - retried until the deadline
                last = f"{type(exc).__name__}: {exc}"
                time.sleep(1.0)
        raise ClientError(f"{what} within {self.timeout_s:.0f} s: {last}")

    def execute(self, session, cql: str) -> None:
        """``cql`` (idempotent: IF [NOT] EXISTS, a replication set again) until it is
        done or the deadline: a replica in a slow guest may miss the server's own write
        timeout (CI: "received only 1 responses" on CREATE ROLE), a later try reaches it."""
        from cassandra import OperationTimedOut, ReadTimeout, Unavailable, WriteTimeout

        while True:
            try:
                session.execute(cql)
                return
            except (WriteTimeout, ReadTimeout, Unavailable, OperationTimedOut):
                if time.monotonic() > self.at - 1:
                    raise
                time.sleep(1.0)

    def create_role(self, creds, per_dc: dict[str, int] | None):
        """As the default superuser: system_auth over the sites (``per_dc``), then the
        run's role; returns a (cluster, session) logged in as that role."""
        from .cassandra import auth

        default = auth.Credentials(auth.DEFAULT_USER, auth.DEFAULT_PASSWORD)
        admin, admin_session = self.session_as(default, "no login as the default superuser")
        try:
            if per_dc:  # every node stays a replica: nothing streams
                self.execute(
                    admin_session,
                    f"ALTER KEYSPACE system_auth WITH replication = {replication(per_dc)}",
                )
            self.execute(admin_session, auth.create_role_cql(creds))
        finally:
            admin.shutdown()
        return self.session_as(creds, f"no login as {creds.username}")

    def wait_default_refused(self) -> None:
        """Until every node refuses the default superuser's login (ClientError with the
        last reason past the deadline)."""
        from .cassandra import auth

        default = auth.Credentials(auth.DEFAULT_USER, auth.DEFAULT_PASSWORD)
        pending = list(self.points)
        while pending:
            point = pending[0]
            try:
                probe_cluster, _ = connect([point], min(10.0, self.timeout_s), default)
            except Exception as exc:  # noqa: BLE001
                if auth_refused(exc):
                    pending.pop(0)
                    continue
                last = f"{type(exc).__name__}: {exc}"
            else:
                probe_cluster.shutdown()
                last = f"{point} still accepts {auth.DEFAULT_USER}/{auth.DEFAULT_PASSWORD}"
            if time.monotonic() > self.at:
                raise ClientError(
                    f"default superuser not refused within {self.timeout_s:.0f} s: {last}"
                )
            time.sleep(0.5)


def probe(points: list[str], expect: int, timeout_s: float) -> dict:
    """Connect until the driver sees ``expect`` hosts up and each answers a query.

    Transient failures (a host briefly marked down while gossip settles) are retried until
    the deadline; the last one is reported if it passes.
    """
    from cassandra.cluster import NoHostAvailable

    deadline = time.monotonic() + timeout_s
    last_error = "no attempt"
    cluster = None
    try:
        while time.monotonic() < deadline:
            if cluster is None:
                try:
                    cluster, session = connect(points, max(1.0, deadline - time.monotonic()))
                except NoHostAvailable as exc:
                    last_error, cluster = f"no host available: {exc}", None
                    time.sleep(0.3)
                    continue
            up = [h for h in cluster.metadata.all_hosts() if h.is_up]
            if len(up) < expect:
                last_error = f"driver sees {len(up)} of {expect} hosts up"
                time.sleep(0.1)
                continue
            try:
                versions = {
                    h.address: session.execute("SELECT release_version FROM system.local", host=h)
                    .one()
                    .release_version
                    for h in up
                }
            except Exception as exc:  # noqa: BLE001 - any driver error is retried
                last_error = f"{type(exc).__name__}: {exc}"
                time.sleep(0.2)
                continue
            return {"hosts_up": sorted(versions), "release_versions": versions}
    finally:
        if cluster is not None:
            cluster.shutdown()
    raise ClientError(f"driver session not ready within {timeout_s:.0f} s: {last_error}")


class ClientError(Exception):
    """A failure reported as one line on stderr with exit code 1."""


def write_probe(points: list[str], rf: int, consistency: str, timeout_s: float) -> dict:
    """Create a probe keyspace (SimpleStrategy, ``rf``) and time one write at ``consistency``."""
    import uuid

    from cassandra import ConsistencyLevel
    from cassandra.query import SimpleStatement

    cluster, session = connect(points, timeout_s)
    try:
        session.execute(
            f"CREATE KEYSPACE IF NOT EXISTS edgetb_probe WITH replication = {replication(rf)}"
        )
        session.execute("CREATE TABLE IF NOT EXISTS edgetb_probe.kv (k uuid PRIMARY KEY, v text)")
        stmt = SimpleStatement(
            "INSERT INTO edgetb_probe.kv (k, v) VALUES (%s, %s)",
            consistency_level=getattr(ConsistencyLevel, consistency),
        )
        start = time.monotonic_ns()
        session.execute(stmt, (uuid.uuid4(), "probe"), timeout=timeout_s)
        return {"consistency": consistency, "rf": rf, "write_ns": time.monotonic_ns() - start}
    finally:
        cluster.shutdown()


def run_cql(points: list[str], statements: list[str], consistency: str, timeout_s: float) -> int:
    """Execute CQL statements in order and print their rows as JSON lines; on a host of a
    site, coordinated by that site's nodes (LOCAL_ levels are then its own)."""
    from cassandra import ConsistencyLevel
    from cassandra.query import SimpleStatement

    cluster, session = connect(points, timeout_s, local_dc=paths.get(LOCAL_DC_ENV))
    try:
        for text in statements:
            stmt = SimpleStatement(text, consistency_level=getattr(ConsistencyLevel, consistency))
            rs = session.execute(stmt, timeout=timeout_s)
            coordinator = rs.response_future.coordinator_host
            for row in rs:
                print(json.dumps(row._asdict(), default=str))
            print(f"-- ok ({consistency}, coordinator {coordinator})", file=sys.stderr)
    finally:
        cluster.shutdown()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m testbed.client")
    parser.add_argument("--hosts", help="comma-separated contact points")
    parser.add_argument("--timeout", type=argtypes.number(0.1, 86400, "s"), default=30.0)
    parser.add_argument(
        "--credentials", metavar="FILE", help="login file (default: $EDGETB_CREDENTIALS)"
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("probe", help="wait until the driver sees every node up")
    p.add_argument("--expect", type=argtypes.integer(1, MAX_EDGE_NODES), required=True)
    w = sub.add_parser("write", help="time one write into a probe keyspace")
    w.add_argument("--rf", type=argtypes.integer(1, MAX_EDGE_NODES), default=1)
    w.add_argument("--consistency", type=consistency_level, default="LOCAL_QUORUM")
    c = sub.add_parser("cql", help="run CQL statements")
    c.add_argument("statements", nargs="+")
    c.add_argument("--consistency", type=consistency_level, default="LOCAL_QUORUM")
    a = sub.add_parser(
        "auth-setup", help="replace the default superuser by the role of the credentials file"
    )
    a.add_argument(
        "--per-dc",
        type=per_dc_counts,
        default=None,
        metavar="DC=N,...",
        help="a cluster of sites: system_auth replicated on every node of each datacenter",
    )
    args = parser.parse_args(argv)
    try:
        points = contact_points(args.hosts)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.credentials:  # the CLI edge: every command below reads the same variable
        from .cassandra.auth import ENV

        os.environ[ENV] = args.credentials
    try:
        if args.cmd == "auth-setup":
            creds = credentials()
            if creds is None:
                raise ClientError("auth-setup needs --credentials or $EDGETB_CREDENTIALS")
            print(json.dumps(auth_setup(points, args.timeout, creds, args.per_dc)))
        elif args.cmd == "probe":
            print(json.dumps(probe(points, args.expect, args.timeout)))
        elif args.cmd == "write":
            print(json.dumps(write_probe(points, args.rf, args.consistency, args.timeout)))
        else:
            return run_cql(points, args.statements, args.consistency, args.timeout)
    except Exception as exc:  # noqa: BLE001 - the CLI edge: one line, not a traceback
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
