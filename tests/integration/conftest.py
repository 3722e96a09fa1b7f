"""Integration fixtures: one real 3-node cluster shared by every test that needs it."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import Testbed, Topology
from testbed.clean import residue

pytestmark = pytest.mark.root


def pytest_collection_modifyitems(items):
    """Integration tests need root; the unit tests collected in the same session do not."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.root)


@pytest.fixture(scope="session")
def cluster():
    tb = Testbed(Topology(edge_nodes=3), progress=print)
    tb.up()
    yield tb
    tb.down()


def run_cli(
    *args: str, module: str = "testbed", run: str | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run `python -m MODULE ARGS [--run RUN]` as a user would."""
    extra = ["--run", run] if run else []
    return subprocess.run(
        [sys.executable, "-m", module, *args, *extra],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
    )


def assert_no_residue(run_id: str) -> None:
    """Nothing of run ``run_id`` is left (namespaces, processes, VMs, directory, registry)."""
    assert run_id
    left = residue(run_id)
    assert not any(left.values()), left


def run_id_in(output: str) -> str:
    """The testbed run id a CLI printed ("run 3fa2c1: ..." or "run 3fa2c1 is up")."""
    match = re.search(r"\brun ([0-9a-f]{6})\b", output)
    assert match, output[-2000:]
    return match.group(1)


def rtt_tolerance_ms(expected_rtt_ms: float) -> float:
    """How far a measured median RTT may be from the configured one: 2 ms of forwarding
    and scheduling (the netem gateway runs under TCG on the same two cores as the
    cluster) plus 3 % of the delay (netem's timers in a TCG guest fire late in
    proportion to load). 100 ms must read 95-105 ms: far from 0, 50 or 200."""
    return 2.0 + 0.03 * expected_rtt_ms
