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


def run_cli(*args: str, module: str = "testbed", run: str | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `python -m MODULE ARGS [--run RUN]` as a user would."""
    extra = ["--run", run] if run else []
    return subprocess.run([sys.executable, "-m", module, *args, *extra], capture_output=True,
                          text=True, timeout=timeout, env=os.environ.copy())


def assert_no_residue(run_id: str | None = None) -> None:
    left = residue(run_id)
    assert left == {"namespaces": [], "processes": [], "run_dirs": []}, left
