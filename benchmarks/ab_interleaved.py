"""Stock against quiet Cassandra nodes, interleaved cell by cell (issue 39, item 4);
with ``--compare housekeeping``, quiet nodes' standard housekeeping against the writes one
(item 3: ``CassandraSettings.housekeeping``), the same way.

``parallel_fidelity.py --ab`` runs whole sweeps one after another (seq-a, quiet-a,
seq-b, quiet-b): two stock runs 50 minutes apart differed by +0.36 ms there, more than
the ±0.25 ms a verdict allows, so the machine's drift decided the verdict. Here one
testbed of each build is up for the whole run and every cell is measured four times in a
row, ABBA (stock, quiet, quiet, stock; the next cell quiet, stock, stock, quiet): a drift
that is linear over a cell's minutes falls on both builds alike. While one testbed
measures, the other's JVMs and writer are stopped (SIGSTOP, by PID, and SIGCONT before
its turn; ``--no-freeze`` leaves it idle instead), so neither testbed's idle work is the
other's load.

Each measurement is what a sweep's cell is: the cell's link matrix (``--profile``; the
paper's by default) set by the sweep's shaper, ``--warmup`` unrecorded writes, then
``--writes`` timed LOCAL_QUORUM writes round robin (``workloads.writes``), fresh keys
each time. The four measurements of every cell are then read as four runs (seq-a and
seq-b: the stock ones in time order; quiet-a and quiet-b) and judged with
``parallel_fidelity.py``'s rules against seq-a: each quiet run, and seq-b as the noise
of two stock runs. A third table compares the builds per cell by the mean of each
build's two medians. Measurements are appended to OUT/measurements.jsonl as they end,
so an interrupted run resumes (new testbeds) where it stopped. Run it alone.

    python benchmarks/ab_interleaved.py --nodes 5 --rf 1,3,5 --out results/ab-interleaved
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from parallel_fidelity import (
    EQUIV_MS,
    as_close_as,
    compare,
    judge,
    run_slopes,
    table,
)
from write_cpu import descendants

from emulation import api as emulation_api
from emulation import links, shapers
from experiments.plan import fidelity
from experiments.settings.config import SweepConfig
from testbed import Testbed
from testbed.cassandra.config import CassandraSettings
from workloads import WriteWorker

# What --compare sets against what: (label, the CassandraSettings it takes) of the
# reference, then of the candidate. The reference's runs are seq-a and seq-b.
COMPARISONS: dict[str, tuple[tuple[str, dict[str, str]], tuple[str, dict[str, str]]]] = {
    "builds": (("stock", {"build": "stock"}), ("quiet", {"build": "quiet"})),
    "housekeeping": (
        ("standard", {"build": "quiet", "housekeeping": "standard"}),
        ("writes", {"build": "quiet", "housekeeping": "writes"}),
    ),
}


def runs_of(ref: str, new: str) -> dict[tuple[str, int], str]:
    """(label, repetition) -> the run's name: seq-a, seq-b, NEW-a, NEW-b."""
    return {(ref, 0): "seq-a", (ref, 1): "seq-b", (new, 0): f"{new}-a", (new, 1): f"{new}-b"}


