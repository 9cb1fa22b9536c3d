"""Certified lower bounds on mixing (diagnostics.witness) against exact truths: Curie-Weiss above and below its
transition and a product chain, with d(t) and TV(a P^t, b P^t) from powers of the exact kernel.

Tolerance argument used throughout: a bound valid at level 0.95 fails (is above the truth at some time examined) in
at most 5 % of independent replicates, so over R replicates the failures are stochastically below Binomial(R, 0.05);
a test allows the 0.999 quantile of that law (a false alarm at most once in a thousand runs of a correct bound). The
same check is run on the plug-in gap (the bound without its confidence correction) and must fail, so the test can
tell a bound from a point estimate.
"""

import math

import pytest
import torch
from scipy import stats
from torch import Tensor

from mlm_dynamics import ChainMonitor, MeetingTimes, PairwiseMRFDenoiser, mixing_lower_bound
from mlm_dynamics.diagnostics.bracket import mixing_bracket, pairs_to_decide, pairs_to_separate
from mlm_dynamics.diagnostics.witness import (
    MixingLowerBound,
    Witness,
    agreement,
    chains_to_certify,
    energy_below,
    learned_witness,
    nearer_start,
    paired_sign_lower,
    within_radius,
)
from mlm_dynamics.models.toy import enumerate_states
from mlm_dynamics.sampling.coupling import CoupledGlauberChains
from mlm_dynamics.sampling.exact import glauber_transition_matrix, state_index, stationary_distribution
from mlm_dynamics.sampling.glauber import GlauberSampler

LEVEL = 0.95


def allowed_failures(replicates: int, level: float = LEVEL) -> int:
    return int(stats.binom.ppf(0.999, replicates, 1 - level))


class ExactChain:
    """A kernel on V^n states with exact laws at any time and exact simulation from its rows."""

    def __init__(self, model: PairwiseMRFDenoiser, temperature: float):
        self.n, self.states = model.num_sites, model.vocab.size
        self.kernel = glauber_transition_matrix(model, self.n, temperature)
        self.pi = stationary_distribution(self.kernel)
        self.configs = enumerate_states(self.n, self.states)
        self.cdf = self.kernel.cumsum(1)

    def laws(self, start: int, times: list[int]) -> torch.Tensor:
        """``[T, S]`` law of the chain from ``start`` at each time."""
        law = torch.zeros(self.kernel.shape[0], dtype=torch.float64)
        law[start] = 1
        out, t = [], 0
        for target in times:
            for _ in range(target - t):
                law = law @ self.kernel
            t = target
            out.append(law)
        return torch.stack(out)

    def tv(self, a: int, b: int, times: list[int]) -> torch.Tensor:
        return 0.5 * (self.laws(a, times) - self.laws(b, times)).abs().sum(-1)

    def d(self, times: list[int]) -> torch.Tensor:
        """``d(t) = max_x TV(P^t(x, .), pi)`` from the full matrix powers."""
        power = torch.eye(self.kernel.shape[0], dtype=torch.float64)
        out, t = [], 0
        for target in times:
            for _ in range(target - t):
                power = power @ self.kernel
            t = target
            out.append(0.5 * (power - self.pi).abs().sum(1).max())
        return torch.stack(out)

    def mixing_time(self, epsilon: float = 0.25) -> int:
        power, t = torch.eye(self.kernel.shape[0], dtype=torch.float64), 0
        while 0.5 * (power - self.pi).abs().sum(1).max() > epsilon:
            power, t = power @ self.kernel, t + 1
        return t

    def run(self, start: int, chains: int, times: list[int], generator: torch.Generator) -> torch.Tensor:
        """``[T, chains, n]`` tokens of independent chains from ``start``, drawn from the kernel's rows."""
        state = torch.full((chains,), start, dtype=torch.long)
        out, t = [], 0
        for target in times:
            for _ in range(target - t):
                u = torch.rand(chains, 1, generator=generator, dtype=torch.float64)
                state = torch.searchsorted(self.cdf[state], u * self.cdf[state, -1:])[:, 0].clamp_max(
                    self.cdf.shape[1] - 1)
            t = target
            out.append(self.configs[state])
        return torch.stack(out)


