import pytest
import torch
from scipy.stats import chisquare

from mlm_dynamics.sampling.categorical import sample_categorical


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
