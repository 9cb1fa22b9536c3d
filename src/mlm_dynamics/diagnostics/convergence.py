"""Convergence statistics of scalar chain projections (PLL energy, Hamming distance to start, embedding coordinates).

Shaped like ArviZ's ``rhat``/``ess``: ``draws [..., chains, draws]`` gives a tensor over the leading dimensions, so
a whole (temperature x length) grid is one call. The algorithms are those of Vehtari, Gelman, Simpson, Carpenter &
Buerkner (2021), "Rank-normalization, folding, and localization: an improved R-hat", Bayesian Analysis 16(2), as
implemented in ArviZ 0.23 and Stan:

- split every chain into halves (``2M`` chains of ``N' = floor(N / 2)`` draws; an odd middle draw is dropped);
- rank all draws of one leading index jointly (ties averaged) and map ranks ``r`` to normal scores
  ``z = Phi^{-1}((r - 3/8) / (S + 1/4))``, ``S = 2 M N'``;
- ``R-hat = sqrt(var_plus / W)``: ``W`` the mean within-chain variance, ``B / N'`` the variance of the chain means,
  ``var_plus = (N' - 1) / N' W + B / N'``; ``method="rank"`` reports the max of the bulk (z of the draws) and the
  folded (z of ``|x - median|``) values;
- ``ESS = M' N' / tau``, ``tau = -1 + 2 sum_{t <= T} rho_t + rho_{T + 1}`` with ``rho_t = 1 - (W - mean acov_t) /
  var_plus``, summed over Geyer's initial positive sequence of pair sums ``rho_{2k} + rho_{2k+1}`` made monotone;
  the pair loop stops at lag ``N' - 3`` and the even term after the last pair is added when positive (Stan's
  convention; we follow it exactly, so values agree with ArviZ to rounding). ``tau >= 1 / log10(M' N')``.
  ``method="bulk"`` uses the normal scores, ``"tail"`` the min over the indicators ``x <= q_0.05``, ``x <= q_0.95``.

Constant draws (a chain stuck at one value) give ``nan`` R-hat (no variance to compare) and ESS ``M N``.
Cost: one sort and one FFT of length ``>= 2 N'`` per leading index.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

RHAT_METHODS = ("rank", "bulk", "folded")
ESS_METHODS = ("bulk", "tail")


def _check(draws: Tensor, name: str = "draws") -> Tensor:
    if not isinstance(draws, Tensor) or draws.dim() < 2 or draws.shape[-2] < 1 or draws.shape[-1] < 4:
        raise ValueError(f"{name} must have shape [..., chains, draws] with at least 4 draws, got "
                         f"{tuple(getattr(draws, 'shape', ()))}")
    if draws.is_complex() or not torch.isfinite(draws.double()).all():
        raise ValueError(f"{name} must be finite real numbers")
    return draws.double()


def split_chains(draws: Tensor) -> Tensor:
    """``[..., M, N] -> [..., 2M, N // 2]``: first and last halves of each chain (an odd middle draw dropped)."""
    half = draws.shape[-1] // 2
    return torch.cat([draws[..., :half], draws[..., draws.shape[-1] - half:]], dim=-2)


def normal_scores(draws: Tensor) -> Tensor:
    """Rank-normalised ``z`` of ``[..., M, N]``, ranking the ``M N`` draws of each leading index jointly."""
    flat = draws.flatten(-2)
    ordered = flat.sort(-1).values
    below = torch.searchsorted(ordered, flat, right=False)
    through = torch.searchsorted(ordered, flat, right=True)
    rank = (below + 1 + through).double() / 2  # average rank of ties, 1-based
    return torch.special.ndtri((rank - 0.375) / (flat.shape[-1] + 0.25)).view_as(draws)


def _rhat(chains: Tensor) -> Tensor:
    n = chains.shape[-1]
    within = chains.var(-1).mean(-1)
    between_over_n = chains.mean(-1).var(-1)
    return (((n - 1) / n * within + between_over_n) / within).sqrt()


def rhat(draws: Tensor, method: str = "rank") -> Tensor:
    """Split R-hat of ``draws [..., chains, draws]`` over the leading dimensions (``method``: rank, bulk, folded)."""
    if method not in RHAT_METHODS:
        raise ValueError(f"method must be one of {RHAT_METHODS}, got {method!r}")
    chains = split_chains(_check(draws))
    bulk = _rhat(normal_scores(chains))
    if method == "bulk":
        return bulk
    median = chains.flatten(-2).quantile(0.5, dim=-1)[..., None, None]
    folded = _rhat(normal_scores((chains - median).abs()))
    return folded if method == "folded" else torch.maximum(bulk, folded)


def autocovariance(chains: Tensor) -> Tensor:
    """Biased autocovariance ``[..., M, N]`` of each chain at lags ``0..N-1`` (divided by ``N``), by FFT."""
    n = chains.shape[-1]
    centred = chains - chains.mean(-1, keepdim=True)
    size = 2 ** math.ceil(math.log2(2 * n))
    spectrum = torch.fft.rfft(centred, n=size)
    return torch.fft.irfft(spectrum * spectrum.conj(), n=size)[..., :n] / n


def _ess(chains: Tensor) -> Tensor:
    """ESS of ``[..., M, N]`` split chains by Geyer's initial monotone sequence (see the module docstring)."""
    m, n = chains.shape[-2:]
    acov = autocovariance(chains)
    mean_var = acov[..., 0].mean(-1) * n / (n - 1)
    var_plus = mean_var * (n - 1) / n
    if m > 1:
        var_plus = var_plus + chains.mean(-1).var(-1)
    rho = 1 - (mean_var[..., None] - acov.mean(-2)) / var_plus[..., None]  # [..., N]
    rho[..., 0] = 1.0
    num_pairs = n // 2
    pairs = rho[..., : 2 * num_pairs].unflatten(-1, (num_pairs, 2)).sum(-1)  # P_k = rho_2k + rho_2k+1
    # pair k >= 1 is examined while 2k - 1 < n - 3 and P_{k-1} > 0; k_last = the last pair examined
    k = torch.arange(num_pairs, device=chains.device)
    examined = (2 * k - 1 < n - 3) & (k >= 1)
    still_positive = torch.cumprod((pairs > 0).long(), -1)  # [..., K]: P_0..P_k all > 0
    runs = examined & torch.cat([torch.ones_like(still_positive[..., :1]), still_positive[..., :-1]], -1).bool()
    k_last = runs.long().sum(-1)  # pairs examined after P_0 (they form a prefix)
    monotone = torch.cummin(pairs, -1).values
    pair_total = (monotone * (k < k_last[..., None])).sum(-1)
    even_last = rho.gather(-1, (2 * k_last)[..., None]).squeeze(-1)
    pair_last = pairs.gather(-1, k_last[..., None]).squeeze(-1)
    extra = torch.where((even_last > 0) | (pair_last >= 0), even_last, torch.zeros_like(even_last))
    tau = -1 + 2 * pair_total + extra
    total = m * n
    tau = tau.clamp_min(1 / math.log10(total))
    constant = (chains.flatten(-2).amax(-1) - chains.flatten(-2).amin(-1)) < 1e-15
    return torch.where(constant, torch.full_like(tau, float(total)), total / tau)


def ess(draws: Tensor, method: str = "bulk") -> Tensor:
    """Effective sample size of ``draws [..., chains, draws]`` over the leading dimensions (``bulk`` or ``tail``)."""
    if method not in ESS_METHODS:
        raise ValueError(f"method must be one of {ESS_METHODS}, got {method!r}")
    draws = _check(draws)
    if method == "bulk":
        return _ess(normal_scores(split_chains(draws)))
    levels = torch.tensor([0.05, 0.95], dtype=torch.float64, device=draws.device)
    cut = draws.flatten(-2).quantile(levels, dim=-1)  # [2, ...]
    tails = [_ess(split_chains((draws <= q[..., None, None]).double())) for q in cut]
    return torch.minimum(*tails)


__all__ = ["ESS_METHODS", "RHAT_METHODS", "autocovariance", "ess", "normal_scores", "rhat", "split_chains"]
