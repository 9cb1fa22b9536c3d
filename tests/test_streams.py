"""Counter-based per-chain streams: the arithmetic, the uniforms, exact laws, and independence from the batch."""

import math

import pytest
import torch
from scipy.stats import chisquare

from helpers import chi_square_pvalue
from mlm_dynamics import GlauberSampler, PairwiseMRFDenoiser
from mlm_dynamics.diagnostics.meeting import lagged_meeting_times, meeting_times
from mlm_dynamics.sampling.coupling import CoupledGlauberChains
from mlm_dynamics.sampling.exact import glauber_transition_matrix, state_index
from mlm_dynamics.sampling.streams import mix, mix_int, stream_key, uniforms


def test_tensor_mixing_equals_the_python_reference_bit_for_bit():
    generator = torch.Generator().manual_seed(0)
    values = torch.randint(-(2**63), 2**63 - 1, (5000,), generator=generator, dtype=torch.int64)
    values = torch.cat([values, torch.tensor([0, 1, -1, 2**63 - 1, -(2**63)])])
    mixed = mix(values)
    for value, result in zip(values.tolist(), mixed.tolist(), strict=True):
        assert result & (2**64 - 1) == mix_int(value & (2**64 - 1))
    assert stream_key(7, 0.5, 8, 3) == stream_key(7, 0.5, 8, 3) != stream_key(7, 0.5, 8, 4)
    assert stream_key(7, 0.5) != stream_key(7, 0.25)  # floats keyed by their bits


def test_uniforms_are_uniform_and_unrelated_across_keys_and_steps():
    """200,000 draws in 100 bins: the chi-square p-value threshold 1e-4 fails a correct generator once in 10^4; the
    correlation of neighbouring keys and steps has standard error 1 / sqrt(N) ~ 0.0022, so |r| < 0.015 is 6.7 SE."""
    keys = torch.tensor([stream_key(0, k) for k in range(20_000)])
    u = uniforms(keys, 3, 10)  # [20000, 10]
    assert u.dtype == torch.float64 and (u >= 0).all() and (u < 1).all()
    counts = torch.histc(u.flatten(), bins=100, min=0.0, max=1.0)
    assert chisquare(counts.numpy()).pvalue > 1e-4
    later = uniforms(keys, 4, 10)
    for a, b in ((u[:, 0], u[:, 1]), (u[:-1, 0], u[1:, 0]), (u[:, 0], later[:, 0])):
        assert abs(torch.corrcoef(torch.stack([a, b]))[0, 1]) < 0.015


@pytest.fixture(scope="module")
def mrf():
    return PairwiseMRFDenoiser.random(4, 3, scale=0.8, generator=2)


def test_chains_on_their_own_streams_have_the_exact_law(mrf):
    """mu_0 P^t of the exact kernel after 6 steps from the all-zero start, chi-square p > 1e-3 (one false alarm in
    a thousand runs), with rows at different temperatures in one batch."""
    chains, steps = 30_000, 6
    temperature = torch.tensor([1.0, 2.0]).repeat_interleave(chains // 2)
    sampler = GlauberSampler(mrf, temperature)
    keys = torch.tensor([stream_key(11, k) for k in range(chains)])
    state = sampler.init_state(torch.zeros(chains, 4, dtype=torch.long), generator=0, streams=keys)
    for _ in sampler.run(state, steps):
        pass
    for half, tau in enumerate((1.0, 2.0)):
        law = torch.zeros(81, dtype=torch.float64)
        law[0] = 1.0
        law = law @ torch.linalg.matrix_power(glauber_transition_matrix(mrf, 4, temperature=tau), steps)
        rows = state.tokens[half * chains // 2:(half + 1) * chains // 2]
        assert chi_square_pvalue(rows, law, 3) > 1e-3, tau


def test_coupled_pairs_on_their_own_streams_have_exact_marginals_and_agreement(mrf):
    """Each chain of a pair has mu_0 P^t; after one step from starts that differ at site 0 only, the pair has met
    exactly when the shared site was site 0, where both conditionals are equal and the coupling agrees surely:
    P = 1/4 (4 standard errors of tolerance)."""
    pairs, steps = 40_000, 6
    x0, y0 = torch.zeros(pairs, 4, dtype=torch.long), torch.full((pairs, 4), 2)
    keys = torch.tensor([stream_key(5, k) for k in range(pairs)])
    chains = CoupledGlauberChains(GlauberSampler(mrf, 1.0))
    state = chains.init_state(x0, y0, generator=0, streams=keys)
    for _ in range(steps):
        chains.step(state)
    kernel = glauber_transition_matrix(mrf, 4)
    for start, tokens in ((x0, state.x.tokens), (y0, state.y)):
        law = torch.zeros(81, dtype=torch.float64)
        law[state_index(start[:1], 3)] = 1.0
        assert chi_square_pvalue(tokens, law @ torch.linalg.matrix_power(kernel, steps), 3) > 1e-3
    apart = y0.clone()
    apart[:, 1:] = 0
    apart[:, 0] = 1  # differs from x0 at site 0 only
    one = CoupledGlauberChains(GlauberSampler(mrf, 1.0))
    pair_state = one.init_state(x0, apart, generator=0, streams=keys)
    one.step(pair_state)
    expected = 1 / 4
    met = float((pair_state.met_at == 1).double().mean())
    assert abs(met - expected) < 4 * math.sqrt(expected * (1 - expected) / pairs)


def test_a_pairs_path_does_not_depend_on_the_rest_of_the_batch(mrf):
    """The same pairs alone, inside a bigger batch of other temperatures, and after others met and left: the same
    meeting times, bit for bit."""
    keys = torch.tensor([stream_key(3, k) for k in range(64)])
    x0, y0 = torch.zeros(64, 4, dtype=torch.long), torch.full((64, 4), 2)
    alone = meeting_times(GlauberSampler(mrf, 0.8), x0, y0, max_steps=3000, generator=0, streams=keys)
    others = torch.tensor([stream_key(9, k) for k in range(100)])
    mixed_keys = torch.cat([others[:50], keys, others[50:]])
    temperature = torch.cat([torch.full((50,), 3.0), torch.full((64,), 0.8), torch.full((50,), 0.4)])
    tokens = torch.zeros(164, 4, dtype=torch.long)
    inside = meeting_times(GlauberSampler(mrf, temperature), tokens, torch.full((164, 4), 2), max_steps=3000,
                           generator=1, streams=mixed_keys)
    assert torch.equal(alone.times, inside.times[50:114]) and torch.equal(alone.censored, inside.censored[50:114])
    running_on = meeting_times(GlauberSampler(mrf, 0.8), x0, y0, max_steps=3000, generator=2, streams=keys,
                               freeze_met=False)
    assert torch.equal(alone.times, running_on.times)  # met pairs leaving the batch changes nothing
    lagged = [lagged_meeting_times(GlauberSampler(mrf, 0.8), x0[:8], y0[:8], lag=5, max_steps=500, generator=s,
                                   streams=keys[:8]) for s in (0, 1)]
    assert torch.equal(lagged[0].times, lagged[1].times)


def test_streams_are_checked(mrf):
    sampler = GlauberSampler(mrf)
    with pytest.raises(ValueError, match="streams must be int64 keys of shape"):
        sampler.init_state(torch.zeros(2, 4, dtype=torch.long), generator=0, streams=torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ValueError, match="streams: per-chain streams drive the random scan"):
        GlauberSampler(mrf, scan="sweep").init_state(torch.zeros(2, 4, dtype=torch.long), generator=0,
                                                     streams=torch.zeros(2, dtype=torch.int64))
