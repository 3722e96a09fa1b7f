"""Commands start without the heavy libraries they use only for some work: scipy.stats
alone takes ~0.9 s to import, which every `--help`, every refused input and every command
the tests run would pay (test_bad_input's command lines took 74 s with it, 29 s without).
Checked in a fresh interpreter, by what it has imported, not by a time."""

import json
import subprocess
import sys

import pytest

from tests.unit.test_layers import PROCESS_EDGES

# command modules -> libraries their start must not import
COMMANDS = {
    "edgetb.cli": ("scipy", "matplotlib", "numpy", "cassandra"),
    "experiments.sweep": ("scipy", "matplotlib"),
    "emulation.cli": ("scipy", "matplotlib"),
    "testbed.cli": ("scipy", "matplotlib", "numpy"),
    "analysis.plots": ("scipy",),
    "workloads.writes": ("scipy", "matplotlib", "numpy"),
}


@pytest.mark.parametrize("module", sorted(COMMANDS))
def test_a_command_starts_without_heavy_imports(module):
    code = (
        "import importlib, json, sys; importlib.import_module(sys.argv[1]); "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, module], capture_output=True, text=True, check=True
    ).stdout
    loaded = set(json.loads(out))
    assert not loaded & set(COMMANDS[module]), (module, sorted(loaded & set(COMMANDS[module])))


# the project's modules that others start with ``python -m`` (their logs are read: no
# warning there)
PROCESSES = sorted({module for _, module in PROCESS_EDGES})


@pytest.mark.parametrize("module", PROCESSES)
def test_a_process_module_is_not_imported_before_it_runs(module):
    """runpy warns when ``python -m PKG.MOD`` finds MOD imported already (by PKG's
    ``__init__``): the writer's log opened with that warning in every sweep."""
    proc = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-m", module, "--help"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0 and "RuntimeWarning" not in proc.stderr, proc.stderr[-500:]
