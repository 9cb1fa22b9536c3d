from transformers import PretrainedConfig


class MDLMConfig(PretrainedConfig):
    model_type = "mdlm"

    def __init__(self, vocab_size=40, hidden_dim=32, n_heads=2, n_blocks=2, model_length=64, cond_dim=16,
                 time_conditioning=False, **kwargs):
        self.vocab_size, self.hidden_dim, self.n_heads, self.n_blocks = vocab_size, hidden_dim, n_heads, n_blocks
        self.model_length, self.cond_dim, self.time_conditioning = model_length, cond_dim, time_conditioning
        super().__init__(**kwargs)
