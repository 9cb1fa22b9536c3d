import os

import pytest
import torch
from hypothesis import settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
torch.set_num_threads(2)
# property tests draw the same examples on every run (CI stays reproducible); explore with --hypothesis-seed
settings.register_profile("reproducible", derandomize=True)
settings.load_profile("reproducible")


@pytest.fixture(scope="session")
def antiberty():
    pytest.importorskip("antiberty")
    from mlm_dynamics.models import load_antiberty

    return load_antiberty()
