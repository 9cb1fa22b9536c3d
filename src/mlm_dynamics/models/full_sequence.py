"""Adapter for models that return full-sequence logits ``[B, L, V]``: masked-diffusion denoisers and any other model.

``FullSequenceDenoiser(model, vocab)`` writes ``vocab.mask_id`` at the requested positions, calls the model, and
gathers the logits there. The model is registered as a submodule, so ``.to()``, ``.eval()`` and ``device`` reach it;
a function that closes over modules (``lambda x: model(x).logits``, a bound ``model.forward``) has those modules
found and registered too. Outputs may be a tensor, a tuple (first element) or a Hugging Face output (``.logits``).
Models that return log-probabilities (MDLM-style) need nothing special: log-probabilities are logits up to a constant
per row; ``-inf`` is accepted at forbidden ids (the mask token, say), which no diagnostic ever reads.

Models that predict token ``i`` from the hidden state at ``i - 1`` (Dream, adapted from an autoregressive model)
take ``logit_shift=1``: the conditional of position ``i`` is read at ``i - 1``, and position 0 has none (it is never a
site). Padding reaches the model through ``attention(mask) -> kwargs``, which formats a per-row bool mask
``[B, L]`` (or ``None``) the way the model takes it. The families people run have all of this set for them:
:func:`~mlm_dynamics.models.families.denoiser_for` and :func:`~mlm_dynamics.models.families.load_diffusion_lm`
(which import this module; this module imports no family).

Time or noise conditioning: ``condition(masked_tokens, positions) -> kwargs`` adds keyword arguments to each call.
The Glauber convention (:func:`masked_fraction`) is ``t = K / L``, the fraction of positions masked in the call
(``1 / L`` for single-site updates), mapped through the model's own noise schedule, e.g. MDLM's log-linear
``sigma(t) = -log(1 - (1 - eps) t)`` (:func:`loglinear_sigma`). A backbone trained without time conditioning
(MDLM's ``time_conditioning=False``, which feeds ``sigma = 0`` to its backbone) gets ``sigma = 0`` with
``masked_diffusion(..., time_conditioning=False)``, so the conditionals are the generator's own.

The adapter never changes the model it wraps (no ``.eval()``, no copy): the callbacks switch modes for each run and
restore them.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from .base import Denoiser, VocabInfo, mask_positions

Condition = Callable[[Tensor, Tensor], Mapping[str, Any]]


def masked_fraction(tokens: Tensor, positions: Tensor) -> Tensor:
    """``[B]`` fraction of positions masked in the call: ``K / L``."""
    return torch.full((tokens.shape[0],), positions.shape[1] / tokens.shape[1], device=tokens.device)


def loglinear_sigma(t: Tensor, eps: float = 1e-3) -> Tensor:
    """MDLM's log-linear noise ``sigma(t) = -log(1 - (1 - eps) t)`` (total noise at masked fraction ``t``)."""
    return -torch.log1p(-(1 - eps) * t)


def time_condition(name: str = "sigma", schedule: Callable[[Tensor], Tensor] | None = None) -> Condition:
    """``condition`` passing ``name = schedule(K / L)`` (default: the masked fraction itself) per row."""
    def condition(tokens: Tensor, positions: Tensor) -> dict[str, Tensor]:
        t = masked_fraction(tokens, positions)
        return {name: t if schedule is None else schedule(t)}

    return condition


def zero_time(name: str = "sigma") -> Condition:
    """``condition`` passing ``name = 0`` per row: what a backbone trained without time conditioning sees (MDLM's
    ``_process_sigma`` zeroes sigma when ``time_conditioning=False``)."""
    def condition(tokens: Tensor, positions: Tensor) -> dict[str, Tensor]:
        return {name: torch.zeros(tokens.shape[0], device=tokens.device)}

    return condition


