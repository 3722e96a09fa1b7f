"""Who owns what on this machine: the owner lock a live user of a run (or a results
directory) holds for as long as it uses it, and the machine-wide registry of runs of
every ``$EDGETB_HOME`` (with the running sweeps' entries beside it), through which
``clean`` tells a live run of another home from a leftover.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from common import paths
from common.errors import StateError
from common.files import open_own

LOCK_FILE = "lock"
RUN_ID_RE = re.compile(r"[0-9a-f]{6}")


# -- ownership ------------------------------------------------------------------------------


class OwnerLock:
    """An exclusive flock held by whoever uses a testbed (or a results directory) for as
    long as it uses it: a sweep, a ``with Testbed(...)``, an ``up`` in progress, a CLI
    command changing a detached testbed. The kernel drops it when the holder dies, so a
    free lock means "no live owner". The file names the holder (pid, command) for errors.
    """

    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None

    def acquire(self, *, blocking: bool = True, wait_s: float = 0.0) -> bool:
        """Take the lock (``wait_s``: retry that long before giving up when not blocking).

        Raises StateError when the lock's directory is gone, or was removed while this
        process waited (the lock it got would be on a deleted file: the run is gone).
        """
        try:
            fd = open_own(self.path, os.O_RDWR | os.O_CREAT, 0o600)  # never a planted name
        except FileNotFoundError:
            raise StateError(f"{self.path.parent} is gone") from None
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(0.05)
        try:
            current = os.stat(self.path).st_ino
        except FileNotFoundError:
            current = None
        if current != os.fstat(fd).st_ino:
            os.close(fd)
            raise StateError(f"{self.path.parent} was removed")
        self._fd = fd
        info = json.dumps(
            {"pid": os.getpid(), "command": " ".join(sys.argv)[:200], "since": time.time()}
        ).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, info, 0)
        return True

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def holder(self) -> dict[str, Any] | None:
        """Who holds the lock ({pid, command, since}), or None when nobody alive does."""
        if self._fd is not None:
            return json.loads(os.pread(self._fd, 4096, 0) or b"{}")
        try:
            fd = open_own(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                try:
                    return json.loads(os.pread(fd, 4096, 0))
                except ValueError:
                    return {"pid": None, "command": "?"}
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    def __enter__(self) -> OwnerLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class RunLock(OwnerLock):
    """The owner lock of one run directory."""

    def __init__(self, run_dir: Path):
        super().__init__(run_dir / LOCK_FILE)


def describe_holder(holder: dict[str, Any]) -> str:
    return f"pid {holder.get('pid')}: {holder.get('command') or '?'}"


# -- the machine-wide registry of runs ------------------------------------------------------


def registry_dir() -> Path:
    """Where every run on this machine, of any $EDGETB_HOME, is entered (a symlink to its
    run directory), so that `clean` tells a live run of another home from a leftover.
    On tmpfs (/run): a reboot ends every namespace, process and transient VM anyway."""
    return paths.registry_dir()


def sweeps_dir() -> Path:
    """Where every running sweep of this machine holds a lock (beside the run registry,
    whatever its $EDGETB_HOME): how a sweep learns that another one shares the cores."""
    return registry_dir().parent / "sweeps"


def remove_dead_sweep_entries() -> list[Path]:
    """The entries of sweeps that died without leaving (kill -9): nobody holds their lock.
    A sweep that opens the same file meanwhile finds it removed and only loses its
    warning about other sweeps."""
    removed = []
    root = sweeps_dir()
    for path in sorted(root.glob("*.lock")) if root.is_dir() else []:
        lock = OwnerLock(path)
        try:
            if lock.acquire(blocking=False):
                path.unlink(missing_ok=True)
                removed.append(path)
                lock.release()
        except (OSError, StateError):
            continue
    return removed


def register(run_id: str, run_dir: Path) -> None:
    reg = registry_dir()
    reg.mkdir(parents=True, exist_ok=True)
    tmp = reg / f".{run_id}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(run_dir.resolve())
    os.replace(tmp, reg / run_id)


def unregister(run_id: str, run_dir: Path | None = None) -> None:
    """Remove ``run_id``'s entry (only if it points at ``run_dir``, when given)."""
    entry = registry_dir() / run_id
    try:
        if run_dir is not None and Path(os.readlink(entry)) != run_dir.resolve():
            return
        entry.unlink()
    except (FileNotFoundError, OSError):
        pass


def registered_runs() -> dict[str, Path]:
    """Run id -> run directory of every registered run (the directory may be gone)."""
    reg = registry_dir()
    if not reg.is_dir():
        return {}
    found = {}
    for entry in reg.iterdir():
        if RUN_ID_RE.fullmatch(entry.name) and entry.is_symlink():
            found[entry.name] = Path(os.readlink(entry))
    return found
