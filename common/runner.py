"""Run external commands in one place: argument lists in, checked results out."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Sequence

from .errors import CommandError

log = logging.getLogger(__name__)


def run(
    cmd: Sequence[str],
    *,
    check: bool = True,
    input: str | None = None,
    timeout: float | None = 60,
    cwd: str | os.PathLike | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` (no shell) and return the completed process.

    Raises CommandError (with command, exit code, stdout, stderr) when ``check`` and the
    exit code is non-zero, or when the command cannot be found or times out.
    """
    cmd = [str(c) for c in cmd]
    log.debug("run: %s", " ".join(cmd))
    try:
        proc = subprocess.run(
            cmd,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=cwd,
            env=env,
        )
    except FileNotFoundError as exc:
        raise CommandError(cmd, 127, "", f"not found: {exc.filename}") from exc
    except subprocess.TimeoutExpired as exc:
        raise CommandError(cmd, -1, _text(exc.stdout), f"timed out after {timeout} s") from exc
    if check and proc.returncode != 0:
        raise CommandError(cmd, proc.returncode, proc.stdout, proc.stderr)
    return proc


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data
