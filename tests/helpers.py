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
