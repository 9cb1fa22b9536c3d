"""The ``run`` job: Glauber chains on one model, with semantics, coupling, rectangle, margin, influence and
parallel-decoding sections.

``run_chains(config, out_dir)`` loads the model, steps the chains (checkpointing every ``run.checkpoint_every``
steps), then measures the sections and returns a :class:`ChainRunResult`; :mod:`mlm_dynamics.report` writes it.
"""

from __future__ import annotations

import copy
import csv
import io
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import Tensor

from .._io import AppendLog
from .._random import as_generator
from ..diagnostics.bracket import MixingBracket, mixing_bracket
from ..diagnostics.claims import ClaimsReport, Evidence, assess_claims
from ..diagnostics.influence import InfluenceEstimate, estimate_influence
from ..diagnostics.margins import LocalMargins, local_margins
from ..diagnostics.meeting import MeetingTimes
from ..diagnostics.parallel import ConfidenceProfile, confidence_profile, random_window
from ..diagnostics.rectangle import RectangleReport, sample_rectangles
from ..diagnostics.witness import MixingLowerBound
from ..embedders.base import HiddenStateEmbedder, cosine_distance
from ..models.base import Denoiser, OutOfTime, forward_deadline
from ..models.cost import CostLedger
from ..models.huggingface import MaskedLMDenoiser
from ..sampling.coupling import CoupledState, resampled_mask
from ..sampling.glauber import ChainState, StepRecord
from ..sampling.grid import GridCell, pair_grid
from ..tracking.drift import random_fill_distances, random_fill_scale
from ..tracking.monitor import ChainMonitor
from ..tracking.traps import TrapEvent, TrapTracker, trap_statistics
from .checkpoint import fingerprint, load_checkpoint, restoring, save_checkpoint
from .common import Codec, build_model, crop_context, job_deadline, provenance, start_tokens, window_sites
from .config import ConfigError, RunConfig, to_dict
from .design import DesignPlan, SequentialDesign

SectionT = TypeVar("SectionT")

@dataclass
class CouplingResult:
    """Meeting times of maximally coupled pairs (start sequence vs random tokens) per temperature of the ladder, and
    the pairs' Hamming distances at the start and at the end (0 once met); ``seconds`` of the loop that served them
    with the chains, ``rows`` the forward rows spent on the pairs (both chains while a pair runs). ``lower``: the
    paired witness bound per temperature at ``coupling.witness_steps`` (the certified slow side; the learned witness
    fitted on the other temperatures' first-round pairs); ``decided``: both sides per temperature as the design
    decided them (:class:`~.design.SequentialDesign`); ``rows_by_temperature``: the pairs' rows per temperature."""

    times: dict[float, MeetingTimes]
    hamming_start: list[int]
    hamming_end: list[int]
    seconds: float
    rows: int = 0
    lower: dict[float, MixingLowerBound] = field(default_factory=dict)
    decided: dict[float, MixingBracket] = field(default_factory=dict)
    rows_by_temperature: dict[float, int] = field(default_factory=dict)

    def brackets(self) -> dict[float, MixingBracket]:
        """Both sides per temperature (:func:`~mlm_dynamics.diagnostics.bracket.mixing_bracket` at the look the
        design reached)."""
        return {tau: self.decided.get(tau) or mixing_bracket(times, self.lower.get(tau))
                for tau, times in self.times.items()}


@dataclass
class SemanticsResult:
    """Drift, traps and basins of the chains in hidden-state space (see :class:`~.config.SemanticsConfig`).

    Attributes:
        scale: median distance from the start to random fillings of the sites (the unit of the radii).
        steps: observation steps; embeddings: ``[observations, chains, D]``; basins: ``[observations, chains]``
            basin id of each trapped chain (-1: not trapped); metrics: the last observation's monitor scalars.
    """

    scale: float
    steps: list[int]
    embeddings: Tensor
    basins: Tensor
    drift: Tensor
    metrics: dict[str, float]
    temperatures: list[float]
    events: list[TrapEvent]

    def traps(self) -> dict[str, float]:
        """:func:`~mlm_dynamics.tracking.traps.trap_statistics` over every chain (open traps censored at the last
        observation)."""
        return trap_statistics(self.events, self.basins, range(self.basins.shape[1]), self.steps[-1])

    def by_temperature(self) -> list[dict[str, float]]:
        """Per chain temperature: final drift (in units of :attr:`scale`), traps, distinct basins, trapped fraction
        of the observations, and the median dwell time (open traps counted up to the last observation)."""
        out = []
        for tau in sorted(set(self.temperatures)):
            chains = [c for c, t in enumerate(self.temperatures) if t == tau]
            out.append({"temperature": tau,
                        "drift_over_scale_final": float(self.drift[-1, chains].mean()) / self.scale,
                        **trap_statistics(self.events, self.basins, chains, self.steps[-1])})
        return out


