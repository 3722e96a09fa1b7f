"""The testbed's exceptions: one root, specific subclasses that carry context."""

from __future__ import annotations

import re


class TestbedError(Exception):
    """Root of every error the testbed raises on purpose."""

    __test__ = False  # not a pytest test class, despite the name


class ConfigError(TestbedError, ValueError):
    """Invalid input (topology, settings, flags), raised before anything is created. Its
    message stays readable whatever it quotes: a run of more than LONG_TOKEN characters
    without a space (a value of hundreds of digits, a pasted blob) is cut, and so is a
    message longer than LONG_MESSAGE, each saying how long it was."""

    def __init__(self, message: object = "", *rest: object):
        super().__init__(_readable(str(message)), *rest)


LONG_TOKEN = 160  # longer than any path or name a message quotes in practice


LONG_MESSAGE = 1000  # every problem of an inventory named, with room to spare


def _readable(text: str) -> str:
    text = re.sub(
        rf"\S{{{LONG_TOKEN + 1},}}",
        lambda m: f"{m[0][:40]}… ({len(m[0])} characters)",
        text,
    )
    if len(text) > LONG_MESSAGE:
        text = f"{text[: LONG_MESSAGE - 60]} … ({len(text)} characters in all)"
    return text


class CommandError(TestbedError):
    """An external command failed; carries the command, exit code, stdout and stderr."""

    def __init__(self, cmd: list[str], returncode: int, stdout: str = "", stderr: str = ""):
        self.cmd = list(cmd)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        detail = (stderr or stdout).strip()
        super().__init__(
            f"command failed (exit {returncode}): {' '.join(self.cmd)}"
            + (f"\n{detail}" if detail else "")
        )


class NodeError(TestbedError):
    """A Cassandra node failed to start or misbehaved; names the node and shows its log tail."""

    def __init__(self, node: str, message: str, log_tail: str = ""):
        self.node = node
        self.log_tail = log_tail
        text = f"{node}: {message}"
        if log_tail:
            text += f"\n--- last lines of {node}'s log ---\n{log_tail.rstrip()}"
        super().__init__(text)


class PortInUseError(TestbedError):
    """A port a node needs is already bound inside its host."""


class StateError(TestbedError):
    """The on-disk run state is missing, stale or inconsistent."""


class RunSelectionError(StateError, ConfigError):
    """No run, or several, match what a command was asked to act on (exit code 2)."""


class RunInUseError(RunSelectionError):
    """A testbed or results directory is owned by another live process."""


class StateFileError(StateError, ConfigError):
    """A file of state this tool reads (a run's state.json, a results store) that is not
    what it writes: edited by hand, damaged, or of another version. Bad input, so the
    CLIs answer it with exit code 2; names the file."""


class StateVersionError(StateFileError):
    """A run state with keys this version does not know: most likely written by a newer
    version of the tool on the same machine. `clean` keeps such a run unless named."""


class TeardownError(TestbedError):
    """A run could not be undone on machines that outlive it (the hosts backend): names
    each host and what is left there. The run's state is kept (status "teardown-failed")
    so that `clean --run RUN` tries again."""
