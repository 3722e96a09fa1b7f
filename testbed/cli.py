"""Command line: python -m testbed {up,status,exec,down,clean,dist}."""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from collections.abc import Sequence

from common.command import command
from common.errors import CommandError, ConfigError, TestbedError

from . import argtypes, ownership
from . import state as st
from .backends.libvirt import LibvirtRecord
from .cassandra import dist as dist_mod
from .cassandra import quiet
from .cassandra.config import (
    CassandraSettings,
)
from .cassandra.quiet import CassandraBuild
from .cassandra.readiness import Deadlines
from .parser import build_parser
from .setup_check import run_checks
from .testbed import Testbed
from .topology import Topology


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
            housekeeping=args.housekeeping,
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
                f"heap {settings['heap_mb']} MB, "
                f"{settings.get('housekeeping', 'standard')} housekeeping"
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
        holder = ownership.RunLock(s.run_dir).holder()
        owner = (
            f"pid {holder.get('pid')}"
            if holder
            else ("detached" if s.detached else "none (`edgetb clean`)")
        )
        row = f"{s.run_id:<7} {s.name or '-':<14} {s.status:<16} {owner:<26} {s.backend:<8}"
        print(f"{row} {s.topology.get('edge_nodes', '?')}")
    return 0


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
    from . import image_build, images

    if args.image_command == "path":
        print(images.load().root)
        return 0
    image_build.build(force=args.force, progress=print)
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