@dataclass
class ChainRunResult:
    """Everything the ``run`` job measured; :func:`mlm_dynamics.report.run_report` turns it into JSON. ``cost``: the
    ledger of what each phase spent; ``stopped``: why the job ended before its plan (the budget, Ctrl-C), or
    ``None``."""

    config: RunConfig
    model: dict[str, float]
    chains: dict[str, Any]
    final_sequences: list[str]
    start_sequences: list[str] = field(default_factory=list)
    trajectory: list[dict[str, Any]] = field(default_factory=list)
    semantics: SemanticsResult | None = None
    coupling: CouplingResult | None = None
    rectangle: RectangleReport | None = None
    margins: dict[str, LocalMargins] | None = None
    influence: InfluenceEstimate | None = None
    parallel: ConfidenceProfile | None = None
    notes: list[str] = field(default_factory=list)
    claims: ClaimsReport | None = None
    environment: dict[str, str] = field(default_factory=dict)
    cost: CostLedger | None = None
    stopped: str | None = None


def check_progress(saved: Any, fresh: dict[str, Any], steps: int) -> dict[str, Any]:
    """A checkpoint's counters checked as its tokens are: each of ``fresh``'s keys there with the same type, shape and
    dtype, and values a run of ``steps`` chain steps can hold (finite; per-chain changed steps in ``[0, steps]``,
    per-site changes in ``[0, steps]``, a log-probability sum at most 0, byte counts at least 0). A ValueError naming
    the counter (a checkpoint resealed by hand or of another version), so no report shows a NaN rate or a count
    beyond the steps run."""
    if not isinstance(saved, dict):
        raise ValueError(f"progress must be a dict of counters, got {type(saved).__name__}")
    for name, like in fresh.items():
        value = saved.get(name)
        if isinstance(like, Tensor):
            if not isinstance(value, Tensor) or value.shape != like.shape or value.dtype != like.dtype:
                got = f"{getattr(value, 'dtype', type(value).__name__)} {tuple(getattr(value, 'shape', ()))}"
                raise ValueError(f"progress[{name!r}] must be a {like.dtype} tensor of shape {tuple(like.shape)}, got "
                                 f"{got}")
            if value.numel() and not (bool(value.isfinite().all()) and float(value.min()) >= 0
                                      and float(value.max()) <= steps):
                raise ValueError(f"progress[{name!r}] must hold counts in [0, {steps}] (the steps run), got values "
                                 f"in [{float(value.min())}, {float(value.max())}]")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value > 0:
            raise ValueError(f"progress[{name!r}] must be a finite sum of log-probabilities (at most 0), got {value!r}")
    written = saved.get("trajectory_bytes")
    if isinstance(written, bool) or not isinstance(written, int) or written < 0:
        raise ValueError(f"progress['trajectory_bytes'] must be a byte count >= 0, got {written!r}")
    return saved