def curie_weiss(n: int, temperature: float) -> ExactChain:
    return ExactChain(PairwiseMRFDenoiser.curie_weiss(n, coupling=1.0), temperature)


def replicate_failures(chain: ExactChain, times: list[int], chains: int, replicates: int, make_witness,
                       seed: int, paired: bool = False) -> tuple[int, int, int]:
    """Replicates where ``tv_lower`` exceeds the exact TV, where ``d_lower`` exceeds the exact ``d``, and where the
    plug-in gap exceeds the exact TV, at some time examined (all-minus start ``a``, all-plus start ``b``)."""
    a, b = 0, chain.kernel.shape[0] - 1
    tv, d = chain.tv(a, b, times), chain.d(times)
    generator = torch.Generator().manual_seed(seed)
    tv_fail = d_fail = plug_fail = 0
    for _ in range(replicates):
        xa, xb = chain.run(a, chains, times, generator), chain.run(b, chains, times, generator)
        witness = make_witness(chain.configs[a], chain.configs[b])
        result = mixing_lower_bound(xa, xb, witness=witness, times=times, level=LEVEL, paired=paired)
        tv_fail += bool((result.tv_lower > tv + 1e-12).any())
        d_fail += bool((result.d_lower > d + 1e-12).any())
        plug_fail += bool((result.gap > tv + 1e-12).any())
    return tv_fail, d_fail, plug_fail


@pytest.mark.parametrize(("make_witness", "paired"), [
    (lambda a, b: nearer_start(a, b), False), (lambda a, b: nearer_start(a, b), True),
    (lambda a, b: agreement(a), False), (lambda a, b: agreement(a), True), (lambda a, b: None, False),
], ids=["nearer_start", "nearer_start-paired", "agreement", "agreement-paired", "learned"])
def test_bound_holds_at_its_level_over_times_and_a_plug_in_gap_does_not(make_witness, paired):
    # Curie-Weiss n = 7 at tau = 1.5 (above the transition): TV(a P^t, b P^t) falls from 0.99 to 0.02 over the
    # times examined, and 1[magnetisation < 0] = nearer_start is the optimal witness (its exact gap equals the TV),
    # so a plug-in gap lies above the truth about half the time at each time.
    chain, times = curie_weiss(7, 1.5), [4, 8, 16, 32, 64]
    replicates = 150
    tv_fail, d_fail, plug_fail = replicate_failures(chain, times, 24, replicates, make_witness, seed=1, paired=paired)
    limit = allowed_failures(replicates)
    assert tv_fail <= limit and d_fail <= limit, (tv_fail, d_fail, limit)
    assert plug_fail > limit, (plug_fail, limit)  # the gap without its confidence correction fails this test


def test_certifies_a_trapped_chain_from_64_chains_per_start():
    # Curie-Weiss n = 9 at tau = 0.4 (below the transition J = 1): exact TV between the two wells' chains is 0.958
    # at t = 200, so d(200) >= 0.479 > 1/4 and t_mix(1/4) > 200 is the truth. 64 chains per start must certify it,
    # with the learned witness (32 to learn, 32 to test) as with nearer_start, in nearly every replicate.
    chain, times = curie_weiss(9, 0.4), [50, 100, 200]
    assert float(chain.tv(0, 511, [200])[0]) / 2 > 0.25
    generator = torch.Generator().manual_seed(2)
    certified = {"learned": 0, "nearer_start": 0}
    replicates = 10
    for _ in range(replicates):
        xa, xb = chain.run(0, 64, times, generator), chain.run(511, 64, times, generator)
        learned = mixing_lower_bound(xa, xb, times=times)
        stated = mixing_lower_bound(xa, xb, witness=nearer_start(xa[0, 0], xb[0, 0]), times=times)
        certified["learned"] += learned.mixing_time_exceeds == 200
        certified["nearer_start"] += stated.mixing_time_exceeds == 200
        assert learned.num_chains == 32 and learned.learned and stated.num_chains == 64
    assert certified == {"learned": replicates, "nearer_start": replicates}


