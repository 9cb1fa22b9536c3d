import io
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import chi_square_pvalue
from mlm_dynamics import (
    FullSequenceDenoiser,
    GlauberSampler,
    PairwiseMRFDenoiser,
    VocabInfo,
)
from mlm_dynamics.sampling import PseudoLogLikelihoodEnergy, tempered_log_probs
from mlm_dynamics.sampling.exact import glauber_transition_matrix, tv_to_stationarity

CHAINS = 20_000


@pytest.fixture(scope="module")
def mrf():
    return PairwiseMRFDenoiser.random(4, 3, scale=0.7, generator=1)


def run_to_stationarity(sampler, num_sites, steps, seed=0, states=3):
    state = sampler.init_state(torch.zeros(CHAINS, num_sites, dtype=torch.long), generator=seed)
    for _ in sampler.run(state, steps):
        pass
    return state.tokens


def test_burn_in_is_long_enough(mrf):
    """The exact kernel from the all-zero start is within 1e-3 of stationarity after 60 steps."""
    kernel = glauber_transition_matrix(mrf, 4)
    start = torch.zeros(81, dtype=torch.float64)
    start[0] = 1.0
    assert tv_to_stationarity(kernel, start, 60)[-1] < 1e-3


@pytest.mark.parametrize("scan", ["random", "sweep", "sequential"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_single_site_chain_reproduces_the_joint(mrf, scan, dtype):
    sampler = GlauberSampler(mrf, 1.0, scan=scan, sampling_dtype=dtype)
    tokens = run_to_stationarity(sampler, 4, 64)
    assert chi_square_pvalue(tokens, mrf.log_joint().exp(), 3) > 1e-3


def test_temperature_divides_logits(mrf):
    """At tau = 2 the chain samples pi^(1/2), and a chi-square test tells it apart from pi."""
    tokens = run_to_stationarity(GlauberSampler(mrf, 2.0), 4, 64)
    tempered = (mrf.log_joint() / 2).softmax(0)
    assert chi_square_pvalue(tokens, tempered, 3) > 1e-3
    assert chi_square_pvalue(tokens, mrf.log_joint().exp(), 3) < 1e-6


@pytest.mark.parametrize("scan", ["random", "sweep", "sequential"])
def test_block_updates_with_exact_mh_preserve_the_joint(scan):
    ising = PairwiseMRFDenoiser.ising_chain(4, coupling=0.9, field=0.2)
    sampler = GlauberSampler(ising, 1.0, scan=scan, block_size=2, energy=ising.energy)
    tokens = run_to_stationarity(sampler, 4, 80, states=2)
    assert chi_square_pvalue(tokens, ising.log_joint().exp(), 2) > 1e-3


def test_block_updates_without_correction_are_biased():
    """Independent draws from the block's marginals lose the pair correlation: the joint is not preserved."""
    ising = PairwiseMRFDenoiser.ising_chain(4, coupling=0.9, field=0.2)
    tokens = run_to_stationarity(GlauberSampler(ising, 1.0, block_size=2), 4, 80, states=2)
    assert chi_square_pvalue(tokens, ising.log_joint().exp(), 2) < 1e-6


def test_heat_bath_with_exact_energy_always_accepts(mrf):
    sampler = GlauberSampler(mrf, 1.0, energy=mrf.energy)
    state = sampler.init_state(torch.randint(3, (500, 4)), generator=3)
    assert all(bool(record.accepted.all()) for record in sampler.run(state, 20))


def test_pseudo_log_likelihood_energy_matches_definition(mrf):
    tokens = torch.randint(3, (5, 4))
    energy = PseudoLogLikelihoodEnergy(mrf, chunk_size=3)(tokens)
    expected = torch.zeros(5)
    for i in range(4):
        log_p = mrf.conditional_logits(tokens, torch.full((5,), i)).log_softmax(-1)[:, 0]
        expected -= log_p.gather(1, tokens[:, i:i + 1])[:, 0]
    torch.testing.assert_close(energy, expected)
    # PLL is not the joint's energy, so MH against it rejects some heat-bath proposals
    sampler = GlauberSampler(mrf, 1.0, energy=PseudoLogLikelihoodEnergy(mrf))
    state = sampler.init_state(torch.randint(3, (200, 4)), generator=0)
    accepted = torch.cat([record.accepted for record in sampler.run(state, 10)])
    assert 0.5 < accepted.float().mean() < 1.0


def test_forbidden_and_frame_tokens_are_never_touched():
    vocab = VocabInfo(size=8, mask_id=7, forbidden_ids=(0, 1, 7), frame_ids=(0, 1))

    def loud_specials(x):  # the model loves the special tokens
        logits = torch.zeros(*x.shape, 8)
        logits[..., [0, 1, 7]] = 30.0
        return logits

    denoiser = FullSequenceDenoiser(loud_specials, vocab)
    tokens = torch.tensor([[0, 3, 4, 5, 1]]).repeat(64, 1)
    sampler = GlauberSampler(denoiser, 1.0)
    state = sampler.init_state(tokens, generator=0)
    assert state.sites.tolist()[0] == [1, 2, 3]
    records = list(sampler.run(state, 50))
    new = torch.cat([r.new_tokens for r in records])
    assert set(new.unique().tolist()) == {2, 3, 4, 5, 6}  # every allowed token appears, no special one
    assert (state.tokens[:, 0] == 0).all() and (state.tokens[:, -1] == 1).all()
    assert torch.isclose(torch.cat([r.log_prob for r in records]), torch.tensor(math.log(1 / 5)).double()).all()


def test_tempered_log_probs_truncation_closed_forms():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log()
    allowed = torch.ones(4, dtype=torch.bool)
    nucleus = tempered_log_probs(logits, allowed, 1.0, top_p=0.8).exp()
    torch.testing.assert_close(nucleus, torch.tensor([0.625, 0.375, 0.0, 0.0]))
    top3 = tempered_log_probs(logits, allowed, 1.0, top_k=3).exp()
    torch.testing.assert_close(top3, torch.tensor([0.5, 0.3, 0.15, 0.0]) / 0.95)
    hot = tempered_log_probs(logits, allowed, 2.0).exp()
    torch.testing.assert_close(hot, probs.sqrt() / probs.sqrt().sum())


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-20, 20), min_size=3, max_size=12), st.floats(0.05, 20.0), st.integers(1, 12))
def test_tempered_log_probs_is_a_normalised_truncated_softmax(raw, tau, k):
    logits = torch.tensor(raw, dtype=torch.float64)
    allowed = torch.ones(len(raw), dtype=torch.bool)
    allowed[0] = False
    log_q = tempered_log_probs(logits, allowed, tau, top_k=k, dtype=torch.float64)
    q = log_q.exp()
    assert torch.isclose(q.sum(), torch.tensor(1.0, dtype=torch.float64))
    assert q[0] == 0
    kept = torch.isfinite(log_q)  # in the support (its probability may still underflow to 0)
    assert kept.sum() >= min(k, len(raw) - 1)
    # on the kept support, log-ratios are logit differences divided by tau
    support = kept.nonzero()[:, 0]
    ratios = log_q[support] - log_q[support[0]]
    torch.testing.assert_close(ratios, (logits[support] - logits[support[0]]) / tau)


