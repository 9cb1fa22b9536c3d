"""The masked-diffusion LM families people run, in one table: what each needs for exact single-site conditionals.

A family is recognised from its model (``config.model_type``, ``config.architectures`` or the class name) and says:

- where the **mask id** comes from: ``config.mask_token_id`` (LLaDA, Dream), or the last id of the vocabulary (MDLM,
  BD3-LM, SEDD's absorbing state);
- the **logit shift**: Dream (adapted from an autoregressive Qwen2) predicts token ``i`` from the hidden state at
  ``i - 1``, so the conditional of position ``i`` is read at ``i - 1`` and position 0, which has none, is never a
  site;
- **padding**: LLaDA and Dream pad with EOS, which answers also end with; EOS stays a token the chains may propose
  and resample, and padding travels as an explicit per-row attention mask in the family's own format (a 2-D mask for
  LLaDA; Dream's boolean ``[B, 1, L, L]`` mask with position ids counting the real tokens);
- **time**: MDLM and BD3-LM take ``timesteps [B]`` (BD3-LM's Hugging Face port fails on ``[B, 1]``) and were
  trained with or without time conditioning (``config.time_conditioning``: without it they see 0, as their own
  samplers give them); SEDD takes
  ``sigma [B]`` always, at the noise level of the call's masked fraction (:func:`.full_sequence.loglinear_sigma`);
- extra arguments of the sampling path (BD3-LM: ``sample_mode=True``, block-causal attention over the sequence so
  far) and the **block size** of block-diffusion models (:class:`~mlm_dynamics.sampling.blocks.BlockSchedule`);
- the transformers versions the family's published remote code is known to load with.

:func:`denoiser_for` builds the right adapter for a model object; :func:`load_diffusion_lm`
(``mlm_dynamics.load_diffusion_lm``) loads a model directory or hub name and does the same. A model of no known family
that is not a Hugging Face masked LM is refused with the options named, never guessed. Imports run one way: this
registry builds on :mod:`.full_sequence`, which knows no family.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .base import Denoiser, VocabInfo, available_device, check_mask_collisions, token_id
from .full_sequence import FullSequenceDenoiser, loglinear_sigma, masked_fraction


@dataclass(frozen=True)
class Family:
    """One family's conventions (see the module docstring).

    Attributes:
        name, description: the family and what it is.
        model_types, class_names: how it is recognised (``config.model_type``/``architectures``, class name).
        mask_id: ``"config"`` (``config.mask_token_id``, else ``default_mask_id``) or ``"last"`` (the last id).
        default_mask_id: the published mask id when the config has none.
        logit_shift: 1 where the logits at ``i - 1`` predict token ``i``.
        attention: ``"none"``, ``"mask"`` (``attention_mask [B, L]``, 1: attend) or ``"dream"`` (4-D + positions).
        pad_is_eos: padding is the EOS id, carried as an attention mask; EOS stays resampleable.
        time_argument: keyword of the noise level (a ``[B]`` tensor).
        time_conditioning: ``"config"`` (``config.time_conditioning``), ``"always"`` or ``"never"``.
        call_kwargs: constant keyword arguments of the sampling path.
        block_size_from: the config attribute of the block size (block diffusion).
        starts_with_bos: its sampler starts every sequence with BOS, a frame token the chains must leave alone.
        top_p_first: its sampler truncates to the nucleus before the top-k (Dream's ``sample_tokens``), where
            Hugging Face's order is the top-k first.
        graph: the ``config.graph.type`` the family needs (SEDD: ``absorb``; its uniform graph has no mask state).
        remote_code: the transformers versions its published modeling code loads with.
        documentation: the how-to page.
    """

    name: str
    description: str
    model_types: tuple[str, ...] = ()
    class_names: tuple[str, ...] = ()
    mask_id: str = "config"
    default_mask_id: int | None = None
    logit_shift: int = 0
    attention: str = "none"
    pad_is_eos: bool = False
    time_argument: str | None = None
    time_conditioning: str = "never"
    call_kwargs: Mapping[str, Any] = field(default_factory=dict)
    block_size_from: str | None = None
    starts_with_bos: bool = False
    top_p_first: bool = False
    graph: str | None = None
    remote_code: str = ""
    documentation: str = "how-to/diffusion-families.md"

    def matches(self, model: Any) -> bool:
        """Whether ``model`` (a module, or a config) belongs to this family."""
        config = getattr(model, "config", model)
        model_type = str(getattr(config, "model_type", "") or "").lower()
        names = {type(model).__name__, *(getattr(config, "architectures", None) or [])}
        return model_type in {t.lower() for t in self.model_types} or bool(names & set(self.class_names))


FAMILIES: dict[str, Family] = {family.name: family for family in (
    Family("llada", "LLaDA, LLaDA 1.5 and LLaDA-MoE (GSAI-ML): a bidirectional transformer trained as a masked "
           "diffusion LM", model_types=("llada", "lladamoe", "llada_moe"),
           class_names=("LLaDAModelLM", "LLaDAMoEModelLM"), default_mask_id=126336, attention="mask",
           pad_is_eos=True, remote_code=">=4.38,<5 (the published modeling files fail under transformers 5)"),
    Family("dream", "Dream (Dream-org): a masked diffusion LM adapted from Qwen2.5, logits shifted by one",
           model_types=("dream",), class_names=("DreamModel",), default_mask_id=151666, logit_shift=1,
           attention="dream", pad_is_eos=True, top_p_first=True,
           remote_code=">=4.46,<5 (the published modeling files fail under transformers 5)"),
    Family("mdlm", "MDLM (kuleshov-group): masked diffusion with the SUBS parameterisation, Hugging Face port",
           model_types=("mdlm",), class_names=("MDLM",), mask_id="last", time_argument="timesteps",
           time_conditioning="config"),
    Family("bd3lm", "BD3-LM (kuleshov-group): block diffusion, block-causal attention in sample mode",
           model_types=("bd3lm",), class_names=("BD3LM",), mask_id="last", time_argument="timesteps",
           time_conditioning="config", call_kwargs={"sample_mode": True},
           block_size_from="block_size", starts_with_bos=True),
    Family("sedd", "SEDD (Lou, Meng and Ermon): score entropy discrete diffusion with the absorbing graph",
           class_names=("SEDD",), mask_id="last", time_argument="sigma", time_conditioning="always", graph="absorb"),
)}


def detect_family(model: Any) -> Family | None:
    """The diffusion family of ``model`` (a module or a config), or ``None``."""
    return next((family for family in FAMILIES.values() if family.matches(model)), None)


def fork_of(model: Any) -> Family | None:
    """The family whose name a model of no registered family carries in its ``model_type`` or class names (Fast-dLLM's
    ``fastdllm_dream`` is Dream's fork), or ``None``."""
    config = getattr(model, "config", model)
    names = " ".join([str(getattr(config, "model_type", "") or ""), type(model).__name__,
                      *(getattr(config, "architectures", None) or [])]).lower()
    return next((family for family in FAMILIES.values() if family.name in names), None)


def is_masked_lm(model: Any) -> bool:
    """Whether ``model`` is a Hugging Face ``*ForMaskedLM`` (handled by :class:`~.huggingface.MaskedLMDenoiser`)."""
    names = {type(model).__name__, *(getattr(getattr(model, "config", None), "architectures", None) or [])}
    return any(name.endswith("ForMaskedLM") for name in names)


def options_text() -> str:
    """The families and routes a refusal names."""
    known = ", ".join(f"{f.name} ({'/'.join(f.model_types or f.class_names)})" for f in FAMILIES.values())
    return (f"known diffusion families: {known}; Hugging Face *ForMaskedLM models go through MaskedLMDenoiser; any "
            "other model that returns [B, L, V] logits: FullSequenceDenoiser(model, VocabInfo(size=..., mask_id=...))")


MASK_SPELLINGS = ("<mask>", "[MASK]", "<|mdm_mask|>", "<|mask|>")
"""How tokenizers that set no ``mask_token`` (LLaDA's) spell the mask token in their vocabulary."""


def tokenizer_mask(tokenizer: Any) -> tuple[str, int] | None:
    """``(token, id)`` of the tokenizer's mask: its ``mask_token``, else a token spelled as a mask
    (:data:`MASK_SPELLINGS`); ``None`` without either."""
    if getattr(tokenizer, "mask_token_id", None) is not None:
        return str(tokenizer.mask_token), int(tokenizer.mask_token_id)
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    return next(((word, int(vocab[word])) for word in MASK_SPELLINGS if word in vocab), None)


def family_mask_id(family: Family, model: Any, tokenizer: Any = None) -> int:
    """The id ``family`` writes into masked positions, from the model's config (or the tokenizer, or the published
    default), checked as an id of its vocabulary; a ValueError naming ``mask_id`` when none is known or when the
    config and the tokenizer (:func:`tokenizer_mask`) name different mask ids: pass ``mask_id=`` where you know the
    right one."""
    config = getattr(model, "config", None)
    if family.mask_id == "last":
        return vocabulary_size(model) - 1
    declared = getattr(config, "mask_token_id", None)
    spelled = tokenizer_mask(tokenizer)
    told = None if spelled is None else spelled[1]
    if declared is not None and spelled is not None and declared != told:
        raise ValueError(f"mask_id: the {family.name} model's config.mask_token_id {declared} disagrees with its "
                         f"tokenizer's mask token {spelled[0]!r} = {told}; pass mask_id= with the id the model was "
                         "trained with")
    for value in (declared, told, family.default_mask_id):
        if value is not None:
            return token_id(f"the {family.name} model's mask id", value, vocabulary_size(model))
    raise ValueError(f"mask_id: the {family.name} model defines no mask token; pass mask_id=")


def vocabulary_size(model: Any) -> int:
    """Logits per position: the output layer's width where the model exposes one, else ``config.vocab_size``
    (SEDD: ``config.tokens + 1`` with the absorbing state)."""
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if output is not None and hasattr(output, "out_features"):
        return int(output.out_features)
    config = getattr(model, "config", None)
    tokens = getattr(config, "tokens", None)
    if tokens is not None:
        return int(tokens) + 1
    size = getattr(config, "vocab_size", None)
    if size is None:
        raise ValueError("model: its vocabulary size is unknown (no output layer, config.vocab_size or "
                         "config.tokens); build FullSequenceDenoiser(model, VocabInfo(size=...)) yourself")
    return int(size)


def time_condition_of(family: Family, model: Any, time_conditioning: bool | None
                      ) -> Callable[[Tensor, Tensor], dict[str, Tensor]] | None:
    """The noise-level argument of each call, ``[B]``: ``sigma(K / L)`` on the log-linear schedule, or zeros for
    models trained without time conditioning. ``None`` for families without one."""
    if family.time_argument is None:
        return None
    if time_conditioning is None:
        declared = getattr(getattr(model, "config", None), "time_conditioning", None)
        if family.time_conditioning == "config" and declared is None:
            raise ValueError(f"time_conditioning: the {family.name} model's config does not say whether it was "
                             "trained with time conditioning; pass time_conditioning=True or False")
        time_conditioning = family.time_conditioning == "always" or bool(declared)
    name, on = family.time_argument, time_conditioning

    def condition(tokens: Tensor, positions: Tensor) -> dict[str, Tensor]:
        t = masked_fraction(tokens, positions)
        sigma = loglinear_sigma(t) if on else torch.zeros_like(t)
        return {name: sigma}

    return condition


def attention_format(family: Family) -> Callable[[Tensor | None], dict[str, Any]] | None:
    """How ``family`` takes padding: keyword arguments of the forward from a bool mask ``[B, L]`` (``None``: no
    padding)."""
    if family.attention == "mask":
        return lambda mask: {} if mask is None else {"attention_mask": mask.long()}
    if family.attention == "dream":
        def dream(mask: Tensor | None) -> dict[str, Any]:
            if mask is None:
                return {"attention_mask": "full"}
            positions = (mask.long().cumsum(-1) - 1).masked_fill(~mask, 1)
            return {"attention_mask": mask[:, None, None, :] & mask[:, None, :, None], "position_ids": positions}
        return dream
    return None


def special_ids(family: Family, tokenizer: Any, size: int, mask_id: int,
                config: Any = None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(forbidden, frame)`` ids: the mask id and the tokenizer's special tokens are never proposed, except EOS where
    padding is EOS (answers end with it); BOS, CLS and SEP (and a pad id that is not EOS) are frame tokens. Without a
    tokenizer, those the model's ``config`` names (``bos_token_id``, ...) are the frame tokens, never proposed
    either."""
    source = tokenizer if tokenizer is not None else config
    eos = getattr(source, "eos_token_id", None)
    structural = {getattr(source, name, None) for name in ("bos_token_id", "cls_token_id", "sep_token_id")}
    pad = getattr(source, "pad_token_id", None)
    if not family.pad_is_eos:
        structural.add(pad)
    frame = tuple(sorted(i for i in structural if isinstance(i, int) and i < size and i != mask_id))
    specials = set(getattr(tokenizer, "all_special_ids", None) or []) if tokenizer is not None else set(frame)
    if family.pad_is_eos and eos is not None:
        specials.discard(eos)
    forbidden = tuple(sorted({mask_id, *specials} & set(range(size))))
    return forbidden, frame


def check_named_family(named: Family | None, detected: Family | None, model: Any) -> None:
    """A ValueError naming both when a family is named for a model that is recognisably another one (a Dream model
    read as LLaDA would lose its one-position logit shift; LLaDA read as SEDD would get the wrong mask id and a noise
    level it never takes), or a Hugging Face masked LM: a named family is for models of a new kind only."""
    if named is None:
        return
    config = getattr(model, "config", model)
    what = f"{type(model).__name__} (model_type {getattr(config, 'model_type', None)!r})"
    if detected is not None and detected is not named:
        raise ValueError(f"family: {named.name!r} was named, but the model is a {detected.name} model ({what}); "
                         f"its conventions differ (mask id, logit shift, padding, noise level), so its conditionals "
                         f"would be silently off; leave family= out or name {detected.name!r}")
    fork = fork_of(model) if detected is None else None
    if fork is not None and fork is not named:
        raise ValueError(f"family: {named.name!r} was named, but the model is a fork of {fork.name} ({what}); its "
                         f"conventions differ (mask id, logit shift, padding, noise level), so its conditionals would "
                         f"be silently off; name {fork.name!r}")
    if detected is None and is_masked_lm(model):
        raise ValueError(f"family: {named.name!r} was named, but the model is a Hugging Face masked LM ({what}), "
                         "read exactly by MaskedLMDenoiser; leave family= out")


def denoiser_for(model: Any, tokenizer: Any = None, *, family: str | None = None, mask_id: int | None = None,
                 time_conditioning: bool | None = None) -> Denoiser:
    """The exact adapter for ``model``: :class:`~.huggingface.MaskedLMDenoiser` for a Hugging Face masked LM, else
    :class:`~.full_sequence.FullSequenceDenoiser` set up for its diffusion family (detected, or named by
    ``family``); a ValueError naming the options for anything else. The model is wrapped, never copied or put in
    another mode.

    Examples:
        A tiny SEDD-style module (class ``SEDD``, absorbing state last) is recognised from its class:

        >>> import torch
        >>> from types import SimpleNamespace
        >>> from mlm_dynamics.models.families import denoiser_for
        >>> class SEDD(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.config = SimpleNamespace(tokens=5)
        ...         self.out = torch.nn.Embedding(6, 6)
        ...     def forward(self, indices, sigma):
        ...         return self.out(indices)
        >>> denoiser = denoiser_for(SEDD())
        >>> denoiser.vocab.mask_id, tuple(denoiser.conditional_logits(torch.zeros(1, 3, dtype=torch.long),
        ...                                                           torch.tensor([[1]])).shape)
        (5, (1, 1, 6))
    """
    from .huggingface import MaskedLMDenoiser

    detected = detect_family(model)
    chosen = FAMILIES.get(family) if family is not None else detected
    if family is not None and chosen is None:
        raise ValueError(f"family must be one of {sorted(FAMILIES)}, got {family!r}")
    check_named_family(chosen if family is not None else None, detected, model)
    if chosen is None:
        if is_masked_lm(model):
            return MaskedLMDenoiser(model, tokenizer=tokenizer, mask_id=mask_id)
        raise ValueError(f"model: a {type(model).__name__} is neither a known masked-diffusion family nor a masked "
                         f"LM, so its conditionals cannot be read without knowing its conventions; {options_text()}")
    graph = getattr(getattr(getattr(model, "config", None), "graph", None), "type", chosen.graph)
    if chosen.graph is not None and graph != chosen.graph:
        raise ValueError(f"model: a {chosen.name} model with the {graph!r} graph has no mask state, so it gives no "
                         f"masked conditionals; only the {chosen.graph!r} graph does")
    size = vocabulary_size(model)
    config = getattr(model, "config", None)
    mask = token_id("mask_id", mask_id, size) if mask_id is not None else family_mask_id(chosen, model, tokenizer)
    check_mask_collisions(mask, {f"{source}'s {name}": getattr(owner, name, None)
                                 for source, owner in (("config", config), ("tokenizer", tokenizer))
                                 for name in ("pad_token_id", "eos_token_id")})
    forbidden, frame = special_ids(chosen, tokenizer, size, mask, config)
    if chosen.starts_with_bos and not frame:
        warnings.warn(f"tokenizer: {chosen.name} samples start with BOS, and neither a tokenizer nor the config names "
                      "its id, so nothing keeps a chain or a block schedule from resampling it as a site; pass the "
                      f"tokenizer (denoiser_for(model, tokenizer)) or set config.bos_token_id", RuntimeWarning,
                      stacklevel=2)
    vocab = VocabInfo(size=size, mask_id=mask, forbidden_ids=forbidden, frame_ids=frame)
    time = time_condition_of(chosen, model, time_conditioning)
    constants = dict(chosen.call_kwargs)

    def condition(tokens: Tensor, positions: Tensor) -> dict[str, Any]:
        return {**constants, **(time(tokens, positions) if time is not None else {})}

    padding = None
    if chosen.pad_is_eos:
        padding = getattr(tokenizer, "pad_token_id", None)
        padding = padding if padding is not None else getattr(getattr(model, "config", None), "pad_token_id", None)
    return FullSequenceDenoiser(model, vocab, condition=condition if time is not None or constants else None,
                                logit_shift=chosen.logit_shift, attention=attention_format(chosen), family=chosen.name,
                                padding_id=padding)


def load_diffusion_lm(name_or_path: str, *, trust_remote_code: bool = False, family: str | None = None,
                      mask_id: int | None = None, time_conditioning: bool | None = None,
                      device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> tuple[Denoiser, Any]:
    """``(denoiser, tokenizer)`` from a model directory or hub name: the config says the family (or a masked LM;
    ``family`` names one for a model of a new kind that follows its conventions), the model loads with
    ``AutoModel`` (``AutoModelForMaskedLM``) and :func:`denoiser_for` wraps it; the tokenizer is ``None`` where there
    is none. Every failure is one error naming the model: remote code without ``trust_remote_code=True``, a config of
    no known family, or a family's published code failing under this transformers (with the versions it is known to
    load with). The model is new and put in eval mode; to measure a model being trained, wrap that model with
    :func:`denoiser_for`."""
    import transformers
    from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

    from .huggingface import has_tokenizer, load_model, locate_pretrained, read_config

    available_device(device)
    source, local_only = locate_pretrained(name_or_path)
    config = read_config(name_or_path, trust_remote_code=trust_remote_code, located=(source, local_only))
    if family is not None and family not in FAMILIES:
        raise ValueError(f"family must be one of {sorted(FAMILIES)}, got {family!r}")
    detected = detect_family(config)
    chosen = FAMILIES[family] if family is not None else detected
    check_named_family(chosen if family is not None else None, detected, config)
    if chosen is None and not is_masked_lm(config):
        raise ValueError(f"model {name_or_path!r} (model_type {getattr(config, 'model_type', None)!r}) is neither a "
                         f"known masked-diffusion family nor a masked LM; {options_text()}")
    auto = AutoModel if chosen is not None else AutoModelForMaskedLM
    try:
        model = load_model(auto, name_or_path, dtype=dtype, trust_remote_code=trust_remote_code)
    except (AttributeError, KeyError, TypeError, ImportError) as error:
        known = f"; its published code is known to load with transformers {chosen.remote_code}" if (
            chosen is not None and chosen.remote_code) else ""
        raise ValueError(f"model {name_or_path!r}: its {chosen.name if chosen else 'model'} code did not load with "
                         f"transformers {transformers.__version__} ({type(error).__name__}: {error}){known}") from None
    try:  # none where the folder holds no tokenizer (transformers would make up an empty one)
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only,
                                                  trust_remote_code=trust_remote_code) if has_tokenizer(
            source, local_only) else None
    except (OSError, ValueError, TypeError, KeyError):
        tokenizer = None
    denoiser = denoiser_for(model.eval(), tokenizer, family=None if chosen is None else chosen.name, mask_id=mask_id,
                            time_conditioning=time_conditioning)
    return denoiser.to(device), tokenizer


__all__ = ["FAMILIES", "MASK_SPELLINGS", "Family", "attention_format", "check_named_family", "denoiser_for",
           "detect_family", "family_mask_id", "fork_of", "is_masked_lm", "load_diffusion_lm", "options_text",
           "special_ids", "time_condition_of", "tokenizer_mask", "vocabulary_size"]
