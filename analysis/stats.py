"""Statistics over the results schema: pure functions of arrays and cell records.

Cells are dicts with at least nodes, rf, latency_ms, loss_pct and ``rtt_ms`` (an array of
the cell's request RTTs in ms; errors included: an error's time is how long it made the
client wait). See ``analysis.results`` for loading them from a store.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from workloads.readback import lost

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 999
TAIL_WRITES = 1000  # a p99 of fewer writes rests on fewer than 10 of them: indicative only


def tail_note(writes: int, ci: Sequence[float] | None = None) -> str:
    """How a p99 of ``writes`` writes may be read: "p99 of N writes: indicative" (with its
    95 % interval ``ci``, ms) under TAIL_WRITES, else nothing (a model's miss of it is
    mostly the sample's)."""
    if writes >= TAIL_WRITES:
        return ""
    return f"p99 of {writes} writes: indicative" + (
        f", 95 % CI {ci[0]:.0f}-{ci[1]:.0f} ms" if ci else ""
    )


class _LazyStats:
    """scipy.stats, imported at first use: importing it takes ~0.9 s, which every command
    that imports this module (the sweep's and the plots' among them) would pay at start,
    `--help` and refused input included."""

    def __getattr__(self, name: str) -> Any:
        from scipy import stats as module

        return getattr(module, name)


stats = _LazyStats()


def t95(dof: int) -> float:
    """The two-sided 95 % Student t quantile (scipy.stats.t)."""
    if dof < 1:
        return math.nan
    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, dof))


