"""Consistency levels for writes: which names are valid and how many replica acks each needs.

Pure functions shared by the sweep (validation, duration estimates) and the analysis (φ).
"""

from __future__ import annotations

from collections.abc import Mapping

from common.errors import ConfigError

# Levels a plain (non-LWT) INSERT accepts. SERIAL and LOCAL_SERIAL only order the Paxos
# phase of lightweight transactions; Cassandra rejects them for a plain write.
WRITE_LEVELS = (
    "ANY",
    "ONE",
    "TWO",
    "THREE",
    "QUORUM",
    "ALL",
    "LOCAL_QUORUM",
    "EACH_QUORUM",
    "LOCAL_ONE",
)
SERIAL_LEVELS = ("SERIAL", "LOCAL_SERIAL")
# The order tables and figures list levels in: from the fewest acks to the most.
LEVEL_ORDER = ("ONE", "LOCAL_ONE", "TWO", "THREE", "LOCAL_QUORUM", "QUORUM", "EACH_QUORUM", "ALL")


def level_rank(level: str) -> int:
    """A level's place in LEVEL_ORDER (others last): a sort key."""
    return LEVEL_ORDER.index(level) if level in LEVEL_ORDER else len(LEVEL_ORDER)


def check_level(name: str) -> str:
    """The upper-case level name; ConfigError for an unknown or read-only level."""
    level = str(name).upper()
    if level in SERIAL_LEVELS:
        raise ConfigError(
            f"consistency level {level} is only for lightweight transactions; "
            f"a plain write takes one of {', '.join(WRITE_LEVELS)}"
        )
    if level not in WRITE_LEVELS:
        raise ConfigError(
            f"unknown consistency level {name!r} (choose from {', '.join(WRITE_LEVELS)})"
        )
    return level


def required_acks(level: str, rf: int) -> int:
    """Replica acknowledgements a write at ``level`` waits for (single datacenter).

    ANY is satisfied by a hint on the coordinator, so it needs no replica: counted as 1
    here because a live replica is written whenever one is up (the only case we measure).
    """
    level = check_level(level)
    if rf < 1:
        raise ConfigError(f"replication factor must be >= 1, got {rf}")
    if level in ("ANY", "ONE", "LOCAL_ONE"):
        return 1
    if level == "TWO":
        return 2
    if level == "THREE":
        return 3
    if level == "ALL":
        return rf
    return rf // 2 + 1  # QUORUM, LOCAL_QUORUM, EACH_QUORUM (one datacenter)


def ack_rules(level: str, rf: Mapping[str, int], local: str) -> list[tuple[str | None, int]]:
    """On a testbed of sites, with ``rf`` replicas per site (NetworkTopologyStrategy) and
    the coordinator in site ``local``: what a write at ``level`` waits for, as (the site
    whose replicas count, None: any site; how many of them must ack), every rule at once.
    LOCAL_* count the local site's replicas only; EACH_QUORUM a quorum in every site; the
    others (ALL, QUORUM, ONE, ...) replicas anywhere. ConfigError for a level the
    keyspace cannot serve (a LOCAL_ level without replicas in the local site, more acks
    than replicas)."""
    level = check_level(level)
    sites = {s: int(n) for s, n in rf.items() if int(n) > 0}
    if not sites:
        raise ConfigError("a keyspace of sites needs replicas in at least one site")
    total, here = sum(sites.values()), sites.get(local, 0)
    if level in ("LOCAL_ONE", "LOCAL_QUORUM"):
        if not here:
            raise ConfigError(
                f"{level} needs replicas in the coordinator's site {local!r}; the keyspace "
                f"has them in {', '.join(sorted(sites))}"
            )
        return [(local, 1 if level == "LOCAL_ONE" else here // 2 + 1)]
    if level == "EACH_QUORUM":
        return [(s, n // 2 + 1) for s, n in sorted(sites.items())]
    need = required_acks(level, total)  # ANY, ONE, TWO, THREE, QUORUM, ALL: anywhere
    if need > total:
        raise ConfigError(f"{level} needs {need} replicas; the keyspace has {total}")
    return [(None, need)]


def site_acks(level: str, rf: Mapping[str, int], local: str) -> tuple[int, int]:
    """On a testbed of sites (see ``ack_rules``): (acks a write at ``level`` waits for in
    all, the fewest of them that must come from other sites than the coordinator's
    ``local`` one). A remote ack costs the write a WAN round trip."""
    here = int(rf.get(local, 0))
    total = remote = 0
    for site, k in ack_rules(level, rf, local):
        total += k
        remote += max(0, k - here) if site is None else (0 if site == local else k)
    return total, remote


def remote_round_trip_probability(level: str, rf: int, nodes: int) -> float:
    """Probability that a write must wait for at least one replica other than its
    coordinator, when coordinators are chosen uniformly (round robin) and keys uniformly.

    The coordinator is a replica with probability rf/nodes; only then, and only when a
    single ack suffices, does it answer without a network round trip to another node.
    """
    acks = required_acks(level, rf)
    if acks <= 1:
        return 1.0 - rf / nodes
    return 1.0


# Levels a read accepts: ANY is for writes only, EACH_QUORUM too (Cassandra rejects it
# for reads); SERIAL and LOCAL_SERIAL read through Paxos.
READ_LEVELS = (
    "ONE",
    "TWO",
    "THREE",
    "QUORUM",
    "ALL",
    "LOCAL_QUORUM",
    "LOCAL_ONE",
    "SERIAL",
    "LOCAL_SERIAL",
)


def check_read_level(name: str) -> str:
    """The upper-case level name; ConfigError for an unknown or write-only level."""
    level = str(name).upper()
    if level in ("ANY", "EACH_QUORUM"):
        raise ConfigError(
            f"consistency level {level} is for writes only; a read takes one of "
            f"{', '.join(READ_LEVELS)}"
        )
    if level not in READ_LEVELS:
        raise ConfigError(
            f"unknown consistency level {name!r} (choose from {', '.join(READ_LEVELS)})"
        )
    return level
