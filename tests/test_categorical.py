import pytest
import torch
from scipy.stats import chisquare

from mlm_dynamics.sampling.categorical import inverse_cdf_law, sample_categorical


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inverse_cdf_draws_have_the_right_law_and_skip_zero_weights(dtype):
    weights = torch.tensor([0.0, 3.0, 0.0, 1.0, 6.0, 0.0], dtype=dtype)
    draws = sample_categorical(weights.expand(60_000, -1), torch.Generator().manual_seed(0))
    counts = torch.bincount(draws, minlength=6)
    assert counts[[0, 2, 5]].sum() == 0
    assert chisquare(counts[[1, 3, 4]].numpy(), (60_000 * weights[[1, 3, 4]] / 10).numpy()).pvalue > 1e-3


def test_rounding_up_to_the_total_falls_back_to_a_positive_token():
    weights = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 2.0], [0.0, 5.0, 0.0]])
    for seed in range(20):
        assert sample_categorical(weights, torch.Generator().manual_seed(seed)).tolist() == [0, 2, 1]


def test_bad_weights_raise():
    with pytest.raises(ValueError, match="positive total"):
        sample_categorical(torch.zeros(2, 3), torch.Generator())
    with pytest.raises(ValueError, match=r"shape \[N, V\]"):
        sample_categorical(torch.ones(3), torch.Generator())


def test_inverse_cdf_law_is_the_exact_law_of_the_float32_draw_including_unreachable_tokens():
    # tokens 1 and 4 have positive weight but no 2^-24 grid point falls in their cumulative intervals
    weights = torch.tensor([0.4, 1e-8, 0.3, 2e-7, 1e-9, 0.3 - 2.11e-7], dtype=torch.float32)
    law = inverse_cdf_law(weights)
    assert law.sum().item() == pytest.approx(1.0, abs=1e-12)
    unreachable = (law == 0) & (weights > 0)
    assert unreachable.any()  # the float32 chain cannot reach every state
    num = 400_000
    draws = sample_categorical(weights.expand(num, -1), torch.Generator().manual_seed(0))
    counts = torch.bincount(draws, minlength=len(weights))
    assert counts[law == 0].sum() == 0
    # chi-square over the tokens with expected counts >= 5 (law >= 1.25e-5); the rest pooled into one cell
    big = law * num >= 5
    observed = torch.cat([counts[big], counts[~big].sum()[None]]).double()
    expected = torch.cat([law[big], law[~big].sum()[None]]) * num
    keep = expected > 0
    assert chisquare(observed[keep].numpy(), expected[keep].numpy()).pvalue > 1e-3
    exact = inverse_cdf_law(weights.double())
    torch.testing.assert_close(exact, weights.double() / weights.double().sum(), atol=1e-15, rtol=0)
    assert (exact > 0).all()  # float64 reaches every token of positive weight


def test_inverse_cdf_law_rejects_batches():
    with pytest.raises(ValueError, match="one float32 or float64 row"):
        inverse_cdf_law(torch.ones(2, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_uniform_exactly_on_a_cdf_boundary_never_draws_a_zero_weight_token(dtype, monkeypatch):
    """Weights (0, 1, 0, 1): the cumulative sums are (0, 1, 1, 2). A uniform of 0 (u * total = 0 = cdf[0]) and one of
    0.5 (u * total = 1 = cdf[1] = cdf[2]) land exactly on boundaries; the first token with cdf > u * total is token 1,
    then token 3, never the zero-weight tokens 0 and 2 that a search for cdf >= u * total would return."""
    weights = torch.tensor([[0.0, 1.0, 0.0, 1.0]] * 2, dtype=dtype)
    boundaries = torch.tensor([0.0, 0.5], dtype=dtype)
    monkeypatch.setattr(torch, "rand", lambda *args, **kwargs: boundaries.clone())
    assert sample_categorical(weights, torch.Generator()).tolist() == [1, 3]
    from mlm_dynamics.sampling.categorical import inverse_cdf

    assert inverse_cdf(weights, boundaries).tolist() == [1, 3]
    wrong = torch.searchsorted(weights.cumsum(-1), (boundaries * 2)[:, None], right=False).squeeze(1)
    assert wrong.tolist() == [0, 1]  # the left search would return token 0, of weight zero
