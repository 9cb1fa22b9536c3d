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
from typing import Any

import torch
from torch import Tensor

from ..models.base import Denoiser
from .coupling import CoupledGlauberChains, CoupledState, lagged_coupling, randomize_sites
from .glauber import ChainState, GlauberSampler, StepRecord
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


def cell_streams(seed: int, role: str, cell: GridCell, count: int, *extra: int | float,
                 common: bool = True) -> Tensor:
    """``[count]`` int64 keys of the streams ``0 .. count - 1`` of ``role`` for ``cell``'s length (``extra`` numbers
    them further): a function of the seed, the role, the length and the index only. Not of the temperature: pair
    ``k`` of a length starts from the same fillings and draws the same uniforms at every temperature (common random
    numbers), so a difference between two temperatures is a difference of dynamics, not of luck; each cell's law is
    its own either way. With ``common=False`` the temperature is part of the key: cells of one length are then
    independent (a witness fitted on one cell's pairs may be tested on another's)."""
    own = () if common else (float(cell.temperature),)
    return torch.tensor([stream_key(seed, _ROLES[role], cell.num_sites, k, *extra, *own) for k in range(count)],
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

    def streams(self, seed: int, role: str, cells: Sequence[GridCell], *extra: int, common: bool = True) -> Tensor:
        """``[R]`` keys of ``role`` for each row (the row's cell and number within it)."""
        keys = {c: cell_streams(seed, role, cell, int(self.index[self.cell == c].max()) + 1, *extra, common=common)
                for c, cell in enumerate(cells) if bool((self.cell == c).any())}
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
    :data:`START_KINDS`). Each cell holds ``capacity`` pairs, of which the first ``started(cell)`` run; the others
    wait outside the batch until :meth:`start` starts them (the next round of a sequential design). A pair runs on
    its own clock (:attr:`~mlm_dynamics.sampling.coupling.CoupledState.ages`) and stream, so its path and meeting
    time are the same whenever it starts."""

    chains: CoupledGlauberChains
    state: CoupledState
    layout: RowLayout
    kind: Tensor
    companion: Tensor | None = None

    def active(self) -> bool:
        """Whether some pair of the grid is still running (or some chain that does not freeze is moving)."""
        return bool(self.state.open.any())

    def step(self) -> StepRecord:
        """One step of every started pair that has not met (met pairs have left the batch, chains that do not freeze
        move on alone) in one forward; returns the step of the ``x`` chains
        (:meth:`~.coupling.CoupledGlauberChains.step_record`)."""
        return self.chains.step_record(self.state)

    def rows_of(self, cell: int) -> Tensor:
        """``[P]`` bool: the rows of cell ``cell``'s pairs (its companion chains left out)."""
        rows = self.layout.cell == cell
        if self.companion is not None:
            rows &= ~self.companion
        return rows.to(self.state.met_at.device)

    def started(self, cell: int) -> int:
        """Pairs of cell ``cell`` started so far."""
        return int((self.rows_of(cell) & self.state.started).sum())

    def start(self, cell: int, count: int) -> Tensor:
        """Start the next ``count`` waiting pairs of cell ``cell`` now (at the grid's step; a pair whose two starts
        are equal has met there); returns their ``[count]`` row indices. A ValueError past the cell's capacity."""
        state = self.state
        waiting = (self.rows_of(cell) & ~state.started).nonzero().squeeze(1)
        if count > waiting.numel():
            raise ValueError(f"cell {cell}: {count} more pairs asked, {waiting.numel()} left of its capacity")
        rows = waiting[:count]
        assert state.born is not None, "pair_grid gives every state its born steps"
        state.born[rows] = state.x.step
        equal = (state.x.tokens[rows] == state.y[rows]).all(1)
        state.met_at[rows] = torch.where(equal, state.x.step, -1)
        return rows

    def meeting(self, cell: int) -> tuple[Tensor, Tensor]:
        """``(met_at, kind)`` of the started pairs of cell ``cell``, ``met_at`` their age at meeting (``-1``: not met
        so far)."""
        rows = self.rows_of(cell) & self.state.started
        born = self.state.born if self.state.born is not None else torch.zeros_like(self.state.met_at)
        met_at = torch.where(self.state.met_at >= 0, self.state.met_at - born, -1)
        return met_at[rows].cpu(), self.kind[rows.cpu()]


