"""The report's intervals (ark.report.intervals): a mean's cluster-adjusted score interval, which never collapses to a
point at 0 % or 100 % and covers the true rate about 95 % of the time on clustered draws like the case reports'; a
paired difference's seeded cluster bootstrap."""
import numpy as np
import pytest

from ark.report.intervals import average_interval, mean_interval, paired, units_of


def test_the_interval_holds_the_mean_and_is_about_the_normal_width_for_independent_queries():
    rng = np.random.default_rng(1)
    values = (rng.random(400) < 0.3).astype(float)
    units = list(range(400))
    e = mean_interval(values, units)
    assert e.lo < e.value < e.hi and e.value == pytest.approx(values.mean())
    se = np.sqrt(values.mean() * (1 - values.mean()) / len(values))
    assert e.hi - e.lo == pytest.approx(2 * 1.96 * se, rel=0.05)


def test_no_interval_is_a_point_at_0_or_100_percent():
    """0 of 20 independent queries: the rate may still be up to ~18 % (Wilson with t); clustered, wider still."""
    none = mean_interval([0.0] * 20, list(range(20)))
    assert (none.value, none.lo) == (0.0, 0.0) and 0.15 < none.hi < 0.2
    every = mean_interval([1.0] * 20, list(range(20)))
    assert (every.value, every.hi) == (1.0, 1.0) and 0.8 < every.lo < 0.85
    in_five_publications = mean_interval([0.0] * 20, [i // 4 for i in range(20)])
    assert in_five_publications.hi > 2 * none.hi
    assert mean_interval([0.0] * 371, list(range(371))).hi > 0
    assert average_interval([([0.0] * 20, list(range(20))), ([0.0] * 40, list(range(40)))]).hi > 0


def test_clustered_queries_widen_the_interval():
    """Five identical cases per publication carry the information of one: counting publications says so."""
    rng = np.random.default_rng(2)
    per_publication = (rng.random(80) < 0.4).astype(float)
    values = np.repeat(per_publication, 5)
    by_query = mean_interval(values, list(range(len(values))))
    by_publication = mean_interval(values, list(np.repeat(np.arange(80), 5)))
    assert by_publication.value == by_query.value
    assert (by_publication.hi - by_publication.lo) > 1.8 * (by_query.hi - by_query.lo)


def case_reports(rng, rate: float, n: int, icc: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    """``n`` cases in publications of 1 to 16 cases (about 2.9 a publication, as phenopacket-store's test split:
    371 cases, 129 publications), each publication with its own rate around ``rate`` (intra-publication
    correlation ``icc``), each case a hit with its publication's rate."""
    sizes = []
    while sum(sizes) < n:
        sizes.append(1 + min(int(rng.poisson(1.9)), 15))
    sizes[-1] -= sum(sizes) - n
    if rate in (0.0, 1.0):
        rates = np.full(len(sizes), rate)
    else:
        rates = rng.beta(rate * (1 - icc) / icc, (1 - rate) * (1 - icc) / icc, len(sizes))
    units = np.repeat(np.arange(len(sizes)), sizes)
    return (rng.random(n) < rates[units]).astype(float), units


# the simulations are a few CPU-seconds each: make test-e2e
@pytest.mark.e2e
@pytest.mark.parametrize("rate", [0.0, 0.05, 0.5])
def test_the_interval_covers_the_true_rate_about_95_percent_of_the_time(rate):
    """1,000 simulated query sets per n, clustered like the case reports and independent: the share of intervals
    that hold the true rate is at least 0.92 in every setting and about 0.95 over all (a 1,000-draw share has a
    standard error of ~0.7 points)."""
    rng = np.random.default_rng(int(rate * 100))
    shares = []
    for n in (20, 40, 371):
        for clustered in (True, False):
            held = 0
            for _ in range(1000):
                values, units = case_reports(rng, rate, n) if clustered else \
                    ((rng.random(n) < rate).astype(float), np.arange(n))
                e = mean_interval(values, units)
                held += e.lo <= rate <= e.hi
            shares.append(held / 1000)
    assert min(shares) >= 0.92, shares
    assert np.mean(shares) >= 0.94, shares


def test_a_paired_difference_sees_a_real_gap_and_not_a_null_one():
    rng = np.random.default_rng(3)
    base = (rng.random(300) < 0.3).astype(float)
    better = np.maximum(base, (rng.random(300) < 0.2).astype(float))  # never worse, often better
    units = list(range(300))
    gap = paired(better, base, units)
    assert gap.lo > 0 and gap.p < 0.01 and gap.value == pytest.approx((better - base).mean())
    assert paired(better, base, units) == gap and paired(better, base, units, seed=1) != gap  # seeded
    same = paired(base, base, units)
    assert same.value == 0 and same.p == 1.0
    # two methods of the same quality: p < 0.05 about 5 % of the time, not more
    rejected = [paired((rng.random(200) < 0.3).astype(float), (rng.random(200) < 0.3).astype(float),
                       list(range(200)), replicates=500).p < 0.05 for _ in range(60)]
    assert sum(rejected) <= 9


def test_a_paired_difference_is_never_a_point_where_every_query_ties():
    both_zero = paired([0.0] * 60, [0.0] * 60, list(range(60)))
    assert both_zero.value == 0 and both_zero.lo < -0.03 and both_zero.hi > 0.03 and both_zero.p == 1.0
    always_better = paired([1.0] * 20, [0.0] * 20, list(range(20)))
    assert always_better.value == 1 and 0.7 < always_better.lo < 1 and always_better.hi == 1


@pytest.mark.e2e  # a simulation, as above
@pytest.mark.parametrize("rates", [(0.0, 0.0), (0.05, 0.0), (0.05, 0.05), (0.5, 0.3)])
def test_a_paired_interval_covers_the_true_difference_about_95_percent_of_the_time(rates):
    """400 simulated pairs of runs per n: the first method's hits clustered like the case reports, the second's
    independent. Every setting holds the true difference at least 0.9 of the time (a 400-draw share has a standard
    error of ~1.1 points) and about 0.95 over all; few publications (n = 20) included."""
    a_rate, b_rate = rates
    rng = np.random.default_rng(int(a_rate * 100 + b_rate * 10))
    shares = []
    for n in (20, 40, 60):
        held = 0
        for _ in range(400):
            a, units = case_reports(rng, a_rate, n)
            e = paired(a, (rng.random(n) < b_rate).astype(float), units, replicates=500)
            held += e.lo <= a_rate - b_rate <= e.hi
        shares.append(held / 400)
    assert min(shares) >= 0.9, shares
    assert np.mean(shares) >= 0.94, shares


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        mean_interval([], [])
    with pytest.raises(ValueError):
        mean_interval([1.0, 0.0], ["a"])
    with pytest.raises(ValueError):
        paired([1.0], [0.0, 1.0], ["a", "b"])


def test_case_reports_resample_their_publication_and_synthetic_queries_themselves():
    rows = [{"id": "c1", "meta": {"pmid": "PMID:1"}}, {"id": "c2", "meta": {"pmid": "PMID:1"}}, {"id": "s1"}]
    assert units_of(rows) == {"c1": "PMID:1", "c2": "PMID:1", "s1": "s1"}


@pytest.mark.parametrize("seed", range(40))
def test_a_paired_p_and_its_interval_never_disagree(seed):
    """p < 0.05 exactly where the interval excludes 0, ties at 0 (one query of 60 differing) and the no-variance
    case (Newcombe's interval) included; the counts say on how many queries each method scored higher."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 80))
    a = (rng.random(n) < rng.random()).astype(float)
    b = a.copy() if seed % 4 == 0 else (rng.random(n) < rng.random()).astype(float)
    if seed % 4 == 0:
        b[: int(rng.integers(0, 3))] = 1 - b[0]  # a few queries differ, the rest tie
    if seed % 8 == 1:
        a, b = np.ones(n), np.zeros(n)  # every query differs the same way: Newcombe's interval
    units = [i // int(rng.integers(1, 4)) for i in range(n)]
    e = paired(a, b, units, replicates=int(rng.choice([40, 500, 2000])))
    assert (e.p < 0.05) == (e.lo > 0 or e.hi < 0), e
    assert (e.better, e.worse) == (int(np.sum(a > b)), int(np.sum(a < b)))


def test_one_query_of_sixty_differing_is_not_established_by_either():
    a, b = np.zeros(60), np.zeros(60)
    b[7] = 1.0
    e = paired(a, b, list(range(60)))
    assert e.lo < 0 <= e.hi and e.p > 0.05 and (e.better, e.worse) == (0, 1)
