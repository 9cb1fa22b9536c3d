"""The ``sweep`` job: meeting times over a (temperature x length) grid, the ``C(tau) n log n`` fit, the phase boundary.

Each cell ``(tau, n)`` holds ``grid.pairs`` maximally coupled pairs whose chains resample ``n`` sites at temperature
``tau``; start pairs alternate between the kinds of ``grid.starts`` (``natural-random``: a natural sequence against
uniformly random tokens on the sites; ``random-random``: two independent random fillings). All cells of one model
advance together, one forward pass per step (per-row temperatures, padded sites with per-row counts), and pairs that
have met leave the batch. Optional drift chains (``drift.chains`` per cell, from the natural start) record the
hitting times of distance thresholds: the fraction of resampled sites changed (``hamming``) or the cosine distance
of hidden states pooled over the resampled sites (``embedding``). Thresholds are fractions of each row's own scale
(``drift.relative``, default): the median distance from the start to ``drift.reference_samples`` uniformly random
fillings of its sites, so 0.5 means half way to an unrelated state, whatever the embedder and ``n``. Toy models
(``ising``, ``potts``) are one chain of ``n`` sites per length (one forward per length); masked LMs resample a
window of ``n`` sites of one context.

Per temperature, ``C(tau)`` is fitted to the mean meeting times against ``n log n`` (bootstrap interval over pairs);
per length, the boundary ``tau_c(n)`` is where half the pairs are censored; beside it the Dobrushin ``tau*`` of
:func:`~mlm_dynamics.estimate_influence` on the same model and context.
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..diagnostics.influence import InfluenceEstimate, estimate_influence
from ..diagnostics.meeting import HittingTimes, MeetingTimes
from ..diagnostics.scaling import BoundaryPoint, ScalingFit, fit_scaling, phase_boundary
from ..embedders.base import HiddenStateEmbedder, cosine_distance
from ..models.base import Denoiser
from ..models.huggingface import MaskedLMDenoiser
from ..models.toy import PairwiseMRFDenoiser
from ..sampling.coupling import CoupledGlauberChains, CoupledState, lagged_meeting_times, resampled_mask
from ..sampling.glauber import ChainState, GlauberSampler
from .checkpoint import RunInterrupted, fingerprint, load_checkpoint, save_checkpoint
from .common import build_model, crop_context, start_tokens
from .config import MODEL_SOURCES, ConfigError, ModelConfig, check_device, require, to_dict, validate_sections

START_KINDS = ("natural-random", "random-random")
TOY_SOURCES = ("ising", "potts")
DISTANCES = ("hamming", "embedding")


@dataclass
class SweepModelConfig(ModelConfig):
    """``source``: ``ising``/``potts`` (toy chains of ``n`` sites with ``coupling`` J, ``field`` h, ``states``
    colours) or a masked LM as in the ``run`` job."""

    source: str = "ising"
    coupling: float = 1.0
    field: float = 0.0
    states: int = 3

    def validate(self, key: str = "model") -> None:
        sources = (*TOY_SOURCES, *MODEL_SOURCES)
        require(self.source in sources, f"{key}.source", f"be one of {list(sources)}", self.source)
        if self.source not in TOY_SOURCES:
            super().validate(key)
            return
        check_device(f"{key}.device", self.device)
        require(self.states >= 2, f"{key}.states", "be >= 2", self.states)
        require(math.isfinite(self.coupling) and math.isfinite(self.field), f"{key}.coupling",
                "and field must be finite", (self.coupling, self.field))


@dataclass
class GridConfig:
    """Temperatures x lengths; ``pairs`` coupled pairs per cell followed for at most ``max_steps`` steps."""

    temperatures: list[float] = field(default_factory=lambda: [0.5, 1.0, 2.0, 4.0])
    lengths: list[int] = field(default_factory=lambda: [4, 8, 16])
    pairs: int = 16
    max_steps: int = 2000
    starts: list[str] = field(default_factory=lambda: list(START_KINDS))
    seed: int = 0

    def validate(self, key: str = "grid") -> None:
        require(len(self.temperatures) > 0 and all(math.isfinite(t) and t > 0 for t in self.temperatures),
                f"{key}.temperatures", "be a non-empty list of finite numbers > 0", self.temperatures)
        require(len(set(self.temperatures)) == len(self.temperatures), f"{key}.temperatures", "be distinct",
                self.temperatures)
        require(len(self.lengths) > 0 and all(n >= 2 for n in self.lengths) and len(set(self.lengths)) == len(
            self.lengths), f"{key}.lengths", "be a non-empty list of distinct lengths >= 2", self.lengths)
        require(self.pairs >= 1, f"{key}.pairs", "be >= 1", self.pairs)
        require(self.max_steps >= 1, f"{key}.max_steps", "be >= 1", self.max_steps)
        require(len(self.starts) > 0 and set(self.starts) <= set(START_KINDS), f"{key}.starts",
                f"be a non-empty list of {list(START_KINDS)}", self.starts)
        require(self.seed >= 0, f"{key}.seed", "be >= 0", self.seed)


@dataclass
class ContextConfig:
    """Masked LMs: the natural start ``sequence`` (default: the model's default start), the window centre (an index
    among its resampleable positions; default: the middle) and ``crop``: resampleable tokens of context kept on each
    side of the largest window (``null``: the whole sequence)."""

    sequence: str | None = None
    window_center: int | None = None
    crop: int | None = None

    def validate(self, key: str = "context") -> None:
        require(self.crop is None or self.crop >= 0, f"{key}.crop", "be >= 0 or null", self.crop)
        require(self.window_center is None or self.window_center >= 0, f"{key}.window_center", "be >= 0 or null",
                self.window_center)


@dataclass
class DriftSweepConfig:
    """Drift chains per cell from the natural start; threshold hitting times observed every ``every`` steps;
    ``relative`` thresholds are fractions of the distance to random fillings (see the module docstring)."""

    enabled: bool = True
    chains: int = 4
    distance: str = "hamming"
    thresholds: list[float] = field(default_factory=lambda: [0.25, 0.5])
    every: int = 5
    relative: bool = True
    reference_samples: int = 16

    def validate(self, key: str = "drift") -> None:
        require(self.chains >= 1, f"{key}.chains", "be >= 1", self.chains)
        require(self.distance in DISTANCES, f"{key}.distance", f"be one of {list(DISTANCES)}", self.distance)
        require(len(self.thresholds) > 0 and all(0 < t <= 2 for t in self.thresholds), f"{key}.thresholds",
                "be a non-empty list of distances in (0, 2]", self.thresholds)
        require(self.every >= 1, f"{key}.every", "be >= 1", self.every)
        require(self.reference_samples >= 1, f"{key}.reference_samples", "be >= 1", self.reference_samples)


@dataclass
class LagSweepConfig:
    """Optional L-lag couplings per cell (random starts): bounds on ``TV(mu_0 P^t, pi)`` at ``t_values``."""

    enabled: bool = False
    lag: int = 100
    pairs: int = 8
    t_values: list[int] = field(default_factory=lambda: [0, 100, 200, 400])

    def validate(self, key: str = "lag") -> None:
        require(self.lag >= 1, f"{key}.lag", "be >= 1", self.lag)
        require(self.pairs >= 1, f"{key}.pairs", "be >= 1", self.pairs)
        require(len(self.t_values) > 0 and all(t >= 0 for t in self.t_values), f"{key}.t_values",
                "be a non-empty list of steps >= 0", self.t_values)


@dataclass
class InfluenceSweepConfig:
    """Dobrushin coefficients on the first ``max_sites`` sites of the largest window, over the grid temperatures."""

    enabled: bool = True
    max_sites: int = 8
    replacements: int = 1

    def validate(self, key: str = "influence") -> None:
        require(self.max_sites >= 2, f"{key}.max_sites", "be >= 2", self.max_sites)
        require(self.replacements >= 1, f"{key}.replacements", "be >= 1", self.replacements)


@dataclass
class SweepConfig:
    """The ``sweep`` job."""

    model: SweepModelConfig = field(default_factory=SweepModelConfig)
    grid: GridConfig = field(default_factory=GridConfig)
    context: ContextConfig = field(default_factory=ContextConfig)
    drift: DriftSweepConfig = field(default_factory=DriftSweepConfig)
    lag: LagSweepConfig = field(default_factory=LagSweepConfig)
    influence: InfluenceSweepConfig = field(default_factory=InfluenceSweepConfig)
    checkpoint_every: int | None = 500
    bootstrap: int = 200

    def validate(self) -> None:
        validate_sections(self)
        require(self.checkpoint_every is None or self.checkpoint_every >= 1, "checkpoint_every", "be >= 1 or null",
                self.checkpoint_every)
        require(self.bootstrap >= 1, "bootstrap", "be >= 1", self.bootstrap)
        if self.model.source in TOY_SOURCES:
            require(self.drift.distance == "hamming" or not self.drift.enabled, "drift.distance",
                    "be 'hamming' for toy models (they have no hidden states)", self.drift.distance)


@dataclass
class SweepCell:
    """One (temperature, length) cell: meeting times, drift hitting times per threshold, change rate, TV bounds."""

    temperature: float
    num_sites: int
    meeting: MeetingTimes
    hitting: dict[float, HittingTimes] = field(default_factory=dict)
    change_rate: float = math.nan
    lagged: MeetingTimes | None = None
    drift_curve: list[float] = field(default_factory=list)  # mean relative drift at steps 0, every, 2 every, ...

    def summary(self, tv_steps: Sequence[int] = ()) -> dict[str, float]:
        n = self.num_sites
        out = {"temperature": self.temperature, "num_sites": float(n), **self.meeting.summary()}
        out["meeting_time_mean"] = float(self.meeting.times.double().mean())
        out["meeting_time_over_n_log_n"] = out["meeting_time_median"] / (n * math.log(n))
        out["change_rate"] = self.change_rate
        for threshold, times in self.hitting.items():
            hit = times.summary((0.5,))
            out[f"hitting_time_median_d{threshold:g}"] = hit["hitting_time_median"]
            out[f"hitting_censored_fraction_d{threshold:g}"] = hit["censored_fraction"]
        if self.lagged is not None:
            out.update({k: v for k, v in self.lagged.summary(tv_steps=tv_steps).items() if k.startswith("tv_bound")})
        return out


@dataclass
class SweepResult:
    """What the sweep measured; :mod:`mlm_dynamics.report.sweep_report` writes it."""

    config: SweepConfig
    cells: list[SweepCell]
    fits: dict[float, ScalingFit]
    hitting_fits: dict[float, dict[float, ScalingFit]]
    boundary: list[BoundaryPoint]
    influence: InfluenceEstimate | None
    timings: dict[str, float]
    rows: dict[str, float]
    environment: dict[str, str]
    notes: list[str] = field(default_factory=list)

    def cell(self, temperature: float, num_sites: int) -> SweepCell:
        return next(c for c in self.cells if c.temperature == temperature and c.num_sites == num_sites)


@dataclass
class _Group:
    """The cells that share one model: coupled pairs and drift chains, each row tagged with its cell."""

    denoiser: Denoiser
    sampler: GlauberSampler
    chains: CoupledGlauberChains
    pairs: CoupledState
    pair_cell: Tensor
    drift_sampler: GlauberSampler | None = None
    drift: ChainState | None = None
    drift_cell: Tensor | None = None
    drift_start: Tensor | None = None
    distance: Callable[[Tensor, Tensor], Tensor] | None = None
    hit_at: Tensor | None = None  # [thresholds, drift chains], -1 until hit
    scale: Tensor | None = None  # [drift chains] distance that a relative threshold of 1 means
    changes: Tensor | None = None  # [drift chains] steps with a change
    drift_curves: list[Tensor] = field(default_factory=list)

    def active(self) -> bool:
        return bool((self.pairs.met_at < 0).any())

    def drifting(self) -> bool:
        return self.drift is not None and self.hit_at is not None and bool((self.hit_at < 0).any())


def run_sweep(config: SweepConfig, out_dir: Path | None = None, *, resume: bool = False, progress: bool = False,
              cells: Sequence[tuple[float, int]] | None = None) -> SweepResult:
    """Run the sweep (``cells``: a subset of the grid, e.g. one process's shard; default: all cells)."""
    config.validate()
    grid = config.grid
    cell_list = list(cells) if cells is not None else [(t, n) for t in grid.temperatures for n in grid.lengths]
    t0 = time.perf_counter()
    groups, notes, influence_model = _build_groups(config, cell_list)
    setup_seconds = time.perf_counter() - t0
    checkpoint_path = None if out_dir is None else out_dir / "sweep-checkpoint.pt"
    fingerprints = {"config": fingerprint(to_dict(config)), "cells": fingerprint([list(c) for c in cell_list])}
    step = 0
    if resume:
        if checkpoint_path is None:
            raise ValueError("out_dir is required for --resume")
        saved, step = load_checkpoint(checkpoint_path, fingerprints=fingerprints)
        for group, state in zip(groups, saved["groups"], strict=True):
            _restore(group, state)
    t1 = time.perf_counter()
    bar = _progress(grid.max_steps, step, progress)
    saved_step = step if resume else None
    try:
        while step < grid.max_steps and any(g.active() or g.drifting() for g in groups):
            for group in groups:
                _advance(group, step + 1, config)
            step += 1
            bar(step, sum(int((g.pairs.met_at < 0).sum()) for g in groups))
            if config.checkpoint_every and checkpoint_path is not None and step % config.checkpoint_every == 0:
                save_checkpoint(checkpoint_path, {"groups": [_snapshot(g) for g in groups]},
                                fingerprints=fingerprints, step=step)
                saved_step = step
    except KeyboardInterrupt:
        raise RunInterrupted(step, checkpoint_path if saved_step is not None else None, saved_step) from None
    chain_seconds = time.perf_counter() - t1
    result_cells = _collect(groups, cell_list, config, step)
    t2 = time.perf_counter()
    if config.lag.enabled:
        _lagged(groups, result_cells, cell_list, config)
    lag_seconds = time.perf_counter() - t2
    influence = None
    if config.influence.enabled and influence_model is not None:
        model, context, sites = influence_model
        influence = estimate_influence(model, context, temperatures=sorted({t for t, _ in cell_list}),
                                       sites=sites[: config.influence.max_sites],
                                       replacements=config.influence.replacements,
                                       generator=torch.Generator(device=context.device).manual_seed(grid.seed))
    fits, hitting_fits, boundary = analyse(result_cells, config)
    spent = sum(g.pairs.rows for g in groups)
    uncompacted = sum(2 * len(g.pair_cell) for g in groups) * max(step, 1)
    return SweepResult(config=config, cells=result_cells, fits=fits, hitting_fits=hitting_fits, boundary=boundary,
                       influence=influence,
                       timings={"setup_seconds": round(setup_seconds, 2), "chain_seconds": round(chain_seconds, 2),
                                "lag_seconds": round(lag_seconds, 2), "steps": float(step)},
                       rows={"pair_rows_spent": float(spent), "pair_rows_uncompacted": float(uncompacted),
                             "rows_saved_fraction": 1 - spent / uncompacted if uncompacted else 0.0},
                       environment=_environment(groups[0].denoiser), notes=notes)


def _progress(total: int, start: int, enabled: bool) -> Callable[[int, int], None]:
    if not enabled:
        return lambda step, active: None
    from tqdm.auto import tqdm

    bar = tqdm(total=total, initial=start, desc="sweep steps", unit="step")

    def update(step: int, active: int) -> None:
        bar.update(step - bar.n)
        bar.set_postfix(active_pairs=active)
        if step >= total or active == 0:
            bar.close()

    return update


def _random_fill(tokens: Tensor, mask: Tensor, allowed: Tensor, generator: torch.Generator) -> Tensor:
    """``tokens`` with every masked position replaced by a uniformly random allowed token."""
    draws = allowed[torch.randint(len(allowed), tokens.shape, generator=generator, device=generator.device)]
    return torch.where(mask, draws.to(tokens.device), tokens)


def _build_groups(config: SweepConfig, cells: list[tuple[float, int]]
                  ) -> tuple[list[_Group], list[str], tuple[Denoiser, Tensor, Tensor] | None]:
    spec, grid = config.model, config.grid
    generator = torch.Generator().manual_seed(grid.seed)
    notes: list[str] = []
    if spec.source in TOY_SOURCES:
        groups = []
        for n in sorted({n for _, n in cells}):
            model = (PairwiseMRFDenoiser.ising_chain(n, spec.coupling, spec.field) if spec.source == "ising"
                     else PairwiseMRFDenoiser.potts_chain(n, spec.states, spec.coupling)).to(spec.device)
            natural = torch.zeros(1, n, dtype=torch.long, device=model.device)
            sites = torch.arange(n, device=model.device)[None]
            groups.append(_group(model, natural, sites, [c for c in cells if c[1] == n], config, generator))
        widest = groups[-1].denoiser  # lengths are sorted: the largest chain
        size = widest.vocab.max_length or 0
        context = torch.zeros(1, size, dtype=torch.long, device=widest.device)
        return groups, notes, (widest, context, torch.arange(size, device=widest.device))
    denoiser, codec = build_model(spec)
    sequences = None if config.context.sequence is None else [config.context.sequence]
    natural = start_tokens(sequences, 1, codec).to(denoiser.device)
    all_sites = denoiser.resampleable_sites(natural)[0]
    largest = max(n for _, n in cells)
    if largest > len(all_sites):
        raise ConfigError(f"grid.lengths: {largest} sites exceed the {len(all_sites)} resampleable positions of the "
                          "context sequence")
    center = len(all_sites) // 2 if config.context.window_center is None else config.context.window_center
    first = min(max(center - largest // 2, 0), len(all_sites) - largest)
    if config.context.crop is not None:
        natural, first, note = crop_context(denoiser, natural, first, first + largest, config.context.crop,
                                            key="context.crop")
        notes.append(note)
        all_sites = denoiser.resampleable_sites(natural)[0]
    window = all_sites[first:first + largest][None]
    group = _group(denoiser, natural, window, cells, config, generator)
    return [group], notes, (denoiser, natural, window[0])


def _group(model: Denoiser, natural: Tensor, window: Tensor, cells: list[tuple[float, int]], config: SweepConfig,
           generator: torch.Generator) -> _Group:
    """Pairs and drift chains of ``cells`` on one model: rows use the first ``n`` sites of ``window [1, n_max]``."""
    grid = config.grid
    allowed = model.vocab.allowed_mask(torch.device("cpu")).nonzero().squeeze(1)
    pair_cell = torch.arange(len(cells)).repeat_interleave(grid.pairs)
    temps = torch.tensor([cells[c][0] for c in pair_cell.tolist()], dtype=torch.float64)
    counts = torch.tensor([cells[c][1] for c in pair_cell.tolist()])
    sites = window.expand(len(pair_cell), -1)
    used = torch.arange(window.shape[1])[None] < counts[:, None]
    mask = torch.zeros(len(pair_cell), natural.shape[1], dtype=torch.bool).scatter(1, sites.cpu(), used)
    base = natural.cpu().expand(len(pair_cell), -1)
    first = _random_fill(base, mask, allowed, generator)
    second = _random_fill(base, mask, allowed, generator)
    kinds = [grid.starts[k % len(grid.starts)] for k in range(grid.pairs)] * len(cells)
    natural_rows = torch.tensor([kind == "natural-random" for kind in kinds])
    x0 = torch.where(natural_rows[:, None], base, first)
    y0 = torch.where(natural_rows[:, None], first, second)
    sampler = GlauberSampler(model, temps)
    chains = CoupledGlauberChains(sampler, freeze_met=True)
    seed = int(torch.randint(2**62, (1,), generator=generator))
    pairs = chains.init_state(x0, y0, seed=seed, sites=sites, num_sites=counts)
    group = _Group(denoiser=model, sampler=sampler, chains=chains, pairs=pairs, pair_cell=pair_cell)
    if config.drift.enabled:
        drift_cell = torch.arange(len(cells)).repeat_interleave(config.drift.chains)
        drift_temps = torch.tensor([cells[c][0] for c in drift_cell.tolist()], dtype=torch.float64)
        drift_counts = torch.tensor([cells[c][1] for c in drift_cell.tolist()])
        group.drift_sampler = GlauberSampler(model, drift_temps)
        group.drift = group.drift_sampler.init_state(natural.expand(len(drift_cell), -1),
                                                     seed=int(torch.randint(2**62, (1,), generator=generator)),
                                                     sites=window.expand(len(drift_cell), -1),
                                                     num_sites=drift_counts)
        group.drift_cell, group.drift_start = drift_cell, group.drift.tokens.clone()
        group.distance = _distance(config.drift.distance, model, group.drift)
        group.scale = torch.ones(len(drift_cell), dtype=torch.float64)
        if config.drift.relative:
            drift_mask = resampled_mask(group.drift).cpu()
            samples = [group.distance(_random_fill(group.drift_start.cpu(), drift_mask, allowed, generator).to(
                model.device), group.drift_start) for _ in range(config.drift.reference_samples)]
            group.scale = torch.stack(samples).quantile(0.5, dim=0).clamp_min(1e-12)
        group.hit_at = torch.full((len(config.drift.thresholds), len(drift_cell)), -1, dtype=torch.long)
        group.changes = torch.zeros(len(drift_cell))
        group.drift_curves = [torch.zeros(len(cells))]
    return group


def _distance(kind: str, model: Denoiser, state: ChainState) -> Callable[[Tensor, Tensor], Tensor]:
    """``d(tokens, start) [B]``: changed fraction of the resampled sites, or hidden-state cosine distance pooled
    over them."""
    mask = resampled_mask(state)
    counts = state.site_counts.double()
    if kind == "hamming":
        return lambda tokens, start: ((tokens != start) & mask).sum(1).double().cpu() / counts.cpu()
    if not isinstance(model, MaskedLMDenoiser):
        raise ConfigError(f"drift.distance 'embedding' needs a masked LM, got {type(model).__name__}")
    embedder = HiddenStateEmbedder(model)
    reference = embedder(state.tokens, mask)
    return lambda tokens, start: cosine_distance(embedder(tokens, mask), reference).double()


@torch.no_grad()
def _advance(group: _Group, step: int, config: SweepConfig) -> None:
    if group.active():
        group.chains.step(group.pairs)
    if group.drift is None or group.drift_sampler is None:
        return
    record = group.drift_sampler.step(group.drift)
    assert group.changes is not None and group.hit_at is not None and group.distance is not None
    assert group.scale is not None
    group.changes += (record.new_tokens != record.old_tokens).any(1).cpu().double()
    if step % config.drift.every == 0:
        assert group.drift_start is not None and group.drift_cell is not None
        distance = group.distance(group.drift.tokens, group.drift_start)
        thresholds = torch.tensor(config.drift.thresholds, dtype=torch.float64)
        relative = distance / group.scale  # in units of the threshold scale
        newly = (group.hit_at < 0) & (relative[None, :] >= thresholds[:, None])
        group.hit_at[newly] = step
        num_cells = int(group.drift_cell.max()) + 1
        curve = torch.zeros(num_cells, dtype=torch.float64).index_add_(0, group.drift_cell, relative)
        group.drift_curves.append(curve / torch.bincount(group.drift_cell, minlength=num_cells))


def _snapshot(group: _Group) -> dict[str, Any]:
    return {"pairs": group.pairs.state_dict(), "drift": None if group.drift is None else group.drift.state_dict(),
            "hit_at": group.hit_at, "changes": group.changes, "drift_curves": list(group.drift_curves)}


def _restore(group: _Group, state: dict[str, Any]) -> None:
    group.pairs = CoupledState.from_state_dict(state["pairs"], group.denoiser.device)
    if state["drift"] is not None:
        group.drift = ChainState.from_state_dict(state["drift"], group.denoiser.device)
        group.hit_at, group.changes = state["hit_at"], state["changes"]
        group.drift_curves = list(state["drift_curves"])


def _collect(groups: list[_Group], cells: list[tuple[float, int]], config: SweepConfig, steps: int) -> list[SweepCell]:
    out = []
    for tau, n in cells:
        for group in groups:
            index = _cell_index(group, tau, n, cells)
            if index is None:
                continue
            chosen = group.pair_cell == index
            met_at = group.pairs.met_at[chosen.to(group.pairs.met_at.device)].cpu()
            censored = met_at < 0
            times = torch.where(censored, steps, met_at)
            cell = SweepCell(temperature=tau, num_sites=n,
                             meeting=MeetingTimes(times=times, censored=censored, max_steps=steps))
            if group.hit_at is not None and group.drift_cell is not None and group.changes is not None:
                rows = group.drift_cell == index
                for k, threshold in enumerate(config.drift.thresholds):
                    hits = group.hit_at[k, rows]
                    cell.hitting[threshold] = HittingTimes(times=torch.where(hits < 0, steps, hits),
                                                           censored=hits < 0, max_steps=steps)
                drift_steps = (len(group.drift_curves) - 1) * config.drift.every
                cell.change_rate = float(group.changes[rows].mean()) / max(drift_steps, 1)
                cell.drift_curve = [float(curve[index]) for curve in group.drift_curves]
            out.append(cell)
    return out


def _cell_index(group: _Group, tau: float, n: int, cells: list[tuple[float, int]]) -> int | None:
    """Index of cell ``(tau, n)`` among the group's own cells (groups number their cells from 0)."""
    own = [c for c in cells if _belongs(group, c)]
    return own.index((tau, n)) if (tau, n) in own else None


def _belongs(group: _Group, cell: tuple[float, int]) -> bool:
    max_length = group.denoiser.vocab.max_length
    return not isinstance(group.denoiser, PairwiseMRFDenoiser) or max_length == cell[1]


def _lagged(groups: list[_Group], result: list[SweepCell], cells: list[tuple[float, int]],
            config: SweepConfig) -> None:
    """L-lag meeting times per cell from random starts (the partner from an independent random filling)."""
    spec = config.lag
    generator = torch.Generator().manual_seed(config.grid.seed + 1)
    for group in groups:
        own = [c for c in cells if _belongs(group, c)]
        row_cell = torch.arange(len(own)).repeat_interleave(spec.pairs)
        temps = torch.tensor([own[c][0] for c in row_cell.tolist()], dtype=torch.float64)
        counts = torch.tensor([own[c][1] for c in row_cell.tolist()])
        x = group.pairs.x
        window = x.sites[:1].expand(len(row_cell), -1).cpu()
        used = torch.arange(window.shape[1])[None] < counts[:, None]
        length = x.tokens.shape[1]
        mask = torch.zeros(len(row_cell), length, dtype=torch.bool).scatter(1, window, used)
        base = x.tokens[:1].cpu().expand(len(row_cell), -1)
        allowed = group.denoiser.vocab.allowed_mask(torch.device("cpu")).nonzero().squeeze(1)
        x0, y0 = _random_fill(base, mask, allowed, generator), _random_fill(base, mask, allowed, generator)
        lagged = lagged_meeting_times(GlauberSampler(group.denoiser, temps), x0, y0, lag=spec.lag,
                                      max_steps=config.grid.max_steps, seed=config.grid.seed, sites=window,
                                      num_sites=counts)
        for index, cell in enumerate(own):
            chosen = row_cell == index
            target = next(c for c in result if (c.temperature, c.num_sites) == cell)
            target.lagged = MeetingTimes(times=lagged.times[chosen.to(lagged.times.device)].cpu(),
                                         censored=lagged.censored[chosen.to(lagged.times.device)].cpu(),
                                         lag=spec.lag, max_steps=lagged.max_steps)


def analyse(cells: list[SweepCell], config: SweepConfig
            ) -> tuple[dict[float, ScalingFit], dict[float, dict[float, ScalingFit]], list[BoundaryPoint]]:
    """Per temperature the ``C(tau)`` fits of meeting (and drift hitting) times; per length the boundary."""
    temperatures = sorted({c.temperature for c in cells})
    lengths = sorted({c.num_sites for c in cells})
    fits, hitting_fits = {}, {}
    for tau in temperatures:
        by_n = {c.num_sites: c.meeting for c in cells if c.temperature == tau}
        fits[tau] = fit_scaling(by_n, num_bootstrap=config.bootstrap, seed=config.grid.seed)
        if config.drift.enabled:
            hitting_fits[tau] = {threshold: fit_scaling({c.num_sites: c.hitting[threshold] for c in cells
                                                        if c.temperature == tau},
                                                       num_bootstrap=config.bootstrap, seed=config.grid.seed)
                                 for threshold in config.drift.thresholds}
    boundary = []
    for n in lengths:
        row = [c for c in cells if c.num_sites == n]
        boundary.append(phase_boundary(n, [c.temperature for c in row], [c.meeting.censored_fraction for c in row]))
    return fits, hitting_fits, boundary


def _environment(denoiser: Denoiser) -> dict[str, str]:
    device = denoiser.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    return {"device": str(device), "device_name": name, "torch": torch.__version__, "python": platform.python_version(),
            "threads": str(torch.get_num_threads()), "platform": platform.platform()}
