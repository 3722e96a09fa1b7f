"""Wait for a cluster in stages, each with a deadline; a failure names the node and shows
the tail of its log (as ccm does):

    process alive -> "Starting listening for CQL clients" -> every node sees every other
    node UP -> (the caller's) run role replacing the default superuser, on clusters with
    authentication -> (the caller's) driver session from the endpoint connects.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace

from common.errors import NodeError

from .node import CassandraNode

CQL_READY = "Starting listening for CQL clients"
_PEER_RE = re.compile(r"InetAddress /?([0-9.]+)(?::\d+)? is now (UP|DOWN)")


@dataclass(frozen=True)
class Deadlines:
    """Seconds allowed for each stage (counted from the end of the previous one)."""

    process_s: float = 30.0
    cql_s: float = 180.0
    peers_s: float = 60.0
    auth_s: float = 120.0  # the default role appears ~10 s after a node's start, then retries
    driver_s: float = 60.0

    def scaled(self, factor: float) -> Deadlines:
        """Every stage's time ``factor`` times longer (guests slower than the reference)."""
        return Deadlines(*(factor * getattr(self, f.name) for f in fields(self)))

    @classmethod
    def for_cql(cls, cql_s: float) -> Deadlines:
        """Deadlines for nodes given ``cql_s`` to listen for CQL clients (``--cql-timeout``):
        a host that much slower to start than the default allows is slower at every stage
        (a TCG guest beside other work logged its first line after 44 s, past the 30 s
        default), so each other stage gets the same factor more; never less than its
        default."""
        return replace(cls().scaled(max(1.0, cql_s / cls.cql_s)), cql_s=cql_s)


@dataclass
class _Seen:
    logging: bool = False
    cql: bool = False
    peers: dict[str, str] = field(default_factory=dict)


def _scan(nodes: Sequence[CassandraNode], seen: dict[str, _Seen]) -> None:
    """What each node's log says since the last scan: logging, CQL up, peers UP/DOWN."""
    for node in nodes:
        state = seen[node.name]
        lines = node.log.new_lines()
        if lines:
            state.logging = True
        for line in lines:
            if CQL_READY in line:
                state.cql = True
            match = _PEER_RE.search(line)
            if match:
                state.peers[match.group(1)] = match.group(2)


def _fail_if_one_died(nodes: Sequence[CassandraNode], stage: str) -> None:
    """NodeError (with its exit code and log) for the first node that is not running."""
    for node in nodes:
        if not node.alive():
            node.wait_exit(5)  # its exit code once its last thread has gone
            code = node.exit_code()
            raise node.error(
                f"Cassandra exited{f' with code {code}' if code is not None else ''} "
                f"while waiting for stage '{stage}'"
            )


def wait_for_nodes(
    nodes: Sequence[CassandraNode],
    deadlines: Deadlines = Deadlines(),
    progress: Callable[[str], None] = lambda _msg: None,
    poll_s: float = 0.1,
) -> dict[str, float]:
    """Wait for the first three stages; returns the seconds each stage took.

    Raises NodeError naming the first node that died or missed a stage's deadline.
    """
    seen = {n.name: _Seen() for n in nodes}
    peers_of = {n.name: {m.host.address for m in nodes if m is not n} for n in nodes}

    stages: list[tuple[str, float, Callable[[CassandraNode], bool]]] = [
        ("process alive", deadlines.process_s, lambda n: seen[n.name].logging),
        ("listening for CQL clients", deadlines.cql_s, lambda n: seen[n.name].cql),
        (
            "every other node UP",
            deadlines.peers_s,
            lambda n: all(seen[n.name].peers.get(a) == "UP" for a in peers_of[n.name]),
        ),
    ]
    timings: dict[str, float] = {}
    for name, limit, done in stages:
        start = time.monotonic()
        while True:
            _scan(nodes, seen)
            _fail_if_one_died(nodes, name)
            pending = [n for n in nodes if not done(n)]
            if not pending:
                break
            if time.monotonic() - start > limit:
                node = pending[0]
                detail = ""
                if name == "every other node UP":
                    missing = sorted(
                        a for a in peers_of[node.name] if seen[node.name].peers.get(a) != "UP"
                    )
                    detail = f" (does not see {', '.join(missing)} UP)"
                raise NodeError(
                    node.name,
                    f"stage '{name}' not reached within {limit:.0f} s{detail}; "
                    f"also pending: {', '.join(n.name for n in pending[1:]) or 'none'}",
                    node.log_tail(),
                )
            time.sleep(poll_s)
        timings[name] = time.monotonic() - start
        progress(f"  {name}: {timings[name]:.1f} s")
    return timings
