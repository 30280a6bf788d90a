"""95 % intervals for the report's numbers, for queries that are not always independent.

A metric cell is the mean of per-query scores in [0, 1]. The case reports of one publication (a family, several
cases of one disease) move together, so for them the unit is the publication, and for synthetic queries the query
itself (``units``). A mean's interval is a score (Wilson) interval on the effective sample size of that cluster
design: n_eff = p(1 - p) / v, with v the cluster (ratio-estimator) variance of the mean, at most n; z from Student's t
with one degree of freedom less than there are units (Korn and Graubard). Where every score is the same (0 % or
100 %: no variance to read a design effect from) the clusters count as whole: n_eff = n / (sum of squared cluster
sizes / n). So an interval never collapses to a point at 0 % or 100 %: 0 of 20 independent queries gives
[0, 18.0].
``tests/test_intervals.py`` simulates its coverage on clustered draws like the case reports'.

A paired comparison (the difference of two methods on the same queries) is a seeded cluster bootstrap: it resamples
the same units for both, its replicates spread by Hesterberg's expansion for few units (``_expansion``); its p is the
two-sided bootstrap p of the difference (twice the smaller share of those replicates on either side of 0, at most 1).
Its bounds are order statistics of the same replicates, as many left beyond each as a share below 2.5 % allows, so
the interval excludes 0 exactly when p < 0.05: a p and its interval never disagree (many replicates tied at 0, as
when one query of 60 differs, give a p far above 0.05 beside a bound just past 0; both say "not established").
Where every unit's difference is the same (both methods at 0 % on every query, say)
the replicates cannot vary and the percentile interval is a point; there the interval is Newcombe's square-and-add
(MOVER) one built from the two methods' own score intervals above, with their correlation across queries (0 where
either has no variance): both at 0 of 60 independent queries gives about [-6, 6] points, not [0, 0]; its p is then
one minus the highest level at which that interval excludes 0. A comparison also counts the queries on which the first
method scored higher and lower (``better``, ``worse``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ark.data.queries import publication_of

REPLICATES = 2000
SEED = 0
LEVEL = 0.95
METHOD = ("95 % score (Wilson) intervals on the effective sample size of the clusters, the publication for case "
          "reports (its cases move together) and the query for synthetic queries; differences: a paired cluster "
          f"bootstrap of {REPLICATES:,} seeded replicates, expanded for few units (where every difference is the same, Newcombe's square-and-add "
          "interval from the two score intervals)")


@dataclass(frozen=True)
class Estimate:
    """A mean with its interval (all x100 where the table shows metrics x100); ``p``: a comparison's p value."""

    value: float
    lo: float
    hi: float
    p: float | None = None
    better: int | None = None  # a comparison: the queries on which the first method scored higher
    worse: int | None = None   # and lower

    def scaled(self, factor: float, digits: int = 2) -> "Estimate":
        return Estimate(round(self.value * factor, digits), round(self.lo * factor, digits),
                        round(self.hi * factor, digits), None if self.p is None else round(self.p, 4),
                        self.better, self.worse)


def _clusters(values, units) -> tuple[np.ndarray, np.ndarray]:
    """(the sum of ``values`` per unit, the number of values per unit)."""
    values = np.asarray(values, dtype=float)
    if values.ndim != 1 or len(values) != len(units) or not len(values):
        raise ValueError(f"need one unit per value and at least one value, got {len(values)} values and "
                         f"{len(units)} units")
    _, index = np.unique(np.asarray([str(u) for u in units]), return_inverse=True)
    return np.bincount(index, weights=values), np.bincount(index).astype(float)


def _moments(values, units) -> tuple[float, float, float, int]:
    """(mean, its cluster variance, the effective sample size where no score varies, the number of units)."""
    sums, counts = _clusters(values, units)
    n, k = counts.sum(), len(sums)
    mean = float(sums.sum() / n)
    variance = float(k / (k - 1) * np.sum((sums - mean * counts) ** 2) / n ** 2) if k > 1 else 0.0
    return mean, variance, float(n * n / np.sum(counts ** 2)), k


def _score_interval(mean: float, variance: float, whole: float, n: float, k: int, level: float) -> tuple[float, float]:
    """Wilson's interval for ``mean`` on the effective sample size ``p(1-p)/variance`` (at most ``n``; ``whole`` where
    the variance is 0), z from Student's t with ``k - 1`` degrees of freedom."""
    from scipy.stats import t

    spread = mean * (1 - mean)
    n_eff = min(n, spread / variance) if variance > 0 and spread > 0 else (n if variance > 0 else whole)
    z = float(t.ppf(1 - (1 - level) / 2, max(k - 1, 1)))
    centre = (mean + z * z / (2 * n_eff)) / (1 + z * z / n_eff)
    half = z / (1 + z * z / n_eff) * np.sqrt(max(spread, 0.0) / n_eff + z * z / (4 * n_eff ** 2))
    # Wilson's bounds at 0 % and 100 % are exactly 0 and 1 (rounding would leave the estimate outside)
    return (0.0 if mean <= 0 else max(0.0, float(centre - half))), (1.0 if mean >= 1 else min(1.0, float(centre + half)))


