"""Per-node Cassandra configuration from layered settings (base -> cluster -> node).

Everything here is pure: settings in, dicts/strings/argument lists out. Files are written
by the caller (``node.py``).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from common.errors import ConfigError

from ..topology import DEFAULT_RACK, Host, Topology
from . import tls
from .auth import AUTH_SETTINGS
from .quiet import BUILDS, CassandraBuild

CQL_PORT = 9042
STORAGE_PORT = 7000
JMX_PORT = 7199
NODE_PORTS = (STORAGE_PORT, CQL_PORT, JMX_PORT)

JvmProfile = Literal["fast", "standard"]
JVM_PROFILES = ("fast", "standard")
DEFAULT_HEAP_MB = 256
MIN_HEAP_MB = 128

Housekeeping = Literal["standard", "writes"]
# How often a node's periodic housekeeping runs: (approximate clock in ms, the dynamic
# snitch's update interval; None: Cassandra's 100 ms). "standard" is what reads need:
# the snitch ranks replicas by reply times taken with that clock (testbed.cassandra.jvm).
# "writes", for testbeds that take only writes: the clock every 100 ms and the snitch
# every 10 s, 0.94 -> 0.63 % of a core per idle JVM (benchmarks/write_cpu.py). No write
# is timed by either: the coordinator times a write out by the precise clock; the coarse
# clock only stamps messages, and a message is expired only once the approximate time
# minus its precision is past its deadline, so a coarser clock drops a late message
# later, never sooner; a write goes to every replica whatever their scores.
HOUSEKEEPING: dict[str, tuple[int, str | None]] = {
    "standard": (20, None),
    "writes": (100, "10000ms"),
}

DELETE = object()
"""Marker: a layer that sets a key to DELETE removes it from the merged result."""


def merge(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Merge settings layers left to right; later layers win.

    Mappings are merged recursively; any other value (lists included) replaces the earlier
    one; a value of ``DELETE`` removes the key. Inputs are never modified.
    """
    result: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if value is DELETE:
                result.pop(key, None)
            elif isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
                result[key] = merge(result[key], value)
            elif isinstance(value, Mapping):
                result[key] = merge(value)
            else:
                result[key] = copy.deepcopy(value)
    return result


# Settings for small edge devices and fast, reproducible bring-up. Keys are cassandra.yaml
# keys of Cassandra 5.0; anything not given takes Cassandra's own default.
BASE_SETTINGS: dict[str, Any] = {
    "num_tokens": 1,
    "partitioner": "org.apache.cassandra.dht.Murmur3Partitioner",
    "endpoint_snitch": "SimpleSnitch",
    "auto_bootstrap": False,
    "auto_snapshot": False,
    "commitlog_sync": "periodic",
    "commitlog_sync_period": "10000ms",
    "commitlog_segment_size": "8MiB",
    "storage_port": STORAGE_PORT,
    "native_transport_port": CQL_PORT,
    "start_native_transport": True,
    "concurrent_compactors": 1,
    "key_cache_size": "8MiB",
    "authenticator": "AllowAllAuthenticator",
    "authorizer": "AllowAllAuthorizer",
}


