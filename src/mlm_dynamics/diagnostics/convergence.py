"""Convergence statistics of scalar chain projections (PLL energy, Hamming distance to start, embedding coordinates).

Input ``draws [M, N]``: M chains, N draws each. Following Vehtari, Gelman, Simpson, Carpenter & Buerkner (2021):

- split each chain in half (2M chains of N/2), rank all draws jointly (ties averaged) and map ranks to normal
  scores ``z = Phi^{-1}((r - 3/8) / (S + 1/4))``;
- R-hat of z: ``sqrt(var_plus / W)`` with ``W`` the mean within-chain variance, ``B/N'`` the variance of chain
  means and ``var_plus = (N' - 1)/N' W + B/N'``; the reported R-hat is the max of the bulk and the folded
  (``|x - median|``) versions;
- bulk ESS of z: ``M' N' / tau`` with ``tau = -1 + 2 sum_k P_k`` over Geyer's initial monotone sequence of pair
  sums ``P_k = rho_{2k} + rho_{2k+1}``, ``rho_t = 1 - (W - mean_m acov_m(t)) / var_plus``.

Constant draws (a chain stuck at one value) give ``nan`` R-hat: there is no variance to compare.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _check(draws: Tensor) -> Tensor:
    if draws.dim() != 2 or draws.shape[0] < 1 or draws.shape[1] < 4:
        raise ValueError(f"draws must have shape [chains, draws] with at least 4 draws, got {tuple(draws.shape)}")
    return draws.double()


def _split(draws: Tensor) -> Tensor:
    half = draws.shape[1] // 2
    return torch.cat([draws[:, :half], draws[:, draws.shape[1] - half:]])


def _normal_scores(draws: Tensor) -> Tensor:
    flat = draws.flatten()
    unique, inverse, counts = torch.unique(flat, return_inverse=True, return_counts=True)
    average_rank = counts.cumsum(0) - (counts - 1) / 2.0
    ranks = average_rank.double()[inverse]
    scores = torch.special.ndtri((ranks - 0.375) / (flat.numel() + 0.25))
    return scores.view_as(draws)


def _rhat(chains: Tensor) -> Tensor:
    n = chains.shape[1]
    within = chains.var(1).mean()
    between_over_n = chains.mean(1).var() if chains.shape[0] > 1 else torch.zeros((), dtype=chains.dtype)
    var_plus = (n - 1) / n * within + between_over_n
    return (var_plus / within).sqrt()


def split_rhat(draws: Tensor) -> float:
    """Rank-normalised split R-hat (max of bulk and folded)."""
    chains = _split(_check(draws))
    bulk = _rhat(_normal_scores(chains))
    folded = _rhat(_normal_scores((chains - chains.median()).abs()))
    return float(torch.maximum(bulk, folded))


def _autocovariance(chains: Tensor) -> Tensor:
    n = chains.shape[1]
    centred = chains - chains.mean(1, keepdim=True)
    size = 2 ** math.ceil(math.log2(2 * n))
    spectrum = torch.fft.rfft(centred, n=size)
    return torch.fft.irfft(spectrum * spectrum.conj(), n=size)[:, :n] / n


def effective_sample_size(draws: Tensor) -> float:
    """Bulk ESS of the rank-normalised split chains (``nan`` for constant draws)."""
    chains = _normal_scores(_split(_check(draws)))
    m, n = chains.shape
    acov = _autocovariance(chains)
    within = (acov[:, 0] * n / (n - 1)).mean()
    between_over_n = chains.mean(1).var() if m > 1 else torch.zeros((), dtype=chains.dtype)
    var_plus = (n - 1) / n * within + between_over_n
    if not var_plus > 0:
        return math.nan
    rho = 1 - (within - acov.mean(0)) / var_plus
    rho[0] = 1.0
    pairs = rho[: 2 * (n // 2)].view(-1, 2).sum(1)
    negative = (pairs < 0).nonzero()
    pairs = pairs[: int(negative[0]) if len(negative) else len(pairs)]
    pairs = torch.cummin(pairs, 0).values  # initial monotone sequence
    tau = max(-1 + 2 * float(pairs.sum()), 1 / math.log10(m * n))
    return m * n / tau
