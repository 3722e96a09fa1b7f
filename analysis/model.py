"""`python -m analysis.model`: predicted against measured write RTT, and what-if tables.

    python -m analysis.model RESULTS_DIR [--run RUN_ID] [--json] [--no-report]
    python -m analysis.model predict --nodes 5 --rf 1..5 --latency 0..100..10 --loss 7.5 \
        [--profile paper] [--cl LOCAL_QUORUM] [--policy round-robin] [--baseline-ms 5] [--json]

The first prints the comparison of ``analysis.prediction`` and saves it as
RESULTS_DIR/analysis/model.{txt,json}, then refreshes the report. The model itself is
``model.rtt``; this module is only its command line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from common.command import Parser, command, prog
from common.errors import ConfigError
from emulation import links
from experiments.settings.fields import parse_list
from experiments.store.db import check_writable_dir
from model import rtt
from testbed import argtypes
from testbed.topology import MAX_EDGE_NODES, format_sites

from .prediction import (
    compare,
    format_text,
)
from .report import write_report
from .results import command_parser, open_results, save_text_and_json
from .what_if import DEFAULT_BASELINE_MS, format_what_if, plot_what_if, what_if

# -- command line ----------------------------------------------------------------------------


MAX_PREDICT_CELLS = 20_000


def _checked(name: str, values: tuple, low: float, high: float) -> tuple:
    if not values:
        raise ConfigError(f"{name}: no values")
    for v in values:
        if not low <= v <= high:
            raise ConfigError(f"{name}: {v:g} is outside {low:g}..{high:g}")
    return values


def _predict_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog=prog("python -m analysis.model") + " predict",
        description="Predict write RTT for a grid, without any results.",
    )
    p.add_argument("--nodes", default=None, help="node counts, e.g. 3,5 (default 5)")
    p.add_argument(
        "--sites",
        type=argtypes.sites,
        help="edge sites (3x3, 2,3): nodes is their sum, RF is per site, the latency and "
        "loss are the WAN's (profile sites)",
    )
    p.add_argument("--rf", help="replication factors, e.g. 1..5 (default 1..nodes)")
    p.add_argument(
        "--latency", default="0..100..10", help="one-way latencies in ms (default 0..100..10)"
    )
    p.add_argument("--loss", default="7.5", help="loss in %% (default 7.5)")
    p.add_argument(
        "--profile",
        choices=links.PROFILES,
        default=None,
        help="(default paper; sites with --sites)",
    )
    p.add_argument("--links", help="link matrix TOML for --profile file")
    p.add_argument("--cl", default="LOCAL_QUORUM", help="write consistency level")
    p.add_argument("--policy", choices=rtt.POLICIES, default="round-robin")
    p.add_argument(
        "--baseline-ms",
        type=argtypes.number(0, 10_000),
        default=DEFAULT_BASELINE_MS,
        help=f"service time of a write at 0 ms (default {DEFAULT_BASELINE_MS:g})",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="draw the what-if plot into DIR/model_predict.{png,svg,pdf} (default: the "
        "table only; nothing is written)",
    )
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    return p


def _sites_and_profile(args: argparse.Namespace) -> str | None:
    """The sites (formatted) and the profile, checked against --nodes and --links;
    fills in the defaults of --nodes and --profile."""
    sites = format_sites(args.sites) if args.sites else None
    if sites:
        if args.nodes is not None and parse_list("--nodes", args.nodes, int) != (sum(args.sites),):
            raise ConfigError(f"--sites {sites} hold {sum(args.sites)} nodes: drop --nodes")
        args.nodes = str(sum(args.sites))
        args.profile = args.profile or "sites"
        if args.profile not in ("sites", "file"):
            raise ConfigError(f"--sites shapes with profile sites or file, not {args.profile}")
    elif args.profile == "sites":
        raise ConfigError("--profile sites needs --sites (e.g. 3x3)")
    for flag, given in (("--nodes", args.nodes), ("--rf", args.rf)):
        if given is not None and not given.strip():
            raise ConfigError(f"{flag} is empty: give values (e.g. {flag} 3,5) or leave it out")
    args.nodes = args.nodes or "5"
    args.profile = args.profile or "paper"
    if args.profile == "file" and not args.links:
        raise ConfigError("--profile file needs --links FILE")
    if args.links and args.profile != "file":  # the sweep's rule: never silently ignored
        raise ConfigError(f"--links is only used with --profile file, not {args.profile}")
    return sites


def _grid(args: argparse.Namespace) -> tuple[tuple, tuple, tuple, tuple]:
    """nodes, RFs, latencies and losses, each within its bounds, the grid within
    MAX_PREDICT_CELLS (before any cell is computed: ~1 ms each, jitter far more)."""
    nodes = _checked("--nodes", parse_list("--nodes", args.nodes, int), 1, MAX_EDGE_NODES)
    rfs = (
        _checked("--rf", parse_list("--rf", args.rf, int), 1, MAX_EDGE_NODES)
        if args.rf
        else tuple(range(1, max(nodes) + 1))
    )
    lats = _checked(
        "--latency", parse_list("--latency", args.latency, float), 0, links.MAX_DELAY_MS
    )
    losses = _checked("--loss", parse_list("--loss", args.loss, float), 0, 100)
    size = len(nodes) * len(rfs) * len(lats) * len(losses)
    if size > MAX_PREDICT_CELLS:  # before any is computed: ~1 ms each, jitter far more
        raise ConfigError(
            f"the grid has {size} cells, more than {MAX_PREDICT_CELLS}: "
            f"use fewer --nodes, --rf, --latency or --loss values"
        )
    return nodes, rfs, lats, losses


def _predict_main(argv: list[str]) -> int:
    args = _predict_parser().parse_args(argv)
    sites = _sites_and_profile(args)
    out = Path(args.out) if args.out else None
    if out is not None:
        check_writable_dir(out, "--out")
    nodes, rfs, lats, losses = _grid(args)
    rows = what_if(
        nodes,
        rfs,
        lats,
        losses,
        profile=args.profile,
        cl=args.cl,
        policy=args.policy,
        baseline_ms=args.baseline_ms,
        links_file=args.links,
        sites=sites,
    )
    if not rows:
        raise ConfigError(
            f"no cell: every RF is above every node count or below the {args.cl} acks"
        )
    if args.json:
        print(json.dumps({"cells": rows}, indent=1))
        return 0
    print(format_what_if(rows, args.baseline_ms))
    if out is None:
        print("(--out DIR draws this table as a plot)")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    paths = plot_what_if(rows, out / "model_predict")
    print(f"plot: {', '.join(str(x) for x in paths)}")
    return 0


@command("python -m analysis.model")
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["predict"]:
        return _predict_main(argv[1:])
    p = command_parser(
        "analysis.model",
        "Measured write RTT against the model's prediction, cell by cell "
        "('edgetb model predict --help': a what-if table without results).",
    )
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    results = open_results(args)
    data = compare(results)
    text = format_text(data)
    txt, js = save_text_and_json(results.output_dir, "model", text, data)
    if args.json:
        print(json.dumps(data, indent=1))
    else:
        print(results.describe())
        print(text)
        print(f"saved: {txt}, {js} ({len(data['cells'])} cells in {time.monotonic() - t0:.1f} s)")
    if not args.no_report:
        path = write_report(results)
        if not args.json:
            print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
