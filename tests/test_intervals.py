"""The report's intervals: a seeded cluster bootstrap (ark.report.intervals)."""
import numpy as np
import pytest

from ark.report.intervals import bootstrap, paired, units_of


def test_the_interval_holds_the_mean_and_is_seeded():
    rng = np.random.default_rng(1)
    values = (rng.random(400) < 0.3).astype(float)
    units = list(range(400))
    e = bootstrap(values, units)
    assert e.lo < e.value < e.hi and e.value == pytest.approx(values.mean())
    assert bootstrap(values, units) == e and bootstrap(values, units, seed=1) != e
    # about the normal approximation's width for independent queries
    se = np.sqrt(values.mean() * (1 - values.mean()) / len(values))
    assert e.hi - e.lo == pytest.approx(2 * 1.96 * se, rel=0.15)


def test_clustered_queries_widen_the_interval():
    """Five identical cases per publication carry the information of one: resampling publications says so."""
    rng = np.random.default_rng(2)
    per_publication = (rng.random(80) < 0.4).astype(float)
    values = np.repeat(per_publication, 5)
    by_query = bootstrap(values, list(range(len(values))))
    by_publication = bootstrap(values, list(np.repeat(np.arange(80), 5)))
    assert by_publication.value == by_query.value
    assert (by_publication.hi - by_publication.lo) > 1.8 * (by_query.hi - by_query.lo)


def test_a_paired_difference_sees_a_real_gap_and_not_a_null_one():
    rng = np.random.default_rng(3)
    base = (rng.random(300) < 0.3).astype(float)
    better = np.maximum(base, (rng.random(300) < 0.2).astype(float))  # never worse, often better
    units = list(range(300))
    gap = paired(better, base, units)
    assert gap.lo > 0 and gap.p < 0.01 and gap.value == pytest.approx((better - base).mean())
    same = paired(base, base, units)
    assert same.value == 0 and same.p == 1.0
    # two methods of the same quality: p < 0.05 about 5 % of the time, not more
    rejected = [paired((rng.random(200) < 0.3).astype(float), (rng.random(200) < 0.3).astype(float),
                       list(range(200)), replicates=500).p < 0.05 for _ in range(60)]
    assert sum(rejected) <= 9


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        bootstrap([], [])
    with pytest.raises(ValueError):
        bootstrap([1.0, 0.0], ["a"])


def test_case_reports_resample_their_publication_and_synthetic_queries_themselves():
    rows = [{"id": "c1", "meta": {"pmid": "PMID:1"}}, {"id": "c2", "meta": {"pmid": "PMID:1"}}, {"id": "s1"}]
    assert units_of(rows) == {"c1": "PMID:1", "c2": "PMID:1", "s1": "s1"}