def run_chains(config: RunConfig, out_dir: Path | None = None, *, resume: bool = False,
               budget: float | None = None, ledger: CostLedger | None = None,
               progress_bar: bool = False) -> ChainRunResult:
    """Run the job described by ``config`` (validated); checkpoints go to ``out_dir/checkpoint.pt``.

    The plan, served by one loop: every step is one forward pass over the rows still live -- the coupled pairs of
    every temperature while they run (rounds of the sequential design, :mod:`~.design`: a decided temperature's pairs
    stop, an undecided one's get more within ``coupling.max_rows``), the chains (the first pairs' natural-start
    chains) up to ``run.num_steps`` --, then the sections that read the chains' final states (rectangles, margins,
    influence) and a progress bar on a terminal (``progress_bar``). Every phase is charged to
    :attr:`ChainRunResult.cost`.

    ``budget``: seconds for the whole job (model load included, counted from ``ledger``'s start: pass one made at
    the process start to count the imports too); the loop stops at the deadline (the chains end at
    the step reached, open pairs are censored there), later sections that do not fit are skipped, and the result says
    so in :attr:`ChainRunResult.stopped` and its notes. Ctrl-C does the same (``stopped`` starts with
    ``interrupted``), so a report of what was measured can still be written.

    With ``resume=True`` the chains, the pairs, the design and the report's accumulators continue from the
    checkpoint, which must come from the same model, chains, sampler and coupling config and the same start state
    (verified); the result is bit-identical to an uninterrupted run.
    """
    config.validate()
    if resume and out_dir is None:
        raise ValueError("out_dir is required for --resume")
    ledger = CostLedger() if ledger is None else ledger
    deadline = job_deadline(budget, ledger.started)
    with ledger.phase("model load"):
        denoiser, codec = build_model(config.model)
    tokens = start_tokens(config.chains.sequences, config.chains.num_chains, codec,
                          max_length=denoiser.vocab.max_length).to(denoiser.device)
    window, notes = config.chains.window, []
    if config.chains.crop is not None:
        assert window is not None  # checked by validate
        tokens, first, note = crop_context(denoiser, tokens, window[0], window[1], config.chains.crop,
                                          key="chains.crop")
        window, notes = [first, first + window[1] - window[0]], [note]
    sites = window_sites(denoiser, tokens, window)
    if time.perf_counter() >= deadline:  # no forward after the deadline, the calibration's included
        raise ConfigError(f"--budget: the {budget:g} s ran out while the model loaded, before any chain step; give "
                          "a budget above the load time")
    # the unit of the bill and the plan's price of a step: a forward at the loop's batch (every chain and pair row)
    per_step = planned_rows(config, sites.shape[1])[0]
    ledger.time_bare_forward(denoiser, tokens[torch.arange(min(per_step, CHUNK_ROWS)) % tokens.shape[0]])
    temperatures = config.per_chain_temperatures()
    if budget is not None and not resume:
        config, planned = fit_to_budget(config, ledger, deadline - time.perf_counter(), num_sites=sites.shape[1])
        notes += planned
    plan = _Plan(config, denoiser, tokens, sites)
    notes += plan.notes
    state = plan.state
    num_chains = tokens.shape[0]
    start = tokens.clone()
    checkpoint_path = None if out_dir is None else out_dir / "checkpoint.pt"
    fingerprints = {"config": fingerprint(config.resume_fingerprint()), "start_state": fingerprint([start, sites])}
    progress: dict[str, Any] = {"changes": torch.zeros(sites.shape, dtype=torch.long, device=tokens.device),
                                "changed_steps": torch.zeros(num_chains, device=tokens.device),
                                "log_prob_sum": 0.0}
    watch = _Semantics(denoiser, plan.chain_view(), config, ledger) if config.semantics.enabled else None
    num_steps, record_every, every = config.run.num_steps, config.run.record_every, config.run.checkpoint_every
    trajectory = _Trajectory(None if out_dir is None else out_dir / "trajectory.csv")
    if resume:
        assert checkpoint_path is not None and out_dir is not None
        saved, saved_step = load_checkpoint(checkpoint_path, fingerprints=fingerprints, map_location=tokens.device)
        ledger.scope = f"this process only: resumed from the checkpoint at step {saved_step}"
        if saved_step > num_steps and not config.coupling.enabled:
            raise ConfigError(f"run.num_steps: {num_steps} is below step {saved_step}, where the checkpoint "
                              f"{checkpoint_path} stopped; resume with run.num_steps >= {saved_step}")
        with restoring(checkpoint_path):
            plan.load_state_dict(saved["plan"])
            state, progress = plan.state, check_progress(saved["progress"], progress, min(saved_step, num_steps))
            trajectory.resume(int(progress["trajectory_bytes"]))
            if watch is not None:
                watch.resume(progress["semantics"], out_dir / "semantics.bin")
    else:
        trajectory.start()
        if watch is not None and out_dir is not None:
            watch.log_to(out_dir / "semantics.bin")

    first_step = state.x.step
    stopped: str | None = None
    bar = _progress(plan, progress_bar)
    with ledger.phase("chains and pairs"):
        try:
            with forward_deadline(deadline - time.perf_counter()):
                while plan.live():
                    record = plan.step()
                    step = record.step
                    if step <= num_steps:
                        rows = plan.chain_rows
                        moved = record.new_tokens[rows] != record.old_tokens[rows]
                        progress["changed_steps"] += moved.any(1).float()
                        progress["log_prob_sum"] += float(record.log_prob[rows].mean())
                        progress["changes"] += ((sites[:, :, None] == record.positions[rows, None, :])
                                                & moved[:, None, :]).any(2)
                        if step % record_every == 0:
                            trajectory.add(_trajectory_rows(step, plan.chain_tokens(), start, codec))
                        if watch is not None:
                            watch.observe(plan.chain_view())
                    bar(step)
                    if every and checkpoint_path is not None and (step % every == 0 or not plan.live()):
                        progress["trajectory_bytes"] = trajectory.sync()  # the records hold what the checkpoint holds
                        if watch is not None:
                            progress["semantics"] = watch.state_dict()
                        save_checkpoint(checkpoint_path, {"plan": plan.state_dict(), "progress": progress},
                                        fingerprints=fingerprints, step=step)
        except OutOfTime:
            stopped = f"budget: the {budget:g} s ran out at step {state.x.step}"
        except KeyboardInterrupt:
            stopped = f"interrupted at step {state.x.step}"
        finally:
            bar(None)
    steps_done = min(state.x.step, num_steps)
    final = plan.chain_tokens().clone()
    if stopped is not None:
        state.stop(state.open)  # the open pairs are censored at the step reached
        notes.append(f"stopped early ({stopped}): the chains ran {steps_done} of {num_steps} steps, open coupled "
                     "pairs are censored there")
    if steps_done % record_every:  # the final state, off the recording grid, after every checkpoint
        trajectory.add(_trajectory_rows(steps_done, final, start, codec))
    trajectory.sync()
    chain_seconds = ledger.phases["chains and pairs"].seconds
    sections = _Sections(ledger, deadline, stopped)
    site_start = sections.run("margins", lambda: local_margins(denoiser, start, sites=sites, chunk_size=CHUNK_ROWS))
    site_final = sections.run("margins", lambda: local_margins(denoiser, final, sites=sites, chunk_size=CHUNK_ROWS))
    hamming = (final != start).sum(1).float()
    by_temperature = []
    for tau in sorted(set(temperatures)):
        rows = torch.tensor([t == tau for t in temperatures], device=tokens.device)
        by_temperature.append({"temperature": tau, "change_rate": float(progress["changed_steps"][rows].mean()
                                                                         / max(steps_done, 1)),
                               "hamming_to_start_mean": float(hamming[rows].mean())})
    chains_summary = {
        "num_chains": num_chains, "num_sites": sites.shape[1], "num_steps": steps_done,
        "by_temperature": by_temperature,
        "steps_per_second": round((state.x.step - first_step) / max(chain_seconds, 1e-9), 3),
        "loop_steps": state.x.step,
        "change_rate": float(progress["changed_steps"].mean() / max(steps_done, 1)),
        "mean_log_prob_of_proposal": progress["log_prob_sum"] / max(steps_done, 1),
        "hamming_to_start_mean": float(hamming.mean()), "hamming_to_start_max": int(hamming.max()),
        "site_change_counts": progress["changes"].sum(0).tolist(),
        "pll_energy_start_mean": math.nan if site_start is None else
        float(site_start.pseudo_log_likelihood_energy().mean()),
        "pll_energy_end_mean": math.nan if site_final is None else
        float(site_final.pseudo_log_likelihood_energy().mean()),
        "unique_final_sequences": len({codec.decode(t.tolist()) for t in final}),
    }
    result = ChainRunResult(
        config=config, chains=chains_summary, trajectory=trajectory.rows,
        model={"vocab_size": denoiser.vocab.size, "parameters": sum(p.numel() for p in denoiser.parameters()),
               "load_seconds": round(ledger.phases["model load"].seconds, 2)},
        final_sequences=[codec.decode(t.tolist()) for t in final],
        start_sequences=[codec.decode(t.tolist()) for t in start], notes=notes,
        environment=provenance(config.model, denoiser), cost=ledger)
    if watch is not None:
        result.semantics = watch.result(temperatures)
    if config.coupling.enabled:
        result.coupling = plan.coupling_result(ledger)
    generator = as_generator(config.chains.seed, "coupling", device=tokens.device)
    if config.rectangle.enabled:
        spec = config.rectangle
        result.rectangle = sections.run("rectangles", lambda: sample_rectangles(
            denoiser, final, pairs_per_context=spec.pairs_per_context, num_tokens=spec.num_tokens,
            max_distance=spec.max_distance, temperature=config.main_temperature, sites=sites, generator=generator,
            chunk_size=CHUNK_ROWS))
    if config.margins.enabled and site_start is not None and site_final is not None:
        result.margins = {"start": site_start, "final": site_final}
    if config.influence.enabled:
        result.influence = sections.run("influence", lambda: measure_influence(denoiser, final, sites, config,
                                                                               generator))
    if config.parallel.enabled:
        result.parallel = sections.run("parallel decoding", lambda: measure_parallel(denoiser, final, sites, config,
                                                                                   generator))
    result.notes += sections.notes
    result.stopped = stopped or sections.stopped
    with ledger.phase("claims"):
        result.claims = run_claims(result)
    return result


