"""On-disk run state (like ccm's cluster.conf): a stateless CLI reloads it, and `clean`
finds every run's leftovers through it.

Layout: $EDGETB_HOME (default ~/.edgetb)/runs/<run_id>/{state.json, lock, nodes/<host>/...}
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import StateError, StateFileError

PREFIX = "tb"
STATE_FILE = "state.json"
LOCK_FILE = "lock"


def home() -> Path:
    env = os.environ.get("EDGETB_HOME")
    return Path(env) if env else Path.home() / ".edgetb"


def runs_dir(base: Path | None = None) -> Path:
    return (base or home()) / "runs"


def new_run_id() -> str:
    return secrets.token_hex(3)


def namespace_name(run_id: str, host: str) -> str:
    """Name of a host's network namespace: prefix, run id and host name."""
    return f"{PREFIX}-{run_id}-{host}"


@dataclass
class RunState:
    """Everything a later process needs to find, use and remove one run's objects."""

    run_id: str
    backend: str
    topology: dict[str, Any]
    cassandra: dict[str, Any] | None
    status: str = "building"  # building -> up | failed
    created: float = field(default_factory=time.time)
    java: str | None = None
    namespaces: list[str] = field(default_factory=list)
    processes: dict[str, dict[str, Any]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    run_dir: Path = field(default=Path("."), repr=False)

    @property
    def path(self) -> Path:
        return self.run_dir / STATE_FILE

    def save(self) -> None:
        """Write atomically (temp file + rename), so a crash never leaves half a state."""
        data = asdict(self)
        data.pop("run_dir")
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, self.path)

    @classmethod
    def load(cls, run_dir: Path) -> RunState:
        """The state in ``run_dir``: StateError when there is none, StateFileError naming
        the file when it is not what ``save`` writes (edited by hand, damaged)."""
        path = run_dir / STATE_FILE
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError as exc:
            raise StateError(f"no run state at {path}") from exc
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise StateFileError(f"corrupt run state {path}: {exc}") from exc
        _check_fields(path, data)
        return cls(**data, run_dir=run_dir)


# The type each saved field must have (a field not listed here is not checked).
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "run_id": (str,),
    "backend": (str,),
    "topology": (dict,),
    "cassandra": (dict, type(None)),
    "status": (str,),
    "created": (int, float),
    "java": (str, type(None)),
    "namespaces": (list,),
    "processes": (dict,),
    "extra": (dict,),
}


def _check_fields(path: Path, data: object) -> None:
    """StateFileError naming ``path`` unless ``data`` has the fields of a RunState, each of
    its type, and no others."""
    if not isinstance(data, dict):
        raise StateFileError(f"corrupt run state {path}: expected a JSON object")
    names = {f.name for f in fields(RunState) if f.name != "run_dir"}
    required = {
        f.name
        for f in fields(RunState)
        if f.name != "run_dir" and f.default is MISSING and f.default_factory is MISSING
    }
    unknown = sorted(set(data) - names)
    missing = sorted(required - set(data))
    if unknown or missing:
        problem = "; ".join(
            ([f"unknown keys {unknown}"] if unknown else [])
            + ([f"missing keys {missing}"] if missing else [])
        )
        raise StateFileError(f"corrupt run state {path}: {problem}")
    for key, value in data.items():
        types = _FIELD_TYPES.get(key)
        if types and (isinstance(value, bool) or not isinstance(value, types)):
            raise StateFileError(
                f"corrupt run state {path}: {key} is {value!r}, expected "
                f"{' or '.join('null' if t is type(None) else t.__name__ for t in types)}"
            )
    if not all(isinstance(n, str) for n in data.get("namespaces", [])):
        raise StateFileError(f"corrupt run state {path}: namespaces must be names")
    for host, proc in data.get("processes", {}).items():
        pid = proc.get("pid") if isinstance(proc, dict) else None
        marker = proc.get("marker") if isinstance(proc, dict) else None
        if isinstance(pid, bool) or not isinstance(pid, int) or pid < 1:
            raise StateFileError(
                f"corrupt run state {path}: processes.{host} needs a pid >= 1, got {proc!r}"
            )
        if not isinstance(marker, str):
            raise StateFileError(
                f"corrupt run state {path}: processes.{host} needs a marker string, got {proc!r}"
            )


def create_run(state: RunState, base: Path | None = None) -> RunState:
    """Create the run directory for ``state`` and write its first state file."""
    run_dir = runs_dir(base) / state.run_id
    try:
        run_dir.mkdir(parents=True)
    except FileExistsError as exc:
        raise StateError(f"run {state.run_id} already exists at {run_dir}") from exc
    state.run_dir = run_dir
    state.save()
    return state


def list_runs(base: Path | None = None) -> list[Path]:
    """Run directories, oldest first."""
    root = runs_dir(base)
    if not root.is_dir():
        return []
    dirs = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return sorted(dirs, key=lambda p: p.stat().st_mtime)


def active_run(run_id: str | None = None, base: Path | None = None) -> RunState:
    """The run named ``run_id``, else the only/newest run with status "up".

    Raises StateError when there is none (nothing is up) or the id is unknown.
    """
    if run_id:
        run_dir = runs_dir(base) / run_id
        if not run_dir.is_dir():
            raise StateError(f"no run {run_id!r} in {runs_dir(base)}")
        return RunState.load(run_dir)
    ups = []
    for run_dir in list_runs(base):
        try:
            state = RunState.load(run_dir)
        except StateError:
            continue
        if state.status == "up":
            ups.append(state)
    if not ups:
        raise StateError("no testbed is up (start one with `python -m testbed up`)")
    return ups[-1]


class RunLock:
    """An exclusive flock on a run's lock file, held while that run is being changed."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self, *, blocking: bool = True) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return False
            raise
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def iter_states(base: Path | None = None) -> Iterator[RunState]:
    for run_dir in list_runs(base):
        try:
            yield RunState.load(run_dir)
        except StateError:
            continue
