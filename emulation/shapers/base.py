"""What every shaper shares: the protocol ``api`` drives, the records each keeps in the
run's state, and the cache of tcconfig's output."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from common.errors import StateError
from common.paths import cache_root
from testbed.state import Record
from testbed.testbed import Testbed

from ..links import LinkMatrix
from ..tcgen import Structure


class Shaper(Protocol):
    """What ``api`` needs from a shaper (direct, host, gateway), and what the registry
    (``emulation.shapers``) asks of one instead of comparing names."""

    name: str
    loss_location: str
    inside_hosts: bool  # shapes inside each host: the only kind VMs and inventory hosts take

    def __init__(self, tb: Testbed) -> None: ...

    @staticmethod
    def preflight() -> None:
        """What it needs on this machine, checked before anything starts (ConfigError or
        StateError saying what to install or build)."""

    @staticmethod
    def prepare(*, force: bool = False) -> None:
        """Build what it needs at set-up (`edgetb net shaper prepare`)."""

    def start(self) -> float:
        """Build the shaping (unshaped links) unless it is up; returns the seconds taken."""

    def apply(self, matrix: LinkMatrix) -> float:
        """Give every ordered pair its link; returns the seconds the change took."""

    def stop(self) -> None:
        """Remove everything the shaper built."""

    def close(self) -> None:
        """Let go of what this object holds open (the gateway's command channel, which
        takes one client at a time); the shaping stays."""

    def problems(self, *, thorough: bool = False) -> list[str]:
        """What of the shaping is gone (empty when intact)."""

    def show(self) -> list[str]:
        """The qdiscs as tc shows them."""


@dataclass
class EmulationRecord(Record):
    """Which shaper the run uses and the matrix last applied (none before the first set)."""

    KEY = "emulation"
    shaper: str | None = None
    loss_location: str = ""
    matrix: dict[str, Any] | None = None


@dataclass
class GatewayRecord(Record):
    """The gateway VM of the run: its QEMU pid, how it booted, its qdisc structure."""

    KEY = "shaper.gateway"
    pid: int | None = None
    boot_s: float = 0.0
    accel: str | None = None
    structure: dict[str, Any] = field(default_factory=dict)


@dataclass
class DirectRecord(Record):
    """The qdisc structure tcconfig made on each host (host -> Structure.to_dict())."""

    KEY = "shaper.direct"
    structures: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class HostShaperRecord(Record):
    """The host shaper of the run: the delayer's pid and control socket, the iptables back
    end that took its chain (in the switch namespace), the queued links (source address,
    destination address, queue) and the offloads before, per host."""

    KEY = "shaper.host"
    pid: int | None = None
    socket: str = ""
    iptables: str = "nft"
    links: list[list[Any]] = field(default_factory=list)
    offloads: dict[str, dict[str, str]] = field(default_factory=dict)


def emulation(tb: Testbed) -> EmulationRecord:
    """The emulation record of a running testbed (an empty one on first use)."""
    if tb.state is None:
        raise StateError("testbed is not up")
    return tb.state.get(EmulationRecord) or tb.state.put(EmulationRecord())


def _save(tb: Testbed) -> None:
    assert tb.state is not None
    tb.state.save()


def _put(tb: Testbed, rec: Any) -> Any:
    """``rec`` recorded in the run's state, and saved."""
    assert tb.state is not None
    tb.state.put(rec)
    tb.state.save()
    return rec


def _drop(tb: Testbed, cls: type[Record]) -> None:
    assert tb.state is not None
    tb.state.drop(cls)
    tb.state.save()


def _structure_cache(key_data: dict, build) -> Structure:
    """Cached tcconfig output: tcconfig takes ~0.5 s per rule, the topology decides it all."""
    key = hashlib.sha256(json.dumps(key_data, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_root() / "tc" / f"{key}.json"
    if path.is_file():
        return Structure.from_dict(json.loads(path.read_text()))
    structure = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(structure.to_dict()))
    tmp.replace(path)
    return structure
