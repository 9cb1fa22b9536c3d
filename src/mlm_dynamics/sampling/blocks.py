"""Blocks: the view block-diffusion and semi-autoregressive samplers have of the sequence.

BD3-LM generates a sequence block by block, each block attending to itself and the blocks before it (block-causal);
LLaDA's and Dream's semi-autoregressive decoding fills block ``k`` while the later blocks still hold the mask token.
Either way the sampler only ever resamples the **active block**, with the earlier blocks fixed as context. That is
what the diagnostics should measure too: Glauber dynamics, coupled pairs and the rectangle test on the active block's
positions (``sites=``) of the sequence as the sampler sees it (:meth:`BlockSchedule.view`: later blocks cut off
(``future="truncate"``, BD3-LM) or masked (``future="mask"``, LLaDA/Dream)). The conditionals of one block then all
see the same context, so the chain is the block's own Glauber chain.

Glauber over every position of a block-causal model would mix conditionals that see different contexts: a position
in block 0 does not see block 1 at all, while block 1 sees block 0. No joint distribution has such one-sided
conditionals (rectangles across blocks are incompatible by construction), so that chain measures the architecture,
not the model's uncertainty.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

FUTURES = ("truncate", "mask", "keep")


@dataclass(frozen=True)
class BlockSchedule:
    """Blocks of ``block_size`` positions from position ``start`` (the first position after the prompt).

    Examples:
        Block 1 of a BD3-LM-style sequence after a 2-token prompt, blocks of 4: the view ends with it, its positions
        are the sites:

        >>> import torch
        >>> from mlm_dynamics.sampling.blocks import BlockSchedule
        >>> schedule = BlockSchedule(block_size=4, start=2)
        >>> tokens = torch.arange(14)[None]
        >>> view = schedule.view(tokens, 1)
        >>> view.shape[1], schedule.sites(view, 1).tolist()
        (10, [[6, 7, 8, 9]])
        >>> schedule.view(tokens, 1, future="mask", mask_id=99)[0, 10:].tolist()  # LLaDA/Dream: later blocks masked
        [99, 99, 99, 99]
    """

    block_size: int
    start: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.block_size, bool) or not isinstance(self.block_size, int) or self.block_size < 1:
            raise ValueError(f"block_size must be an integer >= 1, got {self.block_size!r}")
        if isinstance(self.start, bool) or not isinstance(self.start, int) or self.start < 0:
            raise ValueError(f"start must be an integer >= 0 (the first position after the prompt), got {self.start!r}")

    @classmethod
    def from_model(cls, model: Any, start: int = 0) -> BlockSchedule:
        """The schedule of a block-diffusion model whose config names its block size (BD3-LM: ``block_size``)."""
        size = getattr(getattr(model, "config", None), "block_size", None)
        if size is None:
            raise ValueError(f"model: a {type(model).__name__} has no config.block_size; give "
                             "BlockSchedule(block_size=...)")
        return cls(int(size), start)

    def num_blocks(self, length: int) -> int:
        """Complete blocks in a sequence of ``length`` positions."""
        return max(0, (length - self.start) // self.block_size)

    def block(self, index: int) -> range:
        """The positions of block ``index``."""
        if index < 0:
            raise ValueError(f"index must be >= 0, got {index}")
        first = self.start + index * self.block_size
        return range(first, first + self.block_size)

    def active(self, tokens: Tensor, mask_id: int) -> int:
        """The first block that still holds the mask token in some row: what a sampler works on now (the last
        block when every block is filled)."""
        masked = (tokens[:, self.start:] == mask_id).any(0).nonzero()
        if len(masked):
            return int(masked[0]) // self.block_size
        return max(self.num_blocks(tokens.shape[1]) - 1, 0)

    def view(self, tokens: Tensor, index: int, *, future: str = "truncate", mask_id: int | None = None) -> Tensor:
        """``tokens [B, L]`` as the sampler sees them while it fills block ``index``: later blocks cut off
        (``"truncate"``), set to ``mask_id`` (``"mask"``) or left (``"keep"``)."""
        if future not in FUTURES:
            raise ValueError(f"future must be one of {FUTURES}, got {future!r}")
        end = self.block(index).stop
        if end > tokens.shape[1]:
            raise ValueError(f"index: block {index} ends at position {end}, beyond the {tokens.shape[1]} positions")
        if future == "truncate":
            return tokens[:, :end]
        if future == "mask":
            if mask_id is None:
                raise ValueError('mask_id is required with future="mask"')
            view = tokens.clone()
            view[:, end:] = mask_id
            return view
        return tokens

    def sites(self, tokens: Tensor, index: int, frame_ids: Sequence[int] = ()) -> Tensor:
        """``[B, n]``: the positions of block ``index`` for every row (the ``sites=`` of the chains, couplings and
        rectangles on it), without those holding one of ``frame_ids`` (BD3-LM's BOS in block 0: pass
        ``denoiser.vocab.frame_ids``); rows must agree on which those are."""
        positions = torch.tensor(list(self.block(index)), device=tokens.device)
        if positions[-1] >= tokens.shape[1]:
            raise ValueError(f"index: block {index} ends beyond the {tokens.shape[1]} positions of the tokens")
        frame = torch.isin(tokens[:, positions], torch.tensor(list(frame_ids), dtype=tokens.dtype,
                                                               device=tokens.device))
        if bool((frame != frame[:1]).any()):
            raise ValueError(f"tokens: rows hold frame tokens at different positions of block {index}; give each "
                             "row's sites with Denoiser.padded_sites(tokens, where=...)")
        kept = positions[~frame[0]]
        if not len(kept):
            raise ValueError(f"index: block {index} holds frame tokens only")
        return kept.expand(tokens.shape[0], -1)

__all__ = ["FUTURES", "BlockSchedule"]
