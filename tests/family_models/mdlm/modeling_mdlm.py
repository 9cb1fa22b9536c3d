"""A tiny MDLM in the format of its Hugging Face port: ``forward(input_ids, timesteps)`` with the noise level
``sigma`` as ``timesteps [B]`` (conditioning a bias of the hidden states), the mask id is ``vocab_size - 1``."""

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import MaskedLMOutput

from .configuration_mdlm import MDLMConfig


class MDLM(PreTrainedModel):
    config_class = MDLMConfig
    base_model_prefix = "backbone"

    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_dim)
        self.position = nn.Embedding(config.model_length, config.hidden_dim)
        self.sigma_map = nn.Linear(1, config.hidden_dim)
        layer = nn.TransformerEncoderLayer(config.hidden_dim, config.n_heads, 2 * config.hidden_dim, dropout=0.0,
                                           batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, config.n_blocks, enable_nested_tensor=False)
        self.output_layer = nn.Linear(config.hidden_dim, config.vocab_size)
        self.post_init()

    def forward(self, input_ids, timesteps, **kwargs):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        condition = self.sigma_map(timesteps.float().reshape(-1, 1))[:, None, :]
        hidden = self.blocks(self.embed(input_ids) + self.position(positions) + condition)
        return MaskedLMOutput(logits=self.output_layer(hidden))
