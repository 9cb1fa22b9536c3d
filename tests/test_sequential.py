"""Group-sequential decisions (diagnostics.sequential) checked exactly: the level of every boundary set by dynamic
programming against brute-force enumeration of the pairs' outcomes, the level kept under optional stopping where
testing every look at the full level (peeking) breaks it, the repeated bound as the inversion of the tests, and the
planner's price against its closed form.

No simulation and so no tolerance argument is needed here: every probability below is computed exactly (to
floating-point rounding, 1e-12), and the nuisance maximum by the zoomed grid the boundaries use.
"""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from mlm_dynamics.diagnostics.sequential import (
    Looks,
    continuation,
    crossing_probability,
    forgotten_by,
    slow_lower,
    uncorrected,
)
from mlm_dynamics.diagnostics.witness import paired_sign_lower

SCHEDULES = [(12,), (12, 16, 24), (12, 15, 18, 22, 28, 36), (11, 14, 18, 23), (4, 8, 12, 16, 20)]


@pytest.mark.parametrize("pairs", SCHEDULES)
@pytest.mark.parametrize("level", [0.95, 0.975])
def test_the_boundaries_keep_the_level_under_every_null_law(pairs, level):
    """Crossing some look's boundary, maximized over the null's worst laws (E D = 1/2, the ties' share free; P(T >
    t) = 1/4), is at most alpha on both sides; and the spending is used: above 60 % of alpha at some schedule."""
    looks = Looks(pairs, level)
    slow = crossing_probability(looks, delta=0.5)
    fast = crossing_probability(looks, epsilon=0.25)
    assert slow <= looks.alpha + 1e-12 and fast <= looks.alpha + 1e-12
    # an exact check of the nuisance maximum: a fine grid never finds a law that crosses more often
    for minus in np.linspace(0, 0.25, 201):
        assert crossing_probability(looks, delta=0.5, minus=float(minus)) <= looks.alpha + 1e-9
    if pairs == (12, 15, 18, 22, 28, 36):
        assert slow > 0.6 * looks.alpha and fast > 0.6 * looks.alpha


def test_peeking_without_correction_breaks_the_level_and_the_design_keeps_it():
    """Every look tested at the full 95 % as if it were the only one: under the worst null law some look crosses
    far more often than 5 %; the same looks with the spent level cross at most 5 %."""
    looks = Looks((12, 15, 18, 22, 28, 36))
    peek_slow = crossing_probability(looks, delta=0.5, thresholds=uncorrected(looks, "slow", 0.5))
    peek_fast = crossing_probability(looks, epsilon=0.25, thresholds=uncorrected(looks, "fast", 0.25))
    assert peek_slow > 0.07 and peek_fast > 0.055
    assert crossing_probability(looks, delta=0.5) <= 0.05 and crossing_probability(looks, epsilon=0.25) <= 0.05


def _brute_force_slow(pairs, thresholds, plus, zero, minus):
    """P(some look crosses) by enumerating every sequence of D in {-1, 0, 1} over the last look's pairs."""
    total = 0.0
    values = {1: plus, 0: zero, -1: minus}
    for path in itertools.product((1, 0, -1), repeat=pairs[-1]):
        probability = math.prod(values[d] for d in path)
        if any(sum(path[:n]) >= s for n, s in zip(pairs, thresholds, strict=True)):
            total += probability
    return total


@pytest.mark.parametrize("minus", [0.0, 0.05, 0.15])
def test_the_dynamic_programme_equals_enumeration(minus):
    """The DP's crossing probability of a small schedule (3 and 7 pairs) equals the sum over all 3^7 paths, for
    the design's thresholds and for others, on the slow side; the fast side against the binomial sum."""
    looks = Looks((3, 5, 7), 0.8)
    delta = 0.3
    for thresholds in (looks.slow_thresholds(delta), (2, 3, 4), (3, 5, 5)):
        exact = _brute_force_slow(looks.pairs, thresholds, delta + minus, 1 - delta - 2 * minus, minus)
        assert crossing_probability(looks, delta=delta, thresholds=thresholds, minus=minus) == pytest.approx(
            exact, abs=1e-12)
    for c in ((0, 1, 1), (-1, 0, 2)):
        total = 0.0
        for path in itertools.product((0, 1), repeat=7):  # 1: not met
            if any(sum(path[:n]) <= k for n, k in zip(looks.pairs, c, strict=True)):
                total += math.prod(0.4 if d else 0.6 for d in path)
        assert crossing_probability(looks, epsilon=0.4, thresholds=c) == pytest.approx(total, abs=1e-12)