def pair_grid(denoiser: Denoiser, natural: Tensor, cells: Sequence[GridCell], *, pairs: int,
              starts: Sequence[str] = START_KINDS, seed: int = 0, capacity: int | None = None,
              common_random_numbers: bool = True, keep_moving: Sequence[int] | int = 0,
              companions: Tensor | None = None, companion_cells: Sequence[int] = (),
              sampler: dict[str, Any] | None = None) -> PairGrid:
    """``capacity`` (default ``pairs``) maximally coupled pairs per cell from ``natural [1, L]``, the first ``pairs``
    of each started at step 0 (see the module docstring). ``common_random_numbers=False`` keys the streams by the
    temperature too (:func:`cell_streams`). The first ``keep_moving`` pairs of each cell (one count, or one per cell)
    do not freeze: their ``x`` moves on as a chain after the pair met or stopped (the run job's chains); the others
    leave the batch. ``companions [C, L]``: chains from other starts riding in the same batch, one in cell
    ``companion_cells[c]`` each (rows after the pairs, never paired: their ``y`` is their ``x``). ``sampler``: options
    of the :class:`~.glauber.GlauberSampler` (``top_k``, ``scan``, ...); a scan other than random with one site a step
    draws from one generator seeded with ``seed`` instead of per-pair streams (valid, but then a cell's pairs depend
    on the rest of the batch)."""
    unknown = sorted(set(starts) - set(START_KINDS))
    if not starts or unknown:
        raise ValueError(f"starts must be a non-empty list of {list(START_KINDS)}, got {list(starts)}")
    capacity = pairs if capacity is None else capacity
    if pairs < 0 or capacity < pairs or (capacity < 1 and companions is None):
        raise ValueError(f"pairs must be >= 0 and capacity >= pairs (>= 1 without companions), got {pairs} and "
                         f"{capacity}")
    layout = row_layout(cells, capacity) if capacity else _empty_layout(cells)
    joined = 0 if companions is None else companions.shape[0]
    if joined:
        assert companions is not None
        if len(companion_cells) != joined:
            raise ValueError(f"companion_cells: one cell per companion ({joined}), got {len(companion_cells)}")
        extra = row_layout([cells[c] for c in companion_cells], 1)
        extra.cell = torch.as_tensor(list(companion_cells), dtype=torch.long)
        extra.index = capacity + torch.arange(joined)  # numbers no pair of the cell uses: streams of their own
        layout = RowLayout(*(torch.cat([getattr(layout, name), getattr(extra, name)])
                             for name in ("cell", "index", "sites", "counts", "temperature")))
    device = natural.device
    base = natural.expand(len(layout.cell), -1).clone()
    if joined:
        assert companions is not None
        base[len(layout.cell) - joined:] = companions.to(device)
    sites, counts = layout.sites.to(device), layout.counts.to(device)
    common = common_random_numbers
    first = randomize_sites(denoiser, base, sites, None, site_counts=counts,
                            streams=layout.streams(seed, "fill-x", cells, common=common).to(device))
    second = randomize_sites(denoiser, base, sites, None, site_counts=counts,
                             streams=layout.streams(seed, "fill-y", cells, common=common).to(device))
    kind = torch.tensor([START_KINDS.index(starts[int(k) % len(starts)]) for k in layout.index], dtype=torch.long)
    companion = torch.arange(len(layout.cell)) >= len(layout.cell) - joined
    kind[companion] = len(START_KINDS)  # no start kind: not a pair
    natural_rows = (kind == 0).to(device)[:, None]
    x0 = torch.where(natural_rows | companion.to(device)[:, None], base, first)
    y0 = torch.where(companion.to(device)[:, None], base, torch.where(natural_rows, first, second))
    options = dict(sampler or {})
    own_streams = options.get("scan", "random") == "random" and options.get("block_size", 1) == 1
    chains = CoupledGlauberChains(GlauberSampler(denoiser, layout.temperature, **options), freeze_met=True)
    state = chains.init_state(x0, y0, generator=seed, sites=sites, site_counts=counts,
                              streams=layout.streams(seed, "pair", cells, common=common).to(device) if own_streams
                              else None)
    running = ((layout.index < pairs) | companion).to(device)
    state.born = torch.where(running, 0, -1)
    state.met_at = torch.where(running, state.met_at, -1)
    moving = torch.as_tensor([keep_moving] * len(cells) if isinstance(keep_moving, int) else list(keep_moving))
    state.freeze = ((layout.index >= moving[layout.cell]) & ~companion).to(device)
    return PairGrid(chains=chains, state=state, layout=layout, kind=kind, companion=companion if joined else None)


def _empty_layout(cells: Sequence[GridCell]) -> RowLayout:
    width = max(cell.num_sites for cell in cells)
    return RowLayout(cell=torch.zeros(0, dtype=torch.long), index=torch.zeros(0, dtype=torch.long),
                     sites=torch.zeros(0, width, dtype=torch.long), counts=torch.zeros(0, dtype=torch.long),
                     temperature=torch.zeros(0, dtype=torch.float64))


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
