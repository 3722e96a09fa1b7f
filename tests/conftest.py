import atexit
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

# Tests keep their runs apart from a researcher's own (~/.edgetb); the Cassandra cache
# (~/.cache/edgetb) is shared so it is assembled once.
# What this session starts carries this in its environment: the leak check tells its
# processes from another test run's on the same machine (tests/support/leaks.py).
os.environ.setdefault("EDGETB_TEST_SESSION", f"{os.getpid()}-{time.time_ns()}")

if "EDGETB_HOME" not in os.environ:
    _HOME = tempfile.mkdtemp(prefix="edgetb-tests-")
    os.environ["EDGETB_HOME"] = _HOME

    @atexit.register
    def _remove_home() -> None:
        """The session's state directory goes with it, unless a run is still recorded
        there (a leak: kept so `python -m testbed clean` with this EDGETB_HOME finds it)."""
        from tests.support.kept_logs import TEST_LOGS, keep_logs

        kept = keep_logs(Path(_HOME), TEST_LOGS)
        if kept is not None:
            print(f"edgetb: node logs of the session's failed runs kept in {kept}", file=sys.stderr)
        runs = Path(_HOME, "runs")
        if runs.is_dir() and any(runs.iterdir()):
            print(f"edgetb: runs left recorded in {runs}; kept for `clean`", file=sys.stderr)
            return
        shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def nothing_left_on_the_machine():
    """The independent leak check (tests/support/leaks.py): an inventory of the machine
    taken with the system's own tools before the first test, and again after the last
    (after every session fixture's teardown, the shared cluster's included); any
    difference in what the project could have made fails the run, other changes of the
    machine are named as out of scope. As root only: without it the tests change
    nothing there."""
    if os.geteuid() != 0 or os.environ.get("EDGETB_LEAK_CHECK") == "off":
        yield
        return
    from tests.support import leaks

    before = leaks.take()
    yield
    left = leaks.settled(before)
    others = leaks.out_of_scope(before, leaks.take())
    blind = leaks.blind_spots()
    if others:  # shown, not failed on: nothing the project could have made
        print(
            f"\nleak check: {len(others)} changes out of its scope (not the project's "
            "objects):\n" + "\n".join(others[:20]),
            file=sys.__stderr__,
        )
    if blind:  # a check that could not look is not a clean one
        pytest.fail(
            f"the leak check could not look with {', '.join(blind)} (not installed; "
            "`make test` installs them: scripts/install-system.sh tests vms)",
            pytrace=False,
        )
    if left:
        pytest.fail(
            f"the test run changed the machine ({len(left)} differences, "
            f"tests/support/leaks.py):\n" + "\n".join(left[:40]),
            pytrace=False,
        )


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root: network namespaces and Cassandra processes")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)
