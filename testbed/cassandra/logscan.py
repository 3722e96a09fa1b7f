"""Every node's log read at the end of its cluster's life, before its JVMs stop: ERROR and
FATAL lines, exceptions and their causes (the lines cassandra-dtest scans for), each
either allowed, with the reason it is expected, or unexpected.

``scan`` reads the nodes' ``system.log`` files (from a byte offset per node, so a
long-lived cluster is read once per stretch); ``summary`` is what a run manifest keeps
of it; ``journal`` appends it to ``$EDGETB_HOME/node-logs.jsonl``, one line per cluster
torn down, where whoever ran the clusters (a test session, a researcher's script) reads
what every one of them logged after its processes and run directory are gone.

A line is allowed by an entry of ``ALLOWED`` whose pattern it matches; entries
marked ``faults`` only where the cluster's nodes were killed, paused or cut off on
purpose (a sweep's fault cells), where peers log what they saw.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Lines of a Cassandra log that mean something went wrong (as cassandra-dtest scans for)
PROBLEM = re.compile(r"^(ERROR|FATAL) |^\S*(Exception|Error)(: |$)|^Caused by: ")
MAX_BYTES = 64 * 1024 * 1024  # read of one node's log at most (a log rotates at 50 MB)
SHOWN = 20  # unexpected lines a summary keeps


@dataclass(frozen=True)
class Allowed:
    pattern: str
    reason: str
    faults: bool = False  # only where nodes were taken down on purpose


ALLOWED: tuple[Allowed, ...] = (
    Allowed(
        r"AnnotatedConnectException: finishConnect\(\.\.\) failed: Connection refused: "
        r"/[0-9.]+:7000",
        "a node tried a peer's internode port before that peer listened (the nodes of a "
        "testbed start together; seen in every bring-up here)",
    ),
    Allowed(
        r"(Exception|Error).*(Connection reset by peer|Broken pipe|Connection refused)",
        "a peer killed or cut off by a fault: its connections end mid-message",
        faults=True,
    ),
    Allowed(
        r"(UnavailableException|WriteTimeoutException|ReadTimeoutException|"
        r"OverloadedException)",
        "a request that could not reach its replicas while some were down",
        faults=True,
    ),
    Allowed(
        r"ConnectTimeoutException: connection timed out after \d+ ms: /[0-9.]+:7000",
        "a peer paused or cut off by a fault does not answer a new internode connection "
        "(5 lines in a sweep of kill, pause, restart and partition at RF 1 and 3)",
        faults=True,
    ),
    Allowed(
        r"(ClosedChannelException|java\.nio\.channels\.ClosedChannelException)",
        "a channel closed by a node that went away",
        faults=True,
    ),
    Allowed(
        r"Exception in thread Thread\[Messaging-SynchronousWork|"
        r"Unexpected error while handling unexpected error",
        "a node stopped or stalled on purpose mid-message: its messaging thread fails as "
        "the JVM goes (seen once in 4 runs of test_3e's pause and restart of e1, on e1)",
        faults=True,
    ),
)
_COMPILED = tuple((re.compile(a.pattern), a) for a in ALLOWED)


@dataclass(frozen=True)
class Finding:
    node: str
    line: str
    allowed: str | None  # the reason, or None: unexpected


LEVEL = re.compile(r"^(TRACE|DEBUG|INFO|WARN|ERROR|FATAL) ")


def classify(node: str, text: str, *, faults: bool = False) -> list[Finding]:
    """The problems of ``text`` (a node's log), each allowed or not. A log record is its
    level line and the lines that follow it (an exception, its stack, its causes): a
    record holding a problem line is one finding, shown by its first three problem lines
    (the ERROR line, its exception, its cause), and allowed when an allowance matches any
    line of it."""
    records: list[list[str]] = []
    for raw in text.splitlines():
        if LEVEL.match(raw) or not records:
            records.append([raw])
        else:
            records[-1].append(raw)
    found = []
    for record in records:
        problems = [line for line in record if PROBLEM.search(line)]
        if not problems:
            continue
        whole = "\n".join(record)
        reason = next(
            (a.reason for rx, a in _COMPILED if (faults or not a.faults) and rx.search(whole)),
            None,
        )
        # its level line and the exception and cause under it: what a reader judges by
        shown = " | ".join(line.strip()[:300] for line in problems[:3])
        found.append(Finding(node, shown, reason))
    return found


def scan_texts(texts: Mapping[str, str], *, faults: bool = False) -> list[Finding]:
    """The problem lines of each node's log as read (node -> its text): logs read on
    their hosts (``remote_tail_argv``)."""
    return [f for node, text in texts.items() for f in classify(node, text, faults=faults)]


def remote_tail_argv(path: Path) -> list[str]:
    """The command that prints a node's log on its host (its last MAX_BYTES)."""
    return ["tail", "-c", str(MAX_BYTES), str(path)]


def save_texts(texts: Mapping[str, str], target: Path) -> None:
    """Logs read from the nodes' hosts (``remote_tail_argv``), kept as
    ``target/NODE/system.log``: a failed start on VMs or inventory hosts left only empty
    log directories on this machine (test_5's failure of 2026-11-29 kept nothing)."""
    for node, text in texts.items():
        if text:
            (target / node).mkdir(parents=True, exist_ok=True)
            (target / node / "system.log").write_text(text)


def scan(
    logs: Mapping[str, Path], marks: Mapping[str, int] | None = None, *, faults: bool = False
) -> list[Finding]:
    """The problem lines of each node's log (``logs``: node -> system.log) after its
    byte offset in ``marks``; a log that is missing is none."""
    found = []
    for node, path in logs.items():
        try:
            with open(path, "rb") as f:
                f.seek((marks or {}).get(node, 0))
                text = f.read(MAX_BYTES).decode(errors="replace")
        except FileNotFoundError:
            continue
        found += classify(node, text, faults=faults)
    return found


def sizes(logs: Mapping[str, Path]) -> dict[str, int]:
    """Each log's size now: the marks of the next ``scan``."""
    return {node: path.stat().st_size if path.is_file() else 0 for node, path in logs.items()}


def unexpected(findings: Sequence[Finding]) -> list[Finding]:
    return [f for f in findings if f.allowed is None]


def summary(findings: Sequence[Finding]) -> dict[str, Any]:
    """What a run manifest keeps: the unexpected lines (the first SHOWN), their count, and
    how many lines each allowance let pass."""
    bad = unexpected(findings)
    return {
        "unexpected": len(bad),
        "lines": [f"{f.node}: {f.line}" for f in bad[:SHOWN]],
        "allowed": dict(Counter(f.allowed for f in findings if f.allowed is not None)),
    }


JOURNAL = "node-logs.jsonl"


def journal(home: Path, run_id: str, findings: Sequence[Finding], faulted: bool) -> None:
    """One line for a cluster torn down (its run, when, whether nodes were taken down on
    purpose, ``summary``) appended to ``home``/node-logs.jsonl (never through a link)."""
    from common.files import append_to

    line = {"run_id": run_id, "at": time.time(), "faulted": faulted, **summary(findings)}
    with append_to(home / JOURNAL, perm=0o600) as f:
        f.write(json.dumps(line) + "\n")


def journal_since(home: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The journal's lines after byte ``offset``, and its size now (the next offset)."""
    path = home / JOURNAL
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], 0
    whole = data[: data.rfind(b"\n") + 1]  # a line being written is read next time
    return [json.loads(ln) for ln in whole.splitlines() if ln.strip()], offset + len(whole)
