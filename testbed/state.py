"""On-disk run state (like ccm's cluster.conf): a stateless CLI reloads it, and `clean`
finds every run's leftovers through it.

Layout: $EDGETB_HOME (default ~/.edgetb)/runs/<run_id>/{state.json, lock, nodes/<host>/...}
Who holds a run and the machine-wide registry of runs: ``testbed.ownership``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
import types
import typing
from collections.abc import Iterator
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from common.errors import (
    ConfigError,
    RunSelectionError,
    StateError,
    StateFileError,
    StateVersionError,
)
from common.paths import home as home  # where it always was

from .ownership import (
    LOCK_FILE,
    RUN_ID_RE,
    RunLock,
    describe_holder,
    register,
    registered_runs,
)

_SAVING = threading.RLock()  # RunState.save, across threads

PREFIX = "tb"
STATE_FILE = "state.json"
# A testbed's own name (`up --name lab1`, as ccm names clusters): usable wherever a run
# id is; never six hex digits, so a name and a run id cannot be taken for each other.
NAME_RE = re.compile(r"[a-z][a-z0-9-]{0,23}")
# Every object a run creates is named <prefix>-<run id>-<host or role>, nothing else is.
OBJECT_RE = re.compile(rf"{PREFIX}-([0-9a-f]{{6}})-([a-z][a-z0-9]{{0,11}})")


def run_of(name: str) -> str | None:
    """The run id in a testbed object's name (strict pattern), else None."""
    match = OBJECT_RE.fullmatch(name)
    return match.group(1) if match else None


def runs_dir(base: Path | None = None) -> Path:
    return (base or home()) / "runs"


def new_run_id() -> str:
    return secrets.token_hex(3)


def check_name(name: str) -> str:
    """``name`` if it can name a testbed; ConfigError (one line) otherwise."""
    if not NAME_RE.fullmatch(name) or RUN_ID_RE.fullmatch(name):
        raise ConfigError(
            f"testbed name {name!r}: a lower-case letter, then up to 23 lower-case letters, "
            f"digits or '-', and not six hex digits (that is a run id)"
        )
    return name


def namespace_name(run_id: str, host: str) -> str:
    """Name of a host's network namespace: prefix, run id and host name."""
    return f"{PREFIX}-{run_id}-{host}"


TEARDOWN_FAILED = "teardown-failed"  # `down` failed on machines that outlive the run


