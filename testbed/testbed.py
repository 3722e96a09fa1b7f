"""The Testbed: a Topology built by a backend, with Cassandra running on its edge nodes.

    with Testbed(Topology(edge_nodes=3)) as tb:
        tb.exec("ep", ["ping", "-c1", tb.address("e0")])

Teardown is guaranteed on the way out of ``with`` and after any failure inside ``up``.
A stateless process can reattach with ``Testbed.attach()`` (the CLI does).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from common.errors import (
    ConfigError,
    StateError,
    StateFileError,
    TeardownError,
    TestbedError,
)

from . import ownership, subnets
from . import state as st
from .backends import Backend, backend_class, make_backend
from .cassandra import dist as dist_mod
from .cassandra import logscan, quiet
from .cassandra.config import CassandraSettings
from .cassandra.java import Java, find_java
from .cassandra.node import CassandraNode
from .cassandra.readiness import Deadlines
from .cluster import Cluster, checked_settings
from .owned import Owned
from .topology import Topology

TEARDOWN_FAILED = st.TEARDOWN_FAILED

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


def _quiet(_msg: str) -> None:
    pass


class Testbed(Cluster, Owned):
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
        self.java: Java | None = None
        self.dist: dist_mod.CassandraDist | None = None
        self._check(java)

    def _check(self, java: str | None) -> None:
        """Everything checked before anything on the system changes: first the input alone
        (so bad input is named even without root), then what needs the machine; the
        Cassandra distribution (and the quiet build) made where missing."""
        topology, backend, cassandra = self.topology, self.backend_name, self.settings
        cls = backend_class(backend)
        if self.name is not None:
            self._check_name_free(st.check_name(self.name))
        if self.subnet_pool is not None or topology.subnet is None:
            subnets.pool_from(self.subnet_pool)  # a bad pool is named before anything starts
        check_options = getattr(cls, "check_options", None)
        if check_options is not None:
            check_options(topology, self.backend_options)
        if cassandra is not None:
            self.settings = cassandra = checked_settings(
                cls, backend, topology, cassandra, self.backend_options, self.progress
            )
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
        tb = _reattached(cls.__new__(cls), state, topology, settings, base)
        if claim:
            tb.claim()
        return tb


def _reattached(
    tb: Testbed,
    state: st.RunState,
    topology: Topology,
    settings: CassandraSettings | None,
    base: Path | None,
) -> Testbed:
    """``tb`` (made without ``__init__``) given what ``attach`` read from ``state``."""
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
