"""What a run's manifest records: the machine and the packages at the start of a sweep
(``static_manifest``), and each cluster it brings up (``cluster_entry``): its testbed, the
Cassandra it runs (version, Java, heap, JVM profile, build) and how its hosts were made."""

from __future__ import annotations

import platform
import subprocess
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from emulation import shapers
from model.rtt import tcp_from_proc
from testbed import Testbed
from testbed.backends.libvirt import LibvirtRecord
from testbed.cassandra import quiet
from testbed.cassandra.config import describe_housekeeping

from ..plan.calibration import machine_facts
from ..settings.config import SweepConfig

ROOT = Path(__file__).resolve().parents[2]  # the project's checkout
# the packages whose versions a run records: the project's and what measures with it
PACKAGES = (
    "edge-testbed",
    "cassandra-driver",
    "tcconfig",
    "numpy",
    "ansible-runner",
    "distributed",
)


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def project_commit(root: Path = ROOT) -> str | None:
    """The project's git commit (``-dirty`` with uncommitted changes), None where the
    code is not a git checkout or git is missing: which code measured a run."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=10)  # fmt: skip
        if head.returncode != 0:
            return None
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "-uno"],
                                capture_output=True, text=True, timeout=30)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("-dirty" if status.stdout.strip() else "")


def static_manifest(config: SweepConfig, argv: Sequence[str]) -> dict[str, Any]:
    return {
        "command": ["python", "-m", "experiments.sweep", *argv],
        "commit": project_commit(),
        "packages": {p: _version(p) for p in PACKAGES},
        "python": platform.python_version(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        **machine_facts(),
        "clusters": {},
        "baseline": {},
        # what model.rtt takes from the measuring host (not the analysing one)
        "tcp": tcp_from_proc().to_dict(),
    }


def cluster_entry(
    cfg: SweepConfig, tb: Testbed, driver: dict[str, Any], *, shard: str, nodes: int | None
) -> dict[str, Any]:
    """A cluster's entry (``clusters`` of the manifest), from its running testbed."""
    assert tb.state is not None
    gateway = tb.state.get(shapers.GatewayRecord)
    vms = tb.state.get(LibvirtRecord)
    return {
        "nodes": nodes,
        "shard": shard,
        "testbed_run": tb.run_id,
        "backend": tb.backend_name,
        "vm_accel": vms.accel if vms else None,  # kvm or tcg: the VMs' timings differ
        "subnet": tb.topology.subnet,
        # sites: each host's (a request's coordinator and replicas are host names)
        "sites": {h.name: h.site for h in tb.topology.hosts} if tb.topology.sites else None,
        "cassandra": tb.dist.version if tb.dist else None,
        "java": tb.java.version if tb.java else None,
        "heap_mb": cfg.heap_mb,
        "jvm_profile": cfg.jvm_profile,
        # a deliberate deviation from stock Cassandra: quiet nodes' rebuilt class, hashed
        "cassandra_build": cfg.cassandra_build,
        "quiet": quiet.describe(tb.dist) if tb.dist and cfg.cassandra_build == "quiet" else None,
        # and, where the testbed takes only writes, coarser idle housekeeping
        "housekeeping": describe_housekeeping(tb.settings),
        "driver": driver,
        "gateway_accel": gateway.accel if gateway else None,
        "gateway_boot_s": gateway.boot_s if gateway else None,
    }
