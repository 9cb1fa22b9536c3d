"""Maps from chain states to unit vectors (sentence encoders, hidden states, user functions)."""

from .base import (
                   Codec,
                   Embedder,
                   FunctionEmbedder,
                   HiddenStateEmbedder,
                   SentenceEmbedder,
                   cosine_distance,
                   default_sentence_model_path,
)

__all__ = ["Codec", "Embedder", "FunctionEmbedder", "HiddenStateEmbedder", "SentenceEmbedder", "cosine_distance",
           "default_sentence_model_path"]
