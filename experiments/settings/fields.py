"""The sweep's settings as values: the ``Knob`` each ``SweepConfig`` field declares (from
which the command line, the generic checks, the fingerprint and the docs' reference are
made), the list syntax of the command line, the checks a Knob implies, and settings
files (TOML, the shipped presets)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from common.errors import ConfigError
from common.inputs import MAX_INT, MAX_NUMBER_CHARS, shown
from testbed import resources
from testbed.topology import MAX_EDGE_NODES

MAX_LIST_VALUES = 1000  # values one list flag may expand to (a grid larger is a typo)


AT_DEFAULT: Any = object()  # a Knob's absent_at: its default
LIST_SYNTAX = "use e.g. 0,20,40 or an ascending range 0..100..10"


@dataclass(frozen=True)
class Knob:
    """What the sweep knows of one of its settings besides its name (the TOML key) and
    default; the command line, the generic checks and the fingerprint are made from it.

    ``kind`` is the type of the value, or of each value of a list (``many``): int, float,
    str, bool, or "rf" / "fault" (parsed by their own rules). ``flag`` "" is --NAME with
    dashes, None no flag (TOML only, or a flag another module defines). ``fingerprint``:
    "always", "unless-default" (absent while at ``absent_at``, by default its default: runs
    stored before the setting existed still resume; a default that changed later keeps
    the old one there) or "never" (where or in which order, not what is measured)."""

    help: str
    kind: type | str
    many: bool = False
    grid: bool = False  # a grid dimension: each value makes cells of its own
    flag: str | None = ""
    own_flag: bool = True  # False: the flag is another command line's too (added there)
    metavar: str | None = None
    shown: str | None = None  # the default as --help shows it (else made from the value)
    low: float | None = None
    high: float | None = None
    decimals: int | None = None  # numbers are rounded to this many (their resolution)
    choices: tuple[str, ...] | None = None
    upper: bool = False  # names in upper case (consistency levels)
    path: bool = False  # a file: made absolute (relative to the config file that names it)
    group: str = "sweep"  # testbed: how testbeds are built; ycsb: YCSB cells; run: where
    fingerprint: str = "always"
    absent_at: Any = AT_DEFAULT  # "unless-default": the value left out of the fingerprint

    def left_out(self, default: Any) -> Any:
        """The value the fingerprint leaves out ("unless-default"): ``absent_at``, else
        the setting's ``default``."""
        return default if self.absent_at is AT_DEFAULT else self.absent_at


def knob(default: Any, help: str, kind: type | str, **kw: Any) -> Any:
    return field(default=default, metadata={"knob": Knob(help, kind, **kw)})


def grid_knob(default: Any, help: str, kind: type | str, **kw: Any) -> Any:
    return knob(default, help, kind, many=True, grid=True, **kw)


def node_knob(key: str, help: str) -> Any:  # testbed.argtypes adds their flags, cgroups reads them
    return knob(
        None,
        help,
        "node",
        flag=resources.FLAGS[key],
        own_flag=False,
        group="testbed",
        fingerprint="unless-default",
    )


def check_knob(name: str, knob: Knob, value: Any, default: Any) -> Any:
    """The checks a setting's Knob declares (type, range, choices, case); the value in its
    canonical form. Checks between settings are SweepConfig's own."""
    if value is None and default is None:
        return None
    if knob.many and knob.kind in (int, float, str):
        if knob.kind is int:
            top = int(knob.high) if knob.high is not None else MAX_INT
            return _ints(name, value, int(knob.low or 0), top)
        if knob.kind is float:
            return _floats(name, value, knob.low or 0.0, knob.high or math.inf, knob.decimals)
        return strings(name, value, upper=knob.upper, none=name in ("fault", "trace"))
    if knob.many or knob.kind not in (bool, str, int, float):  # rf, fault, node: own rules
        return value
    if knob.kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{name} must be true or false, got {shown(value)}")
    elif knob.kind is str:
        if not isinstance(value, str):
            raise ConfigError(f"{name} must be a string, got {value!r}")
        if knob.choices is not None and value not in knob.choices:
            raise ConfigError(f"unknown {name} {value!r} (choose from {', '.join(knob.choices)})")
    elif knob.kind is int:
        _int(name, value, int(knob.low or 0))
        most = knob.high if knob.high is not None else MAX_INT
        if value > most:
            raise ConfigError(f"{name} must be at most {most:g}, got {shown(value)}")
    elif knob.kind is float:
        low, high = knob.low or 0.0, knob.high or math.inf
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        finite = number and (isinstance(value, int) or math.isfinite(value))  # ints: exact
        if not finite or not low <= value <= high:
            allowed = f"at least {low:g}" if high == math.inf else f"between {low:g} and {high:g}"
            raise ConfigError(f"{name} must be {allowed}, got {shown(value)}")
    return value


def parse_list(name: str, text: str, kind: type) -> tuple:
    """'0,20,40' -> (0, 20, 40); 'a..b' (step 1) or 'a..b..step' ascending ranges.

    Raises ConfigError naming ``name`` and the part for anything else: a part that is not
    a finite ``kind``, a range that is empty or descending, a step that is not positive,
    or more than MAX_LIST_VALUES values in all.
    """
    items: list = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        bounds = [_number(name, part, x, kind) for x in part.split("..")]
        if len(bounds) == 1:
            items.append(bounds[0])
        elif len(bounds) in (2, 3):
            items.extend(_expand(name, part, kind, *bounds))
        else:
            raise ConfigError(f"{name}: cannot read {part!r} ({LIST_SYNTAX})")
        if len(items) > MAX_LIST_VALUES:
            raise ConfigError(
                f"{name}: {text!r} expands to more than {MAX_LIST_VALUES} values ({LIST_SYNTAX})"
            )
    return tuple(items)


