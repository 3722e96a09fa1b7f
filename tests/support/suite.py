"""`make test`: the suite in two pytest sessions side by side (docs/testing.md): the VM
tests, then the parallel and Dask sweeps, in one; everything else in the other.

Under TCG the VM tests are a third of the suite's time, most of it emulated CPU in
guests that wait on one vCPU each, while the rest of the suite waits on shaped links
as often as it computes; one after the other the two halves leave cores idle. The VM
tests alone ended after 15 min of a 33-minute main session (2026-11-29, with a CPU hog
beside them), so the second session also takes the two slowest modules that need
neither the shared cluster nor the VMs (test_7, test_8: 7.5 min), after the VMs are
down. Side by side each session keeps its own ``$EDGETB_HOME``, session tag and leak check (which
tells the other session's runs from its own through the run registry,
tests/support/leaks.py), so neither's leak check fails on the other's runs; each is
also the "other work on the machine" the suite must stand (the VM tests' budgets scale
with their guests' measured speed, ~3x slower beside the rest).

    python -m tests.support.suite [PYTEST ARGS...]

Arguments that name tests (``tests/unit``, ``tests/integration/test_2_emulation.py::x``)
run those in one session, as pytest would; any other arguments (``-k``, ``-x``) go to
both sessions.

The second session's lines are printed as they come, prefixed ``vm| ``; the exit code is
the first failure's (pytest's 5, "no tests collected", counts as success for a session
the arguments left empty). Ctrl-C and SIGTERM reach both sessions, by PID.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VM_TESTS = ["tests/integration/test_4_vms.py", "tests/integration/test_5_vm_sweep.py"]
# the second session: the VM tests first (their guests are the longest part), then these
BESIDE = [*VM_TESTS, "tests/integration/test_7_parallel.py", "tests/integration/test_8_workers.py"]
REST = ["tests/unit", "tests/integration", *(f"--ignore={t}" for t in BESIDE)]
NO_TESTS = 5  # pytest's exit code when the selection is empty
# pytest options whose value is the next argument (``-k tests`` names no path)
_VALUED = set(
    "-k -m -p -c -o -W --deselect --ignore --ignore-glob --rootdir --basetemp --durations "
    "--maxfail --junitxml --confcutdir".split()
)


def named_tests(argv: list[str]) -> list[str]:
    """The arguments of ``argv`` that name test files, directories or test ids."""
    return [
        arg
        for prev, arg in zip(["", *argv], argv, strict=False)
        if prev not in _VALUED and not arg.startswith("-") and (ROOT / arg.split("::")[0]).exists()
    ]


def _pytest(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own group: a signal to it reaches its children
    )


def _relay(proc: subprocess.Popen, prefix: str) -> None:
    assert proc.stdout is not None  # PIPE
    for line in iter(proc.stdout.readline, b""):
        sys.stdout.buffer.write(prefix.encode() + line)
        sys.stdout.buffer.flush()


def main(argv: list[str]) -> int:
    if named_tests(argv):  # the caller chose the tests: one session, as pytest would
        return subprocess.call([sys.executable, "-m", "pytest", "-ra", "--durations=25", *argv],
                               cwd=ROOT)  # fmt: skip
    common = ["-ra", *argv]
    env = dict(os.environ)
    # each session a home and a tag of its own (tests/conftest.py makes them): a home
    # given by the caller goes to the main session only
    env.pop("EDGETB_TEST_SESSION", None)
    vm_env = {k: v for k, v in env.items() if k != "EDGETB_HOME"}
    # its own cache: the session that ended last would overwrite the other's lastfailed
    vm = _pytest(
        [*common, "-o", "cache_dir=.pytest_cache/beside", "--durations=15", *BESIDE], vm_env
    )
    rest = _pytest([*common, "--durations=25", *REST], env)
    relays = [
        threading.Thread(target=_relay, args=(rest, ""), daemon=True),
        threading.Thread(target=_relay, args=(vm, "vm| "), daemon=True),
    ]
    for t in relays:
        t.start()

    def forward(signum, _frame):
        for proc in (vm, rest):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signum)
                except ProcessLookupError:  # ended meanwhile
                    pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    codes = {"vm": vm.wait(), "rest": rest.wait()}
    for t in relays:
        t.join()
    print(f"suite: VM session exit {codes['vm']}, main session exit {codes['rest']}")
    return combined(codes["rest"], codes["vm"])


def combined(*codes: int) -> int:
    """The suite's exit code from its sessions': the first failure's; "no tests
    collected" only when no session ran a test."""
    failed = [c for c in codes if c not in (0, NO_TESTS)]
    if failed:
        return failed[0]
    return NO_TESTS if all(c == NO_TESTS for c in codes) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
