import math
from fractions import Fraction

import pytest
import torch
from scipy.stats import chisquare

from helpers import chi_square_pvalue
from mlm_dynamics import GlauberSampler, PairwiseMRFDenoiser
from mlm_dynamics.diagnostics.meeting import (
    MeetingTimes,
    cover_time_quantile,
    lagged_meeting_times,
    meeting_times,
    meeting_times_of,
)
from mlm_dynamics.sampling.coupling import CoupledGlauberChains, maximal_coupling
from mlm_dynamics.sampling.exact import glauber_transition_matrix, state_index, tv_to_stationarity
from mlm_dynamics.sampling.streams import stream_key

N = 200_000


def two_laws():
    p = torch.tensor([0.5, 0.2, 0.2, 0.1, 0.0], dtype=torch.float64)
    q = torch.tensor([0.1, 0.3, 0.2, 0.0, 0.4], dtype=torch.float64)
    return p, q


def test_maximal_coupling_marginals_and_agreement_probability():
    p, q = two_laws()
    x, y = maximal_coupling(p.expand(N, -1), q.expand(N, -1), torch.Generator().manual_seed(0))
    for draws, law in ((x, p), (y, q)):
        counts = torch.bincount(draws, minlength=5).double()
        support = law > 0
        assert counts[~support].sum() == 0
        assert chisquare(counts[support].numpy(), (N * law[support]).numpy()).pvalue > 1e-3
    overlap = 1 - 0.5 * (p - q).abs().sum()  # 1 - TV = 0.5
    agree = (x == y).double().mean()
    assert abs(agree - overlap) < 4 * math.sqrt(overlap * (1 - overlap) / N)


def test_maximal_coupling_edge_cases():
    generator = torch.Generator().manual_seed(1)
    p = torch.softmax(torch.randn(1000, 30), -1)
    x, y = maximal_coupling(p, p.clone(), generator)
    assert torch.equal(x, y)
    disjoint_p = torch.tensor([[0.5, 0.5, 0.0, 0.0]]).expand(1000, -1)
    disjoint_q = torch.tensor([[0.0, 0.0, 0.3, 0.7]]).expand(1000, -1)
    x, y = maximal_coupling(disjoint_p, disjoint_q, generator)
    assert (x < 2).all() and (y >= 2).all()
    with pytest.raises(ValueError, match="equal-shape"):
        maximal_coupling(p, p[:, :3], generator)


@pytest.fixture(scope="module")
def mrf():
    return PairwiseMRFDenoiser.random(4, 3, scale=0.8, generator=2)


def test_coupled_chains_have_exact_marginals_and_stay_together(mrf):
    """Each chain of a coupled pair has the law mu_0 P^t of the single chain (computed exactly)."""
    pairs, steps = 40_000, 6
    kernel = glauber_transition_matrix(mrf, 4)
    x0 = torch.zeros(pairs, 4, dtype=torch.long)
    y0 = torch.full((pairs, 4), 2)
    chains = CoupledGlauberChains(GlauberSampler(mrf, 1.0))
    state = chains.init_state(x0, y0, generator=0)
    for _ in range(steps):
        met_before = state.met_at >= 0
        distance = chains.step(state)
        assert (distance[met_before] == 0).all()
    for start, tokens in ((x0, state.x.tokens), (y0, state.y)):
        law = torch.zeros(81, dtype=torch.float64)
        law[state_index(start[:1], 3)] = 1.0
        for _ in range(steps):
            law = law @ kernel
        assert chi_square_pvalue(tokens, law, 3) > 1e-3
    assert ((state.met_at >= 0) == (state.x.tokens == state.y).all(1)).all()


def test_meeting_times_bound_tv_between_starts(mrf):
    """P(T > t) >= TV(P^t(x0, .), P^t(y0, .)) (coupling inequality), and pairs started together meet at 0."""
    pairs = 4000
    x0 = torch.zeros(pairs, 4, dtype=torch.long)
    y0 = torch.full((pairs, 4), 2)
    result = meeting_times(GlauberSampler(mrf, 1.0), x0, y0, max_steps=400, generator=3)
    assert result.censored_fraction == 0.0
    kernel = glauber_transition_matrix(mrf, 4)
    t_grid = torch.tensor([0, 5, 10, 20, 40])
    start_x, start_y = torch.zeros(81, dtype=torch.float64), torch.zeros(81, dtype=torch.float64)
    start_x[0], start_y[-1] = 1.0, 1.0
    survival = result.survival(t_grid)
    for t, s in zip(t_grid.tolist(), survival.tolist(), strict=True):
        law_x = start_x @ torch.linalg.matrix_power(kernel, t)
        law_y = start_y @ torch.linalg.matrix_power(kernel, t)
        assert s + 3 * math.sqrt(max(s * (1 - s), 1e-4) / pairs) >= 0.5 * (law_x - law_y).abs().sum()
    same = meeting_times(GlauberSampler(mrf, 1.0), x0[:10], x0[:10], max_steps=5, generator=0)
    assert same.times.tolist() == [0] * 10 and not same.censored.any()
    censored = meeting_times(GlauberSampler(mrf, 1.0), x0[:50], y0[:50], max_steps=1, generator=0)
    assert censored.censored.any() and (censored.times[censored.censored] == 1).all()
    assert math.isinf(censored.quantiles(torch.tensor([1.0]))[0])


