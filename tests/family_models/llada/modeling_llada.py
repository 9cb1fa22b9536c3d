"""A tiny LLaDA-format masked diffusion LM: a bidirectional transformer over the whole sequence; padding (the EOS id)
is excluded through ``attention_mask`` (1: attend)."""

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_llada import LLaDAConfig


class LLaDAModelLM(PreTrainedModel):
    config_class = LLaDAConfig
    base_model_prefix = "model"

    def __init__(self, config):
        super().__init__(config)
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.wpe = nn.Embedding(config.max_sequence_length, config.d_model)
        layer = nn.TransformerEncoderLayer(config.d_model, config.n_heads, 2 * config.d_model, dropout=0.0,
                                           batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, config.n_layers, enable_nested_tensor=False)
        self.ff_out = nn.Linear(config.d_model, config.vocab_size)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, **kwargs):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        hidden = self.wte(input_ids) + self.wpe(positions)
        padding = None if attention_mask is None else attention_mask == 0
        hidden = self.blocks(hidden, src_key_padding_mask=padding)
        return CausalLMOutputWithPast(logits=self.ff_out(hidden))
