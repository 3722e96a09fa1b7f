"""Files in and out. Reading a file a user hands in (a config, a link matrix, a trace, a
workload): every problem is one ConfigError naming what the file is for and its path,
before its content is used: missing, not a regular file (a directory, a FIFO,
/dev/zero), larger than such a file ever is, unreadable, not UTF-8 text. Writing into a
directory others may write to: never through a name planted there (``replacing``,
``write_file``, ``open_own``, ``append_to``)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

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


def read_json_object(path: Path | str) -> dict[str, Any]:
    """A state file the tool keeps for itself (a JSON object), or {} when there is none
    yet or it is damaged, unreadable, not a regular file or not an object: such files
    hold what was measured before, and a damaged one is as if nothing was."""
    try:
        data = json.loads(read_text(path, "state file"))
    except (ConfigError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


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


# -- writing where someone else may have planted a name -----------------------------------
#
# Root writes results, logs and figures into directories a researcher chose, which other
# users may be able to write to. A name planted there (a symlink to /etc/shadow, a FIFO)
# must never be followed or block: files are created under a fresh name with O_EXCL and
# O_NOFOLLOW and renamed over the target (a rename replaces a symlink, it does not write
# through it); appended-to files are opened with O_NOFOLLOW and must be regular files.


class UnsafeFileError(ConfigError):
    """A path the tool writes is a symlink or not a regular file."""


@contextlib.contextmanager
def replacing(path: Path | str, mode: str = "w", perm: int = 0o644, **kw: Any) -> Iterator[IO]:
    """A file object whose content replaces ``path`` when the block ends without an
    error (nothing is left behind when it raises); ``perm`` applies from creation (0600
    for secrets). ``mode``: "w" or "wb"; ``kw``: open()'s (newline=...)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(3)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, perm)
    try:
        with os.fdopen(fd, mode, **kw) as f:
            yield f
        os.chmod(tmp, perm)  # the umask took bits off at creation
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.filename is None:  # a write's error names no file: name the one written
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_file(path: Path | str, data: str | bytes, perm: int = 0o644) -> None:
    """Replace ``path`` with ``data`` (``replacing``: never through a planted name)."""
    with replacing(path, "wb" if isinstance(data, bytes) else "w", perm) as f:
        f.write(data)


def open_own(path: Path | str, flags: int, perm: int = 0o644) -> int:
    """os.open of a file the tool owns (a lock, a log it appends to): never through a
    symlink, never a FIFO or a device; UnsafeFileError (one line) otherwise."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, perm)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeFileError(
                f"{path} is a symbolic link: refused (the tool writes its own files only; "
                f"remove it if you did not plant it)"
            ) from None
        if exc.errno == errno.ENXIO:  # a FIFO without a reader, a socket
            raise UnsafeFileError(f"{path} is not a regular file: refused") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafeFileError(f"{path} is not a regular file: refused")
    os.set_blocking(fd, True)
    return fd


def append_to(path: Path | str, binary: bool = False, perm: int = 0o644) -> IO:
    """``path`` opened to append (created when missing), through ``open_own``."""
    fd = open_own(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, perm)
    return os.fdopen(fd, "ab" if binary else "a")


def tail(path: Path, lines: int = 25) -> str:
    """The last ``lines`` lines of ``path`` ('' if missing)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            text = f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