def monitored(chain: ExactChain, steps: list[int], chains: int, generator: torch.Generator,
              starts: tuple[int, int]) -> list[dict]:
    """The history of a :class:`ChainMonitor` watching ``chains`` exact chains from each of two starts (the second
    group marked by ``b_rows``), observed at ``steps``."""
    tokens = torch.cat([chain.run(starts[0], chains, steps, generator), chain.run(starts[1], chains, steps,
                                                                                  generator)], 1)
    monitor = ChainMonitor(lambda x: torch.nn.functional.one_hot(x, 2).flatten(1).double(), every=1,
                           b_rows=torch.arange(2 * chains) >= chains)
    monitor.start(chain.configs[torch.tensor([starts[0]] * chains + [starts[1]] * chains)], step=0)
    for step, state in zip(steps, tokens, strict=True):
        monitor.observe(state, step=step)
    return monitor.history


def test_chain_monitor_certifies_from_two_groups_at_its_level():
    # Validity: Curie-Weiss n = 7 at tau = 1.5, 24 chains per well; the monitor tests at its 1st, 2nd, 4th and 8th
    # observation (steps 2, 4, 8, 16 here) and its tv_lower must stay below the exact TV at every test in all but
    # the allowed replicates (its level is spent over the tests, 6 / (pi^2 j^2) each). Power: Curie-Weiss n = 9 at
    # tau = 0.4, 64 chains per well observed every 25 steps: the 3rd test (step 100, at alpha / 15) certifies
    # t_mix(1/4) > 100, the truth (d(200) >= 0.479); the 4th (at alpha / 26) does when no tested chain crossed
    # wells; mixing_time_exceeds is the largest step certified so far.
    fast, steps = curie_weiss(7, 1.5), [2, 4, 6, 8, 10, 12, 14, 16]
    tv = fast.tv(0, 127, steps)
    generator = torch.Generator().manual_seed(5)
    replicates, failures = 60, 0
    for _ in range(replicates):
        history = monitored(fast, steps, 24, generator, (0, 127))
        tested = [row for row in history if "chains/tv_lower" in row]
        assert [row["step"] for row in tested] == [2, 4, 8, 16]
        failures += any(row["chains/tv_lower"] > float(tv[steps.index(row["step"])]) + 1e-12 for row in tested)
    assert failures <= allowed_failures(replicates), failures
    trapped = curie_weiss(9, 0.4)
    history = monitored(trapped, [25 * k for k in range(1, 9)], 64, generator, (0, 511))
    assert history[-1]["chains/mixing_time_exceeds"] >= 100
    exceeds = [row.get("chains/mixing_time_exceeds", 0) for row in history if "chains/tv_lower" in row]
    certified = [row["step"] for row in history if row.get("chains/d_lower", 0) > 0.25]
    assert exceeds == sorted(exceeds) and exceeds[-1] == max(certified)
    with pytest.raises(ValueError, match="b_rows"):
        ChainMonitor(lambda x: x.double(), b_rows=torch.tensor([True, False, False, False, False]))
    with pytest.raises(ValueError, match="b_rows marks 8 chains"):
        ChainMonitor(lambda x: x.double(), b_rows=torch.arange(8) >= 4).start(torch.zeros(6, 3, dtype=torch.long),
                                                                              step=0)


@pytest.mark.parametrize("case", ["curie_weiss_fast", "product_independent_pairs"])
def test_never_certifies_slow_mixing_beyond_the_exact_mixing_time_of_a_fast_chain(case):
    # A fast chain: Curie-Weiss at tau = 4, or the uniform product chain (no couplings, 3 states on 5 sites) whose
    # pairs are run independently: a coupling that rarely meets, of a chain that mixes by the coupon collector.
    # Certifying t_mix(1/4) > t for a t >= the exact t_mix is an error the level bounds.
    if case == "curie_weiss_fast":
        chain = curie_weiss(7, 4.0)
    else:
        chain = ExactChain(PairwiseMRFDenoiser(torch.zeros(5, 3, dtype=torch.float64),
                                               torch.zeros(5, 5, 3, 3, dtype=torch.float64)), 1.0)
    t_mix = chain.mixing_time()
    times = list(range(1, t_mix + 6))
    generator = torch.Generator().manual_seed(3)
    replicates, errors, certified_somewhere = 100, 0, 0
    a, b = 0, chain.kernel.shape[0] - 1
    for _ in range(replicates):
        xa, xb = chain.run(a, 32, times, generator), chain.run(b, 32, times, generator)
        if case == "product_independent_pairs":
            assert bool((xa != xb).any(-1).float().mean() > 0.5)  # most pairs never met: the coupling says nothing
        exceeds = mixing_lower_bound(xa, xb, witness=[nearer_start(xa[0, 0], xb[0, 0]), agreement(xa[0, 0])],
                                     times=times).mixing_time_exceeds
        errors += exceeds is not None and exceeds >= t_mix
        certified_somewhere += exceeds is not None
    assert errors <= allowed_failures(replicates)
    assert certified_somewhere > 0  # the test has power: early times are certified where the truth is slow


