"""Whether QEMU guests get KVM or must run under TCG on this host: one verdict, shared by
the gateway VM and the libvirt backend.

/dev/kvm is not proof: under a PVM hypervisor it exists, but a stock Debian kernel never
boots with it, so only a guest that really booted decides for KVM. The verdict is kept
per host kernel and QEMU version (a trial boot costs up to ~15 s), and
$EDGETB_GATEWAY_ACCEL=kvm|tcg overrides it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from common import paths
from common.paths import cache_root
from common.runner import run


def verdict_path() -> Path:
    qemu = run(["qemu-system-x86_64", "--version"]).stdout.split("\n")[0]
    key = f"{os.uname().release}|{qemu}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_root() / "gateway" / f"accel-{digest}.json"


def known_accel() -> str | None:
    """ "kvm" or "tcg" when decided (by $EDGETB_GATEWAY_ACCEL, by the absence of /dev/kvm,
    or by an earlier trial boot on this host kernel and QEMU), else None: try KVM once."""
    forced = paths.get("EDGETB_GATEWAY_ACCEL")
    if forced in ("kvm", "tcg"):
        return forced
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg"
    path = verdict_path()
    if path.is_file():
        return json.loads(path.read_text())["accel"]
    return None


def record_accel(accel: str, detail: str) -> None:
    """Keep the verdict of a trial boot ("kvm" or "tcg", and why)."""
    path = verdict_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"accel": accel, "detail": detail}))
    tmp.replace(path)
