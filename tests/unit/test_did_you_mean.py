"""A mistyped flag, subcommand or choice gets one error line with "did you mean", the way
git answers (issue 43, item 6); the usage block is left to --help. Run as a user types."""

import subprocess
import sys

import pytest


def _run(*argv):
    return subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True)


@pytest.mark.parametrize(
    "argv, meant",
    [
        (["experiments.sweep", "--lantecy", "5"], "did you mean --latency?"),
        (["experiments.sweep", "--nodes", "3", "--writs", "10"], "did you mean --writes?"),
        (["edgetb", "sweeep"], "did you mean 'sweep'?"),
        (["edgetb", "net", "sett"], "did you mean 'set'?"),
        (["edgetb", "up", "--backnd", "netns"], "did you mean --backend?"),
        (["edgetb", "net", "set", "--profile", "papr"], "did you mean 'paper'?"),
        (["analysis.plots", "results", "--stlye", "paper"], "did you mean --style?"),
    ],
)
def test_a_typo_is_one_line_with_what_was_meant(argv, meant):
    proc = _run(*argv)
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert meant in lines[0] and "error:" in lines[0], lines


def test_nothing_close_is_no_guess():
    proc = _run("experiments.sweep", "--xyzzy")
    assert proc.returncode == 2 and "did you mean" not in proc.stderr, proc.stderr
