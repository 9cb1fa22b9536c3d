"""Hugging Face ``*ForMaskedLM`` models as :class:`~mlm_dynamics.models.Denoiser`; the head runs where asked only."""

from __future__ import annotations

import re
import socket
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from torch import Tensor

from .base import Denoiser, VocabInfo, mask_positions

Head = Callable[[Tensor], Tensor]


def _bert_head(model: Any) -> Head:
    return model.cls


def _roberta_head(model: Any) -> Head:
    return model.lm_head


def _distilbert_head(model: Any) -> Head:
    return lambda h: model.vocab_projector(model.vocab_layer_norm(model.activation(model.vocab_transform(h))))


def _modernbert_head(model: Any) -> Head:
    return lambda h: model.decoder(model.head(h))


def _generator_head(model: Any) -> Head:
    return lambda h: model.generator_lm_head(model.generator_predictions(h))


def _albert_head(model: Any) -> Head:
    return model.predictions


def _deberta_head(model: Any) -> Head:
    if model.legacy:
        return model.cls
    return lambda h: model.lm_predictions(h, model.base_model.embeddings.word_embeddings)


# The prediction head of each masked-LM family, as it is applied in that family's ``forward`` in transformers 5.
_LM_HEADS: dict[str, Callable[[Any], Head]] = {
    **dict.fromkeys(("bert", "megatron-bert", "roformer", "big_bird", "rembert", "mobilebert", "ernie", "fnet",
                     "nystromformer", "yoso", "mra", "squeezebert"), _bert_head),
    **dict.fromkeys(("roberta", "xlm-roberta", "camembert", "xlm-roberta-xl", "data2vec-text", "xmod", "ibert", "mpnet",
                     "esm"), _roberta_head),
    **dict.fromkeys(("electra", "convbert"), _generator_head),
    **dict.fromkeys(("deberta", "deberta-v2"), _deberta_head),
    "albert": _albert_head,
    "distilbert": _distilbert_head,
    "modernbert": _modernbert_head,
}
# families whose absolute position ids start after the padding index (RoBERTa's create_position_ids_from_input_ids)
_ROBERTA_FAMILY = ("roberta", "xlm-roberta", "camembert", "xlm-roberta-xl", "data2vec-text", "xmod", "ibert", "mpnet",
                   "esm")
_WARNED: set[str] = set()
_PLACEHOLDER = re.compile(r"\[unused\d+\]")


