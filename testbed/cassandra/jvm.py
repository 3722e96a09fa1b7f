"""The command lines of a Cassandra node's JVM and of nodetool (pure: settings in,
argument lists out; ``node.py`` runs them).
"""

from __future__ import annotations

from pathlib import Path

from .auth import system_auth_properties
from .config import HOUSEKEEPING, JMX_PORT, RACKDC_FILE, CassandraSettings
from .quiet import JAR, jvm_properties

# From Cassandra 5.0's conf/jvm17-server.options (JPMS section) and Netty options.
JPMS_OPTIONS: tuple[str, ...] = (
    "-Djdk.attach.allowAttachSelf=true",
    "--add-exports",
    "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports",
    "java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports",
    "java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports",
    "java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports",
    "java.sql/java.sql=ALL-UNNAMED",
    "--add-exports",
    "java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports",
    "jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports",
    "jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports",
    "jdk.attach/sun.tools.attach=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens",
    "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens",
    "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.io=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens",
    "jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.lang=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.util=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.allocator.useCacheForAllThreads=true",
    "-Dio.netty.allocator.maxOrder=11",
)

PROFILE_OPTIONS: dict[str, tuple[str, ...]] = {
    # Measured on 2 cores: C1-only JIT and serial GC cut each JVM's start from ~10 to ~6
    # CPU-seconds; a small, stable heap keeps 5 nodes + endpoint in budget. It is also the
    # cheapest for long sweeps (benchmarks/jvm_profiles.py): C1 then C2 with serial GC
    # cost 9.1 CPU-ms per write against 4.7 after 6500 writes (3 nodes, RF 3, 0 ms;
    # medians of 2), C2 still compiling, and 2.5 % of a core idle per JVM against 1.7 %.
    "fast": (
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-XX:CICompilerCount=1",
        "-XX:-UsePerfData",
    ),
    # Cassandra's stock G1 settings from jvm17-server.options, for long measurement runs.
    "standard": (
        "-XX:+UseG1GC",
        "-XX:+ParallelRefProcEnabled",
        "-XX:MaxTenuringThreshold=1",
        "-XX:G1RSetUpdatingPauseTimePercent=5",
        "-XX:MaxGCPauseMillis=300",
        "-XX:InitiatingHeapOccupancyPercent=70",
    ),
}

# System properties that make a throw-away test cluster start and stop quickly: no wait for
# gossip to settle, short ring delay, unsynced system tables, no graceful drain on SIGTERM.
FAST_LIFECYCLE_PROPERTIES: tuple[str, ...] = (
    "-Dcassandra.skip_wait_for_gossip_to_settle=0",
    "-Dcassandra.ring_delay_ms=2000",
    "-Dcassandra.unsafesystem=true",
    "-Dcassandra.test.messagingService.nonGracefulShutdown=true",
    "-Dcassandra.shutdown_announce_in_ms=0",
)
# Reads at NODE_LOCAL answer from the node's own data only: the sweep's read-back of
# acknowledged writes asks each replica alone (workloads.readback). Cassandra serves them
# only where this property is set.
READBACK_PROPERTIES: tuple[str, ...] = ("-Dcassandra.enable_nodelocal_queries=true",)
# Cassandra refreshes its approximate clock every 2 ms (500 wake-ups a second, the largest
# part of an idle node's CPU); at 20 ms an idle JVM takes 1.58 % of a core instead of
# 2.67 % (medians of 2, benchmarks/jvm_profiles.py's idle measure). The clock times out and
# expires messages (seconds), and it times the replies the dynamic snitch ranks replicas
# by: at 20 ms a round trip under ~20 ms (links under ~10 ms) can read as 0 for every
# replica, and reads at ONE then follow the ring's order, not the snitch's (docs/ycsb.md).
# No write latency depends on it: a write goes to every replica. The precision is
# config.HOUSEKEEPING's: 20 ms ("standard"), less often on testbeds that take only writes.

MAIN_CLASS = "org.apache.cassandra.service.CassandraDaemon"
NODETOOL_CLASS = "org.apache.cassandra.tools.NodeTool"


def marker_property(run_id: str, host: str) -> str:
    """The -D property that tags a JVM as this testbed's (checked before any signal)."""
    return f"-Dedgetb.run={run_id}:{host}"


def jvm_args(
    *,
    settings: CassandraSettings,
    classpath: str,
    node_dir: Path,
    run_id: str,
    host: str,
    cds_archive: Path | None = None,
    cds_dump_to: Path | None = None,
    system_auth_rf: int | None = None,
) -> list[str]:
    """JVM arguments (after the java binary) that start one Cassandra node.

    JMX listens on the node's loopback only (``cassandra.jmx.local.port``: Cassandra's
    LOCAL_JMX=yes, no JMX authentication needed because nothing off the host reaches
    it); nodetool runs on the node itself. ``system_auth_rf`` (authenticated clusters)
    creates ``system_auth`` with that many replicas.
    """
    if (settings.build == "quiet") != classpath.split(":", 1)[0].endswith(f"/{JAR}"):
        raise ValueError(f"classpath does not match the {settings.build} build")
    heap = f"{settings.heap_mb}m"
    args = [
        f"-Xms{heap}",
        f"-Xmx{heap}",
        "-Xss256k",
        "-XX:+ExitOnOutOfMemoryError",
        *PROFILE_OPTIONS[settings.jvm_profile],
    ]
    if cds_dump_to is not None:
        args.append(f"-XX:ArchiveClassesAtExit={cds_dump_to}")
    elif cds_archive is not None:
        args += [f"-XX:SharedArchiveFile={cds_archive}", "-Xshare:auto", "-Xlog:cds=off"]
    args += [
        *JPMS_OPTIONS,
        "-Djava.net.preferIPv4Stack=true",
        *FAST_LIFECYCLE_PROPERTIES,
        *READBACK_PROPERTIES,
        f"-Dcassandra.approximate_time_precision_ms={HOUSEKEEPING[settings.housekeeping][0]}",
        *jvm_properties(settings.build),
        f"-Dcassandra.config=file://{node_dir / 'conf' / 'cassandra.yaml'}",
        f"-Dcassandra.storagedir={node_dir}",
        f"-Dcassandra.logdir={node_dir / 'logs'}",
        # the JVM's temporary files (lz4-java unpacks its native library there on every
        # start and deletes it only on a clean exit) go with the node, not to /tmp
        f"-Djava.io.tmpdir={node_dir / 'tmp'}",
        f"-Dlogback.configurationFile=file://{node_dir / 'conf' / 'logback.xml'}",
        f"-Dcassandra-rackdc.properties=file://{node_dir / 'conf' / RACKDC_FILE}",
        f"-Dcassandra.jmx.local.port={JMX_PORT}",
        *(system_auth_properties(system_auth_rf) if system_auth_rf is not None else []),
        "-Dcassandra-foreground=yes",
        marker_property(run_id, host),
        "-cp",
        classpath,
        MAIN_CLASS,
    ]
    return args


def nodetool_args(classpath: str, logback: Path, *command: str) -> list[str]:
    """JVM arguments (after the java binary) for nodetool against the local JMX port."""
    return [
        "-Xmx128m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-XX:-UsePerfData",
        "-Xshare:auto",
        *JPMS_OPTIONS,
        "-Dcassandra.storagedir=/tmp",
        f"-Dlogback.configurationFile=file://{logback}",
        "-cp",
        classpath,
        NODETOOL_CLASS,
        "-h",
        "127.0.0.1",
        "-p",
        str(JMX_PORT),
        *command,
    ]
