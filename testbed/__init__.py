"""Edge testbed core: topologies built into hosts, with Cassandra running on the edge nodes."""

from .cassandra.config import CassandraSettings
from .errors import CommandError, ConfigError, NodeError, PortInUseError, StateError, TestbedError
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