# What the testbed itself sets for every node and relies on: a settings layer from the
# user may not replace them (cluster_name has its own setting).
PROTECTED_SETTINGS: dict[str, str] = {
    **dict.fromkeys(
        (
            "listen_address",
            "listen_interface",
            "listen_interface_prefer_ipv6",
            "listen_on_broadcast_address",
            "broadcast_address",
            "rpc_address",
            "rpc_interface",
            "rpc_interface_prefer_ipv6",
            "broadcast_rpc_address",
        ),
        "each node binds only its own address on the testbed's subnet",
    ),
    "seed_provider": "every node of the topology is a seed",
    **dict.fromkeys(
        ("storage_port", "ssl_storage_port", "native_transport_port", "native_transport_port_ssl"),
        "the readiness checks, clients and shaping use the testbed's ports",
    ),
    **dict.fromkeys(
        (
            "num_tokens",
            "initial_token",
            "partitioner",
            "allocate_tokens_for_keyspace",
            "allocate_tokens_for_local_replication_factor",
        ),
        "each node owns one evenly spaced Murmur3 token",
    ),
    **dict.fromkeys(
        (
            "data_file_directories",
            "local_system_data_file_directory",
            "commitlog_directory",
            "hints_directory",
            "saved_caches_directory",
            "cdc_raw_directory",
        ),
        "a node's files live in its run directory, which `down` removes",
    ),
    "cluster_name": "set it with cluster_name (--cluster-name)",
}
_SETTING_KEY_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def check_override(key: object) -> None:
    """ConfigError unless ``key`` is a cassandra.yaml key a user may set."""
    if not isinstance(key, str) or not _SETTING_KEY_RE.match(key):
        raise ConfigError(
            f"{key!r} is not a cassandra.yaml key (lowercase letters, digits and _, "
            f"e.g. concurrent_writes)"
        )
    if key in PROTECTED_SETTINGS:
        raise ConfigError(
            f"cassandra.yaml setting {key} is the testbed's own and cannot be overridden "
            f"({PROTECTED_SETTINGS[key]})"
        )


SIMPLE_SNITCH_DC = "datacenter1"  # the one datacenter SimpleSnitch puts every node in
RACKDC_FILE = "cassandra-rackdc.properties"