def bootstrap_mean_ci(
    a: npt.ArrayLike, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> tuple[float, float]:
    """95 % bootstrap CI (percentile) of the mean (scipy.stats.bootstrap): the t interval
    assumes a normal mean, which a cell whose tail is a few retransmissions of 200+ ms is
    far from at a few hundred writes."""
    x = np.asarray(a, dtype=float)
    if x.size < 2 or np.all(x == x[0]):
        v = float(x.mean()) if x.size else math.nan
        return v, v
    res = stats.bootstrap(
        (x,),
        np.mean,
        n_resamples=resamples,
        confidence_level=CONFIDENCE,
        method="percentile",
        vectorized=True,
        rng=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def bootstrap_quantile_ci(
    a: npt.ArrayLike, q: float, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> tuple[float, float]:
    """95 % percentile bootstrap interval of the ``q`` quantile (the smallest value with
    F >= q, as ``model.rtt`` defines it), seeded."""
    x = np.asarray(a, dtype=float)
    if x.size < 2:
        v = float(x[0]) if x.size else math.nan
        return v, v
    resampled = x[np.random.default_rng(seed).integers(0, x.size, size=(resamples, x.size))]
    qs = np.quantile(resampled, q, axis=1, method="inverted_cdf")
    tail = 100 * (1 - CONFIDENCE) / 2
    return float(np.percentile(qs, tail)), float(np.percentile(qs, 100 - tail))


def cell_stats(rtt_ms: npt.ArrayLike, errors: int = 0) -> dict[str, float]:
    """mean, median, p95, p99, std (sample), 95 % CI of the mean, n, errors."""
    a = np.asarray(rtt_ms, dtype=float)
    n = int(a.size)
    if n == 0:
        return {
            "n": 0,
            "errors": errors,
            "mean": math.nan,
            "median": math.nan,
            "p95": math.nan,
            "p99": math.nan,
            "std": math.nan,
            "ci_low": math.nan,
            "ci_high": math.nan,
        }
    mean = float(a.mean())
    std = float(a.std(ddof=1)) if n > 1 else 0.0
    half = t95(n - 1) * std / math.sqrt(n) if n > 1 else math.nan
    return {
        "n": n,
        "errors": errors,
        "mean": mean,
        "median": float(np.median(a)),
        "p95": float(np.percentile(a, 95)),
        "p99": float(np.percentile(a, 99)),
        "std": std,
        "ci_low": mean - half,
        "ci_high": mean + half,
    }


def ls_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of y on x (NaN with fewer than two distinct x)."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xa.size < 2 or np.unique(xa).size < 2:
        return math.nan
    xm = xa.mean()
    return float(((xa - xm) * (ya - ya.mean())).sum() / ((xa - xm) ** 2).sum())


def median_line_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Slope of the median-median line (Tukey's resistant line), our reading of the
    paper's "median line" (section 5.1): sort by x, split into thirds (outer thirds get
    the extra points when n mod 3 = 2, the middle one when n mod 3 = 1), and join the
    (median x, median y) points of the outer thirds."""
    pts = sorted(zip((float(v) for v in x), (float(v) for v in y), strict=True))
    n = len(pts)
    if n < 3:
        return ls_slope(x, y)
    k = n // 3 + (1 if n % 3 == 2 else 0)
    left, right = pts[:k], pts[n - k :]
    xl, yl = np.median([p[0] for p in left]), np.median([p[1] for p in left])
    xr, yr = np.median([p[0] for p in right]), np.median([p[1] for p in right])
    if xr == xl:
        return math.nan
    return float((yr - yl) / (xr - xl))


def per_cell(cells: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each cell's identity plus its statistics (repetitions kept apart), and its
    acknowledged writes and those lost (None: not read back)."""
    out = []
    for c in cells:
        row = {k: c[k] for k in ("nodes", "rf", "latency_ms", "loss_pct")}
        row["run_id"] = c.get("run_id")
        row["repetition"] = c.get("repetition", 1)
        row.update(cell_stats(c["rtt_ms"], int(c.get("errors", 0))))
        row["acknowledged"], row["lost"] = acknowledged_lost([c])
        out.append(row)
    return out


def pooled(cells: Iterable[Mapping[str, Any]]) -> dict[tuple, np.ndarray]:
    """(nodes, loss, rf, latency) -> every request RTT of that point (repetitions pooled)."""
    acc: dict[tuple, list[np.ndarray]] = defaultdict(list)
    for c in cells:
        acc[(c["nodes"], c["loss_pct"], c["rf"], c["latency_ms"])].append(
            np.asarray(c["rtt_ms"], dtype=float)
        )
    return {k: np.concatenate(v) for k, v in acc.items()}


def point_stats(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One grid point's statistics over its repetitions' cells: ``cell_stats`` of every
    write pooled, ``repetitions``, and the 95 % CI of its mean, ``ci_over``:
    "repetitions" (the t interval of the repetitions' means, what a rerun would vary
    by) where two or more repetitions have writes, else "writes" (the within-run CI of the
    one run's writes, which says nothing of how much a second run would differ);
    ``acknowledged`` and ``acknowledged_lost`` (``acknowledged_lost``)."""
    s: dict[str, Any] = cell_stats(
        np.concatenate([np.asarray(c["rtt_ms"], dtype=float) for c in cells]),
        sum(int(c.get("errors", 0)) for c in cells),
    )
    means = [float(np.mean(c["rtt_ms"])) for c in cells if len(c["rtt_ms"])]
    s["repetitions"] = len(cells)
    s["acknowledged"], s["acknowledged_lost"] = acknowledged_lost(cells)
    s["rep_sd"] = float(np.std(means, ddof=1)) if len(means) > 1 else math.nan
    s["ci_over"] = "writes"
    s["se"] = s["std"] / math.sqrt(s["n"]) if s["n"] > 1 else math.nan  # of the mean
    if len(means) > 1:
        centre, half = (
            float(np.mean(means)),
            t95(len(means) - 1) * s["rep_sd"] / math.sqrt(len(means)),
        )
        s.update(ci_low=centre - half, ci_high=centre + half, ci_over="repetitions")
        s["se"] = s["rep_sd"] / math.sqrt(len(means))
    return s


def acknowledged_lost(cells: Sequence[Mapping[str, Any]]) -> tuple[int | None, int | None]:
    """The cells' acknowledged writes and those read back from no replica (their
    ``readback``), pooled; (None, None) unless every cell was read back (cells of a
    store from before read-backs, or whose read-back failed, are not counted as zero)."""
    found = [c.get("readback") for c in cells]
    counted = [lost(f) for f in found]
    if not found or None in counted:
        return None, None
    return sum(int(f["acknowledged"]) for f in found if f), sum(n for n in counted if n)


def grid_point(c: Mapping[str, Any]) -> tuple:
    """A cell's (or a model row's) point of the paper's grid: (nodes, loss, rf, latency)."""
    return (c["nodes"], c["loss_pct"], c["rf"], c["latency_ms"])


def points(
    cells: Iterable[Mapping[str, Any]], key: Callable[[Mapping[str, Any]], tuple] = grid_point
) -> dict[tuple, dict[str, Any]]:
    """``key`` (default ``grid_point``) -> ``point_stats`` of the cells at that point."""
    acc: dict[tuple, list[Mapping[str, Any]]] = defaultdict(list)
    for c in cells:
        acc[key(c)].append(c)
    return {k: point_stats(v) for k, v in acc.items()}


def predicted_means(
    model: Mapping[str, Any] | None, key: Callable[[Mapping[str, Any]], tuple] = grid_point
) -> dict[tuple, float]:
    """``key`` (default (nodes, loss, rf, latency)) -> the model's mean RTT (cells of a
    point averaged)."""
    acc: dict[tuple, list[float]] = defaultdict(list)
    for r in (model or {}).get("cells", []):
        acc[key(r)].append(r["predicted_mean_ms"])
    return {k: float(np.mean(v)) for k, v in acc.items()}


def ci_label(drawn: Sequence[Mapping[str, Any]]) -> str:
    """What a figure's bands are, from the ``point_stats`` drawn: "95 % CI over 3
    repetitions", or "within-run 95 % CI" where points have one repetition."""
    reps = [s["repetitions"] for s in drawn if s["ci_over"] == "repetitions"]
    if not reps:
        return "within-run 95 % CI of the writes (1 repetition)"
    k = min(reps)
    over = f"95 % CI over {k}{'+' if max(reps) > k else ''} repetitions"
    return over if len(reps) == len(drawn) else over + "; within-run where one"


def mean_rtt(cells: Iterable[Mapping[str, Any]]) -> dict[tuple, float]:
    """(nodes, loss, rf, latency) -> mean RTT over every request of that point."""
    return {k: float(v.mean()) for k, v in pooled(cells).items()}


def slopes(cells: Iterable[Mapping[str, Any]]) -> dict[tuple[int, float, int], dict[str, float]]:
    """(nodes, loss, rf) -> least-squares and median-line slope of mean RTT vs latency
    (ms of RTT per ms of one-way latency)."""
    means = mean_rtt(cells)
    series: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for (n, loss, rf, lat), m in means.items():
        series[(n, loss, rf)].append((lat, m))
    out = {}
    for key, pts in series.items():
        pts.sort()
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        out[key] = {
            "ls": ls_slope(xs, ys),
            "se": ls_slope_se(xs, ys),
            "median_line": median_line_slope(xs, ys),
            "points": len(pts),
        }
    return out


def std_across_nodes(
    cells: Iterable[Mapping[str, Any]], loss: float | None = None
) -> dict[tuple[int, float], dict[str, float]]:
    """(rf, latency) -> std (sample) of the mean RTT across node counts, pooled over loss
    unless ``loss`` is given (section 5.4: < 1.5 ms for RF 3, the paper claims)."""
    means = mean_rtt(cells)
    groups: dict[tuple[int, float], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (n, l, rf, lat), m in means.items():
        if loss is None or l == loss:
            groups[(rf, lat)][n].append(m)
    out = {}
    for key, by_nodes in groups.items():
        per_node = [float(np.mean(v)) for v in by_nodes.values()]
        out[key] = {
            "std": float(np.std(per_node, ddof=1)) if len(per_node) > 1 else math.nan,
            "nodes": len(per_node),
        }
    return out


def high_rf_average(
    cells: Iterable[Mapping[str, Any]], rfs: Sequence[int] = (3, 4, 5)
) -> dict[tuple[int, float, float], float]:
    """(nodes, loss, latency) -> average over RF in ``rfs`` (those present) of the mean
    RTT: the paper's Figure 4 view."""
    means = mean_rtt(cells)
    acc: dict[tuple, list[float]] = defaultdict(list)
    for (n, loss, rf, lat), m in means.items():
        if rf in rfs:
            acc[(n, loss, lat)].append(m)
    return {k: float(np.mean(v)) for k, v in acc.items()}


def rank(values: Sequence[float]) -> list[float]:
    """Ranks 1..n, ties given their average rank (scipy.stats.rankdata)."""
    return [float(r) for r in stats.rankdata(values, method="average")]


def ls_slope_se(x: Sequence[float], y: Sequence[float]) -> float:
    """The standard error of the least-squares slope (scipy.stats.linregress), from the
    scatter of the points about the line; NaN with fewer than three distinct x."""
    if len(set(x)) < 3:
        return math.nan
    return float(stats.linregress(x, y).stderr)


EXACT_UP_TO = 7  # points: 7! = 5040 pairings are cheap to enumerate
SIGNIFICANT_P = 0.05  # where a verdict may call a rank correlation more than chance
APART_SE = 2.0  # two estimates are told apart beyond this many standard errors of their difference


def repetitions_to_tell(diff: float, se: float, repetitions: int = 1) -> int | None:
    """How many repetitions of each cell would make a difference ``diff`` (standard error
    ``se`` at ``repetitions``) APART_SE standard errors wide, if it is real and its error
    shrinks as 1/sqrt(repetitions); None where no number would (a nil difference, an
    unknown error)."""
    if not (diff > 0 and math.isfinite(se)):
        return None
    return math.ceil(repetitions * (APART_SE * se / diff) ** 2 - 1e-9)


def smallest_spearman_p(n: int) -> float:
    """The smallest two-sided p-value an exact rank correlation of ``n`` points can have
    (the perfect order and its reverse, of n! pairings)."""
    return 2 / math.factorial(n)


def spearman_test(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Spearman's rho and its two-sided p-value. The p-value is exact (a permutation test
    over every pairing, scipy.stats.permutation_test) up to EXACT_UP_TO points, where
    spearmanr's t approximation does not hold; NaN, NaN where rho is undefined."""
    rho = spearman(x, y)
    if math.isnan(rho):
        return rho, math.nan
    test = stats.permutation_test(
        (np.asarray(x, dtype=float),),
        lambda xs: stats.spearmanr(xs, y).statistic,
        permutation_type="pairings",
        n_resamples=math.factorial(EXACT_UP_TO) if len(x) <= EXACT_UP_TO else 9999,
        alternative="two-sided",
        rng=np.random.default_rng(0),
    )
    return rho, float(test.pvalue)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation (scipy.stats.spearmanr); NaN if undefined."""
    if len(x) != len(y) or len(x) < 2:
        return math.nan
    if np.ptp(np.asarray(x, dtype=float)) == 0 or np.ptp(np.asarray(y, dtype=float)) == 0:
        return math.nan
    return float(stats.spearmanr(x, y).statistic)
