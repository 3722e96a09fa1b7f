"""Backends build a Topology into running hosts. One registry; strings become classes only
at the CLI edge."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Protocol

from ..errors import ConfigError
from ..state import RunState
from ..topology import Topology


class Backend(Protocol):
    """What the Testbed needs from a backend (netns now; libvirt and hosts later)."""

    name: str

    def create(self) -> None:
        """Build every host and link of the topology; record each object in the state."""

    def destroy(self) -> None:
        """Remove every object recorded in the state or carrying the run's prefix."""

    def exec_argv(self, host: str, argv: Sequence[str]) -> list[str]:
        """The argument list that runs ``argv`` on ``host``."""

    def pids(self, host: str) -> list[int]:
        """PIDs of processes running on ``host`` (for cleanup)."""


def make_backend(name: str, topology: Topology, state: RunState) -> Backend:
    from .netns import NetnsBackend

    registry: dict[str, type] = {"netns": NetnsBackend}
    try:
        cls = registry[name]
    except KeyError:
        raise ConfigError(
            f"unknown backend {name!r} (available: {', '.join(sorted(registry))})"
        ) from None
    return cls(topology, state)


def popen_on(backend: Backend, host: str, argv: Sequence[str], **kwargs) -> subprocess.Popen:
    return subprocess.Popen(backend.exec_argv(host, argv), **kwargs)