def _number(name: str, part: str, text: str, kind: type) -> int | float:
    if len(text.strip()) > MAX_NUMBER_CHARS:  # before converting: 400 digits overflowed later
        raise ConfigError(f"{name}: {shown(part)} is not a number of a sane size ({LIST_SYNTAX})")
    try:
        value = kind(text)
    except ValueError:
        raise ConfigError(
            f"{name}: cannot read {part!r} as {'integers' if kind is int else 'numbers'} "
            f"({LIST_SYNTAX})"
        ) from None
    if kind is float and not math.isfinite(value):
        raise ConfigError(f"{name}: {shown(part)} is not a finite number ({LIST_SYNTAX})")
    return value


def _expand(name: str, part: str, kind: type, low, high, step=1) -> list:
    """The values of the range low..high..step (both ends included)."""
    if step <= 0:
        raise ConfigError(f"{name}: the step of {part!r} must be positive ({LIST_SYNTAX})")
    if high < low:
        raise ConfigError(
            f"{name}: {part!r} is a descending range; write it ascending, e.g. "
            f"{high:g}..{low:g}{'' if step == 1 else f'..{step:g}'}"
        )
    steps = (high - low) / step  # inf when the bounds are too far apart for a float
    if not steps < MAX_LIST_VALUES:
        shown = f"{math.floor(steps + 1e-9) + 1}" if math.isfinite(steps) else "too many"
        raise ConfigError(
            f"{name}: {part!r} expands to {shown} values, more than {MAX_LIST_VALUES} "
            f"({LIST_SYNTAX})"
        )
    count = math.floor(steps + 1e-9) + 1
    # Multiplied, not accumulated: 0..1..0.1 gives 0.3, not 0.30000000000000004.
    return [kind(round(low + i * step, 9)) for i in range(count)]


def parse_rf(name: str, text: str) -> tuple[int | Literal["k"], ...]:
    """Replication factors: integers, ranges of them (parse_list) and "k" (the node count)."""
    values: list[int | Literal["k"]] = []
    for part in str(text).split(","):
        if part.strip().lower() == "k":
            values.append("k")
        else:
            values.extend(parse_list(name, part, int))
    return tuple(values)


def rf_values(values: Any) -> tuple[int | Literal["k"], ...]:
    """RFs: integers 1..MAX, or "k" for "the node count" (RF = every node)."""
    values = grid_values("rf", values)
    out: list[int | Literal["k"]] = []
    for v in values:
        if isinstance(v, str) and v.strip().lower() == "k":
            out.append("k")
        elif isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_EDGE_NODES:
            out.append(v)
        else:
            raise ConfigError(
                f"rf values must be integers from 1 to {MAX_EDGE_NODES} or "
                f"'k' (the node count), got {v!r}"
            )
    return once("rf", out, values)


def grid_values(name: str, values: Any) -> tuple:
    """A grid dimension's values as a tuple; ConfigError when there are none."""
    values = as_tuple(name, values)
    if not values:
        raise ConfigError(f"{name} is empty: the grid needs at least one value")
    return values


def once(name: str, out: Sequence, given: Sequence) -> tuple:
    """``out`` as a tuple; ConfigError (showing ``given``) when it holds a value twice."""
    if len(set(out)) != len(out):
        raise ConfigError(f"{name} lists a value twice: {list(given)}")
    return tuple(out)


def as_tuple(name: str, value: Any) -> tuple:
    if isinstance(value, (list, tuple)):
        return tuple(value)
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        return (value,)
    raise ConfigError(f"{name} must be a list, got {value!r}")


def _int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{name} must be an integer >= {low}, got {shown(value)}")
    return value


def _ints(name: str, values: Any, low: int, high: int) -> tuple[int, ...]:
    values = grid_values(name, values)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            raise ConfigError(
                f"{name} values must be integers from {low} to {high}, got {shown(v)}"
            )
    return once(name, values, values)


def strings(name: str, values: Any, upper: bool = False, none: bool = False) -> tuple[str, ...]:
    """Names, stripped (``upper``: in upper case; ``none``: ``none`` in any case is
    ``none``, the dimension's "nothing" value), each once."""
    values = grid_values(name, values)
    out = []
    for v in values:
        if not isinstance(v, str) or not v.strip():
            raise ConfigError(f"{name} values must be names, got {v!r}")
        v = v.strip().upper() if upper else v.strip()
        out.append("none" if none and v.lower() == "none" else v)
    return once(name, out, out)


def _floats(
    name: str, values: Any, low: float, high: float, decimals: int | None = None
) -> tuple[float, ...]:
    """Numbers in low..high, each once; ``decimals``: rounded to that many first, so two
    values that differ below the resolution are one value (refused as listed twice)."""
    values = grid_values(name, values)
    out = []
    for v in values:
        nan = isinstance(v, float) and math.isnan(v)  # an int is never (nor converted)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or nan:
            raise ConfigError(f"{name} values must be numbers, got {shown(v)}")
        if not low <= v <= high:
            raise ConfigError(f"{name} values must be between {low:g} and {high:g}, got {shown(v)}")
        out.append(float(v) if decimals is None else round(float(v), decimals))
    if len(set(out)) != len(out):
        dup = next(x for x in out if out.count(x) > 1)
        same = [v for v, x in zip(values, out, strict=True) if x == dup]
        unit = "" if decimals is None else f" to {10.0**-decimals:g}"
        raise ConfigError(f"{name} lists a value twice{unit}: {', '.join(map(repr, same))}")
    return tuple(out)
