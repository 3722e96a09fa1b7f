"""The project's optional parts, as pyproject.toml's extras name them: which Python
modules each brings, and the one-line error a command gives, before anything changes,
when a feature's part is not installed.

``make sweep`` installs the core alone (what a sweep on namespaces imports); ``make vms``
adds ``vms``; ``make install`` and ``make test`` install every extra and the
development tools. ``tests/unit/test_extras.py`` runs a namespace sweep's commands with
every extra's modules hidden, and checks this table against pyproject.toml.
"""

from __future__ import annotations

import importlib.util

from .errors import ConfigError

# extra -> the modules it provides that the code imports (pyproject.toml's
# [project.optional-dependencies] lists the distributions)
EXTRAS: dict[str, tuple[str, ...]] = {
    "vms": ("libvirt", "ansible_runner", "ansible"),  # the libvirt backend
    "hosts": ("ansible_runner", "ansible"),  # the hosts backend (an inventory of machines)
    "remote": ("distributed", "ansible_runner", "ansible"),  # --workers, --scheduler (Dask)
    "parquet": ("pyarrow",),  # edgetb export --format parquet
    "pandas": ("pandas",),  # analysis.results.frame
}
# how to install each: the make target where one installs it, else pip in the venv
_HOW = {"vms": "make vms"}


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` this interpreter cannot import."""
    return [m for m in EXTRAS[extra] if not _found(m)]


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a finder that refuses it: as good as absent
        return False


def require(extra: str, what: str) -> None:
    """ConfigError in one line when ``what`` (a feature, as the user named it) needs
    ``extra`` and a module of it is not installed."""
    gone = missing(extra)
    if gone:
        how = _HOW.get(extra, "make install")
        raise ConfigError(
            f"{what} needs the project's {extra!r} extra ({', '.join(gone)} not installed): "
            f"{how}, or .venv/bin/pip install -e '.[{extra}]'"
        )
