"""How good is a masked LM: held-out masked accuracy and fill-mask probes."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .huggingface import MaskedLMDenoiser, TextCodec


@torch.inference_mode()
def masked_accuracy(denoiser: MaskedLMDenoiser, inputs: Tensor, labels: Tensor, *, batch_size: int = 32
                    ) -> tuple[float, int]:
    """``(top-1 accuracy, count)`` at the masked positions (``labels >= 0``) of ``inputs [N, L]``; every masked
    position of a row is predicted from the same forward pass. Cost: ``N`` forward rows."""
    correct, total = 0, 0
    for start in range(0, len(inputs), batch_size):
        rows, targets = inputs[start:start + batch_size].to(denoiser.device), labels[start:start + batch_size]
        chosen = targets >= 0
        hidden = denoiser.hidden_states(rows)
        predicted = denoiser.head(hidden[chosen.to(hidden.device)]).argmax(-1).cpu()
        correct += int((predicted == targets[chosen]).sum())
        total += int(chosen.sum())
    return correct / max(total, 1), total


@torch.inference_mode()
def fill_mask(denoiser: MaskedLMDenoiser, codec: TextCodec, text: str, *, top_k: int = 5
              ) -> list[tuple[str, float]]:
    """The ``top_k`` proposable tokens and probabilities at the one ``[MASK]`` of ``text``."""
    mask_token = codec.tokenizer.mask_token
    if text.count(mask_token) != 1:
        raise ValueError(f"text must contain exactly one {mask_token}, got {text!r}")
    tokens = torch.tensor([codec.encode(text)], device=denoiser.device)
    position = (tokens[0] == denoiser.mask_id).nonzero()[0]
    logits = denoiser.conditional_logits(tokens, position[None])[0, 0]
    probs = logits.masked_fill(~denoiser.vocab.allowed_mask(logits.device), float("-inf")).softmax(-1)
    values, ids = probs.topk(top_k)
    return [(codec.tokenizer.convert_ids_to_tokens(int(i)), float(v)) for i, v in zip(ids, values, strict=True)]


PROBES: Sequence[str] = (
    "The capital of France is [MASK].",
    "She poured a cup of [MASK].",
    "He went to the [MASK] to buy some milk.",
    "The ship sailed across the [MASK].",
    "The president signed the [MASK] into law.",
    "In the beginning God created the heaven and the [MASK].",
)


__all__ = ["PROBES", "fill_mask", "masked_accuracy"]