def initial_token(index: int, count: int) -> int:
    """Evenly spaced Murmur3 token for node ``index`` of ``count``: -2^63 + i*2^64/n."""
    if not 0 <= index < count:
        raise ConfigError(f"token index {index} out of range for {count} nodes")
    return -(2**63) + index * (2**64 // count)


def cluster_layer(topology: Topology, cluster_name: str) -> dict[str, Any]:
    """Settings shared by every node of one cluster: name and seeds (every node a seed)."""
    seeds = ",".join(f"{h.address}:{STORAGE_PORT}" for h in topology.edges)
    return {
        "cluster_name": cluster_name,
        "seed_provider": [
            {
                "class_name": "org.apache.cassandra.locator.SimpleSeedProvider",
                "parameters": [{"seeds": seeds}],
            }
        ],
    }


def node_token(topology: Topology, host: Host) -> int:
    """``host``'s token. One site: evenly spaced over the ring. Sites: evenly spaced within
    each site, the site's index added (the usual multi-datacenter layout: each
    datacenter's replicas are placed by its own tokens, so each must be even on its own;
    the offset keeps tokens unique across datacenters)."""
    if host.site is None:
        return initial_token(topology.edges.index(host), topology.edge_nodes)
    mates = topology.site_nodes(host.site)
    site_index = (topology.site_names or ()).index(host.site)
    # rounded once (i * 2^64 // n, not i * (2^64 // n)): the same ring position then gets
    # the same base in every site, and the offsets keep the tokens apart
    return -(2**63) + mates.index(host) * 2**64 // len(mates) + site_index


def rackdc_properties(host: Host) -> str:
    """cassandra-rackdc.properties of a node: its site and rack, which the
    GossipingPropertyFileSnitch of a topology of sites gossips; without sites, the names
    SimpleSnitch gives (the file is then unread)."""
    return f"dc={host.site or SIMPLE_SNITCH_DC}\nrack={DEFAULT_RACK}\nprefer_local=false\n"


def node_layer(topology: Topology, host: Host, node_dir: Path) -> dict[str, Any]:
    """Settings of one node: its own addresses only, its token, its directories; in a
    topology of sites, the snitch that reads its site from its rackdc file."""
    if not host.is_edge:
        raise ConfigError(f"{host.name} is not an edge node")
    snitch = {} if host.site is None else {"endpoint_snitch": "GossipingPropertyFileSnitch"}
    return {
        **snitch,
        "listen_address": host.address,
        "rpc_address": host.address,
        "initial_token": str(node_token(topology, host)),
        "data_file_directories": [str(node_dir / "data")],
        "commitlog_directory": str(node_dir / "commitlog"),
        "hints_directory": str(node_dir / "hints"),
        "saved_caches_directory": str(node_dir / "saved_caches"),
        "cdc_raw_directory": str(node_dir / "cdc_raw"),
    }


@dataclass(frozen=True)
class CassandraSettings:
    """What a researcher may choose about the Cassandra cluster. Validated on construction.

    Args:
        cluster_name: Cassandra cluster name.
        heap_mb: JVM heap per node (Xms = Xmx), at least 128 MB.
        jvm_profile: "fast" (C1 only, serial GC, class-data sharing: quick start and the
            least CPU per write, default) or "standard" (stock C2 JIT and G1 GC of
            Cassandra's jvm17-server.options).
        housekeeping: "standard" (default) or "writes": a coarser approximate clock and
            dynamic snitch for testbeds that take only writes (reads at ONE then follow
            the ring's order, not the replicas' reply times; :data:`HOUSEKEEPING`).
        build: "quiet" (default: one class rebuilt so that the shared executor pool
            stops spinning 0.1 ms after its work instead of 10 ms,
            ``testbed.cassandra.quiet``; it measures as stock does, docs/measured.md) or
            "stock" (Apache's jars, unmodified).
        overrides: extra cassandra.yaml settings for every node (cluster layer).
        node_overrides: extra settings per host name (node layer, wins over everything).
        tls: client-to-node and internode TLS with the run's own certificates
            (``testbed.cassandra.tls``); None: the backend's default (on for hosts).
        plain_text: TLS off on real hosts is meant (the login and every write cross
            their network in plain text): without it, refused.
    """

    cluster_name: str = "edge-testbed"
    heap_mb: int = DEFAULT_HEAP_MB
    jvm_profile: JvmProfile = "fast"
    build: CassandraBuild = "quiet"
    housekeeping: Housekeeping = "standard"
    overrides: Mapping[str, Any] = field(default_factory=dict)
    node_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    tls: bool | None = None
    plain_text: bool = False

    def __post_init__(self) -> None:
        if self.tls is not None and not isinstance(self.tls, bool):
            raise ConfigError(f"tls must be true, false or unset, got {self.tls!r}")
        if (
            isinstance(self.heap_mb, bool)
            or not isinstance(self.heap_mb, int)
            or self.heap_mb < MIN_HEAP_MB
        ):
            raise ConfigError(f"heap_mb must be an integer >= {MIN_HEAP_MB}, got {self.heap_mb!r}")
        if self.jvm_profile not in JVM_PROFILES:
            raise ConfigError(
                f"unknown jvm_profile {self.jvm_profile!r} (choose from {', '.join(JVM_PROFILES)})"
            )
        if self.housekeeping not in HOUSEKEEPING:
            raise ConfigError(
                f"unknown housekeeping {self.housekeeping!r} "
                f"(choose from {', '.join(HOUSEKEEPING)})"
            )
        if self.build not in BUILDS:
            raise ConfigError(
                f"unknown Cassandra build {self.build!r} (choose from {', '.join(BUILDS)})"
            )
        if (
            not isinstance(self.cluster_name, str)
            or not self.cluster_name
            or not self.cluster_name.replace("-", "").replace("_", "").isalnum()
        ):
            raise ConfigError(
                f"invalid cluster_name {self.cluster_name!r} (letters, digits, '-' and '_')"
            )
        if not isinstance(self.overrides, Mapping) or not isinstance(self.node_overrides, Mapping):
            raise ConfigError("overrides and node_overrides must be mappings of settings")
        for key in self.overrides:
            check_override(key)
        for host, layer in self.node_overrides.items():
            if not isinstance(layer, Mapping):
                raise ConfigError(f"node_overrides for {host!r} must be a mapping of settings")
            for key in layer:
                check_override(key)

    def check_hosts(self, topology: Topology) -> None:
        """Raise ConfigError if node_overrides names a host that is not an edge node, or
        an override sets the snitch of a topology of sites (its sites are its
        datacenters)."""
        if topology.sites is not None:
            layers = [self.overrides, *self.node_overrides.values()]
            if any("endpoint_snitch" in layer for layer in layers):
                raise ConfigError(
                    "cassandra.yaml setting endpoint_snitch is the testbed's own on a "
                    "testbed of sites (its sites are the datacenters)"
                )
        edge_names = {h.name for h in topology.edges}
        unknown = sorted(set(self.node_overrides) - edge_names)
        if unknown:
            raise ConfigError(
                f"node_overrides for unknown edge nodes: {', '.join(unknown)} "
                f"(edge nodes: {', '.join(sorted(edge_names))})"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster_name": self.cluster_name,
            "heap_mb": self.heap_mb,
            "jvm_profile": self.jvm_profile,
            "build": self.build,
            "housekeeping": self.housekeeping,
            "overrides": dict(self.overrides),
            "node_overrides": {k: dict(v) for k, v in self.node_overrides.items()},
            "tls": self.tls,
            "plain_text": self.plain_text,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CassandraSettings:
        # a state or manifest written before builds existed, or while stock was the
        # default, has no build: its nodes are stock; one written before housekeeping
        # could be chosen has none: its nodes ran the standard one
        return cls(**{"build": "stock", "housekeeping": "standard", **data})


def describe_housekeeping(settings: CassandraSettings | None) -> dict[str, Any] | None:
    """What a run's manifest records of its nodes' housekeeping (None: no Cassandra)."""
    if settings is None:
        return None
    clock_ms, snitch = HOUSEKEEPING[settings.housekeeping]
    return {
        "name": settings.housekeeping,
        "approximate_time_precision_ms": clock_ms,
        "dynamic_snitch_update_interval": snitch or "100ms",  # Cassandra's default
    }


def node_settings(
    settings: CassandraSettings,
    topology: Topology,
    host: Host,
    node_dir: Path,
    *,
    auth: bool = False,
) -> dict[str, Any]:
    """The complete cassandra.yaml settings of ``host``: base -> cluster -> node layers,
    then, with ``auth``, the authentication layer and, with ``settings.tls``, the TLS
    layer (they win over every override)."""
    snitch_ms = HOUSEKEEPING[settings.housekeeping][1]
    return merge(
        BASE_SETTINGS,
        cluster_layer(topology, settings.cluster_name),
        {"dynamic_snitch_update_interval": snitch_ms} if snitch_ms else {},
        settings.overrides,
        node_layer(topology, host, node_dir),
        settings.node_overrides.get(host.name, {}),
        AUTH_SETTINGS if auth else {},
        tls.settings(node_dir / "conf") if settings.tls else {},
    )


def render_yaml(values: Mapping[str, Any]) -> str:
    """cassandra.yaml text for ``values`` (keys sorted, block style)."""
    header = "# Generated by edge-testbed; edit the settings layers, not this file.\n"
    return header + yaml.safe_dump(dict(values), default_flow_style=False, sort_keys=True)


LOGBACK_XML = """<configuration scan="false">
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>${cassandra.logdir}/system.log</file>
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <filter class="ch.qos.logback.classic.filter.ThresholdFilter"><level>WARN</level></filter>
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO">
    <appender-ref ref="FILE" />
    <appender-ref ref="STDOUT" />
  </root>
  <logger name="org.apache.cassandra" level="INFO" />
</configuration>
"""


# A node's directories under its node dir (the netns backend makes them; the playbook
# makes the same list on VMs and inventory hosts).
NODE_DIRS = ("conf", "logs", "data", "commitlog", "hints", "saved_caches", "cdc_raw", "tmp")
