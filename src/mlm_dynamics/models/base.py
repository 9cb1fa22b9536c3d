"""The one protocol between models and diagnostics.

A :class:`Denoiser` maps token ids ``x`` of shape ``[B, L]`` and positions ``P`` of shape ``[B, K]`` to the
logits ``l[b, k, :] = logits of x[b, P[b, k]] given x[b] with all K positions of row b masked``, shape ``[B, K, V]``.
For ``K = 1`` this is the single-site conditional ``p_i(. | x_{-i}) = softmax(l_i)`` that drives Glauber dynamics.

Padding: an optional per-row ``attention_mask [B, L]`` (True where the token is real) goes with the tokens to the
model and keeps padded positions out of the sites. Models that pad with a token that also has a meaning of its own
(LLaDA and Dream pad with EOS, which answers also end with) need it: padding cannot be told from the tokens there.
Everything that builds rows from given rows (chains, coupled pairs, rectangles, influence, margins, probes) carries
each row's mask along.

Everything in :mod:`mlm_dynamics` (sampler, coupling, rectangle test, influence, margins) talks to models only
through :meth:`Denoiser.conditional_logits` and :class:`VocabInfo`. That one door also keeps time: under
:func:`forward_deadline` it counts the forward rows and refuses the next forward pass once the deadline has passed
(:class:`OutOfTime`), which is how a scheduled run is held to its budget.

A conditional is a law only in eval mode: with dropout on, the same call gives two answers, and batch norm makes a
row's answer depend on the other rows. A measurement (any call with gradients off, which every diagnostic makes) of
a model with dropout or batch norm left in train mode runs in eval mode and gives every module its own mode back
afterwards (:func:`evaluating`), with one warning per denoiser; a call with gradients on (a training loss) is left as
the caller set it.
"""

from __future__ import annotations

import abc
import math
import operator
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn


def token_id(name: str, value: object, size: int | None = None) -> int:
    """``value`` as a token id, or a ValueError naming ``name``: an integer (a Python, NumPy or 0-d integer tensor
    value; never a bool, float or string, which would index the wrong row or fail far from here) in ``[0, size)``.
    The one check of every id a denoiser, a loader or a callback is given."""
    integral = not isinstance(value, (bool, float, str, bytes)) and not (
        isinstance(value, Tensor) and (value.dtype == torch.bool or value.is_floating_point() or value.dim() != 0))
    try:
        if not integral:
            raise TypeError
        index = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"{name} must be an integer token id, got {value!r} ({type(value).__name__})") from None
    if size is not None and not 0 <= index < size:
        raise ValueError(f"{name} must be a token id in [0, {size}) (the model's logits cover the ids below its "
                         f"vocabulary size), got {index}")
    return index


