"""Adapter for models that return full-sequence logits ``[B, L, V]`` (masked-diffusion denoisers and others)."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from .base import Denoiser, VocabInfo, mask_positions


class FullSequenceDenoiser(Denoiser):
    """Adapter for any model that returns full-sequence logits ``[B, L, V]`` (e.g. a masked-diffusion denoiser).

    ``model(masked_tokens)`` is called with ``mask_id`` written into the requested positions, and the logits at
    those positions are gathered. Cost: one forward of ``B`` rows plus the full ``[B, L, V]`` logits the model
    materialises; prefer :class:`MaskedLMDenoiser` for Hugging Face MLMs, which applies the head only where needed.
    """

    model: Callable[[Tensor], Tensor]

    def __init__(self, model: Callable[[Tensor], Tensor], vocab: VocabInfo) -> None:
        super().__init__()
        if vocab.mask_id is None:
            raise ValueError("vocab.mask_id is required: FullSequenceDenoiser writes it into masked positions")
        self.mask_id: int = vocab.mask_id
        self.model = model
        self.vocab = vocab

    def _masked_logits(self, tokens: Tensor, positions: Tensor) -> Tensor:
        logits = self.model(mask_positions(tokens, positions, self.mask_id))
        if logits.dim() != 3 or logits.shape[:2] != tokens.shape:
            raise RuntimeError(f"model must return [B, L, V] logits, got {tuple(logits.shape)}")
        return logits.gather(1, positions[..., None].expand(-1, -1, logits.shape[-1])).float()
