"""Edge testbed core: topologies built into hosts, with Cassandra running on the edge nodes."""

from common.errors import (
    CommandError,
    ConfigError,
    NodeError,
    PortInUseError,
    StateError,
    TestbedError,
)

from .cassandra.config import CassandraSettings
from .testbed import Testbed
from .topology import Host, Topology

__all__ = [
    "CassandraSettings",
    "CommandError",
    "ConfigError",
    "Host",
    "NodeError",
    "PortInUseError",
    "StateError",
    "Testbed",
    "TestbedError",
    "Topology",
]
