"""The Testbed: a Topology built by a backend, with Cassandra running on its edge nodes.

    with Testbed(Topology(edge_nodes=3)) as tb:
        tb.exec("ep", ["ping", "-c1", tb.address("e0")])

Teardown is guaranteed on the way out of ``with`` and after any failure inside ``up``.
A stateless process can reattach with ``Testbed.attach()`` (the CLI does).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from common.errors import (
    CommandError,
    ConfigError,
    NodeError,
    RunInUseError,
    StateError,
    StateFileError,
    TeardownError,
    TestbedError,
)
from common.runner import run

from . import ownership, resources, subnets
from . import state as st
from .backends import Backend, backend_class, capabilities, make_backend
from .cassandra import auth as auth_mod
from .cassandra import dist as dist_mod
from .cassandra import logscan, quiet
from .cassandra import tls as tls_mod
from .cassandra.config import CassandraSettings, nodetool_args
from .cassandra.java import Java, find_java
from .cassandra.launch import CassandraLaunch
from .cassandra.node import CassandraNode
from .cassandra.readiness import Deadlines
from .client import LOCAL_DC_ENV
from .topology import Topology

TEARDOWN_FAILED = st.TEARDOWN_FAILED

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


def _quiet(_msg: str) -> None:
    pass


class Testbed:
    """k Cassandra edge nodes plus an endpoint, built by a backend ("netns" by default).

    Args:
        topology: what to build.
        backend: registry name of the backend.
        cassandra: Cassandra settings, or None to build the network only.
        java: path of the java binary (default: $JAVA_HOME, then PATH).
        deadlines: readiness deadlines per stage.
        cds_training: record a class-data-sharing archive from this run (used by `dist install`).
        progress: called with one line per step (default: silent).
        backend_options: backend settings, e.g. {"inventory": FILE} for ``hosts``,
            {"edge_size": {"vcpus": 2, "memory_mb": 2048}} for ``libvirt``.
        subnet_pool: where a topology without a subnet gets one (default
            ``$EDGETB_SUBNET_POOL``, else 10.77.0.0/16; see ``testbed.subnets``).
        on_registered: called with the run id by ``create_hosts`` once the run is
            registered and before any of its objects exists (a sweep records the testbed
            there, so that the next run removes it if this process is killed while
            building it); a failure there undoes the run.

    Raises ConfigError before anything is created when the input is invalid.
    """

    __test__ = False  # not a pytest test class, despite the name
    # Class defaults as well as __init__'s: ``attach`` makes a Testbed without __init__.
    # Nodes taken down on purpose (a sweep's faults): peers' logs then hold what they
    # saw of it. The problem lines of the nodes' logs, read at teardown.
    faulted: bool = False
    log_findings: Sequence[logscan.Finding] = ()

    def __init__(
        self,
        topology: Topology,
        backend: str = "netns",
        *,
        cassandra: CassandraSettings | None = CassandraSettings(),
        java: str | None = None,
        deadlines: Deadlines = Deadlines(),
        cds_training: bool = False,
        progress: Progress | None = None,
        base: Path | None = None,
        backend_options: dict[str, Any] | None = None,
        subnet_pool: str | None = None,
        on_registered: Callable[[str], None] | None = None,
        name: str | None = None,
    ):
        self.topology = topology
        self.name = name
        self.backend_name = backend
        self.settings = cassandra
        self.deadlines = deadlines
        self.cds_training = cds_training
        self.progress = progress or _quiet
        self.base = base
        self.state: st.RunState | None = None
        self.backend: Backend | None = None
        self.nodes: dict[str, CassandraNode] = {}
        self.timings: dict[str, float] = {}
        self.backend_options = dict(backend_options or {})
        self.subnet_pool = subnet_pool
        self.on_registered = on_registered
        self.faulted = False
        self.log_findings = ()
        self._owner: ownership.RunLock | None = None
        # Validate everything before anything on the system changes: first the input alone
        # (so bad input is named even without root), then what needs the machine.
        cls = backend_class(backend)
        if name is not None:
            self._check_name_free(st.check_name(name))
        if subnet_pool is not None or topology.subnet is None:
            subnets.pool_from(subnet_pool)  # a bad pool is named before anything starts
        check_options = getattr(cls, "check_options", None)
        if check_options is not None:
            check_options(topology, self.backend_options)
        self.java: Java | None = None
        self.dist: dist_mod.CassandraDist | None = None
        if cassandra is not None:
            cassandra.check_hosts(topology)
            spec = self.backend_options.get("resources")
            if spec:  # each node's JVM (heap and the rest) under its memory limit
                for host, res in resources.resolve_spec(spec, topology).items():
                    if topology.host(host).is_edge:
                        res.check_heap(cassandra.heap_mb, host)
            if cassandra.tls is None:  # the backend's default: on where hosts are real
                cassandra = replace(cassandra, tls=bool(getattr(cls, "cassandra_tls", False)))
                self.settings = cassandra
            if not cassandra.tls and getattr(cls, "cassandra_tls", False):
                if not cassandra.plain_text:
                    raise ConfigError(
                        "TLS off on real hosts: the run's login and every write would cross "
                        "their network in plain text; add --plain-text (a sweep: --tls "
                        "plain-text) if that is meant"
                    )
                self.progress(
                    "warning: TLS is off on real hosts (--plain-text): the run's login and "
                    "every write cross their network in plain text"
                )
            node_keys = {k: v for o in cassandra.node_overrides.values() for k, v in o.items()}
            if self.auth:
                auth_mod.check_overrides({**cassandra.overrides, **node_keys}, backend)
            if cassandra.tls:
                tls_mod.check_overrides({**cassandra.overrides, **node_keys})
            self.java = find_java(java)  # only runs `java -version`
        if os.geteuid() != 0:
            raise ConfigError(
                f"the {backend} backend needs root (namespaces, libvirt, SSH keys of the run)"
            )
        validate = getattr(cls, "validate", None)
        if validate is not None:
            validate(topology, self.backend_options)
        check_runs_dir = getattr(cls, "check_runs_dir", None)
        if check_runs_dir is not None:  # the run's files (SSH sockets), after the input's errors
            check_runs_dir(st.runs_dir(self.base))
        if cassandra is not None:
            self.dist = dist_mod.install(progress=self.progress)
            if cassandra.build == "quiet":
                quiet.install(self.dist, progress=self.progress)

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> Testbed:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> Testbed:
        """Build the hosts, start Cassandra and wait until it is ready; undo all on failure."""
        t0 = time.monotonic()
        self.create_hosts()
        if self.settings is not None:
            self.start_cassandra()
        self.timings["total"] = time.monotonic() - t0
        self.progress(f"run {self.run_id}: ready in {self.timings['total']:.1f} s")
        return self

    def create_hosts(self) -> None:
        """Phase 1: the run directory and every host and link; undone on failure."""
        if self.state is not None:
            raise StateError(f"testbed run {self.state.run_id} is already up")
        t0 = time.monotonic()
        # The addresses are chosen and the run registered under one machine-wide lock:
        # two testbeds built at once never get the same subnet.
        with subnets.allocation():
            if self.name is not None:  # again under the lock: two `up --name` at once
                self._check_name_free(self.name)
            cls = backend_class(self.backend_name)
            self.topology = cls.place(self.topology, self.backend_options, self.subnet_pool)
            state = st.RunState(
                name=self.name,
                run_id=st.new_run_id(),
                backend=self.backend_name,
                topology=self.topology.to_dict(),
                cassandra=self.settings.to_dict() if self.settings else None,
                java=self.java.path if self.java else None,
                options=self.backend_options,
            )
            self._owner = st.create_run(state, self.base)  # held until down() or detach()
        self.state = state
        with self._undo_on_failure():
            if self.on_registered is not None:
                self.on_registered(state.run_id)
            self.backend = make_backend(self.backend_name, self.topology, state)
            self.progress(
                f"run {state.run_id}: building {len(self.topology.hosts)} hosts "
                f"({self.backend_name})"
            )
            self.backend.create()
            self.timings["network"] = time.monotonic() - t0
            # VMs measured slower than where the stages' deadlines were set (a boot
            # under TCG on a slower machine) get proportionally more time for each
            slowness = getattr(self.backend, "slowness", None)
            factor = slowness() if slowness is not None else 1.0
            if factor > 1.05:
                self.deadlines = self.deadlines.scaled(factor)
                self.progress(
                    f"the guests booted {factor:.1f}x slower than the reference: each "
                    f"Cassandra stage gets {factor:.1f}x its time (CQL "
                    f"{self.deadlines.cql_s:.0f} s)"
                )
            if self.settings is None:
                self._mark_up()

    def _check_name_free(self, name: str) -> None:
        taken = st.named(name, self.base)
        if taken is not None:
            raise ConfigError(
                f"a testbed named {name!r} exists (run {taken.run_id}, {taken.status}); "
                f"`edgetb down --run {name}` first, or choose another name"
            )

    def start_cassandra(self) -> None:
        """Phase 2: start Cassandra on every edge node and wait; everything undone on failure."""
        if self.state is None or self.settings is None:
            raise StateError("create_hosts() first, with Cassandra settings")
        with self._undo_on_failure():
            self._start_cassandra()
            if self.auth:
                self._setup_auth()
            self._driver_probe()
            self._mark_up()

    def _mark_up(self) -> None:
        assert self.state is not None
        self.state.status = "up"
        self.state.timings = self.timings
        self.state.save()

    @contextlib.contextmanager
    def _undo_on_failure(self):
        """On any failure (Ctrl-C included) tear the whole run down."""
        assert self.state is not None
        state = self.state
        try:
            yield
        except BaseException as exc:
            state.status = "failed"
            state.save()
            notes = []
            try:
                saved = self._teardown(keep_logs=True)
            except TestbedError as undo_exc:  # reported with the failure, not instead of it
                saved, notes = None, [f"undoing it failed too: {undo_exc}"]
            if saved:
                notes.append(f"node logs kept in {saved}")
            if notes and isinstance(exc, TestbedError):
                exc.args = (f"{exc.args[0] if exc.args else exc}\n({'; '.join(notes)})",)
            raise

    # -- ownership -------------------------------------------------------------------------

    def claim(self) -> None:
        """Become the owner of this (attached) testbed for as long as this object uses it.

        Raises RunInUseError naming the owner when another live process owns it.
        """
        assert self.state is not None
        if self._owner is not None and self._owner.held:
            return
        lock = ownership.RunLock(self.state.run_dir)
        if not lock.acquire(blocking=False, wait_s=2.0):
            holder = lock.holder() or {}
            raise RunInUseError(
                f"run {self.state.run_id} is in use by {ownership.describe_holder(holder)}; "
                f"stop that process (or wait for it) first"
            )
        self._owner = lock

    def detach(self) -> None:
        """Leave the testbed running, owned by nobody (what `python -m testbed up` does):
        later commands act on it without --run, and `clean` leaves it alone while healthy."""
        assert self.state is not None
        self.state.detached = True
        self.state.save()
        if self._owner is not None:
            self._owner.release()
            self._owner = None

    def problems(self) -> list[str]:
        """What is broken in a testbed that should be up: dead recorded processes, missing
        hosts (namespaces, VMs). Empty when it looks healthy."""
        assert self.state is not None
        return state_problems(self.state)

    def down(self) -> None:
        """Stop Cassandra, remove every host and link, delete the run directory."""
        if self.state is None:
            return
        self._teardown(keep_logs=False)

    def _teardown(self, *, keep_logs: bool) -> Path | None:
        assert self.state is not None
        state = self.state
        self.claim()
        saved = None
        retry = False
        try:
            backend = self.backend or make_backend(state.backend, self.topology, state)
            if self.nodes:
                # every node's log read before the JVMs are stopped (what a stop makes
                # its peers log is the teardown's, not the measurement's)
                faulted = self.faulted or state.faulted
                self.log_findings = self._scan_logs(backend, faulted)
                # a record, never a reason to keep a run (a full disk, a planted link)
                with contextlib.suppress(OSError, TestbedError):
                    logscan.journal(
                        self.base or st.home(), state.run_id, self.log_findings, faulted
                    )
                backend.stop_cassandra(list(self.nodes.values()))
                self._keep_cds_archive()
            try:
                backend.destroy()
            except TeardownError as exc:  # on machines that outlive the run: kept to retry
                retry = True
                state.status = TEARDOWN_FAILED
                state.save()
                raise TeardownError(
                    f"{exc}\nthe run's state is kept: `edgetb clean --run {state.run_id}` "
                    f"tries again"
                ) from None
            if keep_logs:
                saved = self._save_logs()
        finally:
            if not retry:
                ownership.unregister(state.run_id, state.run_dir)
                shutil.rmtree(state.run_dir, ignore_errors=True)
            if self._owner is not None:
                self._owner.release()
                self._owner = None
            self.state = None
            self.backend = None
            self.nodes = {}
        return saved

    def _scan_logs(self, backend: Backend, faulted: bool) -> list[logscan.Finding]:
        """Every node's log read (logscan): here, or on its host through the backend (a
        log that cannot be read there is none: the teardown goes on)."""
        logs = {n: node.system_log for n, node in self.nodes.items()}
        if capabilities(self.backend_name).namespaces:  # the logs are files here
            return logscan.scan(logs, faults=faulted)
        texts = {}
        for name, path in logs.items():
            with contextlib.suppress(TestbedError, OSError, ValueError, subprocess.SubprocessError):
                argv = backend.exec_argv(name, logscan.remote_tail_argv(path), limited=False)
                read = run(argv, check=False, timeout=120)
                texts[name] = read.stdout if read.returncode == 0 else ""
        self._remote_logs = texts  # what a failed start keeps (_save_logs): none is here
        return logscan.scan_texts(texts, faults=faulted)

    def _save_logs(self) -> Path | None:
        assert self.state is not None
        nodes_dir = self.state.run_dir / "nodes"
        if not nodes_dir.is_dir():
            return None
        target = (self.base or st.home()) / "logs" / self.state.run_id
        for node_dir in nodes_dir.iterdir():
            if (node_dir / "logs").is_dir():
                shutil.copytree(node_dir / "logs", target / node_dir.name, dirs_exist_ok=True)
        logscan.save_texts(getattr(self, "_remote_logs", {}), target)
        return target

    # -- Cassandra -------------------------------------------------------------------------

    def _start_cassandra(self) -> None:
        """The backend starts the JVMs its way (processes in namespaces, or units on its
        hosts through a playbook) and waits for the readiness stages."""
        assert self.state and self.backend and self.settings and self.dist
        build = self.settings.build
        archive = self.dist.cds_archive(self.java.version, build) if self.java else None
        use_archive = archive if archive and archive.is_file() and not self.cds_training else None
        dump = None
        if self.cds_training:
            dump = self._cds_tmp()
            dump.parent.mkdir(parents=True, exist_ok=True)
            dump.unlink(missing_ok=True)
        launch = CassandraLaunch(
            settings=self.settings,
            dist=self.dist,
            java=self.java,
            deadlines=self.deadlines,
            progress=self.progress,
            cds_archive=use_archive,
            cds_dump_to=dump,
            credentials=self.credentials_path if self.auth else None,
            **self._make_tls(),
        )
        t0 = time.monotonic()
        # filled as the nodes are made: a start that fails part-way stops those at teardown
        self.timings.update(self.backend.start_cassandra(launch, self.nodes))
        self.timings["cassandra"] = time.monotonic() - t0

    def _make_tls(self) -> dict[str, Any]:
        """The run's certificates, where TLS is on (``CassandraLaunch``'s tls fields): made
        anew at each start, the client's copy in the run directory."""
        assert self.state is not None and self.settings is not None
        if not self.settings.tls:
            return {}
        made = tls_mod.make(self.run_id, {h.name: h.address for h in self.topology.edges})
        return {"tls": made, "tls_dir": made.write_client(self.tls_dir)}

    @property
    def tls_dir(self) -> Path:
        """The client's TLS files (on TLS clusters; the endpoint has a copy at the same path)."""
        if self.state is None:
            raise StateError("testbed is not up")
        return self.state.run_dir / tls_mod.DIR

    @property
    def auth(self) -> bool:
        """Whether Cassandra runs with authentication (the remote backends: their hosts
        sit on real networks; namespaces on this machine do not)."""
        return bool(getattr(backend_class(self.backend_name), "cassandra_auth", False))

    @property
    def credentials_path(self) -> Path:
        """The run's CQL login (0600; on authenticated clusters only). The endpoint has a
        copy at the same path."""
        if self.state is None:
            raise StateError("testbed is not up")
        return self.state.run_dir / auth_mod.FILE_NAME

    def _setup_auth(self) -> None:
        """Readiness stage: the run's role replaces the default superuser (from the endpoint)."""
        t0 = time.monotonic()
        try:
            topo = self.topology
            per_dc = [
                f"{site}={len(topo.site_nodes(site))}" for site in topo.site_names or ()
            ]  # sites: system_auth replicated per datacenter
            args = ["auth-setup", *(["--per-dc", ",".join(per_dc)] if per_dc else [])]
            out = self.client(args, timeout_s=self.deadlines.auth_s)
        except CommandError as exc:
            raise NodeError(
                self.topology.endpoint.name,
                f"stage 'run role replaces the default superuser' failed: "
                f"{exc.stderr.strip().splitlines()[-1] if exc.stderr.strip() else exc}",
            ) from exc
        result = json.loads(out.stdout.strip().splitlines()[-1])
        self.timings["auth setup"] = time.monotonic() - t0
        self.progress(
            f"  role {result['role']} replaced the default superuser "
            f"(refused by {len(result['default_refused_by'])} nodes): "
            f"{self.timings['auth setup']:.1f} s"
        )

    def _driver_probe(self) -> None:
        probe_start = time.monotonic()
        try:
            self.driver_probe(timeout_s=self.deadlines.driver_s)
        except CommandError as exc:
            raise NodeError(
                self.topology.endpoint.name,
                f"stage 'driver session from the endpoint' failed: "
                f"{exc.stderr.strip().splitlines()[-1] if exc.stderr.strip() else exc}",
            ) from exc
        self.timings["driver connects"] = time.monotonic() - probe_start
        self.progress(
            f"  driver session from {self.topology.endpoint.name}: "
            f"{self.timings['driver connects']:.1f} s"
        )

    def _cds_tmp(self) -> Path:
        """Where the training node dumps its archive (renamed into place only when whole)."""
        assert self.dist and self.java and self.settings
        return self.dist.cds_archive(self.java.version, self.settings.build).with_suffix(".jsa.tmp")

    def _keep_cds_archive(self) -> None:
        if not (self.cds_training and self.dist and self.java and self.settings):
            return
        tmp = self._cds_tmp()
        if tmp.is_file() and tmp.stat().st_size > 0:
            os.replace(tmp, self.dist.cds_archive(self.java.version, self.settings.build))

    def driver_probe(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """Connect a driver session from the endpoint and wait until it sees every node up."""
        out = self.client(["probe", "--expect", str(self.topology.edge_nodes)], timeout_s=timeout_s)
        return json.loads(out.stdout.strip().splitlines()[-1])

    @property
    def python(self) -> str:
        """The Python interpreter on the hosts (this one under netns; the image's venv on
        VMs and inventory hosts): it runs the client, the probes and the workload."""
        return getattr(self.backend, "python", None) or sys.executable

    def client_argv(self, args: Sequence[str], timeout_s: float = 60.0) -> list[str]:
        """The command line of ``python -m testbed.client ARGS`` on the hosts."""
        return [self.python, "-m", "testbed.client", "--timeout", str(timeout_s), *args]

    def client(
        self, args: Sequence[str], *, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess:
        """Run ``python -m testbed.client ARGS`` on the endpoint; raises CommandError on failure."""
        return self.exec(
            self.topology.endpoint.name, self.client_argv(args, timeout_s), timeout=timeout_s + 30
        )

    # -- using the hosts -------------------------------------------------------------------

    def address(self, host: str) -> str:
        return self.topology.host(host).address

    @property
    def run_id(self) -> str:
        if self.state is None:
            raise StateError("testbed is not up")
        return self.state.run_id

    def environment(self, host: str) -> dict[str, str]:
        """Variables set for commands run on a host: run id, host, edge addresses and, on
        the endpoint, the path of the login file (a cluster with authentication) and of
        the TLS files (a cluster with TLS); never their content: these variables are on
        the command line."""
        env = {
            "EDGETB_RUN": self.run_id,
            "EDGETB_HOST": host,
            "EDGETB_EDGE_ADDRESSES": ",".join(h.address for h in self.topology.edges),
        }
        site = self.topology.host(host).site
        if site is not None:  # a client uses the nodes of its own host's site
            env[LOCAL_DC_ENV] = site
        if self.settings is not None and host == self.topology.endpoint.name:
            if self.auth:
                env[auth_mod.ENV] = str(self.credentials_path)  # copied to the endpoint only
            if self.settings.tls:
                env[tls_mod.ENV] = str(self.tls_dir)  # the same
        return env

    def exec_argv(self, host: str, argv: Sequence[str], *, limited: bool = True) -> list[str]:
        """The argument list that runs ``argv`` on ``host`` with its environment set.
        ``limited=False``: outside the host's device limits (netns cgroups) — the
        testbed's own tools (nodetool, tc), which no device would run on itself and
        which must not eat the node's CPU quota or memory."""
        if self.backend is None:
            raise StateError("testbed is not up")
        env = [f"{k}={v}" for k, v in self.environment(host).items()]
        return self.backend.exec_argv(host, ["env", *env, *argv], limited=limited)

    def exec(
        self,
        host: str,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float | None = 60,
        input: str | None = None,
    ) -> subprocess.CompletedProcess:
        """Run ``argv`` on ``host`` and return the result (CommandError if it fails)."""
        return run(self.exec_argv(host, argv), check=check, timeout=timeout, input=input)

    def popen(self, host: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` on ``host`` without waiting (the caller owns the process)."""
        return subprocess.Popen(self.exec_argv(host, argv), **kwargs)

    def nodetool(self, host: str, *command: str, timeout: float = 60) -> str:
        """Run nodetool against ``host``'s Cassandra (JMX on its own loopback)."""
        if self.java is None or self.dist is None:
            raise StateError("this testbed runs no Cassandra")
        if self.backend is None:
            raise StateError("testbed is not up")  # as exec_argv would say
        java = self.backend.tool_java(self.java.path)
        argv = [java, *nodetool_args(self.dist.classpath, self.dist.tools_logback, *command)]
        return run(self.exec_argv(host, argv, limited=False), timeout=timeout).stdout

    def status(self) -> list[dict[str, Any]]:
        """Per host: name, role, address, and Cassandra's state as one live node sees it."""
        ring: dict[str, str] = {}
        dcs: dict[str, str] = {}
        for node in self.nodes.values():
            if node.alive():
                try:
                    text = self.nodetool(node.name, "status")
                    ring, dcs = parse_nodetool_status(text), parse_nodetool_datacenters(text)
                    break
                except CommandError as exc:
                    log.debug("nodetool on %s failed: %s", node.name, exc)
        hosts = []
        for host in self.topology.hosts:
            entry: dict[str, Any] = {"name": host.name, "role": host.role, "address": host.address}
            if host.site is not None:
                entry["site"] = host.site
            if host.is_edge:
                if host.address in dcs:
                    entry["datacenter"] = dcs[host.address]  # as Cassandra sees it
                edge = self.nodes.get(host.name)
                alive = bool(edge and edge.alive())
                entry["cassandra"] = ring.get(host.address, "?") if alive else "stopped"
                entry["pid"] = edge.pid if edge else None
            hosts.append(entry)
        return hosts

    def status_from(self, host: str) -> dict[str, str]:
        """Every node's state (UN, DN, ...) as ``host``'s own Cassandra sees it, by host
        name; {} when its nodetool does not answer (the node is down or starting)."""
        names = {h.address: h.name for h in self.topology.edges}
        try:
            ring = parse_nodetool_status(self.nodetool(host, "status"))
        except CommandError:
            return {}
        return {names.get(a, a): v for a, v in ring.items()}

    def restart_node(self, name: str) -> float:
        """Start edge node ``name``'s Cassandra again (after it was killed or stopped:
        the same directory, data and command line) and wait until it serves CQL; returns
        seconds. The netns backend only."""
        if self.state is None or self.backend is None or self.settings is None:
            raise StateError("testbed is not up, or runs no Cassandra")
        if not capabilities(self.backend_name).restart_nodes or not (self.java and self.dist):
            raise ConfigError(f"the {self.backend_name} backend cannot restart a node in place")
        node = self.nodes[name]
        if node.alive():
            raise StateError(f"{name}: Cassandra is still running (pid {node.pid})")
        t0 = time.monotonic()
        # Dead is not yet gone: a killed JVM's threads may still be exiting, its ports bound.
        if not node.wait_exit(60):
            raise node.error("the old JVM is still exiting 60 s after it died")
        node.log.new_lines()  # from here on: the old run's lines are not this start's
        pid = node.start(
            java=self.java,
            dist=self.dist,
            settings=self.settings,
            exec_argv=self.backend.exec_argv,
        )
        self.state.processes[name] = {"pid": pid, "marker": node.marker}
        self.state.save()
        from .cassandra.readiness import wait_for_nodes

        wait_for_nodes([node], self.deadlines, poll_s=0.2)  # its own stages; peers: the caller's
        return time.monotonic() - t0

    # -- reattaching -----------------------------------------------------------------------

    @classmethod
    def attach(
        cls, run_id: str | None = None, *, base: Path | None = None, claim: bool = False
    ) -> Testbed:
        """The testbed ``run_id`` (default: the one detached testbed that is up), from disk.

        ``claim``: own it while this object is used (commands that change it do), raising
        RunInUseError when a live process (a sweep, a test) owns it.
        """
        state = st.select_run(run_id, base)
        try:
            topology = Topology.from_dict(state.topology)
            settings = CassandraSettings.from_dict(state.cassandra) if state.cassandra else None
            backend_class(state.backend)
        except (ConfigError, TypeError) as exc:
            raise StateFileError(f"corrupt run state {state.path}: {exc}") from None
        tb = cls.__new__(cls)
        tb.topology = topology
        tb.backend_name = state.backend
        tb.settings = settings
        tb.deadlines = Deadlines()
        tb.cds_training = False
        tb.progress = _quiet
        tb.base = base
        tb.name = state.name
        tb.subnet_pool = None
        tb.on_registered = None
        tb.state = state
        tb._owner = None
        tb.backend_options = dict(state.options)
        tb.backend = make_backend(state.backend, topology, state)
        tb.timings = dict(state.timings)
        tb.java = Java(state.java, 17, "") if state.java else None
        tb.dist = None
        if settings is not None:
            try:
                tb.dist = dist_mod.load()
            except StateError:
                tb.dist = None
        tb.nodes = {}
        for host in topology.edges:
            proc = state.processes.get(host.name)
            tb.nodes[host.name] = tb.backend.cassandra_node(host, proc["pid"] if proc else None)
        if claim:
            tb.claim()
        return tb


def state_problems(state: st.RunState) -> list[str]:
    """What is broken in the run ``state`` describes: recorded processes that died,
    hosts its backend cannot find. Empty when it looks healthy (cheap: no SSH)."""
    from common.procs import pid_alive

    found = [
        f"{name}: process {proc['pid']} is not running"
        for name, proc in state.processes.items()
        if not pid_alive(proc["pid"], proc.get("marker"))
    ]
    check = getattr(backend_class(state.backend), "problems", None)
    if check is not None:
        found += check(state)
    return found


def parse_nodetool_datacenters(text: str) -> dict[str, str]:
    """Map address -> datacenter from `nodetool status` output (a "Datacenter: NAME"
    line heads each datacenter's nodes)."""
    result, dc = {}, None
    for line in text.splitlines():
        if line.startswith("Datacenter:"):
            dc = line.split(":", 1)[1].strip()
            continue
        for address in parse_nodetool_status(line):
            if dc is not None:
                result[address] = dc
    return result


def parse_nodetool_status(text: str) -> dict[str, str]:
    """Map address -> two-letter state (UN, DN, UJ, ...) from `nodetool status` output."""
    result = {}
    for line in text.splitlines():
        fields = line.split()
        if (
            len(fields) >= 2
            and len(fields[0]) == 2
            and fields[0][0] in "UD"
            and fields[0][1] in "NLJM"
        ):
            result[fields[1]] = fields[0]
    return result
