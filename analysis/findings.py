"""A claim's finding and the interval arithmetic behind its verdict (``analysis.claims``):
a statistic of mean RTTs with its 95 % interval from a parametric bootstrap of the
means (each drawn from a normal of its standard error, seeded by the means it draws:
the same numbers on every call and in every process), and the verdict it allows:
"holds" where the whole interval lies where the claim says, "does not hold" where none
of it does, "cannot tell" otherwise. Two means are told apart beyond APART_SE standard
errors of their difference."""

from __future__ import annotations

import math
import zlib
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .stats import APART_SE, median_line_slope, repetitions_to_tell

Means = Mapping[tuple[int, float, int, float], float]  # (nodes, loss, rf, latency) -> ms
Errors = Mapping[tuple[int, float, int, float], float]  # the same keys -> standard error, ms
MIN_LATENCY_MS = 10.0  # the paper's statements are about shaped links
NO_ERRORS: Errors = {}  # the model's means: exact
SIMILAR = 0.10  # "similar": within 10 % of each other
STD_CLAIM_MS = 1.5
RESAMPLES = 400  # parametric bootstrap draws of the means: enough for a 95 % interval
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Finding:
    """One claim on one set of means: the verdict, the numbers behind it (one line), and
    its statistic (``value``, in ``unit``) with its 95 % interval (``low``, ``high``;
    None where the means are exact or there is no single statistic). Unpacks as
    ``(verdict, numbers)``."""

    verdict: str
    numbers: str = ""
    value: float | None = None
    low: float | None = None
    high: float | None = None
    unit: str = ""

    def __iter__(self):  # noqa: ANN204
        return iter((self.verdict, self.numbers))

    def __getitem__(self, i: int) -> str:
        return (self.verdict, self.numbers)[i]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def none(why: str = "no cells for it") -> Finding:
    return Finding(f"cannot tell ({why})")


def se_of(se: Errors, key: tuple) -> float:
    """A mean's standard error: 0 where ``se`` has none (the model's means, exact); a
    measured mean whose error could not be estimated (NaN: one write, one repetition
    of one write) is unbounded, so no verdict rests on it."""
    v = se.get(key, 0.0)
    if math.isnan(v):
        return math.inf
    return v if v > 0 else 0.0


def draws(means: Means, se: Errors, keys: Sequence[tuple]) -> np.ndarray:
    """(RESAMPLES + 1, len(keys)): row 0 the means themselves, the others each mean drawn
    from a normal of its standard error (seeded by the keys: the same draws on every
    call)."""
    mu = np.array([means[k] for k in keys], dtype=float)
    sd = np.array([se_of(se, k) for k in keys], dtype=float)
    rng = np.random.default_rng(zlib.crc32(repr(list(keys)).encode()))
    with np.errstate(invalid="ignore"):  # an unbounded error: inf (interval() says so)
        noise = rng.standard_normal((RESAMPLES, len(keys))) * sd
    return np.vstack([mu, mu + noise])


def interval(samples: np.ndarray) -> tuple[float, float | None, float | None]:
    """(value, low, high) of a statistic's draws (row 0: on the means themselves); no
    interval where every draw is the value (exact means)."""
    value = float(samples[0])
    rest = samples[1:]
    if rest.size and not np.all(np.isfinite(rest)):  # a mean of unbounded error
        return value, -math.inf, math.inf
    if not rest.size or np.all(rest == value):
        return value, None, None
    tail = 100 * (1 - CONFIDENCE) / 2
    return value, float(np.percentile(rest, tail)), float(np.percentile(rest, 100 - tail))


def _bounds(value: float, low: float | None, high: float | None) -> tuple[float, float]:
    return (value, value) if low is None or high is None else (low, high)


def ci_text(low: float | None, high: float | None, fmt: str, scale: float = 1.0) -> str:
    """' [low, high]' (95 % interval) or nothing for exact means."""
    if low is None or high is None:
        return ""
    return f" [{format(scale * low, fmt)}, {format(scale * high, fmt)}]"


def within(value: float, low: float | None, high: float | None, limit: float) -> bool | None:
    """Is |statistic| <= limit? True where the whole interval is, False where none of
    it is, None (cannot tell) otherwise."""
    lo, hi = _bounds(value, low, high)
    if -limit <= lo and hi <= limit:
        return True
    if hi < -limit or lo > limit:
        return False
    return None


def below(value: float, low: float | None, high: float | None, limit: float) -> bool | None:
    """Is the statistic < limit? True where the whole interval is, False where none."""
    lo, hi = _bounds(value, low, high)
    if hi < limit:
        return True
    if lo >= limit:
        return False
    return None


def above(value: float, low: float | None, high: float | None) -> bool | None:
    """Is the statistic > 0? True where the whole interval is, False where none (an
    exact 0: not above)."""
    lo, hi = _bounds(value, low, high)
    if lo > 0:
        return True
    if hi <= 0:
        return False
    return None


def one(ok: bool | None, why: str = "its 95 % interval includes both") -> str:
    return "holds" if ok else "does not hold" if ok is False else f"cannot tell ({why})"


def verdict_over(ok: list[tuple[float, bool | None]], what: str = "at latencies",
             unit: str = "ms") -> str:  # fmt: skip
    """holds / does not hold / holds only ... over the points decided; ``None`` marks a
    point where the data cannot tell."""
    if not ok:
        return "cannot tell (no cells for it)"
    decided = [(x, y) for x, y in ok if y is not None]
    close = [x for x, y in ok if y is None]
    if not decided:
        return (
            f"cannot tell (within {APART_SE:g} standard errors at every latency)"
            if what == "at latencies"
            else "cannot tell (the 95 % intervals include both at every point)"
        )
    good = [x for x, y in decided if y]
    if len(good) == len(decided):
        verdict = "holds"
    elif not good:
        verdict = "does not hold"
    else:
        verdict = f"holds only {what} {', '.join(f'{x:g}' for x in good)} {unit}"
    if close:
        verdict += f"; cannot tell at {', '.join(f'{x:g}' for x in close)} {unit}"
    return verdict