def test_coupled_pairs_are_valid_samples_of_both_starts():
    # The product's coupled pairs (maximal coupling, shared site) keep each chain's marginal law, so the bound from
    # coupled rows holds at its level: compared with the exact TV at tau = 1.5.
    model = PairwiseMRFDenoiser.curie_weiss(7, coupling=1.0)
    chain, times = ExactChain(model, 1.5), [4, 8, 16]
    tv = chain.tv(0, 127, times)
    replicates, failures = 60, 0
    for r in range(replicates):
        pairs = CoupledGlauberChains(GlauberSampler(model, temperature=1.5))
        x, y = torch.zeros(24, 7, dtype=torch.long), torch.ones(24, 7, dtype=torch.long)
        state = pairs.init_state(x, y, generator=100 + r)
        xa, xb = [], []
        for target in times:
            while state.x.step < target:
                pairs.step(state)
            xa.append(state.x.tokens.clone())
            xb.append(state.y.clone())
        result = mixing_lower_bound(torch.stack(xa), torch.stack(xb), witness=nearer_start(x[0], y[0]), times=times)
        failures += bool((result.tv_lower > tv + 1e-12).any())
    assert failures <= allowed_failures(replicates)


def test_paired_bound_on_pairs_frozen_at_meeting_from_fixed_distinct_starts():
    # Paired differences from the product's coupled pairs frozen once met (their states stop where they met: D = 0
    # for ever), each pair from its own fixed start pair, not iid: the Clopper-Pearson limit of P(D = 1) still holds
    # for the mean over rows of TV(P^t(x_i), P^t(y_i)) (Hoeffding 1956: a Poisson-binomial tail lies below the
    # binomial one at the same mean). Exact truth from the kernel, per row.
    model = PairwiseMRFDenoiser.curie_weiss(7, coupling=1.0)
    chain, times = ExactChain(model, 1.5), [4, 8, 16]
    generator = torch.Generator().manual_seed(5)
    x0 = (torch.rand(24, 7, generator=generator) < 0.2).long()  # mostly minus
    y0 = (torch.rand(24, 7, generator=generator) < 0.8).long()  # mostly plus
    rows = zip(state_index(x0, 2).tolist(), state_index(y0, 2).tolist(), strict=True)
    tv = torch.stack([chain.tv(a, b, times) for a, b in rows])
    truth = tv.mean(0)  # [T] mean over rows
    replicates, failures = 60, 0
    for r in range(replicates):
        pairs = CoupledGlauberChains(GlauberSampler(model, temperature=1.5), freeze_met=True)
        state = pairs.init_state(x0, y0, generator=200 + r)
        xa, xb = [], []
        for target in times:
            pairs.run(state, target - state.x.step)
            xa.append(state.x.tokens.clone())
            xb.append(state.y.clone())
        result = mixing_lower_bound(torch.stack(xa), torch.stack(xb), witness=nearer_start(x0, y0), times=times,
                                    paired=True)
        failures += bool((result.tv_lower > truth + 1e-12).any())
    assert failures <= allowed_failures(replicates)
    assert float(result.tv_lower[0]) > 0  # and it says something: the early gap is certified


