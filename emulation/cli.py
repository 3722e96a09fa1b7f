"""python -m emulation {set,show,clear,verify,shaper build,gateway build}."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from common.command import Parser, command, prog
from common.errors import ConfigError, RunInUseError, TestbedError
from testbed import argtypes
from testbed.testbed import Testbed

from . import api, links, shapers
from .verify import LEVELS, verify

MAX_PROBES = 100_000  # per pair: more would run for hours at 100 ms


FORCE_HELP = "change the testbed named by --run even while another process uses it"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=prog("python -m emulation"), description="Emulated edge links on a running testbed."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    _set_command(sub)

    sh = sub.add_parser("show", help="the configured matrix and the shaper's tc state")
    sh.add_argument("--run", type=argtypes.run_id)
    sh.add_argument("--json", action="store_true")

    c = sub.add_parser("clear", help="every link back to unshaped")
    c.add_argument("--force", action="store_true", help=FORCE_HELP)
    c.add_argument("--run", type=argtypes.run_id)
    c.add_argument(
        "--remove", action="store_true", help="also remove the shaper (its process or VM)"
    )

    _verify_command(sub)

    b = sub.add_parser("shaper", help="the host shaper's delayer (kernels without netem)")
    b.add_argument(
        "action",
        choices=["build", "check", "prepare"],
        help="build it, check it exists, or prepare what SHAPER needs on this kernel",
    )
    b.add_argument(
        "shaper",
        nargs="?",
        default="auto",
        choices=shapers.SHAPERS,
        help="prepare: the shaper a sweep will use (default auto: the host shaper where "
        "the kernel has no sch_netem, else tcconfig's, which needs nothing built)",
    )
    b.add_argument("--force", action="store_true")

    g = sub.add_parser("gateway", help="the netem gateway VM image")
    g.add_argument("action", choices=["build", "check"], help="build it, or check it exists")
    g.add_argument("--force", action="store_true")
    return parser


def _set_command(sub: Any) -> None:
    """set: a link profile onto a running testbed."""
    delay_ms = argtypes.number(0, links.MAX_DELAY_MS, "ms")
    s = sub.add_parser("set", help="apply a link profile (nothing is restarted)")
    s.add_argument("--force", action="store_true", help=FORCE_HELP)
    s.add_argument(
        "--profile",
        choices=links.PROFILES,
        default="paper",
        help="the link matrix: paper (edge to edge L and p, edge to endpoint 10 ms: "
        "the seed paper's), uniform (every link), file (--links); default paper, as the sweep's",
    )
    s.add_argument("--latency", type=delay_ms, help="one-way delay L in ms (default 0)")
    s.add_argument(
        "--loss", type=argtypes.number(0, 100, "%"), help="loss p in percent (default 0)"
    )
    s.add_argument("--jitter", type=delay_ms, help="delay jitter in ms (default 0)")
    s.add_argument(
        "--links",
        "--file",
        dest="file",
        metavar="FILE",
        help="TOML link matrix (profile file; --links as in the sweep and the model)",
    )
    s.add_argument("--shaper", choices=shapers.SHAPERS, default="auto", help="(default auto)")
    s.add_argument(
        "--run",
        type=argtypes.run_id,
        help="run id or testbed name (default: the one detached testbed that is up)",
    )


def _verify_command(sub: Any) -> None:
    """verify: RTT and loss measured per host pair against the configured."""
    v = sub.add_parser("verify", help="measure RTT and loss per host pair vs configured")
    v.add_argument("--run", type=argtypes.run_id)
    v.add_argument(
        "--sample", type=argtypes.integer(1), help="check a seeded sample of N host pairs"
    )
    v.add_argument(
        "--probes",
        type=argtypes.integer(100, MAX_PROBES),
        default=100,
        help="RTT probes per pair (>= 100)",
    )
    v.add_argument(
        "--loss-probes",
        type=argtypes.integer(1000, MAX_PROBES),
        default=1000,
        help="probes per pair when loss is configured (>= 1000)",
    )
    v.add_argument(
        "--level",
        type=float,
        choices=LEVELS,
        default=0.95,
        help="confidence level of the loss interval",
    )
    v.add_argument("--json", action="store_true")


def attach_to_change(run_id: str | None, force: bool = False) -> Testbed:
    """The testbed to change, owned by this command while it changes it. Without --run,
    only a detached testbed; a testbed a live process uses (a sweep, a test) is refused
    (RunInUseError naming it) unless ``force``: then it is changed without taking it
    over — a running sweep notices (its cell is voided and measured again)."""
    tb = Testbed.attach(run_id)
    try:
        tb.claim()
    except RunInUseError:
        if run_id is None or not force:
            raise
    return tb


def check_set_args(args: argparse.Namespace) -> None:
    """What `set` can check without a testbed (ConfigError): the flags that go with the
    profile, the link they make, the link file's shape and values."""
    numbers = [f"--{n}" for n in ("latency", "loss", "jitter") if getattr(args, n) is not None]
    if args.profile == "file":
        if not args.file:
            raise ConfigError("--profile file needs --links FILE (or --file; a TOML link matrix)")
        if numbers:
            raise ConfigError(
                f"--profile file takes delays and losses from --links {args.file}, "
                f"not from {', '.join(numbers)}"
            )
        links.check_file(args.file)
        return
    if args.file:
        raise ConfigError(f"--links (--file) is only read with --profile file, not {args.profile}")
    links.Link(args.latency or 0.0, args.jitter or 0.0, args.loss or 0.0)  # e.g. jitter > delay


