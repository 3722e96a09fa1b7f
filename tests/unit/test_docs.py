"""What the README and docs/ name exists: every `edgetb` command, every flag given to one
(read from the command's own --help), every `python -m` module and every path of the
project. A renamed flag or a moved module fails here, not in a reader's terminal."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import itertools
import re
from pathlib import Path

import pytest

from edgetb.cli import COMMANDS
from edgetb.cli import main as edgetb

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TOP = ("common", "testbed", "emulation", "model", "workloads", "experiments", "analysis", "edgetb",
       "benchmarks", "scripts", "tests", "vm-images", "docs")  # fmt: skip
PATH = re.compile(rf"(?<![\w./~-])((?:{'|'.join(TOP)})/[\w./{{}},*-]*)")
COMMAND = re.compile(r"\bedgetb ((?:[a-z][\w-]*)(?: [a-z][\w-]*)?)")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
MODULE = re.compile(r"python3? -m ([a-z][\w.]*)")
MAKE = re.compile(r"(?:`|^\s*)make ([a-z][\w-]*)")
TARGETS = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


def _lines():
    for page in PAGES:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            yield f"{page.relative_to(ROOT)}:{n}", line


@functools.cache
def _help(words: tuple[str, ...]) -> str | None:
    """``edgetb WORDS --help`` as printed, None when that is not a command."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code: object
        try:
            code = edgetb([*words, "--help"])
        except SystemExit as exc:
            code = exc.code
    return out.getvalue() if code in (0, None) else None


def _expand(path: str) -> list[str]:
    """``a/{b,c}.py`` -> a/b.py, a/c.py."""
    parts = re.split(r"\{([^}]*)\}", path)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def test_every_edgetb_command_and_its_flags_exist():
    wrong = []
    for where, line in _lines():
        for m in COMMAND.finditer(line):
            words = tuple(m.group(1).split())
            if words[0] not in COMMANDS:
                wrong.append(f"{where}: no command `edgetb {words[0]}`")
                continue
            text = _help(words) if len(words) == 2 else None
            text = text or _help(words[:1])
            assert text is not None, words
            # the flags given on this invocation: up to the next command or code span end
            rest = re.split(r"`|\bedgetb |\bmake |\|", line[m.end() :])[0]
            for flag in FLAG.findall(rest):
                if flag not in text:
                    wrong.append(f"{where}: `edgetb {' '.join(words)}` has no {flag}")
    assert not wrong, "\n".join(wrong)


def test_every_module_run_with_python_m_exists():
    wrong = [
        f"{where}: python -m {mod}"
        for where, line in _lines()
        for mod in MODULE.findall(line)
        if importlib.util.find_spec(mod.rstrip(".")) is None
    ]
    assert not wrong, "\n".join(wrong)


def test_every_make_target_exists():
    wrong = [
        f"{where}: make {target}"
        for where, line in _lines()
        for target in MAKE.findall(line)
        if target not in TARGETS
    ]
    assert TARGETS >= {"sweep", "test", "core", "vms", "ycsb"}
    assert not wrong, "\n".join(wrong)


def test_every_project_path_exists():
    wrong = []
    for where, line in _lines():
        for raw in PATH.findall(line):
            path = raw.rstrip(".,:;)")
            for one in _expand(path):
                if "*" in one or "<" in one:
                    found = list(ROOT.glob(one))
                else:
                    found = [ROOT / one] if (ROOT / one).exists() else []
                if not found:
                    wrong.append(f"{where}: {one}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
        if not target.startswith(("http://", "https://", "mailto:")):
            assert (page.parent / target).exists(), f"{page.name}: {target}"


def test_the_readme_stays_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
