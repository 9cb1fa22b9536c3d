import os

import pytest
import torch
from hypothesis import settings
from scipy.stats import chisquare

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
torch.set_num_threads(2)
# property tests draw the same examples on every run (CI stays reproducible); explore with --hypothesis-seed
settings.register_profile("reproducible", derandomize=True)
settings.load_profile("reproducible")

from mlm_dynamics.exact import state_index  # noqa: E402


def chi_square_pvalue(tokens: torch.Tensor, probs: torch.Tensor, states: int) -> float:
    """Goodness of fit of the empirical law of the rows of ``tokens`` to ``probs`` over all states."""
    counts = torch.bincount(state_index(tokens, states), minlength=probs.numel()).double()
    expected = probs.double() * counts.sum()
    return float(chisquare(counts.numpy(), expected.numpy()).pvalue)


@pytest.fixture(scope="session")
def antiberty():
    pytest.importorskip("antiberty")
    from mlm_dynamics.models import load_antiberty

    return load_antiberty()
