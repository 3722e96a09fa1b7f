"""A sweep of several testbed sizes in stages, each at the P the fidelity benchmark
accepted for its own size.

The benchmark's verdicts are per testbed size (quiet nodes on the development machine:
P=2 on 3 nodes, 1 on 5). ``--parallel auto`` used to take the verdict of a sweep's
largest testbed for all of its cells, so the paper grid's 3-node third ran one testbed
at a time. Here the node counts whose verdicts differ are measured in stages of their
own: during a stage only testbeds of its sizes are up, as the benchmark measured them,
at the P that ``estimate.auto_parallel`` picks for them. A first pass stays first: the
stages are its groups of node counts, then the rest's (one more bring-up per group).
The staged plan is taken only where the model says it ends a minute or more sooner.
``--parallel 3:2,5:1`` asks for the stages by P per testbed size instead (``asked``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..settings.cells import Cell
from ..settings.config import SweepConfig
from . import estimate, fidelity

Verdict = tuple[int, str]  # (largest accepted P, where it comes from)


@dataclass(frozen=True)
class Stage:
    """Cells measured together, at most ``parallel`` testbeds at once (``why``), in
    ``estimated_s`` by the model (``estimate.wall_s``, computed once)."""

    cells: tuple[Cell, ...]
    parallel: int
    why: str
    estimated_s: float

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(sorted({c.nodes for c in self.cells}))

    @property
    def label(self) -> str:
        n = self.nodes
        if n == (1,):
            return "1 node"
        return f"{n[0]} nodes" if len(n) == 1 else f"{'/'.join(map(str, n))} nodes"


def summary(stages: Sequence[Stage]) -> str:
    """Each stage's sizes, cells and P, in order."""
    return "; ".join(f"{s.label}, {len(s.cells)} cells: P={s.parallel}" for s in stages)


def measured_at(
    config: SweepConfig, cells: Sequence[Cell], parallel: int, why: str, cores: int
) -> Stage:
    """``cells`` as one stage at ``parallel``, with the model's time for it."""
    return Stage(tuple(cells), parallel, why, estimate.wall_s(config, list(cells), parallel, cores))


def wall_s(stages: Sequence[Stage]) -> float:
    """The model's wall time of ``stages`` one after another (each starts with no
    testbed up: the previous one's go down)."""
    return sum(s.estimated_s for s in stages)


def cap(nodes: int, accepted: Callable[[int], Verdict | None]) -> Verdict:
    """The fidelity verdict for testbeds of ``nodes``: this machine's, else the
    development machine's."""
    costs = estimate.COSTS
    return accepted(nodes) or fidelity.default_verdict(
        costs.parallel_by_nodes, costs.max_parallel, nodes
    )


def auto(
    config: SweepConfig,
    cells: Sequence[Cell],
    *,
    cores: int,
    total_mb: float,
    used_mb: float,
    accepted: Callable[[int], Verdict | None],
) -> list[Stage]:
    """The stages of ``cells`` for ``--parallel auto``: one stage at the largest
    testbed's verdict, or, where testbed sizes have different verdicts and that ends
    first by the model, a stage per group of sizes with the same verdict (most testbeds
    at once first) within each phase."""

    def choose(part: list[Cell]) -> Stage:
        nodes = max(c.nodes for c in part)
        p, why = estimate.auto_parallel(
            config, part, cores=cores, total_mb=total_mb, used_mb=used_mb,
            accepted=accepted(nodes),
        )  # fmt: skip
        return measured_at(config, part, p, why, cores)

    if not cells:
        return []
    single = [choose(list(cells))]
    caps = {n: cap(n, accepted)[0] for n in {c.nodes for c in cells}}
    if len(set(caps.values())) < 2:
        return single
    staged = grouped(config, cells, caps, choose)
    if wall_s(single) - wall_s(staged) >= 60:  # a minute
        return staged
    return single


def asked(
    config: SweepConfig, cells: Sequence[Cell], per_size: Mapping[int, int], cores: int
) -> list[Stage]:
    """The stages of ``cells`` for ``--parallel N:P,...``: a stage per group of testbed
    sizes given the same P, taken as asked (no model, no 60 s rule)."""

    def choose(part: list[Cell]) -> Stage:
        p = per_size[part[0].nodes]  # one P per group
        return measured_at(config, part, p, "as asked for its testbed size", cores)

    return grouped(config, cells, per_size, choose)


def grouped(
    config: SweepConfig,
    cells: Sequence[Cell],
    caps: Mapping[int, int],
    choose: Callable[[list[Cell]], Stage],
) -> list[Stage]:
    """A stage (``choose``) per group of node counts with the same cap in ``caps``, most
    testbeds at once first, within each phase (a first pass stays first)."""
    sizes = sorted({c.nodes for c in cells})
    levels = sorted({caps[n] for n in sizes}, reverse=True)
    groups = [{n for n in sizes if caps[n] == k} for k in levels]
    return [
        choose(part)
        for phase in sorted({config.phase(c) for c in cells})
        for group in groups
        if (part := [c for c in cells if c.nodes in group and config.phase(c) == phase])
    ]
