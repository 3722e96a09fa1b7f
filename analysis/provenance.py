"""Which code, packages and machine measured a run, in one line a reader can quote: from
the run's manifest (``experiments.run.manifest``), as the report shows it beside each run."""

from __future__ import annotations

from typing import Any


def line(manifest: dict[str, Any]) -> str:
    """``edge-testbed 0.1.0 (commit 1a2b3c4d5e6f), Cassandra 5.0.6 on Java 17.0.13,
    cassandra-driver 3.30.1, Python 3.11.7, Linux 6.1.0 x86_64, AMD EPYC (2 cores)``;
    what a manifest does not hold (an older run's) is left out."""
    packages = manifest.get("packages") or {}
    parts = []
    if packages.get("edge-testbed"):
        commit = manifest.get("commit")
        shown = (commit[:12] + (" with uncommitted changes" if commit.endswith("-dirty") else "")
                 if commit else None)  # fmt: skip
        parts.append(f"edge-testbed {packages['edge-testbed']}"
                     + (f" (commit {shown})" if shown else ""))  # fmt: skip
    clusters = list((manifest.get("clusters") or {}).values())
    cassandra = sorted({c["cassandra"] for c in clusters if c.get("cassandra")})
    java = sorted({c["java"] for c in clusters if c.get("java")})
    if cassandra:
        parts.append(
            f"Cassandra {', '.join(cassandra)}" + (f" on Java {', '.join(java)}" if java else "")
        )
    backends = sorted({c["backend"] + (f" ({c['vm_accel']})" if c.get("vm_accel") else "")
                       for c in clusters if c.get("backend")})  # fmt: skip
    if backends:
        parts.append(f"{', '.join(backends)} backend")
    for name in ("cassandra-driver", "tcconfig"):
        if packages.get(name):
            parts.append(f"{name} {packages[name]}")
    if manifest.get("python"):
        parts.append(f"Python {manifest['python']}")
    if manifest.get("kernel"):
        parts.append(f"Linux {manifest['kernel']} {manifest.get('machine') or ''}".rstrip())
    cpu, cores = manifest.get("cpu_model"), manifest.get("cpus")
    if cpu or cores:
        parts.append(f"{cpu or 'CPU'}" + (f" ({cores} cores)" if cores else ""))
    return ", ".join(parts)
