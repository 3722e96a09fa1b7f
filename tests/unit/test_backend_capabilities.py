"""Backends are asked what they can do, not compared by name (issue 40 item 4): one
table, the classes agree with it, and no module outside the registry switches on a
backend's name."""

import ast
from pathlib import Path

import pytest

from testbed.backends import CAPABILITIES, backend_options, capabilities, registry
from testbed.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("testbed", "emulation", "experiments", "analysis", "workloads", "edgetb", "model")
REGISTRY = ROOT / "testbed" / "backends" / "__init__.py"


def test_the_classes_are_the_table():
    classes = registry()
    assert list(classes) == list(CAPABILITIES)
    for name, cls in classes.items():
        assert cls.name == name and cls.remote == CAPABILITIES[name].remote, name


def test_an_unknown_backend_is_one_line_naming_the_known_ones():
    known = r"\(available: hosts, libvirt, netns\)"
    with pytest.raises(ConfigError, match=rf"unknown backend 'vm' {known}"):
        capabilities("vm")
    assert capabilities(None) is CAPABILITIES["netns"]


@pytest.mark.parametrize(
    "backend, kwargs, message",
    [
        ("netns", {"inventory": "x.ini"}, "--inventory is for --backend hosts"),
        ("hosts", {"vm_vcpus": 2}, "--vm-vcpus/--vm-memory are for --backend libvirt"),
        ("libvirt", {"node_resources": {"e0": {"cpus": 1}}}, "are for --backend netns"),
    ],
)
def test_an_option_is_refused_naming_the_backends_that_take_it(backend, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        backend_options(backend, **kwargs)


def _name_comparisons(path: Path) -> list[str]:
    """Comparisons of a backend name with ==, !=, in or not in, in ``path``."""
    names = set(CAPABILITIES)
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        for side in (node.left, *node.comparators):
            values = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
            if any(isinstance(v, ast.Constant) and v.value in names for v in values):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
                break
    return found


def test_no_module_outside_the_registry_compares_backend_names():
    found = [
        hit
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != REGISTRY
        for hit in _name_comparisons(path)
    ]
    assert found == []
