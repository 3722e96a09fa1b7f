"""Build outputs cached under a key of their inputs (the gateway image, the VM image):
``<root>/<key>/`` holds one build, ``<root>/current`` points at the one in use, and
publishing a build removes those of earlier inputs."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from pathlib import Path


def input_key(inputs: dict) -> str:
    """A short, stable name for a set of inputs (JSON with sorted keys, hashed)."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def publish(root: Path, key: str) -> None:
    """Point ``root/current`` at ``root/key`` atomically and delete other builds (names
    starting with "." are builds in progress and are left alone)."""
    link = root / "current"
    if not (link.is_symlink() and os.readlink(link) == key):
        # a name of this call's own: two processes publishing at once (two workers set
        # up on one machine) must not take each other's link away before the rename
        tmp = root / f".current.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        tmp.symlink_to(key)
        os.replace(tmp, link)
    for old in root.iterdir():
        if (
            old.is_dir()
            and not old.is_symlink()
            and old.name not in (key, "current")
            and not old.name.startswith(".")
        ):
            shutil.rmtree(old, ignore_errors=True)
