"""Shared test helpers (import from here, not from conftest)."""

from __future__ import annotations

import torch
from scipy.stats import chisquare

from mlm_dynamics.models.exact import state_index


def chi_square_pvalue(tokens: torch.Tensor, probs: torch.Tensor, states: int) -> float:
    """Goodness of fit of the empirical law of the rows of ``tokens`` to ``probs`` over all states."""
    counts = torch.bincount(state_index(tokens, states), minlength=probs.numel()).double()
    expected = probs.double() * counts.sum()
    return float(chisquare(counts.numpy(), expected.numpy()).pvalue)


def modules_of_test_extra() -> list[str]:
    """Top-level modules that only the ``test`` extra brings (not core or ``assets`` or their dependencies).

    Examples run with these hidden, so they work in the install the README gives users.
    """
    from importlib.metadata import PackageNotFoundError, packages_distributions, requires

    from packaging.requirements import Requirement

    def closure(roots: list[str]) -> set[str]:
        seen: set[str] = set()
        todo = list(roots)
        while todo:
            name = todo.pop().lower().replace("_", "-")
            if name in seen:
                continue
            seen.add(name)
            try:
                dependencies = requires(name) or []
            except PackageNotFoundError:
                continue
            todo += [Requirement(d).name for d in dependencies
                     if Requirement(d).marker is None or Requirement(d).marker.evaluate({"extra": ""})]
        return seen

    own = [Requirement(d) for d in requires("mlm_dynamics") or []]
    user = closure([r.name for r in own if r.marker is None or r.marker.evaluate({"extra": "assets"})])
    test = closure([r.name for r in own if r.marker is not None and r.marker.evaluate({"extra": "test"})])
    only = test - user
    return sorted(module for module, dists in packages_distributions().items()
                  if any(d.lower().replace("_", "-") in only for d in dists) and module.isidentifier())


def potts_corpus(num: int = 64, length: int = 10, seed: int = 0) -> torch.Tensor:
    """Sequences [CLS] x [SEP] of a Potts chain on content ids 4..9 (structure to learn)."""
    from mlm_dynamics import GlauberSampler, PairwiseMRFDenoiser

    potts = PairwiseMRFDenoiser.potts_chain(length, 6, coupling=1.5)
    sampler = GlauberSampler(potts, 1.0)
    state = sampler.init_state(torch.randint(6, (num, length), generator=torch.Generator().manual_seed(seed)),
                               seed=seed)
    for _ in sampler.run(state, 200):
        pass
    return torch.cat([torch.ones(num, 1, dtype=torch.long), state.tokens + 4, torch.full((num, 1), 2)], 1)


def tiny_lightning_classes():
    """A masked-denoising module around a tiny random BERT and a Potts data module, for LightningCLI tests."""
    import lightning as L
    from torch.utils.data import DataLoader

    from mlm_dynamics.training import MaskedDenoiserModule, tiny_bert_denoiser

    class TinyDenoiser(MaskedDenoiserModule):
        def __init__(self, lr: float = 3e-3) -> None:
            super().__init__(tiny_bert_denoiser(), lr=lr)

    class PottsData(L.LightningDataModule):
        def __init__(self, batch_size: int = 8) -> None:
            super().__init__()
            self.batch_size = batch_size

        def train_dataloader(self) -> DataLoader:
            return DataLoader(potts_corpus(), batch_size=self.batch_size, shuffle=True)

    return TinyDenoiser, PottsData
