"""The project's extras (common/extras.py, pyproject.toml): a sweep on namespaces needs
none of them, and a feature whose extra is missing says so in one line before anything
changes. The extras' modules are hidden from a real interpreter (an import hook raises
ModuleNotFoundError for them, as in a venv with the core alone)."""

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from common import extras

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "testbed", "emulation", "model", "workloads", "experiments", "analysis",
            "edgetb")  # fmt: skip
HIDDEN = sorted({m for mods in extras.EXTRAS.values() for m in mods} | {"dask", "bokeh"})
# runs argv[1] as ``python -m`` would, with every extra's modules hidden
HIDE = f"""
import importlib.abc, runpy, sys
HIDDEN = {HIDDEN!r}
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Hide())
module, sys.argv = sys.argv[1], sys.argv[1:]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""
IMPORT_ALL = f"""
import importlib, pkgutil
for pkg in {PACKAGES!r}:
    top = importlib.import_module(pkg)
    for info in pkgutil.walk_packages(top.__path__, pkg + "."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
print("imported")
"""


def _without_extras(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", HIDE, *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_the_extras_are_pyprojects_and_the_core_holds_none_of_them():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    assert set(extras.EXTRAS) <= set(optional)
    listed = re.search(r"\[(.*)\]", optional["all"][0])
    assert listed and set(listed.group(1).split(",")) == set(extras.EXTRAS)

    def names(deps: list[str]) -> set[str]:
        return {re.split(r"[<>=\[;]", d)[0].strip().lower() for d in deps}

    extra_dists = set().union(*(names(optional[e]) for e in extras.EXTRAS))
    assert not names(project["dependencies"]) & extra_dists
    # each extra's table names exactly the modules its distributions bring that the
    # code imports (ansible-core's `ansible` as much as ansible-runner's)
    provided = importlib.metadata.packages_distributions()
    imported = _imported_modules()
    for extra, modules in extras.EXTRAS.items():
        dists = {d.replace("_", "-") for d in names(optional[extra])}
        brought = {
            m for m, ds in provided.items() if {d.lower().replace("_", "-") for d in ds} & dists
        }
        assert brought & imported == set(modules), (extra, brought & imported)


def _imported_modules() -> set[str]:
    """The top-level modules the packages import, anywhere in their code."""
    found: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    found |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.split(".")[0])
    return found


def test_every_module_imports_with_no_extra_installed():
    # the extras are imported where a feature uses them, never at a module's top
    hook = HIDE[: HIDE.index("module, sys.argv")]
    proc = subprocess.run([sys.executable, "-c", hook + IMPORT_ALL], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0 and "imported" in proc.stdout, proc.stderr[-2000:]


def test_a_namespace_sweep_plans_with_no_extra_and_features_name_theirs(tmp_path):
    plan = _without_extras("experiments.sweep", "--config", "quick", "--dry-run",
                           "--out", str(tmp_path / "r"))  # fmt: skip
    assert plan.returncode == 0, plan.stderr[-2000:]
    inventory = tmp_path / "inv.ini"
    inventory.write_text("[edge]\ne0 ansible_host=10.0.0.1\n")
    for argv, extra in (
        (["--backend", "libvirt"], "vms"),
        (["--backend", "hosts", "--inventory", str(inventory)], "hosts"),
        (["--workers", str(inventory)], "remote"),
        (["--scheduler", "tls://127.0.0.1:1"], "remote"),
    ):
        proc = _without_extras("experiments.sweep", "--nodes", "2", "--rf", "1",
                               "--latency", "0", "--loss", "0", *argv, "--dry-run",
                               "--out", str(tmp_path / "r2"))  # fmt: skip
        assert proc.returncode == 2, (argv, proc.stdout[-500:], proc.stderr[-2000:])
        line = proc.stderr.strip()
        assert "\n" not in line and f"the project's {extra!r} extra" in line, (argv, line)
        assert "Traceback" not in proc.stderr
        assert not (tmp_path / "r2").exists()  # nothing made
    export = _without_extras("experiments.store.export", str(tmp_path / "none"),
                             "--format", "parquet")  # fmt: skip
    assert export.returncode == 2 and "the project's 'parquet' extra" in export.stderr


def test_an_installed_extra_passes_and_a_missing_one_is_one_line():
    extras.require("pandas", "a DataFrame")  # the dev environment has every extra
    extras.EXTRAS["nothing"] = ("no_such_module_of_edgetb",)
    try:
        try:
            extras.require("nothing", "--feature")
        except Exception as exc:  # noqa: BLE001 - the class is checked below
            text = str(exc)
            assert type(exc).__name__ == "ConfigError"
        else:
            raise AssertionError("no error for a missing module")
    finally:
        del extras.EXTRAS["nothing"]
    assert text == (
        "--feature needs the project's 'nothing' extra (no_such_module_of_edgetb not "
        "installed): make install, or .venv/bin/pip install -e '.[nothing]'"
    )
