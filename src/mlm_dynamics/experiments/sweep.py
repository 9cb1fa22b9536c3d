"""The ``sweep`` job: meeting times over a (temperature x length) grid, their scaling, the boundary, the paper's claims.

Each cell ``(tau, n)`` holds ``grid.pairs`` maximally coupled pairs whose chains resample ``n`` sites at temperature
``tau``; start pairs alternate between the kinds of ``grid.starts`` (``natural-random``, ``random-random``). Toy
models (``ising``, ``potts``, ``curie-weiss``) are one chain of ``n`` sites per length; a masked LM resamples a
window of ``n`` resampleable positions of one context, every window centred on ``context.window_center`` (nested
windows). The
engine is :mod:`mlm_dynamics.sampling.grid`: all cells of a model advance in one forward pass per step, met pairs
leave the batch, and every pair and chain draws from its own stream keyed by ``(grid.seed, cell, index)``, so a
cell's results are the same alone, inside any grid, after a resume and in any shard of ``--devices N``.

Every ``trace_every`` steps (a hundredth of the budget) the grid records, per pair, the number of resampled sites where
its two chains differ (the coupling trace of the report); the first pair of each start kind of each cell is kept as
text, at the start and at the meeting (or at the budget).

Optional drift chains (``drift.chains`` per cell, from the natural start) record threshold hitting times through a
:class:`~mlm_dynamics.tracking.DriftTracker`: the changed fraction of the resampled sites (``hamming``) or the
cosine distance of hidden states pooled over them (``embedding``), in units of each chain's distance to random
fillings of its sites (``drift.relative``). Per cell the report gives censoring-aware statistics per start kind
(:mod:`mlm_dynamics.diagnostics.survival`); per temperature ``C(tau)`` of ``T = n (C log n + B)`` and the log-log
slope where every pair met; per length the bracket of the slow region; beside them the rectangle prevalence and the
Dobrushin estimate on the same model and context, and the paper's claims checked against all of it
(:mod:`mlm_dynamics.diagnostics.claims`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .._random import as_generator
from ..diagnostics.claims import ClaimsReport, Evidence, assess_claims
from ..diagnostics.influence import InfluenceEstimate, estimate_influence
from ..diagnostics.meeting import HittingTimes, MeetingTimes, meeting_times_of
from ..diagnostics.rectangle import RectangleReport, sample_rectangles
from ..diagnostics.sweep import GridAnalysis, SweepCell, analyse_grid
from ..embedders.base import HiddenStateEmbedder, cosine_distance
from ..models.base import Denoiser, OutOfTime, forward_deadline
from ..models.cost import CostLedger
from ..models.huggingface import MaskedLMDenoiser
from ..models.toy import PairwiseMRFDenoiser
from ..sampling.coupling import CoupledState, resampled_mask
from ..sampling.glauber import ChainState, GlauberSampler
from ..sampling.grid import (
    START_KINDS,
    GridCell,
    PairGrid,
    RowLayout,
    chain_grid,
    fill_streams,
    lagged_grid,
    pair_grid,
)
from ..tracking.drift import DriftTracker, hamming_fraction, random_fill_distances, random_fill_scale
from .checkpoint import fingerprint, load_checkpoint, restoring, save_checkpoint
from .common import build_model, crop_context, job_deadline, provenance, start_tokens
from .config import TOY_SOURCES, ConfigError, SweepConfig
from .design import DesignPlan, SequentialDesign


@dataclass
class SweepResult:
    """What the sweep measured; :mod:`mlm_dynamics.report.sweep_report` writes it. ``cost``: what each phase spent
    (for merged shards, per phase the longest shard's seconds and every shard's rows); ``stopped``: why the sweep
    ended before its budget of steps (``--budget``, Ctrl-C), or ``None``."""

    config: SweepConfig
    cells: list[SweepCell]
    analysis: GridAnalysis
    claims: ClaimsReport
    influence: InfluenceEstimate | None
    rectangles: RectangleReport | None
    timings: dict[str, float]
    rows: dict[str, float]
    environment: dict[str, str]
    notes: list[str] = field(default_factory=list)
    cost: CostLedger | None = None
    stopped: str | None = None

    def cell(self, temperature: float, num_sites: int) -> SweepCell:
        """The cell at ``(temperature, num_sites)``; a KeyError naming both when the grid has none."""
        for cell in self.cells:
            if cell.temperature == temperature and cell.num_sites == num_sites:
                return cell
        raise KeyError(f"the sweep has no cell at temperature={temperature}, num_sites={num_sites}")


@dataclass
class _Drift:
    """The drift chains of one model: sampler, chains, their layout, tracker, observed curves and change counts."""

    sampler: GlauberSampler
    state: ChainState
    layout: RowLayout
    tracker: DriftTracker
    curves: list[Tensor]
    changes: Tensor

    def advance(self, step: int) -> None:
        record = self.sampler.step(self.state)
        self.changes += (record.new_tokens != record.old_tokens).any(1).cpu().double()
        drift = self.tracker.observe(step, self.state.tokens)
        if drift is not None:
            self.curves.append(_cell_means(drift, self.layout.cell))

    def active(self) -> bool:
        return bool((self.tracker.hit_at < 0).any()) if self.tracker.hit_at is not None else False

    def state_dict(self) -> dict[str, Any]:
        return {"chains": self.state.state_dict(), "tracker": self.tracker.state_dict(), "curves": list(self.curves),
                "changes": self.changes}

    def load_state_dict(self, state: dict[str, Any], device: torch.device) -> None:
        self.state = ChainState.from_state_dict(state["chains"], device)
        self.tracker.load_state_dict(state["tracker"])
        self.curves, self.changes = list(state["curves"]), state["changes"]


@dataclass
class _Group:
    """The cells that share one model (and one natural start): their pairs and the plan of their rounds
    (``design``; ``starts``: both chains' start tokens, ``traces``: each pair's distance every ``trace_every`` steps
    of its own age), optional drift chains, and ``decode`` (ids to text)."""

    denoiser: Denoiser
    natural: Tensor
    cells: list[GridCell]
    design: SequentialDesign
    decode: Callable[[list[int]], str]
    starts: tuple[Tensor, Tensor]
    traces: Tensor
    every: int
    drift: _Drift | None = None

    @property
    def pairs(self) -> PairGrid:
        """The grid of pairs."""
        return self.design.grid

    def trace(self) -> None:
        """Record each started pair's distance where its age is a multiple of ``every`` (met pairs: 0)."""
        state = self.pairs.state
        ages = state.ages.cpu()
        due = state.started.cpu() & (ages % self.every == 0) & (ages // self.every < self.traces.shape[0]) & \
            (ages > 0)
        if bool(due.any()):
            distance = (state.x.tokens != state.y).sum(1).cpu()
            self.traces[ages[due] // self.every, due.nonzero().squeeze(1)] = distance[due]

    def active(self, step: int, max_steps: int) -> bool:
        pairs = self.design.live() and (self.design.plan.sequential or step < max_steps)
        return pairs or (self.drift is not None and step < max_steps and self.drift.active())


def run_sweep(config: SweepConfig, out_dir: Path | None = None, *, resume: bool = False, progress: bool = False,
              cells: Sequence[tuple[float, int]] | None = None, extras: bool = True,
              ledger: CostLedger | None = None, budget: float | None = None) -> SweepResult:
    """Run the sweep (``cells``: a subset of the grid, e.g. one process's shard; ``extras``: also the rectangle test
    and the influence estimate, which a shard other than the first leaves out). Every phase is charged to
    ``ledger`` (a new one by default), the result's :attr:`SweepResult.cost`.

    ``budget``: seconds for the whole job from ``ledger``'s start; at the deadline, or on Ctrl-C, the pairs stop at
    the step reached (open pairs censored there), the lagged pairs, influence and rectangles are left out, and
    :attr:`SweepResult.stopped` says why, so the report of what was measured can still be written (the checkpoint
    stays for ``--resume``)."""
    config.validate()
    grid = config.grid
    ledger = CostLedger() if ledger is None else ledger
    deadline = job_deadline(budget, ledger.started)
    cell_list = list(cells) if cells is not None else [(t, n) for t in grid.temperatures for n in grid.lengths]
    t0 = time.perf_counter()
    set_up = ConfigError(f"--budget: the {budget} s ran out during the set-up, before any pair step; give a budget "
                         "above the set-up time")
    try:
        with ledger.phase("model load and setup"), forward_deadline(deadline - time.perf_counter()):
            groups, notes = _build_groups(config, cell_list)
            for group in groups:  # one budget of rows for every model's cells
                group.design.peers = [other.design for other in groups if other is not group]
    except OutOfTime:  # no forward after the deadline, the set-up's included
        raise set_up from None
    setup_seconds = time.perf_counter() - t0
    first = groups[0]
    if time.perf_counter() >= deadline:  # nor the calibration's
        raise set_up
    # the unit of the bill: a forward at the grid's batch (both chains of every started pair of the first group),
    # at most 64
    batch = 2 * int(first.pairs.state.started.sum())
    ledger.time_bare_forward(first.denoiser, first.natural.expand(min(64, max(batch, 1)), -1))
    checkpoint_path = None if out_dir is None else out_dir / "sweep-checkpoint.pt"
    fingerprints = {"config": fingerprint(config.resume_fingerprint()),
                    "cells": fingerprint([list(c) for c in cell_list])}
    step = 0
    if resume:
        if checkpoint_path is None:
            raise ValueError("out_dir is required for --resume")
        saved, step = load_checkpoint(checkpoint_path, fingerprints=fingerprints)
        ledger.scope = f"this process only: resumed from the checkpoint at step {step}"
        with restoring(checkpoint_path):
            for group, state in zip(groups, saved["groups"], strict=True):
                _restore(group, state)
    t1 = time.perf_counter()
    bar = _progress(config, step, progress, groups)
    stopped: str | None = None
    with ledger.phase("pairs and drift"):
        try:
            with forward_deadline(deadline - time.perf_counter()):
                while any(g.active(step, grid.max_steps) for g in groups):
                    step += 1
                    for group in groups:  # a group whose pairs all stopped steps at no cost: its clock goes on
                        group.design.step()
                        group.trace()
                        if group.drift is not None and step <= grid.max_steps:
                            group.drift.advance(step)
                    bar(step)
                    if config.checkpoint_every and checkpoint_path is not None and \
                            step % config.checkpoint_every == 0:
                        save_checkpoint(checkpoint_path, {"groups": [_snapshot(g) for g in groups]},
                                        fingerprints=fingerprints, step=step)
        except OutOfTime:
            stopped = f"budget: the {budget:g} s ran out at step {step}"
        except KeyboardInterrupt:
            stopped = f"interrupted at step {step}"
    if stopped is not None:
        step = min(g.pairs.state.x.step for g in groups)  # a group stopped mid-step did not take it: censor all there
        notes.append(f"stopped early ({stopped}): open pairs are censored at the step reached; lagged pairs, "
                     "influence and rectangles not measured")
        extras = False
    chain_seconds = time.perf_counter() - t1
    result_cells = [cell for group in groups for cell in _collect(group, config, step)]
    t2 = time.perf_counter()
    if config.lag.enabled and stopped is None:
        with ledger.phase("lagged pairs"):
            for group in groups:
                _lagged(group, result_cells, config)
    lag_seconds = time.perf_counter() - t2
    widest = max(groups, key=lambda g: max(c.num_sites for c in g.cells))
    window = torch.tensor(max(widest.cells, key=lambda c: c.num_sites).sites, device=widest.natural.device)
    influence = rectangles = None
    if extras and config.influence.enabled:
        with ledger.phase("influence"):
            temperatures = sorted({t for t, _ in cell_list})
            influence = estimate_influence(widest.denoiser, widest.natural, temperatures=temperatures,
                                           sites=window[: config.influence.max_sites],
                                           replacements=config.influence.replacements,
                                           generator=as_generator(grid.seed, "influence", device=widest.natural.device))
    if extras and config.rectangle.enabled:
        with ledger.phase("rectangles"):
            spec = config.rectangle
            allowed = int(widest.denoiser.vocab.allowed_mask().sum())  # a toy chain may have fewer states than asked
            rectangles = sample_rectangles(widest.denoiser, widest.natural, pairs_per_context=spec.pairs_per_context,
                                           num_tokens=min(spec.num_tokens, allowed), max_distance=spec.max_distance,
                                           sites=window[None], generator=as_generator(grid.seed, "rectangles"))
    spent = sum(g.pairs.state.rows for g in groups)
    uncompacted = sum(2 * int(g.pairs.state.started.sum()) * (grid.max_steps if g.design.plan.sequential else step)
                      for g in groups)
    with ledger.phase("analysis and claims"):  # summaries, fits, the claims' plug-in power: no forward rows
        return finish(config, result_cells, influence=influence, rectangles=rectangles,
                      timings={"setup_seconds": round(setup_seconds, 2), "chain_seconds": round(chain_seconds, 2),
                               "lag_seconds": round(lag_seconds, 2), "steps": float(step)},
                      rows={"pair_rows_spent": float(spent), "pair_rows_uncompacted": float(uncompacted)},
                      environment=provenance(config.model, groups[0].denoiser), notes=notes, cost=ledger,
                      stopped=stopped)


def finish(config: SweepConfig, cells: list[SweepCell], *, influence: InfluenceEstimate | None,
           rectangles: RectangleReport | None, timings: dict[str, float], rows: dict[str, float],
           environment: dict[str, str], notes: list[str], cost: CostLedger | None = None,
           stopped: str | None = None) -> SweepResult:
    """Summaries, fits, boundary and claims of measured cells (in grid order): the end of a sweep, and of a merge
    of shards."""
    grid = [(t, n) for t in config.grid.temperatures for n in config.grid.lengths]
    order = {cell: k for k, cell in enumerate(grid)}
    cells = sorted(cells, key=lambda c: order[(c.temperature, c.num_sites)])
    for cell in cells:
        cell.summarise(config.confidence)
    analysis = analyse_grid(cells, thresholds=config.drift.thresholds if config.drift.enabled else (),
                            confidence=config.confidence)
    evidence = Evidence(times={(c.temperature, c.num_sites): c.meeting for c in cells},
                        witness={(c.temperature, c.num_sites): c.witness for c in cells if c.witness is not None},
                        start_pairs={(c.temperature, c.num_sites): c.start_pairs for c in cells},
                        rectangles=rectangles, influence=influence, seed=config.grid.seed)
    spent, uncompacted = rows["pair_rows_spent"], rows["pair_rows_uncompacted"]
    rows = {**rows, "rows_saved_fraction": 1 - spent / uncompacted if uncompacted else 0.0}
    return SweepResult(config=config, cells=cells, analysis=analysis, claims=assess_claims(evidence),
                       influence=influence, rectangles=rectangles, timings=timings, rows=rows,
                       environment=environment, notes=notes, cost=cost, stopped=stopped)


def _progress(config: SweepConfig, start: int, enabled: bool, groups: list[_Group]) -> Callable[[int], None]:
    """A tqdm bar: steps of a fixed design (pairs still running), or a sequential design's rows spent of its budget
    with the cells decided and the look each is at."""
    if not enabled:
        return lambda step: None
    from tqdm.auto import tqdm

    sequential = bool(config.grid.looks)
    total = config.grid.max_rows if sequential else config.grid.max_steps
    bar = tqdm(total=total, initial=0 if sequential else start, desc="sweep rows" if sequential else "sweep steps",
               unit="row" if sequential else "step", disable=None)  # None: on a terminal only

    def update(step: int) -> None:
        if sequential:
            rows = sum(g.pairs.state.rows for g in groups)
            bar.update(rows - bar.n)
            decided = [g.design.progress()["decided"].split("/") for g in groups]
            bar.set_postfix(step=step, decided=f"{sum(int(d[0]) for d in decided)}/{sum(int(d[1]) for d in decided)}")
        else:
            bar.update(step - bar.n)
            bar.set_postfix(active_pairs=sum(int(g.pairs.state.open.sum()) for g in groups))
        if not any(g.active(step, config.grid.max_steps) for g in groups):
            bar.close()

    return update


def trace_every(max_steps: int) -> int:
    """Steps between two records of the coupling trace: a hundredth of the budget (at least 1)."""
    return max(1, max_steps // 100)


def centred_windows(num_sites: int, center: int | None, lengths: Sequence[int]) -> dict[int, range]:
    """For each length ``n`` the indices ``[c - n // 2, c - n // 2 + n)`` among ``num_sites`` resampleable positions
    (``c`` the centre, default the middle): nested windows around one centre, the same for a length whatever the
    other lengths; a ConfigError naming the key if the largest does not fit."""
    largest = max(lengths)
    if largest > num_sites:
        raise ConfigError(f"grid.lengths: {largest} sites exceed the {num_sites} resampleable positions of the "
                          "context sequence")
    middle = num_sites // 2 if center is None else center
    if not (largest // 2 <= middle <= num_sites - largest + largest // 2):
        raise ConfigError(f"context.window_center must leave room for a window of {largest} around it among the "
                          f"{num_sites} resampleable positions (between {largest // 2} and "
                          f"{num_sites - largest + largest // 2}), got {center}")
    return {n: range(middle - n // 2, middle - n // 2 + n) for n in lengths}


def _build_groups(config: SweepConfig, cells: list[tuple[float, int]]) -> tuple[list[_Group], list[str]]:
    spec, grid = config.model, config.grid
    notes: list[str] = []
    if spec.source in TOY_SOURCES:
        groups = []
        for n in sorted({n for _, n in cells}):
            model = _toy_model(spec.source, n, spec.coupling, spec.field, spec.states).to(spec.device)
            natural = torch.zeros(1, n, dtype=torch.long, device=model.device)
            own = [GridCell(tau, tuple(range(n))) for tau, m in cells if m == n]
            groups.append(_group(model, natural, own, config, _spins))
        return groups, notes
    denoiser, codec = build_model(spec)
    sequences = None if config.context.sequence is None else [config.context.sequence]
    natural = start_tokens(sequences, 1, codec, max_length=denoiser.vocab.max_length,
                           key="context.sequence").to(denoiser.device)
    all_sites = denoiser.resampleable_sites(natural)[0]
    lengths = sorted({n for _, n in cells})
    windows = centred_windows(len(all_sites), config.context.window_center, grid.lengths)
    if config.context.crop is not None:
        largest = windows[max(grid.lengths)]
        natural, first, note = crop_context(denoiser, natural, largest.start, largest.stop, config.context.crop,
                                            key="context.crop")
        notes.append(note + "; the cropped context is another model, with other conditionals")
        shift = largest.start - first
        windows = {n: range(w.start - shift, w.stop - shift) for n, w in windows.items()}
        all_sites = denoiser.resampleable_sites(natural)[0]
    own = [GridCell(tau, tuple(all_sites[windows[n].start:windows[n].stop].tolist())) for tau, n in cells
           if n in lengths]
    return [_group(denoiser, natural, own, config, codec.decode)], notes


def _toy_model(source: str, n: int, coupling: float, field: float, states: int) -> PairwiseMRFDenoiser:
    if source == "ising":
        return PairwiseMRFDenoiser.ising_chain(n, coupling, field)
    if source == "curie-weiss":
        return PairwiseMRFDenoiser.curie_weiss(n, coupling, field)
    return PairwiseMRFDenoiser.potts_chain(n, states, coupling)


def _spins(ids: list[int]) -> str:
    """A toy chain's states as text: ``-``/``+`` for the two spins, digits for more states."""
    symbols = "-+" if max(ids, default=0) < 2 else "0123456789"
    return "".join(symbols[i] if i < len(symbols) else f"({i})" for i in ids)


def design_plan(config: SweepConfig) -> DesignPlan:
    """The plan of a sweep's pairs (:class:`~.design.DesignPlan`): one look at the first round's natural-random
    pairs (a fixed design), or the looks of ``grid.looks`` (the sequential design)."""
    grid = config.grid
    natural = sum(1 for k in range(grid.pairs) if grid.starts[k % len(grid.starts)] == "natural-random")
    return DesignPlan(looks=(natural, *grid.looks) if natural else (grid.pairs,),
                      witness_steps=tuple(grid.witness_steps), max_steps=grid.max_steps, learn=grid.learn,
                      max_rows=grid.max_rows)


def _group(model: Denoiser, natural: Tensor, cells: list[GridCell], config: SweepConfig,
           decode: Callable[[list[int]], str]) -> _Group:
    """Pairs (and drift chains) of ``cells`` on one model."""
    grid = config.grid
    pairs = pair_grid(model, natural, cells, pairs=grid.pairs, starts=grid.starts, seed=grid.seed,
                      capacity=grid.looks[-1] if grid.looks else grid.pairs)
    x0, y0 = pairs.state.x.tokens.clone(), pairs.state.y.clone()
    every = trace_every(grid.max_steps)
    traces = torch.zeros(grid.max_steps // every + 1, x0.shape[0], dtype=torch.long)
    traces[0] = (x0 != y0).sum(1).cpu()
    group = _Group(denoiser=model, natural=natural, cells=cells, design=SequentialDesign(pairs, design_plan(config)),
                   decode=decode, starts=(x0, y0), traces=traces, every=every)
    spec = config.drift
    if spec.enabled:
        sampler, state, layout = chain_grid(model, natural, cells, chains=spec.chains, seed=grid.seed)
        mask = resampled_mask(state)
        embedder, distance = _distance(spec.distance, model, mask)
        scale = None
        if spec.relative:
            streams = [s.to(natural.device) for s in fill_streams(grid.seed, cells, layout, spec.reference_samples)]
            distances = random_fill_distances(embedder, model, state.tokens, state.sites,
                                              samples=spec.reference_samples, streams=streams, site_counts=state.counts,
                                              distance=distance)
            scale = random_fill_scale(distances, per_row=True)
        tracker = DriftTracker(embedder, thresholds=spec.thresholds, every=spec.every, distance=distance, scale=scale)
        tracker.start(state.tokens, step=0)
        group.drift = _Drift(sampler=sampler, state=state, layout=layout, tracker=tracker,
                             curves=[torch.zeros(len(cells), dtype=torch.float64)],
                             changes=torch.zeros(len(layout.cell), dtype=torch.float64))
    return group


def _distance(kind: str, model: Denoiser, mask: Tensor) -> tuple[Callable[[Tensor], Tensor],
                                                                 Callable[[Tensor, Tensor], Tensor]]:
    """``(embedder, distance)`` of the drift: tokens and the changed fraction of the resampled sites, or hidden
    states pooled over them and the cosine distance."""
    if kind == "hamming":
        return (lambda tokens: tokens), hamming_fraction(mask)
    if not isinstance(model, MaskedLMDenoiser):
        raise ConfigError(f"drift.distance 'embedding' needs a masked LM, got {type(model).__name__}")
    hidden = HiddenStateEmbedder(model)
    return (lambda tokens: hidden(tokens, mask)), cosine_distance


def _cell_means(values: Tensor, cell: Tensor) -> Tensor:
    count = int(cell.max()) + 1
    sums = torch.zeros(count, dtype=torch.float64).index_add_(0, cell, values.double().cpu())
    return sums / torch.bincount(cell, minlength=count)


def _snapshot(group: _Group) -> dict[str, Any]:
    return {"pairs": group.pairs.state.state_dict(), "traces": group.traces.clone(),
            "drift": None if group.drift is None else group.drift.state_dict(), "design": group.design.state_dict()}


def _restore(group: _Group, state: dict[str, Any]) -> None:
    group.pairs.state = CoupledState.from_state_dict(state["pairs"], group.denoiser.device)
    group.traces = state["traces"].clone()
    group.design.load_state_dict(state["design"])
    if group.drift is not None and state["drift"] is not None:
        group.drift.load_state_dict(state["drift"], group.denoiser.device)


def _collect(group: _Group, config: SweepConfig, steps: int) -> list[SweepCell]:
    out = []
    hitting = group.drift.tracker.hitting_times() if group.drift is not None else []
    design = group.design
    design.close()
    brackets = design.brackets()
    state = group.pairs.state
    times = meeting_times_of(state).times  # started pairs only, in row order
    started = state.started.cpu().nonzero().squeeze(1)
    for index, cell in enumerate(group.cells):
        pairs = (group.pairs.rows_of(index) & state.started).nonzero().squeeze(1).cpu()
        chosen = torch.isin(started, pairs)
        met_at, kinds = group.pairs.meeting(index)
        censored = met_at < 0
        lower = design.cells[index].slow if design.cells[index].slow is not None else design.lower(index)
        bracket = brackets[index]
        budget = int(times[chosen].max()) if design.plan.sequential and pairs.numel() else steps
        result = SweepCell(temperature=cell.temperature, num_sites=cell.num_sites, sites=list(cell.sites),
                           meeting=MeetingTimes(times=times[chosen].cpu(), censored=censored, max_steps=budget),
                           kinds=kinds, coupling_trace=group.traces[:, pairs], trace_every=group.every,
                           draws=_draws(group, pairs), witness=lower,
                           looks=design.plan.looks if design.plan.sequential else None,
                           needs=bracket.needs if design.plan.sequential else None,
                           rows=design.cells[index].rows)
        if group.drift is not None:
            rows = group.drift.layout.cell == index
            for threshold, times_d in zip(sorted(config.drift.thresholds), hitting, strict=True):
                result.hitting[threshold] = HittingTimes(times=times_d.times[rows], censored=times_d.censored[rows],
                                                         max_steps=times_d.max_steps)
            drift_steps = (len(group.drift.curves) - 1) * config.drift.every
            result.change_rate = float(group.drift.changes[rows].mean()) / max(drift_steps, 1)
            result.drift_curve = [float(curve[index]) for curve in group.drift.curves]
        out.append(result)
    return out


def _draws(group: _Group, rows: Tensor) -> list[dict[str, Any]]:
    """The first pair of each start kind among ``rows`` as text, at the start and at the meeting (or the budget)."""
    x0, y0 = group.starts
    state = group.pairs.state
    out = []
    for kind in sorted(set(group.pairs.kind[rows].tolist())):
        row = int(rows[group.pairs.kind[rows] == kind][0])
        born = 0 if state.born is None else int(state.born[row])
        out.append({"kind": START_KINDS[kind], "met_at": int(state.met_at[row]) - born if state.met_at[row] >= 0
                    else -1,
                    **{name: group.decode(tokens[row].tolist()) for name, tokens in
                       (("x_start", x0), ("y_start", y0), ("x_end", state.x.tokens), ("y_end", state.y))}})
    return out


def _lagged(group: _Group, cells: list[SweepCell], config: SweepConfig) -> None:
    """L-lag meeting times per cell, both chains from independent random fillings, each pair on its own streams."""
    spec = config.lag
    state, layout = lagged_grid(group.denoiser, group.natural, group.cells, pairs=spec.pairs, lag=spec.lag,
                                max_steps=config.grid.max_steps, seed=config.grid.seed)
    lagged = meeting_times_of(state, lag=spec.lag)
    for index, cell in enumerate(group.cells):
        rows = (layout.cell == index).to(lagged.times.device)
        target = next(c for c in cells if (c.temperature, c.num_sites) == cell.key)
        target.lagged = MeetingTimes(times=lagged.times[rows].cpu(), censored=lagged.censored[rows].cpu(),
                                     lag=spec.lag, max_steps=lagged.max_steps)


__all__ = ["SweepResult", "centred_windows", "finish", "run_sweep", "trace_every"]
