"""Local logit margins and the per-step escape bound behind metastability.

Margin of the current token at site i:

    Delta_i(x) = l_i(x_{-i})[x_i] - max_{v != x_i, allowed} l_i(x_{-i})[v]     (tau = 1 logits).

If every alternative is at least ``Delta`` below the current token, one heat-bath update at i changes the token
with probability

    1 - p_i^tau(x_i) <= q(Delta, tau) = (V - 1) e^{-Delta/tau} / (1 + (V - 1) e^{-Delta/tau}),

with ``V`` the number of allowed tokens (equality when ``V = 2``). A basin where ``Delta_i >= Delta`` at every site
and state is left within ``t`` steps with probability at most ``t q(Delta, tau)``: escape times grow like
``e^{Delta / tau} / (V - 1)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..models.base import Denoiser, check_attention_mask


def escape_probability_bound(margin: Tensor, num_allowed: int, temperature: float) -> Tensor:
    """``q(Delta, tau)`` above, elementwise (valid for any real margin)."""
    log_others = math.log(num_allowed - 1) - margin.double() / temperature
    return torch.sigmoid(log_others)


@dataclass
class LocalMargins:
    """Margins of the current tokens at the chains' sites.

    Sites whose current token cannot be proposed (still masked during diffusion decoding, say) have no margin:
    they are ``nan`` in the per-site tensors and left out of every mean and minimum.

    Attributes:
        margin: ``[B, n]`` ``Delta_i`` per chain and site (negative where the current token is not the arg-max).
        logits: ``[B, n, V]`` the tau = 1 conditional logits (forbidden tokens at ``-inf``).
        current: ``[B, n]`` the current tokens at the sites.
        num_allowed: number of proposable tokens V.
    """

    margin: Tensor
    logits: Tensor
    current: Tensor
    num_allowed: int

    @property
    def valid(self) -> Tensor:
        """``[B, n]`` True where the current token is proposable (a margin exists)."""
        return torch.isfinite(self.margin)

    def change_probability(self, temperature: float) -> Tensor:
        """Exact ``1 - p_i^tau(x_i)`` per chain and site, ``[B, n]`` (``nan`` where there is no margin)."""
        log_p = (self.logits / temperature).log_softmax(-1).gather(-1, self.current[..., None]).squeeze(-1)
        return torch.where(self.valid, -torch.expm1(log_p), math.nan)

    def pseudo_log_likelihood_energy(self) -> Tensor:
        """``[B]``: ``E(x) = -sum_i log softmax(l_i)[x_i]`` over the sites with a margin, the energy
        :class:`~mlm_dynamics.sampling.energy.PseudoLogLikelihoodEnergy` computes from the same rows (no forward)."""
        log_p = self.logits.log_softmax(-1).gather(-1, self.current[..., None]).squeeze(-1)
        return -torch.where(self.valid, log_p, 0.0).sum(1)

    def escape_bound(self, temperature: float) -> Tensor:
        """``q(Delta_i, tau)`` per chain and site, ``[B, n]``; bounds :meth:`change_probability`."""
        return escape_probability_bound(self.margin, self.num_allowed, temperature)

    def step_escape_bound(self, temperature: float) -> Tensor:
        """``[B]``: bound on the probability that one random-scan step changes the chain, ``(1/n) sum_i q_i``
        over the sites with a margin."""
        return self.escape_bound(temperature).nanmean(1)

    def summary(self, temperature: float) -> dict[str, float]:
        """``margin_mean``, ``margin_min``, ``change_probability_mean``, ``step_escape_bound_mean`` at tau, and
        ``margin_sites``, the fraction of sites with a margin."""
        margins = self.margin[self.valid]
        return {"margin_mean": float(margins.mean()) if margins.numel() else math.nan,
                "margin_min": float(margins.min()) if margins.numel() else math.nan,
                "change_probability_mean": float(self.change_probability(temperature).nanmean()),
                "step_escape_bound_mean": float(self.step_escape_bound(temperature).nanmean()),
                "margin_sites": float(self.valid.double().mean())}


@torch.no_grad()
def local_margins(denoiser: Denoiser, tokens: Tensor, *, sites: Tensor | None = None, site_counts: Tensor | None = None,
                  chunk_size: int = 256, attention_mask: Tensor | None = None) -> LocalMargins:
    """Margins of ``tokens [B, L]`` at ``sites [B, n]`` (default: all non-frame, non-padding positions); with
    ``site_counts [B]`` row ``b`` has margins at its first ``site_counts[b]`` sites only (the padding is ``nan``,
    left out like masked tokens); ``attention_mask [B, L]``: each row's padding. Cost: ``B' n`` forward rows, ``B'`` the
    number of distinct rows (chains that share a start cost one row set)."""
    mask = check_attention_mask(attention_mask, tokens)
    if sites is None and mask is not None:
        sites, site_counts = denoiser.padded_sites(tokens, attention_mask=mask)
    if sites is None:
        sites = denoiser.resampleable_sites(tokens)
    if sites.dim() not in (1, 2) or sites.shape[-1] == 0:
        raise ValueError(f"sites must be [n] or [B, n] positions with n >= 1, got {tuple(sites.shape)}")
    sites = sites.to(tokens.device).expand(tokens.shape[0], -1)
    batch, n = sites.shape
    # rows that repeat one another (chains started from one sequence) are computed once
    key = torch.cat([tokens, sites] + ([] if mask is None else [mask.long()]), 1)
    distinct, inverse = torch.unique(key, dim=0, return_inverse=True)
    first = torch.full((len(distinct),), batch, dtype=torch.long, device=tokens.device).scatter_reduce(
        0, inverse, torch.arange(batch, device=tokens.device), "amin")
    rows = tokens[first].repeat_interleave(n, 0)
    positions = sites[first].reshape(-1, 1)
    masks = None if mask is None else mask[first].repeat_interleave(n, 0)
    logits = denoiser.chunked_conditional_logits(rows, positions, chunk_size, masks)[:, 0].double()
    logits = logits.view(len(first), n, -1)[inverse]
    allowed = denoiser.vocab.allowed_mask(tokens.device)
    logits = logits.masked_fill(~allowed, -math.inf)
    current = tokens.gather(1, sites)
    own = logits.gather(2, current[..., None]).squeeze(-1)
    rivals = logits.scatter(2, current[..., None], -math.inf).amax(-1)
    margin = torch.where(allowed[current], own - rivals, math.nan)  # no margin for a masked or special token
    if site_counts is not None:
        padding = torch.arange(n, device=tokens.device) >= site_counts.to(tokens.device)[:, None]
        margin = margin.masked_fill(padding, math.nan)
    return LocalMargins(margin=margin, logits=logits, current=current, num_allowed=int(allowed.sum()))


__all__ = ["LocalMargins", "escape_probability_bound", "local_margins"]
