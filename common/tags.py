"""The tag every process a run starts carries (``edgetb.run=<run id>:<host>`` as a whole
argument), and finding those processes by it in /proc."""

from __future__ import annotations

import os
import re

from .procs import pid_alive

# The tag as a whole argument: JVMs carry -Dedgetb.run=<run>:<host>, the gateway VM
# `-name guest=edgetb.run=<run>:gateway`, the host shaper `--tag=edgetb.run=<run>:shaper`,
# SSH a ControlPath ending in it (and a connection master retitles itself
# "ssh: <control path> [mux]").
TAG_RES = (
    re.compile(
        rb"(?:-Dedgetb\.run=|guest=edgetb\.run=|--tag=edgetb\.run=)([0-9a-f]{6}):[a-z][a-z0-9]{0,11}"
    ),
    re.compile(rb"(?:ControlPath=|ssh: )/\S*/edgetb\.run=([0-9a-f]{6}):\S+(?: \[mux\])?"),
)


def tag_of(cmdline: bytes) -> str | None:
    """The run id a process's command line (NUL-separated) is tagged with, else None."""
    for arg in cmdline.split(b"\0"):
        for pattern in TAG_RES:
            match = pattern.fullmatch(arg)
            if match:
                return match.group(1).decode()
    return None


def tagged_processes() -> dict[int, str]:
    """PID -> run id of every live process carrying the testbed tag as an argument."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        run_id = tag_of(cmdline)
        if run_id is not None and pid_alive(int(entry)):
            found[int(entry)] = run_id
    return found