def mean_interval(values, units, level: float = LEVEL) -> Estimate:
    """The mean of ``values`` (one per query, each in [0, 1]) and its interval, its queries clustered by ``units``."""
    mean, variance, whole, k = _moments(values, units)
    return Estimate(mean, *_score_interval(mean, variance, whole, len(values), k, level))


def average_interval(samples: list[tuple], level: float = LEVEL) -> Estimate:
    """The average of several query sets' means (``samples``: (values, units) of each) and its interval: the sets
    are independent, so their variances add (each over the square of their number)."""
    moments = [_moments(values, units) for values, units in samples]
    m = len(moments)
    mean = float(np.mean([mo[0] for mo in moments]))
    variance = sum(mo[1] for mo in moments) / m ** 2
    whole = m * m / sum(1 / mo[2] for mo in moments)  # the n_eff that gives the sets' own at equal sizes
    n = float(sum(len(values) for values, _ in samples))
    return Estimate(mean, *_score_interval(mean, variance, whole, n, sum(mo[3] for mo in moments), level))


def _replicates(values, units, seed: int, replicates: int) -> tuple[float, np.ndarray]:
    """(the mean of ``values``, the means of ``replicates`` cluster-bootstrap samples of ``units``)."""
    sums, counts = _clusters(values, units)
    draws = np.random.default_rng(seed).integers(0, len(sums), size=(replicates, len(sums)))
    return float(sums.sum() / counts.sum()), sums[draws].sum(axis=1) / counts[draws].sum(axis=1)


def paired(a, b, units, seed: int = SEED, replicates: int = REPLICATES, level: float = LEVEL) -> Estimate:
    """The mean difference ``a - b`` of two methods scored on the same queries (``a[i]``, ``b[i]``: query i), its
    interval and two-sided p, resampling ``units`` (the same draws for both: the difference is resampled)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"a paired comparison needs one score of each method per query, got {a.shape} and {b.shape}")
    mean, means = _replicates(a - b, units, seed, replicates)
    means = np.sort(mean + (means - mean) * _expansion(len(set(map(str, units))), level))
    p = min(1.0, 2 * min(float(np.mean(means <= 0)), float(np.mean(means >= 0))))
    beyond = int(np.ceil((1 - level) / 2 * len(means) - 1e-9)) - 1  # replicates left out on each side: fewer than
    lo, hi = means[beyond], means[len(means) - 1 - beyond]          # (1 - level) / 2 of them, so lo > 0 iff p < 1 - level
    if hi - lo <= 1e-12:  # no replicate differs: the bootstrap has nothing to say about the spread
        lo, hi = _square_and_add(a, b, units, level)
        p = _square_and_add_p(a, b, units)
    return Estimate(mean, float(lo), float(hi), p, int(np.sum(a > b)), int(np.sum(a < b)))


def _expansion(k: int, level: float) -> float:
    """How much wider than the plain percentile bootstrap a paired interval on ``k`` units is drawn: by
    sqrt(k / (k - 1)) and Student's t over the normal quantile (Hesterberg's expanded percentile interval), as few
    publications (20 case reports come from about 7) make the plain one too narrow; near 1 for many units."""
    from scipy.stats import norm, t

    if k < 2:
        return 1.0
    q = 1 - (1 - level) / 2
    return float(np.sqrt(k / (k - 1)) * t.ppf(q, k - 1) / norm.ppf(q))


def _square_and_add(a: np.ndarray, b: np.ndarray, units, level: float) -> tuple[float, float]:
    """Newcombe's interval for ``mean(a) - mean(b)`` on paired queries from each mean's own score interval."""
    ea, eb = mean_interval(a, units, level), mean_interval(b, units, level)
    phi = float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else 0.0
    down_a, up_a, down_b, up_b = ea.value - ea.lo, ea.hi - ea.value, eb.value - eb.lo, eb.hi - eb.value
    diff = ea.value - eb.value
    lo = diff - np.sqrt(max(down_a ** 2 - 2 * phi * down_a * up_b + up_b ** 2, 0.0))
    hi = diff + np.sqrt(max(up_a ** 2 - 2 * phi * up_a * down_b + down_b ** 2, 0.0))
    return max(-1.0, float(lo)), min(1.0, float(hi))


def _square_and_add_p(a: np.ndarray, b: np.ndarray, units) -> float:
    """One minus the highest level at which Newcombe's interval excludes 0 (it widens with the level): 1 where the
    means are equal."""
    def excludes(level: float) -> bool:
        lo, hi = _square_and_add(a, b, units, level)
        return lo > 0 or hi < 0

    if a.mean() == b.mean() or not excludes(1e-6):
        return 1.0
    inside, outside = 1e-6, 1 - 1e-9  # excludes 0 at the first, not (or barely) at the second
    if excludes(outside):
        return 0.0
    for _ in range(40):
        middle = (inside + outside) / 2
        inside, outside = (middle, outside) if excludes(middle) else (inside, middle)
    return 1 - outside


def units_of(queries: list[dict]) -> dict[str, str]:
    """{query id: its resampling unit}: a case report's publication, else the query itself
    (``ark.data.queries.publication_of``)."""
    return {q["id"]: publication_of(q) for q in queries}
