"""The project's own Python modules, as the tests that read the source (with ``ast`` or
text) see them: the packages in their layer order, each module's dotted name and path."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# common < testbed < emulation < model < workloads < experiments < analysis < edgetb
LAYERS = (
    "common",
    "testbed",
    "emulation",
    "model",
    "workloads",
    "experiments",
    "analysis",
    "edgetb",
)


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in LAYERS:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


MODULES = _modules()  # dotted name -> path
