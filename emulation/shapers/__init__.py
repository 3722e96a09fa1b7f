"""Shapers apply a LinkMatrix to a running testbed:

- ``direct``: tcconfig's netem on each host's own eth0 (sender egress), wherever the
  kernel has sch_netem (and always inside VMs and inventory hosts);
- ``host``: where the kernel has no netem, a compiled delayer on the machine fed by
  netfilter queues inside the testbed's namespaces (``emulation.hostshaper``);
- ``gateway``: tcconfig's netem in a gateway VM routing the testbed (kept to test the
  tcconfig-on-netem path on kernels without netem; ``--shaper gateway``).

A shaper records what it built in the run's state file; ``for_testbed`` reattaches.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from common.errors import ConfigError, StateError
from common.runner import run
from testbed.backends import capabilities
from testbed.testbed import Testbed

from .base import (
    DirectRecord,
    EmulationRecord,
    GatewayRecord,
    HostShaperRecord,
    Shaper,
    emulation,
)
from .direct import DirectShaper, direct_rules
from .gateway import GatewayShaper, gateway_rules
from .host import HostShaper

__all__ = [
    "REGISTRY",
    "SHAPERS",
    "DirectRecord",
    "DirectShaper",
    "EmulationRecord",
    "GatewayRecord",
    "GatewayShaper",
    "HostShaper",
    "HostShaperRecord",
    "Shaper",
    "direct_rules",
    "emulation",
    "for_testbed",
    "gateway_rules",
    "netem_available",
    "netem_listed",
    "preflight",
    "resolve",
]

SHAPERS = ("auto", "direct", "host", "gateway")
_netem_cache: bool | None = None


def netem_available() -> bool:
    """Whether this kernel can run netem: tried once on a veth in a scratch namespace."""
    global _netem_cache
    if _netem_cache is None:
        # this process's own name: two processes probing at once (two workers set up on
        # one machine) collided on a name made from the clock
        ns = f"tb-netemprobe{os.getpid()}-{secrets.token_hex(2)}"
        run(["ip", "netns", "add", ns])
        try:
            run(["ip", "-n", ns, "link", "add", "name", "p0", "type", "veth", "peer", "name", "p1"])
            proc = run(
                [
                    "ip",
                    "netns",
                    "exec",
                    ns,
                    "tc",
                    "qdisc",
                    "add",
                    "dev",
                    "p0",
                    "root",
                    "netem",
                    "delay",
                    "1ms",
                ],
                check=False,
            )
            _netem_cache = proc.returncode == 0
        finally:
            run(["ip", "netns", "del", ns], check=False)
    return _netem_cache


def netem_listed() -> bool:
    """Whether this kernel has netem, read without changing anything (for estimates: a
    dry run must not make namespaces or load modules): loaded or built in, or a module
    of the running kernel. ``netem_available`` is the proof."""
    if _netem_cache is not None:
        return _netem_cache
    if Path("/sys/module/sch_netem").exists():
        return True
    modules = Path("/lib/modules") / os.uname().release
    for index in ("modules.builtin", "modules.dep"):
        try:
            if "/sch_netem.ko" in (modules / index).read_text():
                return True
        except OSError:
            continue
    return False


def resolve(name: str, backend: str | None = None, *, probe: bool = True) -> str:
    """auto -> direct where the kernel has netem, else host; ConfigError for unknown names.
    ``backend``: the testbed's (None: the default backend, as ``capabilities`` takes it).
    ``probe=False``: judged by ``netem_listed`` (nothing on the machine changes) and
    direct taken as asked.

    VMs and inventory hosts (``libvirt``, ``hosts``) have kernels of their own with netem:
    they are always shaped directly, inside each host, as the paper's scripts did."""
    if name not in SHAPERS:
        raise ConfigError(f"unknown shaper {name!r} (choose from {', '.join(SHAPERS)})")
    if capabilities(backend).remote:  # kernels of their own: shaped inside each host
        if name != "auto" and not REGISTRY[name].inside_hosts:
            raise ConfigError(
                f"the {backend} backend shapes inside its hosts: use --shaper direct (or auto)"
            )
        return next(n for n, cls in REGISTRY.items() if cls.inside_hosts)
    if name == "auto":
        return "direct" if (netem_available() if probe else netem_listed()) else "host"
    if name == "direct" and probe and not netem_available():
        raise ConfigError("this kernel has no sch_netem: use --shaper host (or auto)")
    return name


def preflight(name: str) -> None:
    """What a resolved shaper needs on this machine, checked before anything starts
    (ConfigError or StateError saying what to install or build)."""
    REGISTRY[name].preflight()


REGISTRY: dict[str, type[Shaper]] = {
    "direct": DirectShaper,
    "host": HostShaper,
    "gateway": GatewayShaper,
}


def for_testbed(tb: Testbed, name: str = "auto") -> Shaper:
    """The shaper of a running testbed: the one it already uses, else ``name`` resolved."""
    if tb.state is None:
        raise StateError("testbed is not up")
    current = emulation(tb).shaper
    chosen = resolve(name, tb.backend_name) if current is None or name != "auto" else current
    if current is not None and chosen != current:
        raise ConfigError(
            f"this testbed already shapes with {current}; `edgetb net clear --remove` first"
        )
    if current is None:
        preflight(chosen)  # before anything is made
    return REGISTRY[chosen](tb)
