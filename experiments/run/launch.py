"""What a sweep does before its first testbed, on the controller and on a remote worker
alike: the checks that need no testbed (``preflight``), the results directory's lock, and
how many testbeds run at once (``parse_parallel``, ``calibrate_from``,
``choose_parallel``: the cost model of the sweep's shaper, calibrated on this machine and
fitted to what the store already holds, within what the fidelity benchmark accepted on
this machine), and what a run teaches this machine's calibration (``learn_from``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from common.errors import ConfigError, RunInUseError, StateError
from emulation import shapers
from testbed import TestbedError
from testbed.backends import capabilities
from testbed.ownership import OwnerLock, describe_holder, remove_dead_sweep_entries, sweeps_dir
from workloads.ycsb import dist as ycsb_dist

from ..plan import calibration, estimate, fidelity, stages
from ..settings.cells import Cell
from ..settings.config import SweepConfig
from ..store.db import DB_NAME, Store

LOCK_NAME = "sweep.lock"  # in the results directory, held by the sweep measuring into it
MAX_PARALLEL = 32
CORES = os.cpu_count() or 1


def preflight(config: SweepConfig) -> None:
    """Checks that need no testbed: root, the gateway image when the gateway shapes, the
    host shaper's tools when it does."""
    if os.geteuid() != 0:
        raise ConfigError("the sweep builds network namespaces: run it as root")
    shapers.preflight(shapers.resolve(config.shaper, config.backend))
    if config.ycsb_workloads():  # YCSB and the binding installed (`make ycsb` does it)
        ycsb_dist.load()


def lock_results(out: Path) -> OwnerLock:
    """Own the results directory for this sweep's whole life: a second sweep on it is
    refused while this one lives, and resumes it once it died (the kernel drops the lock)."""
    out.mkdir(parents=True, exist_ok=True)
    lock = OwnerLock(out / LOCK_NAME)
    if not lock.acquire(blocking=False, wait_s=1.0):
        holder = lock.holder() or {}
        raise RunInUseError(
            f"results directory {out} is in use by a running sweep ({describe_holder(holder)}); "
            f"wait for it, or use another --out"
        )
    return lock


Parallel = int | dict[int, int] | None  # P; P per testbed size; None: auto


def parse_parallel(text: str, config: SweepConfig) -> Parallel:
    """--parallel: None for auto, P >= 1, or N:P,... (P per testbed size: every size of
    the sweep's cells, each measured as a stage of its own); 1 for the hosts backend (one
    set of machines). ConfigError naming the value otherwise."""
    text = str(text).strip()
    if text.lower() == "auto":
        return None
    parallel = _per_size(text, config) if ":" in text else _p(text, text)
    top = max(parallel.values()) if isinstance(parallel, dict) else parallel
    if top > 1 and not capabilities(config.backend).owns_hosts:
        raise ConfigError(
            f"--parallel above 1 needs testbeds of their own: not --backend {config.backend}"
        )
    return parallel


def _p(text: str, whole: str) -> int:
    try:
        p = int(text)
    except ValueError:
        p = 0
    if p < 1 or p > MAX_PARALLEL:
        raise ConfigError(
            f"--parallel must be auto, an integer from 1 to {MAX_PARALLEL} or N:P,... "
            f"(P per testbed size, e.g. 3:2,5:1), got {whole!r}"
        )
    return p


def _per_size(text: str, config: SweepConfig) -> dict[int, int]:
    per_size: dict[int, int] = {}
    for item in text.split(","):
        nodes, _, p = item.partition(":")
        if not nodes.strip().isdigit():
            raise ConfigError(f"--parallel {text!r}: {item.strip()!r} is not NODES:P")
        if int(nodes) in per_size:
            raise ConfigError(f"--parallel {text!r} gives {int(nodes)} nodes two Ps")
        per_size[int(nodes)] = _p(p.strip(), text)
    sizes = {c.nodes for c in config.cells()}
    if set(per_size) != sizes:
        raise ConfigError(
            f"--parallel {text!r} must give a P for each testbed size of the sweep, and "
            f"only those: {', '.join(map(str, sorted(sizes)))} nodes"
        )
    return per_size


def costs_shaper(config: SweepConfig) -> str:
    """The shaper whose costs the model uses: the one the sweep will resolve to, judged
    without touching the machine (a dry run makes no namespace); a shaper this kernel
    lacks is reported by the preflight when the sweep starts."""
    return shapers.resolve(config.shaper, config.backend, probe=False)


def calibrate_from(
    config: SweepConfig, out: Path | None = None, store: Store | None = None
) -> estimate.Costs | None:
    """The cost model of the sweep's shaper: the development machine's costs, this
    machine's calibration over them (netns testbeds; ``experiments.plan.calibration``), the
    cells its results directory (``out``, default the config's; or an open ``store``)
    already holds over both. Returns that last fit (None: too few cells)."""
    shaper = costs_shaper(config)
    costs = estimate.defaults(shaper)
    if _calibrated(config):
        costs = calibration.apply(costs, calibration.entry(shaper, config.cassandra_build, CORES))
    estimate.use(costs)
    out = Path(config.out) if out is None else out
    try:
        if store is not None:
            runs, cells = store.runs(), store.cells()
        elif (out / DB_NAME).is_file():
            with Store(out, read_only=True) as opened:
                runs, cells = opened.runs(), opened.cells()
        else:
            return None
    except TestbedError:  # an empty store a kill left: nothing to fit
        return None
    manifests = [{**r.manifest, "run_id": r.run_id} for r in runs]
    fitted = estimate.calibrate(cells, manifests, CORES, shaper, start=costs)
    if fitted is not None:
        estimate.use(fitted)
    return fitted


