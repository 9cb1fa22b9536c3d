from transformers import PretrainedConfig


class DreamConfig(PretrainedConfig):
    model_type = "Dream"

    def __init__(self, vocab_size=40, hidden_size=32, num_attention_heads=2, num_hidden_layers=2,
                 max_position_embeddings=64, mask_token_id=39, eos_token_id=2, pad_token_id=2,
                 tie_word_embeddings=False, **kwargs):
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        self.num_attention_heads, self.num_hidden_layers = num_attention_heads, num_hidden_layers
        self.max_position_embeddings, self.mask_token_id = max_position_embeddings, mask_token_id
        super().__init__(eos_token_id=eos_token_id, pad_token_id=pad_token_id, tie_word_embeddings=tie_word_embeddings,
                         **kwargs)
