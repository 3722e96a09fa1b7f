"""What every command line of the project shares, in one place: how it ends on an error
(one line on stderr; exit 2 for bad input, 1 for a failure, 130 when stopped), how it
stops on a signal, and the name its help shows.

Stop signals: Ctrl-C (SIGINT), SIGTERM and SIGHUP (a closed terminal or a dropped SSH
session) all raise KeyboardInterrupt in the main thread, which every command answers by
tearing down what it started. A hang-up also points stdout and stderr at /dev/null first:
the terminal is gone, and a teardown that prints must not die of EIO half-way.

    @command("python -m testbed")
    def main(argv=None) -> int: ...

`edgetb SUBCOMMAND` runs the same mains under its own name (``prog``).
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import difflib
import errno
import functools
import os
import re
import signal
import stat
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, cast

from .errors import ConfigError, TestbedError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
EXIT_BAD_INPUT, EXIT_FAILED, EXIT_STOPPED = 2, 1, 130

_PROG: contextvars.ContextVar[str | None] = contextvars.ContextVar("prog", default=None)

Main = TypeVar("Main", bound=Callable[..., int])


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line (no usage block; --help has it) with
    a "did you mean" for a mistyped flag, subcommand or choice, as git's are."""

    def error(self, message: str) -> Any:  # argparse's hook; exits
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}{suggestion(self, message)}"
                                  f" ({self.prog} --help)\n")  # fmt: skip


def _flags_and_commands(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string and subcommand of ``parser`` and of its subcommands' parsers."""
    found = set(parser._option_string_actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= {name} | _flags_and_commands(sub)
    return found


def suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    """ "; did you mean --latency?" for an argparse ``message`` naming a mistyped flag or
    an invalid choice close to a known one; "" otherwise."""
    if message.startswith("unrecognized arguments: "):
        known = sorted(_flags_and_commands(parser))
        for token in message.removeprefix("unrecognized arguments: ").split():
            if token.startswith("-"):
                close = difflib.get_close_matches(token.split("=")[0], known, n=1, cutoff=0.6)
                if close:
                    return f"; did you mean {close[0]}?"
        return ""
    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
    if choice:
        options = re.findall(r"'([^']*)'", choice.group(2)) or choice.group(2).split(", ")
        close = difflib.get_close_matches(choice.group(1), options, n=1, cutoff=0.6)
        return f"; did you mean {close[0]!r}?" if close else ""
    return ""


def prog(default: str) -> str:
    """The name a command's help and usage show: ``default`` (``python -m ...``), or the
    `edgetb` subcommand it runs as."""
    return _PROG.get() or default


@contextlib.contextmanager
def stop_signals(on_stop: Callable[[], None] = lambda: None) -> Iterator[list[int]]:
    """Inside: Ctrl-C, SIGTERM and SIGHUP are counted (the list's one item) and
    ``on_stop`` called, nothing raised, so the caller winds its work down in order and
    raises KeyboardInterrupt itself; a hung-up terminal is left first. The handlers
    before are put back after. Outside the main thread nothing changes."""
    count = [0]

    def on_signal(signum: int, _frame: object) -> None:
        if signum == signal.SIGHUP:
            leave_terminal()
        count[0] += 1
        on_stop()

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            previous[sig] = signal.signal(sig, on_signal)
    try:
        yield count
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # None: not set from Python, cannot be restored
                signal.signal(sig, handler)


def leave_terminal() -> None:
    """stdout and stderr to /dev/null where they were a terminal that hung up (a character
    device: a hung-up terminal no longer says it is one, isatty fails with EIO)."""
    null = os.stat(os.devnull).st_rdev
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        try:
            st = os.fstat(fd)
            if stat.S_ISCHR(st.st_mode) and st.st_rdev != null:
                os.dup2(devnull, fd)
        except OSError:
            pass
    os.close(devnull)


def _interrupt(signum: int, _frame: Any) -> None:
    if signum == signal.SIGHUP:
        leave_terminal()
    raise KeyboardInterrupt


def stop_on_signals() -> None:
    """SIGTERM and SIGHUP raise KeyboardInterrupt, as Ctrl-C does (main thread only)."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, _interrupt)


# What the machine refuses, not a fault of the tool: said in one line, as an error is
ENVIRONMENT_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO,
     errno.EMFILE, errno.ENFILE, errno.ENAMETOOLONG, errno.ELOOP, errno.EFBIG}
)  # fmt: skip


SHOWN_NAME = 120  # characters of a file name an error line shows


def exit_code(exc: BaseException) -> int:
    """The exit code of a command that ended with ``exc``, after saying why in one line."""
    if isinstance(exc, KeyboardInterrupt):
        print("interrupted", file=sys.stderr)
        return EXIT_STOPPED
    if isinstance(exc, OSError) and not isinstance(exc, TestbedError):
        name = str(exc.filename) if exc.filename else ""
        if len(name) > SHOWN_NAME:  # a name someone typed: its start and its length
            name = f"{name[:SHOWN_NAME]}... ({len(name)} characters)"
        where = f"{name}: " if name else ""
        hint = (
            " (the disk or its quota is full)" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""
        )
        print(f"error: {where}{exc.strerror or exc}{hint}", file=sys.stderr)
        # a path the file system cannot take is the input's fault, not the machine's
        return EXIT_BAD_INPUT if exc.errno == errno.ENAMETOOLONG else EXIT_FAILED
    print(f"error: {exc}", file=sys.stderr)
    return EXIT_BAD_INPUT if isinstance(exc, ConfigError) else EXIT_FAILED


def _environmental(exc: OSError) -> bool:
    return exc.errno in ENVIRONMENT_ERRNOS


def command(default_prog: str) -> Callable[[Main], Main]:
    """Make ``main`` a command: stop signals as Ctrl-C, and a TestbedError or a stop that
    escapes it a line and an exit code (what ``main`` handles itself stays its own)."""

    def wrap(main: Main) -> Main:
        @functools.wraps(main)
        def run(argv: Sequence[str] | None = None) -> int:
            stop_on_signals()
            try:
                return main(argv)
            except (TestbedError, KeyboardInterrupt) as exc:
                return exit_code(exc)
            except OSError as exc:  # a full disk, a read-only directory: the machine's
                if not _environmental(exc):
                    raise
                return exit_code(exc)

        run.default_prog = default_prog  # type: ignore[attr-defined]
        return cast(Main, run)

    return wrap


def run_as(name: str, main: Callable[..., int], argv: Sequence[str]) -> int:
    """``main`` with ``argv``, its help and usage naming it ``name``."""
    token = _PROG.set(name)
    try:
        return main(list(argv))
    finally:
        _PROG.reset(token)


def not_a_command(module: str, instead: str) -> int:
    """For ``python -m`` of a library module: one line saying which command to run."""
    print(f"{module} is a library module, not a command: {instead}", file=sys.stderr)
    return EXIT_BAD_INPUT