def test_bound_is_monotone_and_the_summary_names_its_keys():
    a = torch.zeros(3, 20, 4, dtype=torch.long)
    b = torch.ones(3, 20, 4, dtype=torch.long)
    b[2, :10] = 0  # half the b-chains reach a's side at the last time: its raw bound drops, TV cannot rise after
    result = mixing_lower_bound(a, b, witness=nearer_start(a[0, 0], b[0, 0]), times=[10, 20, 30])
    assert bool((result.tv_lower.diff() <= 0).all())
    assert result.tv_lower[0] == result.tv_lower[1] > result.tv_lower[2]
    summary = result.summary()
    assert summary["mixing_time_exceeds"] == 20 and summary["tv_lower_t30"] == float(result.tv_lower[2])
    assert summary["chains_needed"] == chains_to_certify(0.25, 0.95, tests=3) == 17
    assert math.isnan(MixingLowerBound(torch.tensor([5]), torch.tensor([0.2], dtype=torch.float64),
                                       torch.tensor([0.3]), ["w"], 8, 1, 0.95).summary()["mixing_time_exceeds"])


def test_clopper_pearson_limits_match_the_closed_form_at_full_separation():
    # k = N of N: the one-sided Clopper-Pearson limits are (alpha / 2)^(1/N) and 1 - that, so the gap is exact.
    n, level = 16, 0.95
    a, b = torch.zeros(n, 5, dtype=torch.long), torch.ones(n, 5, dtype=torch.long)
    result = mixing_lower_bound(a, b, witness=nearer_start(a[0], b[0]), level=level)
    p = ((1 - level) / 2) ** (1 / n)
    assert float(result.tv_lower[0]) == pytest.approx(2 * p - 1, abs=1e-9)
    assert chains_to_certify(0.25, level) == 13  # 2 * 0.025^(1/13) - 1 = 0.507 > 0.5, 2 * 0.025^(1/12) - 1 < 0.5


def test_paired_sign_limit_covers_exactly_and_a_point_estimate_does_not():
    # Exact coverage, no simulation: over every outcome (K+, K0, K-) of N = 9 pairs, the probability that the limit
    # exceeds the true E D = p+ - p- is a sum of trinomial probabilities, and must be at most alpha (1e-9 for
    # rounding) at every law; the laws include the ones without ties, where the p-value's nuisance maximum sits. The
    # observed mean (the limit without its correction) exceeds E D with probability near 1/2 at the same laws, and
    # the limit is not vacuous: at some law it fails at more than half its allowance (the bound is near-exact).
    n, alpha = 9, 0.05
    outcomes = [(plus, n - plus - minus, minus) for plus in range(n + 1) for minus in range(n + 1 - plus)]
    limits = {o: paired_sign_lower(*o, alpha) for o in outcomes}
    worst = 0.0
    for delta in (0.1, 0.3, 0.5, 0.7):
        for ties in (0.0, 0.1, 0.3, 0.6 * (1 - delta)):
            minus_rate = (1 - delta - ties) / 2
            law = [delta + minus_rate, ties, minus_rate]
            prob = {o: float(stats.multinomial.pmf(list(o), n, law)) for o in outcomes}
            above = sum(prob[o] for o in outcomes if limits[o] > delta)
            assert above <= alpha + 1e-9, (delta, ties, above)
            worst = max(worst, above)
            plug_in = sum(prob[o] for o in outcomes if (o[0] - o[2]) / n > delta)
            assert plug_in > 0.3, (delta, ties, plug_in)
    assert worst > alpha / 2
    for plus, ties, minus in outcomes:  # never below the bound that counts a tie as a reversal, above it with ties
        old = 2 * stats.beta.ppf(alpha, plus, n - plus + 1) - 1 if plus else 0.0
        assert limits[(plus, ties, minus)] >= max(old, 0.0) - 1e-6
    assert limits[(8, 1, 0)] > 2 * stats.beta.ppf(alpha, 8, 2) - 1 + 0.1
    assert paired_sign_lower(10, 1, 0, alpha) == pytest.approx(0.495, abs=1e-3)  # 0.27 counting the tie as -1


