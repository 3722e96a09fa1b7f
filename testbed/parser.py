"""The command line's flags: ``python -m testbed``'s parser (``testbed.cli`` runs it)."""

from __future__ import annotations

import argparse
from typing import Any

from common.command import Parser, prog
from common.errors import ConfigError

from . import argtypes
from .backends.libvirt_xml import MAX_MEMORY_MB, MAX_VCPUS, MIN_MEMORY_MB
from .cassandra.config import (
    DEFAULT_HEAP_MB,
    HOUSEKEEPING,
    JVM_PROFILES,
    MIN_HEAP_MB,
    check_override,
)
from .cassandra.quiet import BUILDS
from .cassandra.readiness import Deadlines
from .setup_check import CHECKS, component
from .subnets import DEFAULT_POOL
from .topology import MAX_EDGE_NODES

NODE_VERBS = ("stop", "start", "logs", "nodetool")


def _yaml_override(text: str) -> tuple[str, object]:
    """KEY=VALUE: a cassandra.yaml key a user may set and a YAML value."""
    import yaml

    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        check_override(key)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    try:
        return key, yaml.safe_load(value)
    except yaml.YAMLError as exc:
        problem = str(getattr(exc, "problem", None) or "invalid YAML")
        raise argparse.ArgumentTypeError(
            f"{text!r}: the value is not valid YAML ({problem})"
        ) from None


RUN_HELP = "run id or testbed name (default: the one detached testbed that is up)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=prog("python -m testbed"),
        description="Edge testbed: Cassandra edge nodes + an endpoint on one machine.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="bring a testbed up and leave it running")
    for flags in (_shape_flags, _where_flags, _cassandra_flags, _run_flags):
        flags(up)

    _run_commands(sub)
    _setup_commands(sub)
    return parser


def _shape_flags(up: argparse.ArgumentParser) -> None:
    """How many nodes, in which sites."""
    up.add_argument(
        "--nodes",
        type=argtypes.integer(1, MAX_EDGE_NODES),
        default=None,
        help=f"edge nodes running Cassandra, 1..{MAX_EDGE_NODES} (default 3, or the sites' sum)",
    )
    up.add_argument(
        "--sites",
        type=argtypes.sites,
        default=None,
        help="edge sites, each a Cassandra datacenter: SITESxNODES (3x3) or nodes per site "
        "(2,3); nodes are numbered site by site (default: one site)",
    )
    up.add_argument(
        "--endpoint-site",
        default=None,
        help="the site whose LAN the endpoint is on (default the first: dc1)",
    )


def _where_flags(up: argparse.ArgumentParser) -> None:
    """Where the hosts are: the backend and its machines, the run's subnet."""
    up.add_argument(
        "--backend",
        default="netns",
        help="netns (default): namespaces on this machine; libvirt: one QEMU VM "
        "per host (`image build` first); hosts: the machines of --inventory",
    )
    up.add_argument(
        "--inventory", metavar="FILE", help="Ansible inventory of the hosts (--backend hosts)"
    )
    up.add_argument(
        "--vm-vcpus",
        type=argtypes.integer(1, MAX_VCPUS),
        help="vCPUs per edge VM (libvirt; default 2)",
    )
    up.add_argument(
        "--vm-memory",
        type=argtypes.integer(MIN_MEMORY_MB, MAX_MEMORY_MB, "MB"),
        metavar="MB",
        help="memory per edge VM in MB (libvirt; default 2048)",
    )
    up.add_argument(
        "--subnet",
        help="the run's private subnet (default: a free /24 of the pool; not for --backend hosts)",
    )
    up.add_argument(
        "--subnet-pool",
        metavar="CIDR",
        help=f"where runs get their subnets (default $EDGETB_SUBNET_POOL, else {DEFAULT_POOL})",
    )


def _cassandra_flags(up: argparse.ArgumentParser) -> None:
    """Each node's Cassandra: heap, TLS, JVM profile, build."""
    up.add_argument(
        "--heap-mb",
        type=argtypes.integer(MIN_HEAP_MB, unit="MB"),
        default=DEFAULT_HEAP_MB,
        help=f"JVM heap per node in MB (default {DEFAULT_HEAP_MB})",
    )
    up.add_argument(
        "--tls",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="client-to-node and internode TLS with the run's own certificates (default: on "
        "for hosts, off for netns and libvirt, where nothing leaves this machine)",
    )
    up.add_argument(
        "--plain-text",
        action="store_true",
        help="with --no-tls on --backend hosts: the login and every write cross the hosts' "
        "network in plain text, and that is meant (refused without)",
    )
    up.add_argument(
        "--jvm-profile",
        choices=JVM_PROFILES,
        default="fast",
        help="fast: quick start, least CPU per write (default); standard: stock JIT and G1 GC",
    )
    up.add_argument(
        "--cassandra-build",
        choices=BUILDS,
        default="quiet",
        help="quiet (default): one class rebuilt so that idle executor threads stop "
        "spinning after 0.1 ms instead of 10 ms (less CPU per write, the same RTTs; "
        "docs/backends.md); stock: Apache's jars, unmodified",
    )
    up.add_argument(
        "--housekeeping",
        choices=HOUSEKEEPING,
        default="standard",
        help="standard (default); writes: for a testbed that takes only writes, the "
        "approximate clock every 100 ms and the dynamic snitch every 10 s (less idle CPU; "
        "reads at ONE then follow the ring's order; docs/backends.md)",
    )


