"""Censored times: Kaplan-Meier, its quantiles (missing with a lower bound where censored), order-statistic and
Kolmogorov-Smirnov intervals, and their coverage on laws with known quantiles."""

import json
import math

import pytest
import torch
from scipy import stats

from mlm_dynamics.diagnostics.meeting import MeetingTimes
from mlm_dynamics.diagnostics.survival import (
    estimate_quantile,
    kaplan_meier,
    km_median,
    ks_band,
    order_statistic_ranks,
    quantile_bounds,
    restricted_mean,
    restricted_mean_interval,
    summarise_survival,
)
from mlm_dynamics.report.writers import finite, jsonable

REPLICATES = 400


def test_kaplan_meier_matches_a_hand_computed_example():
    """Times 2, 3+, 3, 5, 7+ (+: censored). At t=2: 5 at risk, 1 event: S = 4/5. At t=3: 4 at risk (the censored 3
    counts as at risk), 1 event: S = 4/5 * 3/4 = 3/5. At t=5: 2 at risk, 1 event: S = 3/10."""
    times = torch.tensor([2, 3, 3, 5, 7])
    censored = torch.tensor([False, True, False, False, True])
    grid, survival = kaplan_meier(times, censored)
    assert grid.tolist() == [2.0, 3.0, 5.0]
    torch.testing.assert_close(survival, torch.tensor([0.8, 0.6, 0.3], dtype=torch.float64))
    assert km_median(times, censored) == (5.0, False)
    # area: 1 on [0, 2), 0.8 on [2, 3), 0.6 on [3, 5), 0.3 on [5, 7)
    assert restricted_mean(times, censored, 7.0) == pytest.approx(2 + 0.8 + 1.2 + 0.6)


def test_without_censoring_the_quantile_is_an_order_statistic():
    """S(t) <= 1 - p first at T_(ceil(m p)): the inverse of the empirical distribution."""
    times = torch.tensor([7, 1, 4, 9, 3, 5])
    flags = torch.zeros(6, dtype=torch.bool)
    for level, rank in ((0.5, 3), (0.9, 6), (0.25, 2), (0.6, 4)):
        assert estimate_quantile(times, flags, level).value == sorted(times.tolist())[rank - 1]


def test_an_all_censored_summary_reports_no_value_only_lower_bounds():
    """Every pair censored at 200: no quantile is a value (null in JSON, not logged), each has the lower bound 200,
    and the restricted mean's interval is not of zero width."""
    times = MeetingTimes(torch.full((4,), 200), torch.ones(4, dtype=torch.bool), max_steps=200)
    summary = times.summary()
    assert math.isnan(summary["meeting_time_median"]) and math.isnan(summary["meeting_time_q90"])
    assert summary["meeting_time_median_lower_bound"] == summary["meeting_time_q90_lower_bound"] == 200
    assert "meeting_time_median" not in finite(summary) and "meeting_time_median_lower_bound" in finite(summary)
    encoded = json.loads(json.dumps(jsonable(summary)))
    assert encoded["meeting_time_median"] is None and encoded["meeting_time_median_high"] is None
    assert summary["meeting_time_median_low"] == 200  # what is known: every time exceeds 200
    assert summary["meeting_time_median_confidence"] == 0.875  # 4 pairs: [min, max] covers 1 - 2 / 2^4
    assert summary["meeting_time_restricted_mean"] == 200
    assert summary["meeting_time_restricted_mean_low"] < 200 == summary["meeting_time_restricted_mean_high"]


def test_a_median_beyond_the_budget_is_flagged_not_invented():
    times = torch.tensor([5, 50, 50, 50])
    censored = torch.tensor([False, True, True, True])
    assert km_median(times, censored) == (50.0, True)
    summary = summarise_survival(times, censored, 50.0)
    assert summary.median.censored and math.isnan(summary.median.value) and summary.median.lower_bound == 50
    assert summary.censored_fraction == 0.75 and math.isinf(summary.median.high)
    assert summary.restricted_mean == pytest.approx((5 + 150) / 4)


def test_order_statistic_ranks_have_the_binomial_coverage():
    """[T_(r), T_(s)] covers Q(p) with probability P(r <= Bin(m, p) <= s - 1); with 4 pairs the best median interval
    is [min, max] at 1 - 2 / 16 = 87.5 %, never the 95 % asked for."""
    assert order_statistic_ranks(4, 0.5, 0.95) == (1, 4, 0.875)
    for count, level in ((10, 0.5), (32, 0.5), (64, 0.9), (200, 0.75)):
        r, s, achieved = order_statistic_ranks(count, level, 0.95)
        exact = stats.binom.cdf(s - 1, count, level) - stats.binom.cdf(r - 1, count, level)
        assert achieved == pytest.approx(exact) and achieved >= 0.95
        # narrowest: no interval one rank shorter reaches 95 %
        assert all(stats.binom.cdf(b - 1, count, level) - stats.binom.cdf(a - 1, count, level) < 0.95
                   for a in range(1, count) for b in range(a + 1, count + 1) if b - a < s - r)


