"""Record an interface's qdiscs before the testbed shapes it, and put exactly those back.

A real host's interface has a qdisc of its own (the kernel's default — ``fq_codel``,
``mq`` with children, ``noqueue`` —, or one its owner set). Shaping replaces the root
qdisc; undoing the shaping must restore what was there, not "delete any root qdisc".

What can be restored from ``tc qdisc show`` alone:

- **default**: every egress qdisc has handle ``0:`` (attached by the kernel, not by a
  user): deleting the root qdisc makes the kernel attach the same again;
- **one classless root qdisc** a user set (``fq 8001: root ... limit 10000p ...``): put
  back with ``tc qdisc replace ... root handle H KIND PARAMS``;
- anything else (a classful hierarchy: its classes and filters are not in the record)
  is refused *before* shaping, with an error naming the host.

The ingress side (``ingress``/``clsact``) is never touched by egress shaping and is
compared like the rest. The record lives in the run's state (``QdiscRecord``), so that
the shaper's ``stop`` and a backend's ``down`` both find it. Everything but ``restore`` is
pure.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

from common.errors import ConfigError, TestbedError

from .state import Record

# Qdiscs without classes: their `tc qdisc show` parameters are also valid `tc qdisc add`
# parameters (refcnt aside), so one line restores them.
CLASSLESS = frozenset(
    {
        "pfifo",
        "bfifo",
        "pfifo_head_drop",
        "fq",
        "fq_codel",
        "fq_pie",
        "codel",
        "pie",
        "sfq",
        "tbf",
        "netem",
        "cake",
        "red",
        "choke",
        "sfb",
        "hhf",
    }
)
INGRESS_KINDS = frozenset({"ingress", "clsact"})
_LINE = re.compile(r"^qdisc\s+(?P<kind>\S+)\s+(?P<handle>[0-9a-fA-F]*:)\s*(?P<rest>.*)$")


class QdiscRestoreError(TestbedError):
    """A host's qdiscs are not what was recorded before the run, after restoring."""


@dataclass(frozen=True)
class Qdisc:
    """One line of ``tc qdisc show``."""

    kind: str
    handle: str  # "0:" for the kernel's own
    parent: str  # "root", "ingress" or the parent's handle
    params: tuple[str, ...]

    @property
    def is_default(self) -> bool:
        return self.handle == "0:"

    @property
    def is_ingress(self) -> bool:
        return self.kind in INGRESS_KINDS


def show_argv(dev: str) -> list[str]:
    return ["tc", "qdisc", "show", "dev", dev]


def normalize(text: str) -> str:
    """``tc qdisc show`` output in one canonical form: one line per qdisc (continuation
    lines joined), single spaces, no ``refcnt`` (a kernel reference count, not state)."""
    lines: list[str] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        if raw[:1].isspace() and lines:
            lines[-1] += " " + raw.strip()
        else:
            lines.append(raw.strip())
    return "\n".join(re.sub(r"\s+refcnt \d+", "", " ".join(ln.split())) for ln in lines)


def parse(text: str) -> list[Qdisc]:
    """The qdiscs in ``tc qdisc show dev D`` output; ConfigError on a line that is none."""
    found = []
    for line in normalize(text).splitlines():
        m = _LINE.match(line)
        if not m:
            raise ConfigError(f"not a `tc qdisc show` line: {line!r}")
        words = m.group("rest").split()
        if words[:1] == ["dev"]:  # `tc qdisc show` without `dev D` names each device
            words = words[2:]
        if words[:1] == ["root"]:
            parent, params = "root", words[1:]
        elif words[:1] == ["parent"] and len(words) >= 2:
            parent, params = words[1], words[2:]
        elif words[:1] == ["ingress"]:
            parent, params = "ingress", words[1:]
        else:
            parent, params = "?", words
        found.append(Qdisc(m.group("kind"), m.group("handle"), parent, tuple(params)))
    return found


def restore_commands(dev: str, recorded: str) -> list[list[str]]:
    """The tc commands (argument lists) that give ``dev`` the egress qdiscs of
    ``recorded`` again; ConfigError when they cannot be rebuilt from the record."""
    egress = [q for q in parse(recorded) if not q.is_ingress]
    if not egress:
        raise ConfigError(f"{dev}: no root qdisc in the record")
    if all(q.is_default for q in egress):
        return [["tc", "qdisc", "del", "dev", dev, "root"]]
    if len(egress) == 1 and egress[0].parent == "root" and egress[0].kind in CLASSLESS:
        q = egress[0]
        return [
            ["tc", "qdisc", "replace", "dev", dev, "root", "handle", q.handle, q.kind, *q.params]
        ]
    described = "; ".join(f"{q.kind} {q.handle} {q.parent}" for q in egress)
    raise ConfigError(
        f"{dev} has qdiscs the testbed could not restore after shaping ({described}): "
        f"only the kernel's default or one classless root qdisc can be put back"
    )


@dataclass
class QdiscRecord(Record):
    """Each shaped host's qdiscs as ``tc qdisc show`` gave them before the first shaping:
    host -> device -> text. Present while shaping may be on; gone once restored."""

    KEY = "qdiscs"
    before: dict[str, dict[str, str]] = field(default_factory=dict)


def check_restorable(host: str, dev: str, recorded: str) -> None:
    """ConfigError naming ``host`` when ``recorded`` could not be put back."""
    try:
        restore_commands(dev, recorded)
    except ConfigError as exc:
        raise ConfigError(f"{host}: {exc}; remove it before shaping this host") from None


def restore(
    run: Callable[..., subprocess.CompletedProcess[str]], host: str, dev: str, recorded: str
) -> bool:
    """Give ``dev`` on ``host`` the qdiscs of ``recorded`` again and check that it has
    them; returns whether anything had to change. ``run(argv, check=...)`` runs a
    command on the host and returns a CompletedProcess. QdiscRestoreError (naming the
    host, the record and what it has now) when they differ afterwards."""
    current = run(show_argv(dev), check=True).stdout
    if normalize(current) == normalize(recorded):
        return False
    for argv in restore_commands(dev, recorded):
        # `del root` of a default qdisc fails harmlessly; the comparison below decides
        run(argv, check=False)
    after = run(show_argv(dev), check=True).stdout
    if normalize(after) != normalize(recorded):
        raise QdiscRestoreError(
            f"{host}: {dev} did not get its qdiscs back: recorded before the run "
            f"{normalize(recorded)!r}, now {normalize(after)!r}"
        )
    return True