def apart(means: Means, se: Errors, a: tuple, b: tuple) -> tuple[bool, str, float]:
    """Are the means at keys ``a`` and ``b`` told apart (their difference beyond
    APART_SE standard errors; always, without errors)? With a note of the repetitions that
    would tell them apart when not, and the standard error of the difference."""
    err = math.hypot(se_of(se, a), se_of(se, b))
    diff = abs(means[a] - means[b])
    if not err > 0 or diff > APART_SE * err:  # no errors (the model): as measured
        return True, "", err
    need = repetitions_to_tell(diff, err)
    return False, " (equal)" if need is None else f" ({need}x the repetitions to tell)", err


def grid(means: Means, nodes: int, loss: float) -> dict[float, dict[int, float]]:
    out: dict[float, dict[int, float]] = defaultdict(dict)
    for (n, l, rf, lat), v in means.items():
        if n == nodes and l == loss and lat >= MIN_LATENCY_MS:
            out[lat][rf] = v
    return dict(sorted(out.items()))


def losses_of(means: Means, nodes: int) -> list[float]:
    return sorted({k[1] for k in means if k[0] == nodes})


def ranked(
    means: Means, se: Errors, nodes: int, loss: float, rf: int, pick: Callable
) -> tuple[list[tuple[float, bool | None]], list[str], tuple[float, float] | None]:
    """Per latency: is ``rf`` the one ``pick`` (max: worst, min: best) chooses, told
    apart (None: too close to tell) from the runner-up when it is, from the chosen one
    when it is not; the numbers; and the smallest margin in the claim's favour (ms: the
    RF's lead over the next, negative where another leads) with its standard error."""
    ok: list[tuple[float, bool | None]] = []
    parts = []
    margins: list[tuple[float, float]] = []
    sign = 1.0 if pick is max else -1.0
    for lat, by_rf in grid(means, nodes, loss).items():
        if rf not in by_rf or len(by_rf) < 2:
            continue
        chosen = pick(by_rf, key=lambda r: by_rf[r])
        other = pick((r for r in by_rf if r != rf), key=lambda r: by_rf[r])
        told, note, err = apart(means, se, (nodes, loss, rf, lat), (nodes, loss, other, lat))
        ok.append((lat, (chosen == rf) if told else None))
        margins.append((sign * (by_rf[rf] - by_rf[other]), err))
        parts.append(f"{lat:g} ms: RF {rf} {by_rf[rf]:.0f}, RF {other} {by_rf[other]:.0f}" + note)
    return ok, parts, min(margins) if margins else None


def rank_finding(ok, parts, margin, head: str) -> Finding:  # noqa: ANN001
    if not ok:
        return none()
    value, err = margin if margin else (math.nan, 0.0)
    low, high = (value - APART_SE * err, value + APART_SE * err) if err > 0 else (None, None)
    return Finding(verdict_over(ok), head + "; ".join(parts), value, low, high, "ms")


def series(means: Means, nodes: int, loss: float) -> dict[int, list[tuple[float, tuple]]]:
    series: dict[int, list[tuple[float, tuple]]] = defaultdict(list)
    for lat, by_rf in grid(means, nodes, loss).items():
        for rf in by_rf:
            series[rf].append((lat, (nodes, loss, rf, lat)))
    return {rf: pts for rf, pts in sorted(series.items()) if len(pts) >= 2}


def slope_draws(means: Means, se: Errors, nodes: int, loss: float) -> dict[int, np.ndarray]:
    """RF -> the median-line slope of its means (>= MIN_LATENCY_MS) on every draw (row 0:
    on the means themselves)."""
    out = {}
    for rf, pts in series(means, nodes, loss).items():
        xs = [p[0] for p in pts]
        d = draws(means, se, [p[1] for p in pts])
        out[rf] = np.array([median_line_slope(xs, row) for row in d])
    return out


def std_below(sd: float, k: int, noise: float, limit: float, points: int) -> bool | None:
    """Is the true std of ``k`` means below ``limit``, given their observed std ``sd``
    and mean squared standard error ``noise``? None where the data cannot tell. "No"
    needs 2.5 % shared over the claim's ``points`` (Bonferroni: one point of many
    beyond its own 2.5 % is what noise gives)."""
    from scipy.stats import ncx2  # on demand: commands start without scipy

    if not math.isfinite(noise):
        return None
    if noise <= 0:  # exact means (the model's)
        return sd < limit
    dof = k - 1
    observed = dof * sd**2 / noise
    at_limit = dof * limit**2 / noise  # the noncentrality a true std of ``limit`` gives
    if observed > ncx2.ppf(1 - 0.025 / points, dof, at_limit):
        return False
    if observed < ncx2.ppf(0.025, dof, at_limit):
        return True
    return None


def bonferroni_z(tests: int) -> float:
    """The normal quantile a "no" needs at one of ``tests`` points for 2.5 % over them
    all: one point of many beyond its own 2.5 % is what noise gives."""
    from scipy.stats import norm  # on demand: commands start without scipy

    return float(norm.ppf(1 - 0.025 / max(1, tests)))


def pair_within(diff: float, margin: float, err: float, beyond: float) -> bool | None:
    """Are two means within ``margin`` of each other, their difference ``diff`` having
    the standard error ``err``? False where it is past the margin by ``beyond`` errors,
    True where inside it by APART_SE, None otherwise."""
    gap = abs(diff) - margin
    return False if gap > beyond * err else True if gap < -APART_SE * err else None
