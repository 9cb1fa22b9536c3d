"""Energies for the Metropolis-Hastings correction of Glauber proposals."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..models.base import Denoiser


class PseudoLogLikelihoodEnergy:
    """``E(x) = -sum_{i in sites} log softmax(l_i(x_{-i}))[x_i]`` (the negative pseudo-log-likelihood at tau = 1).

    Args:
        sites: ``[B, n]`` or ``[n]`` positions summed over; ``None`` uses the non-frame positions of each input.
        chunk_size: forward rows per batch.

    Cost: ``n`` masked forward rows per sequence, batched ``chunk_size`` rows at a time.
    """

    def __init__(self, denoiser: Denoiser, *, sites: Tensor | None = None, chunk_size: int = 256) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.denoiser, self.sites, self.chunk_size = denoiser, sites, chunk_size

    @torch.no_grad()
    def __call__(self, tokens: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Pseudo-log-likelihood energy ``[B]`` of ``tokens [B, L]`` over the sites (``B n`` forward rows;
        ``attention_mask [B, L]``: each row's padding, never a site)."""
        sites = self.denoiser.resampleable_sites(tokens, attention_mask) if self.sites is None else self.sites
        sites = sites.to(tokens.device).expand(tokens.shape[0], -1)
        batch, n = sites.shape
        rows = tokens.repeat_interleave(n, 0)
        positions = sites.reshape(-1, 1)
        allowed = self.denoiser.vocab.allowed_mask(tokens.device)
        masks = None if attention_mask is None else attention_mask.repeat_interleave(n, 0)
        logits = self.denoiser.chunked_conditional_logits(rows, positions, self.chunk_size, masks)[:, 0]
        log_p = logits.masked_fill(~allowed, -math.inf).log_softmax(-1)
        return -log_p.gather(1, rows.gather(1, positions)).view(batch, n).sum(1)


__all__ = ["PseudoLogLikelihoodEnergy"]
