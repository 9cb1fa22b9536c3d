"""Maps from chain states to unit vectors (sentence encoders, hidden states, module outputs, user functions)."""

from .base import (
    Codec,
    Embedder,
    EmbedderBase,
    EmbeddingFunction,
    FunctionEmbedder,
    HiddenStateEmbedder,
    ModuleOutputEmbedder,
    SentenceEmbedder,
    as_embedder,
    cosine_distance,
    default_sentence_model_path,
)

__all__ = ["Codec", "Embedder", "EmbedderBase", "EmbeddingFunction", "FunctionEmbedder", "HiddenStateEmbedder",
           "ModuleOutputEmbedder", "SentenceEmbedder", "as_embedder", "cosine_distance", "default_sentence_model_path"]