def token_ids(name: str, values: object, size: int | None = None) -> tuple[int, ...]:
    """Every id of ``values`` (a sequence) through :func:`token_id`, named ``name[k]``; a ValueError naming ``name``
    for anything that is not a sequence of ids."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"{name} must be a sequence of integer token ids, got {values!r}")
    return tuple(token_id(f"{name}[{k}]", value, size) for k, value in enumerate(values))


def check_mask_collisions(mask_id: int, others: dict[str, object], name: str = "mask_id") -> None:
    """A ValueError naming ``name`` when the mask id is also one of ``others`` (``{"pad_id": 0, "eos_token_id":
    2}``): a masked position could not be told from padding or an ending."""
    for what, other in others.items():
        values = other if isinstance(other, (list, tuple)) else [other]  # a config may name several endings
        if any(value is not None and not isinstance(value, bool) and value == mask_id for value in values):
            raise ValueError(f"{name}: the mask id {mask_id} is also the {what}, so a masked position could not be "
                             "told from it; pass the id the model was trained to mask with")


@dataclass(frozen=True)
class VocabInfo:
    """Vocabulary metadata a diagnostic needs.

    Attributes:
        size: number of logits per position, ``V``.
        mask_id: id written into masked positions (``None`` for models that mask implicitly, e.g. the toy MRFs).
        forbidden_ids: ids that must never be proposed (their logits are set to ``-inf`` before sampling).
        frame_ids: ids that mark structural positions (``[CLS]``, ``[SEP]``, ``[PAD]``); such positions are never
            resampled.
        max_length: the longest ``L`` the model accepts (``None`` when unbounded).
        pad_id: the id that pads rows of a batch to one length (a frame id: never resampled); ragged start
            sequences are padded with it (``None``: the model has no padding token).
    """

    size: int
    mask_id: int | None = None
    forbidden_ids: tuple[int, ...] = field(default_factory=tuple)
    frame_ids: tuple[int, ...] = field(default_factory=tuple)
    max_length: int | None = None
    pad_id: int | None = None

    def __post_init__(self) -> None:
        size = token_id("VocabInfo.size", self.size)
        if size < 2:
            raise ValueError(f"VocabInfo.size must be >= 2, got {size}")
        checked: dict[str, object] = {"size": size}
        for name in ("mask_id", "pad_id"):
            value = getattr(self, name)
            checked[name] = None if value is None else token_id(f"VocabInfo.{name}", value, size)
        for name in ("forbidden_ids", "frame_ids"):
            checked[name] = token_ids(f"VocabInfo.{name}", getattr(self, name), size)
        for name, value in checked.items():  # plain ints from here on (a NumPy or tensor id is taken as its value)
            object.__setattr__(self, name, value)
        if self.mask_id is not None and self.mask_id in self.frame_ids:  # the padding id among them
            raise ValueError(f"VocabInfo.mask_id {self.mask_id} is also one of frame_ids {self.frame_ids} (a "
                             "structural token, never resampled, or padding): a masked position could not be told "
                             "from it")
        if self.pad_id is not None and self.pad_id not in self.frame_ids:
            raise ValueError(f"VocabInfo.pad_id {self.pad_id} must be one of frame_ids {self.frame_ids} (padding is "
                             "never resampled)")
        if len(set(self.forbidden_ids)) >= self.size:
            raise ValueError("VocabInfo.forbidden_ids forbids every token; nothing could be proposed")

    def allowed_mask(self, device: torch.device | str | None = None) -> Tensor:
        """Boolean ``[V]``: True for the tokens that may be proposed."""
        allowed = torch.ones(self.size, dtype=torch.bool, device=device)
        if self.forbidden_ids:
            allowed[list(self.forbidden_ids)] = False
        return allowed


def check_attention_mask(attention_mask: Tensor | None, tokens: Tensor) -> Tensor | None:
    """``attention_mask`` as a bool ``[B, L]`` on the tokens' device (True: a real token), ``None`` when absent or
    all True (nothing padded); a ValueError naming it for another shape or a row with nothing to attend to."""
    if attention_mask is None:
        return None
    if not isinstance(attention_mask, Tensor) or tuple(attention_mask.shape) != tuple(tokens.shape):
        raise ValueError(f"attention_mask must be a [B, L] tensor like the tokens {tuple(tokens.shape)}, got "
                         f"{tuple(getattr(attention_mask, 'shape', ())) or type(attention_mask).__name__}")
    if attention_mask.dtype.is_floating_point and not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise ValueError("attention_mask must hold 0/1 or booleans (1: a real token, 0: padding)")
    mask = attention_mask.to(tokens.device).bool()
    if not bool(mask.any(1).all()):
        raise ValueError("attention_mask: a row has no real token (every position is padding)")
    return None if bool(mask.all()) else mask


class OutOfTime(Exception):
    """The deadline of :func:`forward_deadline` passed: raised before the next forward pass (not an error of the
    model: the caller discards the work and knows, from :attr:`Deadline.rows`, how far it got)."""


@dataclass
class Deadline:
    """A forward-pass deadline: ``at`` in ``time.perf_counter`` seconds, the forward ``rows`` done under it, and
    whether it ``refused`` a forward pass (even one whose :class:`OutOfTime` the caller caught and stopped on)."""

    at: float
    rows: int = 0
    refused: bool = False

    def admit(self, rows: int) -> None:
        """Count ``rows`` about to be computed, or raise :class:`OutOfTime` if the deadline has passed."""
        if time.perf_counter() >= self.at:
            self.refused = True
            raise OutOfTime(f"deadline passed after {self.rows} forward rows")
        self.rows += rows


_DEADLINE: ContextVar[Deadline | None] = ContextVar("mlm_dynamics_forward_deadline", default=None)


@contextmanager
def forward_deadline(seconds: float) -> Iterator[Deadline]:
    """Within the block, every :meth:`Denoiser.conditional_logits` call first checks the clock: ``seconds`` after
    entering, the next call raises :class:`OutOfTime` (so the block overruns by at most one forward pass). Yields the
    :class:`Deadline`, whose ``rows`` count the forward rows computed. Nested deadlines: the inner one applies."""
    limit = Deadline(time.perf_counter() + seconds)
    token = _DEADLINE.set(limit)
    try:
        yield limit
    finally:
        _DEADLINE.reset(token)


@dataclass
class Meter:
    """Forward passes counted at the door while :func:`metering` holds it open: ``rows`` (sequences), ``tokens``
    (sequences x positions), ``calls`` (passes); ``excluded_seconds`` is for the owner's bookkeeping (time an inner
    meter took, see :class:`~mlm_dynamics.models.cost.CostLedger`)."""

    rows: int = 0
    tokens: int = 0
    calls: int = 0
    excluded_seconds: float = 0.0


_METERS: ContextVar[tuple[Meter, ...]] = ContextVar("mlm_dynamics_forward_meters", default=())


@contextmanager
def metering(meter: Meter) -> Iterator[Meter]:
    """Within the block, every :meth:`Denoiser.conditional_logits` call adds its rows, tokens and one call to
    ``meter`` (and to every meter opened around the block)."""
    token = _METERS.set((*_METERS.get(), meter))
    try:
        yield meter
    finally:
        _METERS.reset(token)


def count_forward(tokens: Tensor) -> None:
    """Add a forward pass over ``tokens [B, L]`` to every open :class:`Meter`: what a diagnostic calls before a
    forward of the model that does not go through :meth:`Denoiser.conditional_logits` (hidden states for
    embeddings)."""
    for meter in _METERS.get():
        meter.rows += int(tokens.shape[0])
        meter.tokens += int(tokens.numel())
        meter.calls += 1


def check_overhead(value: object) -> None:
    """A ValueError naming ``overhead`` unless ``value`` is ``None`` (no cap) or a fraction in (0, 1] of the loop's
    time: the one check every entry point (the Lightning callbacks, the HF callback, the scheduled probes,
    ``monitor_sampler``) makes before it shares the budget out."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not 0 < value <= 1):
        raise ValueError(f"overhead must be a fraction in (0, 1] of the loop's time, or None (no cap), got {value!r}")


