"""The sweep as a Python call: what `python -m experiments.sweep` runs after its flags.

    from experiments import SweepConfig, run_sweep

    config = SweepConfig.from_dict({"nodes": [3], "rf": [1, 3], "latency_ms": [0, 20],
                                    "loss_pct": [0.5], "writes": 50, "out": "results"})
    result = run_sweep(config)             # measures, resumes, stores; progress on stderr
    # figures and report as the command draws them (its own process, lowest priority):
    # run_sweep(config, figures=[sys.executable, "-m", "analysis.plots"])
    if result.ok:
        from analysis.results import frame
        cells = frame(result.out, result.run_id)   # one row per cell (pandas)

``SweepConfig`` is *what* is measured (every key of a ``--config`` file's ``[sweep]``
table, checked when it is made); ``RunOptions`` is *how and where* (testbeds at once,
other machines, a rerun): the two groups of the command line's flags. Bad input raises
``ConfigError`` (one line) before anything on the system changes; a sweep that starts
and then fails or is interrupted returns its status and exit code, its stored cells kept
for a rerun to resume (docs/api.md).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from common import extras
from common.errors import ConfigError
from testbed import TestbedError
from testbed.backends import capabilities
from testbed.subnets import pool_from

from .plan.shards import Stopped
from .remote.dask_cluster import DaskRun, probe_scheduler, scheduler_security
from .remote.fleet import load_workers
from .run.engine import Engine, LocalEngine
from .run.figures import Figures
from .run.launch import (
    Parallel,
    calibrate_from,
    cpu_busy,
    cpu_times,
    enter_sweep,
    leave_sweep,
    lock_results,
    parse_parallel,
    preflight,
    sharing_warning,
)
from .run.manifest import static_manifest
from .run.progress import Progress
from .run.summary import summary_table
from .settings.config import SweepConfig
from .store.db import DB_NAME, Store, StoreFullError, check_store_file, check_writable_dir


@dataclass(frozen=True)
class RunOptions:
    """How and where a sweep runs (the command line's "this command" flags); not part of
    the configuration's fingerprint."""

    parallel: int | str = "auto"  # testbeds at once: "auto", P >= 1 or "3:2,5:1" (per size)
    workers: str | None = None  # an Ansible inventory of machines to measure on
    scheduler: str | None = None  # a running Dask scheduler's tls:// (or tcp://) address
    insecure_scheduler: bool = False  # accept a tcp:// scheduler
    worker_timeout: float | None = None  # seconds of silence before a worker is dropped
    preview: bool = False  # a short run of the grid first, into OUT/preview
    new_run: bool = False  # measure again even if this configuration is stored complete


@dataclass(frozen=True)
class SweepResult:
    """How a sweep ended: ``status`` is the run's ("complete", "interrupted", "failed"),
    or "already complete" when nothing was measured; ``exit_code`` the command's."""

    out: Path
    run_id: str | None
    status: str
    exit_code: int

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class Prepared:
    """A sweep checked and ready: its testbeds at once (None: auto), its workers (None:
    this machine; []: a Dask scheduler's), the scheduler's security, its preview."""

    config: SweepConfig
    options: RunOptions
    parallel: Parallel
    specs: list | None
    security: Any
    preview: SweepConfig | None
    figures: tuple[str, ...] | None = None  # the command that draws them (None: none)


def check_workers(options: RunOptions, config: SweepConfig, *, probe: bool = True):
    """``options.workers``: its inventory's workers (ConfigError naming every problem);
    ``options.scheduler``: no workers of ours ([]), and the scheduler's security; else
    None (this machine measures). ``probe``: reach the scheduler now (not in a dry run)."""
    if options.worker_timeout is not None and not options.workers:
        raise ConfigError("--worker-timeout needs --workers")
    if options.scheduler and options.workers:
        raise ConfigError("--scheduler and --workers exclude each other")
    if options.scheduler or options.workers:
        extras.require("remote", "--scheduler" if options.scheduler else "--workers")
    if options.scheduler:
        if not re.fullmatch(r"(tcp|tls)://[\w.:\[\]-]+:\d{1,5}", options.scheduler):
            raise ConfigError(f"--scheduler must be tcp://HOST:PORT or tls://HOST:PORT, got "
                              f"{options.scheduler!r}")  # fmt: skip
        if not capabilities(config.backend).owns_hosts:
            raise ConfigError(
                f"--scheduler runs testbeds on each worker: not with --backend {config.backend}"
            )
        security = scheduler_security(options.scheduler, options.insecure_scheduler)
        if probe:  # before a run is opened: nothing in the results when it fails
            probe_scheduler(options.scheduler, security)
        return [], security
    if not options.workers:
        return None, None
    if not capabilities(config.backend).owns_hosts:
        raise ConfigError(
            f"--workers runs testbeds on each worker: not with --backend {config.backend}"
        )
    if str(options.parallel).strip().lower() != "auto":
        raise ConfigError("with --workers, set edgetb_parallel per worker in the inventory")
    if options.worker_timeout is not None and not 15 <= options.worker_timeout <= 3600:
        raise ConfigError(f"--worker-timeout must be 15..3600 s, got {options.worker_timeout:g}")
    return load_workers(options.workers), None


def prepare(config: SweepConfig, options: RunOptions, *, dry_run: bool = False) -> Prepared:
    """Every check a sweep makes before it changes anything (ConfigError, one line):
    the results directory and store, --parallel, the subnet pool, the workers or the
    scheduler, the cost model, the preview's directory, and (unless ``dry_run``) what
    measuring here needs (root, the shaper's tools)."""
    _check_out(config.out)
    parallel = parse_parallel(str(options.parallel), config)
    pool_from(config.subnet_pool)  # $EDGETB_SUBNET_POOL too: named before a run exists
    specs, security = check_workers(options, config, probe=not dry_run)
    calibrate_from(config)
    preview = config.preview() if options.preview else None
    if preview is not None:
        _check_out(preview.out)
    if specs is None and not dry_run:
        preflight(config)
    return Prepared(config, options, parallel, specs, security, preview)


def _check_out(out: str) -> None:
    check_writable_dir(out, "--out")
    if (Path(out) / DB_NAME).exists():
        check_store_file(Path(out) / DB_NAME)


def run_sweep(
    config: SweepConfig,
    options: RunOptions | None = None,
    *,
    argv: Sequence[str] = (),
    say: Callable[[str], None] | None = None,
    figures: Sequence[str] | None = None,
) -> SweepResult:
    """Measure ``config``'s grid into ``config.out`` (resuming its unfinished run), on
    this machine's testbeds, or on ``options``' workers; ``argv``: the command line kept
    in the run's manifest; ``say``: where progress goes (stderr); ``figures``: the
    command that draws the figures and report of ``OUT --run RUN`` while the sweep runs
    and at its end (the command line gives ``python -m analysis.plots``; None: none
    drawn). ConfigError before anything changes for bad input or a results directory
    another sweep holds."""
    options = options or RunOptions()
    prepared = replace(prepare(config, options), figures=tuple(figures) if figures else None)
    owner = lock_results(Path(config.out))  # before the preview: OUT may be in use
    entry, others = enter_sweep() if prepared.specs is None else (None, [])  # measures here
    say = say or _say
    if (warning := sharing_warning(others)) is not None:
        say(warning)
    try:
        return _run(prepared, list(argv), owner, say)
    except KeyboardInterrupt:  # between runs (the preview's figures): nothing to tear down
        say("interrupted")
        return SweepResult(Path(config.out), None, "interrupted", 130)
    finally:
        leave_sweep(entry)
        owner.release()


def _run(prepared: Prepared, argv: list[str], owner, say) -> SweepResult:
    preview, config = prepared.preview, prepared.config
    if preview is not None:
        say(f"preview first: {len(preview.cells())} cells of {preview.writes} writes "
            f"into {preview.out}")  # fmt: skip
        result = execute(prepared, preview, argv, new_run=False)
        if not result.ok:
            return result
        if prepared.figures is not None:
            _preview_figures(prepared.figures, Path(preview.out), say)
        calibrate_from(config)
    return execute(prepared, config, argv, new_run=prepared.options.new_run, owner=owner)


def _preview_figures(command: Sequence[str], out: Path, say: Callable[[str], None]) -> None:
    plots = subprocess.run([*command, str(out)], capture_output=True, text=True)
    if plots.returncode == 0:
        say(f"preview figures: {out / 'analysis'}, {out / 'report.html'}")
    else:
        say(f"preview figures failed: {plots.stderr.strip()[-500:]}")


def execute(
    prepared: Prepared, config: SweepConfig, argv: list[str], *, new_run: bool, owner=None
) -> SweepResult:
    """Measure ``config``'s grid into its results directory (resuming its run); ``owner``:
    the directory's lock, when the caller holds it already."""
    out = Path(config.out)
    if owner is None:
        owner = lock_results(out)
    store = Store(config.out)
    try:
        run_id, how = _open_run(store, config, argv, new_run)
        if how == "complete":
            return SweepResult(out, run_id, "already complete", 0)
        status, code = _measure(prepared, config, store, run_id, how == "resumed")
        return SweepResult(out, run_id, status, code)
    finally:
        store.close()
        owner.release()


def _open_run(store: Store, config: SweepConfig, argv, new_run: bool) -> tuple[str, str]:
    """The run to measure into and how it was found: "resumed" (the configuration's
    unfinished one), "new", or "complete" (its summary printed: stored whole, and
    ``new_run`` not set)."""
    fingerprint = config.fingerprint()
    latest = store.latest_run(fingerprint)
    if latest is not None and latest.status == "complete" and not new_run:
        print(
            f"run {latest.run_id} of this configuration is already complete in "
            f"{config.out} ({len(config.cells())} cells); --new-run measures it again"
        )
        print(summary_table(store, latest.run_id))
        return latest.run_id, "complete"
    if latest is not None and latest.status != "complete" and not new_run:
        store.set_status(latest.run_id, "running")
        return latest.run_id, "resumed"
    run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + fingerprint[:6]
    store.begin_run(
        run_id, fingerprint, config.name, config.to_dict(), static_manifest(config, argv)
    )
    return run_id, "new"


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _measure(
    prepared: Prepared, config: SweepConfig, store: Store, run_id: str, resumed: bool
) -> tuple[str, int]:
    """The cells of ``run_id`` not stored yet, on this machine's testbeds or on Dask
    workers; the run's status set however it ends; the status and the exit code."""
    cells = config.cells()
    done = store.done_cells(run_id)
    todo = [c for c in cells if c.cell_id not in done]
    progress = Progress(len(cells), len(done), lambda scale: engine.remaining_s(scale))
    engine = _engine(prepared, config, store, run_id, progress, todo)
    _say(
        f"run {run_id} ({config.name}): {len(cells)} cells, {len(done)} stored, "
        f"{len(todo)} to measure {engine.intro}; results in {Path(config.out).resolve()}"
        + (" (resumed)" if resumed else "")
    )
    figures = Figures(config, run_id, done, progress.note, prepared.figures, hold=engine.hold)
    engine.on_cell = figures.cell_stored
    t0, cpu0 = time.monotonic(), cpu_times()
    # "failed" unless the loop finishes: an unexpected exception must not leave the run
    # marked complete, or rerunning would not resume it.
    status, code, problem = "failed", 0, ""
    try:
        engine.run(todo)
        figures.finish()
        status = "complete"
    except (KeyboardInterrupt, Stopped):
        status, code = "interrupted", 130
        problem = f"interrupted: every {engine.machines}'s testbeds are down. "
    except TestbedError as exc:
        status, code, problem = "failed", 1, f"error: {exc}\n"
    finally:
        figures.close()
        progress.close()
        try:
            store.set_status(run_id, status)
        except StoreFullError as full:
            status, code, problem = "failed", 1, f"error: {full}\n"
        finally:
            engine.close()  # what it started ends; this machine's costs are learned
    if problem:
        _say(
            f"\n{problem}{len(store.done_cells(run_id))} of {len(cells)} cells stored; "
            f"rerun the same command to resume."
        )
    if code == 0:
        _report(config, store, run_id, todo, time.monotonic() - t0, cpu0, engine)
    return status, code


def _engine(prepared: Prepared, config, store, run_id, progress, todo) -> Engine:  # noqa: ANN001
    """Dask workers when the options name them (``--workers``, ``--scheduler``), else this
    machine's testbeds."""
    opts = prepared.options
    if prepared.specs is None:
        return LocalEngine(config, store, run_id, progress, todo, prepared.parallel, _say)
    dask = DaskRun(
        config, store, run_id, progress, prepared.specs, opts.scheduler, opts.worker_timeout
    )
    dask.security = prepared.security
    return dask


def _report(config, store, run_id, todo, wall: float, cpu0, engine: Engine) -> None:
    """What a finished run measured, how long it took, where its results are."""
    busy = cpu_busy(cpu0, cpu_times())
    store.update_manifest(run_id, wall_s=round(wall, 1), cpu_util=busy)
    print(summary_table(store, run_id))
    print(engine.report(todo, wall, busy))
    print(f"results: {store.path.resolve()} (run {run_id})")
    print(f"export:  edgetb export {config.out} --format csv")
