"""The import structure of the project, read from the source with ``ast`` (issue 24):

- no import circle between modules;
- no import from a lower layer to a higher one: common < testbed < emulation < model <
  workloads < experiments < analysis < edgetb (the one command) (a module may import its
  own layer and the layers below it; common imports nothing of the tool);
- no import of a command-line module (one that defines ``main``), except by its package's
  ``__main__``; the library modules that still carry a ``main`` of their own are listed
  in ``STILL_MIXED`` (their command lines move behind one command later), and the list
  may only shrink;
- at most 5 project-internal imports inside functions in ``experiments/`` (an import
  inside a function hides a dependency from the reader and from this test's circles);
- the engine in small parts: in ``experiments/`` no module over 450 lines (the store
  excepted), no class over 300, no function over 60;
- ``experiments/`` in named parts, each importing only itself and the parts before it
  (settings < store < plan < run < remote < the front doors api and sweep), and every
  ``from experiments import X`` naming something that exists;
- the edges no import shows, a module starting another as a process (``"-m", "module"``):
  each listed in ``PROCESS_EDGES`` with why; one up the layers only from a command line.

Every import counts, also those under ``if TYPE_CHECKING:`` and inside functions.
"""

from __future__ import annotations

import ast

import pytest

from tests.support.source import LAYERS, MODULES

