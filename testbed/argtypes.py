"""argparse ``type=`` functions for the command lines: a bad value is a one-line usage
error (exit code 2) that names the value and what is allowed, before anything runs; and
the flags that more than one command line shares (the --node-* resource limits)."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

from common import inputs
from common.errors import ConfigError

from . import resources
from .state import check_name

_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def _range_text(low: float | None, high: float | None, unit: str) -> str:
    unit = f" {unit}" if unit else ""
    if high is None:
        return f">= {low:g}{unit}"
    return f"from {low:g} to {high:g}{unit}"


def integer(low: int, high: int | None = None, unit: str = "") -> Callable[[str], int]:
    """An integer in low..high (``high`` None: no upper bound)."""

    def parse(text: str) -> int:
        try:  # sized before it is converted, compared as an exact integer
            return inputs.number(text, "", int, low, math.inf if high is None else high)
        except ConfigError:
            allowed = _range_text(low, high, unit)
            raise argparse.ArgumentTypeError(
                f"expected an integer {allowed}, got {inputs.shown(text)}"
            ) from None

    parse.__name__ = "integer"
    return parse


def number(low: float, high: float, unit: str = "") -> Callable[[str], float]:
    """A finite number in low..high (never NaN or infinite)."""

    def parse(text: str) -> float:
        try:
            return inputs.number(text, "", float, low, high)
        except ConfigError:
            allowed = _range_text(low, high, unit)
            raise argparse.ArgumentTypeError(
                f"expected a number {allowed}, got {inputs.shown(text)}"
            ) from None

    parse.__name__ = "number"
    return parse


def run_id(text: str) -> str:
    """A run id or a testbed's name: names a directory under the runs directory, or is
    looked up among the runs' names, so no path separators."""
    if not _RUN_ID_RE.match(text):
        raise argparse.ArgumentTypeError(
            f"expected a run id or testbed name (letters, digits, '.', '_', '-'; as "
            f"`edgetb list` shows them), got {text!r}"
        )
    return text


def testbed_name(text: str) -> str:
    """A name for a new testbed (``state.check_name``)."""
    try:
        return check_name(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# -- flags shared by command lines ---------------------------------------------------------


NODE_FLAGS = (
    ("profile", "NAME", "a device profile for every edge node: " + ", ".join(resources.PROFILES)),
    ("cpu", "CORES", "CPU quota per edge node in cores, e.g. 0.5 (cgroup cpu.max)"),
    ("cpuset", "CPUS", "CPUs an edge node may run on, e.g. 1 or 0-1 (cpuset.cpus)"),
    ("memory_mb", "MB", "memory per edge node, no swap (memory.max); the heap must fit"),
    ("read_mbps", "MB/S", "disk read bandwidth per edge node (io.max)"),
    ("write_mbps", "MB/S", "disk write bandwidth per edge node (io.max)"),
)


def add_node_resource_flags(p: argparse._ActionsContainer) -> None:
    """--node-profile/-cpu/-cpuset/-memory/-read-mbps/-write-mbps (netns: cgroups). Each
    takes one value for every edge node, or per host: e0=1,e1=0.5 (ep= limits the
    endpoint too)."""
    for name, metavar, text in NODE_FLAGS:
        p.add_argument(resources.FLAGS[name], dest=f"node_{name}", metavar=metavar, help=text)


def node_resources(args: argparse.Namespace) -> dict | None:
    """The --node-* flags as the netns backend's ``resources`` option (None: none given)."""
    values = {
        name: resources.parse_flag(name, getattr(args, f"node_{name}", None))
        for name, *_ in NODE_FLAGS
    }
    spec = resources.spec_from({k: v for k, v in values.items() if v})
    return spec or None


def sites(text: str) -> tuple[int, ...]:
    """Nodes per site: SITESxNODES (3x3) or a list (2,3)."""
    from .topology import parse_sites

    try:
        return parse_sites(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
