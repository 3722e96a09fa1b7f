"""`python -m experiments.sweep`: the seed paper's experiment, cell by cell, into a store.

    python -m experiments.sweep --quick                 # 3 and 5 nodes, ~13 min
    python -m experiments.sweep --config experiments/configs/paper.toml
    python -m experiments.sweep --nodes 3 --rf 1,2,3 --latency 0,20 --loss 0.5 --writes 50
    python -m experiments.sweep --quick --dry-run       # the cells and an estimated duration

Order: one cluster per node count (no restart inside it); one keyspace per RF created once;
for each network setting the emulation is changed at run time and checked once (a short
`emulation verify` of one edge pair, stored with every cell measured under it); then one
cell per RF. Rerunning the same command resumes: completed cells are kept, a cell cut off
by kill -9 or Ctrl-C is measured again, and a cluster a killed sweep left is removed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from common.command import Parser, command, prog
from common.errors import ConfigError
from testbed import TestbedError, argtypes

from .api import Prepared, RunOptions, prepare, run_sweep
from .run.launch import CORES, choose_parallel, choose_stages, stored_cells
from .run.summary import dry_run, dry_run_plan
from .settings.config import (
    CONFIG_DIR,
    DEFAULTS,
    KNOBS,
    SweepConfig,
    flag_of,
    load_toml,
    preset,
    shown_default,
)
from .settings.faults import split_list
from .settings.fields import parse_list, parse_rf

# -- configuration from flags --------------------------------------------------------------


GROUPS = {
    "sweep": "what is measured",
    "ycsb": "YCSB cells (--workload ycsb-*)",
    "testbed": "the testbeds",
    "run": "this command",
}


# How and where this command runs (not what is measured: not in the field table).
RUN_FLAGS: dict[str, dict[str, Any]] = {
    "--parallel": {
        "default": "auto",
        "metavar": "P",
        "help": "testbeds measuring at once (default auto: what the machine's cores and "
        "memory allow, printed; 1: one cell at a time; 3:2,5:1: P per testbed size, each "
        "size group measured as a stage of its own, e.g. your fidelity benchmark's verdicts)",
    },
    "--workers": {
        "metavar": "INVENTORY",
        "help": "spread the grid over the machines of this Ansible inventory (each measures "
        "on testbeds of its own; see docs/sweep.md)",
    },
    "--scheduler": {
        "metavar": "ADDRESS",
        "help": "measure on the workers of this running Dask cluster (tcp://HOST:8786 or "
        "tls://…; workers started with --resources testbed=N; see docs/design/workers.md)",
    },
    "--insecure-scheduler": {
        "action": "store_true",
        "help": "accept --scheduler tcp://… (no TLS: whoever reaches it runs code as root on "
        "its workers) on a network you trust",
    },
    "--worker-timeout": {
        "type": float,
        "metavar": "S",
        "help": "silence after which our scheduler removes a worker and its cells are "
        "re-queued, and a worker cut off from the scheduler takes its testbeds down "
        "(--workers; default 60)",
    },
    "--dry-run": {
        "action": "store_true",
        "help": "print the cells and an estimated duration, run nothing",
    },
    "--verbose": {"action": "store_true", "help": "with --dry-run: each cell's estimate too"},
    "--json": {"action": "store_true", "help": "with --dry-run: the plan as JSON"},
    "--preview": {
        "action": "store_true",
        "help": "first a short run (every node count, RF and loss at the first-pass "
        "latencies, 30 writes a cell) into OUT/preview, with its figures, then the grid",
    },
    "--new-run": {
        "action": "store_true",
        "help": "measure again even if this configuration is stored complete",
    },
}


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog=prog("python -m experiments.sweep"),
        description="Measure Cassandra writes over a grid of node counts, replication "
        "factors, latencies and losses. Lists take 0,20,40 or 0..100..10; every setting "
        "is also a key of a --config file's [sweep] table.",
    )
    p.add_argument(
        "--config",
        metavar="FILE|PRESET",
        help="TOML file with a [sweep] table, or a shipped preset by name (paper, quick, ...)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="preset: 3 and 5 nodes, latency 0/50/100, loss 0.5/7.5, 100 writes; with "
        "--config, the file's [quick] table changes its [sweep] (e.g. ycsb-edge.toml)",
    )
    groups = {key: p.add_argument_group(title) for key, title in GROUPS.items()}
    for name, knob in KNOBS.items():
        flag = flag_of(name)
        if flag is None or not knob.own_flag:
            continue
        kw: dict[str, Any] = {"dest": name, "metavar": knob.metavar}
        if knob.kind is bool:
            kw = {"dest": name, "action": "store_true", "default": None}
        elif not knob.many and knob.kind in (int, float):
            kw["type"] = knob.kind
        text = knob.help + (f" [{'|'.join(knob.choices)}]" if knob.choices else "")
        text += "" if knob.kind is bool else f" (default {shown_default(name)})"
        groups[knob.group].add_argument(flag, help=text.replace("%", "%%"), **kw)
    argtypes.add_node_resource_flags(groups["testbed"])
    for flag, kw in RUN_FLAGS.items():
        groups["run"].add_argument(flag, **kw)
    return p


def config_file(text: str) -> Path:
    """``--config``'s file: a path, else a shipped preset by name (``paper``) or by its
    path in the project (``experiments/configs/paper.toml`` from another directory)."""
    path = Path(text)
    if path.exists():  # a directory or a device: read_toml says what is wrong with it
        return path
    shipped = CONFIG_DIR / (path.name if path.suffix == ".toml" else f"{path.name}.toml")
    by_name = path.parent == Path(".")
    if shipped.is_file() and (by_name or path.parent.parts[-2:] == CONFIG_DIR.parts[-2:]):
        return shipped
    names = ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.toml")))
    raise ConfigError(f"config file not found: {text} (shipped presets, by name: {names})")


def config_from_args(args: argparse.Namespace) -> SweepConfig:
    """Defaults, then --quick, then --config, then flags. ConfigError for bad input."""
    values: dict[str, Any] = {}
    if args.quick and not args.config:
        values.update(preset("quick"))
    if args.config:  # with --quick: the file's [quick] table on top of its [sweep]
        values.update(load_toml(config_file(args.config), quick=args.quick))
    for name, knob in KNOBS.items():
        raw = getattr(args, name, None)
        if raw is None:
            continue
        flag = flag_of(name) or name
        if knob.kind == "rf":  # integers, ranges or k (the node count)
            values[name] = parse_rf(flag, raw)
        elif knob.kind == "fault":  # a partition's groups have commas of their own
            values[name] = tuple(split_list(raw))
        elif knob.many and DEFAULTS[name] is None and raw.strip().lower() == "none":
            values[name] = None
        elif knob.many and knob.kind is str:  # names: a comma-separated list
            values[name] = tuple(x.strip() for x in raw.split(",") if x.strip())
        elif knob.many and isinstance(knob.kind, type):
            values[name] = parse_list(flag, raw, knob.kind)
        else:
            values[name] = str(Path(raw).resolve()) if knob.path and raw else raw
    if getattr(args, "latency_ms", None) is not None and getattr(args, "first_pass", None) is None:
        # a preset's or file's first pass, under latencies given on the command line: the
        # part of it the new grid has (--quick --latency 0,100 measures 0 ms first)
        kept = tuple(x for x in values.get("first_pass") or () if x in values["latency_ms"])
        values["first_pass"] = kept or None
    return SweepConfig.from_dict(values)


def options_from_args(args: argparse.Namespace) -> RunOptions:
    """How and where this command runs, from its "this command" flags (each option is
    the flag of its name: --worker-timeout is worker_timeout)."""
    return RunOptions(**{f.name: getattr(args, f.name) for f in fields(RunOptions)})


def worker_parallel(config: SweepConfig, specs: list) -> dict[str, int]:
    """Testbeds per worker for the estimate: its edgetb_parallel, else what auto gives on
    this machine (a worker's own auto decides on the worker)."""
    auto, _why = choose_parallel(config, config.cells(), None)
    return {s.name: int(s.parallel) if s.parallel != "auto" else auto for s in specs}


# What draws the figures and report while the sweep runs: the command line's choice (the
# engine below it names no analysis module), a process of its own
FIGURES_COMMAND = (sys.executable, "-m", "analysis.plots")


@command("python -m experiments.sweep")
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    try:
        config = config_from_args(args)
        options = options_from_args(args)
        if args.dry_run:
            return _dry_run(args, prepare(config, options, dry_run=True))
        result = run_sweep(config, options, argv=argv, figures=FIGURES_COMMAND)
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return result.exit_code


def _dry_run(args: argparse.Namespace, prepared: Prepared) -> int:
    """The cells and an estimated duration of the sweep (and its preview), nothing run."""
    config, specs = prepared.config, prepared.specs
    machines = worker_parallel(config, specs) if specs else None
    plans = {}
    for label, c in (("preview", prepared.preview), ("sweep", config)):
        if c is not None:
            p, why = choose_parallel(c, c.cells(), prepared.parallel)
            done = frozenset() if args.new_run else stored_cells(c)
            todo = [x for x in c.cells() if x.cell_id not in done]
            staged = None if machines else choose_stages(c, todo, prepared.parallel)
            plans[label] = dry_run_plan(c, p, why, CORES, machines, done, staged)
            if not args.json:
                print(dry_run(c, plans[label], args.verbose))
    if args.json:
        print(json.dumps(plans, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