def _calibrated(config: SweepConfig) -> bool:
    """Whether this machine's calibration applies: testbeds of network namespaces here
    (VMs and real hosts cost what they cost; their bring-ups are not this machine's)."""
    return capabilities(config.backend).namespaces


def learn_from(config: SweepConfig, store: Store, run_id: str) -> None:
    """This machine's calibration from the run just measured here (a note on stderr
    where it could not be stored: the run's results are not affected)."""
    if not _calibrated(config):
        return
    try:
        fitted = calibrate_from(config, store=store)
        run = store.run(run_id)
        one = (run.manifest.get("parallel") or {}).get("p") == 1
        cells = store.cells(run_id) if one else []
        calibration.learn(config, costs_shaper(config), CORES, run.manifest, cells, fitted)
    except (OSError, TestbedError) as exc:
        print(f"note: this machine's calibration was not updated: {exc}", file=sys.stderr)


def stored_cells(config: SweepConfig) -> frozenset[str]:
    """The cells of ``config`` its results directory holds already (its latest run of this
    configuration): a dry run leaves them out of the estimate, as a rerun resumes."""
    if not (Path(config.out) / DB_NAME).is_file():
        return frozenset()
    try:
        with Store(Path(config.out), read_only=True) as store:
            latest = store.latest_run(config.fingerprint())
            return frozenset(store.done_cells(latest.run_id)) if latest else frozenset()
    except TestbedError:  # an empty store a kill left, a damaged one: as if none
        return frozenset()


def meminfo_mb() -> dict[str, float]:
    """/proc/meminfo in MB (MemTotal, MemAvailable, ...)."""
    with open("/proc/meminfo") as f:
        return {k: int(v.split()[0]) / 1024 for k, v in (line.split(":", 1) for line in f)}


def choose_parallel(config: SweepConfig, cells: list, parallel: Parallel) -> tuple[int, str]:
    """P and why: as asked (per testbed size: the most of ``cells``' sizes), or (auto)
    from the machine's cores and memory and what the fidelity benchmark accepted here for
    the sweep's largest testbed."""
    if isinstance(parallel, dict):
        sizes = {c.nodes for c in cells} or set(parallel)
        return max(parallel[n] for n in sizes), "as asked for each testbed size"
    if parallel is not None:
        return parallel, "as asked"
    return estimate.auto_parallel(
        config, cells, cores=CORES, **_memory(),
        accepted=_verdict(config)(max(config.nodes)),
    )  # fmt: skip


def choose_stages(
    config: SweepConfig, cells: Sequence[Cell], parallel: Parallel
) -> list[stages.Stage]:
    """The stages a run measures ``cells`` in: per testbed size as asked
    (``stages.asked``); one, at P as asked (or ``choose_parallel`` where there are no
    verdicts per testbed size: a backend other than namespaces, no cells); else
    ``stages.auto``, by the verdict for each testbed size."""
    if isinstance(parallel, dict) and cells:
        return stages.asked(config, cells, parallel, CORES)
    if parallel is not None or not cells or not capabilities(config.backend).namespaces:
        p, why = choose_parallel(config, list(cells), parallel)
        return [stages.measured_at(config, cells, p, why, CORES)]
    return stages.auto(config, cells, cores=CORES, **_memory(), accepted=_verdict(config))


def _memory() -> dict[str, float]:
    """This machine's memory, in MB: all of it and what is in use."""
    info = meminfo_mb()
    used = info["MemTotal"] - info.get("MemAvailable", info["MemFree"])
    return {"total_mb": info["MemTotal"], "used_mb": used}


def _verdict(config: SweepConfig) -> Callable[[int], tuple[int, str] | None]:
    """This machine's fidelity verdict for testbeds of N nodes of ``config``'s shaper
    and build."""
    shaper, build = costs_shaper(config), config.cassandra_build
    return lambda nodes: fidelity.accepted(shaper, CORES, build, nodes=nodes)


def enter_sweep() -> tuple[OwnerLock | None, list[dict]]:
    """This sweep's entry among the machine's sweeps (held until released or the process
    ends; None where the list cannot be written, e.g. not root), and the holders of the
    others that are alive. A dead sweep's entry (kill -9) holds no lock: it is removed."""
    root = sweeps_dir()
    others = []
    try:
        root.mkdir(parents=True, exist_ok=True)
        remove_dead_sweep_entries()
        for path in sorted(root.glob("*.lock")):
            holder = OwnerLock(path).holder()
            if holder is not None and holder.get("pid") != os.getpid():
                others.append(holder)
        mine = OwnerLock(root / f"{os.getpid()}.lock")
        if not mine.acquire(blocking=False):
            return None, others
    except (OSError, StateError):  # the warning is lost, not the sweep
        return None, others
    return mine, others


def leave_sweep(entry: OwnerLock | None) -> None:
    if entry is not None:
        entry.path.unlink(missing_ok=True)  # ours: we hold its lock
        entry.release()


def sharing_warning(others: list[dict]) -> str | None:
    """What a sweep says when others measure on the same machine (the cores are shared,
    and no sweep's budget counts another's testbeds)."""
    if not others:
        return None
    who = "; ".join(describe_holder(h) for h in others)
    return (
        f"warning: {len(others)} other sweep(s) measure on this machine ({who}). Each "
        f"budgets the {CORES} cores as its own: together they load them more than the "
        f"fidelity benchmark accepted, which shifts RTTs (~1 ms a cell at 3 testbeds on 2 "
        f"cores). Run sweeps one after the other for numbers to compare."
    )


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def cpu_busy(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """The machine's busy fraction (0..1, all cores) between two ``cpu_times``."""
    total = after[1] - before[1]
    return round((after[0] - before[0]) / total, 4) if total > 0 else None