def test_ks_band_is_the_exact_one_sided_kolmogorov_quantile():
    for count in (1, 4, 30):
        assert ks_band(count, 0.975) == pytest.approx(stats.ksone.isf(0.025, count))
    assert ks_band(1, 0.975) == pytest.approx(0.975)  # one draw: sup (F_1 - F) = 1 - U


def _coverage_tolerance(level: float) -> float:
    """Three Monte-Carlo standard errors of a coverage estimate from REPLICATES intervals: a correct interval fails
    this check with probability about 0.3 % per assertion; the seeds are fixed, so the check is deterministic."""
    return 3 * math.sqrt(level * (1 - level) / REPLICATES)


@pytest.mark.parametrize(("count", "level"), [(4, 0.5), (12, 0.5), (40, 0.9)])
def test_quantile_intervals_cover_at_their_stated_level(count, level):
    """Exponential times (a continuous law) have Q(p) = -log(1 - p): the order-statistic interval covers it with
    exactly its stated probability, so the empirical coverage lies within Monte-Carlo error of that level."""
    generator = torch.Generator().manual_seed(count)
    truth = -math.log(1 - level)
    hits, stated = 0, math.nan
    for _ in range(REPLICATES):
        times = -torch.log1p(-torch.rand(count, generator=generator, dtype=torch.float64))
        estimate = estimate_quantile(times, torch.zeros(count, dtype=torch.bool), level)
        hits += estimate.low <= truth <= estimate.high
        stated = estimate.confidence
    assert abs(hits / REPLICATES - stated) <= _coverage_tolerance(stated)


@pytest.mark.parametrize("budget", [0.5, 1.0])
def test_quantile_intervals_cover_under_censoring_and_ties(budget):
    """Geometric times (ties) censored at a budget, the median below it (budget 1.0) or beyond it (0.5): the
    interval (open above where censored) covers at least its stated level."""
    generator = torch.Generator().manual_seed(7)
    count, step = 12, 0.05
    truth = step * math.ceil(math.log(2) / step)  # median of step * ceil(Exp(1) / step)
    hits, stated = 0, math.nan
    for _ in range(REPLICATES):
        raw = step * torch.ceil(-torch.log1p(-torch.rand(count, generator=generator, dtype=torch.float64)) / step)
        censored = raw > budget
        estimate = estimate_quantile(raw.clamp_max(budget), censored, 0.5)
        hits += estimate.low <= truth <= estimate.high
        stated = estimate.confidence
    assert hits / REPLICATES >= stated - _coverage_tolerance(stated)


@pytest.mark.parametrize("count", [4, 32])
def test_restricted_mean_intervals_cover_at_least_their_level(count):
    """E min(T, b) of Exp(1) censored at b = 1.5 is 1 - e^{-1.5}; the Kolmogorov-Smirnov interval covers it with
    probability at least 95 % for any law (conservative: the band holds for every t at once)."""
    generator = torch.Generator().manual_seed(count + 1)
    budget, truth = 1.5, 1 - math.exp(-1.5)
    hits = 0
    for _ in range(REPLICATES):
        raw = -torch.log1p(-torch.rand(count, generator=generator, dtype=torch.float64))
        low, high = restricted_mean_interval(raw.clamp_max(budget), raw > budget, budget)
        hits += low <= truth <= high
    assert hits / REPLICATES >= 0.95 - _coverage_tolerance(0.95)


def test_one_sided_bounds_hold_at_their_confidence_and_respect_censoring():
    """P(low <= Q) and P(Q <= high) each at least the confidence (exponential median, 20 draws, 90 %); a censored
    upper rank gives an unbounded upper bound, a censored lower rank the budget."""
    generator = torch.Generator().manual_seed(11)
    below = above = 0
    for _ in range(REPLICATES):
        times = -torch.log1p(-torch.rand(20, generator=generator, dtype=torch.float64))
        low, high = quantile_bounds(times, torch.zeros(20, dtype=torch.bool), 0.5, 0.9)
        below += low <= math.log(2)
        above += math.log(2) <= high
    assert min(below, above) / REPLICATES >= 0.9 - _coverage_tolerance(0.9)
    low, high = quantile_bounds(torch.full((20,), 9.0), torch.ones(20, dtype=torch.bool), 0.5, 0.9)
    assert (low, high) == (9.0, math.inf)