def test_greedy_reaches_a_coordinatewise_mode(mrf):
    sampler = GlauberSampler(mrf, 1.0, greedy=True, scan="sequential")
    state = sampler.init_state(torch.randint(3, (100, 4)), generator=0)
    for _ in sampler.run(state, 40):
        pass
    for i in range(4):
        logits = mrf.conditional_logits(state.tokens, torch.full((100,), i))[:, 0]
        assert (logits.argmax(-1) == state.tokens[:, i]).all()


@pytest.mark.parametrize("options", [dict(scan="random"), dict(scan="sweep", block_size=2),
                                     dict(scan="sequential"), dict(block_size=2, top_k=2)])
def test_resume_is_bit_identical(mrf, options):
    ising = PairwiseMRFDenoiser.ising_chain(4, 0.5)
    sampler = GlauberSampler(ising, 1.3, energy=ising.energy if options.get("block_size") else None, **options)
    state = sampler.init_state(torch.randint(2, (16, 4)), generator=11)
    for _ in sampler.run(state, 7):
        pass
    buffer = io.BytesIO()
    torch.save(state.state_dict(), buffer)
    reference = [r.new_tokens.clone() for r in sampler.run(state, 13)]
    buffer.seek(0)
    resumed = type(state).from_state_dict(torch.load(buffer))
    replay = [r.new_tokens.clone() for r in sampler.run(resumed, 13)]
    assert all(torch.equal(a, b) for a, b in zip(reference, replay, strict=True))
    assert torch.equal(resumed.tokens, state.tokens) and resumed.step == state.step == 20


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(temperature=0.0), "temperature must be a finite number > 0"),
    (dict(temperature=-1.0), "temperature must be a finite number > 0"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(top_k=0), "top_k"),
    (dict(top_p=0.0), "top_p"),
    (dict(scan="zigzag"), "scan must be one of"),
    (dict(block_size=0), "block_size"),
    (dict(sampling_dtype=torch.float16), "sampling_dtype"),
])
def test_bad_sampler_options_raise(mrf, kwargs, message):
    with pytest.raises(ValueError, match=message):
        GlauberSampler(mrf, **kwargs)


