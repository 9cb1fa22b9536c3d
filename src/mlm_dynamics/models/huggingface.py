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
from torch import Tensor, nn

from .base import Denoiser, VocabInfo, available_device, check_mask_collisions, mask_positions, token_id, token_ids

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


HEAD_ONLY_FAMILIES: tuple[str, ...] = tuple(sorted(_LM_HEADS))
"""The ``config.model_type`` of every family whose LM head :class:`MaskedLMDenoiser` applies at the asked positions
only (each tested equal to ``model(x).logits`` there)."""


def tokenizer_ids(tokenizer: Any) -> dict[str, Any]:
    """The ids a denoiser needs from a Hugging Face tokenizer: ``mask_id``, ``special_ids`` (never proposed: every
    special token and BERT-style placeholders ``[unusedN]``), ``frame_ids`` (never resampled: CLS, SEP, PAD, BOS,
    EOS) and ``pad_id``."""
    frame = [t for t in (tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id,
                         tokenizer.bos_token_id, tokenizer.eos_token_id) if t is not None]
    placeholders = [i for token, i in tokenizer.get_vocab().items() if _PLACEHOLDER.fullmatch(token)]
    return {"mask_id": tokenizer.mask_token_id, "special_ids": [*tokenizer.all_special_ids, *placeholders],
            "frame_ids": frame, "pad_id": tokenizer.pad_token_id}


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "tokenizer.model",
                   "spiece.model", "sentencepiece.bpe.model", "special_tokens_map.json")
"""The files a saved tokenizer leaves in its folder (one is enough)."""


def has_tokenizer(source: str, local_only: bool) -> bool:
    """Whether a located model (:func:`locate_pretrained`) has a tokenizer: a hub name is taken to; a local folder
    only with one of :data:`TOKENIZER_FILES` (without any, transformers builds an empty placeholder tokenizer with
    made-up special ids rather than failing)."""
    return not (local_only and Path(source).is_dir()) or any((Path(source) / name).is_file()
                                                                for name in TOKENIZER_FILES)


def load_tokenizer(name_or_path: str) -> Any:
    """``AutoTokenizer`` from a local directory or a hub name (see :func:`locate_pretrained`); a
    FileNotFoundError when a folder holds no tokenizer files (:func:`has_tokenizer`)."""
    from transformers import AutoTokenizer

    source, local_only = locate_pretrained(name_or_path)
    if not has_tokenizer(source, local_only):
        raise FileNotFoundError(f"tokenizer: the folder {name_or_path!r} holds no tokenizer files (none of "
                                f"{', '.join(TOKENIZER_FILES[:4])}, ...); save the model's tokenizer there "
                                "(tokenizer.save_pretrained), or build MaskedLMDenoiser(model, mask_id=...) yourself")
    try:
        return AutoTokenizer.from_pretrained(source, local_files_only=local_only)
    except (OSError, ValueError, TypeError) as error:
        raise FileNotFoundError(f"tokenizer {name_or_path!r} could not be loaded: {error}") from None


