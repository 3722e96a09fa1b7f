"""`make test`: the suite in pytest sessions side by side (docs/testing.md): the unit and
integration tests in one; in a second beside it the parallel and Dask sweeps, the
faults and a sweep's ownership (test_7, test_8, test_3e, test_6: needing neither the
shared cluster nor the VMs); then the VM tests alone.

One after the other the sessions leave cores idle: the integration tests wait on shaped
links as often as they compute. Side by side each session keeps its own
``$EDGETB_HOME``, session tag, pytest cache and leak check (which tells the other
session's runs from its own through the run registry, tests/support/leaks.py), so none
fails on another's runs; each is also the "other work on the machine" the suite must
stand. The VM tests ran beside the rest too (``VMS_BESIDE``): 34-38 min in all, but a
two-node Cassandra in TCG guests slowed by the rest could not log in at QUORUM in one
fresh run of two (2026-11-29).

    python -m tests.support.suite [PYTEST ARGS...]

Arguments that name tests (``tests/unit``, ``tests/integration/test_2_emulation.py::x``)
run those in one session, as pytest would; any other arguments (``-k``, ``-x``) go to
every session.

Each session's lines are printed as they come, prefixed ``p| `` and ``vm| `` but the
main one's; the exit code is the first failure's (pytest's 5, "no tests collected",
counts as success for a session the arguments left empty). Ctrl-C and SIGTERM reach
every session, by PID. At the end each failed session's summary (its ``FAILED`` and
``ERROR`` lines and its last line) is printed again: CI shows only the output's tail, and
a session that failed in the first phase is otherwise 15 minutes of VM lines above it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

from tests.support.kept_logs import SUITE_PREFIX, TEST_LOGS, prune

ROOT = Path(__file__).resolve().parents[2]
VM_TESTS = ["tests/integration/test_4_vms.py", "tests/integration/test_5_vm_sweep.py"]
# beside the main session: modules that need neither its shared cluster nor the VMs, as
# many as balance the two (2026-11-29, with a CPU hog: main 23 min 44 s against 8 min 30 s
# for test_7 and test_8 alone; the faults' sweeps and test_6 are ~7 min of the main's)
BESIDE = [
    "tests/integration/test_7_parallel.py",
    "tests/integration/test_8_workers.py",
    "tests/integration/test_3e_faults.py",
    "tests/integration/test_6_ownership.py",
]
REST = ["tests/unit", "tests/integration", *(f"--ignore={t}" for t in [*VM_TESTS, *BESIDE])]
# the VM tests beside the rest too (True), or alone once it has ended (False): beside it,
# a two-node Cassandra in the TCG guests could not log in at QUORUM for 521 s (test_5,
# 2026-11-29, in one fresh run of two), alone it never failed that way
VMS_BESIDE = False
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


# pytest's lines that say what failed: -ra's short summary and the closing count
_CLOSING = re.compile(rb"^=+ .*\b(failed|error|errors|passed)\b.* in [0-9.]+s")
_SUMMARY = re.compile(rb"^(FAILED|ERROR) |" + _CLOSING.pattern)
TAIL_LINES = 20  # a session's last lines, shown when it printed no closing count
KEEP_OUTPUTS = 5  # the newest runs' (apart from the failed runs' node logs there)


def _relay(proc: subprocess.Popen, prefix: str, summary: list[bytes], copy: Path | None) -> None:
    """Relays ``proc``'s lines as they come, keeping in ``summary`` those that say what
    failed, and all of them in the file ``copy``."""
    assert proc.stdout is not None  # PIPE
    try:
        kept = open(copy, "ab") if copy is not None else None
    except OSError:
        kept = None
    tail: deque[bytes] = deque(maxlen=TAIL_LINES)
    for line in iter(proc.stdout.readline, b""):
        sys.stdout.buffer.write(prefix.encode() + line)
        sys.stdout.buffer.flush()
        if kept is not None:
            try:  # a full disk stops the copy, never the relay (a blocked pipe would hang)
                kept.write(line)
                kept.flush()
            except OSError:
                kept.close()
                kept = None
        if _SUMMARY.search(line):
            summary.append(line)
        tail.append(line)
    if kept is not None:
        kept.close()
    if not any(_CLOSING.search(line) for line in summary):  # killed, crashed, or -q
        summary.extend([b"(no closing count; its last lines:)\n", *tail])


def main(argv: list[str]) -> int:
    if named_tests(argv):  # the caller chose the tests: one session, as pytest would
        return subprocess.call([sys.executable, "-m", "pytest", "-ra", "--durations=25", *argv],
                               cwd=ROOT)  # fmt: skip
    common = ["-ra", *argv]
    env = dict(os.environ)
    # each session a home and a tag of its own (tests/conftest.py makes them): a home
    # given by the caller goes to the main session only
    env.pop("EDGETB_TEST_SESSION", None)
    other_env = {k: v for k, v in env.items() if k != "EDGETB_HOME"}
    main_session = ("", [*common, "--durations=25", *REST], env)
    # each other session its own cache: the one that ended last would overwrite the
    # others' lastfailed
    beside = ("p| ", [*common, "-o", "cache_dir=.pytest_cache/beside", "--durations=10",
                      *BESIDE], other_env)  # fmt: skip
    vms = ("vm| ", [*common, "-o", "cache_dir=.pytest_cache/vm", "--durations=10", *VM_TESTS],
           other_env)  # fmt: skip
    phases = [[main_session, beside, vms]] if VMS_BESIDE else [[main_session, beside], [vms]]
    codes: dict[str, int] = {}
    summaries: dict[str, list[bytes]] = {}
    outputs = _outputs_dir()
    for phase in phases:
        codes.update(_run_side_by_side(phase, summaries, outputs))
    _print_failures(codes, summaries)
    if outputs is not None:
        print(f"suite: each session's whole output in {outputs}")
    print("suite: " + ", ".join(f"{n or 'main'} session exit {c}" for n, c in codes.items()))
    return combined(*codes.values())


def _outputs_dir() -> Path | None:
    """Where each session's whole output is kept: beside the failed runs' node logs
    (tests/support/kept_logs.py), as CI's clone and its output are gone when someone
    looks; the newest KEEP_OUTPUTS runs' are kept. None where it cannot be made (the
    output is relayed all the same)."""
    into = TEST_LOGS
    path = into / f"{SUITE_PREFIX}{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    try:
        into.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.mkdir(mode=0o700)
    except OSError as exc:
        print(f"suite: sessions' output not kept ({exc})", file=sys.stderr)
        return None
    prune(into, KEEP_OUTPUTS, lambda p: p.name.startswith(SUITE_PREFIX))
    return path


def _print_failures(codes: dict[str, int], summaries: dict[str, list[bytes]]) -> None:
    """Each failed session's lines that say what failed, again, under a heading."""
    out = sys.stdout
    out.flush()
    for name, code in codes.items():
        if code not in (0, NO_TESTS):
            out.write(f"suite: what the {name or 'main'} session reported failing (exit {code}):\n")
            out.flush()
            for line in summaries[name]:
                out.buffer.write(f"suite: {name or 'main'}| ".encode() + line)
            out.buffer.flush()


