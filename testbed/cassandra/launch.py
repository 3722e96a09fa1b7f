"""What a backend needs to start Cassandra on its hosts: one value handed from the Testbed
to ``Backend.start_cassandra`` (which owns how the JVMs start: processes in namespaces, or
systemd units on VMs and inventory hosts through a playbook)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .config import CassandraSettings
from .dist import CassandraDist
from .java import Java
from .readiness import Deadlines
from .tls import RunTls


@dataclass(frozen=True)
class CassandraLaunch:
    settings: CassandraSettings
    dist: CassandraDist
    java: Java | None  # the controller's (netns); remote hosts use their own
    deadlines: Deadlines
    progress: Callable[[str], None]
    cds_archive: Path | None = None  # start from this class-data-sharing archive
    cds_dump_to: Path | None = None  # the first node records one here (dist install)
    credentials: Path | None = None  # the run's login, on authenticated clusters
    tls: RunTls | None = None  # the run's certificates, where TLS is on
    tls_dir: Path | None = None  # the client's copy of them (the endpoint gets it too)
