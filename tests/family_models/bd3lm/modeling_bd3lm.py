"""A tiny BD3-LM in the format of its Hugging Face port: ``forward(input_ids, timesteps, sample_mode=False)``.
Training mode takes ``[x_t, x_0]`` (twice the model length) with the block-diffusion mask; ``sample_mode=True`` takes
the sequence generated so far, each block attending to itself and the blocks before it (block-causal), and only
with ``config.attn_backend == "sdpa"`` (an assertion, as in the port). ``timesteps`` is ``[B]``: the port's
``adaLN_modulation(c)[:, None].chunk(...)`` fails on a ``[B, 1]`` sigma ("not enough values to unpack"), and so does
this one. The mask id is ``vocab_size - 1``."""

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import MaskedLMOutput

from .configuration_bd3lm import BD3LMConfig


class BD3LM(PreTrainedModel):
    config_class = BD3LMConfig
    base_model_prefix = "backbone"

    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_dim)
        self.position = nn.Embedding(config.model_length, config.hidden_dim)
        self.sigma_map = nn.Linear(1, config.hidden_dim)
        self.adaln = nn.Linear(config.hidden_dim, 2 * config.hidden_dim)
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(config.hidden_dim, config.n_heads,
                                                               2 * config.hidden_dim, dropout=0.0, batch_first=True)
                                    for _ in range(config.n_blocks))
        self.output_layer = nn.Linear(config.hidden_dim, config.vocab_size)
        self.post_init()

    def forward(self, input_ids, timesteps, sample_mode=False, **kwargs):
        if sample_mode:
            assert self.config.attn_backend == "sdpa", "Sampling only supported with SDPA"
        if not sample_mode:  # training: [x_t, x_0], each of the model length (a shorter input fails here)
            size = self.config.model_length
            input_ids = input_ids[:, :size] + 0 * input_ids[:, size:2 * size]
        length = input_ids.shape[1]
        block = torch.arange(length, device=input_ids.device) // self.config.block_size
        blocked = block[None, :] > block[:, None]  # a query sees its block and the earlier ones
        positions = torch.arange(length, device=input_ids.device)
        shift, scale = self.adaln(self.sigma_map(timesteps.float()[..., None]))[:, None].chunk(2, dim=2)
        hidden = (self.embed(input_ids) + self.position(positions)) * (1 + scale) + shift
        for layer in self.layers:
            hidden = layer(hidden, src_mask=blocked)
        return MaskedLMOutput(logits=self.output_layer(hidden))