@pytest.mark.parametrize("lag", [1, 8])
def test_lagged_coupling_tv_bound_holds_against_exact_tv(mrf, lag):
    pairs = 3000
    x0 = torch.zeros(pairs, 4, dtype=torch.long)
    result = lagged_meeting_times(GlauberSampler(mrf, 1.0), x0, x0.clone(), lag=lag, max_steps=2000, generator=5)
    assert not result.censored.any() and (result.times >= lag).all()
    kernel = glauber_transition_matrix(mrf, 4)
    start = torch.zeros(81, dtype=torch.float64)
    start[0] = 1.0
    exact = tv_to_stationarity(kernel, start, 60)
    t_grid = torch.arange(0, 61, 5)
    bound = result.tv_upper_bound(t_grid)
    excess = torch.ceil((result.times.double()[None] - lag - t_grid[:, None]) / lag).clamp_min(0)
    standard_error = excess.std(1) / math.sqrt(pairs)
    # 3 standard errors, plus the rule of three (3 / N) for tails where no pair contributes
    assert (bound + 3 * standard_error + 3 / pairs >= exact[t_grid]).all()
    assert bound[-1] < 0.1  # informative, not the trivial bound 1
    assert (bound.diff() <= 1e-12).all()


def test_the_lagged_bound_upper_limit_covers_the_bound_of_a_known_law():
    """L-lag times tau = L + floor(20 U^3) (L = 4, budget L + 20, none censored): the bound E[ceil((tau - L - t) /
    L)^+] is known by enumeration. Over 1000 replications of 16 pairs the 95 % upper limit covers it at each t
    (binomial standard error 0.7 %: 0.93 is 3 below the guarantee), while the estimate alone misses it often; 16
    pairs that met before t + L give a limit no valid one can undercut (the exact 0.171 of 0 in 16 for c_t = 1)."""
    lag, reach, t = 4, 20, torch.tensor([0, 4, 8, 12, 16])
    support = torch.arange(reach + 1, dtype=torch.float64)
    weights = (((support + 1) / (reach + 1)) ** (1 / 3) - (support / (reach + 1)) ** (1 / 3))  # P(floor(21 U^3) = k)
    exact = (torch.ceil((support[None] - t[:, None]) / lag).clamp_min(0) * weights).sum(1)
    g = torch.Generator().manual_seed(0)
    covered, missed_by_estimate = torch.zeros(len(t)), torch.zeros(len(t))
    for _ in range(1000):
        times = lag + ((reach + 1) * torch.rand(16, generator=g, dtype=torch.float64) ** 3).floor()
        result = MeetingTimes(times=times, censored=torch.zeros(16, dtype=torch.bool), lag=lag, max_steps=reach)
        covered += (result.tv_upper_limit(t) >= exact.clamp_max(1) - 1e-12).double()
        missed_by_estimate += (result.tv_upper_bound(t) < exact.clamp_max(1) - 1e-12).double()
    assert (covered / 1000 >= 0.93).all(), covered
    assert (missed_by_estimate / 1000 > 0.2).any()  # the point estimate is no certificate
    early = MeetingTimes(times=torch.full((16,), 4.0), censored=torch.zeros(16, dtype=torch.bool), lag=4, max_steps=4)
    assert early.tv_upper_bound(torch.tensor([0]))[0] == 0 and 0.171 <= early.tv_upper_limit(torch.tensor([0]))[0] < 0.3
    summary = early.summary(tv_steps=(0, 4))
    assert summary["tv_bound_t0"] == 0 and summary["tv_bound_t0_high"] > 0.171 and summary["tv_bound_t4_high"] == 0