def grid(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The cells, RF-major as a sweep's unit measures them; ids as the sweep names them
    enough to tell them apart."""
    return [
        {
            "cell_id": f"n{args.nodes}-rf{rf}-l{lat:g}-p{loss:g}",
            "nodes": args.nodes,
            "rf": rf,
            "latency_ms": lat,
            "loss_pct": loss,
        }  # fmt: skip
        for rf in args.rf
        for lat in args.latency
        for loss in args.loss
    ]


def order(index: int, labels: tuple[str, str]) -> list[tuple[str, int]]:
    """ABBA: (label, repetition) in the order a cell measures them."""
    a, b = labels if index % 2 == 0 else labels[::-1]
    return [(a, 0), (b, 0), (b, 1), (a, 1)]


class Side:
    """One variant's testbed (``label``, its ``cassandra`` settings; default: the build
    named ``label``), its writer and its keyspaces; frozen between its turns."""

    def __init__(
        self,
        label: str,
        cfg: SweepConfig,
        args: argparse.Namespace,
        logs: Path,
        name: str = "",
        cassandra: dict[str, str] | None = None,
    ):
        self.build, self.args, self.name = label, args, name or label
        self.tb = Testbed(
            cfg.topology(args.nodes),
            cassandra=CassandraSettings(heap_mb=cfg.heap_mb, jvm_profile=cfg.jvm_profile,
                                        **(cassandra or {"build": label})),  # type: ignore[arg-type]
            progress=lambda m: print(f"  [{self.name}] {m}", file=sys.stderr, flush=True),
        )  # fmt: skip
        self.worker: WriteWorker | None = None
        self.frozen: list[int] = []
        self.logs = logs

    def __enter__(self) -> Side:
        self.tb.__enter__()
        try:  # a testbed that came up is taken down again whatever fails after it
            self.worker = WriteWorker(self.tb, policy="round-robin", timeout_s=12.0,
                                      log_path=self.logs / f"{self.name}-writer.log")  # fmt: skip
            self.shape(links.LinkMatrix(self.tb.topology, {}, profile="none"))
            for rf in self.args.rf:
                self.worker.schema(f"ab_rf{rf}", rf)
            # as a sweep does after each bring-up: the JIT and the driver warm
            self.write(self.args.rf[0], "cluster-warmup", 1, self.args.cluster_warmup,
                       warmup_seed="cluster-warmup")  # fmt: skip
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.thaw()
            if self.worker is not None:
                self.worker.close()
        finally:  # the testbed goes whatever its writer did
            self.tb.__exit__(*exc)

    def jvms(self) -> list[int]:
        return [n.pid for n in self.tb.nodes.values() if n.pid is not None]

    def writer(self) -> list[int]:
        """The writer's process and its children."""
        assert self.worker is not None
        return descendants(self.worker.proc.pid)

    def pids(self) -> list[int]:
        return self.jvms() + self.writer()

    def shape(self, matrix: links.LinkMatrix) -> None:
        emulation_api.set_links(self.tb, matrix, self.args.shaper)

    def write(
        self,
        rf: int,
        seed: str,
        writes: int,
        warmup: int,
        on_measuring=lambda: None,
        warmup_seed: str | None = None,
    ) -> list[dict[str, Any]]:
        """``writes`` timed LOCAL_QUORUM writes round robin into RF ``rf``'s keyspace after
        ``warmup`` unrecorded ones, fresh keys from ``seed`` (the warm-up's from
        ``warmup_seed``, default ``SEED:warmup``)."""
        assert self.worker is not None
        return self.worker.run(keyspace=f"ab_rf{rf}", cl="LOCAL_QUORUM", writes=writes,
                               warmup=warmup, key_seed=seed,
                               warmup_seed=warmup_seed or f"{seed}:warmup",
                               on_measuring=on_measuring)  # fmt: skip

    def freeze(self) -> None:
        if self.args.freeze:
            self.frozen = self.pids()
            for pid in self.frozen:
                os.kill(pid, signal.SIGSTOP)

    def thaw(self) -> None:
        for pid in self.frozen:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        if self.frozen:
            self.frozen = []
            time.sleep(self.args.settle)  # timers that fell due while stopped run first

    def measure(self, cell: dict[str, Any], rep: int) -> dict[str, Any]:
        self.thaw()
        self.shape(links.build(self.args.profile, self.tb.topology,
                               delay_ms=cell["latency_ms"], loss_pct=cell["loss_pct"]))  # fmt: skip
        seed = f"{cell['cell_id']}:{self.build}:{rep}"
        t0 = time.time()
        rows = self.write(cell["rf"], seed, self.args.writes, self.args.warmup)
        self.freeze()
        return {
            "cell_id": cell["cell_id"], "build": self.build, "rep": rep, "started": t0,
            "rtts_ms": [r["rtt_ns"] / 1e6 for r in rows],
            "errors": sum(r["error"] is not None for r in rows),
        }  # fmt: skip


def load(path: Path) -> dict[tuple[str, str, int], dict[str, Any]]:
    done = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                m = json.loads(line)
                done[(m["cell_id"], m["build"], m["rep"])] = m
    return done