REPORT_FORWARDS = 15  # the report and its figures, in bare forwards of the default job (measured: 7 to 8)


def planned_rows(config: RunConfig, num_sites: int) -> tuple[int, int]:
    """``(per_step, after)``: the forward rows of one step of the loop at its start (both chains of every first-round
    pair, the chains among them, and the chains that ride unpaired) and of the sections after it (margins at the start
    and the end, rectangles, influence, the semantics' reference fillings and observations), from the config alone.
    ``after`` is an upper bound of what the sections spend; later rounds of the sequential design add to the loop
    (at most ``coupling.max_rows`` in all)."""
    chains, ladder = config.chains.num_chains, len(config.temperatures)
    pairs = config.coupling.num_pairs if config.coupling.enabled else 0
    per_temperature = chains // ladder
    per_step = ladder * (2 * pairs + max(per_temperature - pairs, 0))
    rectangle = config.rectangle
    after = ((1 + chains) * num_sites if config.margins.enabled else 0)
    after += chains * rectangle.pairs_per_context * (2 * rectangle.num_tokens + 2) if rectangle.enabled else 0
    n = min(config.influence.max_sites, num_sites)
    after += config.influence.num_contexts * n * (1 + config.influence.replacements * (n - 1)) \
        if config.influence.enabled else 0
    if config.parallel.enabled:
        spec, window = config.parallel, min(config.parallel.window, num_sites)
        after += spec.num_contexts * (1 + sum(2 + spec.samples * (n - 1) + 8 * n for n in range(2, window + 1)))
    if config.semantics.enabled:
        after += chains * (config.semantics.reference_samples + 2 + config.run.num_steps // config.semantics.every)
    return per_step, after


def fit_to_budget(config: RunConfig, ledger: CostLedger, seconds: float, *, num_sites: int
                  ) -> tuple[RunConfig, list[str]]:
    """The config cut to fit ``seconds`` at the ledger's bare-forward rate: the sections after the loop and the
    report are reserved first (:func:`planned_rows`), the loop gets the rest, at most ``run.num_steps`` steps of
    its starting rows (an upper bound: pairs that meet leave). A plan that cuts steps says so in a note; the
    deadline stays as the hard stop."""
    assert ledger.bare_forward_seconds is not None and ledger.bare_forward_shape is not None
    per_row = ledger.bare_forward_seconds / ledger.bare_forward_shape[0]
    per_step, after = planned_rows(config, num_sites)
    left = seconds - (after * per_row + REPORT_FORWARDS * ledger.bare_forward_seconds)
    steps = min(config.run.num_steps, max(int(left / (per_step * per_row)), 0))
    if steps >= config.run.num_steps:
        return config, []
    cut = copy.deepcopy(config)
    cut.run.num_steps = max(steps, 1)
    note = (f"--budget: planned {cut.run.num_steps} of {config.run.num_steps} steps to fit {seconds:.0f} s left "
            f"after loading ({per_step} rows a step at {per_row * 1000:.1f} ms a row; {after} rows reserved for the "
            "sections after the loop and the report)")
    return cut, [note]


CHUNK_ROWS = 64  # rows per forward pass of the sections: per-row cost is flat from 8 to 64 rows and grows beyond


class _Sections:
    """Runs the sections after the loop, each charged to its phase, while the deadline allows: a section that the
    deadline or Ctrl-C ends is dropped and the later ones are skipped, with a note."""

    def __init__(self, ledger: CostLedger, deadline: float, stopped: str | None) -> None:
        self.ledger, self.deadline, self.stopped = ledger, deadline, stopped
        self.notes: list[str] = []

    def run(self, name: str, work: Callable[[], SectionT]) -> SectionT | None:
        if self.stopped is not None:
            if not any(name in note for note in self.notes):
                self.notes.append(f"{name}: not measured ({self.stopped})")
            return None
        try:
            with self.ledger.phase(name), forward_deadline(self.deadline - time.perf_counter()):
                return work()
        except OutOfTime:
            self.stopped = "budget: the job's time ran out"
        except KeyboardInterrupt:
            self.stopped = "interrupted"
        self.notes.append(f"{name}: not measured ({self.stopped})")
        return None


class _Plan:
    """The run's rows, one batch and one forward a step: the coupled pairs of every temperature of the ladder (a
    :class:`~mlm_dynamics.sampling.grid.PairGrid` whose cells draw independent streams, so that a witness fitted on
    one temperature's pairs may be tested on another's), planned by a :class:`~.design.SequentialDesign` (rounds up
    to ``coupling.looks``, stopped where decided, within ``coupling.max_rows``); the chains are the ``x`` of each
    temperature's first pairs from the first start sequence, which move on alone after their pair met or stopped,
    until ``run.num_steps``, and chains from other start sequences ride along unpaired. A pair runs on its own clock,
    so a run resumed from a checkpoint is the same run, bit for bit."""

    def __init__(self, config: RunConfig, denoiser: Denoiser, tokens: Tensor, sites: Tensor) -> None:
        self.config = config
        self.notes: list[str] = []
        spec = config.coupling
        if not bool((sites == sites[:1]).all()):
            raise ConfigError("chains.sequences: the start sequences must share their resampled positions (the "
                              "window), as the chains of one temperature are compared")
        temperatures = config.per_chain_temperatures()
        cells = [GridCell(tau, tuple(int(i) for i in sites[0].tolist())) for tau in config.temperatures]
        first = spec.num_pairs if spec.enabled else 0
        looks = (first, *spec.looks) if spec.enabled else (0,)
        capacity = max((first, *spec.looks)) if spec.enabled else 0
        same = (tokens == tokens[:1]).all(1).tolist()
        keep, rows, companion_cells = [0] * len(cells), [], []
        companions: list[Tensor] = []
        for chain, tau in enumerate(temperatures):
            cell = config.temperatures.index(tau)
            if same[chain] and keep[cell] < first:  # the x of the cell's next first-round pair
                rows.append(cell * capacity + keep[cell])
                keep[cell] += 1
            else:
                rows.append(len(cells) * capacity + len(companions))
                companions.append(tokens[chain])
                companion_cells.append(cell)
        grid = pair_grid(denoiser, tokens[:1], cells, pairs=first, starts=["natural-random"], seed=config.chains.seed,
                         capacity=capacity, common_random_numbers=False, keep_moving=keep,
                         companions=torch.stack(companions) if companions else None, companion_cells=companion_cells,
                         sampler=to_dict(config.sampler))
        self.chain_rows = torch.tensor(rows, device=tokens.device)
        self.starts = (grid.state.x.tokens.clone(), grid.state.y.clone())  # waiting pairs have not moved yet
        horizon = spec.witness_step if spec.enabled else 0
        if spec.enabled and spec.witness_steps is not None and spec.witness_steps > horizon:
            self.notes.append(f"coupling.witness_steps {spec.witness_steps} cut to coupling.max_steps {horizon}: a "
                              "pair is followed no further")
        self.design = SequentialDesign(grid, DesignPlan(looks=looks, witness_steps=(horizon,)
                                                        if horizon else (), max_steps=spec.max_steps,
                                                        cross_fit=True, max_rows=spec.max_rows),
                                       keep_rows=self._chain_rows_left)

    @property
    def state(self) -> CoupledState:
        """The rows' state (pairs, chains and companions)."""
        return self.design.grid.state

    def _chain_rows_left(self) -> int:
        """Rows the chains will still spend moving on alone, at most (reserved from the pairs' budget)."""
        return max(self.config.run.num_steps - self.state.x.step, 0) * len(self.chain_rows)

    def chain_tokens(self) -> Tensor:
        """``[C, L]`` the chains' tokens now (a copy)."""
        return self.state.x.tokens[self.chain_rows]

    def chain_view(self) -> ChainState:
        """The chains as a :class:`ChainState` (copies of their rows)."""
        x, rows = self.state.x, self.chain_rows
        return ChainState(tokens=x.tokens[rows], sites=x.sites[rows], generator=x.generator, step=x.step,
                          counts=None if x.counts is None else x.counts[rows])

    def live(self) -> bool:
        """Whether another step has rows to serve: the chains up to ``run.num_steps``, the pairs while the design
        runs them."""
        return self.state.x.step < self.config.run.num_steps or self.design.live()

    def step(self) -> StepRecord:
        """One forward over every live row; from ``run.num_steps`` on the chains stand still (a chain still in its
        open pair moves on with it; a run resumed to more steps moves them again)."""
        assert self.state.freeze is not None
        self.state.freeze[self.chain_rows] = self.state.x.step >= self.config.run.num_steps
        return self.design.step()

    def state_dict(self) -> dict[str, Any]:
        """The rows and the design, for a checkpoint."""
        return {"pairs": self.state.state_dict(), "design": self.design.state_dict()}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`."""
        self.design.grid.state = CoupledState.from_state_dict(saved["pairs"], self.state.x.tokens.device)
        self.design.load_state_dict(saved["design"])

    def coupling_result(self, ledger: CostLedger) -> CouplingResult:
        """Meeting times, witness bounds and both sides per temperature at the look each reached."""
        design, ladder = self.design, self.config.temperatures
        decided = design.brackets()
        natural = [design.natural(cell) for cell in range(len(ladder))]
        rows = torch.cat(natural)
        state = self.state
        return CouplingResult(times={tau: design.meeting(c) for c, tau in enumerate(ladder)},
                              hamming_start=(self.starts[0][rows] != self.starts[1][rows]).sum(1).tolist(),
                              hamming_end=(state.x.tokens[rows] != state.y[rows]).sum(1).tolist(),
                              seconds=round(ledger.phases["chains and pairs"].seconds, 2),
                              rows=sum(c.rows for c in design.cells),
                              lower={tau: bound for c, tau in enumerate(ladder)
                                     if (bound := design.lower_bound(c)) is not None},
                              decided=dict(zip(ladder, decided, strict=True)),
                              rows_by_temperature={tau: design.cells[c].rows for c, tau in enumerate(ladder)})


def _progress(plan: _Plan, enabled: bool) -> Callable[[int | None], None]:
    """A tqdm bar of the loop: the forward rows spent of the design's budget, the temperatures decided and the look
    each is at (``None`` closes it)."""
    if not enabled:
        return lambda step: None
    from tqdm.auto import tqdm

    total = plan.config.coupling.max_rows if plan.config.coupling.enabled else None
    bar = tqdm(total=total, desc="chains and pairs", unit="row", disable=None)  # None: on a terminal only

    def update(step: int | None) -> None:
        if step is None:
            bar.close()
            return
        bar.update(int(plan.state.rows) - bar.n)
        bar.set_postfix(step=step, **{k: v for k, v in plan.design.progress().items() if k != "rows"})

    return update


def run_claims(result: ChainRunResult) -> ClaimsReport:
    """The paper's claims on what the run measured: one window length, so the scaling claims stay inconclusive."""
    num_sites = int(result.chains["num_sites"])
    times = result.coupling.times if result.coupling is not None else {}
    trapped = ({row["temperature"]: row["trapped_fraction"] for row in result.semantics.by_temperature()}
               if result.semantics is not None else {})
    evidence = Evidence(times={(tau, num_sites): t for tau, t in times.items()}, rectangles=result.rectangle,
                        influence=result.influence, trapped=trapped, seed=result.config.chains.seed)
    return assess_claims(evidence)


TRAJECTORY_FIELDS = ("step", "chain", "hamming_to_start", "sequence")


class _Trajectory:
    """The recorded rows: in memory without an output directory, else appended to ``trajectory.csv`` there
    (:class:`~mlm_dynamics._io.AppendLog`; a checkpoint stores its length)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.rows: list[dict[str, Any]] = []
        self.log: AppendLog | None = None

    def start(self) -> None:
        if self.path is not None:
            self.log = AppendLog(self.path, header=_csv(TRAJECTORY_FIELDS, []).encode())

    def resume(self, length: int) -> None:
        assert self.path is not None
        self.log = AppendLog(self.path, resume_at=length)

    def add(self, rows: list[dict[str, Any]]) -> None:
        if self.log is None:
            self.rows += rows
        else:
            self.log.append(_csv(TRAJECTORY_FIELDS, rows, header=False).encode())

    def sync(self) -> int:
        return 0 if self.log is None else self.log.sync()


def _csv(fields: Sequence[str], rows: list[dict[str, Any]], *, header: bool = True) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(fields), lineterminator="\n")
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def _trajectory_rows(step: int, tokens: Tensor, start: Tensor, codec: Codec) -> list[dict[str, Any]]:
    hamming = (tokens != start).sum(1).tolist()
    return [{"step": step, "chain": chain, "hamming_to_start": int(hamming[chain]),
             "sequence": codec.decode(tokens[chain].tolist())} for chain in range(tokens.shape[0])]


def measure_parallel(denoiser: Denoiser, tokens: Tensor, sites: Tensor, config: RunConfig,
                     generator: torch.Generator) -> ConfidenceProfile:
    """Parallel decoding on the first ``parallel.num_contexts`` final states: a window of ``parallel.window``
    consecutive sites at a random offset per row, masked, profiled at the main temperature."""
    spec = config.parallel
    rows, row_sites = tokens[: spec.num_contexts], sites[: spec.num_contexts].to(tokens.device)
    window = min(spec.window, row_sites.shape[1])
    counts = torch.full((len(rows),), row_sites.shape[1], device=rows.device)
    candidates = random_window(row_sites, counts, window, generator)
    return confidence_profile(denoiser, rows, candidates, max_k=window, temperature=config.main_temperature,
                              samples=spec.samples, level=1 - 0.05 / len(rows), generator=generator)


def measure_influence(denoiser: Denoiser, tokens: Tensor, sites: Tensor, config: RunConfig,
                      generator: torch.Generator) -> InfluenceEstimate:
    """Influence among the first ``influence.max_sites`` resampled sites (sums over those sites: lower estimates)."""
    spec = config.influence
    return estimate_influence(denoiser, tokens[: spec.num_contexts], temperatures=config.temperatures,
                              sites=sites[0, : spec.max_sites], replacements=spec.replacements, generator=generator,
                              chunk_size=CHUNK_ROWS)


class _Semantics:
    """A :class:`~mlm_dynamics.tracking.ChainMonitor` in hidden-state space pooled over the resampled sites, with
    radii calibrated to the distance from the start to random fillings, plus every observation's embeddings and
    basins for the landscape: in memory, and with an output directory appended to ``semantics.bin`` (one record of
    step, basins and float32 embeddings per observation), so a checkpoint stores that file's length, not them."""

    def __init__(self, denoiser: Denoiser, state: ChainState, config: RunConfig, ledger: CostLedger) -> None:
        self.ledger = ledger
        if not isinstance(denoiser, MaskedLMDenoiser):
            raise ConfigError("semantics needs a masked LM's hidden states; set semantics.enabled=false")
        spec = config.semantics
        mask = resampled_mask(state)
        hidden = HiddenStateEmbedder(denoiser)

        def embedder(tokens: Tensor) -> Tensor:
            return hidden(tokens, mask)

        start = state.tokens.clone()
        generator = as_generator(config.chains.seed, "drift-scale", device=start.device)
        with ledger.phase("semantics"):
            self.scale = float(random_fill_scale(random_fill_distances(
                embedder, denoiser, start, state.sites, samples=spec.reference_samples, generator=generator,
                site_counts=state.counts)))
        self.monitor = ChainMonitor(embedder, every=spec.every,
                                    thresholds=[t * self.scale for t in spec.thresholds],
                                    traps=TrapTracker(radius=spec.trap_radius * self.scale, dwell=spec.dwell,
                                                      basin_radius=spec.basin_radius * self.scale),
                                    temperature=config.main_temperature, prefix="", keep_history=1)
        with ledger.phase("semantics"):
            self.monitor.start(state)
        assert self.monitor.drift.reference is not None  # set by start
        self.embeddings: list[Tensor] = [self.monitor.drift.reference.float().cpu()]
        self.basins: list[Tensor] = [torch.full((start.shape[0],), -1)]
        self.steps: list[int] = [state.step]
        self.records: AppendLog | None = None

    def log_to(self, path: Path) -> None:
        """Append every observation (the start's too) to ``path``."""
        self.records = AppendLog(path)
        for step, basins, embeddings in zip(self.steps, self.basins, self.embeddings, strict=True):
            self.records.append(self._record(step, basins, embeddings))

    @staticmethod
    def _record(step: int, basins: Tensor, embeddings: Tensor) -> bytes:
        return (torch.tensor([step], dtype=torch.int64).numpy().tobytes() + basins.long().numpy().tobytes()
                + embeddings.float().numpy().tobytes())

    def observe(self, state: ChainState) -> None:
        with self.ledger.phase("semantics"):
            observed = self.monitor.observe(state)
        if observed is None:
            return
        traps = self.monitor.traps
        assert traps is not None and self.monitor.drift.latest_embeddings is not None
        embeddings = self.monitor.drift.latest_embeddings.float().cpu()
        basins = torch.tensor([-1 if e is None else traps.events[e].basin for e in traps.open_event])
        self.embeddings.append(embeddings)
        self.basins.append(basins)
        self.steps.append(state.step)
        if self.records is not None:
            self.records.append(self._record(state.step, basins, embeddings))

    def state_dict(self) -> dict[str, Any]:
        assert self.records is not None, "checkpoints need an output directory"
        return {"monitor": self.monitor.state_dict(), "records_bytes": self.records.sync()}

    def resume(self, state: dict[str, Any], path: Path) -> None:
        """Continue from a checkpoint: the monitor from ``state``, the observations read back from ``path`` up to
        the length the checkpoint stored."""
        self.monitor.load_state_dict(state["monitor"])
        length = int(state["records_bytes"])
        self.records = AppendLog(path, resume_at=length)
        chains, width = self.embeddings[0].shape
        size = 8 * (1 + chains) + 4 * chains * width
        if length % size:
            raise ValueError(f"{path}: {length} bytes is not a whole number of {size}-byte observations")
        raw = path.read_bytes()[:length]
        self.steps, self.basins, self.embeddings = [], [], []
        for offset in range(0, length, size):
            ints = torch.frombuffer(bytearray(raw[offset:offset + 8 * (1 + chains)]), dtype=torch.int64)
            floats = torch.frombuffer(bytearray(raw[offset + 8 * (1 + chains):offset + size]), dtype=torch.float32)
            self.steps.append(int(ints[0]))
            self.basins.append(ints[1:].clone())
            self.embeddings.append(floats.view(chains, width).clone())

    def result(self, temperatures: list[float]) -> SemanticsResult:
        history = self.monitor.history[-1] if self.monitor.history else {}
        traps = self.monitor.traps
        assert traps is not None
        embeddings = torch.stack(self.embeddings)
        return SemanticsResult(scale=self.scale, steps=list(self.steps), embeddings=embeddings,
                               basins=torch.stack(self.basins), drift=cosine_distance(embeddings, embeddings[0]),
                               metrics={k: float(v) for k, v in history.items() if k != "step"},
                               temperatures=temperatures,
                               events=list(traps.events))


__all__ = ["TRAJECTORY_FIELDS", "ChainRunResult", "CouplingResult", "SemanticsResult",
           "measure_influence", "measure_parallel", "run_chains", "run_claims"]
