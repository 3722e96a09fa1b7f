"""The seed paper's ack-ratio model φ (section 6), exact, for any n >= RF >= 1 and level.

    φ = P_nc · (ρ_nc_ack / ρ_nc_total) + P_c · (ρ_c_ack / ρ_c_total)

- P_c: probability that the coordinator is one of the key's replicas. Round-robin
  coordinators and uniformly placed keys give P_c = RF/n; ``phi_measured`` takes it from
  the recorded coordinator/replica data instead. P_nc = 1 - P_c.
- Coordinator not a replica: it sends ρ_nc_total = RF write requests and needs
  ρ_nc_ack = A acknowledgements, A = the level's required acks (LOCAL_QUORUM: RF//2 + 1).
- Coordinator is a replica: it writes locally and sends ρ_c_total = RF - 1 requests,
  needing ρ_c_ack = A - 1 of them.

Choices the paper leaves open, made explicit here:
- **No remote ack needed** (ρ_ack = 0: RF 1 or level ONE with the coordinator a replica):
  the term is 0 — no packet on the network can delay that write's acknowledgement. For
  ρ_total = 0 (RF 1, coordinator the replica) this defines 0/0 as 0. Hence
  φ(RF 1) = 1 - 1/n under any level: only writes coordinated elsewhere depend on the
  network, and those need their single request and ack.
- Levels needing more acks than RF replicas (e.g. THREE with RF 2) are errors: every
  such write fails as Unavailable.

Table 1 of the paper prints two decimals; two entries are **truncated**, not rounded:
4 nodes RF 4 (φ = 2/3 = 0.666…, printed 0.66) and 5 nodes RF 3 (φ = 17/30 = 0.5666…,
printed 0.56). ``paper_table`` reproduces the printed values; ``phi`` gives exact fractions.

    python -m analysis.phi --nodes 3,4,5 [--cl LOCAL_QUORUM] [--exact]
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from typing import overload

from common.command import Parser, command, prog
from common.errors import ConfigError
from experiments.settings.fields import parse_list
from model.consistency import ack_rules, check_level, required_acks

PAPER_DECIMALS = 2


def _ratio(acks: int, sent: int) -> Fraction:
    """ρ_ack/ρ_total with the no-remote-ack case defined as 0 (see module docstring)."""
    if acks <= 0:
        return Fraction(0)
    return Fraction(acks, sent)


def _check(nodes: int, rf: int, level: str) -> tuple[str, int]:
    level = check_level(level)
    if not (isinstance(nodes, int) and isinstance(rf, int) and 1 <= rf <= nodes):
        raise ConfigError(f"φ needs integers n >= RF >= 1, got n={nodes!r}, RF={rf!r}")
    acks = required_acks(level, rf)
    if acks > rf:
        raise ConfigError(f"{level} needs {acks} acks but RF {rf} has only {rf} replicas")
    return level, acks


@overload
def phi_given_pc(nodes: int, rf: int, p_c: Fraction, level: str = ...) -> Fraction: ...
@overload
def phi_given_pc(nodes: int, rf: int, p_c: float, level: str = ...) -> float: ...
def phi_given_pc(
    nodes: int, rf: int, p_c: Fraction | float, level: str = "LOCAL_QUORUM"
) -> Fraction | float:
    """φ for a given probability that the coordinator is a replica."""
    _, acks = _check(nodes, rf, level)
    not_replica = _ratio(acks, rf)
    replica = _ratio(acks - 1, rf - 1)
    if isinstance(p_c, Fraction):
        return (1 - p_c) * not_replica + p_c * replica
    return (1 - p_c) * float(not_replica) + p_c * float(replica)


def phi(nodes: int, rf: int, level: str = "LOCAL_QUORUM") -> Fraction:
    """Exact φ with round-robin coordinators: P_c = RF/n."""
    _check(nodes, rf, level)
    return phi_given_pc(nodes, rf, Fraction(rf, nodes), level)


def phi_sites(level: str, rf: int, sizes: tuple[int, ...]) -> tuple[Fraction, Fraction]:
    """φ on a testbed of sites, apart for the local site's links and the WAN: (φ_LAN,
    φ_WAN), each the expected share of the write requests sent over those links whose
    acks the write waits for. ``rf`` replicas in each site of ``sizes``; round-robin
    coordinators in the first site (the endpoint's), so P_c = RF / its size. A request
    to another site is one per remote replica, as in the RTT model; where a level may
    count acks from anywhere (QUORUM, ALL, ONE), the local ones come first (the LAN is
    the faster), so the WAN gives only what they cannot. No request over a kind of link
    (RF 1 locally with the coordinator the replica; one site) counts 0, as in ``phi``."""
    names = [f"dc{i + 1}" for i in range(len(sizes))]
    if not 1 <= rf <= min(sizes):
        raise ConfigError(f"RF {rf} in each site needs 1..{min(sizes)} (the smallest site)")
    rules = ack_rules(level, dict.fromkeys(names, rf), names[0])
    p_c = Fraction(rf, sizes[0])
    lan = wan = Fraction(0)
    for weight, replica in ((p_c, 1), (1 - p_c, 0)):
        if not weight:
            continue
        local_sent, remote_sent = rf - replica, rf * (len(sizes) - 1)
        local = remote = 0
        for site, k in rules:
            if site is None:  # anywhere: the local replicas first
                need = k - replica
                local += min(need, local_sent)
                remote += need - min(need, local_sent)
            elif site == names[0]:
                local += k - replica
            else:
                remote += k
        lan += weight * (Fraction(local, local_sent) if local_sent else 0)
        wan += weight * (Fraction(remote, remote_sent) if remote_sent else 0)
    return lan, wan


def phi_measured(
    nodes: int, rf: int, coordinator_is_replica: list[bool] | list[int], level: str = "LOCAL_QUORUM"
) -> tuple[float, float]:
    """(φ, measured P_c) using the fraction of requests whose coordinator held the key."""
    flags = [bool(x) for x in coordinator_is_replica if x is not None]
    if not flags:
        raise ConfigError("no requests with a known coordinator to measure P_c from")
    p_c = sum(flags) / len(flags)
    return float(phi_given_pc(nodes, rf, p_c, level)), p_c


def truncate(value: Fraction | float, decimals: int = PAPER_DECIMALS) -> float:
    scale = 10**decimals
    return math.floor(float(value) * scale + 1e-12) / scale


def paper_table(nodes=(3, 4, 5), level: str = "LOCAL_QUORUM") -> dict[tuple[int, int], float]:
    """Table 1 as printed: RF 2..n per n, two decimals, truncated."""
    return {(n, rf): truncate(phi(n, rf, level)) for n in nodes for rf in range(2, n + 1)}


def format_table(nodes: list[int], level: str = "LOCAL_QUORUM", exact: bool = False) -> str:
    rfs = range(1, max(nodes) + 1)
    head = f"{'RF':>3} " + " ".join(f"{f'{n}-node':>18}" for n in nodes)
    lines = [f"φ under {check_level(level)}, round-robin coordinators (P_c = RF/n)", head]
    notes = []
    for rf in rfs:
        cells = []
        for n in nodes:
            if rf > n:
                cells.append(f"{'-':>18}")
                continue
            try:
                value = phi(n, rf, level)
            except ConfigError:
                cells.append(f"{'n/a':>18}")
                continue
            shown = f"{value.numerator}/{value.denominator}" if exact else f"{truncate(value):.2f}"
            rounded = round(float(value), PAPER_DECIMALS)
            if not exact and rounded != truncate(value):
                notes.append(
                    f"{n} nodes RF {rf}: φ = {value} = {float(value):.4f}; the "
                    f"paper's two decimals truncate to {truncate(value):.2f} "
                    f"(rounded: {rounded:.2f})"
                )
            cells.append(f"{shown:>18}")
        lines.append(f"{rf:>3} " + " ".join(cells))
    lines.append(
        "RF 1: φ = 1 - 1/n (a write coordinated by its replica needs no remote ack; "
        "defined as 0, see analysis/phi.py)"
    )
    lines.extend(notes)
    return "\n".join(lines)


MAX_TABLE_NODES = 100  # one row per RF: a larger table is a typo, not a question


@command("python -m analysis.phi")
def main(argv: list[str] | None = None) -> int:
    p = Parser(prog=prog("python -m analysis.phi"), description="Print φ for node counts and RFs.")
    p.add_argument(
        "--nodes",
        nargs="+",
        default=["3,4,5"],
        help=f"node counts, 1..{MAX_TABLE_NODES}, as elsewhere: 3,4,5 or 3..5 (3 4 5 too; "
        "default 3,4,5)",
    )
    p.add_argument("--cl", default="LOCAL_QUORUM", help="consistency level")
    p.add_argument("--exact", action="store_true", help="fractions instead of decimals")
    args = p.parse_args(argv)
    try:
        nodes = parse_list("--nodes", ",".join(args.nodes), int)
        for n in nodes:
            if not 1 <= n <= MAX_TABLE_NODES:
                raise ConfigError(f"--nodes: '{n}' is outside 1..{MAX_TABLE_NODES}")
            _check(n, 1, args.cl)
        print(format_table(list(nodes), args.cl, args.exact))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
