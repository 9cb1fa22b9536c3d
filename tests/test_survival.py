"""Censoring-aware statistics: Kaplan-Meier, its median, the restricted mean, intervals, and the claims."""

import math

import pytest
import torch

from mlm_dynamics.diagnostics.claims import FAILS, HOLDS, OPEN, Evidence, assess_claims
from mlm_dynamics.diagnostics.influence import InfluenceEstimate
from mlm_dynamics.diagnostics.rectangle import RectangleReport
from mlm_dynamics.diagnostics.scaling import BoundaryPoint, ScalingFit, boundary_interval
from mlm_dynamics.diagnostics.survival import kaplan_meier, km_median, restricted_mean, summarise_survival


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


def test_with_censoring_only_at_the_budget_the_restricted_mean_is_the_mean_of_the_capped_times():
    generator = torch.Generator().manual_seed(0)
    times = torch.randint(1, 100, (500,), generator=generator)
    censored = times > 60
    capped = torch.where(censored, 60, times)
    assert restricted_mean(capped, censored, 60.0) == pytest.approx(float(capped.double().mean()))
    grid, survival = kaplan_meier(capped, censored)
    for t, s in zip(grid.tolist(), survival.tolist(), strict=True):  # the empirical survival function
        assert s == pytest.approx(float(((capped > t) | censored).double().mean()))
    assert km_median(capped, censored)[1] is False


def test_a_median_beyond_the_budget_is_flagged_not_invented():
    times = torch.tensor([5, 50, 50, 50])
    censored = torch.tensor([False, True, True, True])
    assert km_median(times, censored) == (50.0, True)
    summary = summarise_survival(times, censored, 50.0, replicates=50, generator=torch.Generator().manual_seed(0))
    assert summary.median_censored and summary.censored_fraction == 0.75
    assert math.isinf(summary.median_high)  # replicates censored too: the interval is open above
    assert summary.restricted_mean == pytest.approx((5 + 150) / 4)


def test_bootstrap_intervals_cover_known_values():
    """Exponential times of mean 40, censored at 100: the restricted mean is 40 (1 - e^{-2.5}) = 36.72 and the
    median 40 log 2 = 27.73. With 2000 pairs the 95% intervals cover them unless the sample is unlucky at the 5 %
    level for each; a fixed seed makes the check deterministic."""
    generator = torch.Generator().manual_seed(3)
    raw = -40 * torch.log1p(-torch.rand(2000, generator=generator, dtype=torch.float64))
    censored = raw > 100
    times = torch.where(censored, torch.tensor(100.0, dtype=torch.float64), raw)
    summary = summarise_survival(times, censored, 100.0, replicates=300, generator=generator)
    assert summary.restricted_mean_low < 40 * (1 - math.exp(-2.5)) < summary.restricted_mean_high
    assert summary.median_low < 40 * math.log(2) < summary.median_high


def test_boundary_interval_brackets_a_clear_crossing():
    """Censored fractions 1, 1, 0 at tau 0.5, 1, 2 cross 1/2 between 1 and 2 in every replicate."""
    flags = [torch.ones(40, dtype=torch.bool), torch.ones(40, dtype=torch.bool), torch.zeros(40, dtype=torch.bool)]
    point = boundary_interval(8, [0.5, 1.0, 2.0], flags, replicates=50)
    assert point.status == "interpolated" and 1.0 < point.temperature < 2.0
    assert point.low == point.high == pytest.approx(point.temperature)
    mixed = boundary_interval(8, [0.5, 1.0], [torch.tensor([True, False] * 5), torch.zeros(10, dtype=torch.bool)],
                              replicates=200)
    assert mixed.low == 0.0  # some replicates fall below the grid


def fit(slope_low, slope_high, lengths=(4, 8, 16)):
    means = {n: n * math.log(n) for n in lengths}
    return ScalingFit(1.0, 0.9, 1.1, 0.99, (slope_low + slope_high) / 2, slope_low, slope_high, 0.0, list(lengths),
                      means)


def test_claims_follow_their_rules_and_name_contradictions():
    censored = {(0.5, 4): 0.6, (0.5, 16): 0.9, (2.0, 4): 0.0, (2.0, 16): 0.0}
    pairs = dict.fromkeys(censored, 10)
    rectangles = RectangleReport(values=torch.tensor([0.5, 0.0]), distances=torch.tensor([1, 2]),
                                 tolerance=torch.tensor([1e-3, 1e-3]))
    influence = InfluenceEstimate(temperatures=torch.tensor([0.5, 2.0]), sites=torch.arange(3),
                                  alpha_max=torch.full((2, 3, 3), 0.1), alpha_mean=torch.full((2, 3, 3), 0.1),
                                  logit_sensitivity=torch.zeros(3, 3))
    boundary = [BoundaryPoint(4, 0.7, "interpolated", 0.6, 0.8), BoundaryPoint(16, 1.2, "interpolated", 1.0, 1.4)]
    evidence = Evidence(censored=censored, pairs=pairs, budget=100, fits={2.0: fit(0.9, 1.1)}, boundary=boundary,
                        rectangles=rectangles, influence=influence)
    verdicts = {c.name: c.verdict for c in assess_claims(evidence).claims}
    assert verdicts == {"incompatible": HOLDS, "fast_mixing": HOLDS, "boundary_moves_up": HOLDS,
                        "metastable": HOLDS, "dobrushin": OPEN}
    report = assess_claims(evidence)
    assert any("below 1" in text and "tau=0.5" in text for text in report.contradictions)
    dobrushin = next(c for c in report.claims if c.name == "dobrushin")
    assert any("below the grid" in line for line in dobrushin.evidence)
    against = Evidence(censored=censored, pairs=pairs, budget=100, fits={2.0: fit(1.5, 1.9)},
                       boundary=list(reversed([BoundaryPoint(16, 0.7, "interpolated", 0.6, 0.8),
                                               BoundaryPoint(4, 1.2, "interpolated", 1.0, 1.4)])),
                       rectangles=RectangleReport(values=torch.zeros(4), distances=torch.ones(4),
                                                  tolerance=torch.full((4,), 1e-3)))
    verdicts = {c.name: c.verdict for c in assess_claims(against).claims}
    assert verdicts["incompatible"] == FAILS and verdicts["fast_mixing"] == FAILS
    assert verdicts["boundary_moves_up"] == FAILS and verdicts["dobrushin"] == OPEN
