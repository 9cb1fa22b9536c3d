"""A masked-denoising LightningModule around a Hugging Face masked LM, exposing its :class:`Denoiser`.

Training objective (BERT-style): choose each resampleable position with probability ``mask_rate``, replace it by
the mask token, and minimise the cross-entropy of the original tokens at the chosen positions, computed with the
LM head at those positions only. ``self.denoiser`` is what the diagnostic callbacks use.
"""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._random import Randomness, as_generator
from ..models.huggingface import MaskedLMDenoiser


class MaskedDenoiserModule(L.LightningModule):
    """Fine-tune ``denoiser.model`` with the masked-denoising loss; batches are token tensors ``[B, L]``."""

    def __init__(self, denoiser: MaskedLMDenoiser, *, lr: float = 1e-4, mask_rate: float = 0.15) -> None:
        super().__init__()
        if not 0 < mask_rate < 1:
            raise ValueError(f"mask_rate must lie in (0, 1), got {mask_rate}")
        self.denoiser, self.lr, self.mask_rate = denoiser, lr, mask_rate
        self.denoiser.train()  # this module trains the model it is given (loaders hand models out in eval mode)

    def masked_loss(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-entropy and accuracy at randomly masked positions (at least one per row)."""
        free = self.denoiser.free_mask(tokens)
        chosen = free & (torch.rand(tokens.shape, device=tokens.device) < self.mask_rate)
        first_free = free.float().argmax(1)
        chosen[torch.arange(len(tokens)), first_free] |= ~chosen.any(1)
        masked = tokens.masked_fill(chosen, self.denoiser.mask_id)
        hidden = self.denoiser.hidden_states(masked)
        logits = self.denoiser.head(hidden[chosen])
        target = tokens[chosen]
        return F.cross_entropy(logits, target), (logits.argmax(-1) == target).float().mean()

    def training_step(self, batch: Tensor, batch_idx: int) -> Tensor:
        """Cross-entropy at randomly masked positions of ``batch [B, L]``; logs ``train/loss``, ``train/accuracy``."""
        loss, accuracy = self.masked_loss(batch)
        self.log_dict({"train/loss": loss, "train/accuracy": accuracy}, prog_bar=True, batch_size=len(batch))
        return loss

    def validation_step(self, batch: Tensor, batch_idx: int) -> None:
        """Logs ``val/loss`` and ``val/accuracy`` of the masked cross-entropy."""
        loss, accuracy = self.masked_loss(batch)
        self.log_dict({"val/loss": loss, "val/accuracy": accuracy}, batch_size=len(batch))

    def predict_step(self, batch: Tensor, batch_idx: int) -> Tensor:
        """The batch unchanged: predict runs exist so that callbacks can measure at predict end."""
        return batch

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """AdamW at the module's learning rate."""
        return torch.optim.AdamW(self.parameters(), lr=self.lr)


def tiny_bert_denoiser(vocab_size: int = 24, hidden_size: int = 32, num_layers: int = 2,
                       max_length: int = 64, generator: Randomness = 0) -> MaskedLMDenoiser:
    """A small randomly initialised BERT masked LM (in train mode, as built): ids 0-3 are [PAD] [CLS] [SEP] [MASK],
    the rest are content. Every weight is drawn from ``generator`` (a ``torch.Generator``, or an int seed for one)
    with BERT's initialisation (normal of std ``initializer_range`` for linear and embedding weights, zero biases and
    padding row, unit layer-norm scales); the global random state is neither read nor changed."""
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_layers,
                        num_attention_heads=2, intermediate_size=2 * hidden_size, max_position_embeddings=max_length,
                        pad_token_id=0)
    with torch.random.fork_rng(devices=[]):  # transformers draws a first initialisation from the global generator
        model: nn.Module = BertForMaskedLM(config)
    _init_bert(model, as_generator(generator), config.initializer_range)
    return MaskedLMDenoiser(model, mask_id=3, special_ids=(0, 1, 2, 3), frame_ids=(0, 1, 2), pad_id=0)


@torch.no_grad()
def _init_bert(model: nn.Module, generator: torch.Generator, std: float) -> None:
    """BERT's weight initialisation of every parameter of ``model``, drawn from ``generator`` in module order."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=std, generator=generator)
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            module.weight[module.padding_idx].zero_()
        if isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
        if isinstance(module, (nn.Linear, nn.LayerNorm)) and module.bias is not None:
            nn.init.zeros_(module.bias)
    for name, parameter in model.named_parameters():
        if name.endswith("predictions.bias"):
            nn.init.zeros_(parameter)


__all__ = ["MaskedDenoiserModule", "tiny_bert_denoiser"]
