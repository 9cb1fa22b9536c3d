"""Exact Glauber kernels on enumerable state spaces (``V^n`` small), for validation.

The random-scan single-site kernel at temperature tau is

    P(x, y) = (1/n) sum_i 1[y_{-i} = x_{-i}] softmax(l_i(x_{-i}) / tau)[y_i],

built here from any :class:`~mlm_dynamics.Denoiser` whose sequences are exactly its ``n`` sites (no frame tokens),
such as :class:`~mlm_dynamics.models.toy.PairwiseMRFDenoiser`. It exists for incompatible conditionals too; its
stationary law is then not a joint with those conditionals.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..models.base import Denoiser
from ..models.toy import enumerate_states
from .categorical import tempered_log_probs


def state_index(tokens: Tensor, states: int) -> Tensor:
    """Row of each sequence ``[B, n]`` in :func:`~mlm_dynamics.models.toy.enumerate_states` order."""
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


@torch.no_grad()
def expected_meeting_times(denoiser: Denoiser, num_sites: int, temperature: float = 1.0) -> Tensor:
    """``E[T_meet]`` ``[V^n, V^n]`` of the coupled chains of :class:`~mlm_dynamics.sampling.CoupledGlauberChains`.

    The pair kernel: a shared uniform site ``i``; with ``m = min(p, q)`` for the two conditionals at ``i`` and
    ``s = sum m``, the new pair is ``(a, a)`` with probability ``m(a)`` and ``(a, b)`` with probability
    ``(p - m)(a) (q - m)(b) / (1 - s)`` (the construction of :func:`~mlm_dynamics.sampling.maximal_coupling`). The
    diagonal is absorbing; ``E[T]`` solves ``(I - Q) t = 1`` on the off-diagonal pairs. Cost: ``n`` forward passes of
    ``V^n`` rows and a dense solve over ``V^n (V^n - 1)`` pairs (``V^n <= 64``).
    """
    states = denoiser.vocab.size
    size = states**num_sites
    if size > 64:
        raise ValueError(f"num_sites: {states}^{num_sites} states give too many pairs to solve exactly")
    allowed = denoiser.vocab.allowed_mask(denoiser.device)
    configs = enumerate_states(num_sites, states, device=denoiser.device)
    base = state_index(configs, states)
    pair_kernel = torch.zeros(size, size, size, size, dtype=torch.float64, device=configs.device)
    for site in range(num_sites):
        positions = torch.full((size, 1), site, device=configs.device)
        probs = tempered_log_probs(denoiser.conditional_logits(configs, positions)[:, 0], allowed, temperature,
                                   dtype=torch.float64).exp()  # [S, V]
        stride = states ** (num_sites - 1 - site)
        tokens = torch.arange(states, device=configs.device)
        targets = base[:, None] + (tokens[None, :] - configs[:, site:site + 1]) * stride  # [S, V]
        p, q = probs[:, None, :], probs[None, :, :]  # [S, 1, V] for x, [1, S, V] for y
        overlap = torch.minimum(p, q)  # [S, S, V]
        apart = (1 - overlap.sum(-1))[..., None, None].clamp_min(1e-300)
        joint = (p - overlap)[..., :, None] * (q - overlap)[..., None, :] / apart + torch.diag_embed(overlap)
        rows = torch.arange(size, device=configs.device)
        index = (rows[:, None, None, None], rows[None, :, None, None], targets[:, None, :, None],
                 targets[None, :, None, :])
        pair_kernel.index_put_(tuple(i.expand(size, size, states, states) for i in index), joint / num_sites,
                               accumulate=True)
    flat = pair_kernel.reshape(size * size, size * size)
    off = ~torch.eye(size, dtype=torch.bool, device=configs.device).flatten()
    transient = flat[off][:, off]
    times = torch.linalg.solve(torch.eye(int(off.sum()), dtype=torch.float64, device=configs.device) - transient,
                               torch.ones(int(off.sum()), dtype=torch.float64, device=configs.device))
    out = torch.zeros(size * size, dtype=torch.float64, device=configs.device)
    out[off] = times
    return out.view(size, size)


__all__ = ["expected_meeting_times", "glauber_transition_matrix", "state_index", "stationary_distribution",
           "tv_to_stationarity"]
