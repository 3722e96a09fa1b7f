"""Build outputs in the cache. Under a key of their inputs (the gateway image, the VM
image): ``<root>/<key>/`` holds one build, ``<root>/current`` points at the one in use, and
publishing a build removes those of earlier inputs. Or one directory built once
(``build_once``: Cassandra's jars, the quiet class, YCSB and its binding)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from .errors import StateError

T = TypeVar("T")
P = TypeVar("P")


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


def build_once(
    target: Path,
    load: Callable[[], T],
    build: Callable[[Path, P], None],
    *,
    prepare: Callable[[], P] = lambda: None,  # type: ignore[assignment,return-value]
    force: bool = False,
) -> T:
    """``load()`` of the directory ``target`` where it is intact (StateError where not),
    unless ``force``; else built: ``prepare()`` first (what must be there before anything
    is fetched, e.g. javac), then, one builder at a time (an flock beside ``target``: the
    shards of a parallel sweep, two `up` at once on a fresh machine), ``build(staging,
    prepared)`` into a directory of its own beside ``target``, renamed into place. A
    builder that waited finds it built; a failed build leaves nothing."""
    if not force:
        try:
            return load()
        except StateError:
            pass
    prepared = prepare()
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.install.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force:
            try:
                return load()
            except StateError:
                pass
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".install-") as tmp:
            staging = Path(tmp) / target.name
            build(staging, prepared)
            if target.exists():
                shutil.rmtree(target)
            staging.rename(target)
    return load()