def available_device(device: str | torch.device, name: str = "device") -> torch.device:
    """``torch.device(device)``, or a ValueError naming ``name`` if it does not parse or is not present on this
    machine: what every loader checks before it reads a weight."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"{name} must be a torch device such as 'cpu' or 'cuda:0', got {device!r}") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name} is {str(device)!r} but no CUDA device is available on this machine")
    if parsed.type == "cuda" and parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise ValueError(f"{name} is {str(device)!r} but only {torch.cuda.device_count()} CUDA devices exist")
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{name} is {str(device)!r} but MPS is not available on this machine")
    return parsed


@contextmanager
def evaluating(*modules: nn.Module) -> Iterator[None]:
    """Every module under ``modules`` in eval mode inside; on exit, whatever happened, each one's ``training`` flag
    as it was (a part kept in eval mode stays so, the rest goes back to train mode). Cost: one pass over the
    modules each way."""
    modes = [(module, module.training) for root in modules for module in root.modules()]
    try:
        for root in modules:
            root.eval()
        yield
    finally:
        for module, training in modes:
            module.training = training


class Denoiser(nn.Module, abc.ABC):
    """Base class: validated access to masked conditionals.

    Subclasses set ``self.vocab`` and implement :meth:`_masked_logits`; callers use :meth:`conditional_logits`,
    which checks shapes, ranges and the output (NaN/inf logits raise). A subclass whose model can exclude padding
    from attention sets ``takes_attention_mask = True`` and accepts ``attention_mask`` in :meth:`_masked_logits`.
    """

    vocab: VocabInfo
    takes_attention_mask: bool = False

    @abc.abstractmethod
    def _masked_logits(self, tokens: Tensor, positions: Tensor) -> Tensor:
        """Logits ``[B, K, V]`` at ``positions`` with those positions masked; inputs already validated (subclasses
        with ``takes_attention_mask`` also receive ``attention_mask``: bool ``[B, L]``, or ``None`` when nothing is
        padded)."""

    @property
    def device(self) -> torch.device:
        """The device of the model's parameters (where token tensors must be)."""
        for tensor in (*self.parameters(), *self.buffers()):
            return tensor.device
        return torch.device("cpu")

    def conditional_logits(self, tokens: Tensor, positions: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Masked conditional logits.

        Args:
            tokens: ``[B, L]`` integer ids.
            positions: ``[B]`` or ``[B, K]`` positions in ``[0, L)``, distinct within a row.
            attention_mask: optional ``[B, L]``, True (1) for real tokens and False (0) for padding.

        Returns:
            ``[B, K, V]`` float logits (``[B, 1, V]`` for 1-D ``positions``). Cost: one forward pass of ``B`` rows.

        Raises:
            OutOfTime: under :func:`forward_deadline`, once its deadline has passed (before the forward pass).

        Under :func:`metering` the pass is counted (rows, tokens, one call) before it runs. With gradients off, a
        model in train mode is measured in eval mode and left in its own modes (the module docstring).
        """
        limit = _DEADLINE.get()
        if limit is not None:
            limit.admit(int(tokens.shape[0]))
        count_forward(tokens)
        if positions.dim() == 1:
            positions = positions[:, None]
        self._validate(tokens, positions)
        mask = check_attention_mask(attention_mask, tokens)
        if mask is not None and not bool(mask.gather(1, positions).all()):
            raise ValueError("positions: a position to resample is padding (attention_mask 0 there)")
        if mask is not None and not self.takes_attention_mask:
            raise ValueError(f"attention_mask: {type(self).__name__} cannot exclude padding from its model's "
                             "attention; pass rows without padding, or use a denoiser whose model takes masks "
                             "(MaskedLMDenoiser, FullSequenceDenoiser with attention=)")
        extra = {} if mask is None else {"attention_mask": mask}
        train_mode = not torch.is_grad_enabled() and any(module.training for module in self._random_in_training())
        if train_mode and not getattr(self, "_warned_train_mode", False):
            self._warned_train_mode = True
            warnings.warn(f"{type(self).__name__}: the model is in train mode (dropout on, so its conditionals are "
                          "not a law); measured in eval mode, its modes left as they were", stacklevel=2)
        try:
            with evaluating(self) if train_mode else nullcontext():
                logits = self._masked_logits(tokens, positions, **extra)
        except (RuntimeError, NotImplementedError):
            first = next(self.parameters(), None)
            if first is not None and first.is_meta:  # asked only when the forward failed: no cost on the hot path
                raise ValueError(f"model: the {type(self).__name__}'s weights are on the meta device (built without "
                                 "weights, e.g. under init_empty_weights or torch.device('meta')); load or "
                                 "materialise them before measuring") from None
            raise
        expected = (tokens.shape[0], positions.shape[1], self.vocab.size)
        if tuple(logits.shape) != expected:
            raise RuntimeError(f"{type(self).__name__} returned logits of shape {tuple(logits.shape)}, "
                               f"expected {expected}")
        broken = torch.isnan(logits) | (logits == math.inf)  # -inf is a log-probability of 0: allowed
        if broken.any():
            bad = broken.any(-1).nonzero()[:5].tolist()
            raise FloatingPointError(f"{type(self).__name__} produced NaN/+inf logits at (row, slot) {bad}")
        return logits

    def _random_in_training(self) -> list[nn.Module]:
        """The modules whose output is random or batch-dependent in train mode (dropout with ``p > 0``, batch
        norm), found once; none for a model without them, so a measurement of such a model never switches modes."""
        found = self.__dict__.get("_random_modules")
        if found is None:
            found = [module for module in self.modules() if isinstance(module, nn.modules.batchnorm._BatchNorm)
                     or (isinstance(module, nn.modules.dropout._DropoutNd) and module.p > 0)]
            self.__dict__["_random_modules"] = found
        return found

    def chunked_conditional_logits(self, tokens: Tensor, positions: Tensor, chunk_size: int = 256,
                                   attention_mask: Tensor | None = None) -> Tensor:
        """:meth:`conditional_logits` over many rows, ``chunk_size`` rows per forward pass (bounded activations)."""
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        return torch.cat([self.conditional_logits(tokens[s:s + chunk_size], positions[s:s + chunk_size],
                                                  None if attention_mask is None else attention_mask[s:s + chunk_size])
                          for s in range(0, tokens.shape[0], chunk_size)])

    def free_mask(self, tokens: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Boolean ``[B, L]``: True where the token is not a frame token and not padding (``attention_mask``)."""
        frame = torch.tensor(self.vocab.frame_ids, dtype=tokens.dtype, device=tokens.device)
        free = ~torch.isin(tokens, frame)
        mask = check_attention_mask(attention_mask, tokens)
        return free if mask is None else free & mask

    def padded_sites(self, tokens: Tensor, where: Tensor | None = None,
                     attention_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(sites [B, n_max], counts [B])``: each row's non-frame, non-padding positions (restricted to
        ``where [B, L]`` if given) first, in order, padded by repeating its last one; for rows of different lengths
        (padded batches), to pass as ``sites=``, ``site_counts=``."""
        self._validate_tokens(tokens)
        free = self.free_mask(tokens, attention_mask)
        free = free if where is None else free & where.to(tokens.device)
        counts = free.sum(1)
        if (counts == 0).any():
            raise ValueError("tokens: a row has no resampleable position (every token is a frame token)")
        positions = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
        order = torch.where(free, positions, tokens.shape[1] + positions).argsort(1)[:, : int(counts.max())]
        last = order.gather(1, (counts - 1)[:, None])
        index = torch.arange(order.shape[1], device=tokens.device)
        return torch.where(index < counts[:, None], order, last), counts

    def resampleable_sites(self, tokens: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Positions ``[B, n]`` whose tokens are not frame tokens nor padding; every row must have the same count
        ``n`` (else :meth:`padded_sites`)."""
        self._validate_tokens(tokens)
        free = self.free_mask(tokens, attention_mask)
        counts = free.sum(1)
        if (counts != counts[0]).any():
            raise ValueError(f"tokens: rows have different numbers of resampleable positions {counts.tolist()}; "
                             "pass explicit sites")
        if counts[0] == 0:
            raise ValueError("tokens: no resampleable position (every token is a frame token)")
        return free.nonzero()[:, 1].reshape(tokens.shape[0], -1)

    def _validate_tokens(self, tokens: Tensor) -> None:
        if not isinstance(tokens, Tensor) or tokens.dim() != 2 or tokens.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"tokens must be an integer tensor of shape [B, L], got "
                             f"{getattr(tokens, 'dtype', type(tokens))} {tuple(getattr(tokens, 'shape', ()))}")
        if tokens.shape[0] == 0 or tokens.shape[1] == 0:
            raise ValueError(f"tokens must be non-empty, got shape {tuple(tokens.shape)}")
        if self.vocab.max_length is not None and tokens.shape[1] > self.vocab.max_length:
            raise ValueError(f"tokens: sequence length {tokens.shape[1]} exceeds the model's maximum "
                             f"{self.vocab.max_length} positions")
        if tokens.min() < 0 or tokens.max() >= self.vocab.size:
            raise ValueError(f"tokens must lie in [0, {self.vocab.size}), got range "
                             f"[{int(tokens.min())}, {int(tokens.max())}]")

    def _validate(self, tokens: Tensor, positions: Tensor) -> None:
        self._validate_tokens(tokens)
        if positions.dim() != 2 or positions.shape[0] != tokens.shape[0] or positions.dtype != torch.int64:
            raise ValueError(f"positions must be int64 of shape [B, K] with B = {tokens.shape[0]}, got "
                             f"{positions.dtype} {tuple(positions.shape)}")
        if positions.shape[1] == 0:
            raise ValueError("positions: K must be >= 1")
        if positions.min() < 0 or positions.max() >= tokens.shape[1]:
            raise ValueError(f"positions must lie in [0, {tokens.shape[1]}), got range "
                             f"[{int(positions.min())}, {int(positions.max())}]")
        if positions.shape[1] > 1:
            ordered = positions.sort(dim=1).values
            if (ordered[:, 1:] == ordered[:, :-1]).any():
                raise ValueError("positions must be distinct within each row")


def require_integer(name: str, tensor: object) -> None:
    """A ValueError naming ``name`` unless ``tensor`` is an integer tensor (floats would be truncated silently)."""
    if not isinstance(tensor, Tensor) or tensor.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise ValueError(f"{name} must be an integer tensor, got {getattr(tensor, 'dtype', type(tensor).__name__)}")


def mask_positions(tokens: Tensor, positions: Tensor, mask_id: int) -> Tensor:
    """``tokens [B, L]`` with ``mask_id`` written at ``positions [B, K]`` (a new tensor)."""
    return tokens.scatter(1, positions, mask_id)


__all__ = ["Denoiser", "Meter", "VocabInfo", "available_device", "check_attention_mask", "check_mask_collisions",
           "check_overhead", "count_forward", "evaluating", "mask_positions", "metering", "require_integer",
           "token_id", "token_ids"]
