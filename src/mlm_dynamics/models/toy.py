"""Toy denoisers with exactly known conditionals, for validating samplers and diagnostics.

:class:`PairwiseMRFDenoiser` has single-site logits on ``n`` sites and ``V`` states

    l_i(x_{-i})[a] = h_i[a] + sum_{j != i} W[i, j, a, x_j].

With ``W[j, i] = W[i, j]^T`` (``compatible=True``) these are the conditionals of the Potts/Ising-type joint
``pi(x) ~ exp(-E(x))``, ``E(x) = -sum_i h_i[x_i] - sum_{i<j} W[i, j, x_i, x_j]``; conditionals of several masked
sites are then the exact marginals of the block given the rest (by enumeration of the block). With an asymmetric
``W`` no joint has these conditionals (the rectangle statistic is the double difference of ``W[j, i]^T - W[i, j]``),
and masked sites simply drop out of the sum, as in an MLM.
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor

from .._random import Randomness, as_generator
from .base import Denoiser, VocabInfo


class PairwiseMRFDenoiser(Denoiser):
    """Denoiser with pairwise-linear logits; see the module docstring.

    Args:
        fields: ``[n, V]`` single-site terms h.
        couplings: ``[n, n, V, V]`` pair terms W (the diagonal ``W[i, i]`` is ignored).
    """

    max_block_states = 4096
    fields: Tensor
    couplings: Tensor

    def __init__(self, fields: Tensor, couplings: Tensor) -> None:
        super().__init__()
        if fields.dim() != 2 or fields.shape[0] < 1 or fields.shape[1] < 2:
            raise ValueError(f"fields must be [n, V] with n >= 1 sites and V >= 2 states, got {tuple(fields.shape)}")
        n, states = fields.shape
        if couplings.shape != (n, n, states, states):
            raise ValueError(f"couplings must have shape {(n, n, states, states)}, got {tuple(couplings.shape)}")
        off_diagonal = 1.0 - torch.eye(n, dtype=fields.dtype)
        self.register_buffer("fields", fields.clone())
        self.register_buffer("couplings", couplings * off_diagonal[:, :, None, None])
        self.vocab = VocabInfo(size=states, max_length=n)
        self.compatible = bool(torch.allclose(self.couplings, self.couplings.permute(1, 0, 3, 2)))

    @property
    def num_sites(self) -> int:
        """Number of sites of the model (its sequences have this length)."""
        return int(self.fields.shape[0])

    @classmethod
    def ising_chain(cls, n: int, coupling: float, field: float = 0.0) -> PairwiseMRFDenoiser:
        """Spins ``s = 2x - 1`` on a path: ``-E = field * sum_i s_i + coupling * sum_i s_i s_{i+1}``.

        Examples:
            An inner spin with both neighbours up is up with probability ``sigmoid(4 J)`` (exact conditionals):

            >>> import torch
            >>> from mlm_dynamics import PairwiseMRFDenoiser
            >>> ising = PairwiseMRFDenoiser.ising_chain(5, coupling=1.0)
            >>> logits = ising.conditional_logits(torch.ones(1, 5, dtype=torch.long), torch.tensor([[2]]))
            >>> round(float(logits.softmax(-1)[0, 0, 1]), 6), round(float(torch.sigmoid(torch.tensor(4.0))), 6)
            (0.982014, 0.982014)
        """
        spins = torch.tensor([-1.0, 1.0], dtype=torch.float64)
        pair = coupling * torch.outer(spins, spins)
        return cls._chain(n, field * spins, pair)

    @classmethod
    def curie_weiss(cls, n: int, coupling: float, field: float = 0.0) -> PairwiseMRFDenoiser:
        """Mean-field Ising: ``-E = field * sum_i s_i + (coupling / n) * sum_{i<j} s_i s_j`` on ``n`` spins, so
        ``P(s_i = +1 | rest) = sigmoid(2 (coupling m_i + field) / tau)`` with ``m_i = (1/n) sum_{j != i} s_j``.

        A phase transition at ``tau = coupling`` (Levin, Luczak & Peres 2010): above it Glauber dynamics mixes in
        ``n log n / (2 (1 - coupling / tau))`` steps, below it a chain in one magnetisation well needs a time
        exponential in ``n`` to reach the other.

        Examples:
            With every other spin up, a spin is up with probability ``sigmoid(2 J (n - 1) / (n tau))``:

            >>> import torch
            >>> from mlm_dynamics import PairwiseMRFDenoiser
            >>> model = PairwiseMRFDenoiser.curie_weiss(4, coupling=1.0)
            >>> logits = model.conditional_logits(torch.ones(1, 4, dtype=torch.long), torch.tensor([[0]]))
            >>> round(float(logits.softmax(-1)[0, 0, 1]), 6), round(float(torch.sigmoid(torch.tensor(1.5))), 6)
            (0.817574, 0.817574)
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be an integer number of sites >= 1, got {n!r}")
        spins = torch.tensor([-1.0, 1.0], dtype=torch.float64)
        pair = (coupling / n) * torch.outer(spins, spins)
        return cls((field * spins).expand(n, 2).clone(), pair.expand(n, n, 2, 2).clone())

    @classmethod
    def potts_chain(cls, n: int, states: int, coupling: float) -> PairwiseMRFDenoiser:
        """``-E = coupling * sum_i 1[x_i = x_{i+1}]`` on a path of ``n`` sites with ``states`` colours."""
        return cls._chain(n, torch.zeros(states, dtype=torch.float64),
                          coupling * torch.eye(states, dtype=torch.float64))

    @classmethod
    def _chain(cls, n: int, field: Tensor, pair: Tensor) -> PairwiseMRFDenoiser:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be an integer number of sites >= 1, got {n!r}")
        states = field.shape[0]
        couplings = torch.zeros(n, n, states, states, dtype=torch.float64)
        for i in range(n - 1):
            couplings[i, i + 1] = pair
            couplings[i + 1, i] = pair.T
        return cls(field.expand(n, states).clone(), couplings)

    @classmethod
    def random(cls, n: int, states: int, *, scale: float = 1.0, compatible: bool = True,
               generator: Randomness = 0) -> PairwiseMRFDenoiser:
        """Gaussian fields and couplings of standard deviation ``scale``, drawn from ``generator`` (a
        ``torch.Generator``, or an int seed for one); asymmetric when ``compatible=False``."""
        generator = as_generator(generator)
        fields = scale * torch.randn(n, states, generator=generator, dtype=torch.float64)
        couplings = scale * torch.randn(n, n, states, states, generator=generator, dtype=torch.float64)
        if compatible:
            couplings = (couplings + couplings.permute(1, 0, 3, 2)) / 2
        return cls(fields, couplings)

    def energy(self, tokens: Tensor) -> Tensor:
        """``E(x)`` of shape ``[B]`` (defined for compatible models only)."""
        if not self.compatible:
            raise ValueError("energy: incompatible conditionals have no joint, hence no energy")
        x = tokens.long()
        singles = self.fields.gather(1, x.T).sum(0)
        idx = torch.arange(self.num_sites, device=x.device)
        pair_terms = self.couplings[idx[:, None], idx[None, :], x[:, :, None], x[:, None, :]]  # [B, n, n]
        return -(singles + pair_terms.triu(1).sum((1, 2)))

    def log_joint(self) -> Tensor:
        """Exact normalised ``log pi`` over all ``V^n`` states, in :func:`enumerate_states` order."""
        log_weights = -self.energy(enumerate_states(self.num_sites, self.vocab.size, device=self.fields.device))
        return log_weights - log_weights.logsumexp(0)

    def _masked_logits(self, tokens: Tensor, positions: Tensor) -> Tensor:
        x = tokens.long()
        batch, k = positions.shape
        n, states = self.fields.shape
        free = torch.ones(batch, n, dtype=self.fields.dtype, device=x.device).scatter(1, positions, 0.0)
        # pair[b, s, a] = sum_{j free} W[p_s, j, a, x_j]
        w = self.couplings[positions]  # [B, k, n, V, V]
        w_at_x = w.gather(4, x[:, None, :, None, None].expand(batch, k, n, states, 1)).squeeze(4)  # [B, k, n, V]
        logits = self.fields[positions] + (w_at_x * free[:, None, :, None]).sum(2)
        if k == 1 or not self.compatible:
            return logits.float()
        return self._block_marginals(logits, positions).float()

    def _block_marginals(self, logits: Tensor, positions: Tensor) -> Tensor:
        """Exact marginal log-probabilities of each masked site, summing the block's joint over the others."""
        batch, k, states = logits.shape
        if states ** k > self.max_block_states:
            raise ValueError(f"positions: exact block marginals need {states}^{k} states, above "
                             f"{self.max_block_states}")
        configs = enumerate_states(k, states, device=logits.device)  # [C, k]
        joint = logits.gather(2, configs.T[None].expand(batch, k, -1)).sum(1)  # [B, C]
        for s, t in itertools.combinations(range(k), 2):
            w = self.couplings[positions[:, s], positions[:, t]]  # [B, V, V]
            joint = joint + w[:, configs[:, s], configs[:, t]]
        joint = joint.log_softmax(1)
        # marginal of site s: logsumexp of the joint over configurations with y_s = a
        one_hot = torch.nn.functional.one_hot(configs, states).to(joint.dtype)  # [C, k, V]
        masked = joint[:, :, None, None] + one_hot.log()[None]  # [B, C, k, V]
        return masked.logsumexp(1)


def enumerate_states(n: int, states: int, device: torch.device | str | None = None) -> Tensor:
    """All ``states^n`` sequences ``[states^n, n]`` in lexicographic order (site 0 most significant)."""
    grids = torch.cartesian_prod(*[torch.arange(states, device=device)] * n)
    return grids.reshape(-1, n) if n > 1 else grids[:, None]


__all__ = ["PairwiseMRFDenoiser", "enumerate_states"]
