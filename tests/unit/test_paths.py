"""Every environment variable the tool reads is read in common/paths.py (issue 40 item
3): a reader finds them in one table, none is read at import time elsewhere."""

import ast
from pathlib import Path

import pytest

from common import paths
from tests.support.source import MODULES, ROOT


def _environ(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def _reads(path: Path) -> list[str]:
    """os.environ.get(X), os.getenv(X) and os.environ[X] (read) whose X is not a plain
    string naming another program's variable (PATH, JAVA_HOME)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        key: ast.expr | None = None
        if isinstance(node, ast.Call) and node.args:
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr == "get" and _environ(f.value)) or (
                isinstance(f, ast.Attribute) and f.attr == "getenv"
            ):
                key = node.args[0]
        elif isinstance(node, ast.Subscript) and _environ(node.value):
            if isinstance(node.ctx, ast.Load):
                key = node.slice
        if key is None:
            continue
        value = key.value if isinstance(key, ast.Constant) else None
        if not isinstance(value, str) or value.startswith("EDGETB_"):
            found.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}")
    return found


def test_only_paths_reads_the_tools_variables():
    found = [h for p in MODULES.values() if p != ROOT / "common" / "paths.py" for h in _reads(p)]
    assert found == []


def test_a_variable_not_in_the_table_is_a_mistake():
    with pytest.raises(KeyError, match="EDGETB_HOEM is not one of the tool's variables"):
        paths.get("EDGETB_HOEM")


def test_defaults_and_overrides(monkeypatch, tmp_path):
    monkeypatch.delenv("EDGETB_HOME", raising=False)
    monkeypatch.delenv("EDGETB_CACHE", raising=False)
    assert paths.home() == Path.home() / ".edgetb"
    assert paths.cache_root() == Path.home() / ".cache" / "edgetb"
    monkeypatch.setenv("EDGETB_HOME", str(tmp_path))
    monkeypatch.setenv("EDGETB_CACHE", "")  # empty is unset
    assert paths.home() == tmp_path and paths.cache_root() == Path.home() / ".cache" / "edgetb"


def test_every_variable_the_code_names_is_in_the_table():
    import re

    named = set()
    for p in MODULES.values():
        named |= set(re.findall(r"\bEDGETB_[A-Z][A-Z_]*[A-Z]\b", p.read_text()))
    assert named - set(paths.VARIABLES) == set()