def test_pairs_to_separate_is_the_least_design_that_certifies():
    # Its estimate is the least N at which the observed shares (rounded) certify d > 1/4: one fewer does not.
    for separated, reversed_share in ((1.0, 0.0), (0.9, 0.0), (0.8, 0.05)):
        n = pairs_to_separate(separated, reversed_share)
        assert n is not None
        limits = []
        for size in (n - 1, n):
            plus, minus = round(separated * size), round(reversed_share * size)
            limits.append(paired_sign_lower(plus, size - plus - minus, minus, 0.05))
        assert limits[1] > 0.5 >= limits[0]
    assert pairs_to_separate(1.0, 0.0) == chains_to_certify(paired=True) == 11
    assert pairs_to_separate(0.7, 0.2) is None  # a gap of 1/2 or less: no number of pairs
    assert pairs_to_separate(0.51, 0.0) > 10_000  # far: the normal approximation, at once


def test_learned_witness_reads_agreement_and_ignores_met_pairs():
    # Chains from b scatter over a large vocabulary and keep 6 of 16 reference tokens; chains from a keep 12. The
    # learned witness separates them; pairs that met (equal on both sides) added to its training change nothing;
    # with no pair apart it is 0 everywhere (no gap, nothing certified).
    generator = torch.Generator().manual_seed(3)
    reference = torch.arange(16)

    def chains(keep: int, rows: int) -> Tensor:
        x = torch.randint(100, 10_000, (rows, 16), generator=generator)
        kept = torch.rand(rows, 16, generator=generator).argsort(-1)[:, :keep]
        return x.scatter(1, kept, reference.expand(rows, -1).gather(1, kept))

    train_a, train_b, test_a, test_b = chains(12, 16), chains(6, 16), chains(12, 32), chains(6, 32)
    fitted = learned_witness(train_a, train_b)
    assert fitted(test_a).mean() > 0.95 and fitted(test_b).mean() < 0.05
    met = chains(9, 16)
    padded = learned_witness(torch.cat([train_a, met]), torch.cat([train_b, met]))
    both = torch.cat([test_a, test_b])
    assert torch.equal(padded(both), fitted(both))
    assert learned_witness(met, met)(both).sum() == 0


def test_embedding_and_energy_witnesses():
    embed = lambda tokens: torch.nn.functional.one_hot(tokens, 3).double().flatten(1)  # noqa: E731
    a, b = torch.zeros(8, 4, dtype=torch.long), torch.full((8, 4), 2)
    assert nearer_start(a[0], b[0], embed=embed)(torch.cat([a[:2], b[:2]])).tolist() == [1, 1, 0, 0]
    assert within_radius(embed, embed(a[:1])[0], 0.5)(torch.cat([a[:1], b[:1]])).tolist() == [1, 0]
    energy = lambda tokens: tokens.double().sum(-1)  # noqa: E731
    assert energy_below(energy, 1.0)(torch.cat([a[:1], b[:1]])).tolist() == [1, 0]


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(states_a=torch.zeros(4, 3), states_b=torch.zeros(4, 3)), "states_a must be integer"),
    (dict(states_a=torch.zeros(4, 3, dtype=torch.long), states_b=torch.zeros(5, 3, dtype=torch.long)), "same shape"),
    (dict(times=None), "times is required"),
    (dict(times=[3, 2]), "increasing"),
    (dict(times=[1.0, 2.0]), "integer steps"),
    (dict(level=1.5), "level"),
    (dict(epsilon=0.5), "epsilon"),
    (dict(witness=[]), "non-empty"),
    (dict(witness=3), "callable"),
    (dict(witness=lambda t: torch.full((t.shape[0],), 2.0)), r"values in \[0, 1\]"),
    (dict(witness=lambda t: torch.zeros(3)), r"\[N\] values"),
    (dict(witness=Witness("half", lambda t: torch.full((t.shape[0],), 0.5), binary=True)), "declared binary"),
    (dict(states_a=torch.zeros(2, 3, 3, dtype=torch.long), states_b=torch.zeros(2, 3, 3, dtype=torch.long),
          witness=None), "learned witness needs >= 4"),
])
def test_bad_inputs_name_the_parameter(kwargs, match):
    args = dict(states_a=torch.zeros(2, 6, 3, dtype=torch.long), states_b=torch.ones(2, 6, 3, dtype=torch.long),
                times=[1, 2], witness=agreement(torch.zeros(3, dtype=torch.long)))
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        mixing_lower_bound(args.pop("states_a"), args.pop("states_b"), **args)


