"""Backends and shapers are asked what they can do, not compared by name (issue 40 item
4): one table of backends, the classes agree with it, shapers carry their own answers,
and no module outside a registry switches on a backend's or a shaper's name."""

import ast
from pathlib import Path

import pytest

from common.errors import ConfigError
from emulation import shapers
from testbed.backends import CAPABILITIES, backend_options, capabilities, registry
from tests.support.source import MODULES, ROOT

REGISTRY = ROOT / "testbed" / "backends" / "__init__.py"
SHAPER_REGISTRY = ROOT / "emulation" / "shapers" / "__init__.py"
# the one place a shaper's name is data, not a switch
SHAPER_NAMES_AS_DATA = {
    ROOT / "testbed" / "state.py": "an older state file keys its shaper records by name",
}


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


def _name_comparisons(path: Path, names: set[str]) -> list[str]:
    """Comparisons of one of ``names`` with ==, !=, in or not in, in ``path``."""
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


def _modules():
    return list(MODULES.values())


def test_no_module_outside_the_registry_compares_backend_names():
    names = set(CAPABILITIES)
    found = [h for p in _modules() if p != REGISTRY for h in _name_comparisons(p, names)]
    assert found == []


def test_no_module_outside_the_registry_compares_shaper_names():
    names = set(shapers.REGISTRY)
    skip = {SHAPER_REGISTRY, *SHAPER_NAMES_AS_DATA}
    found = [h for p in _modules() if p not in skip for h in _name_comparisons(p, names)]
    assert found == []


def test_each_shaper_answers_for_itself():
    """Only direct shapes inside each host (VMs, inventory hosts take only it); each
    says what it needs before it starts."""
    assert [n for n, cls in shapers.REGISTRY.items() if cls.inside_hosts] == ["direct"]
    assert all(cls.name == n for n, cls in shapers.REGISTRY.items())
    for backend in ("libvirt", "hosts"):
        assert shapers.resolve("auto", backend, probe=False) == "direct"
        with pytest.raises(ConfigError, match="shapes inside its hosts"):
            shapers.resolve("host", backend, probe=False)
