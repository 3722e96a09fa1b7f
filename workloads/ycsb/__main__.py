"""YCSB on a running testbed: install it (and the binding), or run a workload (see the package)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from common.command import Parser, command, prog
from common.errors import TestbedError
from testbed import argtypes
from testbed.testbed import Testbed
from testbed.topology import MAX_EDGE_NODES

from . import Result, Spec, create_table
from . import dist as dist_mod
from .client import Ycsb


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def format_result(result: Result) -> str:
    lines = [
        f"{result.phase}: {result.throughput_ops:.1f} ops/s over {result.runtime_s:.1f} s",
        f"  {'op':<18} {'count':>7} {'errors':>6} {'mean':>8} {'p50':>8} {'p95':>8} "
        f"{'p99':>8} {'p99.9':>8} {'max':>8}  (ms)",
    ]
    for label, table in (("", result.ops), ("intended ", result.intended)):
        for op, d in sorted(table.items()):
            lines.append(
                f"  {label + op:<18} {d.get('count', 0):>7} {d['errors']:>6} "
                + " ".join(
                    f"{d.get(k, float('nan')):>8.1f}"
                    for k in ("mean_ms", "p50_ms", "p95_ms", "p99_ms", "p999_ms", "max_ms")
                )
            )
    if result.errors_by_type:
        lines.append(f"  errors: {json.dumps(result.errors_by_type)}")
    return "\n".join(lines)


def _progress(phase: str):
    state = {"t": 0.0}

    def show(done: int, total: int, rate: float) -> None:
        now = time.monotonic()
        if now - state["t"] >= 5:
            state["t"] = now
            of = f"/{total} ({100 * done / total:.0f} %)" if total else ""
            print(f"{phase}: {done}{of} ops, {rate:.0f} ops/s", file=sys.stderr, flush=True)

    return show


def parser() -> Parser:
    """The command line: install, path, run (every flag with its help and default)."""
    p = Parser(prog=prog("python -m workloads.ycsb"), description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    inst = sub.add_parser("install", help="fetch YCSB and the driver, build the binding (cached)")
    inst.add_argument("--force", action="store_true", help="build again even if cached")
    sub.add_parser("path", help="print the installed YCSB's directory")
    _run_flags(sub.add_parser("run", help="load and run a workload on a running testbed"))
    return p


def _run_flags(r: argparse.ArgumentParser) -> None:
    r.add_argument("--run", help="testbed run id or name (default: the one that is up)")
    r.add_argument("--workload", default="a", help="a..f (YCSB's A-F) or a properties file")
    r.add_argument(
        "--rf",
        type=argtypes.integer(1, MAX_EDGE_NODES),
        default=3,
        help="replication factor (default 3)",
    )
    r.add_argument("--keyspace", help="default: ycsb_rf<RF>")
    r.add_argument(
        "--records",
        type=argtypes.integer(1, 2**31 - 1),
        help="rows loaded (default: the workload's recordcount)",
    )
    r.add_argument(
        "--operations",
        type=argtypes.integer(1, 2**31 - 1),
        help="operations of the run phase (default: the workload's operationcount)",
    )
    r.add_argument("--duration", type=argtypes.number(1, 86400, "s"), help="run phase length (s)")
    r.add_argument(
        "--threads", type=argtypes.integer(1, 1024), default=1, help="client threads (default 1)"
    )
    r.add_argument("--target", type=argtypes.integer(1, 10**7), help="ops/s (open loop)")
    r.add_argument("--read-cl", default="ONE", help="reads' consistency level (default ONE)")
    r.add_argument("--write-cl", default="ONE", help="writes' consistency level (default ONE)")
    r.add_argument(
        "--policy",
        choices=("round-robin", "token-aware"),
        default="round-robin",
        help="how the driver picks coordinators (default round-robin, as the paper's writes)",
    )
    r.add_argument(
        "--timeout",
        type=argtypes.number(1, 600, "s"),
        default=12.0,
        help="the driver's request timeout (s, default 12)",
    )
    r.add_argument("--no-load", action="store_true", help="the keyspace is loaded already")
    r.add_argument(
        "--raw", action="store_true", help="also every operation's latency (OUT/run-raw.csv)"
    )
    r.add_argument(
        "-p",
        dest="extra",
        type=_pair,
        action="append",
        default=[],
        metavar="K=V",
        help="a YCSB property on top of the workload's (repeatable)",
    )
    r.add_argument("--out", default="ycsb-out", help="where YCSB's files go (default ycsb-out)")
    r.add_argument("--json", action="store_true", help="the result as JSON on stdout")


@command("python -m workloads.ycsb")
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.cmd == "install":
            d = dist_mod.install(force=args.force, progress=lambda m: print(m, file=sys.stderr))
            d.verify(full=True)
            print(d.root)
            return 0
        if args.cmd == "path":
            print(dist_mod.load().root)
            return 0
        return _run(args)
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    spec = Spec(
        workload=args.workload,
        records=args.records,
        operations=args.operations,
        duration_s=args.duration,
        threads=args.threads,
        target=args.target,
        read_cl=args.read_cl,
        write_cl=args.write_cl,
        extra=tuple(args.extra),
        raw=args.raw,
    )
    spec.check(rf=args.rf)  # before anything else: the input alone
    tb = Testbed.attach(args.run)
    nodes = tb.topology.edge_nodes
    heap = tb.settings.heap_mb if tb.settings else None
    spec.check(nodes=nodes, rf=args.rf, heap_mb=heap)
    if args.rf > nodes:
        raise TestbedError(f"RF {args.rf} needs {args.rf} edge nodes; run {tb.run_id} has {nodes}")
    ycsb = Ycsb(tb, policy=args.policy, timeout_s=args.timeout)
    keyspace = args.keyspace or f"ycsb_rf{args.rf}"
    out = Path(args.out)
    results: list[dict[str, Any]] = []
    if not args.no_load:
        fields = int(spec.properties().get("fieldcount", "10"))
        create_table(tb, keyspace, args.rf, fields)
        loaded = ycsb.load(spec, keyspace, out, _progress("load"))
        results.append(loaded.to_dict())
        if not args.json:
            print(format_result(loaded), flush=True)
    ran = ycsb.run(spec, keyspace, out, _progress("run"))
    results.append(ran.to_dict())
    if args.json:
        print(json.dumps({"run_id": tb.run_id, "keyspace": keyspace, "phases": results}, indent=1))
    else:
        print(format_result(ran))
    return 0


if __name__ == "__main__":
    sys.exit(main())