def _run_side_by_side(
    sessions: list[tuple[str, list[str], dict[str, str]]],
    summaries: dict[str, list[bytes]],
    outputs: Path | None = None,
) -> dict[str, int]:
    """Each (prefix, pytest arguments, environment) a pytest session, all at once, their
    lines relayed as they come (and kept in ``outputs/<name>.log``); Ctrl-C and SIGTERM
    reach every one, by PID. Returns each session's exit code by its name (its prefix
    without the bar) and puts the lines that say what failed in ``summaries`` under the
    same name."""
    procs = [(prefix.rstrip("| "), _pytest(args, env), prefix) for prefix, args, env in sessions]
    for name, _, _ in procs:
        summaries[name] = []
    relays = [
        threading.Thread(
            target=_relay,
            args=(p, pre, summaries[name], outputs and outputs / f"{name or 'main'}.log"),
            daemon=True,
        )
        for name, p, pre in procs
    ]
    for t in relays:
        t.start()

    def forward(signum, _frame):
        for _, proc, _ in procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signum)
                except ProcessLookupError:  # ended meanwhile
                    pass

    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {sig: signal.signal(sig, forward) for sig in signals}
    try:
        codes = {name: proc.wait() for name, proc, _ in procs}
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    for t in relays:
        t.join()
    return codes


def combined(*codes: int) -> int:
    """The suite's exit code from its sessions': the first failure's; "no tests
    collected" only when no session ran a test."""
    failed = [c for c in codes if c not in (0, NO_TESTS)]
    if failed:
        return failed[0]
    return NO_TESTS if all(c == NO_TESTS for c in codes) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