class MaskedLMDenoiser(Denoiser):
    """A Hugging Face ``*ForMaskedLM`` model as a :class:`Denoiser`.

    Runs the encoder on the masked input, gathers the hidden states at the requested positions and applies the LM
    head there only: ``logits = head(encoder(x_masked)[b, P[b, k]])``. Cost: one encoder forward of ``B x L`` plus a
    head of ``B x K`` rows, instead of the ``B x L x V`` logits ``model(x).logits`` would build.

    The head-only path covers the families in :data:`HEAD_ONLY_FAMILIES` (each tested equal to ``model(x).logits``
    at the positions). Any other ``*ForMaskedLM``, or a family whose head-only call fails, runs through
    ``model(x).logits`` (the full ``B x L x V`` logits) with a one-time warning.

    The wrapper never changes the model: it does not switch its train/eval mode, move it or copy it, so wrapping the
    model a LightningModule trains (``MaskedLMDenoiser(self.model, tokenizer=tok)``) measures the weights being
    trained. Analysis code puts the model in eval mode itself (:meth:`from_pretrained` and the bundled loaders
    return models in eval mode; the callbacks switch to eval for each run and restore every submodule's mode).

    Args:
        model: a ``*ForMaskedLM`` model.
        tokenizer: its tokenizer (or a name/path to load one): ``mask_id``, ``special_ids``, ``frame_ids`` and
            ``pad_id`` are read from it (:func:`tokenizer_ids`); the arguments below override it.
        mask_id: the id written into masked positions.
        special_ids: ids never proposed (the mask id always is).
        frame_ids: ids of structural positions never resampled (CLS, SEP, PAD).
        pad_id: padding id, masked out of attention (default: the model config's ``pad_token_id``).

    Examples:
        A view of the model, not a copy: it does not change its mode, and its conditionals are the model's logits at
        the masked positions (the head is applied there only):

        >>> import torch
        >>> from transformers import BertConfig, BertForMaskedLM
        >>> from mlm_dynamics import MaskedLMDenoiser
        >>> model = BertForMaskedLM(BertConfig(vocab_size=12, hidden_size=16, num_hidden_layers=1,
        ...                                    num_attention_heads=2, intermediate_size=32)).eval()
        >>> denoiser = MaskedLMDenoiser(model, mask_id=3, special_ids=[0, 1, 2, 3], frame_ids=[1, 2], pad_id=0)
        >>> tokens = torch.tensor([[1, 5, 6, 7, 2]])
        >>> tuple(denoiser.conditional_logits(tokens, torch.tensor([[1, 3]])).shape)
        (1, 2, 12)
        >>> masked = tokens.masked_fill(torch.tensor([[False, True, False, False, False]]), 3)
        >>> torch.allclose(denoiser.conditional_logits(tokens, torch.tensor([[1]]))[0, 0], model(masked).logits[0, 1],
        ...                atol=1e-5)
        True

        With a tokenizer, ``MaskedLMDenoiser(model, tokenizer=tokenizer)`` reads the ids from it.
    """

    model: Any
    encoder: Any
    head: Head
    takes_attention_mask = True

    def __init__(self, model: Any, *, tokenizer: Any = None, mask_id: int | None = None,
                 special_ids: Sequence[int] | None = None, frame_ids: Sequence[int] | None = None,
                 pad_id: int | None = None) -> None:
        super().__init__()
        if isinstance(tokenizer, str):
            tokenizer = load_tokenizer(tokenizer)
        ids = tokenizer_ids(tokenizer) if tokenizer is not None else {}
        output = model.get_output_embeddings()
        vocab_size = int(output.out_features if output is not None else model.config.vocab_size)
        # the ids given here are checked whole; a tokenizer's special ids beyond the model's logits (tokens it added
        # that the model never outputs) are left out of the sets below, as they can never be proposed anyway
        pad_id = None if pad_id is None else token_id("pad_id", pad_id, vocab_size)
        special_ids = None if special_ids is None else token_ids("special_ids", special_ids, vocab_size)
        frame_ids = None if frame_ids is None else token_ids("frame_ids", frame_ids, vocab_size)
        if mask_id is not None:
            mask_id = token_id("mask_id", mask_id, vocab_size)
        elif ids.get("mask_id") is not None:
            mask_id = token_id("the tokenizer's mask_token_id", ids["mask_id"], vocab_size)
        else:
            raise ValueError("mask_id: the model/tokenizer defines no mask token, so masked conditionals are "
                             "undefined; pass tokenizer= or mask_id=")
        special_ids = special_ids if special_ids is not None else ids.get("special_ids", ())
        frame_ids = frame_ids if frame_ids is not None else ids.get("frame_ids", ())
        pad_id = pad_id if pad_id is not None else ids.get("pad_id", getattr(model.config, "pad_token_id", None))
        check_mask_collisions(mask_id, {"padding id (pad_id)": pad_id,
                                        "tokenizer's eos_token_id": getattr(tokenizer, "eos_token_id", None),
                                        "config's eos_token_id": getattr(model.config, "eos_token_id", None)})
        model_type = str(getattr(model.config, "model_type", None))
        if getattr(model.config, "languages", None) and getattr(model.config, "default_language", 1) is None:
            raise ValueError("model: this X-MOD model has no default language; call "
                             "model.set_default_language(...) first")
        self.mask_id: int = mask_id
        self.pad_id = pad_id
        self.tokenizer = tokenizer  # to show drawn sequences as text (None: ids)
        self.model = model
        self.encoder = model.base_model
        self.model_type = model_type
        self.head_only = model_type in _LM_HEADS
        self._head_checked = False
        if self.head_only:
            self.head = _LM_HEADS[model_type](model)
        else:
            _warn_full_logits(model_type, "no head-only path")
        max_length = getattr(model.config, "max_position_embeddings", None)
        if model_type in _ROBERTA_FAMILY and max_length is not None:
            max_length -= model.config.pad_token_id + 1  # RoBERTa position ids start after the padding index
        forbidden = sorted({mask_id, *special_ids} & set(range(vocab_size)))
        frame = {*frame_ids, *([pad_id] if pad_id is not None else [])} & set(range(vocab_size))
        self.vocab = VocabInfo(size=vocab_size, mask_id=mask_id, forbidden_ids=tuple(forbidden),
                               frame_ids=tuple(sorted(frame)), max_length=max_length,
                               pad_id=pad_id if pad_id is not None and pad_id < vocab_size else None)

    def hidden_states(self, tokens: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Last hidden states ``[B, L, H]`` of the encoder; padding (``attention_mask`` 0, else the ``pad_id``
        tokens) is masked out of attention, so a padded row gives the states of the unpadded sequence. Cost: one
        encoder forward of ``B`` rows."""
        return self.encoder(input_ids=tokens, attention_mask=self._attention(tokens, attention_mask)).last_hidden_state

    def _attention(self, tokens: Tensor, attention_mask: Tensor | None = None) -> Tensor | None:
        """``1`` where attended, ``0`` at padding (the given mask, else ``pad_id``); ``None`` (attend everywhere)
        when no row is padded."""
        if attention_mask is not None:
            return attention_mask.long()
        if self.pad_id is None:
            return None
        padding = tokens == self.pad_id
        return (~padding).long() if padding.any() else None

    def _masked_logits(self, tokens: Tensor, positions: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        masked = mask_positions(tokens.long(), positions, self.mask_id)
        if self.head_only:
            try:
                hidden = self.hidden_states(masked, attention_mask)
                picked = hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
                logits = self.head(picked).float()
            except torch.OutOfMemoryError:
                raise
            except (AttributeError, TypeError, RuntimeError) as error:
                if self._head_checked:
                    raise
                self.head_only = False  # this model's layout differs from its family's: the full logits serve
                _warn_full_logits(self.model_type, f"the head-only call failed ({type(error).__name__}: {error})")
            else:
                self._head_checked = True
                return logits
        logits = self.model(input_ids=masked, attention_mask=self._attention(masked, attention_mask)).logits
        return logits.gather(1, positions[..., None].expand(-1, -1, logits.shape[-1])).float()

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32, new_head: bool = False
                        ) -> tuple[MaskedLMDenoiser, TextCodec]:
        """Load ``AutoModelForMaskedLM`` and ``AutoTokenizer`` from a hub name or local directory, for standalone
        analysis (the model is new and put in eval mode; to measure a model being trained, wrap that model).

        Never proposed: the tokenizer's special tokens and BERT-style placeholder tokens ``[unusedN]``.
        Every loading problem is one error naming the model and what is wrong (:func:`load_model`): weights without
        the masked-LM head are refused unless ``new_head=True`` (an encoder to fine-tune; a warning says so).
        """
        from transformers import AutoModelForMaskedLM

        available_device(device)
        model = load_model(AutoModelForMaskedLM, name_or_path, dtype=dtype, new_head=new_head)
        tokenizer = load_tokenizer(name_or_path)
        denoiser = cls(model.eval(), tokenizer=tokenizer).to(device)
        return denoiser, TextCodec(tokenizer)


def dtype_argument(dtype: torch.dtype) -> dict[str, Any]:
    """The weights' dtype as ``from_pretrained`` takes it: ``dtype=`` from transformers 4.56 on, ``torch_dtype=``
    before (passing the new keyword to an older version fails when the config is serialised)."""
    import transformers
    from packaging.version import Version

    return {"dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype": dtype}


def load_model(auto_class: Any, name_or_path: str, *, dtype: torch.dtype | None = None, new_head: bool = False,
               **options: Any) -> Any:
    """``auto_class.from_pretrained`` with every failure turned into one error naming ``name_or_path``: a missing or
    empty directory, a ``model_type`` this transformers does not know, damaged safetensors, pickled weights
    (``pytorch_model.bin``), which are refused because unpickling can run code, and weights that are not the model's
    (:func:`check_loaded_weights`). ``dtype``: the weights' dtype, under the keyword this transformers takes
    (:func:`dtype_argument`). ``new_head``: an encoder checkpoint that gets a new, randomly initialised output head
    on purpose (the start of a fine-tune); its body must still come whole from the weights."""
    import pickle

    from safetensors import SafetensorError

    source, local_only = locate_pretrained(name_or_path)
    read_config(name_or_path, trust_remote_code=options.get("trust_remote_code", False), located=(source, local_only))
    if dtype is not None:
        options.update(dtype_argument(dtype))
    try:
        try:
            model, info = auto_class.from_pretrained(source, local_files_only=local_only, output_loading_info=True,
                                                     **options)
        except AttributeError as error:
            if "'tuple' object" not in str(error):
                raise
            # a model class whose own from_pretrained (Dream's) works on the model super() returns, which the loading
            # report makes a tuple: load it as its users do, and read the report off the weight files instead
            model = auto_class.from_pretrained(source, local_files_only=local_only, **options)
            info = checkpoint_report(model, source)
    except SafetensorError as error:
        raise ValueError(f"model {name_or_path!r}: its safetensors weights are damaged ({error})") from None
    except (pickle.UnpicklingError, RuntimeError) as error:
        if "ignore_mismatched_sizes" in str(error) or "size mismatch" in str(error):
            raise ValueError(f"model {name_or_path!r} is not the model its weights hold: tensors of its weights have "
                             "other shapes than its config.json builds; put the matching files in the folder") from None
        if not isinstance(error, pickle.UnpicklingError) and "weights_only" not in str(error).lower():
            raise
        raise ValueError(f"model {name_or_path!r} holds pickled weights (pytorch_model.bin), which are not loaded "
                         "because unpickling can run code; save them as safetensors where you trust them") from None
    except OSError as error:
        raise FileNotFoundError(f"model {name_or_path!r} could not be loaded: {error}") from None
    check_loaded_weights(model, info, name_or_path, new_head=new_head)
    return model


def checkpoint_report(model: nn.Module, source: str) -> dict[str, list[Any]]:
    """``from_pretrained``'s loading report (``missing_keys``, ``unexpected_keys``, ``mismatched_keys``) computed from
    the safetensors files of the folder ``source`` against ``model``'s state: a checkpoint name is matched as it is,
    with the model's ``base_model_prefix`` added or removed; a parameter tied to one the files hold (sharing its
    storage) or one the class lists in ``_keys_to_ignore_on_load_missing`` is not missing. For model classes whose
    own ``from_pretrained`` cannot return the report. A folder without safetensors files gives an empty report."""
    from safetensors import safe_open

    shapes: dict[str, tuple[int, ...]] = {}
    for path in sorted(Path(source).glob("*.safetensors")) if Path(source).is_dir() else []:
        with safe_open(str(path), framework="pt") as handle:
            shapes.update({key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()})  # noqa: SIM118
    if not shapes:
        return {"missing_keys": [], "unexpected_keys": [], "mismatched_keys": []}
    own = model.state_dict()
    prefix = getattr(model, "base_model_prefix", "")

    def matched(key: str) -> str:
        if key in own or not prefix:
            return key
        if f"{prefix}.{key}" in own:
            return f"{prefix}.{key}"
        return key.removeprefix(f"{prefix}.") if key.removeprefix(f"{prefix}.") in own else key

    found = {matched(key): shape for key, shape in shapes.items()}
    held = {own[key].data_ptr() for key in found if key in own}
    ignored = [re.compile(pattern) for pattern in getattr(model, "_keys_to_ignore_on_load_missing", None) or ()]
    missing = [key for key, value in own.items() if key not in found and value.data_ptr() not in held
               and not any(pattern.search(key) for pattern in ignored)]
    return {"missing_keys": missing, "unexpected_keys": [key for key in found if key not in own],
            "mismatched_keys": [(key, shape, tuple(own[key].shape)) for key, shape in found.items()
                                if key in own and tuple(own[key].shape) != shape]}


def check_loaded_weights(model: nn.Module, info: dict[str, Any], name_or_path: str, *, new_head: bool = False
                         ) -> None:
    """A ValueError naming the folder when the loader's report (``output_loading_info``) shows a model that is not
    the one its weights hold: parameters missing from the checkpoint (initialised at random), of another shape, or
    checkpoint tensors that belong to a module the model has (a layer beyond its depth, a parameter of another
    name). Unused tensors of heads the model does not have (a pretraining checkpoint's pooler or extra heads) are
    fine: every parameter of the model still comes from the checkpoint. ``new_head``: parameters outside the base
    model (``base_model_prefix``: the head) may be missing, on purpose; a warning lists them."""
    missing, mismatched = sorted(info.get("missing_keys") or ()), list(info.get("mismatched_keys") or ())
    prefix = getattr(model, "base_model_prefix", "")
    head = [key for key in missing if prefix and not key.startswith(prefix + ".")] if new_head else []
    if head:
        warnings.warn(f"model {name_or_path!r}: a new output head, initialised at random ({len(head)} parameters: "
                      f"{', '.join(head[:3])}{', ...' if len(head) > 3 else ''}); train it before measuring",
                      stacklevel=3)
        missing = [key for key in missing if key not in head]
    misplaced = sorted(key for key in info.get("unexpected_keys") or () if _belongs_to(model, key))
    shapes = [str(m[0]) if isinstance(m, tuple) else str(m) for m in mismatched]
    problems = [(missing, "missing from its weights (they would be initialised at random)"),
                (shapes, "of another shape in its weights"),
                (misplaced, "in its weights but not in the model its config builds (a layer beyond its depth, or "
                            "another layout)")]
    found = [f"{len(keys)} parameters {what} ({', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''})"
             for keys, what in problems if keys]
    if found:
        raise ValueError(f"model {name_or_path!r} is not the model its weights hold: {'; '.join(found)}. Its "
                         "config.json and weights belong to different models; put the matching files in the folder")


def _belongs_to(model: nn.Module, key: str) -> bool:
    """Whether a checkpoint tensor named ``key`` falls inside a module the model has: its parent module exists, or
    it indexes a module list beyond its length."""
    module = model
    for part in key.split(".")[:-1]:
        if isinstance(module, (nn.ModuleList, nn.Sequential)) and part.isdigit() and int(part) >= len(module):
            return True
        child = module._modules.get(part)
        if child is None:
            return False
        module = child
    return True


def read_config(name_or_path: str, *, trust_remote_code: bool = False, located: tuple[str, bool] | None = None
                ) -> Any:
    """``AutoConfig.from_pretrained`` with every failure one error naming the model and its ``config.json``: none
    there, one that is not a file, one that does not parse, a value of the wrong type (``"vocab_size": "30"``), or
    remote code without ``trust_remote_code=True``. ``located``: what :func:`locate_pretrained` already returned for
    ``name_or_path`` (looked up otherwise)."""
    from transformers import AutoConfig

    source, local_only = located if located is not None else locate_pretrained(name_or_path)
    config_file = Path(source) / "config.json"
    if local_only and Path(source).is_dir() and not config_file.is_file():
        raise FileNotFoundError(f"model {name_or_path!r}: its config.json is not a file" if config_file.exists()
                                else f"model {name_or_path!r} has no config.json: not a Hugging Face model directory")
    try:
        return AutoConfig.from_pretrained(source, local_files_only=local_only, trust_remote_code=trust_remote_code)
    except OSError as error:
        if not config_file.is_file():  # a hub name whose files cannot be fetched or read
            raise FileNotFoundError(f"model {name_or_path!r}: its config.json cannot be read ({error})") from None
        raise ValueError(f"model {name_or_path!r}: its config.json cannot be used here ({' '.join(str(error).split())})"
                         ) from None
    except Exception as error:  # ValueError, KeyError, the hub's strict-dataclass errors (a mistyped field), ...
        if "trust_remote_code" in str(error) and not trust_remote_code:
            raise ValueError(f"model {name_or_path!r} ships its own code; pass trust_remote_code=True if you trust "
                             "it (it is never run by default)") from None
        reason = " ".join(str(error).split())
        raise ValueError(f"model {name_or_path!r}: its config.json cannot be used here ({type(error).__name__}: "
                         f"{reason})") from None


def _warn_full_logits(model_type: str, reason: str) -> None:
    message = (f"model: {reason} for the {model_type!r} family; using model(x).logits (the full B x L x V logits). "
               f"Head-only families: {list(HEAD_ONLY_FAMILIES)}")
    if message not in _WARNED:  # once per family and reason
        _WARNED.add(message)
        warnings.warn(message, stacklevel=3)


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
    """Text <-> ids through a Hugging Face tokenizer (special tokens added on encode, kept out on decode).

    Args:
        tokenizer: a tokenizer, or the name/path of one (so configuration files can name it).
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = load_tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, with the tokenizer's special tokens."""
        return list(self.tokenizer(text)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, special tokens dropped."""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))


__all__ = ["HEAD_ONLY_FAMILIES", "TOKENIZER_FILES", "Head", "MaskedLMDenoiser", "TextCodec", "check_loaded_weights",
           "checkpoint_report", "dtype_argument", "has_tokenizer", "load_model", "load_tokenizer", "locate_pretrained",
           "read_config", "tokenizer_ids"]