@dataclass
class Record:
    """One part's own record in a run's state — a backend's objects, the shaper's process,
    the cgroups, the qdiscs found before shaping — declared as a dataclass by the module
    that owns the part and saved under its ``KEY``. Every field has a default, so a record
    written by an older version loads (fields it does not know are dropped)."""

    KEY: ClassVar[str] = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """The record of ``data`` (fields it does not know dropped); TypeError naming the
        field whose value is not of its declared type."""
        hints = typing.get_type_hints(cls)
        kept = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        for key, value in kept.items():
            if not _fits(value, hints[key]):
                raise TypeError(f"{key} is {value!r}, expected {hints[key]}")
        return cls(**kept)


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` (as JSON gives it) has the outer type of ``hint``."""
    if hint is Any:
        return True
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        return any(_fits(value, h) for h in typing.get_args(hint))
    base = typing.get_origin(hint) or hint
    if isinstance(value, bool) and base is not bool:
        return False
    return isinstance(value, (int, float) if base is float else base)


R = TypeVar("R", bound=Record)


@dataclass
class RunState:
    """Everything a later process needs to find, use and remove one run's objects."""

    run_id: str
    backend: str
    topology: dict[str, Any]
    cassandra: dict[str, Any] | None
    status: str = "building"  # building -> up | failed; TEARDOWN_FAILED: down to retry
    detached: bool = False  # left running by `edgetb up`, owned by nobody
    created: float = field(default_factory=time.time)
    name: str | None = None  # given with `up --name`; unique while the run exists
    java: str | None = None
    namespaces: list[str] = field(default_factory=list)
    processes: dict[str, dict[str, Any]] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)  # the backend's, as given to `up`
    timings: dict[str, float] = field(default_factory=dict)  # seconds per phase of `up`
    # a node was taken down on purpose (`edgetb node stop`): its peers' logs tell of it
    faulted: bool = False
    # Each part's Record by its KEY; a part not used by this process stays the saved dict.
    parts: dict[str, Any] = field(default_factory=dict)
    run_dir: Path = field(default=Path("."), repr=False)

    def get(self, cls: type[R]) -> R | None:
        """The record of the part ``cls`` declares, None when the run has none."""
        with _SAVING:  # one typed object per part, whichever thread asks first
            rec = self.parts.get(cls.KEY)
            if rec is None or isinstance(rec, cls):
                return rec
            if not isinstance(rec, dict):
                raise StateFileError(f"corrupt run state {self.path}: {cls.KEY} is {rec!r}")
            try:
                typed = cls.from_dict(rec)
            except TypeError as exc:  # a field of the wrong shape
                raise StateFileError(f"corrupt run state {self.path}: {cls.KEY}: {exc}") from None
            self.parts[cls.KEY] = typed
            return typed

    def put(self, rec: R) -> R:
        """``rec`` becomes its part's record (saved with the next ``save``)."""
        with _SAVING:  # not while another thread's save walks the parts
            self.parts[rec.KEY] = rec
        return rec

    def drop(self, cls: type[Record]) -> None:
        with _SAVING:
            self.parts.pop(cls.KEY, None)

    @property
    def path(self) -> Path:
        return self.run_dir / STATE_FILE

    def save(self) -> None:
        """Write atomically (temp file + rename), so a crash never leaves half a state."""
        # One thread at a time (a fault's node start and a trace may save at once): the
        # temp file is per process, and asdict must not race a change to the dicts.
        with _SAVING:
            data = asdict(self)
            data.pop("run_dir")
            # A temp file of this process's own: another process saving at the same moment
            # (a command given --force on a run in use) must not rename ours away.
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
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
        if isinstance(data, dict) and isinstance(data.get("extra"), dict):
            data = _from_extra(data)
        _check_fields(path, data)
        return cls(**data, run_dir=run_dir)


def _from_extra(data: dict[str, Any]) -> dict[str, Any]:
    """A state written before the records (one untyped ``extra`` dict) in today's form,
    so that a testbed left up across an upgrade is still found, used and removed whole."""
    data = dict(data)
    extra = dict(data.pop("extra"))
    data.setdefault("options", extra.pop("backend", {}))
    data.setdefault("timings", extra.pop("timings", {}))
    emulation = dict(extra.get("emulation") or {})
    if "qdisc_before" in emulation:
        extra["qdiscs"] = {"before": emulation.pop("qdisc_before")}
    if "direct" in emulation:
        extra["shaper.direct"] = {"structures": emulation.pop("direct")}
    for kind in ("gateway", "host"):
        if kind in emulation:
            extra[f"shaper.{kind}"] = emulation.pop(kind)
    if "cgroups" in extra:
        extra["cgroups"] = {"dirs": extra["cgroups"]}
    if "emulation" in extra:
        extra["emulation"] = emulation  # what is left: shaper, loss_location, matrix
    data.setdefault("parts", extra)
    return data


# The type each saved field must have (a field not listed here is not checked).
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "run_id": (str,),
    "backend": (str,),
    "topology": (dict,),
    "cassandra": (dict, type(None)),
    "status": (str,),
    "detached": (bool,),
    "created": (int, float),
    "name": (str, type(None)),
    "java": (str, type(None)),
    "namespaces": (list,),
    "processes": (dict,),
    "options": (dict,),
    "timings": (dict,),
    "faulted": (bool,),
    "parts": (dict,),
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
        if unknown and not missing:
            raise StateVersionError(
                f"corrupt run state {path}: unknown keys {unknown} (or written by another "
                f"version of edgetb; `edgetb clean --run RUN` removes the run)"
            )
        raise StateFileError(f"corrupt run state {path}: {problem}")
    for key, value in data.items():
        types = _FIELD_TYPES.get(key)
        if types is None:  # a field not listed in _FIELD_TYPES is not checked
            continue
        bool_where_number = isinstance(value, bool) and bool not in types
        if bool_where_number or not isinstance(value, types):
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


def create_run(state: RunState, base: Path | None = None) -> RunLock:
    """Create the run directory for ``state`` with its owner lock held; returns the lock.

    The directory is made under a hidden temporary name with the lock already held and
    then renamed into place, so no other process (``clean``) ever sees the run unowned.
    The run is then entered in the machine-wide registry (before any object of it exists).
    """
    root = runs_dir(base)
    root.mkdir(parents=True, exist_ok=True)
    final = root / state.run_id
    if final.exists() or state.run_id in registered_runs():
        raise StateError(f"run {state.run_id} already exists at {final}")
    tmp = Path(tempfile.mkdtemp(prefix=f".{state.run_id}.", dir=root))
    lock = RunLock(tmp)
    lock.acquire(blocking=False)
    state.run_dir = tmp
    state.save()
    try:
        os.rename(tmp, final)
    except OSError as exc:
        lock.release()
        shutil.rmtree(tmp, ignore_errors=True)
        raise StateError(f"run {state.run_id} already exists at {final}") from exc
    state.run_dir = final
    lock.path = final / LOCK_FILE
    register(state.run_id, final)
    return lock


def list_runs(base: Path | None = None) -> list[Path]:
    """Run directories, oldest first."""
    root = runs_dir(base)
    if not root.is_dir():
        return []
    dirs = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return sorted(dirs, key=lambda p: p.stat().st_mtime)


def known_runs(base: Path | None = None) -> dict[str, Path]:
    """Run id -> directory of every run of ``base`` and of the registry."""
    runs = {rid: path for rid, path in registered_runs().items()}
    for path in list_runs(base):
        runs.setdefault(path.name, path)
    return runs


def iter_states(base: Path | None = None) -> Iterator[RunState]:
    for run_dir in list_runs(base):
        try:
            yield RunState.load(run_dir)
        except StateError:
            continue


def named(name: str, base: Path | None = None) -> RunState | None:
    """The run called ``name`` (whatever its status), None when there is none."""
    return next((s for s in iter_states(base) if s.name == name), None)


def run_id_of(run: str, base: Path | None = None) -> str:
    """``run`` as a run id: itself, or the id of the run it names (RunSelectionError
    when no run has that name)."""
    if not NAME_RE.fullmatch(run) or RUN_ID_RE.fullmatch(run):
        return run
    state = named(run, base)
    if state is None:
        raise RunSelectionError(f"no testbed named {run!r} in {runs_dir(base)}")
    return state.run_id


def select_run(run_id: str | None = None, base: Path | None = None) -> RunState:
    """The run ``run_id`` (its id, or the name it was given), else the one detached
    testbed that is up.

    Without ``run_id``, a testbed in use by a live process (a sweep, a test) is never
    picked: RunSelectionError lists the runs when none or several could be meant.
    """
    if run_id:
        run_id = run_id_of(run_id, base)
        if not RUN_ID_RE.fullmatch(run_id):
            raise RunSelectionError(
                f"invalid run {run_id!r} (a run id of six hex digits, e.g. 3fa2c1, or a "
                f"testbed's name)"
            )
        run_dir = runs_dir(base) / run_id
        if not run_dir.is_dir():
            raise RunSelectionError(f"no run {run_id!r} in {runs_dir(base)}")
        return RunState.load(run_dir)
    detached, owned, crashed = [], [], []
    for state in iter_states(base):
        if state.status != "up":
            continue
        holder = RunLock(state.run_dir).holder()
        if holder is not None:
            owned.append(f"{state.run_id} (in use by {describe_holder(holder)})")
        elif state.detached:
            detached.append(state)
        else:
            crashed.append(f"{state.run_id} (left by a process that died; `clean` removes it)")
    if len(detached) == 1:
        return detached[0]
    if len(detached) > 1:
        names = ", ".join(s.run_id for s in detached)
        raise RunSelectionError(f"several testbeds are up ({names}): pass --run RUN")
    if owned or crashed:
        raise RunSelectionError(
            "no detached testbed is up; other runs: "
            + "; ".join(owned + crashed)
            + ". Pass --run RUN to name one."
        )
    raise RunSelectionError("no testbed is up (start one with `edgetb up`)")