def test_censored_lagged_pairs_give_the_trivial_bound_at_every_t(mrf):
    """A censored L-lag time is only known to exceed the budget: its term ceil((tau - L - t) / L)^+ is unbounded at
    every t, so the bound is 1 everywhere, also beyond budget - L (six pairs of a cold Ising chain, none met)."""
    x0 = torch.zeros(20, 4, dtype=torch.long)
    result = lagged_meeting_times(GlauberSampler(mrf, 0.05), x0, torch.full((20, 4), 2), lag=2, max_steps=3,
                                  generator=0)
    assert result.censored.any()
    assert result.tv_upper_bound(torch.tensor([0, 3, 5, 100]).tolist()).tolist() == [1.0] * 4
    assert result.tv_upper_limit(torch.tensor([0, 3, 5, 100])).tolist() == [1.0] * 4
    ising = PairwiseMRFDenoiser.ising_chain(8, coupling=1.0)
    up, down = torch.ones(6, 8, dtype=torch.long), torch.zeros(6, 8, dtype=torch.long)
    cold = lagged_meeting_times(GlauberSampler(ising, 0.1), up, down, lag=10, max_steps=20, generator=0)
    assert cold.censored.all() and cold.budget == 30
    assert cold.tv_upper_bound(torch.tensor([0, 30, 40, 100, 1000])).tolist() == [1.0] * 5


def test_coupling_rejects_unsupported_samplers(mrf):
    with pytest.raises(ValueError, match="MH correction"):
        CoupledGlauberChains(GlauberSampler(mrf, energy=mrf.energy))
    with pytest.raises(ValueError, match="greedy"):
        CoupledGlauberChains(GlauberSampler(mrf, greedy=True))
    with pytest.raises(ValueError, match="multiple of the sweep length"):
        lagged_meeting_times(GlauberSampler(mrf, scan="sweep"), torch.zeros(2, 4, dtype=torch.long),
                             torch.zeros(2, 4, dtype=torch.long), lag=3, max_steps=5, generator=0)
    with pytest.raises(ValueError, match="agree outside"):
        CoupledGlauberChains(GlauberSampler(mrf)).init_state(
            torch.zeros(2, 4, dtype=torch.long), torch.ones(2, 4, dtype=torch.long), generator=0,
            sites=torch.tensor([[0, 1], [0, 1]]))


def test_coupled_chains_resume_bit_identically(mrf):
    chains = CoupledGlauberChains(GlauberSampler(mrf, 1.0))
    state = chains.init_state(torch.zeros(50, 4, dtype=torch.long), torch.full((50, 4), 2), generator=4)
    for _ in range(5):
        chains.step(state)
    saved = state.state_dict()
    reference = [chains.step(state) for _ in range(10)]
    resumed = type(state).from_state_dict(saved)
    replay = [chains.step(resumed) for _ in range(10)]
    assert all(torch.equal(a, b) for a, b in zip(reference, replay, strict=True))
    assert torch.equal(resumed.y, state.y) and torch.equal(resumed.met_at, state.met_at)


def test_met_pairs_leave_the_batch_without_changing_the_law_of_meeting_times():
    """freeze_met drops met pairs from the forward batch; T has the same law (two-sample KS, p > 1e-3: the false
    alarm rate of one test), and the rows spent are exactly 2 per pair and step until it meets."""
    from scipy.stats import ks_2samp

    model = PairwiseMRFDenoiser.random(5, 3, scale=0.8, generator=3)
    pairs = 3000
    x0 = torch.zeros(pairs, 5, dtype=torch.long)
    y0 = torch.full((pairs, 5), 2, dtype=torch.long)
    sampler = GlauberSampler(model, torch.full((pairs,), 1.5))
    results = {}
    for freeze in (False, True):
        chains = CoupledGlauberChains(sampler, freeze_met=freeze)
        state = chains.init_state(x0, y0, generator=11)
        results[freeze] = (meeting_times_of(chains.run(state, 400)), state.rows)
    (loose, rows_loose), (frozen, rows_frozen) = results[False], results[True]
    assert frozen.censored_fraction == loose.censored_fraction == 0.0
    assert ks_2samp(loose.times.numpy(), frozen.times.numpy()).pvalue > 1e-3
    assert rows_frozen == 2 * int(frozen.times.sum())  # each pair costs 2 rows per step until it meets
    assert rows_loose == pairs * int(loose.times.max()) + int(loose.times.sum())


