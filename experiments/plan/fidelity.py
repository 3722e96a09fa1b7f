"""What the fidelity benchmark found on this machine: the largest P it accepted, per shaper
and Cassandra build.

``benchmarks/parallel_fidelity.py`` compares cells measured P testbeds at a time with
cells measured one at a time and records its verdict here
($EDGETB_HOME/fidelity.json); ``--parallel auto`` then runs at most that many testbeds
with that shaper and build. Without a verdict for this machine's shaper, build and core
count, auto uses the development machine's (``estimate.Costs.max_parallel``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from common.files import read_json_object, write_file
from testbed import state

# Equivalence (issue 39): a faster way of measuring (P testbeds at once, quiet nodes) is
# accepted when the median over cells of the signed Δ median against the sequential
# reference has a 95 % CI (bootstrap over cells) inside ±EQUIV_MS. A sign test finds any
# shift at all given enough cells; what matters is whether the shift could change a
# conclusion, and the smallest difference the paper's figures resolve between two RFs is
# several ms (docs/measured.md): a shift ten times smaller changes none.
EQUIV_MS = 0.25
BOOTSTRAP = 10_000


def shift(diffs_ms: list[float], seed: int = 0) -> tuple[float, float, float]:
    """The median of the cells' signed Δ median (``diffs_ms``) and its 95 % CI from a
    bootstrap over the cells (seeded: the same cells give the same interval)."""
    d = np.asarray(diffs_ms, dtype=float)
    picks = np.random.default_rng(seed).integers(0, len(d), (BOOTSTRAP, len(d)))
    lo, hi = np.percentile(np.median(d[picks], axis=1), [2.5, 97.5])
    return float(np.median(d)), float(lo), float(hi)


def equivalent(diffs_ms: list[float]) -> bool:
    """Whether the shift's 95 % CI lies inside ±EQUIV_MS."""
    _, lo, hi = shift(diffs_ms)
    return -EQUIV_MS <= lo and hi <= EQUIV_MS


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


def key(shaper: str, build: str = "stock") -> str:
    """The verdicts' entry: the shaper's name for stock nodes (as before builds existed),
    ``SHAPER+BUILD`` otherwise (quiet nodes load the machine differently)."""
    return shaper if build == "stock" else f"{shaper}+{build}"


def record(
    shaper: str,
    cores: int,
    verdicts: dict[int, bool],
    grid: str,
    rule: str,
    out: Path,
    build: str = "stock",
    max_nodes: int | None = None,
) -> int:
    """Store the benchmark's verdicts (P -> accepted) on ``grid`` for ``shaper`` and
    ``build`` on this machine, beside those of other grids (a grid measured again replaces
    its verdicts); returns the largest P that every grid accepted."""
    data = _read()
    entry = data.get(key(shaper, build))
    same = isinstance(entry, dict) and entry.get("cores") == cores
    grids = entry.get("grids", {}) if same else {}  # type: ignore[union-attr]
    grids[grid] = {
        "verdicts": {str(p): bool(ok) for p, ok in sorted(verdicts.items())},
        "rule": rule,
        "results": str(out.resolve()),
        "measured": time.strftime("%Y-%m-%d %H:%M", time.localtime()),
        "max_nodes": max_nodes,  # the grid's largest testbed (``accepted``'s nodes)
    }
    best = _every_grid_accepts(grids)
    data[key(shaper, build)] = {"max_parallel": best, "cores": cores, "grids": grids}
    target = path()
    target.parent.mkdir(parents=True, exist_ok=True)
    write_file(target, json.dumps(data, indent=2) + "\n")
    return best


def accepted(
    shaper: str, cores: int, build: str = "stock", nodes: int | None = None
) -> tuple[int, str] | None:
    """(largest accepted P, where it comes from) for ``shaper`` and ``build`` on this
    machine, or None when the benchmark has not run here with this many cores. With
    ``nodes`` (a sweep's largest testbed), the grids of the fewest nodes that are still
    that many or more decide: a grid of smaller testbeds loads the machine less than the
    sweep will (on stock nodes P=2 passed on 3 nodes, failed on 5), and one of larger
    testbeds more, so its rejection says nothing of smaller ones (on quiet nodes P=2
    passed on 3 nodes and failed on 5: a 3-node sweep runs at 2, a 4- or 5-node one at 1)."""
    entry = _read().get(key(shaper, build))
    if not isinstance(entry, dict) or entry.get("cores") != cores:
        return None
    best = entry.get("max_parallel")
    grids = entry.get("grids") or {}
    size = ""
    if nodes is not None:
        sized = {
            name: g for name, g in grids.items()
            if isinstance(g, dict) and isinstance(g.get("max_nodes"), int)
        }  # fmt: skip
        nearest = nearest_covering([g["max_nodes"] for g in sized.values()], nodes)
        if nearest is None:
            return None
        grids = {name: g for name, g in sized.items() if g["max_nodes"] == nearest}
        best = _every_grid_accepts(grids)
        size = f" of {nearest} nodes"
    if not isinstance(best, int) or best < 1:
        return None
    when = max((g.get("measured", "?") for g in grids.values()), default="?")
    return best, f"parallel_fidelity.py on this machine, {len(grids)} grid(s){size}, {when}"


def default_verdict(
    by_nodes: tuple[tuple[int, int], ...], fallback: int, nodes: int
) -> tuple[int, str]:
    """(largest accepted P, where it comes from) for a sweep whose largest testbed has
    ``nodes`` on a machine with no verdict of its own, from the development machine's
    (``by_nodes``: a grid's largest testbed, the largest P it accepted): the grid of the
    fewest nodes that still covers the sweep decides, as ``accepted`` picks this machine's;
    ``fallback`` where none covers it."""
    nearest = nearest_covering([n for n, _ in by_nodes], nodes)
    grid = f" on {nearest}-node grids" if nearest is not None else ""
    return dict(by_nodes)[nearest] if nearest is not None else fallback, (
        f"the development machine's verdict{grid}: benchmarks/parallel_fidelity.py has not "
        "run here on testbeds this large"
    )


def nearest_covering(sizes: list[int], nodes: int) -> int | None:
    """The fewest nodes among grid ``sizes`` that still cover a sweep's largest testbed
    (``nodes``), None when no grid is that large."""
    covering = [n for n in sizes if n >= nodes]
    return min(covering) if covering else None


def _every_grid_accepts(grids: dict[str, Any]) -> int:
    """The largest P that each of ``grids`` (stored verdicts) accepted."""
    return min(
        largest_accepted({int(p): bool(ok) for p, ok in (g.get("verdicts") or {}).items()})
        for g in grids.values()
    )


def _read() -> dict[str, Any]:
    return read_json_object(path())  # none yet, or damaged: as if the benchmark never ran
