"""A tiny Dream-format diffusion LM (Qwen2-style): the logits at position ``i - 1`` predict token ``i``, as in an
autoregressive model it was adapted from; ``attention_mask`` is ``"full"``, ``None`` or a boolean ``[B, 1, L, L]``
(True: attend) with ``position_ids`` counting the unpadded tokens. ``diffusion_generate`` is its own decoding loop
(entropy-ordered unmasking, as in Dream's generation utilities), a method of the model. Like Dream's published
``modeling_dream.py``, the class overrides ``from_pretrained`` to set its own generation config on the model the
parent class returns (which ``output_loading_info=True`` makes a tuple)."""

import torch
from torch import nn
from transformers import GenerationConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_dream import DreamConfig


class DreamGenerationConfig(GenerationConfig):
    def __init__(self, **kwargs):
        self.alg = kwargs.pop("alg", "entropy")
        self.steps = kwargs.pop("steps", 8)
        super().__init__(**kwargs)


class DreamModel(PreTrainedModel):
    config_class = DreamConfig
    base_model_prefix = "model"

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, config=None, cache_dir=None,
                        ignore_mismatched_sizes=False, force_download=False, local_files_only=False, token=None,
                        revision="main", use_safetensors=None, weights_only=True, **kwargs):
        _model = super().from_pretrained(pretrained_model_name_or_path, *model_args, config=config,
                                         cache_dir=cache_dir, ignore_mismatched_sizes=ignore_mismatched_sizes,
                                         force_download=force_download, local_files_only=local_files_only,
                                         token=token, revision=revision, use_safetensors=use_safetensors,
                                         weights_only=weights_only, **kwargs)
        # as Dream's: the generation config loaded by the parent class lacks DreamGenerationConfig's attributes
        _model.generation_config = DreamGenerationConfig.from_pretrained(
            pretrained_model_name_or_path, cache_dir=cache_dir, force_download=force_download,
            local_files_only=local_files_only, token=token, revision=revision)
        return _model

    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_positions = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(config.hidden_size, config.num_attention_heads,
                                                               2 * config.hidden_size, dropout=0.0, batch_first=True)
                                    for _ in range(config.num_hidden_layers))
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, position_ids=None, **kwargs):
        length = input_ids.shape[1]
        if position_ids is None:
            position_ids = torch.arange(length, device=input_ids.device)[None].expand(input_ids.shape[0], -1)
        hidden = self.embed_tokens(input_ids) + self.embed_positions(position_ids)
        blocked = None
        if isinstance(attention_mask, torch.Tensor):
            blocked = ~attention_mask.bool().expand(-1, self.config.num_attention_heads, -1, -1).flatten(0, 1)
            blocked = blocked & ~torch.eye(length, dtype=torch.bool, device=input_ids.device)  # padding sees itself
        for layer in self.layers:
            hidden = layer(hidden, src_mask=blocked)
        return CausalLMOutputWithPast(logits=self.lm_head(hidden))

    @torch.no_grad()
    def diffusion_generate(self, input_ids, attention_mask=None, max_new_tokens=8, steps=8, temperature=1.0,
                           top_p=None, top_k=None, generator=None):
        """Entropy-ordered unmasking of ``max_new_tokens`` positions after ``input_ids`` (left-padded with EOS);
        ``top_p``/``top_k`` truncate as Dream's ``sample_tokens`` does: the nucleus first, then the top-k (after the
        mask id, which a trained Dream never predicts, is left out)."""
        mask_id = self.config.mask_token_id
        x = torch.nn.functional.pad(input_ids, (0, max_new_tokens), value=mask_id)
        tok_idx, full = None, "full"
        if attention_mask is not None and bool((attention_mask == 0).any()):
            attention_mask = torch.nn.functional.pad(attention_mask, (0, max_new_tokens), value=1)
            tok_idx = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 1)
            full = torch.logical_and(attention_mask[:, None, None, :].bool(), attention_mask[:, None, :, None].bool())
        per_step = max(1, max_new_tokens // steps)
        while bool((x == mask_id).any()):
            logits = self(x, full, tok_idx).logits
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)  # position i is predicted at i - 1
            masked = x == mask_id
            logits = (logits / temperature).masked_fill(
                torch.arange(logits.shape[-1], device=logits.device) == mask_id, -torch.inf)
            if top_p is not None and top_p < 1:  # Dream's top_p_logits
                ordered, order = logits.sort(dim=-1, descending=True)
                remove = ordered.softmax(-1).cumsum(-1) > top_p
                remove[..., 1:] = remove[..., :-1].clone()
                remove[..., 0] = False
                logits = logits.masked_fill(torch.zeros_like(remove).scatter(-1, order, remove), -torch.inf)
            if top_k is not None:  # Dream's top_k_logits
                logits = logits.masked_fill(logits < logits.topk(top_k).values[..., -1:], -torch.inf)
            probs = logits.softmax(-1)
            draws = torch.multinomial(probs.flatten(0, 1), 1, generator=generator).view(x.shape)
            entropy = -(probs * probs.clamp_min(1e-30).log()).sum(-1)
            score = torch.where(masked, -entropy, -torch.inf)
            for row in range(x.shape[0]):
                count = min(per_step, int(masked[row].sum()))
                chosen = score[row].topk(count).indices
                x[row, chosen] = draws[row, chosen]
        return x
