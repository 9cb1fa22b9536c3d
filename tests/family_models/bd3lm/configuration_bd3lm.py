from transformers import PretrainedConfig


class BD3LMConfig(PretrainedConfig):
    model_type = "bd3lm"

    def __init__(self, block_size=4, vocab_size=40, hidden_dim=32, n_heads=2, n_blocks=2, model_length=32,
                 time_conditioning=False, attn_backend="sdpa", **kwargs):
        self.block_size, self.vocab_size, self.hidden_dim = block_size, vocab_size, hidden_dim
        self.n_heads, self.n_blocks, self.model_length = n_heads, n_blocks, model_length
        self.time_conditioning, self.attn_backend = time_conditioning, attn_backend
        super().__init__(**kwargs)
