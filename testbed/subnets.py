"""Each run's own subnet, from a pool: testbeds side by side never share an address.

The pool (default 10.77.0.0/16, ``--subnet-pool`` or ``$EDGETB_SUBNET_POOL``) is split into
/24s, one per run. A subnet is free when it overlaps neither a subnet recorded by a
registered run (of any ``$EDGETB_HOME``: the machine-wide registry) nor an address or
route in any network namespace of this machine (the root namespace included: a libvirt
bridge, a VPN, a LAN). The choice and the run's registration happen under one
machine-wide lock, so two ``up`` at once get different subnets.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from ipaddress import IPv4Network
from pathlib import Path

from common import paths
from common.errors import CommandError, ConfigError
from common.runner import run

from .ownership import OwnerLock, registered_runs, registry_dir
from .state import RunState, run_of
from .topology import Topology

DEFAULT_POOL = "10.77.0.0/16"
RUN_PREFIXLEN = 24  # one /24 per run: .1 the libvirt bridge, .10 the endpoint, .11+ edges


@dataclass(frozen=True)
class InUse:
    """A network something on this machine already uses, and what uses it."""

    network: IPv4Network
    by: str


def pool_from(text: str | None = None) -> IPv4Network:
    """The pool ``text`` (default ``$EDGETB_SUBNET_POOL``, else 10.77.0.0/16), checked:
    private IPv4, strict, /24 or larger. ConfigError naming the value otherwise."""
    text = text or paths.get("EDGETB_SUBNET_POOL") or DEFAULT_POOL
    try:
        pool = IPv4Network(text, strict=True)
    except ValueError as exc:
        raise ConfigError(f"invalid subnet pool {text!r}: {exc}") from None
    if not pool.is_private or pool.is_loopback or pool.is_link_local:
        raise ConfigError(f"subnet pool {text} is not a private (RFC 1918) range")
    if pool.prefixlen > RUN_PREFIXLEN:
        raise ConfigError(
            f"subnet pool {text} is smaller than one run's /{RUN_PREFIXLEN}; use /"
            f"{RUN_PREFIXLEN} or larger"
        )
    return pool


def first_free(pool: IPv4Network, taken: Iterable[InUse]) -> IPv4Network | None:
    """The first /24 of ``pool`` that overlaps nothing in ``taken`` (pure)."""
    networks = [t.network for t in taken]
    for candidate in pool.subnets(new_prefix=RUN_PREFIXLEN):
        if not any(candidate.overlaps(n) for n in networks):
            return candidate
    return None


def conflicts(subnet: IPv4Network, taken: Iterable[InUse]) -> list[InUse]:
    return [t for t in taken if subnet.overlaps(t.network)]


# -- what is in use -------------------------------------------------------------------------


def recorded_subnets(*, hosts_only: bool = False) -> list[InUse]:
    """Subnets and per-host addresses recorded by every registered run (``hosts_only``:
    only the per-host addresses of runs on existing machines)."""
    found = []
    for run_id, run_dir in registered_runs().items():
        try:
            topo = RunState.load(run_dir).topology
        except Exception:  # a run being removed, or a corrupt state: `clean` reports it
            continue
        if topo.get("subnet") and not hosts_only:
            with contextlib.suppress(ValueError):
                found.append(InUse(IPv4Network(topo["subnet"]), f"run {run_id}"))
        for name, addr in (topo.get("addresses") or {}).items():
            with contextlib.suppress(ValueError):
                found.append(InUse(IPv4Network(f"{addr}/32"), f"run {run_id} ({name})"))
    return found


def _namespaces() -> list[str | None]:
    out = run(["ip", "netns", "list"]).stdout
    return [None] + [line.split()[0] for line in out.splitlines() if line.strip()]


def _ip_json(ns: str | None, *args: str) -> list[dict]:
    argv = ["ip", "-j", "-4"] + (["-n", ns] if ns else []) + list(args)
    try:
        out = run(argv).stdout
    except CommandError:
        if ns is None:  # this machine's own addresses must be known, not guessed
            raise
        return []  # a namespace deleted while we looked
    return json.loads(out or "[]")


def namespace_networks() -> list[InUse]:
    """Every IPv4 address (as its network) and route in every namespace, default routes
    and loopback aside."""
    found = []
    for ns in _namespaces():
        owner = run_of(ns) if ns else None
        where = f"namespace {ns}" if ns else "this machine"
        for link in _ip_json(ns, "addr", "show"):
            for a in link.get("addr_info", []):
                net = ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}").network
                if isinstance(net, IPv4Network) and not net.is_loopback:
                    by = f"run {owner}" if owner else f"{a['local']}/{a['prefixlen']} on {where}"
                    found.append(InUse(net, by))
        for route in _ip_json(ns, "route", "show"):
            dst = route.get("dst", "default")
            if dst == "default":
                continue
            with contextlib.suppress(ValueError):
                net = IPv4Network(dst, strict=False)
                if not net.is_loopback and net.prefixlen > 0:
                    found.append(InUse(net, f"run {owner}" if owner else f"route {dst} on {where}"))
    return found


def in_use() -> list[InUse]:
    return recorded_subnets() + namespace_networks()


# -- choosing under the machine-wide lock ---------------------------------------------------


def lock_path() -> Path:
    return registry_dir().parent / "subnets.lock"


@contextlib.contextmanager
def allocation() -> Iterator[None]:
    """Held from choosing a subnet until the run that got it is registered."""
    path = lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with OwnerLock(path):
        yield


def place(topology: Topology, pool: str | None = None) -> Topology:
    """``topology`` on a subnet of its own: its explicit subnet when that is free (else
    ConfigError naming what uses it), otherwise the pool's first free /24. Call inside
    ``allocation()`` and register the run before leaving it."""
    taken = in_use()
    if topology.subnet is not None:
        subnet = IPv4Network(topology.subnet)
        clash = conflicts(subnet, taken)
        if clash:
            raise ConfigError(
                f"subnet {subnet} is in use ({'; '.join(sorted({c.by for c in clash}))}); "
                f"leave --subnet out to get a free one from the pool"
            )
        return topology
    net = pool_from(pool)
    free = first_free(net, taken)
    if free is None:
        raise ConfigError(
            f"no free /{RUN_PREFIXLEN} left in the subnet pool {net} "
            f"({len(taken)} networks in use by other runs and this machine); `edgetb clean` "
            f"removes dead runs, --subnet-pool names another pool"
        )
    return topology.on_subnet(str(free))
