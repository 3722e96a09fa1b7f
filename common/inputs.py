"""Values a user types or hands in, read the one way every command reads them: a bad one
is one ConfigError naming the input and what is allowed, before anything changes, never
a traceback. Numbers are checked for size before they are converted (a number of
hundreds of digits overflowed a float later on), against their bounds as exact integers,
and for being finite; structured text (TOML, JSON) is parsed with its nesting bounded
(thousands of nested arrays exhausted the interpreter's recursion); a value shown in an
error is cut to a readable length.

``testbed.argtypes`` (argparse types), the sweep's settings (``experiments.settings.fields``),
topologies, link files, traces and configuration files read through this module.
"""

from __future__ import annotations

import json
import math
import tomllib
from typing import Any

from .errors import ConfigError

MAX_NUMBER_CHARS = 32  # far above any number a setting takes (1e-9 .. 1e12, written out)
MAX_INT = 10**12  # an integer setting without a bound of its own is at most this
MAX_DEPTH = 64  # nesting of a TOML or JSON document the tool reads (configs use 2-3)
SHOWN_CHARS = 40


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters, saying how long it was."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 1]}… ({len(text)} characters)"


def number(
    text: str, what: str, kind: type = float, low: float = -math.inf, high: float = math.inf
) -> Any:
    """``text`` as an int or a finite float (``kind``) in low..high; ConfigError naming
    ``what`` otherwise."""
    allowed = _allowed(kind, low, high)
    stripped = str(text).strip()
    if len(stripped) > MAX_NUMBER_CHARS:
        raise ConfigError(f"{what}: {shown(text)} is not {allowed}")
    try:
        value = kind(stripped)
    except (ValueError, OverflowError):
        raise ConfigError(f"{what}: {shown(text)} is not {allowed}") from None
    return check_number(value, what, kind, low, high)


def check_number(
    value: Any, what: str, kind: type = float, low: float = -math.inf, high: float = math.inf
) -> Any:
    """``value`` (already typed: from TOML, JSON or a default) as ``kind`` in low..high:
    bools are not numbers, an int compared exactly before it is made a float."""
    allowed = _allowed(kind, low, high)
    ok = isinstance(value, int) or (kind is float and isinstance(value, float))
    if isinstance(value, bool) or not ok:
        raise ConfigError(f"{what}: {shown(value)} is not {allowed}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{what}: {shown(value)} is not {allowed} (not finite)")
    if not low <= value <= high:  # int against float bounds: exact, no overflow
        raise ConfigError(f"{what}: {shown(value)} is not {allowed}")
    return float(value) if kind is float else value


def _allowed(kind: type, low: float, high: float) -> str:
    noun = "an integer" if kind is int else "a number"
    if low == -math.inf and high == math.inf:
        return noun
    if high == math.inf:
        return f"{noun} >= {low:g}"
    if low == -math.inf:
        return f"{noun} <= {high:g}"
    return f"{noun} from {low:g} to {high:g}"


def depth(value: Any) -> int:
    """How deeply ``value``'s lists and dicts nest (iteratively: any depth)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict | list | tuple):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            todo.extend((child, level + 1) for child in children)
    return deepest


def _shallow_enough(text: str, what: str) -> None:
    """Refuse text that opens more than MAX_DEPTH brackets before closing them (read
    before a recursive parser sees it; brackets inside strings may count: harmless, a
    config never nests that deep)."""
    level = top = 0
    for ch in text:
        if ch in "[{":
            level += 1
            top = max(top, level)
            if top > MAX_DEPTH:
                raise ConfigError(f"{what}: nested more than {MAX_DEPTH} levels deep")
        elif ch in "]}":
            level = max(0, level - 1)


def toml(text: str, what: str) -> dict[str, Any]:
    """A TOML document; ConfigError naming ``what`` when it is not TOML or nests too deep."""
    _shallow_enough(text, what)
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise ConfigError(f"{what}: invalid TOML: {exc}") from None


def json_text(text: str, what: str) -> Any:
    """A JSON document; ConfigError naming ``what`` when it is not JSON or nests too deep."""
    _shallow_enough(text, what)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{what}: invalid JSON: {exc}") from None
