"""Processes this tool started, ended by PID and only while they are still the same process
(a marker on their command line): never by name, never a process of someone else."""

from __future__ import annotations

import os
import signal
import time


def pid_alive(pid: int, marker: str | None = None) -> bool:
    """Whether ``pid`` runs (not a zombie) and, if ``marker`` is given, carries it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        if state in ("Z", "X"):
            return False
        if marker is None:
            return True
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return marker.encode() in f.read()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def terminate(pid: int, marker: str | None = None, timeout_s: float = 5.0) -> None:
    """SIGTERM ``pid`` if it runs (and carries ``marker``), SIGKILL it after ``timeout_s``;
    returns once it is gone."""
    if not pid_alive(pid, marker):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid, marker) and time.monotonic() < deadline:
        time.sleep(0.02)
    if pid_alive(pid, marker):
        os.kill(pid, signal.SIGKILL)
        while pid_alive(pid, marker):
            time.sleep(0.02)
