"""Exact Glauber kernels on enumerable state spaces (``V^n`` small), for validation.

The random-scan single-site kernel at temperature tau is

    P(x, y) = (1/n) sum_i 1[y_{-i} = x_{-i}] softmax(l_i(x_{-i}) / tau)[y_i],

built here from any :class:`~mlm_dynamics.Denoiser` whose sequences are exactly its ``n`` sites (no frame tokens),
such as :class:`~mlm_dynamics.toy.PairwiseMRFDenoiser`. It exists for incompatible conditionals too; its stationary
law is then not a joint with those conditionals.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..sampling.categorical import tempered_log_probs
from .base import Denoiser
from .toy import enumerate_states


def state_index(tokens: Tensor, states: int) -> Tensor:
    """Row of each sequence ``[B, n]`` in :func:`~mlm_dynamics.toy.enumerate_states` order."""
    n = tokens.shape[1]
    weights = states ** torch.arange(n - 1, -1, -1, device=tokens.device)
    return (tokens.long() * weights).sum(1)


@torch.no_grad()
def glauber_transition_matrix(denoiser: Denoiser, num_sites: int, temperature: float = 1.0) -> Tensor:
    """The ``[V^n, V^n]`` float64 kernel above. Cost: ``n`` forward passes of ``V^n`` rows."""
    states = denoiser.vocab.size
    if states ** num_sites > 20_000:
        raise ValueError(f"num_sites: {states}^{num_sites} states are too many to enumerate")
    allowed = denoiser.vocab.allowed_mask(denoiser.device)
    configs = enumerate_states(num_sites, states, device=denoiser.device)
    rows = torch.arange(configs.shape[0], device=configs.device)
    base = state_index(configs, states)
    kernel = torch.zeros(configs.shape[0], configs.shape[0], dtype=torch.float64, device=configs.device)
    for site in range(num_sites):
        positions = torch.full((configs.shape[0], 1), site, device=configs.device)
        probs = tempered_log_probs(denoiser.conditional_logits(configs, positions)[:, 0], allowed, temperature,
                                   dtype=torch.float64).exp()
        stride = states ** (num_sites - 1 - site)
        for token in range(states):
            targets = base + (token - configs[:, site]) * stride
            kernel[rows, targets] += probs[:, token] / num_sites
    return kernel


def stationary_distribution(kernel: Tensor) -> Tensor:
    """The unique ``pi`` with ``pi P = pi``, ``sum pi = 1`` (least squares on the stacked linear system)."""
    size = kernel.shape[0]
    system = torch.cat([kernel.T - torch.eye(size, dtype=kernel.dtype, device=kernel.device),
                        torch.ones(1, size, dtype=kernel.dtype, device=kernel.device)])
    rhs = torch.zeros(size + 1, 1, dtype=kernel.dtype, device=kernel.device)
    rhs[-1] = 1.0
    return torch.linalg.lstsq(system, rhs).solution[:, 0].clamp_min(0.0)


def tv_to_stationarity(kernel: Tensor, initial: Tensor, num_steps: int) -> Tensor:
    """``d(t) = TV(mu_0 P^t, pi)`` for ``t = 0..num_steps``, shape ``[num_steps + 1]``."""
    target = stationary_distribution(kernel)
    law = initial.to(kernel.dtype)
    distances = [0.5 * (law - target).abs().sum()]
    for _ in range(num_steps):
        law = law @ kernel
        distances.append(0.5 * (law - target).abs().sum())
    return torch.stack(distances)
