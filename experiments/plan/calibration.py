"""This machine's measured costs, kept between sweeps in $EDGETB_HOME/calibration.json.

The dry run and ``--parallel auto`` estimate with the cost model of ``estimate``. Its
starting figures are the development machine's; a results directory's own cells refit
them (``estimate.calibrate``). A new results directory has none, so its dry run would use
the development machine's bring-up times and cell times. After every sweep run measured on
this machine, ``learn`` stores what that run measured, per shaper and Cassandra build (the
key of ``experiments.plan.fidelity``: quiet nodes cost the machine differently):

- ``bringup_s`` / ``teardown_s``: the last few bring-ups and teardowns per node count
  (the run's manifest records each cluster's);
- ``costs``: the fit of ``estimate.calibrate`` over the run's results directory (the write
  at 0 ms, CPU per write, an idle testbed), where it had cells enough to fit;
- ``cell_scale``: how much longer the run's cells (one testbed at a time) took than the
  model, with those costs, said: the time the model does not see (the client, a cell's
  own set-up, a busy machine's JIT).

``apply`` lays an entry over the development machine's costs; the results directory's
own fit still comes after it. A damaged or foreign file is ignored (as if nothing had
been measured) and replaced by the next ``learn``.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from common.files import read_json_object, write_file
from testbed import state

from ..settings.cells import Cell
from ..settings.config import SweepConfig
from . import estimate, fidelity

VERSION = 1
SAMPLES = 10  # bring-ups and teardowns kept per node count
MIN_SCALE_CELLS = 4  # cells of one-at-a-time runs before a cell scale is stored
SCALE_RANGE = (0.5, 3.0)  # a cell scale outside is taken for a broken measurement


def path() -> Path:
    return state.home() / "calibration.json"


def _read() -> dict[str, Any]:
    data = read_json_object(path())  # none yet, or damaged: as if nothing was measured
    return data if data.get("version") == VERSION else {}


def _write(data: dict[str, Any]) -> None:
    target = path()
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_file(target, json.dumps(data, indent=2, sort_keys=True) + "\n", perm=0o600)


def entry(shaper: str, build: str, cores: int) -> dict[str, Any] | None:
    """What runs measured here with ``shaper`` and ``build`` on ``cores`` cores (None:
    nothing yet)."""
    found = _read().get("entries", {}).get(fidelity.key(shaper, build))
    if not isinstance(found, dict) or found.get("cores") != cores:
        return None
    return found


def _samples(found: dict[str, Any], name: str) -> dict[int, float]:
    """Node count -> the median of the stored samples of ``name``."""
    out = {}
    for nodes, values in (found.get(name) or {}).items():
        good = [float(v) for v in values if isinstance(v, (int, float)) and 0 < v < 3600]
        if str(nodes).isdigit() and good:
            out[int(nodes)] = statistics.median(good)
    return out


def cpu_model() -> str | None:
    """The CPU's model name as /proc/cpuinfo gives it (None where it does not)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def machine_facts() -> dict[str, Any]:
    """This machine as a manifest records it (hostname, CPU model, cores)."""
    return {"hostname": platform.node(), "cpu_model": cpu_model(), "cpus": os.cpu_count()}


def machine_of(manifest: dict[str, Any]) -> str:
    """A machine as a dry run names it, from a run's manifest (its hostname, CPU model and
    cores): "lab7 (AMD EPYC 7B13, 2 cores)"."""
    host = str(manifest.get("hostname") or "a machine")
    cpu, cores = manifest.get("cpu_model"), manifest.get("cpus")
    about = [str(cpu)] if cpu else []
    about += [f"{cores} cores"] if isinstance(cores, int) and not isinstance(cores, bool) else []
    return f"{host} ({', '.join(about)})" if about else host


