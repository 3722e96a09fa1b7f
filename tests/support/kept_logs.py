"""Node logs of a test session's failed runs outlive the session: a testbed keeps them in
``$EDGETB_HOME/logs/<run>`` when its bring-up or a sweep fails, and the session's home is
a temporary directory removed at its end, which took them with it (a failed VM sweep in
CI named logs that were gone by the time anyone looked). At the end they move to
``~/.edgetb/test-logs/<session>``; the newest ``KEEP`` sessions' are kept."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

KEEP = 10
TEST_LOGS = Path.home() / ".edgetb" / "test-logs"  # where both outlive the session
SUITE_PREFIX = "suite-"  # make test's outputs there (tests/support/suite.py)


def keep_logs(home: Path, into: Path, keep: int = KEEP) -> Path | None:
    """Move ``home``'s ``logs`` (if it holds any) to ``into/<home's name>``, then drop all
    but the ``keep`` newest directories of ``into``; where they went, or None."""
    logs = home / "logs"
    if not logs.is_dir() or not any(logs.iterdir()):
        return None
    into.mkdir(parents=True, exist_ok=True, mode=0o700)
    target = into / home.name
    shutil.move(str(logs), str(target))
    # test sessions' node logs only: make test's outputs (suite-*) are pruned on their own
    prune(into, keep, lambda p: not p.name.startswith(SUITE_PREFIX))
    return target


def prune(into: Path, keep: int, which: Callable[[Path], bool]) -> None:
    """Drop all but the ``keep`` newest directories of ``into`` that ``which`` picks."""
    dirs = [p for p in into.iterdir() if p.is_dir() and not p.is_symlink() and which(p)]
    dirs.sort(key=lambda p: p.stat().st_mtime)
    for old in dirs[: max(0, len(dirs) - keep)]:
        shutil.rmtree(old, ignore_errors=True)
