"""A (temperature x length) grid of coupled pairs and single chains that advance together, one forward pass per step.

A cell ``(tau, n)`` (:class:`GridCell`) resamples its own ``n`` positions of one start sequence at temperature
``tau``. All cells on one model share each forward pass (per-row temperatures, padded sites with per-row counts), and
pairs that have met leave the batch. Every pair and chain draws from its own counter-based stream keyed by
``(seed, role, n, index)`` (:mod:`.streams`), never by its place in the batch, so a cell's meeting times are the
same alone, inside any grid, after other pairs met and left, after a resume, and in any shard of a multi-process run
(bit for bit wherever the model's forward pass is; a masked LM's can differ in the last bits with the batch's shape).
The key leaves out the temperature on purpose: pair ``k`` of a length meets the same starts and uniforms at every
temperature (common random numbers), which makes the comparison across temperatures one of dynamics.

Start pairs of a cell alternate over ``starts`` by pair index: ``natural-random`` (the natural sequence against a
uniformly random filling of the cell's sites) and ``random-random`` (two independent fillings). Single chains start
from the natural sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..models.base import Denoiser
from .coupling import CoupledGlauberChains, CoupledState, lagged_coupling, randomize_sites
from .glauber import ChainState, GlauberSampler
from .streams import stream_key

START_KINDS: tuple[str, ...] = ("natural-random", "random-random")
_ROLES = {"pair": 1, "fill-x": 2, "fill-y": 3, "chain": 4, "lag": 5, "lag-fill-x": 6, "lag-fill-y": 7, "scale": 8}


@dataclass(frozen=True)
class GridCell:
    """One cell: ``temperature`` and the positions ``sites`` it resamples (``n = len(sites)``)."""

    temperature: float
    sites: tuple[int, ...]

    @property
    def num_sites(self) -> int:
        """Number of resampled sites of this cell."""
        return len(self.sites)

    @property
    def key(self) -> tuple[float, int]:
        """``(temperature, num_sites)``."""
        return self.temperature, self.num_sites


def cell_streams(seed: int, role: str, cell: GridCell, count: int, *extra: int) -> Tensor:
    """``[count]`` int64 keys of the streams ``0 .. count - 1`` of ``role`` for ``cell``'s length (``extra`` numbers
    them further): a function of the seed, the role, the length and the index only. Not of the temperature: pair
    ``k`` of a length starts from the same fillings and draws the same uniforms at every temperature (common random
    numbers), so a difference between two temperatures is a difference of dynamics, not of luck; each cell's law is
    its own either way."""
    return torch.tensor([stream_key(seed, _ROLES[role], cell.num_sites, k, *extra) for k in range(count)],
                        dtype=torch.int64)


@dataclass
class RowLayout:
    """Rows of several cells in one batch: ``cell [R]`` indexes the cells, ``index [R]`` is the row's number within
    its cell; ``sites [R, n_max]`` with ``counts [R]``, ``temperature [R]``."""

    cell: Tensor
    index: Tensor
    sites: Tensor
    counts: Tensor
    temperature: Tensor

    def streams(self, seed: int, role: str, cells: Sequence[GridCell], *extra: int) -> Tensor:
        """``[R]`` keys of ``role`` for each row (the row's cell and number within it)."""
        keys = {c: cell_streams(seed, role, cell, int((self.cell == c).sum()), *extra) for c, cell in enumerate(cells)}
        return torch.stack([keys[int(c)][int(k)] for c, k in zip(self.cell, self.index, strict=True)])


def row_layout(cells: Sequence[GridCell], per_cell: int) -> RowLayout:
    """``per_cell`` rows for each cell, cell by cell."""
    if not cells or per_cell < 1:
        raise ValueError(f"cells must be non-empty and per_cell >= 1, got {len(cells)} cells, {per_cell}")
    width = max(cell.num_sites for cell in cells)
    padded = [list(cell.sites) + [cell.sites[-1]] * (width - cell.num_sites) for cell in cells]
    cell = torch.arange(len(cells)).repeat_interleave(per_cell)
    return RowLayout(cell=cell, index=torch.arange(per_cell).repeat(len(cells)),
                     sites=torch.tensor(padded, dtype=torch.long)[cell],
                     counts=torch.tensor([c.num_sites for c in cells])[cell],
                     temperature=torch.tensor([c.temperature for c in cells], dtype=torch.float64)[cell])


@dataclass
class PairGrid:
    """Coupled pairs of every cell: ``state.met_at [P]`` (``-1`` until met), ``layout`` and ``kind [P]`` (index into
    :data:`START_KINDS`)."""

    chains: CoupledGlauberChains
    state: CoupledState
    layout: RowLayout
    kind: Tensor

    def active(self) -> bool:
        """Whether some pair of the grid is still running."""
        return bool((self.state.met_at < 0).any())

    def step(self) -> Tensor:
        """One step of every pair that has not met (met pairs have left the batch); returns the Hamming distance
        ``[P]`` between each pair's chains afterwards."""
        return self.chains.step(self.state)

    def meeting(self, cell: int) -> tuple[Tensor, Tensor]:
        """``(met_at, kind)`` of the pairs of cell ``cell`` (``met_at = -1``: not met so far)."""
        rows = (self.layout.cell == cell).to(self.state.met_at.device)
        return self.state.met_at[rows].cpu(), self.kind[rows.cpu()]


def pair_grid(denoiser: Denoiser, natural: Tensor, cells: Sequence[GridCell], *, pairs: int,
              starts: Sequence[str] = START_KINDS, seed: int = 0) -> PairGrid:
    """``pairs`` maximally coupled pairs per cell from ``natural [1, L]`` (see the module docstring)."""
    unknown = sorted(set(starts) - set(START_KINDS))
    if not starts or unknown:
        raise ValueError(f"starts must be a non-empty list of {list(START_KINDS)}, got {list(starts)}")
    layout = row_layout(cells, pairs)
    device = natural.device
    base = natural.expand(len(layout.cell), -1)
    sites, counts = layout.sites.to(device), layout.counts.to(device)
    first = randomize_sites(denoiser, base, sites, None, site_counts=counts,
                            streams=layout.streams(seed, "fill-x", cells).to(device))
    second = randomize_sites(denoiser, base, sites, None, site_counts=counts,
                             streams=layout.streams(seed, "fill-y", cells).to(device))
    kind = torch.tensor([START_KINDS.index(starts[int(k) % len(starts)]) for k in layout.index])
    natural_rows = (kind == 0).to(device)[:, None]
    x0, y0 = torch.where(natural_rows, base, first), torch.where(natural_rows, first, second)
    chains = CoupledGlauberChains(GlauberSampler(denoiser, layout.temperature), freeze_met=True)
    state = chains.init_state(x0, y0, generator=seed, sites=sites, site_counts=counts,
                              streams=layout.streams(seed, "pair", cells).to(device))
    return PairGrid(chains=chains, state=state, layout=layout, kind=kind)


def chain_grid(denoiser: Denoiser, natural: Tensor, cells: Sequence[GridCell], *, chains: int,
               seed: int = 0) -> tuple[GlauberSampler, ChainState, RowLayout]:
    """``chains`` Glauber chains per cell from ``natural [1, L]``, each on its own stream."""
    layout = row_layout(cells, chains)
    sampler = GlauberSampler(denoiser, layout.temperature)
    state = sampler.init_state(natural.expand(len(layout.cell), -1), generator=seed,
                               sites=layout.sites.to(natural.device), site_counts=layout.counts.to(natural.device),
                               streams=layout.streams(seed, "chain", cells).to(natural.device))
    return sampler, state, layout


def lagged_grid(denoiser: Denoiser, natural: Tensor, cells: Sequence[GridCell], *, pairs: int, lag: int,
                max_steps: int, seed: int = 0) -> tuple[CoupledState, RowLayout]:
    """The L-lag coupling of ``pairs`` pairs per cell, both chains from independent uniform fillings of the cell's
    sites (``mu_0``), each pair on its own streams, and the rows' layout
    (:func:`~mlm_dynamics.diagnostics.meeting.meeting_times_of` makes the lagged meeting times)."""
    layout = row_layout(cells, pairs)
    device = natural.device
    base = natural.expand(len(layout.cell), -1)
    sites, counts = layout.sites.to(device), layout.counts.to(device)
    x0, y0 = (randomize_sites(denoiser, base, sites, None, site_counts=counts,
                              streams=layout.streams(seed, role, cells).to(device))
              for role in ("lag-fill-x", "lag-fill-y"))
    state = lagged_coupling(GlauberSampler(denoiser, layout.temperature), x0, y0, lag=lag, max_steps=max_steps,
                            sites=sites, site_counts=counts, streams=layout.streams(seed, "lag", cells).to(device))
    return state, layout


def fill_streams(seed: int, cells: Sequence[GridCell], layout: RowLayout, samples: int) -> list[Tensor]:
    """``samples`` key tensors ``[R]`` for random fillings of each row's sites (the drift scale's references)."""
    return [layout.streams(seed, "scale", cells, s) for s in range(samples)]


__all__ = ["START_KINDS", "GridCell", "PairGrid", "RowLayout", "cell_streams", "chain_grid", "fill_streams",
           "lagged_grid", "pair_grid", "row_layout"]