def test_bad_chain_inputs_raise(mrf):
    with pytest.raises(ValueError, match="non-empty"):
        GlauberSampler(mrf).init_state(torch.zeros(0, 4, dtype=torch.long), generator=0)
    with pytest.raises(ValueError, match="exceeds the number of sites"):
        GlauberSampler(mrf, block_size=5).init_state(torch.zeros(2, 4, dtype=torch.long), generator=0)
    with pytest.raises(ValueError, match="must divide"):
        GlauberSampler(mrf, block_size=3, scan="sweep").init_state(torch.zeros(2, 4, dtype=torch.long), generator=0)
    with pytest.raises(ValueError, match="exceeds the model's maximum 4"):
        GlauberSampler(mrf).init_state(torch.zeros(2, 5, dtype=torch.long), generator=0)
    sampler = GlauberSampler(mrf)
    state = sampler.init_state(torch.zeros(1, 4, dtype=torch.long), generator=0)
    with pytest.raises(ValueError, match="num_steps"):
        next(sampler.run(state, -1))


@pytest.mark.parametrize("scan", ["random", "sweep"])
def test_per_row_temperatures_and_site_counts_reproduce_each_rows_exact_law(mrf, scan):
    """Rows at tau 0.7 / 2 with 4 or 3 resampled sites share one batch; each group has its own exact law.

    Compatible MRF: at tau the chain on all 4 sites is stationary for pi_tau ~ exp(-E / tau). With site 3 fixed at
    its start value 0 it is the chain of the 3-site MRF with fields h_i + W[i, 3, :, 0], stationary for
    pi_tau(. | x_3 = 0). The exact kernels show every group within 1e-3 of its law after 96 steps; the chi-square
    p-value threshold 1e-3 per group keeps a false alarm below 4e-3 over the four groups.
    """
    groups = [(0.7, 4), (2.0, 4), (0.7, 3), (2.0, 3)]
    per_group = 6000
    temperature = torch.tensor([tau for tau, _ in groups]).repeat_interleave(per_group)
    counts = torch.tensor([n for _, n in groups]).repeat_interleave(per_group)
    sampler = GlauberSampler(mrf, temperature, scan=scan)
    tokens = torch.zeros(len(temperature), 4, dtype=torch.long)
    sites = torch.arange(4).expand(len(temperature), -1)
    state = sampler.init_state(tokens, generator=5, sites=sites, site_counts=counts)
    for _ in sampler.run(state, 96):
        pass
    conditioned = PairwiseMRFDenoiser(mrf.fields[:3] + mrf.couplings[:3, 3, :, 0], mrf.couplings[:3, :3])
    for g, (tau, n) in enumerate(groups):
        rows = state.tokens[g * per_group:(g + 1) * per_group]
        model = mrf if n == 4 else conditioned
        if n == 3:
            assert (rows[:, 3] == 0).all()  # the padded site is never touched
            rows = rows[:, :3]
        tempered = model.log_joint() / tau
        law = (tempered - tempered.logsumexp(0)).exp()
        start = torch.zeros(3**n, dtype=torch.float64)
        start[0] = 1.0
        assert tv_to_stationarity(glauber_transition_matrix(model, n, temperature=tau), start, 96)[-1] < 1e-3
        assert chi_square_pvalue(rows, law, 3) > 1e-3, (tau, n)


def test_per_row_temperatures_are_checked(mrf):
    with pytest.raises(ValueError, match="temperature"):
        GlauberSampler(mrf, torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="per-chain temperatures"):
        GlauberSampler(mrf, torch.tensor([1.0, 2.0])).init_state(torch.zeros(3, 4, dtype=torch.long), generator=0)
    with pytest.raises(ValueError, match="site_counts"):
        GlauberSampler(mrf).init_state(torch.zeros(2, 4, dtype=torch.long), generator=0,
                                       site_counts=torch.tensor([0, 4]))
