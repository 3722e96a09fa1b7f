"""Every environment variable the tool reads, and where it keeps its files: one module, so
that a reader finds them in one place and no module reads one at import time.

Two kinds (``VARIABLES`` names each with its default and meaning):

- **the machine's**: where the tool keeps runs, caches and the run registry, which
  libvirt it uses, what it forces or limits (a researcher sets them);
- **a host's**: set by the testbed for every command it runs on a host
  (``Testbed.environment``) and read there by the endpoint's client and the writer.

Standard library only: the endpoint's client imports it inside hosts.
"""

from __future__ import annotations

import os
from pathlib import Path

VARIABLES: dict[str, tuple[str, str]] = {
    # the machine's
    "EDGETB_HOME": ("~/.edgetb", "runs, calibrations, kept test logs, workers' staging"),
    "EDGETB_CACHE": ("~/.cache/edgetb", "Cassandra, YCSB, images, tcconfig's structures"),
    "EDGETB_REGISTRY": ("/run/edgetb/runs", "the machine-wide registry of runs"),
    "EDGETB_SUBNET_POOL": ("10.77.0.0/16", "where each run's /24 is taken from"),
    "EDGETB_LIBVIRT_URI": ("qemu:///system", "the libvirt daemon the VMs run under"),
    "EDGETB_VM_ACCEL": ("(decided)", "kvm or tcg: forces the VMs' accelerator"),
    "EDGETB_GATEWAY_ACCEL": ("(decided)", "kvm or tcg: forces the gateway VM's"),
    "EDGETB_MAX_BUSY": ("(measured)", "the CPU share other work may use beside a sweep"),
    "EDGETB_WORKER_DIR": ("$EDGETB_HOME/worker", "where a Dask worker stages its cells"),
    # a host's (set by the testbed for commands on its hosts)
    "EDGETB_RUN": ("", "the run id"),
    "EDGETB_HOST": ("", "the host's name"),
    "EDGETB_EDGE_ADDRESSES": ("", "the edge nodes' addresses, comma-separated"),
    "EDGETB_LOCAL_DC": ("", "the endpoint's datacenter (its site)"),
    "EDGETB_CREDENTIALS": ("", "the run's CQL login file (a path, never the password)"),
    "EDGETB_TLS": ("", "the directory of the run's client certificate and CA"),
}


def get(name: str) -> str | None:
    """The value of ``name`` (one of ``VARIABLES``), None when unset or empty."""
    if name not in VARIABLES:
        raise KeyError(f"{name} is not one of the tool's variables (common.paths)")
    return os.environ.get(name) or None


def home() -> Path:
    """Runs and the tool's own state: $EDGETB_HOME, else ~/.edgetb."""
    env = get("EDGETB_HOME")
    return Path(env) if env else Path.home() / ".edgetb"


def cache_root() -> Path:
    """Where distributions and images are cached: $EDGETB_CACHE, else ~/.cache/edgetb."""
    env = get("EDGETB_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "edgetb"


def registry_dir() -> Path:
    """The machine-wide registry of runs: $EDGETB_REGISTRY, else /run/edgetb/runs."""
    return Path(get("EDGETB_REGISTRY") or "/run/edgetb/runs")


def libvirt_uri() -> str:
    return get("EDGETB_LIBVIRT_URI") or "qemu:///system"
