"""Command line: python -m testbed {up,status,exec,down,clean,dist}."""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from collections.abc import Sequence

from common.command import Parser, command, prog
from common.errors import CommandError, ConfigError, TestbedError

from . import argtypes
from . import state as st
from .backends.libvirt import MAX_MEMORY_MB, MAX_VCPUS, MIN_MEMORY_MB, LibvirtRecord
from .cassandra import dist as dist_mod
from .cassandra import quiet
from .cassandra.config import (
    DEFAULT_HEAP_MB,
    JVM_PROFILES,
    MIN_HEAP_MB,
    CassandraSettings,
    check_override,
)
from .cassandra.quiet import BUILDS, CassandraBuild
from .cassandra.readiness import Deadlines
from .setup_check import CHECKS, component, run_checks
from .subnets import DEFAULT_POOL
from .testbed import Testbed
from .topology import MAX_EDGE_NODES, Topology


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
        default="stock",
        help="stock: Apache's jars, unmodified (default); quiet: one class rebuilt so that "
        "idle executor threads stop spinning after 0.1 ms instead of 10 ms (less CPU per "
        "write; docs/backends.md)",
    )
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
    return parser


def cmd_up(args: argparse.Namespace) -> int:
    nodes = args.nodes if args.nodes is not None else sum(args.sites or (3,))
    topology = Topology(
        edge_nodes=nodes, subnet=args.subnet, sites=args.sites, endpoint_site=args.endpoint_site
    )
    options = backend_options(args)
    settings = None
    if args.no_cassandra and args.yaml:
        raise ConfigError(
            f"--yaml {'='.join(map(str, args.yaml[0]))} sets cassandra.yaml, but "
            f"--no-cassandra starts no Cassandra"
        )
    if args.no_cassandra and args.tls:
        raise ConfigError("--tls secures Cassandra, but --no-cassandra starts no Cassandra")
    if not args.no_cassandra:
        settings = CassandraSettings(
            cluster_name=args.cluster_name,
            heap_mb=args.heap_mb,
            jvm_profile=args.jvm_profile,
            build=args.cassandra_build,
            overrides=dict(args.yaml),
            tls=args.tls,
            plain_text=args.plain_text,
        )
    tb = Testbed(
        topology,
        args.backend,
        cassandra=settings,
        java=args.java,
        deadlines=Deadlines.for_cql(args.cql_timeout),
        progress=print,
        backend_options=options,
        subnet_pool=args.subnet_pool,
        name=args.name,
    )
    tb.up()
    tb.detach()  # this process ends; the testbed stays up, owned by nobody
    vms = tb.state.get(LibvirtRecord) if tb.state else None
    if vms and vms.provision_s is not None:
        boots = ", ".join(f"{h} {s:.1f} s" for h, s in vms.boot_to_ssh_s.items())
        print(
            f"VMs: {vms.accel.upper()} (libvirt domain type {vms.domain_type}); "
            f"boot to SSH: {boots}; provisioned in {vms.provision_s:.1f} s"
        )
    _print_hosts(tb.status())  # measured (nodetool), not assumed from readiness
    print(f"run {tb.run_id} is up; `edgetb status`, `edgetb down`")
    return 0


def backend_options(args: argparse.Namespace) -> dict:
    """--inventory / --vm-* / --node-* as the backend's options; ConfigError where they do
    not apply."""
    from .backends import backend_options as options

    return options(
        args.backend,
        inventory=args.inventory,
        vm_vcpus=args.vm_vcpus,
        vm_memory_mb=args.vm_memory,
        node_resources=argtypes.node_resources(args),
    )


def _print_hosts(hosts: list[dict]) -> None:
    sites = any("site" in h for h in hosts)
    site = f"{'site':<12} " if sites else ""
    print(f"{'host':<6} {'role':<9} {'address':<15} {site}cassandra")
    for h in hosts:
        site = f"{h.get('site', '-'):<12} " if sites else ""
        print(f"{h['name']:<6} {h['role']:<9} {h['address']:<15} {site}{h.get('cassandra') or '-'}")


def cmd_status(args: argparse.Namespace) -> int:
    tb = Testbed.attach(args.run)
    hosts = tb.status()
    settings = tb.settings.to_dict() if tb.settings else None
    if args.json:
        print(
            json.dumps(
                {
                    "run": tb.run_id,
                    "backend": tb.backend_name,
                    "cassandra": settings,
                    "hosts": hosts,
                }
            )
        )
    else:
        named = f" {tb.name!r}" if tb.name else ""
        print(f"run {tb.run_id}{named} ({tb.backend_name})")
        if settings:
            print(
                f"Cassandra: {settings['build']} build, jvm profile {settings['jvm_profile']}, "
                f"heap {settings['heap_mb']} MB"
            )
        _print_hosts(hosts)
    return 0


def cmd_list(_args: argparse.Namespace) -> int:
    states = sorted(st.iter_states(), key=lambda s: s.created)
    if not states:
        print("no testbed runs (start one with `edgetb up`)")
        return 0
    print(f"{'run':<7} {'name':<14} {'status':<16} {'owner':<26} {'backend':<8} nodes")
    for s in states:
        holder = st.RunLock(s.run_dir).holder()
        owner = (
            f"pid {holder.get('pid')}"
            if holder
            else ("detached" if s.detached else "none (`edgetb clean`)")
        )
        row = f"{s.run_id:<7} {s.name or '-':<14} {s.status:<16} {owner:<26} {s.backend:<8}"
        print(f"{row} {s.topology.get('edge_nodes', '?')}")
    return 0


