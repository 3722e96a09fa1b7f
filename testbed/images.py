"""The VM base image (edge nodes and endpoint): what it is and where it is cached.

The definition lives in ``vm-images/node/`` (package list, first-boot script and unit,
sshd settings, initramfs modules); ``testbed.image_build`` (``python -m testbed image
build``) turns it into

- ``base.qcow2``: a Debian 12 root file system (debootstrap, then apt-get inside it) with
  openjdk-17-jre-headless, python3, a venv at /opt/edgetb/venv holding tcconfig and
  cassandra-driver (wheels downloaded from PyPI on the host, installed offline), and the
  testbed's Cassandra distribution at the same absolute path as on the host, so a node's
  rendered settings and JVM command line are the same as under netns;
- ``vmlinuz`` and ``initrd.img``: the image's own kernel, booted directly by libvirt with
  the per-VM settings on its command line (name, static address, the testbed's SSH key).

The build is keyed on every input (``inputs``: the files above, the kernel and JRE
package versions, the Python pins, the Cassandra jars): an unchanged input set reuses the
cached image. VMs never write to it: each gets a copy-on-write overlay.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from common.errors import ConfigError, StateError
from common.paths import cache_root
from common.runner import run

from .cassandra import dist as dist_mod
from .cassandra import quiet

IMAGE_FORMAT = 1
SUITE = "bookworm"
DEFINITION = Path(__file__).resolve().parent.parent / "vm-images" / "node"
GUEST_VENV = "/opt/edgetb/venv"
GUEST_PYTHON = f"{GUEST_VENV}/bin/python"
# systemd units masked in the image (see _configure)
MASKED_UNITS = (
    "e2scrub_reap.service",
    "e2scrub_all.timer",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "man-db.timer",
    "fstrim.timer",
    "dpkg-db-backup.timer",
    "logrotate.timer",
)
GUEST_SRC = "/opt/edgetb/src"
GUEST_JAVA = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
# The guests run the endpoint workload (cassandra-driver) and tcconfig: the host's pins.
GUEST_WHEELS = ("cassandra-driver==3.30.1", "tcconfig==0.30.1", "PyYAML==6.0.3")
IMAGE_SIZE = "6G"  # sparse; the root file system grows into it inside each overlay


@dataclass(frozen=True)
class NodeImage:
    root: Path

    @property
    def disk(self) -> Path:
        return self.root / "base.qcow2"

    @property
    def kernel(self) -> Path:
        return self.root / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.root / "initrd.img"

    @property
    def manifest(self) -> dict:
        return json.loads((self.root / "manifest.json").read_text())


def image_root() -> Path:
    return cache_root() / "images"


def load() -> NodeImage:
    """The current image; StateError saying how to build it when there is none."""
    image = NodeImage((image_root() / "current").resolve())
    for path in (image.disk, image.kernel, image.initrd, image.root / "manifest.json"):
        if not path.is_file():
            raise StateError(
                "no VM image built yet: `make vms` installs QEMU and libvirt and builds it"
            )
    return image


def read_packages(definition: Path = DEFINITION) -> dict[str, list[str]]:
    """packages.txt as {"debootstrap": [...], "apt": [...]} (pure; unit-tested)."""
    groups: dict[str, list[str]] = {}
    current = None
    for raw in (definition / "packages.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            current = groups.setdefault(line[1:-1], [])
        elif current is None:
            raise ConfigError(f"{definition / 'packages.txt'}: package {line!r} before a [section]")
        else:
            current.append(line)
    if set(groups) != {"debootstrap", "apt"}:
        raise ConfigError(f"{definition / 'packages.txt'} needs [debootstrap] and [apt]")
    return groups


def _candidate(package: str) -> str:
    out = run(["apt-cache", "policy", package]).stdout
    for line in out.splitlines():
        if line.strip().startswith("Candidate:"):
            return line.split(":", 1)[1].strip()
    raise ConfigError(f"apt knows no package {package} (run apt-get update first)")


def inputs(dist: dist_mod.CassandraDist, definition: Path = DEFINITION) -> dict:
    """Everything the image is made of; its hash names the cached image."""
    files = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(definition.iterdir())
        if p.is_file()
    }
    return {
        "format": IMAGE_FORMAT,
        "builder": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        "suite": SUITE,
        "definition": files,
        "kernel": _candidate("linux-image-amd64"),
        "jre": _candidate("openjdk-17-jre-headless"),
        "wheels": list(GUEST_WHEELS),
        "guest_python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "cassandra": dist.version,
        "cassandra_root": str(dist.root),
        "cassandra_jars": hashlib.sha256(
            json.dumps(dist.jars, sort_keys=True).encode()
        ).hexdigest(),
        # quiet nodes' class, copied with the distribution (testbed.cassandra.quiet)
        "cassandra_quiet": quiet.describe(dist)["jar_sha256"],
    }


def ssh_key_argument(public_key: str) -> str:
    """The kernel command line form of an OpenSSH public key (base64: no spaces)."""
    return base64.b64encode(public_key.strip().encode()).decode()
