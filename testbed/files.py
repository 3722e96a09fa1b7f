"""Reading a file a user hands in (a config, a link matrix, a trace, a workload): every
problem is one ConfigError naming what the file is for and its path, before its content
is used: missing, not a regular file (a directory, a FIFO, /dev/zero), larger than such a
file ever is, unreadable, not UTF-8 text."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from .errors import ConfigError

MAX_BYTES = 64 * 1024 * 1024  # far above any config, matrix, trace or workload file


def read_text(path: Path | str, what: str, *, max_bytes: int = MAX_BYTES) -> str:
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the open
    except FileNotFoundError:
        raise ConfigError(f"{what} not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"{what} {path} cannot be read: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{what} {path} is not a regular file")
        if st.st_size > max_bytes:
            raise ConfigError(
                f"{what} {path} is {st.st_size} bytes, more than such a file can be ({max_bytes})"
            )
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:  # grew after fstat, or a size the kernel does not know
            raise ConfigError(f"{what} {path} is more than such a file can be ({max_bytes})")
    except OSError as exc:
        raise ConfigError(f"{what} {path} cannot be read: {exc.strerror}") from None
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{what} {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


# Filesystems of the kernel's own objects: writable as root, but not a place for files.
KERNEL_FILESYSTEMS = frozenset(
    {
        "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs",
        "securityfs", "pstore", "bpf", "configfs", "fusectl", "mqueue", "binfmt_misc",
        "efivarfs", "autofs", "nsfs", "rpc_pipefs",
    }
)  # fmt: skip


def filesystem_type(path: Path | str, mounts: Path = Path("/proc/self/mounts")) -> str | None:
    """The type of the filesystem ``path`` (absolute or not, existing or not) is on: the
    longest mount point above it; None where the mount table cannot be read."""
    target = Path(os.path.realpath(path))  # a symlink into /sys is on sysfs
    best, kind = -1, None
    try:
        lines = mounts.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1]))
        if (target == point or point in target.parents) and len(point.parts) > best:
            best, kind = len(point.parts), fields[2]
    return kind


def check_not_kernel_fs(path: Path | str, what: str) -> None:
    """ConfigError where ``path`` is on /proc, /sys, /dev or another kernel filesystem."""
    kind = filesystem_type(path)
    if kind in KERNEL_FILESYSTEMS:
        raise ConfigError(f"{what} {path} is on a {kind} filesystem, not a place for files")