def report(args: argparse.Namespace, cells: list[dict[str, Any]], done: dict) -> str:
    (ref, _), (new, _) = COMPARISONS[args.compare]
    by_id = {c["cell_id"]: c for c in cells}
    runs = {
        name: {c["cell_id"]: done[(c["cell_id"], label, rep)]["rtts_ms"] for c in cells}
        for (label, rep), name in runs_of(ref, new).items()
    }
    news = (f"{new}-a", f"{new}-b")
    base = runs["seq-a"]
    base_slopes = run_slopes(base, by_id)
    lines = [
        f"## {ref.capitalize()} against {new} ({args.compare}), interleaved cell by cell: "
        f"nodes {args.nodes}, RF "
        f"{','.join(map(str, args.rf))}, latency {','.join(f'{x:g}' for x in args.latency)} "
        f"ms, loss {','.join(f'{x:g}' for x in args.loss)} %, {args.profile} profile, "
        f"{args.warmup} + {args.writes} writes per measurement, ABBA per cell, the idle "
        f"testbed {'stopped' if args.freeze else 'idle'}",
        "",
    ]
    sums = {}
    for name in ("seq-b", *news):
        rows = compare(base, runs[name])
        sums[name] = judge(rows, base_slopes, run_slopes(runs[name], by_id))
        lines += [table(f"{name} vs seq-a", rows), ""]
    verdict = {n: n != "seq-b" and as_close_as(s, sums["seq-b"]) for n, s in sums.items()}
    lines += [
        "| run vs seq-a | mean & median agree | p99 agree | median abs Δ median ms "
        "| max slope Δ (medians) | shift ms (95 % CI) | sign test p | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, s in sums.items():
        lo, hi = s["shift_ci"]
        lines.append(
            f"| {name} | {100 * s['agree']:.0f} % | {100 * s['p99_agree']:.0f} % "
            f"| {s['median_abs_median_diff_ms']:.2f} | {100 * s['median_slope_dev']:.2f} % "
            f"| {s['shift_ms']:+.3f} ({lo:+.3f}, {hi:+.3f}) | {s['sign_p']:.3f} "
            f"| {'-' if name == 'seq-b' else 'accepted' if verdict[name] else 'REJECTED'} |"
        )

    def med(run: str, cell_id: str) -> float:
        return statistics.median(runs[run][cell_id])

    # per cell, each variant's two medians averaged: the drift within a cell cancels (ABBA)
    both = {c: (med(news[0], c) + med(news[1], c) - med("seq-a", c) - med("seq-b", c)) / 2
            for c in by_id}  # fmt: skip
    within = {v: {c: med(f"{p}-b", c) - med(f"{p}-a", c) for c in by_id}
              for v, p in ((ref, "seq"), (new, new))}  # fmt: skip
    lines += ["", "| per cell, ms | shift (95 % CI) |", "|---|---:|"]
    for label, diffs in (
        (f"{new} − {ref} (mean of each variant's two medians)", both),
        (f"{ref} b − a (same variant, same cell, minutes apart)", within[ref]),
        (f"{new} b − a", within[new]),
    ):
        m, lo, hi = fidelity.shift(list(diffs.values()))
        lines.append(f"| {label} | {m:+.3f} ({lo:+.3f}, {hi:+.3f}) |")
    lines += ["", f"| cells of | {new} − {ref} | {ref} b − a | {new} b − a | median RTT {ref} |",
              "|---:|---:|---:|---:|---:|"]  # fmt: skip
    for key, value in [("latency_ms", lat) for lat in args.latency] + [
        ("rf", rf) for rf in args.rf
    ]:
        ids = [c for c in by_id if by_id[c][key] == value]
        label = f"{value:g} ms" if key == "latency_ms" else f"RF {value}"
        lines.append(
            f"| {label} | {statistics.median(both[c] for c in ids):+.2f} "
            f"| {statistics.median(within[ref][c] for c in ids):+.2f} "
            f"| {statistics.median(within[new][c] for c in ids):+.2f} "
            f"| {statistics.median(med('seq-a', c) for c in ids):.2f} |"
        )
    m, lo, hi = fidelity.shift(list(both.values()))
    same = -EQUIV_MS <= lo and hi <= EQUIV_MS
    errors = {v: sum(m["errors"] for (_, vv, _), m in done.items() if vv == v) for v in (ref, new)}
    lines += [
        "",
        f"Errors (timed writes): {ref} {errors[ref]}, {new} {errors[new]}.",
        f"Verdict (each {new} run against seq-a by parallel_fidelity.py's rule): "
        + ", ".join(f"{n} {'accepted' if verdict[n] else 'REJECTED'}" for n in news)
        + f"; the per-cell shift {new} − {ref} {m:+.3f} ms ({lo:+.3f}, {hi:+.3f}) is "
        + ("inside" if same else "NOT inside")
        + f" ±{EQUIV_MS} ms.",
    ]
    return "\n".join(lines)


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=5)
    p.add_argument("--rf", default="1,3,5", help="RFs, comma separated")
    p.add_argument("--latency", default="0,20,50,100", help="one-way ms, comma separated")
    p.add_argument("--loss", default="0.5,2.5,7.5", help="%%, comma separated")
    p.add_argument("--profile", default="paper", choices=links.PROFILES)
    p.add_argument("--writes", type=int, default=300)
    p.add_argument("--warmup", type=int, default=50, help="unrecorded writes each time")
    p.add_argument("--cluster-warmup", type=int, default=500, help="after each bring-up")
    p.add_argument("--shaper", default="auto", choices=shapers.SHAPERS)
    p.add_argument("--settle", type=float, default=1.0, help="seconds after SIGCONT")
    p.add_argument("--no-freeze", dest="freeze", action="store_false",
                   help="leave the other testbed idle instead of stopped")  # fmt: skip
    p.add_argument("--compare", default="builds", choices=COMPARISONS,
                   help="builds: stock against quiet nodes; housekeeping: quiet nodes' "
                   "standard housekeeping against the writes one")  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("results/ab-interleaved"))
    args = p.parse_args()
    args.rf = [int(x) for x in args.rf.split(",") if x]
    args.latency, args.loss = floats(args.latency), floats(args.loss)
    if any(rf < 1 or rf > args.nodes for rf in args.rf):
        p.error(f"every RF must be within 1..{args.nodes}")
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cfg = SweepConfig.from_dict({"nodes": [args.nodes], "writes": args.writes})
    cells = grid(args)
    args.out.mkdir(parents=True, exist_ok=True)
    jsonl = args.out / "measurements.jsonl"
    done = load(jsonl)
    (ref, _), (new, _) = COMPARISONS[args.compare]
    variants, labels = dict(COMPARISONS[args.compare]), (ref, new)
    todo = [(i, c) for i, c in enumerate(cells)
            if any((c["cell_id"], b, r) not in done for b, r in order(i, labels))]  # fmt: skip
    if todo:
        t_start = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="edgetb-ab-") as tmp, ExitStack() as stack:
            sides = {v: stack.enter_context(Side(v, cfg, args, Path(tmp), cassandra=kw))
                     for v, kw in variants.items()}  # fmt: skip
            for side in sides.values():
                side.freeze()
            for n, (i, cell) in enumerate(todo, 1):
                for build, rep in order(i, labels):
                    if (cell["cell_id"], build, rep) in done:
                        continue
                    m = sides[build].measure(cell, rep)
                    done[(cell["cell_id"], build, rep)] = m
                    with jsonl.open("a") as f:
                        f.write(json.dumps(m) + "\n")
                    print(
                        f"{cell['cell_id']} {build} {rep}: median "
                        f"{statistics.median(m['rtts_ms']):.2f} ms, {m['errors']} errors",
                        file=sys.stderr,
                        flush=True,
                    )
                left = (time.monotonic() - t_start) / n * (len(todo) - n)
                print(f"cell {n}/{len(todo)} done, ~{left / 60:.0f} min left", file=sys.stderr)
    text = report(args, cells, done)
    print(text)
    (args.out / "ab.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
