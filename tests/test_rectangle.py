import pytest
import torch

from mlm_dynamics import PairwiseMRFDenoiser
from mlm_dynamics.diagnostics.rectangle import rectangle_grid, sample_rectangles


def closed_form(model, i, j, a, a2, b, b2):
    """Pairwise-linear logits: R = L1 - L2 is the double difference of W[j, i]^T - W[i, j]."""
    d = model.couplings[j, i].T - model.couplings[i, j]  # [V_i, V_j]
    return float(d[a2, b2] - d[a2, b] - d[a, b2] + d[a, b])


def test_compatible_model_gives_zero_rectangles():
    model = PairwiseMRFDenoiser.random(6, 5, scale=2.0, generator=0)
    report = sample_rectangles(model, torch.randint(5, (8, 6)), pairs_per_context=6, num_tokens=4,
                               generator=torch.Generator().manual_seed(0))
    assert report.values.numel() == 8 * 6 * 36
    assert report.values.abs().max() < 1e-4
    assert report.prevalence == 0.0


def test_incompatible_model_matches_the_closed_form_and_scales_as_one_over_tau():
    model = PairwiseMRFDenoiser.random(5, 4, scale=1.0, compatible=False, generator=1)
    contexts = torch.randint(4, (3, 5))
    i, j = torch.tensor([0, 1, 4]), torch.tensor([3, 2, 0])
    tokens_i = torch.tensor([[0, 1, 3], [2, 3, 0], [1, 0, 2]])
    tokens_j = torch.tensor([[1, 2], [0, 3], [3, 2]])
    grid = rectangle_grid(model, contexts, i, j, tokens_i, tokens_j)
    assert grid.shape == (3, 3, 3, 2, 2)
    for c in range(3):
        for ia in range(3):
            for ia2 in range(3):
                expected = closed_form(model, int(i[c]), int(j[c]), int(tokens_i[c, ia]), int(tokens_i[c, ia2]),
                                       int(tokens_j[c, 0]), int(tokens_j[c, 1]))
                assert grid[c, ia, ia2, 0, 1].item() == pytest.approx(expected, abs=1e-5)
                assert grid[c, ia, ia2, 0, 0].item() == 0  # degenerate rectangles vanish identically
    hot = rectangle_grid(model, contexts, i, j, tokens_i, tokens_j, temperature=2.5)
    torch.testing.assert_close(hot, grid / 2.5)
    report = sample_rectangles(model, contexts, generator=torch.Generator().manual_seed(0))
    assert report.prevalence > 0.9


def test_far_and_uniform_options_and_errors():
    model = PairwiseMRFDenoiser.random(8, 6, compatible=False, generator=2)
    contexts = torch.randint(6, (2, 8))
    report = sample_rectangles(model, contexts, min_distance=5, token_choice="uniform", num_tokens=3,
                               generator=torch.Generator().manual_seed(0))
    assert (report.distances >= 5).all() and report.values.numel() == 2 * 4 * 9
    near = sample_rectangles(model, contexts, max_distance=1, generator=torch.Generator().manual_seed(0))
    assert (near.distances == 1).all()
    with pytest.raises(ValueError, match="no site pair"):
        sample_rectangles(model, contexts, min_distance=9, generator=torch.Generator())
    with pytest.raises(ValueError, match="differ"):
        rectangle_grid(model, contexts, torch.tensor([1, 2]), torch.tensor([1, 3]), contexts[:, :2], contexts[:, :2])
    with pytest.raises(ValueError, match="temperature"):
        rectangle_grid(model, contexts, torch.tensor([1, 2]), torch.tensor([0, 3]), contexts[:, :2], contexts[:, :2],
                       temperature=0.0)


def test_real_antibody_mlm_is_incompatible(antiberty):
    denoiser, codec = antiberty
    from mlm_dynamics.models import EXAMPLE_ANTIBODIES

    contexts = torch.tensor([codec.encode(EXAMPLE_ANTIBODIES[0])])
    report = sample_rectangles(denoiser, contexts, pairs_per_context=3, num_tokens=3, max_distance=3,
                               generator=torch.Generator().manual_seed(0))
    assert report.prevalence > 0
    assert report.summary()["abs_r_median"] > 1e-2
