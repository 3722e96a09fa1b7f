"""`edgetb`, the one command, and what every command shares (common.command): the same
programs as the python -m aliases, one-line errors with the same exit codes, and stop
signals (INT, TERM, HUP) that all end in the command's own teardown."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from edgetb.cli import COMMANDS

EDGETB = Path(sys.executable).parent / "edgetb"  # the console script of [project.scripts]


def edgetb(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(EDGETB), *args], capture_output=True, text=True, timeout=60)


def test_the_console_script_is_installed_and_knows_its_version():
    from importlib.metadata import version

    proc = edgetb("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"edgetb {version('edge-testbed')}"


def test_help_lists_every_command_and_each_runs_a_main():
    proc = edgetb("--help")
    assert proc.returncode == 0
    listed = [line.split()[0] for line in proc.stdout.splitlines() if line.startswith("  ")]
    assert listed == list(COMMANDS)
    for module, _pre, _what in COMMANDS.values():
        assert callable(importlib.import_module(module).main), module


def test_a_command_is_its_alias_under_another_name():
    alias = subprocess.run(
        [sys.executable, "-m", "analysis.phi", "--nodes", "3", "5", "--exact"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    proc = edgetb("phi", "--nodes", "3", "5", "--exact")
    assert proc.returncode == alias.returncode == 0
    assert proc.stdout == alias.stdout and "2/3" in proc.stdout
    usage = edgetb("sweep", "--help").stdout
    assert usage.startswith("usage: edgetb sweep ") and "--dry-run" in usage
    assert edgetb("up", "--help").stdout.startswith("usage: edgetb up ")
    assert edgetb("net", "set", "--help").stdout.startswith("usage: edgetb net set ")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["nosuch"], "error: unknown command 'nosuch'"),
        (["sweep", "--nodes", "0", "--dry-run"], "error: nodes values must be integers from 1"),
        (["model", "predict", "--nodes", "0"], "error: --nodes: 0 is outside 1..9"),
        (["export", "/nonexistent-results"], "error: "),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, line):
    proc = edgetb(*args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(line) and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr


# A command that starts something, waits, and tears it down: what a signal must reach.
STOPPABLE = textwrap.dedent(
    """
    import sys, time
    from common.command import command

    @command("stoppable")
    def main(argv=None):
        try:  # "started" inside: a signal right after it must find the teardown armed
            print("started", flush=True)
            time.sleep(60)
        finally:
            for i in range(2000):  # a teardown that keeps talking
                print(f"tearing down {i}", flush=True)
            open(sys.argv[1], "w").write("torn down")
        return 0

    sys.exit(main([]))
    """
)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_every_stop_signal_ends_in_the_teardown(tmp_path, sig):
    marker = tmp_path / "marker"
    proc = subprocess.Popen(
        [sys.executable, "-c", STOPPABLE, str(marker)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        # as a terminal's foreground command gets it: a test run started in the
        # background (`make test &`) ignores SIGINT, its children inherit that, and Python
        # then leaves Ctrl-C ignored, as a background job should
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None and proc.stdout.readline() == "started\n"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert marker.read_text() == "torn down"
    assert err.strip().splitlines()[-1] == "interrupted"


def test_a_hang_up_with_the_terminal_gone_still_tears_down(tmp_path):
    # a dropped SSH session: SIGHUP, and the terminal is gone, so printing would fail
    # with EIO; the teardown must run to its end all the same
    marker = tmp_path / "marker"
    leader, follower = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", STOPPABLE, str(marker)],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        cwd=Path(__file__).resolve().parents[2],
        start_new_session=True,
    )
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 30
    while b"started" not in seen and time.monotonic() < deadline:
        seen += os.read(leader, 1024)
    os.close(leader)  # the terminal goes away
    proc.send_signal(signal.SIGHUP)
    assert proc.wait(timeout=30) == 130
    assert marker.read_text() == "torn down"


@pytest.mark.parametrize("module", ["analysis.claims", "analysis.ycsb", "analysis.faults"])
def test_a_library_module_run_as_a_command_says_which_command_to_run(module):
    """`python -m analysis.claims --help` printed nothing and exited 0."""
    proc = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"{module} is a library module, not a command: ") and "edgetb " in line


def test_stop_signals_counts_each_signal_and_puts_the_handlers_back():
    from common.command import stop_signals

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    stopped = []
    with stop_signals(lambda: stopped.append(1)) as count:
        os.kill(os.getpid(), signal.SIGTERM)  # to this test's own process
        os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt inside
        deadline = time.monotonic() + 5
        while count[0] < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert count == [2] and stopped == [1, 1]
    assert {s: signal.getsignal(s) for s in before} == before


# What `edgetb` prints, searched for module names (issue 43): each command's and
# subcommand's help (found from the usage's {choice,...} lists), and the errors of
# commands run without results, without a testbed, or with a mistyped flag. Only the
# alias table of `edgetb --help` may name `python -m`.
_PRINTED = textwrap.dedent(
    """
    import contextlib, io, re, sys
    from edgetb.cli import COMMANDS, main

    def run(args):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                main(args)
            except SystemExit:
                pass
        return out.getvalue()

    seen, todo = {}, [[c] for c in COMMANDS]
    while todo:
        args = todo.pop()
        text = seen[" ".join(args) + " --help"] = run([*args, "--help"])
        usage = text.split("\\n\\n", 1)[0]
        for choices in re.findall(r"\\{([a-z][a-z,_-]*)\\}", usage):
            todo += [[*args, c] for c in choices.split(",") if len(args) < 3]
    for args in (["plots", "none"], ["report", "none"], ["compare", "none"],
                 ["model", "none"], ["export", "none"], ["sweep", "--quik"], ["status"],
                 ["down"], ["exec", "e0", "--", "true"], ["node", "e0", "logs"],
                 ["net", "show"], ["net", "verify"], ["ycsb", "run"], ["inventory"],
                 ["list"], ["dist"], ["image"], ["model", "predict", "--nodes", "0"],
                 ["sweep", "--writes", "x"], ["nosuch"], ["up", "--nodes", "0"]):
        seen[" ".join(args)] = run(args)
    found = [f"{k}: {line.strip()}" for k, text in seen.items()
             for line in text.splitlines() if "python -m" in line]
    print(len(seen), *found, sep="\\n")
    """
)


def test_nothing_printed_names_a_module_but_the_alias_table(tmp_path):
    env = {**os.environ, "EDGETB_HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [sys.executable, "-c", _PRINTED],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    count, *found = proc.stdout.splitlines()
    assert int(count) > 40  # every command's help, the subcommands' and the errors
    assert found == []
    table = edgetb("--help").stdout
    assert all(f"python -m {m.split('.')[0]}" in table for m, _, _ in COMMANDS.values())
