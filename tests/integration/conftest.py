"""Integration fixtures: one real 3-node cluster shared by every test that needs it."""

import os
import subprocess
import sys

import pytest

from testbed import Testbed, Topology
from testbed.clean import residue

pytestmark = pytest.mark.root


def pytest_collection_modifyitems(items):
    for item in items:
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


def assert_no_residue(run_id: str | None = None) -> None:
    left = residue(run_id)
    assert not any(left.values()), left


def rtt_tolerance_ms(expected_rtt_ms: float) -> float:
    """How far a measured median RTT may be from the configured one: 2 ms of forwarding
    and scheduling (the netem gateway runs under TCG on the same two cores as the
    cluster) plus 3 % of the delay (netem's timers in a TCG guest fire late in
    proportion to load). 100 ms must read 95-105 ms: far from 0, 50 or 200."""
    return 2.0 + 0.03 * expected_rtt_ms
