import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mlm_dynamics import PairwiseMRFDenoiser
from mlm_dynamics.diagnostics.influence import (
    estimate_influence,
    mixing_time_bound,
    sensitivity_contraction_temperature,
    softmax_tv_bound,
)
from mlm_dynamics.diagnostics.margins import escape_probability_bound, local_margins
from mlm_dynamics.models.toy import enumerate_states

J = 0.6


@pytest.fixture(scope="module")
def ising_estimate():
    model = PairwiseMRFDenoiser.ising_chain(5, coupling=J)
    return estimate_influence(model, enumerate_states(5, 2), temperatures=(0.5, 1.0, 2.0, 4.0), replacements=None)


def test_influence_of_the_ising_chain_is_exact(ising_estimate):
    """Over all contexts: end sites tanh(J/tau), interior neighbours tanh(2J/tau)/2, non-neighbours 0."""
    for t_index, tau in enumerate(ising_estimate.temperatures.tolist()):
        expected = torch.zeros(5, 5, dtype=torch.float64)
        for i in range(5):
            for j in (i - 1, i + 1):
                if 0 <= j < 5:
                    expected[i, j] = math.tanh(J / tau) if i in (0, 4) else math.tanh(2 * J / tau) / 2
        torch.testing.assert_close(ising_estimate.alpha_max[t_index], expected)
        column = math.tanh(J / tau) + math.tanh(2 * J / tau) / 2
        assert ising_estimate.dobrushin[t_index].item() == pytest.approx(column)
    assert (ising_estimate.alpha_mean <= ising_estimate.alpha_max + 1e-12).all()
    # logit sensitivity of neighbours is 4J, and the tanh bound is tight at the chain's ends
    assert ising_estimate.logit_sensitivity[0, 1].item() == pytest.approx(4 * J)
    assert ising_estimate.logit_sensitivity[0, 2].item() == pytest.approx(0.0)


def test_contraction_temperature_and_mixing_bound(ising_estimate):
    # closed form: tau* solves tanh(J / tau) + tanh(2J / tau) / 2 = 1
    lo, hi = 0.01, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if math.tanh(J / mid) + math.tanh(2 * J / mid) / 2 >= 1 else (lo, mid)
    tau_star = hi
    grid_estimate = ising_estimate.contraction_temperature()
    assert 0.5 <= grid_estimate <= 1.0 and 0.5 <= tau_star <= 1.0
    assert grid_estimate == pytest.approx(tau_star, rel=0.15)  # log-linear interpolation on a coarse grid
    # the sensitivity bound sum_i tanh(L_ij / 4 tau) = 2 tanh(J / tau) is conservative: its tau* is larger
    assert ising_estimate.sensitivity_temperature() == pytest.approx(J / math.atanh(0.5), rel=1e-6)
    assert ising_estimate.sensitivity_temperature() >= tau_star
    bounds = mixing_time_bound(ising_estimate.dobrushin, 5, eps=0.25)
    assert math.isinf(bounds[0])
    expected = math.ceil(5 * (math.log(5) + math.log(4)) / (1 - ising_estimate.dobrushin[3].item()))
    assert bounds[3].item() == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(-8, 8), st.floats(-8, 8)), min_size=2, max_size=10), st.floats(0.1, 10))
def test_softmax_tv_is_bounded_by_tanh_of_the_oscillation(pairs, tau):
    u = torch.tensor([p[0] for p in pairs], dtype=torch.float64)
    v = torch.tensor([p[1] for p in pairs], dtype=torch.float64)
    tv = 0.5 * ((u / tau).softmax(0) - (v / tau).softmax(0)).abs().sum()
    osc = (u - v).max() - (u - v).min()
    assert tv <= softmax_tv_bound(osc, tau) + 1e-12


def test_sensitivity_temperature_root():
    sensitivity = torch.tensor([[0.0, 2.0], [2.0, 0.0]])
    tau = sensitivity_contraction_temperature(sensitivity)
    assert math.tanh(2.0 / (4 * tau)) == pytest.approx(1.0, abs=1e-9) or tau == 0.0
    assert sensitivity_contraction_temperature(torch.zeros(3, 3)) == 0.0


def test_margins_and_escape_bound_on_the_ising_chain():
    model = PairwiseMRFDenoiser.ising_chain(4, coupling=J)
    tokens = torch.ones(1, 4, dtype=torch.long)  # all spins up
    margins = local_margins(model, tokens)
    torch.testing.assert_close(margins.margin[0], torch.tensor([2 * J, 4 * J, 4 * J, 2 * J], dtype=torch.float64))
    for tau in (0.3, 1.0, 3.0):
        # two states: the bound is exact
        torch.testing.assert_close(margins.escape_bound(tau), margins.change_probability(tau))
    potts = PairwiseMRFDenoiser.random(5, 6, scale=1.5, generator=3)
    tokens = torch.randint(6, (20, 5))
    margins = local_margins(potts, tokens, chunk_size=7)
    for tau in (0.2, 1.0, 5.0):
        assert (margins.change_probability(tau) <= margins.escape_bound(tau) + 1e-12).all()
    assert escape_probability_bound(torch.tensor(10.0), 25, 1.0).item() == pytest.approx(
        24 * math.exp(-10) / (1 + 24 * math.exp(-10)))


def test_influence_input_errors():
    model = PairwiseMRFDenoiser.ising_chain(3, 0.5)
    with pytest.raises(ValueError, match="temperatures"):
        estimate_influence(model, torch.zeros(1, 3, dtype=torch.long), temperatures=(0.0,))
    with pytest.raises(ValueError, match="replacements"):
        estimate_influence(model, torch.zeros(1, 3, dtype=torch.long), replacements=0)


def test_masked_sites_have_no_margin_and_are_left_out_of_summaries():
    from mlm_dynamics import FullSequenceDenoiser, VocabInfo

    vocab = VocabInfo(size=5, mask_id=4, forbidden_ids=(4,))
    denoiser = FullSequenceDenoiser(lambda x: torch.nn.functional.one_hot(x.clamp_max(3), 5).float() * 3.0, vocab)
    tokens = torch.tensor([[0, 4, 2, 4], [1, 1, 4, 3]])  # 4 = still masked (diffusion decoding)
    margins = local_margins(denoiser, tokens, sites=torch.arange(4)[None])
    assert margins.valid.tolist() == [[True, False, True, False], [True, True, False, True]]
    summary = margins.summary(1.0)
    assert math.isfinite(summary["margin_mean"]) and summary["margin_sites"] == pytest.approx(5 / 8)
    assert summary["margin_mean"] == pytest.approx(float(margins.margin[margins.valid].mean()))
