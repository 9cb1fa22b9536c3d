import pytest
import torch

from mlm_dynamics import PairwiseMRFDenoiser
from mlm_dynamics.models.toy import enumerate_states
from mlm_dynamics.sampling.exact import glauber_transition_matrix, state_index, stationary_distribution


def test_block_conditionals_are_exact_marginals_of_the_joint():
    model = PairwiseMRFDenoiser.random(4, 3, scale=1.0, generator=4)
    joint = model.log_joint().exp().view(3, 3, 3, 3)
    context = torch.tensor([[2, 0, 1, 2]])
    probs = model.conditional_logits(context, torch.tensor([[3, 1]])).double().softmax(-1)[0]
    block = joint[2, :, 1, :]  # x_0 = 2, x_2 = 1 fixed; axes (x_1, x_3)
    block = block / block.sum()
    torch.testing.assert_close(probs[0], block.sum(0), atol=1e-6, rtol=0)  # site 3
    torch.testing.assert_close(probs[1], block.sum(1), atol=1e-6, rtol=0)  # site 1


def test_single_site_conditionals_and_energy_match_the_joint():
    model = PairwiseMRFDenoiser.random(3, 4, scale=1.0, generator=5)
    states = enumerate_states(3, 4)
    log_joint = model.log_joint()
    assert torch.isclose(log_joint.exp().sum(), torch.tensor(1.0, dtype=torch.float64))
    x = states[37:38]
    for site in range(3):
        neighbours = x.repeat(4, 1)
        neighbours[:, site] = torch.arange(4)
        expected = log_joint[state_index(neighbours, 4)].softmax(0)
        got = model.conditional_logits(x, torch.tensor([site])).double().softmax(-1)[0, 0]
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


def test_incompatible_model_has_no_energy_but_a_stationary_law():
    model = PairwiseMRFDenoiser.random(3, 2, compatible=False, generator=0)
    assert not model.compatible
    with pytest.raises(ValueError, match="no joint"):
        model.energy(torch.zeros(1, 3, dtype=torch.long))
    kernel = glauber_transition_matrix(model, 3)
    pi = stationary_distribution(kernel)
    torch.testing.assert_close(pi @ kernel, pi)
    assert (pi > 0).all()


def test_closed_form_chains_and_bad_shapes():
    ising = PairwiseMRFDenoiser.ising_chain(3, coupling=0.7, field=0.1)
    assert ising.compatible
    # -E(+,+,+) = 3 * 0.1 + 2 * 0.7
    assert ising.energy(torch.ones(1, 3, dtype=torch.long)).item() == pytest.approx(-(0.3 + 1.4))
    potts = PairwiseMRFDenoiser.potts_chain(3, 4, coupling=1.0)
    assert potts.energy(torch.tensor([[2, 2, 1]])).item() == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="couplings must have shape"):
        PairwiseMRFDenoiser(torch.zeros(3, 2), torch.zeros(3, 3, 2, 3))
