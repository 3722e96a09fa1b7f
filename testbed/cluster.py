"""The Cassandra side of a testbed: its settings checked against the backend, the nodes
started (TLS, the run's role, the driver's first session, the class-data-sharing
archive), one node restarted, and every node's log read at teardown.

``Cluster`` is a part of ``Testbed`` (testbed/testbed.py), over ``HostAccess``: the
attributes below are the Testbed's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from common.errors import CommandError, ConfigError, NodeError, StateError, TestbedError
from common.runner import run

from . import resources
from . import state as st
from .access import HostAccess
from .backends import Backend, capabilities
from .cassandra import auth as auth_mod
from .cassandra import logscan, readiness
from .cassandra import tls as tls_mod
from .cassandra.config import CassandraSettings
from .cassandra.launch import CassandraLaunch
from .cassandra.readiness import Deadlines
from .topology import Topology

Progress = Callable[[str], None]


def checked_settings(
    cls: type[Backend],
    backend: str,
    topology: Topology,
    cassandra: CassandraSettings,
    options: dict[str, Any],
    progress: Progress,
) -> CassandraSettings:
    """``cassandra`` checked against the topology and the backend ``cls`` (ConfigError),
    with TLS decided where it was left to the backend (on where hosts are real)."""
    cassandra.check_hosts(topology)
    spec = options.get("resources")
    if spec:  # each node's JVM (heap and the rest) under its memory limit
        for host, res in resources.resolve_spec(spec, topology).items():
            if topology.host(host).is_edge:
                res.check_heap(cassandra.heap_mb, host)
    real_hosts = bool(getattr(cls, "cassandra_tls", False))
    if cassandra.tls is None:  # the backend's default
        cassandra = replace(cassandra, tls=real_hosts)
    if not cassandra.tls and real_hosts:
        if not cassandra.plain_text:
            raise ConfigError(
                "TLS off on real hosts: the run's login and every write would cross "
                "their network in plain text; add --plain-text (a sweep: --tls "
                "plain-text) if that is meant"
            )
        progress(
            "warning: TLS is off on real hosts (--plain-text): the run's login and "
            "every write cross their network in plain text"
        )
    node_keys = {k: v for o in cassandra.node_overrides.values() for k, v in o.items()}
    if getattr(cls, "cassandra_auth", False):
        auth_mod.check_overrides({**cassandra.overrides, **node_keys}, backend)
    if cassandra.tls:
        tls_mod.check_overrides({**cassandra.overrides, **node_keys})
    return cassandra


class Cluster(HostAccess):
    """Starting, restarting and reading the Cassandra nodes (a part of ``Testbed``)."""

    deadlines: Deadlines
    cds_training: bool
    progress: Progress
    timings: dict[str, float]
    base: Path | None

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
            raise self._stage_failed("run role replaces the default superuser", exc) from exc
        result = json.loads(out.stdout.strip().splitlines()[-1])
        self.timings["auth setup"] = time.monotonic() - t0
        self.progress(
            f"  role {result['role']} replaced the default superuser "
            f"(refused by {len(result['default_refused_by'])} nodes): "
            f"{self.timings['auth setup']:.1f} s"
        )

    def _stage_failed(self, stage: str, exc: CommandError) -> NodeError:
        """A readiness stage run on the endpoint failed: its last line of stderr."""
        said = exc.stderr.strip().splitlines()[-1] if exc.stderr.strip() else exc
        return NodeError(self.topology.endpoint.name, f"stage '{stage}' failed: {said}")

    def _driver_probe(self) -> None:
        probe_start = time.monotonic()
        try:
            self.driver_probe(timeout_s=self.deadlines.driver_s)
        except CommandError as exc:
            raise self._stage_failed("driver session from the endpoint", exc) from exc
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
        # its own stages; peers: the caller's
        readiness.wait_for_nodes([node], self.deadlines, poll_s=0.2)
        return time.monotonic() - t0

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
