"""What the sweep watches while a cell is measured: the components the cell depends on
(every Cassandra node, the hosts and their recorded processes, the shaping and its
settings on disk). A broken one voids the cell (``ComponentLost``); the sweep rebuilds
what it can (``recoverable``: the shaper, a node on netns) and measures the cell again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from emulation import api as emulation
from emulation import shapers
from testbed import Testbed, TestbedError
from testbed.backends import capabilities
from testbed.state import RunState


class ComponentLost(TestbedError):
    """A component the cell depends on broke while it was measured; the cell is void.
    ``recoverable``: the sweep can rebuild it (the gateway VM) and measure the cell again."""

    def __init__(self, message: str, *, recoverable: bool = False):
        super().__init__(message)
        self.recoverable = recoverable


class NodeLost(ComponentLost):
    """A Cassandra node died while a cell was measured (its log tail in the message)."""

    def __init__(self, message: str, *, node: str, recoverable: bool):
        super().__init__(message, recoverable=recoverable)
        self.node = node


def check_components(
    tb: Testbed, *, thorough: bool = False, expected_down: frozenset[str] = frozenset()
) -> None:
    """Raise once something the measurement depends on is broken: a Cassandra node died
    (NodeError with its log tail), a host's namespace/VM or recorded process is gone, the
    gateway VM died, or (``thorough``: one query per host) shaping disappeared.
    ``expected_down``: nodes a fault of the cell took down on purpose."""
    # The run's problems first, the nodes after: a node that dies between the two looks
    # is then seen dead by the second (a death is final), and a node the problems name
    # as dead is a node lost either way, never a broken testbed that ends the sweep.
    broken = [p for p in tb.problems() if not any(p.startswith(f"{n}: ") for n in expected_down)]
    for node in tb.nodes.values():
        if node.name in expected_down:
            continue
        named = any(p.startswith(f"{node.name}: process ") for p in broken)
        if named or not node.alive():
            error = node.error("Cassandra died during the cell; the cell is void")
            # restart_node: the netns backend (elsewhere the sweep stops; rerun resumes)
            recoverable = capabilities(tb.backend_name).restart_nodes
            raise NodeLost(str(error), node=node.name, recoverable=recoverable)
    if broken:
        raise ComponentLost(
            "the testbed broke during the sweep (" + "; ".join(broken) + "); the cell it "
            "was in is not stored (rerun the same command to resume)"
        )
    lost = emulation.problems(tb, thorough=thorough)
    if thorough and tb.state is not None:
        # Another process (`emulation set --force`) may have reshaped the testbed: what
        # is on disk must still be what this sweep applied.
        rec = tb.state.get(shapers.EmulationRecord)
        applied = rec.matrix if rec else None
        on_disk = RunState.load(tb.state.run_dir).get(shapers.EmulationRecord)
        if (on_disk.matrix if on_disk else None) != applied:
            lost.append("another process changed the link settings during the cell")
    if lost:
        raise ComponentLost(
            "the emulation broke during the cell (" + "; ".join(lost) + ")", recoverable=True
        )


def component_watch(
    tb: Testbed,
    also=lambda: None,
    every_s: float = 1.0,
    expected_down: Callable[[], frozenset[str]] = frozenset,
):
    """check_components (cheap checks only), at most once per ``every_s``; ``also`` on
    every call (the sweep's stop check); ``expected_down``: the nodes a fault took down."""
    last = [0.0]

    def watch() -> None:
        also()
        now = time.monotonic()
        if now - last[0] < every_s:
            return
        last[0] = now
        check_components(tb, expected_down=expected_down())

    return watch
