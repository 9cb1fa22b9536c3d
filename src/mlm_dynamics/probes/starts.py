"""Start states for diagnostics, read from the batches real pipelines produce.

A batch may be a token tensor ``[B, L]``, any ``Mapping`` with ``input_ids`` (a dict, a Hugging Face
``BatchEncoding``), or a tuple/list whose first element is one of these. From a mapping:

- ``labels`` of the shape of ``input_ids`` (``DataCollatorForLanguageModeling``: the original token where the
  collator masked or replaced it, ``-100`` elsewhere) restore the clean sequence:
  ``x = where(labels != -100, labels, input_ids)``, so chains start from the data, not from ``[MASK]`` tokens;
- ``attention_mask`` keeps padding out of the resampled sites;
- positions that still hold the mask token (a batch masked without labels) are left out of the sites.

Each row resamples its own positions (:meth:`~mlm_dynamics.models.Denoiser.padded_sites`: sites ``[B, n_max]`` with
counts ``[B]``), so padded batches of different lengths are fine. Ragged ``start_tokens`` lists are padded with the
model's pad id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import Tensor

from ..models.base import Denoiser, check_attention_mask

IGNORE_INDEX = -100  # the label of positions a loss ignores (PyTorch's and Hugging Face's convention)

TokenRows = Tensor | list[list[int]]


@dataclass
class StartStates:
    """Clean start sequences and the positions each row resamples.

    Attributes:
        tokens: ``[B, L]`` token ids.
        sites: ``[B, n_max]`` resampled positions; row ``b`` uses its first ``counts[b]``, the rest repeats its last.
        counts: ``[B]`` number of sites of each row.
        attention_mask: ``[B, L]`` bool, False at the batch's padding (``None``: nothing padded); the diagnostics
            carry it to the model, which matters where the padding id also means something (EOS in LLaDA, Dream).
    """

    tokens: Tensor
    sites: Tensor
    counts: Tensor
    attention_mask: Tensor | None = None

    def to(self, device: torch.device) -> StartStates:
        """The same starts on ``device``."""
        mask = None if self.attention_mask is None else self.attention_mask.to(device)
        return StartStates(self.tokens.to(device), self.sites.to(device), self.counts.to(device), mask)


@dataclass
class BatchRows:
    """The fields of a batch a diagnostic reads (first rows only, detached copies)."""

    input_ids: Tensor
    attention_mask: Tensor | None = None
    labels: Tensor | None = None

    def state_dict(self) -> dict[str, Tensor | None]:
        """Tokens and per-row sites, for checkpoints."""
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask, "labels": self.labels}


def batch_rows(batch: Any, rows: int, batch_to_tokens: Callable[[Any], Any] | None = None) -> BatchRows:
    """The first ``rows`` rows of ``batch`` (see the module docstring), copied off the autograd graph.

    ``batch_to_tokens`` maps a batch of another shape to a token tensor or a mapping with ``input_ids``.
    """
    if batch_to_tokens is not None:
        batch = batch_to_tokens(batch)
    if isinstance(batch, (tuple, list)) and batch and isinstance(batch[0], (Tensor, Mapping)):
        batch = batch[0]

    def take(value: Any) -> Tensor | None:
        return value[:rows].detach().clone() if isinstance(value, Tensor) else None

    if isinstance(batch, Tensor):
        check_token_batch(batch, "batch")
        tokens = take(batch)
        assert tokens is not None
        return BatchRows(tokens)
    if isinstance(batch, Mapping) and isinstance(batch.get("input_ids"), Tensor):
        ids = batch["input_ids"]
        check_token_batch(ids, "batch['input_ids']")
        labels = batch.get("labels")
        labels = labels if isinstance(labels, Tensor) and labels.shape == ids.shape else None
        mask = batch.get("attention_mask")
        mask = mask if isinstance(mask, Tensor) and mask.shape == ids.shape else None
        tokens = take(ids)
        assert tokens is not None
        return BatchRows(tokens, take(mask), take(labels))
    raise ValueError(f"batch_to_tokens: a batch of type {type(batch).__name__} is neither a token tensor nor a "
                     "mapping with 'input_ids' (a dict or BatchEncoding); pass batch_to_tokens= or start_tokens=")


def check_token_batch(tokens: Tensor, name: str) -> None:
    """A ValueError naming ``name`` unless ``tokens`` is an integer ``[B, L]`` tensor of token ids (a float or 1-D
    tensor would be truncated or misread as one row)."""
    if tokens.dim() != 2 or tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise ValueError(f"{name}: token ids must be an integer tensor [batch, length], got {tokens.dtype} of shape "
                         f"{tuple(tokens.shape)}; pass batch_to_tokens= to map this batch to one")


def load_tokens(tokens: TokenRows | str | None) -> TokenRows | None:
    """Start tokens from a tensor ``[B, L]``, a list of id lists (ragged lists are padded later with the model's pad
    id), or the path of a JSON/YAML file holding such a list."""
    if tokens is None:
        return None
    if isinstance(tokens, Tensor):
        if tokens.dim() != 2 or tokens.shape[0] == 0 or tokens.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"start_tokens must be an integer tensor [B, L], got {tokens.dtype} "
                             f"{tuple(tokens.shape)}")
        return tokens.long()
    if isinstance(tokens, str):
        path = Path(tokens)
        if not path.is_file():
            raise ValueError(f"start_tokens: no such file {tokens!r}")
        tokens = yaml.safe_load(path.read_text())  # JSON is YAML
    if (not isinstance(tokens, list) or not tokens
            or not all(isinstance(row, list) and row for row in tokens)):
        raise ValueError("start_tokens must be a non-empty list of non-empty lists of token ids")
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for row in tokens for i in row):
        raise ValueError("start_tokens must hold non-negative integer token ids")
    return tokens


def pad_rows(rows: Sequence[Sequence[int]], pad_id: int | None) -> BatchRows:
    """Ragged id lists as one padded batch (``attention_mask`` 0 at the padding)."""
    length = max(len(row) for row in rows)
    if any(len(row) != length for row in rows) and pad_id is None:
        raise ValueError("start_tokens: rows of different lengths need a model with a pad id (VocabInfo.pad_id)")
    fill = 0 if pad_id is None else pad_id
    tokens = torch.tensor([[*row, *[fill] * (length - len(row))] for row in rows], dtype=torch.long)
    mask = torch.tensor([[1] * len(row) + [0] * (length - len(row)) for row in rows], dtype=torch.long)
    return BatchRows(tokens, mask)


def start_states(denoiser: Denoiser, rows: BatchRows) -> StartStates:
    """Clean tokens and each row's resampled positions (see the module docstring); a ValueError naming
    ``start_tokens`` for a row with nothing to resample."""
    tokens = rows.input_ids.long()
    if rows.labels is not None:
        tokens = torch.where(rows.labels != IGNORE_INDEX, rows.labels.long(), tokens)
    where = torch.ones_like(tokens, dtype=torch.bool)
    if rows.attention_mask is not None:
        where &= rows.attention_mask.bool()
    if denoiser.vocab.mask_id is not None:
        where &= tokens != denoiser.vocab.mask_id
    tokens = tokens.to(denoiser.device)
    free = denoiser.free_mask(tokens) & where.to(tokens.device)
    empty = (free.sum(1) == 0).nonzero().flatten().tolist()
    if empty:
        raise ValueError(f"start_tokens: rows {empty} of the start batch have no position to resample (only frame, "
                         "padding or mask tokens)")
    sites, counts = denoiser.padded_sites(tokens, where.to(tokens.device))
    mask = None if rows.attention_mask is None else check_attention_mask(rows.attention_mask, tokens)
    return StartStates(tokens, sites, counts, mask)


def placeholder_rows(denoiser: Denoiser, length: int = 8) -> BatchRows:
    """One row of ``length`` allowed tokens: what setup checks run the model on before any batch was seen."""
    allowed = denoiser.vocab.allowed_mask() & ~torch.isin(torch.arange(denoiser.vocab.size),
                                                          torch.tensor(denoiser.vocab.frame_ids, dtype=torch.long))
    length = min(length, denoiser.vocab.max_length or length)
    return BatchRows(torch.full((1, length), int(allowed.nonzero()[0]), dtype=torch.long))


__all__ = ["IGNORE_INDEX", "BatchRows", "StartStates", "batch_rows", "load_tokens", "pad_rows", "placeholder_rows",
           "start_states"]
