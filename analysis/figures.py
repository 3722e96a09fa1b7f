"""The figures of the analysis, registered once: each drawing function with the kinds
of figure it makes, each kind's names (a pattern), place in the reading order and
caption. ``analysis.plots`` draws by it (``DRAWERS``, in order, where the results hold
what a drawer needs) and removes an earlier call's figures by it; the report captions
and orders by it. A figure drawn under a name no kind matches fails
``tests/unit/test_analysis.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import faults, levels, paper, phi_excess, rtt_figures, ycsb
from .results import Results


@dataclass(frozen=True)
class Kind:
    """A kind of figure: its file names (a pattern), its place in the reading order and
    its caption (``{0}``, ``{1}``: the pattern's groups)."""

    pattern: str
    order: int
    caption: str


@dataclass
class Inputs:
    """What the drawers read, made once by ``analysis.plots.make_all``: the results, the
    output directory, the grid points' statistics, the model's comparisons (None where
    it has nothing to work from) and the YCSB cells (empty where the results hold none)."""

    results: Results
    out: Path
    stats: dict[tuple, dict[str, Any]] = field(default_factory=dict)
    model: dict[str, Any] | None = None
    levels_model: dict[str, Any] | None = None
    ycsb_cells: list[dict[str, Any]] = field(default_factory=list)


Made = list[dict[str, Any]]  # a drawer's figures: [{name, paths, series, ...}]


@dataclass(frozen=True)
class Drawer:
    """One drawing function and the kinds of figure it makes, run when the results hold
    ``needs`` (their cells, levels, ycsb or faults)."""

    name: str
    needs: str
    kinds: tuple[Kind, ...]
    draw: Callable[[Inputs], Made]


# Every figure, once: what draws it, in the order drawn, and what each kind shows (a
# caption a reader can use, not the file name).
DRAWERS = (
    Drawer(
        "rtt_grids",
        "cells",
        (
            Kind(
                "rtt_grid_mean",
                0,
                "Mean write RTT against one-way latency, every node count (rows) and loss "
                "(columns) on shared axes: a line per RF with its 95 % CI band (over "
                "repetitions where there are several, else within-run, as the legend says); "
                "dotted, the model's prediction in the RF's colour",
            ),
            Kind(
                "rtt_grid_p99",
                1,
                "The 99th percentile of the write RTT against one-way latency, every node count "
                "and loss on shared axes: where retransmissions show first",
            ),
        ),
        lambda i: rtt_figures.rtt_grids(i.results, i.out, i.stats, i.model),
    ),
    Drawer(
        "rtt_vs_latency",
        "cells",
        (
            Kind(
                r"rtt_n(\d+)_loss([\d.]+)",
                2,
                "Mean write RTT against one-way latency, {0} nodes, {1} % loss: a line per RF, "
                "its band the 95 % CI of the mean (the figure says of what); dotted, the "
                "model's prediction in the RF's colour (the paper's Figures 2 and 3)",
            ),
        ),
        lambda i: rtt_figures.rtt_vs_latency(i.results, i.out, i.stats, i.model),
    ),
    Drawer(
        "rtt_cdf",
        "cells",
        (
            Kind(
                r"rtt_cdf_n(\d+)_loss([\d.]+)",
                4,
                "Every write's RTT at the largest latency measured, {0} nodes, {1} % loss, as a "
                "distribution: a line per RF, p95 and p99 marked. Loss lives in this tail "
                "(retransmissions after a timeout), which a mean hides",
            ),
        ),
        lambda i: rtt_figures.rtt_cdf(i.results, i.out),
    ),
    Drawer(
        "high_rf",
        "cells",
        (
            Kind(
                r"high_rf_n(\d+)",
                5,
                "The average RTT of the RFs from 3 up against latency, {0} nodes, a line per "
                "loss (the paper's Figure 4)",
            ),
        ),
        lambda i: rtt_figures.high_rf(i.results, i.out),
    ),
    Drawer(
        "phi_vs_excess",
        "cells",
        (
            Kind(
                "phi_vs_excess",
                6,
                "φ of each (nodes, RF) against the RTT that loss added to it: φ predicts that a "
                "higher ack ratio makes loss cost more",
            ),
        ),
        lambda i: phi_excess.phi_vs_excess(i.results, i.out),
    ),
    Drawer(
        "paper",
        "cells",
        (
            Kind(
                r"paper_(fig\d)_n(\w+)_loss([\d.]+)",
                3,
                "The paper's published curves ({0}, digitized ±3 ms; dashed) beside the "
                "measured ones (solid, 95 % CI band), nodes {1}, {2} % loss: same colour, same "
                "curve",
            ),
        ),
        lambda i: paper.figures(i.stats, i.out),
    ),
    Drawer(
        "levels",
        "levels",
        (
            Kind(
                r"levels_n(\d+)_s(\S+)_loss([\d.]+)",
                7,
                "Mean write RTT against the one-way latency between sites, {0} nodes in sites "
                "of {1}, {2} % loss: a panel per RF (replicas in each site), a line per "
                "consistency level with its 95 % CI band; dotted, the model. LOCAL_ levels wait "
                "for the endpoint's site only; EACH_QUORUM and QUORUM pay a WAN round trip",
            ),
            Kind(
                r"levels_n(\d+)_loss([\d.]+)",
                8,
                "Mean write RTT against one-way latency, {0} nodes, {1} % loss: a panel per RF, "
                "a line per consistency level with its 95 % CI band; dotted, the model",
            ),
        ),
        lambda i: levels.figures(i.results.levels, i.out, i.levels_model),
    ),
    Drawer(
        "ycsb",
        "ycsb",
        (
            Kind(
                "ycsb_throughput_threads",
                9,
                "YCSB: throughput against client threads, per workload and consistency level",
            ),
            Kind(
                "ycsb_latency_throughput",
                10,
                "YCSB: p50 and p99 latency of each operation against throughput",
            ),
        ),
        lambda i: ycsb.figures(i.ycsb_cells, i.out),
    ),
    Drawer(
        "faults",
        "faults",
        (
            Kind(
                "fault_(.+)",
                11,
                "Cell {0}: each write's RTT against its start, errors marked, acknowledged "
                "writes the read-back found lost or short of a replica ringed, the fault's "
                "steps as vertical lines",
            ),
        ),
        lambda i: faults.figures(i.results.faults, i.out),
    ),
)
# the kinds in reading order: the page-wide grids, the paper's figures, the tails, Figure
# 4, φ, then sites, YCSB and faults
FIGURES = tuple(sorted((k for d in DRAWERS for k in d.kinds), key=lambda k: k.order))


def _kind(name: str) -> tuple[int, re.Match[str] | None]:
    """The place in FIGURES of the kind ``name`` is, with its match (None: no kind)."""
    for i, kind in enumerate(FIGURES):
        if m := re.fullmatch(kind.pattern, name):
            return i, m
    return len(FIGURES), None


def figure_rank(name: str) -> tuple[int, str]:
    """The order a reader meets the figures in: the page-wide grids, the paper's figures,
    the tails, Figure 4, φ, then YCSB and faults (the order of FIGURES)."""
    return _kind(name)[0], name


def caption(name: str) -> str:
    i, m = _kind(name)
    return FIGURES[i].caption.format(*m.groups()) if m else name


def is_figure(name: str) -> bool:
    """Whether ``name`` (a file's stem) is one of the analysis' figures."""
    return _kind(name)[1] is not None
