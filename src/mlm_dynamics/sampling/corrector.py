"""A Glauber corrector for masked-diffusion samplers (predictor-corrector).

Between denoising steps, ``GlauberCorrector(tokens, masked)`` runs ``steps`` single-site Glauber updates on each row
over its unmasked, non-frame positions: the chain whose mixing this library measures, used as a refinement. Still
masked positions and frame tokens are never touched; rows with nothing unmasked are left as they are. It counts the
updates that changed a token (``changes``) so its effect can be reported.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._random import Randomness, as_generator
from ..models.base import Denoiser
from .glauber import GlauberSampler


class GlauberCorrector:
    """``steps`` Glauber updates over the unmasked positions of each row, per call (see the module docstring).

    Args:
        denoiser: the model (the diffusion denoiser itself, through :class:`~mlm_dynamics.FullSequenceDenoiser`).
        temperature: tau of the corrector's conditionals.
        steps: single-site updates per row and call.
        generator: the corrector's random stream, one across calls (a ``torch.Generator``, or an int seed for one).
        sampler_options: further :class:`GlauberSampler` options (``top_k``, ``top_p``, ``scan``).
    """

    def __init__(self, denoiser: Denoiser, *, temperature: float = 1.0, steps: int = 1, generator: Randomness = 0,
                 **sampler_options: Any) -> None:
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        self.sampler = GlauberSampler(denoiser, temperature, **sampler_options)
        self.steps, self.calls, self.changes = steps, 0, 0
        self.generator = as_generator(generator)

    @torch.no_grad()
    def __call__(self, tokens: Tensor, masked: Tensor | None = None) -> Tensor:
        """Corrected copy of ``tokens [B, L]``; ``masked [B, L]`` marks positions still masked."""
        denoiser = self.sampler.denoiser
        free = denoiser.free_mask(tokens)
        if masked is not None:
            free &= ~masked.to(free.device)
        rows = free.any(1).nonzero().squeeze(1)
        out = tokens.clone()
        if not len(rows):
            return out
        chosen = tokens[rows]
        sites, counts = denoiser.padded_sites(chosen, free[rows])
        state = self.sampler.init_state(chosen, generator=self.generator, sites=sites,
                                        site_counts=counts)
        for record in self.sampler.run(state, self.steps):
            self.changes += int((record.new_tokens != record.old_tokens).sum())
        self.calls += 1
        out[rows] = state.tokens
        return out


__all__ = ["GlauberCorrector"]