STILL_MIXED = {
    "analysis.phi",  # φ's functions and `python -m analysis.phi`
    "analysis.report",  # write_report and `python -m analysis.report`
    "testbed.client",  # the endpoint client's helpers and the client process itself
}
MAX_INNER_IMPORTS = {"experiments": 5}


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The project modules an import statement loads (``from pkg import name`` loads
    pkg.name where that is a module, else pkg)."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = module.split(".")
            if MODULES[module].name != "__init__.py":
                parts.pop()
            parts = parts[: len(parts) - node.level + 1]
            base = ".".join([*parts, base] if base else parts)
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
    found = set()
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def _read() -> tuple[dict[str, set[str]], dict[str, list[tuple[int, str]]], set[str]]:
    """(module -> modules it imports, module -> (line, target) of imports inside
    functions, the modules that define ``main``)."""
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    inner: dict[str, list[tuple[int, str]]] = {m: [] for m in MODULES}
    clis = set()
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        if any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body):
            clis.add(module)
        functions = [
            n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        in_function = {id(n) for f in functions for n in ast.walk(f)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                targets = _targets(module, node)
                edges[module] |= targets
                if id(node) in in_function:
                    inner[module] += [(node.lineno, t) for t in sorted(targets)]
    return edges, inner, clis


EDGES, INNER, CLIS = _read()


def _layer(module: str) -> int:
    return LAYERS.index(module.split(".")[0])


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_the_reader_sees_the_project():
    # a reader that found nothing would pass every rule below
    assert len(MODULES) > 80
    assert "testbed.topology" in EDGES["testbed.testbed"]
    assert "model.rtt" in EDGES["experiments.plan.estimate"]
    assert {"testbed.cli", "experiments.sweep", "analysis.model"} <= CLIS


def test_circles_are_found():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _circles(edges) == [["a", "b", "c"]]


def test_no_import_circle():
    assert _circles(EDGES) == []


def test_no_import_runs_up_the_layers():
    up = [f"{m} -> {t}" for m, targets in EDGES.items() for t in targets if _layer(t) > _layer(m)]
    assert up == [], f"imports from a lower layer to a higher one ({' < '.join(LAYERS)})"


# experiments/ in named parts (issue 40), each importing only its own part and those
# before it: what is measured, the store, how cells spread, one machine's engine, the
# Dask engine, then the two front doors at the top (api for Python, sweep for the shell).
EXPERIMENT_PARTS = ("settings", "store", "plan", "run", "remote")


def _part(module: str) -> int:
    """A module's rank inside experiments/: its part's, or the top's (after them all)."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] in EXPERIMENT_PARTS:
        return EXPERIMENT_PARTS.index(parts[1])
    return len(EXPERIMENT_PARTS)


def test_experiments_is_its_parts_and_two_front_doors():
    top = {m for m in MODULES if m.startswith("experiments.") and m.count(".") == 1}
    assert top == {"experiments.api", "experiments.sweep", "experiments.__main__"} | {
        f"experiments.{p}" for p in EXPERIMENT_PARTS
    }


def test_no_import_runs_up_the_parts_of_experiments():
    inside = {m: ts for m, ts in EDGES.items() if m.split(".")[0] == "experiments"}
    assert "experiments.settings.config" in inside["experiments.plan.estimate"]  # it reads them
    up = [
        f"{m} -> {t}"
        for m, targets in inside.items()
        for t in targets
        if t.split(".")[0] == "experiments" and _part(t) > _part(m)
    ]
    assert up == [], f"imports up the parts of experiments/ ({' < '.join(EXPERIMENT_PARTS)})"


def test_what_is_imported_from_experiments_exists():
    """``from experiments import X``: X is a part or a front door, or a name the package
    exports (``_HOME``); its lazy ``__getattr__`` hides any other from mypy, and a module
    that moved into a part would fail only when imported (test_3e's ``faults`` did)."""
    import experiments

    wrong = []
    for module, path in [*MODULES.items(), *_test_modules()]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == "experiments":
                for alias in node.names:
                    known = (
                        f"experiments.{alias.name}" in MODULES or alias.name in experiments.__all__
                    )
                    wrong += [] if known else [f"{module}:{node.lineno}: {alias.name}"]
    assert wrong == []


def _test_modules():
    root = MODULES["experiments"].parents[1]
    for path in sorted((root / "tests").rglob("*.py")):
        yield str(path.relative_to(root)), path
    for path in sorted((root / "benchmarks").rglob("*.py")):
        yield str(path.relative_to(root)), path


def test_no_command_line_module_is_imported():
    bad = [
        f"{m} -> {t}"
        for m, targets in EDGES.items()
        for t in targets & (CLIS - STILL_MIXED)
        if not (m.endswith("__main__") and m.rpartition(".")[0] == t.rpartition(".")[0])
    ]
    assert bad == []


def test_still_mixed_only_shrinks():
    # a module that lost its main (or no longer exists) leaves the list
    assert STILL_MIXED <= CLIS


@pytest.mark.parametrize("package", sorted(MAX_INNER_IMPORTS))
def test_few_imports_inside_functions(package):
    found = [
        f"{m}:{line} -> {t}"
        for m, imports in INNER.items()
        if m.split(".")[0] == package
        for line, t in imports
    ]
    assert len(found) <= MAX_INNER_IMPORTS[package], "\n".join(found)


# The engine's sizes (issue 24): a module, class or function past these has grown two
# concepts and is split before it grows a third.
MAX_MODULE_LINES, MAX_CLASS_LINES, MAX_FUNCTION_LINES = 450, 300, 60
SIZE_EXCEPTIONS = {"experiments.store.db"}  # the only SQL, one module on purpose


def _too_big(
    package: str,
    module_lines: int = MAX_MODULE_LINES,
    class_lines: int = MAX_CLASS_LINES,
    function_lines: int = MAX_FUNCTION_LINES,
) -> list[str]:
    found = []
    for module, path in MODULES.items():
        if module.split(".")[0] != package:
            continue
        source = path.read_text()
        lines = len(source.splitlines())
        if lines > module_lines and module not in SIZE_EXCEPTIONS:
            found.append(f"{module}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            limit = class_lines if isinstance(node, ast.ClassDef) else function_lines
            if size > limit:
                found.append(f"{module}:{node.lineno} {node.name}: {size} lines")
    return found


def test_sizes_are_found():
    # limits that known parts pass: the counting sees modules, classes and functions
    small = _too_big("experiments", module_lines=400, class_lines=200, function_lines=55)
    assert any(s.startswith("experiments.settings.config: ") for s in small)  # a module (449 lines)
    assert any(" Shard: " in s for s in small)  # a class (scheduler.Shard, 233 lines)
    assert any(" parse: " in s for s in small)  # a function (settings.faults.parse, 59 lines)


def test_the_engine_stays_in_small_parts():
    assert _too_big("experiments") == []


# Every other package (issue 40, item 6): what is over the limits today, with its size,
# may only shrink: a new module, class or function over them fails, one that grew fails,
# and one back under them must leave this list (so that it cannot grow back unseen).
OVER_THE_LIMITS = {
    "experiments.store.db": 797,  # the only SQL, one module on purpose
}


def _over_the_limits() -> dict[str, int]:
    """Every module, class and function of the packages over the limits: name -> lines."""
    found: dict[str, int] = {}
    for module, path in MODULES.items():
        source = path.read_text()
        if (lines := len(source.splitlines())) > MAX_MODULE_LINES:
            found[module] = lines
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
                if size > limit:
                    key = f"{module}.{node.name}"
                    found[key] = max(found.get(key, 0), size)
    return found


def test_what_is_too_big_only_shrinks():
    found = _over_the_limits()
    new = {k: v for k, v in found.items() if k not in OVER_THE_LIMITS}
    grown = {k: (OVER_THE_LIMITS[k], v) for k, v in found.items() if v > OVER_THE_LIMITS.get(k, v)}
    fixed = sorted(set(OVER_THE_LIMITS) - set(found))
    assert not new, f"over {MAX_MODULE_LINES}/{MAX_CLASS_LINES}/{MAX_FUNCTION_LINES} lines: {new}"
    assert not grown, f"grew past its recorded size (recorded, now): {grown}"
    assert not fixed, f"back under the limits: remove from OVER_THE_LIMITS: {fixed}"


# Project modules started as processes by others (``[python, "-m", module]``): the edges
# the import graph does not show. One that runs up the layers comes from a command line.
PROCESS_EDGES = {
    ("testbed.access", "testbed.client"): "the CQL client on the endpoint host",
    ("emulation.verify", "emulation.probe"): "the prober inside a host's namespace",
    ("workloads", "workloads.writes"): "the writer process on the endpoint",
    ("experiments.remote.fleet", "experiments.remote.worker"): "a worker started over SSH",
    ("experiments.remote.workers", "experiments.remote.worker"): "a local worker process",
    ("experiments.run.manifest", "experiments.sweep"): "the command recorded, not run",
    ("experiments.sweep", "analysis.plots"): "the command line's figures (run_sweep's "
    "figures=): the engine below it names none",
}


def _process_edges() -> set[tuple[str, str]]:
    found = set()
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.List, ast.Tuple)):
                continue
            for a, b in zip(node.elts, node.elts[1:], strict=False):
                if (
                    isinstance(a, ast.Constant)
                    and a.value == "-m"
                    and isinstance(b, ast.Constant)
                    and b.value in MODULES
                ):
                    found.add((module, b.value))
    return found


def test_process_edges_are_the_listed_ones():
    assert _process_edges() == set(PROCESS_EDGES)


def test_a_process_edge_up_the_layers_comes_from_a_command_line():
    commands = {m for m, p in MODULES.items() if "def main(" in p.read_text()}
    up = {(a, b) for a, b in PROCESS_EDGES if _layer(b) > _layer(a)}
    assert up and all(a in commands for a, _ in up), up
