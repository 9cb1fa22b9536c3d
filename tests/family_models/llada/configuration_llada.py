from transformers import PretrainedConfig


class LLaDAConfig(PretrainedConfig):
    model_type = "llada"

    def __init__(self, vocab_size=40, d_model=32, n_heads=2, n_layers=2, max_sequence_length=64, mask_token_id=39,
                 eos_token_id=2, pad_token_id=2, **kwargs):
        self.vocab_size, self.d_model, self.n_heads, self.n_layers = vocab_size, d_model, n_heads, n_layers
        self.max_sequence_length, self.mask_token_id = max_sequence_length, mask_token_id
        super().__init__(eos_token_id=eos_token_id, pad_token_id=pad_token_id, **kwargs)
