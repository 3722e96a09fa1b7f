"""`python -m experiments.sweep`: the seed paper's experiment, cell by cell, into a store.

    python -m experiments.sweep --quick                 # 3 and 5 nodes, ~15 min
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
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from testbed import TestbedError, argtypes
from testbed.command import command, prog
from testbed.errors import ConfigError
from testbed.subnets import pool_from

from . import estimate
from .cluster import DaskRun, probe_scheduler, scheduler_security
from .config import (
    DEFAULTS,
    KNOBS,
    SweepConfig,
    flag_of,
    load_toml,
    preset,
    shown_default,
)
from .faults import split_list
from .fields import parse_list, parse_rf
from .figures import Figures
from .fleet import load_workers
from .launch import (
    CORES,
    calibrate_from,
    choose_parallel,
    cpu_busy,
    cpu_times,
    enter_sweep,
    learn_from,
    leave_sweep,
    lock_results,
    parse_parallel,
    preflight,
    sharing_warning,
    stored_cells,
)
from .manifest import static_manifest
from .plan import Gate, Stopped
from .progress import Progress
from .scheduler import Sweep, remove_stale_testbeds
from .store import DB_NAME, Store, StoreFullError, check_store_file, check_writable_dir
from .summary import dry_run, dry_run_plan, summary_table

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
        "memory allow, printed; 1: one cell at a time)",
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
    p = argparse.ArgumentParser(
        prog=prog("python -m experiments.sweep"),
        description="Measure Cassandra writes over a grid of node counts, replication "
        "factors, latencies and losses. Lists take 0,20,40 or 0..100..10; every setting "
        "is also a key of a --config file's [sweep] table.",
    )
    p.add_argument("--config", metavar="FILE", help="TOML file with a [sweep] table")
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


def config_from_args(args: argparse.Namespace) -> SweepConfig:
    """Defaults, then --quick, then --config, then flags. ConfigError for bad input."""
    values: dict[str, Any] = {}
    if args.quick and not args.config:
        values.update(preset("quick"))
    if args.config:  # with --quick: the file's [quick] table on top of its [sweep]
        values.update(load_toml(args.config, quick=args.quick))
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


def check_workers(args: argparse.Namespace, config: SweepConfig) -> list | None:
    """--workers: its inventory's workers (ConfigError naming every problem); --scheduler:
    no workers of ours ([]); else None (this machine measures)."""
    if args.worker_timeout is not None and not args.workers:
        raise ConfigError("--worker-timeout needs --workers")
    if args.scheduler and args.workers:
        raise ConfigError("--scheduler and --workers exclude each other")
    if args.scheduler:
        if not re.fullmatch(r"(tcp|tls)://[\w.:\[\]-]+:\d{1,5}", args.scheduler):
            raise ConfigError(f"--scheduler must be tcp://HOST:PORT or tls://HOST:PORT, got "
                              f"{args.scheduler!r}")  # fmt: skip
        if config.backend == "hosts":
            raise ConfigError("--scheduler runs testbeds on each worker: not with --backend hosts")
        args.security = scheduler_security(args.scheduler, args.insecure_scheduler)
        if not args.dry_run:  # before a run is opened: nothing in the results when it fails
            probe_scheduler(args.scheduler, args.security)
        return []
    if not args.workers:
        return None
    if config.backend == "hosts":
        raise ConfigError("--workers runs testbeds on each worker: not with --backend hosts")
    if str(args.parallel).strip().lower() != "auto":
        raise ConfigError("with --workers, set edgetb_parallel per worker in the inventory")
    if args.worker_timeout is not None and not 15 <= args.worker_timeout <= 3600:
        raise ConfigError(f"--worker-timeout must be 15..3600 s, got {args.worker_timeout:g}")
    return load_workers(args.workers)


def worker_parallel(config: SweepConfig, specs: list) -> dict[str, int]:
    """Testbeds per worker for the estimate: its edgetb_parallel, else what auto gives on
    this machine (a worker's own auto decides on the worker)."""
    auto, _why = choose_parallel(config, config.cells(), None)
    return {s.name: int(s.parallel) if s.parallel != "auto" else auto for s in specs}


@command("python -m experiments.sweep")
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    try:
        config = config_from_args(args)
        check_writable_dir(config.out, "--out")
        if (Path(config.out) / DB_NAME).exists():
            check_store_file(Path(config.out) / DB_NAME)
        parallel = parse_parallel(args.parallel, config)
        pool_from(config.subnet_pool)  # $EDGETB_SUBNET_POOL too: named before a run exists
        specs = check_workers(args, config)
        calibrate_from(config)
        preview = config.preview() if args.preview else None
        if preview is not None:
            check_writable_dir(preview.out, "--out")
            if (Path(preview.out) / DB_NAME).exists():
                check_store_file(Path(preview.out) / DB_NAME)
        if args.dry_run:
            machines = worker_parallel(config, specs) if specs else None
            plans = {}
            for label, c in (("preview", preview), ("sweep", config)):
                if c is not None:
                    p, why = choose_parallel(c, c.cells(), parallel)
                    done = frozenset() if args.new_run else stored_cells(c)
                    plans[label] = dry_run_plan(c, p, why, CORES, machines, done)
                    if not args.json:
                        print(dry_run(c, plans[label], args.verbose))
            if args.json:
                print(json.dumps(plans, indent=1))
            return 0
        if specs is None:
            preflight(config)
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        owner = lock_results(Path(config.out))  # before the preview: OUT may be in use
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    entry, others = enter_sweep() if specs is None else (None, [])  # measures here
    if (warning := sharing_warning(others)) is not None:
        say(warning)
    try:
        return _run(args, argv, config, parallel, specs, preview, owner)
    except KeyboardInterrupt:  # between runs (the preview's figures): nothing to tear down
        say("interrupted")
        return 130
    finally:
        leave_sweep(entry)
        owner.release()


def _run(args, argv, config, parallel, specs, preview, owner) -> int:
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    if preview is not None:
        say(
            f"preview first: {len(preview.cells())} cells of {preview.writes} writes "
            f"into {preview.out}"
        )
        code = execute(args, argv, preview, parallel, specs, new_run=False)
        if code != 0:
            return code
        plots = subprocess.run(
            [sys.executable, "-m", "analysis.plots", preview.out], capture_output=True, text=True
        )
        if plots.returncode == 0:
            where = Path(preview.out)
            say(f"preview figures: {where / 'analysis'}, {where / 'report.html'}")
        else:
            say(f"preview figures failed: {plots.stderr.strip()[-500:]}")
        calibrate_from(config)
    return execute(args, argv, config, parallel, specs, new_run=args.new_run, owner=owner)


def execute(args, argv, config: SweepConfig, parallel, specs, *, new_run: bool, owner=None) -> int:
    """Measure ``config``'s grid into its results directory (resuming its run); ``owner``:
    the directory's lock, when the caller holds it already."""
    if owner is None:
        try:
            owner = lock_results(Path(config.out))
        except TestbedError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    store = Store(config.out)
    try:
        opened = _open_run(store, config, argv, new_run)
        return 0 if opened is None else _measure(args, config, store, *opened, parallel, specs)
    finally:
        store.close()
        owner.release()


def _open_run(store: Store, config: SweepConfig, argv, new_run: bool) -> tuple[str, bool] | None:
    """The run to measure into and whether it is resumed: the configuration's unfinished
    one, else a new one; None (its summary printed) when it is complete and ``new_run``
    is not set."""
    fingerprint = config.fingerprint()
    latest = store.latest_run(fingerprint)
    if latest is not None and latest.status == "complete" and not new_run:
        print(
            f"run {latest.run_id} of this configuration is already complete in "
            f"{config.out} ({len(config.cells())} cells); --new-run measures it again"
        )
        print(summary_table(store, latest.run_id))
        return None
    if latest is not None and latest.status != "complete" and not new_run:
        store.set_status(latest.run_id, "running")
        return latest.run_id, True
    run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + fingerprint[:6]
    store.begin_run(
        run_id, fingerprint, config.name, config.to_dict(), static_manifest(config, argv)
    )
    return run_id, False


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _measure(
    args, config: SweepConfig, store: Store, run_id: str, resumed: bool, parallel, specs
) -> int:
    """The cells of ``run_id`` not stored yet, on this machine's testbeds or on Dask
    workers (``specs``); the run's status set however it ends; the exit code."""
    cells = config.cells()
    done = store.done_cells(run_id)
    todo = [c for c in cells if c.cell_id not in done]
    progress = Progress(len(cells), len(done), lambda scale: engine.remaining_s(scale))
    remote = specs is not None
    if remote:
        engine: Any = DaskRun(
            config, store, run_id, progress, specs, args.scheduler, args.worker_timeout
        )
        engine.security = getattr(args, "security", None)
        hold, intro, p = nullcontext, engine.intro, 0
    else:
        engine, hold, intro, p = _local_engine(config, store, run_id, progress, parallel, todo)
    _say(
        f"run {run_id} ({config.name}): {len(cells)} cells, {len(done)} stored, "
        f"{len(todo)} to measure {intro}; results in {Path(config.out).resolve()}"
        + (" (resumed)" if resumed else "")
    )
    figures = Figures(config, run_id, done, progress.note, hold=hold)
    engine.on_cell = figures.cell_stored
    t0, cpu0 = time.monotonic(), cpu_times()
    # "failed" unless the loop finishes: an unexpected exception must not leave the run
    # marked complete, or rerunning would not resume it.
    status, code, problem = "failed", 0, ""
    try:
        if not remote:
            remove_stale_testbeds(store, _say)
        if todo:
            engine.run(todo)
        figures.finish()
        status = "complete"
    except (KeyboardInterrupt, Stopped):
        status, code = "interrupted", 130
        problem = f"interrupted: every {'worker' if remote else 'testbed'}'s testbeds are down. "
    except TestbedError as exc:
        status, code, problem = "failed", 1, f"error: {exc}\n"
    finally:
        figures.close()
        progress.close()
        if remote:
            engine.close()
        try:
            store.set_status(run_id, status)
        except StoreFullError as full:
            status, code, problem = "failed", 1, f"error: {full}\n"
        if not remote:  # what this machine's testbeds took, for the next dry run
            learn_from(config, store, run_id)
    if problem:
        _say(
            f"\n{problem}{len(store.done_cells(run_id))} of {len(cells)} cells stored; "
            f"rerun the same command to resume."
        )
    if code == 0:
        _report(config, store, run_id, todo, time.monotonic() - t0, cpu0, p, engine, remote)
    return code


def _report(config, store, run_id, todo, wall: float, cpu0, p: int, engine, remote: bool) -> None:
    """What a finished run measured, how long it took, where its results are."""
    busy = cpu_busy(cpu0, cpu_times())
    store.update_manifest(run_id, wall_s=round(wall, 1), cpu_util=busy)
    print(summary_table(store, run_id))
    print(
        engine.report(todo, wall) if remote else _local_report(store, run_id, todo, wall, p, busy)
    )
    print(f"results: {store.path.resolve()} (run {run_id})")
    print(f"export:  python -m experiments.export {config.out} --format csv")


def _local_engine(config: SweepConfig, store: Store, run_id: str, progress, parallel, todo):
    """The engine of this machine's testbeds, how figures wait their turn, its intro, P."""
    p, why = choose_parallel(config, todo, parallel)
    sweep = Sweep(config, store, run_id, progress, parallel=p, cores=CORES)
    hold = lambda: (sweep.gate or Gate(1.0)).hold("setup", stop=sweep.stop, owner="figures")  # noqa: E731
    eta = estimate.fmt_duration(estimate.wall_s(config, todo, p, CORES))
    intro = f"on {p} testbed{'s' if p > 1 else ''} at once ({why}); estimated {eta}"
    store.update_manifest(run_id, parallel={"p": p, "why": why, "cores": CORES})
    return sweep, hold, intro, p


def _local_report(store: Store, run_id: str, todo, wall: float, p: int, busy) -> str:
    total_rtt = store.total_rtt_ns(run_id) / 1e9
    return (
        f"\n{len(todo)} cells in {estimate.fmt_duration(wall)} (this process) on {p} "
        f"testbed{'s' if p > 1 else ''} at once; recorded RTTs sum to {total_rtt:.1f} s "
        f"(efficiency {total_rtt / (wall * p):.2f}); the machine was "
        f"{100 * (busy or 0):.0f} % busy ({CORES} cores)"
    )


if __name__ == "__main__":
    sys.exit(main())
