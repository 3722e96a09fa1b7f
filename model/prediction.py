"""A write's predicted RTT distribution (``Prediction``): exact mixtures or Monte-Carlo
samples, with their mean, quantiles, CDF and partial means (pure)."""

from __future__ import annotations

import numpy as np


class Prediction:
    """A write's predicted RTT distribution: an exact mixture (components: probability,
    service samples, network value) or Monte-Carlo samples."""

    def __init__(
        self,
        *,
        weights: np.ndarray | None = None,
        shifts: np.ndarray | None = None,
        services: list[np.ndarray] | None = None,
        which: np.ndarray | None = None,
        samples: np.ndarray | None = None,
        no_loss_max: float = 0.0,
        method: str = "exact",
    ) -> None:
        self.method = method
        self.no_loss_max = no_loss_max
        self._samples = None if samples is None else np.sort(samples)
        if self._samples is None:
            assert weights is not None and shifts is not None
            assert services is not None and which is not None
            self._w, self._v, self._which = weights, shifts, which
            self._s = [np.sort(a) for a in services]
            self._cum = [np.concatenate([[0.0], np.cumsum(a)]) for a in self._s]

    @property
    def samples(self) -> np.ndarray:
        """The simulated RTTs (sorted); a ValueError for an exact prediction."""
        if self._samples is None:
            raise ValueError("an exact prediction has no samples")
        return self._samples

    def cdf(self, t: float) -> float:
        if self._samples is not None:
            return float(np.searchsorted(self._samples, t, side="right") / self._samples.size)
        total = 0.0
        for i, s in enumerate(self._s):
            m = self._which == i
            if m.any():
                idx = np.searchsorted(s, t - self._v[m], side="right")
                total += float(self._w[m] @ (idx / s.size))
        return total

    def partial_mean(self, t: float) -> float:
        """E[RTT; RTT <= t]: the part of the mean that the writes at or below t make up."""
        if self._samples is not None:
            k = np.searchsorted(self._samples, t, side="right")
            return float(self._samples[:k].sum() / self._samples.size)
        total = 0.0
        for i, s in enumerate(self._s):
            m = self._which == i
            if m.any():
                idx = np.searchsorted(s, t - self._v[m], side="right")
                part = self._cum[i][idx] / s.size + self._v[m] * idx / s.size
                total += float(self._w[m] @ part)
        return total

    @property
    def mean(self) -> float:
        if self._samples is not None:
            return float(self._samples.mean())
        return float(
            sum(
                self._w[self._which == i] @ (self._v[self._which == i] + s.mean())
                for i, s in enumerate(self._s)
            )
        )

    def quantile(self, q: float) -> float:
        if self._samples is not None:
            return float(np.quantile(self._samples, q, method="inverted_cdf"))
        lo = min(float(s[0]) for s in self._s) + float(self._v.min())
        hi = max(float(s[-1]) for s in self._s) + float(self._v.max())
        for _ in range(100):  # bisection to the exact value: the smallest t with F(t) >= q
            mid = (lo + hi) / 2
            if self.cdf(mid) >= q - 1e-12:
                hi = mid
            else:
                lo = mid
            if hi - lo < 1e-7:
                break
        return hi

    def summary(self) -> dict[str, float]:
        return {
            "mean": self.mean,
            "median": self.quantile(0.5),
            "p95": self.quantile(0.95),
            "p99": self.quantile(0.99),
        }