class MaskedLMDenoiser(Denoiser):
    """A Hugging Face ``*ForMaskedLM`` model as a :class:`Denoiser`.

    Runs the encoder on the masked input, gathers the hidden states at the requested positions and applies the LM
    head there only: ``logits = head(encoder(x_masked)[b, P[b, k]])``. Cost: one encoder forward of ``B x L`` plus a
    head of ``B x K`` rows, instead of the ``B x L x V`` logits ``model(x).logits`` would build.

    The head-only path covers BERT, RoBERTa, XLM-R, CamemBERT, DistilBERT, ModernBERT, ELECTRA, ConvBERT,
    DeBERTa (v1, v2), ALBERT, MPNet, ESM, Megatron-BERT, RoFormer, BigBird, RemBERT, MobileBERT, ERNIE, FNet,
    Nystromformer, YOSO, MRA, SqueezeBERT, XLM-R-XL, Data2Vec-text, X-MOD and I-BERT (each tested equal to
    ``model(x).logits`` at the positions). Any other ``*ForMaskedLM`` runs through ``model(x).logits`` (the full
    ``B x L x V`` logits) with a one-time warning.
    """

    model: Any
    encoder: Any
    head: Head

    def __init__(self, model: Any, *, mask_id: int | None, special_ids: Sequence[int] = (),
                 frame_ids: Sequence[int] = (), pad_id: int | None = None) -> None:
        super().__init__()
        model_type = str(getattr(model.config, "model_type", None))
        if model_type not in _LM_HEADS and model_type not in _WARNED:
            _WARNED.add(model_type)
            warnings.warn(f"model: no head-only path for the {model_type!r} family; using model(x).logits (the full "
                          f"B x L x V logits). Head-only families: {sorted(_LM_HEADS)}", stacklevel=2)
        if mask_id is None:
            raise ValueError("mask_id: the model/tokenizer defines no mask token, so masked conditionals are undefined")
        self.mask_id: int = mask_id
        self.pad_id = pad_id
        self.model = model.eval()
        self.encoder = model.base_model
        self.head_only = model_type in _LM_HEADS
        if self.head_only:
            self.head = _LM_HEADS[model_type](model)
        max_length = getattr(model.config, "max_position_embeddings", None)
        if model_type in _ROBERTA_FAMILY and max_length is not None:
            max_length -= model.config.pad_token_id + 1  # RoBERTa position ids start after the padding index
        vocab_size = model.get_output_embeddings().out_features
        forbidden = sorted({mask_id, *special_ids} & set(range(vocab_size)))
        self.vocab = VocabInfo(size=vocab_size, mask_id=mask_id, forbidden_ids=tuple(forbidden),
                               frame_ids=tuple(sorted(set(frame_ids))), max_length=max_length)

    def hidden_states(self, tokens: Tensor) -> Tensor:
        """Last hidden states ``[B, L, H]`` of the encoder; padding (``pad_id``) is masked out of attention, so a
        padded row gives the states of the unpadded sequence. Cost: one encoder forward of ``B`` rows."""
        return self.encoder(input_ids=tokens, attention_mask=self._attention(tokens)).last_hidden_state

    def _attention(self, tokens: Tensor) -> Tensor | None:
        """``1`` where attended, ``0`` at padding; ``None`` (attend everywhere) when no row is padded."""
        if self.pad_id is None:
            return None
        padding = tokens == self.pad_id
        return (~padding).long() if padding.any() else None

    def _masked_logits(self, tokens: Tensor, positions: Tensor) -> Tensor:
        masked = mask_positions(tokens.long(), positions, self.mask_id)
        if not self.head_only:
            logits = self.model(input_ids=masked, attention_mask=self._attention(masked)).logits
            return logits.gather(1, positions[..., None].expand(-1, -1, logits.shape[-1])).float()
        hidden = self.hidden_states(masked)
        picked = hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
        return self.head(picked).float()

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32) -> tuple[MaskedLMDenoiser, TextCodec]:
        """Load ``AutoModelForMaskedLM`` and ``AutoTokenizer`` from a hub name or local directory.

        Never proposed: the tokenizer's special tokens and BERT-style placeholder tokens ``[unusedN]``.
        A missing local path, or a hub name that is neither cached nor reachable, raises at once with a clear
        message (see :func:`locate_pretrained`).
        """
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        source, local_only = locate_pretrained(name_or_path)
        try:
            tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
            model = AutoModelForMaskedLM.from_pretrained(source, dtype=dtype, local_files_only=local_only)
        except OSError as error:
            raise FileNotFoundError(f"model {name_or_path!r} could not be loaded: {error}") from None
        frame = [t for t in (tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id,
                             tokenizer.bos_token_id, tokenizer.eos_token_id) if t is not None]
        placeholders = [i for token, i in tokenizer.get_vocab().items() if _PLACEHOLDER.fullmatch(token)]
        denoiser = cls(model, mask_id=tokenizer.mask_token_id, special_ids=[*tokenizer.all_special_ids, *placeholders],
                       frame_ids=frame, pad_id=tokenizer.pad_token_id).to(device)
        return denoiser, TextCodec(tokenizer)


def locate_pretrained(name_or_path: str) -> tuple[str, bool]:
    """``(source, local_files_only)`` for ``from_pretrained``, or a FileNotFoundError naming what is missing.

    An existing directory loads locally. Something that looks like a path (``./x``, ``/x``, ``~/x``, ``a/b/c``) but
    does not exist is an error, not a hub name. A hub name loads from the local cache when it is there; otherwise
    only when the hub is reachable (``HF_HUB_OFFLINE`` unset and the endpoint's host resolves), instead of retrying
    for most of a minute.
    """
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not path.is_dir():
            raise FileNotFoundError(f"model path {name_or_path!r} is a file; give the model's directory")
        return str(path), True
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1 or "\\" in name_or_path:
        raise FileNotFoundError(f"model path {name_or_path!r} does not exist")
    from huggingface_hub import constants, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name_or_path, "config.json"), str):
        return name_or_path, True
    if constants.HF_HUB_OFFLINE:
        raise FileNotFoundError(f"model {name_or_path!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is "
                                "set; download it where the hub is reachable, or give a local directory")
    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        raise FileNotFoundError(f"model {name_or_path!r} is not in the local Hugging Face cache and {host} cannot be "
                                "reached (offline?); give a local directory") from None
    return name_or_path, False


class TextCodec:
    """Text <-> ids through a Hugging Face tokenizer (special tokens added on encode, kept out on decode)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))
