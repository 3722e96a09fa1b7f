"""The sweep: the seed paper's experiment over a grid of settings, into a results store.

    from experiments import SweepConfig, RunOptions, run_sweep

is the Python entry point (docs/api.md); ``python -m experiments.sweep`` is the same
call behind its command line. The names are imported on first use, so importing one
module of the package (``experiments.store.db``, say) does not load the whole engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import RunOptions, SweepResult, run_sweep
    from .settings.config import SweepConfig

__all__ = ["RunOptions", "SweepConfig", "SweepResult", "run_sweep"]
_HOME = {
    "RunOptions": "api",
    "SweepResult": "api",
    "run_sweep": "api",
    "SweepConfig": "settings.config",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'experiments' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{_HOME[name]}", __name__), name)
