"""What measures a run's cells: one interface, two engines. ``LocalEngine`` measures on
this machine's testbeds (``scheduler.Sweep``, P at once); ``remote.dask_cluster.DaskRun``
on Dask workers. ``experiments.api`` drives either the same way, as Hydra's launchers
are driven: it never asks which one it has."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ..plan import estimate, stages
from ..plan.shards import Gate
from ..settings.cells import Cell
from ..settings.config import SweepConfig
from ..store.db import Store
from .launch import CORES, Parallel, choose_stages, learn_from
from .progress import Progress
from .scheduler import Sweep, remove_stale_testbeds


class Engine(Protocol):
    """Measures cells and stores them; ``run`` is called once, ``close`` after it however
    it ended (also when it raised)."""

    intro: str  # where the cells are measured, for the run's first line ("on 2 testbeds ...")
    machines: str  # whose testbeds an interruption takes down: "testbed" or "worker"
    on_cell: Callable[[str], None] | None  # called with each cell id once it is stored

    def remaining_s(self, scale: float) -> float:
        """Seconds left by this engine's own estimate, ``scale`` the measured pace."""
        ...

    def hold(self) -> AbstractContextManager[Any]:
        """Held while the figures are drawn (a testbed's set-up must not share the CPU)."""
        ...

    def run(self, todo: list[Cell]) -> None:
        """Measure ``todo`` (nothing when it is empty); raises on what ends the run."""
        ...

    def close(self) -> None: ...

    def report(self, todo: list[Cell], wall: float, busy: float | None) -> str:
        """The lines a finished run prints on how it was measured."""
        ...


class LocalEngine:
    """This machine's testbeds: P of them at once (``choose_parallel``: the fidelity
    benchmark's verdict, or the user's), their costs learned for the next dry run."""

    machines = "testbed"

    def __init__(
        self,
        config: SweepConfig,
        store: Store,
        run_id: str,
        progress: Progress,
        todo: list[Cell],
        parallel: Parallel,
        say: Callable[[str], None],
    ):
        self.config, self.store, self.run_id, self.say = config, store, run_id, say
        self.stages = choose_stages(config, todo, parallel)
        self.stage = 0  # the stage measuring (``run``)
        self.p = max(s.parallel for s in self.stages)
        self.sweep = Sweep(config, store, run_id, progress, parallel=self.p, cores=CORES)
        self.walls: list[float] = []  # each stage's wall seconds, once it ended
        eta = estimate.fmt_duration(stages.wall_s(self.stages))
        shards = "; each testbed's lines marked [s0], [s1], ..." if self.p > 1 else ""
        many = "s" if self.p > 1 else ""
        if len(self.stages) == 1:
            why = self.stages[0].why
            self.intro = f"on {self.p} testbed{many} at once ({why}{shards}); estimated {eta}"
        else:
            why = stages.summary(self.stages)
            self.intro = (
                f"in {len(self.stages)} stages by testbed size, up to {self.p} testbed{many} "
                f"at once (the fidelity verdict of each size: {why}{shards}); estimated {eta}"
            )
        # "p": the most at once over every invocation of this run (a run with p 1
        # calibrates the CPU per write: a resume at 1 must not make it one)
        before = store.run(run_id).manifest.get("parallel") or {}
        store.update_manifest(
            run_id,
            parallel={
                "p": max(self.p, int(before.get("p") or 0)), "why": why, "cores": CORES,
                "stages": [{"nodes": list(s.nodes), "cells": len(s.cells), "p": s.parallel}
                           for s in self.stages],
            },
        )  # fmt: skip

    @property
    def on_cell(self) -> Callable[[str], None] | None:
        return self.sweep.on_cell

    @on_cell.setter
    def on_cell(self, call: Callable[[str], None] | None) -> None:
        self.sweep.on_cell = call

    def remaining_s(self, scale: float) -> float:
        later = stages.wall_s(self.stages[self.stage + 1 :])  # the model's, from the start
        return self.sweep.remaining_s(scale) + scale * later

    def hold(self) -> AbstractContextManager[Any]:
        gate = self.sweep.gate or Gate(1.0)
        return gate.hold("setup", stop=self.sweep.stop, owner="figures")

    def run(self, todo: list[Cell]) -> None:
        remove_stale_testbeds(self.store, self.say)  # of a killed sweep of these results
        wanted = {c.cell_id for c in todo}
        for i, stage in enumerate(self.stages):  # each stage's testbeds go down at its end
            cells = [c for c in stage.cells if c.cell_id in wanted]
            if not cells:
                continue
            self.stage, self.sweep.parallel = i, stage.parallel
            start = time.monotonic()
            self.sweep.run(cells)
            self.walls.append((time.monotonic() - start) * stage.parallel)

    def close(self) -> None:
        learn_from(self.config, self.store, self.run_id)  # for the next dry run's estimate

    def report(self, todo: list[Cell], wall: float, busy: float | None) -> str:
        total_rtt = self.store.total_rtt_ns(self.run_id) / 1e9
        many = "s" if self.p > 1 else ""
        at_once = f"on {self.p} testbed{many} at once"
        testbed_s = wall * self.p  # the time testbeds could have spent in timed writes
        if len(self.stages) > 1:
            at_once = f"in {len(self.stages)} stages, up to {self.p} testbed{many} at once"
            testbed_s = sum(self.walls) or testbed_s
        return (
            f"\n{len(todo)} cells in {estimate.fmt_duration(wall)} (this process) {at_once}; "
            f"recorded RTTs sum to {total_rtt:.1f} s (efficiency {total_rtt / testbed_s:.2f}: "
            "the testbeds' share of time in timed writes); the machine was "
            f"{100 * (busy or 0):.0f} % busy ({CORES} cores)"
        )
