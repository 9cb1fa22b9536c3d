"""A tiny SEDD (score entropy discrete diffusion) transformer with the absorbing graph: ``forward(indices, sigma)``
returns log-scores ``[B, L, tokens + 1]`` (the last id is the absorbing state), scaled by ``sigma`` as SEDD's
``scale_by_sigma`` does and with the score of the current token set to 0 (log 1). A plain ``nn.Module`` with a
``config`` namespace, as SEDD's checkpoints load (``SEDD.from_pretrained`` through ``PyTorchModelHubMixin``)."""

import math
from types import SimpleNamespace

import torch
from torch import nn


class SEDD(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        width, vocab = config.model.hidden_size, config.tokens + 1
        self.vocab_embed = nn.Embedding(vocab, width)
        self.position = nn.Embedding(config.model.length, width)
        self.sigma_map = nn.Linear(1, width)
        layer = nn.TransformerEncoderLayer(width, config.model.n_heads, 2 * width, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, config.model.n_blocks, enable_nested_tensor=False)
        self.output_layer = nn.Linear(width, vocab)

    def forward(self, indices, sigma):
        positions = torch.arange(indices.shape[1], device=indices.device)
        hidden = self.vocab_embed(indices) + self.position(positions) + self.sigma_map(sigma.float()[:, None])[:, None]
        x = self.output_layer(self.blocks(hidden))
        if self.config.model.scale_by_sigma:
            esigm1_log = torch.where(sigma < 0.5, torch.expm1(sigma), sigma.exp() - 1).log().to(x.dtype)[:, None, None]
            x = x - esigm1_log - math.log(x.shape[-1] - 1)
        return torch.scatter(x, -1, indices[..., None], torch.zeros_like(x[..., :1]))


def tiny_config(tokens=39, length=32):
    return SimpleNamespace(tokens=tokens, graph=SimpleNamespace(type="absorb"),
                           model=SimpleNamespace(hidden_size=32, n_heads=2, n_blocks=2, length=length,
                                                 scale_by_sigma=True))