def apply(costs: estimate.Costs, found: dict[str, Any] | None) -> estimate.Costs:
    """``costs`` with what ``found`` (an ``entry``) measured laid over them."""
    if not found:
        return costs
    parts = []
    fitted = found.get("costs") or {}
    numbers: dict[str, Any] = {
        k: float(v)
        for k, v in fitted.items()
        if k in estimate.FITTED and isinstance(v, (int, float)) and v > 0
    }
    if numbers:
        costs = replace(costs, **numbers, measured=costs.measured | set(numbers))
        parts.append(f"costs {fitted.get('from', 'fitted')}")
    scale = found.get("cell_scale")
    if isinstance(scale, (int, float)) and SCALE_RANGE[0] <= scale <= SCALE_RANGE[1]:
        costs = replace(costs, cell_scale=float(scale), measured=costs.measured | {"cell_scale"})
        parts.append(f"cells x{scale:.2f}")
    up, down = _samples(found, "bringup_s"), _samples(found, "teardown_s")
    if up:
        costs = replace(
            costs, bringup=tuple(sorted(up.items())), measured=costs.measured | {"bringup"}
        )
        shown = ", ".join(f"{n} nodes {s:.1f} s" for n, s in sorted(up.items()))
        parts.append(f"bring-ups of {shown}")
    if down:
        costs = replace(costs, teardown_s=round(statistics.median(down.values()), 2))
    if not parts:
        return costs
    machine = found.get("machine")
    return replace(
        costs,
        source=f"this machine's calibration ({found.get('updated', '?')}: {'; '.join(parts)})",
        calibrated_on=f"{machine if isinstance(machine, str) else 'this machine'}, "
        f"last {found.get('updated', '?')}",
    )


def cell_scale(config: SweepConfig, cells: list[dict[str, Any]]) -> tuple[float, int] | None:
    """Measured over modelled time of ``cells`` (rows of one-at-a-time runs of
    ``config``'s grid), with the model's current costs but not its current scale; None
    when fewer than MIN_SCALE_CELLS match a writes cell of the grid."""
    grid: dict[str, Cell] = {c.cell_id: c for c in config.cells()}
    measured = modelled = 0.0
    n = 0
    for row in cells:
        cell = grid.get(row.get("cell_id", ""))
        if cell is None or cell.ycsb or not row.get("finished"):
            continue
        if row["finished"] <= row["started"]:
            continue
        measured += row["finished"] - row["started"]
        modelled += estimate.cell_s(config, cell) / estimate.COSTS.cell_scale
        n += 1
    if n < MIN_SCALE_CELLS or modelled <= 0:
        return None
    return measured / modelled, n


def learn(
    config: SweepConfig,
    shaper: str,
    cores: int,
    manifest: dict[str, Any],
    cells: list[dict[str, Any]],
    fitted: estimate.Costs | None,
) -> dict[str, Any]:
    """Store what a run measured on this machine and return the new entry: ``manifest``
    the run's (its clusters' bring-ups and teardowns), ``cells`` its rows when it ran
    one testbed at a time (else none), ``fitted`` the results directory's fit (None:
    too few cells). The model's costs must be the calibrated ones (``calibrate_from``)."""
    data = _read() or {"version": VERSION}
    entries = data.setdefault("entries", {})
    name = fidelity.key(shaper, config.cassandra_build)
    old = entries.get(name)
    found: dict[str, Any] = old if isinstance(old, dict) and old.get("cores") == cores else {}
    found["cores"] = cores
    for field in ("bringup_s", "teardown_s"):  # the manifest's clusters and teardowns
        kept = found.setdefault(field, {})
        where = manifest.get("clusters" if field == "bringup_s" else "teardowns") or {}
        for cluster in where.values():
            value, nodes = cluster.get(field), cluster.get("nodes")
            if cluster.get("shaper") != shaper or not isinstance(value, (int, float)):
                continue
            if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > 0:
                kept[str(nodes)] = (list(kept.get(str(nodes), [])) + [round(value, 2)])[-SAMPLES:]
    if fitted is not None:  # only what the fit measured, not the defaults beside it
        found["costs"] = {f: getattr(fitted, f) for f in estimate.FITTED if f in fitted.measured}
        found["costs"]["from"] = fitted.source.rsplit("; ", 1)[-1]  # this fit's own words
    scaled = cell_scale(config, cells)
    if scaled is not None:
        found["cell_scale"], found["scale_cells"] = round(scaled[0], 3), scaled[1]
    found["machine"] = machine_of(manifest)
    found["updated"] = time.strftime("%Y-%m-%d %H:%M", time.localtime())
    entries[name] = found
    _write(data)
    return found