class _Function(nn.Module):
    """A plain function as a module, with the modules it closes over registered (so they move and switch mode)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn
        self.found = nn.ModuleList(_modules_of(fn))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def _modules_of(fn: Callable[..., Any]) -> list[nn.Module]:
    """Modules a function closes over: its bound ``self``, closure cells and globals it names."""
    found: list[nn.Module] = []
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, nn.Module):
        found.append(owner)
    closure = inspect.getclosurevars(fn) if inspect.isfunction(fn) else None
    if closure is not None:
        for value in [*closure.nonlocals.values(), *closure.globals.values()]:
            if isinstance(value, nn.Module) and not any(value is m for m in found):
                found.append(value)
    return found


def padded_rows(tokens: Tensor, mask_id: int, padding_id: int) -> tuple[list[int], list[int]]:
    """``(left, right)``: rows of ``tokens [B, L]`` (masked positions written with ``mask_id``) that start with
    ``padding_id`` (left padding), and rows where it comes right before the first masked position after some other
    token (a right-padded prompt: ``[prompt, pad, ..., pad, mask, ...]``). At a decode's first step nothing is
    committed yet, so a padding id there belongs to the prompt. Cost: none."""
    masked = tokens == mask_id
    first = torch.where(masked.any(1), masked.float().argmax(1), torch.full_like(masked[:, 0], -1, dtype=torch.long))
    before = tokens.gather(1, (first - 1).clamp_min(0)[:, None])[:, 0]
    left = (tokens[:, 0] == padding_id).nonzero().squeeze(1).tolist()
    right = ((first > 1) & (before == padding_id) & (tokens[:, 0] != padding_id)).nonzero().squeeze(1).tolist()
    return left, right


class FullSequenceDenoiser(Denoiser):
    """See the module docstring. Cost: one forward of ``B`` rows, and the ``[B, L, V]`` logits the model builds
    (prefer :class:`~mlm_dynamics.MaskedLMDenoiser` for Hugging Face MLMs: it applies the head where needed only).

    Args:
        model: an ``nn.Module`` (or a function, whose closed-over modules are registered).
        vocab: vocabulary metadata; ``vocab.mask_id`` is written at the masked positions.
        condition: optional ``(masked_tokens, positions) -> kwargs`` for time/noise conditioning.
        logit_shift: 1 for models whose logits at ``i - 1`` predict token ``i`` (positions below it are no sites).
        attention: optional ``mask -> kwargs`` passing padding (a bool ``[B, L]``, or ``None``) to the model; without
            it, rows with padding are refused.
        family: the family name, when built for one (:mod:`~mlm_dynamics.models.families`).
        padding_id: the id that pads rows when it is also a real token (LLaDA's and Dream's EOS): a row that starts
            with it while no ``attention_mask`` is given is warned about once (the model would attend to the
            padding, and the conditionals be off).

    Examples:
        Any function from tokens ``[B, L]`` to logits ``[B, L, V]`` (here uniform ones) becomes a denoiser:

        >>> import torch
        >>> from mlm_dynamics import FullSequenceDenoiser, VocabInfo
        >>> denoiser = FullSequenceDenoiser(lambda x: torch.zeros(*x.shape, 5), VocabInfo(size=5, mask_id=4,
        ...                                                                                  forbidden_ids=(4,)))
        >>> logits = denoiser.conditional_logits(torch.zeros(2, 3, dtype=torch.long), torch.tensor([[0], [2]]))
        >>> tuple(logits.shape)
        (2, 1, 5)

        An MDLM-style backbone ``forward(x, sigma)``: ``FullSequenceDenoiser.masked_diffusion(backbone, vocab,
        time_conditioning=False)`` (as it was trained); a published family: ``mlm_dynamics.load_diffusion_lm(path)``.
    """

    model: nn.Module
    forbidden: Tensor

    def __init__(self, model: nn.Module | Callable[..., Any], vocab: VocabInfo, *,
                 condition: Condition | None = None, logit_shift: int = 0,
                 attention: Callable[[Tensor | None], Mapping[str, Any]] | None = None,
                 family: str | None = None, padding_id: int | None = None) -> None:
        super().__init__()
        if vocab.mask_id is None:
            raise ValueError("vocab.mask_id is required: FullSequenceDenoiser writes it into masked positions")
        if logit_shift not in (0, 1):
            raise ValueError(f"logit_shift must be 0 or 1, got {logit_shift!r}")
        self.mask_id: int = vocab.mask_id
        self.model = model if isinstance(model, nn.Module) else _Function(model)
        self.vocab = vocab
        self.condition = condition
        self.logit_shift = logit_shift
        self.attention = attention
        self.takes_attention_mask = attention is not None
        self.family = family
        self.padding_id, self.warned_padding = padding_id, False
        self.register_buffer("forbidden", ~vocab.allowed_mask(), persistent=False)

    def warn_padding(self, rows: list[int], kind: str) -> None:
        """Once per denoiser: rows of a call without ``attention_mask`` that ``kind`` (start with, or end their
        prompt with) the padding id, which is also a real token: the model attends to it, so their conditionals are
        not those of the unpadded rows."""
        self.warned_padding = True
        warnings.warn(f"tokens: rows {rows[:5]} {kind} the padding id {self.padding_id} and no attention_mask= was "
                      "given: the model attends to the padding, so their conditionals are not those of the unpadded "
                      "rows; pass attention_mask= (1: a real token)", RuntimeWarning, stacklevel=5)

    def free_mask(self, tokens: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """As :meth:`Denoiser.free_mask`; with a logit shift, positions before it have no conditional."""
        free = super().free_mask(tokens, attention_mask)
        if self.logit_shift:
            free[:, : self.logit_shift] = False
        return free

    def _masked_logits(self, tokens: Tensor, positions: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        if bool((positions < self.logit_shift).any()):
            raise ValueError(f"positions: with logit_shift={self.logit_shift} the conditional of position i is read "
                             f"at i - {self.logit_shift}, so positions below {self.logit_shift} have none")
        if attention_mask is None and self.padding_id is not None and not self.warned_padding:
            padded = (tokens[:, 0] == self.padding_id).nonzero().squeeze(1)
            if len(padded):
                self.warn_padding(padded.tolist(), "start with")
        masked = mask_positions(tokens, positions, self.mask_id)
        kwargs = dict(self.condition(masked, positions)) if self.condition is not None else {}
        if self.attention is not None:
            kwargs.update(self.attention(attention_mask))
        try:
            output = self.model(masked, **kwargs)
        except (AssertionError, TypeError) as error:  # the model refused the call's form, often without a word
            shown = ", ".join(f"{k}={tuple(v.shape) if isinstance(v, Tensor) else v!r}" for k, v in kwargs.items())
            raise RuntimeError(
                f"model: {type(self.model).__name__} refused model(tokens {tuple(masked.shape)}"
                f"{', ' + shown if shown else ''}) with {type(error).__name__}: {error or '(no message)'}; a "
                "published family is attached with the arguments its sampler passes by denoiser_for(model) or "
                "load_diffusion_lm(path) (BD3-LM: timesteps [B], sample_mode=True, SDPA attention)") from error
        logits = output.logits if hasattr(output, "logits") else output[0] if isinstance(output, tuple) else output
        if not isinstance(logits, Tensor) or logits.dim() != 3 or logits.shape[:2] != tokens.shape:
            raise RuntimeError(f"model must return [B, L, V] logits (a tensor, a tuple or an output with .logits), "
                               f"got {getattr(logits, 'shape', type(logits))}")
        if logits.shape[-1] != self.vocab.size:
            raise RuntimeError(f"model returned {logits.shape[-1]} logits per position, but vocab.size is "
                               f"{self.vocab.size}")
        read = positions - self.logit_shift
        picked = logits.gather(1, read[..., None].expand(-1, -1, logits.shape[-1])).float()
        return picked.masked_fill(self.forbidden.to(picked.device), 0.0)  # forbidden ids are never read

    @classmethod
    def masked_diffusion(cls, backbone: nn.Module, vocab: VocabInfo, *, time_conditioning: bool,
                         time_argument: str = "sigma",
                         schedule: Callable[[Tensor], Tensor] | None = loglinear_sigma) -> FullSequenceDenoiser:
        """A ``forward(x, sigma)`` masked-diffusion backbone (MDLM/SEDD DiT).

        ``time_conditioning`` is required, as the backbone's training decides it and a wrong guess is silently
        inexact: ``True``: ``sigma = schedule(K / L)``, the noise level at which the call's masked fraction is
        expected. ``False`` (MDLM's default, its option of the same name): ``sigma = 0``, what such a backbone was
        trained with. Either way the conditionals equal ``log_softmax`` of the backbone's logits at the masked
        positions with the mask id excluded, which is MDLM's SUBS parameterization there.
        """
        if not isinstance(time_conditioning, bool):
            raise ValueError("time_conditioning must be True or False: whether the backbone was trained with time "
                             f"conditioning (MDLM's default is False), got {time_conditioning!r}")
        condition = time_condition(time_argument, schedule) if time_conditioning else zero_time(time_argument)
        return cls(backbone, vocab, condition=condition)


__all__ = ["Condition", "FullSequenceDenoiser", "loglinear_sigma", "masked_fraction", "padded_rows", "time_condition",
           "zero_time"]