NODE_VERBS = ("stop", "start", "logs", "nodetool")


def cmd_node(args: argparse.Namespace) -> int:
    if args.verb != "nodetool" and args.args:
        raise ConfigError(f"node {args.verb} takes no arguments (given: {' '.join(args.args)})")
    tb = Testbed.attach(args.run, claim=args.verb in ("stop", "start"))
    if args.node not in tb.nodes:
        edges = ", ".join(tb.nodes) or "none: it runs no Cassandra"
        raise ConfigError(f"no edge node {args.node!r} in run {tb.run_id} (edge nodes: {edges})")
    node = tb.nodes[args.node]
    if args.verb == "stop":
        assert tb.backend is not None and tb.state is not None
        tb.state.faulted = True  # what its peers log of it is expected (logscan)
        tb.state.save()
        tb.backend.stop_cassandra([node])
        print(f"{node.name}: Cassandra stopped (`edgetb node {node.name} start` starts it)")
    elif args.verb == "start":
        secs = tb.restart_node(node.name)
        print(f"{node.name}: Cassandra serves CQL again ({secs:.1f} s)")
    elif args.verb == "logs":
        log = tb.exec(node.name, ["tail", "-n", str(args.lines), str(node.system_log)], check=False)
        print(log.stdout, end="")
        if log.returncode != 0:
            said = " ".join(log.stderr.split())[-300:]
            raise TestbedError(f"{node.name}: no log at {node.system_log}: {said}")
    else:
        try:
            print(tb.nodetool(node.name, *args.args), end="")
        except CommandError as exc:  # its own message, not the JVM's whole command line
            said = " ".join((exc.stderr or exc.stdout or "").split())[-500:]
            raise TestbedError(f"{node.name}: nodetool {' '.join(args.args)}: {said}") from None
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise ConfigError("nothing to run: edgetb exec HOST -- CMD [ARGS...]")
    tb = Testbed.attach(args.run)
    tb.topology.host(args.host)
    # Inherit the terminal: the command's output and exit code are the user's.
    return subprocess.call(tb.exec_argv(args.host, argv))


def cmd_down(args: argparse.Namespace) -> int:
    tb = Testbed.attach(args.run, claim=True)
    run_id = tb.run_id
    tb.down()
    print(f"run {run_id} is down")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    from .clean import clean

    clean(run_id=st.run_id_of(args.run) if args.run else None, all_detached=args.all)
    return 0


def cmd_dist(args: argparse.Namespace) -> int:
    if args.dist_command == "path":
        print(dist_mod.load().root)
        return 0
    if args.dist_command == "verify":
        dist = dist_mod.load()
        dist.verify(full=True)
        print(f"Cassandra {dist.version}: {len(dist.jars)} jars match their sha256")
        return 0
    from .cassandra.java import find_java, find_javac

    java = None if args.no_cds else find_java(args.java)  # before anything is installed
    find_javac("quiet Cassandra nodes")
    dist = dist_mod.install(tarball=args.tarball, force=args.force)
    quiet.install(dist, force=args.force)
    if java is None:
        return 0
    builds: tuple[CassandraBuild, ...] = ("stock", "quiet")
    for build in builds:  # each build's classpath has its own archive
        archive = dist.cds_archive(java.version, build)
        if archive.is_file() and not args.force:
            print(f"class-data-sharing archive present: {archive}")
            continue
        print(f"recording the class-data-sharing archive of {build} nodes (one 1-node start)")
        settings = CassandraSettings(build=build)
        one = Topology(edge_nodes=1)
        with Testbed(one, cassandra=settings, cds_training=True, java=args.java, progress=print):
            pass
        if not archive.is_file():
            raise TestbedError(f"the JVM did not write {archive}")
        print(f"class-data-sharing archive: {archive} ({archive.stat().st_size >> 20} MB)")
    return 0


def cmd_image(args: argparse.Namespace) -> int:
    from . import images

    if args.image_command == "path":
        print(images.load().root)
        return 0
    images.build(force=args.force, progress=print)
    return 0


def cmd_inventory(args: argparse.Namespace) -> int:
    tb = Testbed.attach(args.run)
    inventory = getattr(tb.backend, "inventory", None)
    if inventory is None:
        raise ConfigError(f"run {tb.run_id} ({tb.backend_name}) has no SSH hosts")
    print(json.dumps(inventory(), indent=1))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    print("set-up check:")
    run_checks(args.components)
    return 0


COMMANDS = {
    "check": cmd_check,
    "inventory": cmd_inventory,
    "image": cmd_image,
    "up": cmd_up,
    "status": cmd_status,
    "exec": cmd_exec,
    "list": cmd_list,
    "node": cmd_node,
    "down": cmd_down,
    "clean": cmd_clean,
    "dist": cmd_dist,
}


@command("python -m testbed")
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return COMMANDS[args.command](args)
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    except KeyboardInterrupt:
        print("interrupted; everything this command created was removed", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