def test_pairs_that_cannot_meet_are_stopped_without_changing_any_meeting_time():
    """stop_hopeless stops a pair d sites apart only when fewer than d steps are left (one site changes per step),
    so every meeting time and censoring flag is exactly the run's without it (per-pair streams: a pair's draws do not
    depend on which others are still in the batch), at fewer rows."""
    model = PairwiseMRFDenoiser.random(8, 3, scale=1.2, generator=5)
    pairs, budget = 400, 30
    x0 = torch.zeros(pairs, 8, dtype=torch.long)
    y0 = torch.full((pairs, 8), 2, dtype=torch.long)
    sampler = GlauberSampler(model, torch.full((pairs,), 0.7))
    results = {}
    for stopping in (False, True):
        chains = CoupledGlauberChains(sampler, freeze_met=True)
        state = chains.init_state(x0, y0, streams=torch.tensor([stream_key(3, k) for k in range(pairs)]))
        while bool(state.open.any()) and state.x.step < budget:
            chains.step(state)
            if stopping:
                chains.stop_hopeless(state, budget)
        if state.x.step < budget:  # all pairs met or stopped: the rest of the budget costs nothing
            state.stop(state.open, at=budget)
        results[stopping] = (meeting_times_of(state), state.rows, state)
    (plain, rows_plain, _), (stopped, rows_stopped, state) = results[False], results[True]
    assert 0 < plain.censored_fraction < 1
    assert torch.equal(plain.times, stopped.times) and torch.equal(plain.censored, stopped.censored)
    assert plain.budget == stopped.budget == budget
    assert bool(state.stopped.any()) and bool((state.met_at[state.stopped] < 0).all())
    assert rows_plain == 2 * int(plain.times.sum())  # 2 rows per pair and step until it meets or the budget ends
    assert rows_stopped < rows_plain


def test_pairs_may_keep_moving_after_they_meet_while_others_leave():
    """Per-pair freeze: met pairs with freeze False move on as one chain (one row each), the others leave the batch;
    a stopped pair is censored where it stopped, its y leaves the batch and its x too unless it must stay a
    chain."""
    model = PairwiseMRFDenoiser.ising_chain(5, coupling=0.5)
    pairs = 6
    chains = CoupledGlauberChains(GlauberSampler(model, 2.0))
    state = chains.init_state(torch.zeros(pairs, 5, dtype=torch.long), torch.ones(pairs, 5, dtype=torch.long),
                              generator=0)
    state.freeze = torch.tensor([False, False, False, True, True, True])
    while bool((state.met_at < 0).any()):
        chains.step(state)
    before, x_before = state.rows, state.x.tokens.clone()
    for _ in range(50):
        chains.step(state)
    assert state.rows - before == 50 * 3  # three moving pairs, one row each
    assert torch.equal(state.x.tokens[3:], x_before[3:]) and torch.equal(state.x.tokens, state.y)
    assert not torch.equal(state.x.tokens[:3], x_before[:3])
    fresh = chains.init_state(torch.zeros(3, 5, dtype=torch.long), torch.ones(3, 5, dtype=torch.long), generator=1)
    fresh.freeze = torch.tensor([True, False, False])
    fresh.stop(torch.tensor([True, True, False]))
    chains.step(fresh)
    # pair 0 stopped and frozen: nothing; pair 1 stopped: its x moves on alone, y stays; pair 2: both chains
    assert fresh.rows == 1 + 2 and bool(fresh.stopped[:2].all()) and (meeting_times_of(fresh).times[:2] == 0).all()
    assert torch.equal(fresh.y[:2], torch.ones(2, 5, dtype=torch.long)) and fresh.x.tokens[0].sum() == 0


@pytest.mark.parametrize("sites", [1, 2, 3, 5, 8, 13])
@pytest.mark.parametrize("level", [0.1, 0.5, 0.9])
def test_cover_time_quantile_is_the_exact_quantile_of_the_coupon_collectors_time(sites, level):
    """Against the inclusion-exclusion law in exact rationals, P(C_n <= t) = sum_k (-1)^k C(n, k) (1 - k / n)^t: the
    returned t is the least with P(C_n <= t) >= level (one step early or late fails one of the two inequalities)."""
    def covered_by(t: int) -> Fraction:
        return sum((Fraction((-1) ** k * math.comb(sites, k)) * (1 - Fraction(k, sites)) ** t
                    for k in range(sites + 1)), Fraction(0))

    t = cover_time_quantile(sites, level)
    assert covered_by(t) >= level > covered_by(t - 1)


def test_cover_time_quantile_refuses_a_site_count_below_one():
    with pytest.raises(ValueError, match="sites must be an integer >= 1"):
        cover_time_quantile(0)
