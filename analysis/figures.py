"""The figures of the analysis, registered once: each kind's name (a pattern), its
caption and its place in the reading order. The report captions and orders by it, and
``analysis.plots`` removes an earlier call's figures by it; a figure drawn under a name
no kind matches fails ``tests/unit/test_analysis.py``.
"""

from __future__ import annotations

import re

# What each figure shows, by its name: a caption a reader can use, not the file name.
FIGURES = (
    (r"rtt_grid_mean", "Mean write RTT against one-way latency, every node count (rows) and "
     "loss (columns) on shared axes: a line per RF with its 95 % CI band (over "
     "repetitions where there are several, else within-run, as the legend says); dotted, "
     "the model's prediction in the RF's colour"),
    (r"rtt_grid_p99", "The 99th percentile of the write RTT against one-way latency, every "
     "node count and loss on shared axes: where retransmissions show first"),
    (r"rtt_n(\d+)_loss([\d.]+)", "Mean write RTT against one-way latency, {0} nodes, {1} % "
     "loss: a line per RF, its band the 95 % CI of the mean (the figure says of what); "
     "dotted, the model's prediction in the RF's colour (the paper's Figures 2 and 3)"),
    (r"paper_(fig\d)_n(\w+)_loss([\d.]+)", "The paper's published curves ({0}, digitized "
     "±3 ms; dashed) beside the measured ones (solid, 95 % CI band), nodes {1}, {2} % loss: "
     "same colour, same curve"),
    (r"rtt_cdf_n(\d+)_loss([\d.]+)", "Every write's RTT at the largest latency measured, {0} "
     "nodes, {1} % loss, as a distribution: a line per RF, p95 and p99 marked. Loss lives "
     "in this tail (retransmissions after a timeout), which a mean hides"),
    (r"high_rf_n(\d+)", "The average RTT of the RFs from 3 up against latency, {0} nodes, a "
     "line per loss (the paper's Figure 4)"),
    (r"phi_vs_excess", "φ of each (nodes, RF) against the RTT that loss added to it: φ "
     "predicts that a higher ack ratio makes loss cost more"),
    (r"levels_n(\d+)_s(\S+)_loss([\d.]+)", "Mean write RTT against the one-way latency "
     "between sites, {0} nodes in sites of {1}, {2} % loss: a panel per RF (replicas in "
     "each site), a line per consistency level with its 95 % CI band; dotted, the model. "
     "LOCAL_ levels wait for the endpoint's site only; EACH_QUORUM and QUORUM pay a WAN "
     "round trip"),
    (r"levels_n(\d+)_loss([\d.]+)", "Mean write RTT against one-way latency, {0} nodes, "
     "{1} % loss: a panel per RF, a line per consistency level with its 95 % CI band; "
     "dotted, the model"),
    (r"ycsb_throughput_threads", "YCSB: throughput against client threads, per workload and "
     "consistency level"),
    (r"ycsb_latency_throughput", "YCSB: p50 and p99 latency of each operation against "
     "throughput"),
    (r"fault_(.+)", "Cell {0}: each write's RTT against its start, errors marked, "
     "acknowledged writes the read-back found lost or short of a replica ringed, the "
     "fault's steps as vertical lines"),
)  # fmt: skip


def _kind(name: str) -> tuple[int, re.Match[str] | None]:
    """The place in FIGURES of the kind ``name`` is, with its match (None: no kind)."""
    for i, (pattern, _) in enumerate(FIGURES):
        if m := re.fullmatch(pattern, name):
            return i, m
    return len(FIGURES), None


def figure_rank(name: str) -> tuple[int, str]:
    """The order a reader meets the figures in: the page-wide grids, the paper's figures,
    the tails, Figure 4, φ, then YCSB and faults (the order of FIGURES)."""
    return _kind(name)[0], name


def caption(name: str) -> str:
    i, m = _kind(name)
    return FIGURES[i][1].format(*m.groups()) if m else name


def is_figure(name: str) -> bool:
    """Whether ``name`` (a file's stem) is one of the analysis' figures."""
    return _kind(name)[1] is not None