def cmd_set(args: argparse.Namespace) -> int:
    check_set_args(args)
    tb = attach_to_change(args.run, args.force)
    matrix = links.build(
        args.profile,
        tb.topology,
        delay_ms=args.latency or 0.0,
        loss_pct=args.loss or 0.0,
        jitter_ms=args.jitter or 0.0,
        path=args.file,
    )
    result = api.set_links(tb, matrix, args.shaper)
    assert tb.state is not None  # set_links checked it
    gateway = tb.state.get(shapers.GatewayRecord)
    setup = ""
    if result["setup_s"]:
        setup = f", set-up {result['setup_s']:.1f} s"
        if gateway:
            setup += f" incl. gateway VM boot {gateway.boot_s:.1f} s ({gateway.accel})"
    given = "" if args.profile == "file" else f" L={args.latency or 0:g} ms, p={args.loss or 0:g} %"
    print(
        f"{matrix.profile}:{given} on "
        f"{len(list(matrix.shaped()))} directed links via {result['shaper']} "
        f"(change {result['change_s'] * 1000:.0f} ms{setup})"
    )
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    tb = Testbed.attach(args.run)
    data = api.show(tb)
    if args.json:
        print(json.dumps(data))
        return 0
    print(f"shaper: {data['shaper'] or 'none'}")
    matrix = data["matrix"] or {"profile": "none", "links": []}
    print(f"profile: {matrix['profile']}")
    for l in matrix["links"]:
        print(
            f"  {l['src']:>4} -> {l['dst']:<4} delay {l['delay_ms']:g} ms  jitter "
            f"{l['jitter_ms']:g} ms  loss {l['loss_pct']:g} %"
        )
    for line in data["tc"]:
        print(f"  tc: {line}")
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    tb = attach_to_change(args.run, args.force)
    api.clear(tb, remove=args.remove)
    print("links unshaped" + (" and shaper removed" if args.remove else ""))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    tb = Testbed.attach(args.run)
    rec = tb.state.get(shapers.EmulationRecord) if tb.state else None
    result = verify(
        tb,
        api.configured(tb),
        sample=args.sample,
        rtt_probes=args.probes,
        loss_probes=args.loss_probes,
        level=args.level,
        shaper=rec.shaper if rec else None,
        loss_location=rec.loss_location or None if rec else None,
    )
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"shaper {result['shaper'] or 'none'}; loss applied {result['loss_location'] or '-'}")
    print(
        f"{'pair':<9} {'RTT cfg':>8} {'median':>8} {'p99':>8} {'err':>7}   "
        f"{'loss cfg':>8} {'measured':>8} {f'{args.level * 100:g} % range':>15} probes"
    )
    for p in result["pairs"]:
        lo, hi = p["loss_interval_pct"]
        med = "-" if p["median_rtt_ms"] is None else f"{p['median_rtt_ms']:.2f}"
        p99 = "-" if p["p99_rtt_ms"] is None else f"{p['p99_rtt_ms']:.2f}"
        err = "-" if p["rtt_error_ms"] is None else f"{p['rtt_error_ms']:+.2f}"
        print(
            f"{p['a'] + '-' + p['b']:<9} {p['configured_rtt_ms']:>8.2f} {med:>8} {p99:>8} "
            f"{err:>7}   {p['configured_loss_pct']:>7.2f}% {p['measured_loss_pct']:>7.2f}% "
            f"{f'{lo:.2f}-{hi:.2f}%':>15} {p['probes']}"
            f"{'' if p['loss_ok'] else '  <- loss outside range'}"
        )
    return 0


def cmd_shaper(args: argparse.Namespace) -> int:
    from . import hostshaper

    if args.action == "prepare":
        name = shapers.resolve(args.shaper)
        shapers.REGISTRY[name].prepare(force=args.force)
        shapers.preflight(name)  # its tools (iptables, ethtool): ConfigError naming them
        print(f"  shaper {args.shaper}: {name}, ready")
        return 0
    if args.action == "check":
        path = hostshaper.binary_path()
        missing = hostshaper.needed_tools()
        if not path.is_file() or missing:
            raise TestbedError(
                f"host shaper: {'built' if path.is_file() else 'not built'}"
                + (f", {', '.join(missing)} missing" if missing else "")
                + " (`make shaper`)"
            )
        print(f"  host shaper: present ({path})")
        return 0
    print(f"  host shaper: {hostshaper.build(force=args.force)}")
    return 0


def cmd_gateway(args: argparse.Namespace) -> int:
    from .gateway import image

    if args.action == "check":
        print(f"  gateway image: present ({image.load().root})")
        return 0
    image.build(force=args.force)
    return 0


COMMANDS = {
    "set": cmd_set,
    "show": cmd_show,
    "clear": cmd_clear,
    "verify": cmd_verify,
    "shaper": cmd_shaper,
    "gateway": cmd_gateway,
}


@command("python -m emulation")
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1


if __name__ == "__main__":
    sys.exit(main())
