"""What the fidelity benchmark found on this machine: the largest P it accepted, per shaper.

``benchmarks/parallel_fidelity.py`` compares cells measured P testbeds at a time with
cells measured one at a time and records its verdict here
($EDGETB_HOME/fidelity.json); ``--parallel auto`` then runs at most that many testbeds
with that shaper. Without a verdict for this machine's shaper and core count, auto uses
the development machine's (``estimate.Costs.max_parallel``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from testbed import state


def path() -> Path:
    return state.home() / "fidelity.json"


def largest_accepted(verdicts: dict[int, bool]) -> int:
    """The largest P such that every P tested up to it was accepted (1 when P=2 failed):
    a P that passed above one that failed is taken for noise, not for a safe setting."""
    best = 1
    for p in sorted(verdicts):
        if not verdicts[p]:
            break
        best = p
    return best


def record(
    shaper: str, cores: int, verdicts: dict[int, bool], grid: str, rule: str, out: Path
) -> int:
    """Store the benchmark's verdicts (P -> accepted) on ``grid`` for ``shaper`` on this
    machine, beside those of other grids (a grid measured again replaces its verdicts);
    returns the largest P that every grid accepted."""
    data = _read()
    entry = data.get(shaper)
    same = isinstance(entry, dict) and entry.get("cores") == cores
    grids = entry.get("grids", {}) if same else {}  # type: ignore[union-attr]
    grids[grid] = {
        "verdicts": {str(p): bool(ok) for p, ok in sorted(verdicts.items())},
        "rule": rule,
        "results": str(out.resolve()),
        "measured": time.strftime("%Y-%m-%d %H:%M", time.localtime()),
    }
    best = min(
        largest_accepted({int(p): ok for p, ok in g["verdicts"].items()}) for g in grids.values()
    )
    data[shaper] = {"max_parallel": best, "cores": cores, "grids": grids}
    target = path()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, target)
    return best


def accepted(shaper: str, cores: int) -> tuple[int, str] | None:
    """(largest accepted P, where it comes from) for ``shaper`` on this machine, or None
    when the benchmark has not run here with this many cores."""
    entry = _read().get(shaper)
    if not isinstance(entry, dict) or entry.get("cores") != cores:
        return None
    best = entry.get("max_parallel")
    if not isinstance(best, int) or best < 1:
        return None
    grids = entry.get("grids") or {}
    when = max((g.get("measured", "?") for g in grids.values()), default="?")
    return best, f"parallel_fidelity.py on this machine, {len(grids)} grid(s), {when}"


def _read() -> dict[str, Any]:
    try:
        data = json.loads(path().read_text())
    except (OSError, ValueError):  # none yet, or damaged: as if the benchmark never ran
        return {}
    return data if isinstance(data, dict) else {}
