"""95 % intervals for the report's numbers: a seeded cluster bootstrap over resampling units.

A metric cell is the mean of per-query scores. Queries are not always independent: the case reports of one
publication (a family, several cases of one disease) move together, so for them the unit resampled is the
publication, and for synthetic queries the query itself (``units``). A replicate draws as many units as there are,
with replacement, and takes the mean over every query of the drawn units. The interval is the percentile interval of
the replicates. A paired comparison resamples the same units for both methods on the same queries; its p is the
two-sided bootstrap p of the difference (twice the smaller share of replicates on either side of 0, at most 1).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

REPLICATES = 2000
SEED = 0
LEVEL = 0.95
METHOD = (f"95 % percentile intervals from {REPLICATES:,} seeded bootstrap replicates; the unit resampled is the "
          "publication for case reports (its cases move together) and the query for synthetic queries")


@dataclass(frozen=True)
class Estimate:
    """A mean with its interval (all x100 where the table shows metrics x100); ``p``: a comparison's p value."""

    value: float
    lo: float
    hi: float
    p: float | None = None

    def scaled(self, factor: float, digits: int = 2) -> "Estimate":
        return Estimate(round(self.value * factor, digits), round(self.lo * factor, digits),
                        round(self.hi * factor, digits), None if self.p is None else round(self.p, 4))


def _replicates(values, units, seed: int, replicates: int) -> tuple[float, np.ndarray]:
    """(the mean of ``values``, the means of ``replicates`` cluster-bootstrap samples of ``units``)."""
    values = np.asarray(values, dtype=float)
    if values.ndim != 1 or len(values) != len(units) or not len(values):
        raise ValueError(f"need one unit per value and at least one value, got {len(values)} values and "
                         f"{len(units)} units")
    _, index = np.unique(np.asarray([str(u) for u in units]), return_inverse=True)
    sums = np.bincount(index, weights=values)
    counts = np.bincount(index).astype(float)
    draws = np.random.default_rng(seed).integers(0, len(sums), size=(replicates, len(sums)))
    return float(values.mean()), sums[draws].sum(axis=1) / counts[draws].sum(axis=1)


def _interval(means: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1 - level) / 2
    lo, hi = np.quantile(means, [tail, 1 - tail])
    return float(lo), float(hi)


def bootstrap(values, units, seed: int = SEED, replicates: int = REPLICATES, level: float = LEVEL) -> Estimate:
    """The mean of ``values`` (one per query) and its interval, resampling ``units`` (one per query)."""
    mean, means = _replicates(values, units, seed, replicates)
    return Estimate(mean, *_interval(means, level))


def paired(a, b, units, seed: int = SEED, replicates: int = REPLICATES, level: float = LEVEL) -> Estimate:
    """The mean difference ``a - b`` of two methods scored on the same queries (``a[i]``, ``b[i]``: query i), its
    interval and two-sided p, resampling ``units`` (the same draws for both: the difference is resampled)."""
    mean, means = _replicates(np.asarray(a, dtype=float) - np.asarray(b, dtype=float), units, seed, replicates)
    p = min(1.0, 2 * min(float(np.mean(means <= 0)), float(np.mean(means >= 0))))
    return Estimate(mean, *_interval(means, level), p)


def bootstrap_average(samples: list[tuple], seed: int = SEED, replicates: int = REPLICATES,
                      level: float = LEVEL) -> Estimate:
    """The average of several query sets' means (``samples``: (values, units) of each) and its interval: each set
    resampled on its own, the replicates averaged."""
    results = [_replicates(values, units, seed + i, replicates) for i, (values, units) in enumerate(samples)]
    mean = float(np.mean([m for m, _ in results]))
    return Estimate(mean, *_interval(np.mean([r for _, r in results], axis=0), level))


def units_of(queries: list[dict]) -> dict[str, str]:
    """{query id: its resampling unit}: a case report's publication (``meta.pmid``), else the query itself."""
    return {q["id"]: str((q.get("meta") or {}).get("pmid") or q["id"]) for q in queries}