def test_bracket_fast_side_holds_at_its_level_over_the_scan_and_a_plug_in_does_not():
    # Meeting times T ~ Geometric(0.05): P(T > t) = 0.95^t <= 1/4 from t = 28 on. "forgotten by t" is wrong where
    # t < 28; the scan over t needs no correction (module docstring of diagnostics.bracket). The plug-in (the first
    # t where the observed share not met is <= 1/4) is wrong far more often.
    generator = torch.Generator().manual_seed(7)
    replicates, errors, plug_errors = 200, 0, 0
    for _ in range(replicates):
        uniform = torch.rand(16, generator=generator, dtype=torch.float64)
        times = (torch.log(uniform) / math.log(0.95)).ceil().long()  # P(T > t) = 0.95^t, t = 1, 2, ...
        budget = 200
        meeting = MeetingTimes(times=times.clamp_max(budget), censored=times > budget, max_steps=budget)
        bracket = mixing_bracket(meeting, None)
        errors += bracket.forgotten_by is not None and bracket.forgotten_by < 28
        plug = next(t for t in range(budget + 1) if float((times > t).float().mean()) <= 0.25)
        plug_errors += plug < 28
    assert errors <= allowed_failures(replicates) < plug_errors


def test_bracket_verdicts_on_exact_truths():
    # A fast chain whose coupling never meets (the product chain's pairs run independently, every pair censored):
    # "slow" at a horizon at or beyond the exact t_mix is an error, at most at the level's rate; a trapped chain
    # (Curie-Weiss in two wells, 64 pairs) is "slow"; 11 pairs that all met give "fast", 10 cannot.
    chain = ExactChain(PairwiseMRFDenoiser(torch.zeros(5, 3, dtype=torch.float64),
                                           torch.zeros(5, 5, 3, 3, dtype=torch.float64)), 1.0)
    horizon = chain.mixing_time()
    censored = MeetingTimes(times=torch.full((32,), 40), censored=torch.ones(32, dtype=torch.bool), max_steps=40)
    generator = torch.Generator().manual_seed(8)
    replicates, slow = 100, 0
    for _ in range(replicates):
        xa, xb = chain.run(0, 32, [horizon], generator), chain.run(242, 32, [horizon], generator)
        lower = mixing_lower_bound(xa, xb, witness=nearer_start(xa[0, 0], xb[0, 0]), times=[horizon], paired=True)
        bracket = mixing_bracket(censored, lower)
        slow += bracket.verdict == "slow"
        assert (bracket.forgotten_by is None and "more steps" in bracket.needs) or bracket.verdict == "slow"
    assert slow <= allowed_failures(replicates)

    trapped = curie_weiss(9, 0.4)
    xa, xb = trapped.run(0, 64, [100], generator), trapped.run(511, 64, [100], generator)
    lower = mixing_lower_bound(xa, xb, witness=nearer_start(xa[0, 0], xb[0, 0]), times=[100], paired=True)
    assert mixing_bracket(censored, lower).verdict == "slow"
    assert mixing_bracket(censored, lower).text() == "slow: t_mix(1/4) > 100 steps (95%; 32 pairs)"

    def met(pairs: int) -> MeetingTimes:
        return MeetingTimes(times=torch.arange(1, pairs + 1) * 3, censored=torch.zeros(pairs, dtype=torch.bool),
                            max_steps=200)

    assert mixing_bracket(met(11), None).forgotten_by == 33 and mixing_bracket(met(11), None).verdict == "fast"
    assert mixing_bracket(met(10), None).verdict == "undecided"
    assert "fast side: 11 pairs" in mixing_bracket(met(10), None).needs
    assert pairs_to_decide(0.0, 0.25, above=False) == 11 and pairs_to_decide(1.0, 0.75, above=True) == 11
    assert pairs_to_decide(0.7, 0.75, above=True) is None
