"""`edgetb COMMAND ...`: every command line of the project under one name.

    edgetb up --nodes 3            edgetb net set --profile paper --latency 20
    edgetb sweep --quick           edgetb plots results      edgetb model results

Each command is the same program as its ``python -m`` alias (listed by ``edgetb --help``),
with the same flags, the same one-line errors and exit codes (2 bad input, 1 failure,
130 stopped: ``common.command``).
"""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from common.command import EXIT_BAD_INPUT, run_as

# command -> (module whose main runs it, arguments put before the user's, what it does)
COMMANDS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "up": ("testbed.cli", ("up",), "bring a testbed up and leave it running"),
    "status": ("testbed.cli", ("status",), "hosts, addresses, Cassandra state per node"),
    "exec": ("testbed.cli", ("exec",), "run a command on a host: exec HOST -- CMD..."),
    "list": ("testbed.cli", ("list",), "every testbed run: id, name, status, owner"),
    "node": ("testbed.cli", ("node",), "one edge node: node NAME stop|start|logs|nodetool"),
    "down": ("testbed.cli", ("down",), "stop Cassandra and remove the testbed"),
    "clean": ("testbed.cli", ("clean",), "remove what crashed runs left"),
    "inventory": ("testbed.cli", ("inventory",), "a run's hosts as an Ansible inventory"),
    "check": ("testbed.cli", ("check",), "smoke-test what the set-up installed"),
    "dist": ("testbed.cli", ("dist",), "the Cassandra distribution"),
    "image": ("testbed.cli", ("image",), "the VM base image (libvirt backend)"),
    "net": ("emulation.cli", (), "emulated links: set, show, clear, verify, shaper, gateway"),
    "sweep": ("experiments.sweep", (), "measure a grid of cells into a results directory"),
    "export": ("experiments.store.export", (), "a results directory as CSV or Parquet"),
    "ycsb": ("workloads.ycsb.__main__", (), "YCSB on a running testbed"),
    "plots": ("analysis.plots", (), "the figures of stored results"),
    "report": ("analysis.report", (), "the HTML report of stored results"),
    "compare": ("analysis.compare", (), "measured RTT against φ"),
    "model": ("analysis.model", (), "measured RTT against the model's, and what-if tables"),
    "phi": ("analysis.phi", (), "φ for node counts and RFs"),
}


def _version() -> str:
    try:
        return version("edge-testbed")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [
        "usage: edgetb [--version] COMMAND [ARGS...]   (edgetb COMMAND --help: its flags)",
        "",
        "commands (each also runs as python -m MODULE):",
    ]
    for name, (module, pre, what) in COMMANDS.items():
        alias = f"python -m {module.removesuffix('.__main__').removesuffix('.cli')}"
        lines.append(f"  {name:<{width}}  {what} ({' '.join([alias, *pre])})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else EXIT_BAD_INPUT
    if args[0] == "--version":
        print(f"edgetb {_version()}")
        return 0
    if args[0] not in COMMANDS:
        close = difflib.get_close_matches(args[0], list(COMMANDS), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        print(
            f"error: unknown command {args[0]!r} ({hint}choose from {', '.join(COMMANDS)}; "
            f"edgetb --help)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    module, pre, _ = COMMANDS[args[0]]
    target = importlib.import_module(module).main  # only the command asked for is loaded
    name = "edgetb" if pre else f"edgetb {args[0]}"  # testbed's parser names its command
    return int(run_as(name, target, [*pre, *args[1:]]))