def test_one_look_is_the_fixed_sample_test():
    """With one look the repeated bound is the fixed-sample exact limit and the fast threshold is the
    Clopper-Pearson one: 11 of 11 separated certify TV > 1/2 at 95 %, 10 of 10 do not; 11 met pairs certify."""
    for plus, ties, minus in [(11, 0, 0), (12, 0, 0), (10, 1, 0), (15, 2, 1), (7, 3, 2)]:
        n = plus + ties + minus
        assert slow_lower(Looks((n,)), 0, plus, ties, minus) == pytest.approx(
            paired_sign_lower(plus, ties, minus, 0.05), abs=2e-6)
    assert Looks((11,)).slow_thresholds(0.5) == (11,) and Looks((10,)).slow_thresholds(0.5) == (11,)
    assert Looks((11,)).fast_thresholds(0.25) == (0,) and Looks((10,)).fast_thresholds(0.25) == (-1,)
    for n in (11, 20, 40):
        c = Looks((n,)).fast_thresholds(0.25)[0]
        assert stats.binom.cdf(c, n, 0.25) <= 0.05 < stats.binom.cdf(c + 1, n, 0.25)


def test_the_repeated_bound_inverts_the_tests():
    """At every look and statistic, the repeated bound exceeds delta exactly when the look's test of E D <= delta
    rejects (the bisection relies on thresholds that do not decrease in delta), and it is never above the
    fixed-sample bound of the same counts (looking more costs confidence)."""
    looks = Looks((12, 16, 24))
    for delta in (0.2, 0.45, 0.5, 0.6):
        thresholds = looks.slow_thresholds(delta)
        for look, n in enumerate(looks.pairs):
            for plus in range(n - 4, n + 1):
                bound = slow_lower(looks, look, plus, n - plus, 0)
                assert (bound > delta + 1e-6) <= (plus >= thresholds[look]) <= (bound >= delta - 1e-6)
                assert bound <= paired_sign_lower(plus, n - plus, 0, 0.05) + 2e-6
    with pytest.raises(ValueError, match="look 1"):
        slow_lower(looks, 1, 12, 0, 0)


def test_forgotten_by_reads_the_look_boundary():
    """The fast side certifies at the first t where at most c_k of the look's pairs are not met (pairs still
    running count as not met): 12 met pairs at look 1 certify at the last meeting; with one censored pair they do
    not until the look allows one unmet pair."""
    looks = Looks((12, 15, 18, 22, 28, 36))
    c = looks.fast_thresholds(0.25)
    assert c[0] == 0 and c[3] >= 1
    times = list(range(10, 22))
    assert forgotten_by(looks, 0, times, [False] * 12, 0.25) == 21
    assert forgotten_by(looks, 0, times, [False] * 11 + [True], 0.25) is None
    many = list(range(10, 32))
    assert forgotten_by(looks, 3, many, [False] * 21 + [True], 0.25) == 30
    with pytest.raises(ValueError, match="look 1"):
        forgotten_by(looks, 1, times, [False] * 12, 0.25)


def test_the_price_of_a_cell_in_closed_form():
    """From look 1 (12 pairs) one short of its threshold, with every pair to come told apart, the first later look
    whose threshold the statistic reaches decides for sure: its pairs are the expected further pairs, chance 1 there
    and 0 before. With pairs told apart at rate q and ties otherwise, the chance to be decided by the next look is
    the binomial probability that the statistic reaches its threshold."""
    looks = Looks((12, 15, 18, 22, 28, 36))
    s = looks.slow_thresholds(0.5)
    extra, chances = continuation(looks, 0, (1.0, 0.0, 0.0), s[0] - 1, side="slow", value=0.5)
    first = next(k for k in range(1, 6) if s[0] - 1 + looks.pairs[k] - 12 >= s[k])
    assert extra == pytest.approx(looks.pairs[first] - 12)
    assert chances[first - 1] == pytest.approx(1) and all(c == 0 for c in chances[:first - 1])
    q = 0.9  # D = 1 with q, a tie otherwise; start from a statistic of 10 at look 1 (2 ties)
    _, chances = continuation(looks, 0, (q, 1 - q, 0.0), 10, side="slow", value=0.5)
    need = s[1] - 10  # separated among the 3 new pairs
    assert chances[0] == pytest.approx(stats.binom.sf(need - 1, 3, q))
    _, chances = continuation(looks, 0, 0.0, 0, side="fast", value=0.25)  # every pair meets: decided at once
    assert chances[0] == pytest.approx(1.0)


def test_looks_refuse_bad_schedules():
    for bad in [(), (12, 12), (12, 10), (0, 3), (1.5,)]:
        with pytest.raises(ValueError, match="looks"):
            Looks(bad)
    with pytest.raises(ValueError, match="level"):
        Looks((12,), 1.0)
    with pytest.raises(ValueError, match="learning"):
        Looks((4, 8)).shifted(4)