def _run_flags(up: argparse.ArgumentParser) -> None:
    """The run's name, cassandra.yaml settings, resources, Java, deadlines."""
    up.add_argument(
        "--name",
        type=argtypes.testbed_name,
        help="a name for the testbed, usable wherever --run takes a run id (e.g. lab1)",
    )
    up.add_argument("--cluster-name", default="edge-testbed")
    up.add_argument(
        "--yaml",
        metavar="KEY=VALUE",
        type=_yaml_override,
        action="append",
        default=[],
        help="extra cassandra.yaml setting for every node (repeatable)",
    )
    argtypes.add_node_resource_flags(up)
    up.add_argument("--no-cassandra", action="store_true", help="build the network only")
    up.add_argument("--java", help="java binary (default: $JAVA_HOME/bin/java, then PATH)")
    up.add_argument(
        "--cql-timeout",
        type=argtypes.number(1, 86400, "s"),
        default=Deadlines.cql_s,
        help="seconds allowed for nodes to start listening for CQL (a longer time gives "
        "every other stage of the start as many times its default)",
    )


def _run_commands(sub: Any) -> None:
    """status, list, node, exec, down, clean, inventory: a run once it is up."""
    st_ = sub.add_parser("status", help="hosts, addresses, Cassandra state per node")
    st_.add_argument("--run", type=argtypes.run_id, help=RUN_HELP)
    st_.add_argument("--json", action="store_true", help="print JSON for scripts")

    sub.add_parser("list", help="every testbed run: id, name, status, owner, backend, nodes")
    nd = sub.add_parser(
        "node", help="one edge node: node [--run RUN] NAME stop|start|logs|nodetool ARGS"
    )
    nd.add_argument("--run", type=argtypes.run_id, help=RUN_HELP)
    nd.add_argument("node", help="edge node (e0, e1, ...)")
    nd.add_argument(
        "verb",
        choices=NODE_VERBS,
        help="stop: end its Cassandra (SIGTERM, then SIGKILL); start: start it again and "
        "wait for CQL (netns); logs: the tail of its system.log; nodetool ARGS: nodetool "
        "against it",
    )
    nd.add_argument(
        "args",
        nargs=argparse.REMAINDER,
        help="nodetool's arguments (this command's flags go before NODE)",
    )
    nd.add_argument("--lines", type=argtypes.integer(1, 100000), default=40, help="for logs")

    ex = sub.add_parser("exec", help="run a command on a host: exec HOST -- CMD...")
    ex.add_argument("--run", type=argtypes.run_id, help=RUN_HELP)
    ex.add_argument("host")
    ex.add_argument("argv", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")

    dn = sub.add_parser("down", help="stop Cassandra and remove the testbed")
    dn.add_argument("--run", type=argtypes.run_id, help=RUN_HELP)

    cl = sub.add_parser(
        "clean",
        help="remove what crashed runs left (never a run in use, nor a healthy detached "
        "testbed unless named)",
    )
    cl.add_argument(
        "--run", type=argtypes.run_id, help="only this run (also a healthy detached testbed)"
    )
    cl.add_argument(
        "--all", action="store_true", help="also every detached testbed (not runs in use)"
    )

    iv = sub.add_parser(
        "inventory",
        help="a run's hosts as an Ansible inventory (JSON; for ansible, or for --backend hosts)",
    )
    iv.add_argument("--run", type=argtypes.run_id, help=RUN_HELP)


def _setup_commands(sub: Any) -> None:
    """dist, check, image: what the set-up installs."""
    ds = sub.add_parser("dist", help="the Cassandra distribution")
    ds_sub = ds.add_subparsers(dest="dist_command", required=True)
    inst = ds_sub.add_parser("install", help="assemble (once) and prepare the start-up archive")
    inst.add_argument("--tarball", help="use a local apache-cassandra-5.0.x-bin.tar.gz")
    inst.add_argument("--force", action="store_true", help="reinstall even if intact")
    inst.add_argument(
        "--no-cds",
        action="store_true",
        help="skip the class-data-sharing archive (slower bring-up)",
    )
    inst.add_argument("--java", help="java binary")
    ds_sub.add_parser("verify", help="check every jar's sha256 against the manifest")
    ds_sub.add_parser("path", help="print the installed distribution's directory")

    ck = sub.add_parser(
        "check", help="smoke-test what the set-up installed (libvirt, QEMU, Java, VM image)"
    )
    ck.add_argument(
        "components",
        nargs="*",
        type=component,
        metavar="COMPONENT",
        help=f"only these ({', '.join(CHECKS)}); default: all",
    )

    im = sub.add_parser("image", help="the VM base image (libvirt backend)")
    im_sub = im.add_subparsers(dest="image_command", required=True)
    ib = im_sub.add_parser("build", help="build it (cached: rebuilt only when an input changes)")
    ib.add_argument("--force", action="store_true", help="rebuild even if cached")
    im_sub.add_parser("path", help="print the current image's directory")
