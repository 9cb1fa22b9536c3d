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
from ..diagnostics.meeting import MeetingTimes, meeting_times_of
from ..diagnostics.parallel import ConfidenceProfile, confidence_profile, random_window
from ..diagnostics.rectangle import RectangleReport, sample_rectangles
from ..diagnostics.witness import MixingLowerBound, learned_witness, witness_bound
from ..embedders.base import HiddenStateEmbedder, cosine_distance
from ..models.base import Denoiser, OutOfTime, forward_deadline
from ..models.cost import CostLedger
from ..models.huggingface import MaskedLMDenoiser
from ..sampling.coupling import CoupledGlauberChains, CoupledState, randomize_sites, resampled_mask
from ..sampling.glauber import ChainState, GlauberSampler
from ..tracking.drift import random_fill_distances, random_fill_scale
from ..tracking.monitor import ChainMonitor
from ..tracking.traps import TrapEvent, TrapTracker, trap_statistics
from .checkpoint import fingerprint, load_checkpoint, restoring, save_checkpoint
from .common import Codec, build_model, crop_context, job_deadline, provenance, start_tokens, window_sites
from .config import ConfigError, RunConfig, to_dict

SectionT = TypeVar("SectionT")

@dataclass
class CouplingResult:
    """Meeting times of maximally coupled pairs (start sequence vs random tokens) per temperature of the ladder, and
    the pairs' Hamming distances at the start and at the end (0 once met); ``seconds`` of the loop that served them
    with the chains, ``rows`` the forward rows spent on the pairs beyond the chains' own. ``lower``: the paired
    witness bound per temperature at ``coupling.witness_steps`` (the certified slow side; the learned witness
    fitted on the other temperatures' pairs); ``witness_rows``: the
    forward rows of the pairs added for it alone, per temperature (part of ``rows``)."""

    times: dict[float, MeetingTimes]
    hamming_start: list[int]
    hamming_end: list[int]
    seconds: float
    rows: int = 0
    lower: dict[float, MixingLowerBound] = field(default_factory=dict)
    witness_rows: dict[float, int] = field(default_factory=dict)

    def brackets(self) -> dict[float, MixingBracket]:
        """Both sides per temperature (:func:`~mlm_dynamics.diagnostics.bracket.mixing_bracket`)."""
        return {tau: mixing_bracket(times, self.lower.get(tau)) for tau, times in self.times.items()}


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


def run_chains(config: RunConfig, out_dir: Path | None = None, *, resume: bool = False,
               budget: float | None = None, ledger: CostLedger | None = None) -> ChainRunResult:
    """Run the job described by ``config`` (validated); checkpoints go to ``out_dir/checkpoint.pt``.

    The plan, served by one loop: every step is one forward pass over the rows still live -- the chains, and the
    coupled pairs' partner chains until they meet (each pair's ``x`` is one of the chains where the temperature has
    enough of them), with pairs that can no longer meet within ``coupling.max_steps`` stopped exactly
    (:meth:`~mlm_dynamics.sampling.coupling.CoupledGlauberChains.stop_hopeless`) --, then the sections that read the
    final states (rectangles, margins, influence). Every phase is charged to :attr:`ChainRunResult.cost`.

    ``budget``: seconds for the whole job (model load included, counted from ``ledger``'s start: pass one made at
    the process start to count the imports too); the loop stops at the deadline (the chains end at
    the step reached, open pairs are censored there), later sections that do not fit are skipped, and the result says
    so in :attr:`ChainRunResult.stopped` and its notes. Ctrl-C does the same (``stopped`` starts with
    ``interrupted``), so a report of what was measured can still be written.

    With ``resume=True`` the chains, their RNG and the report's accumulators continue from the checkpoint, which
    must come from the same model, chains and sampler config and the same start state (verified), up to
    ``run.num_steps``; the result is bit-identical to an uninterrupted run.
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
    chains = plan.chains
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
        if saved_step > num_steps:
            raise ConfigError(f"run.num_steps: {num_steps} is below step {saved_step}, where the checkpoint "
                              f"{checkpoint_path} stopped; resume with run.num_steps >= {saved_step}")
        with restoring(checkpoint_path):
            state, progress = CoupledState.from_state_dict(saved["pairs"], tokens.device), saved["progress"]
            plan.state = state
            plan.load_witness_state(progress.get("witness"))
            trajectory.resume(int(progress["trajectory_bytes"]))
            if watch is not None:
                watch.resume(progress["semantics"], out_dir / "semantics.bin")
    else:
        trajectory.start()
        if watch is not None and out_dir is not None:
            watch.log_to(out_dir / "semantics.bin")

    first_step = state.x.step
    stopped: str | None = None
    with ledger.phase("chains and pairs"):
        try:
            with forward_deadline(deadline - time.perf_counter()):
                while plan.live():
                    record = chains.step_record(state)
                    step = record.step
                    moved = record.new_tokens[:num_chains] != record.old_tokens[:num_chains]
                    progress["changed_steps"] += moved.any(1).float()
                    progress["log_prob_sum"] += float(record.log_prob[:num_chains].mean())
                    progress["changes"] += ((sites[:, :, None] == record.positions[:num_chains, None, :])
                                            & moved[:, None, :]).any(2)
                    if step % record_every == 0:
                        trajectory.add(_trajectory_rows(step, state.x.tokens[:num_chains], start, codec))
                    if watch is not None:
                        watch.observe(plan.chain_view())
                    plan.after_step()
                    if every and checkpoint_path is not None and (step % every == 0 or step == num_steps):
                        progress["trajectory_bytes"] = trajectory.sync()  # the records hold what the checkpoint holds
                        if watch is not None:
                            progress["semantics"] = watch.state_dict()
                        progress["witness"] = plan.witness_state()
                        save_checkpoint(checkpoint_path, {"pairs": state.state_dict(), "progress": progress},
                                        fingerprints=fingerprints, step=step)
        except OutOfTime:
            stopped = f"budget: the {budget:g} s ran out at step {state.x.step}"
        except KeyboardInterrupt:
            stopped = f"interrupted at step {state.x.step}"
    steps_done = state.x.step
    final = state.x.tokens[:num_chains].clone()
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
    """``(per_step, after)``: the forward rows of one step of the loop at its start (every chain, the partner of
    each paired chain and both chains of each extra pair and of each pair added for the witness test, before any
    meets) and of the sections after it (margins at the start and the end, rectangles, influence, the semantics'
    reference fillings and observations), from the config alone. Both are upper bounds of what the run spends."""
    chains, ladder = config.chains.num_chains, len(config.temperatures)
    pairs = config.coupling.num_pairs if config.coupling.enabled else 0
    per_temperature = chains // ladder
    per_step = chains + ladder * (min(pairs, per_temperature) + 2 * max(pairs - per_temperature, 0))
    if config.coupling.enabled and config.coupling.witness_step:  # the pairs added for the witness test
        per_step += 2 * sum(max(config.coupling.witness_pairs_at(tau) - pairs, 0) for tau in config.temperatures)
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
    """The run's rows as one :class:`~mlm_dynamics.sampling.coupling.CoupledState`: rows ``[0, C)`` are the chains
    (each the ``x`` of a coupled pair where its temperature still needs pairs, its partner a uniformly random filling
    of the sites; else a partner equal to it, which costs nothing), rows ``[C, C + E)`` extra pairs from the first
    start sequence where a temperature has fewer chains than ``coupling.num_pairs``. Chains move on after their pair
    met until ``run.num_steps``; extra pairs leave the batch when they meet; open pairs stop exactly when they can no
    longer meet within ``coupling.max_steps``, and are censored there. Rows after those: the pairs added for the
    witness test at ``coupling.witness_temperatures``, frozen when met and stopped at the witness step, left out of
    the meeting times; the coupled pairs at those temperatures stop there too, censored at it. What a step serves
    depends on the step and the state only, so a run resumed to a larger ``run.num_steps`` is the longer run, bit
    for bit."""

    def __init__(self, config: RunConfig, denoiser: Denoiser, tokens: Tensor, sites: Tensor) -> None:
        self.config = config
        temperatures = config.per_chain_temperatures()
        num_chains = tokens.shape[0]
        pairs = config.coupling.num_pairs if config.coupling.enabled else 0
        paired, extra_temperatures = [], []
        for tau in config.temperatures:
            rows = [c for c, t in enumerate(temperatures) if t == tau]
            paired += rows[:pairs]
            extra_temperatures += [tau] * max(pairs - len(rows), 0)
        spec = config.coupling
        budget, num_sites = min(spec.max_steps, config.run.num_steps), sites.shape[1]
        self.witness_step = max(min(spec.witness_step, budget - num_sites), 0) if spec.enabled else 0
        self.notes: list[str] = []
        if spec.enabled and spec.witness_steps is not None and self.witness_step < spec.witness_steps:
            self.notes.append(f"coupling.witness_steps {spec.witness_steps} cut to {self.witness_step}: the test "
                              f"must come {num_sites} steps (the sites) before the pairs' budget {budget}, where "
                              "pairs that can no longer meet stop" + ("" if self.witness_step else " (no test)"))
        off_ladder = sorted(set(spec.witness_temperatures) - set(config.temperatures))
        if spec.enabled and off_ladder:
            self.notes.append(f"coupling.witness_temperatures {off_ladder} are not on the ladder "
                              f"{config.temperatures}: no pairs added there")
        witness_temperatures = [tau for tau in config.temperatures
                                for _ in range(max(spec.witness_pairs_at(tau) - pairs, 0))] if self.witness_step else []
        extra = len(extra_temperatures)
        x0 = torch.cat([tokens, tokens[:1].expand(extra + len(witness_temperatures), -1)])
        row_sites = torch.cat([sites, sites[:1].expand(extra + len(witness_temperatures), -1)])
        measured = torch.zeros(len(x0), dtype=torch.bool, device=tokens.device)
        measured[paired] = True
        measured[num_chains:num_chains + extra] = True
        self.witness_only = torch.zeros_like(measured)
        self.witness_only[num_chains + extra:] = True
        row_temperatures = temperatures + extra_temperatures + witness_temperatures
        at_witness = torch.tensor([tau in spec.witness_temperatures for tau in row_temperatures], dtype=torch.bool,
                                  device=tokens.device)
        self.stop_at_witness = (measured | self.witness_only) & at_witness if self.witness_step else \
            torch.zeros_like(measured)
        generator = as_generator(config.chains.seed, "coupling", device=tokens.device)
        filled = randomize_sites(denoiser, x0, row_sites, generator)
        y0 = torch.where((measured | self.witness_only)[:, None], filled, x0)
        ladder = torch.tensor(temperatures + extra_temperatures + witness_temperatures, dtype=torch.float64)
        sampler = GlauberSampler(denoiser, ladder, **to_dict(config.sampler))
        self.chains = CoupledGlauberChains(sampler)
        self.state = self.chains.init_state(x0, y0, generator=config.chains.seed, sites=row_sites)
        self.state.freeze = torch.arange(len(x0), device=tokens.device) >= num_chains
        self.measured, self.num_chains = measured, num_chains
        self.row_temperatures = row_temperatures
        self.hamming_start = (x0 != y0).sum(1)[measured].tolist()
        self.witness_states: Tensor | None = None  # [2, rows, L] x and y at the witness step, once reached
        self.witness_rows = torch.zeros(len(x0), dtype=torch.long)
        self.budget = min(config.coupling.max_steps, config.run.num_steps)
        if self.budget != config.coupling.max_steps and pairs:
            self.notes.append(f"coupling.max_steps {config.coupling.max_steps} is above run.num_steps "
                              f"{config.run.num_steps}: the pairs ride on the chains' steps and were followed for "
                              f"{self.budget}")

    def chain_view(self) -> ChainState:
        """The chains (rows ``[0, C)``) as a :class:`ChainState` sharing the pairs' tensors."""
        x, c = self.state.x, self.num_chains
        return ChainState(tokens=x.tokens[:c], sites=x.sites[:c], generator=x.generator, step=x.step,
                          counts=None if x.counts is None else x.counts[:c])

    def live(self) -> bool:
        """Whether another step has rows to serve: the chains run ``run.num_steps`` (>= ``coupling.max_steps``)."""
        return self.state.x.step < self.config.run.num_steps

    def after_step(self) -> None:
        """At the witness step, record each pair's two chains (a met pair's ``y`` is its ``x``: they moved as one
        since) and stop the pairs at the witness temperatures (the chains among their first chains move on); then
        stop the open pairs that cannot meet within the pairs' budget, and at that budget every open pair."""
        state = self.state
        if self.config.coupling.enabled:
            served = self.witness_only & (state.open | (state.met_at == state.x.step))
            self.witness_rows += 2 * served.long().cpu()
            if state.x.step == self.witness_step:
                met = (state.met_at >= 0)[:, None]
                self.witness_states = torch.stack([state.x.tokens, torch.where(met, state.x.tokens, state.y)]).cpu()
                state.stop(self.stop_at_witness)
            self.chains.stop_hopeless(state, self.budget)
            if state.x.step >= self.budget:
                state.stop(state.open)

    def witness_state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the witness test."""
        return {"states": self.witness_states, "rows": self.witness_rows.clone()}

    def load_witness_state(self, saved: dict[str, Any] | None) -> None:
        """Continue the witness test from :meth:`witness_state` (None: a checkpoint of a run without one)."""
        if saved is not None:
            self.witness_states, self.witness_rows = saved["states"], saved["rows"].clone()

    def lower_bounds(self) -> dict[float, MixingLowerBound]:
        """The paired witness bound per temperature at the witness step, on every pair tested there (none before
        the loop reached it), with the learned witness (agreement profile) fitted on the other temperatures' pairs
        that had not met: chains independent of those tested, so the witness is fixed before them (cross-fitting,
        no pair spent on it)."""
        if self.witness_states is None:
            return {}
        tested = (self.measured | self.witness_only).cpu()
        out = {}
        for tau in self.config.temperatures:
            here = torch.tensor([t == tau for t in self.row_temperatures])
            rows, others = tested & here, tested & ~here
            if int(rows.sum()) >= 2 and bool(others.any()):
                witness = learned_witness(self.witness_states[0, others], self.witness_states[1, others])
                values = [witness(side[rows])[None, None] for side in self.witness_states]
                out[tau] = witness_bound(values[0], values[1], times=[self.witness_step], binary=[witness.binary],
                                         names=[witness.name], paired=True)
        return out

    def coupling_result(self, ledger: CostLedger) -> CouplingResult:
        """Meeting times per temperature of the measured pairs, censored at the budget or where they were
        stopped."""
        pooled = meeting_times_of(self.state)
        budget = self.budget
        taus = [t for t, m in zip(self.row_temperatures, self.measured.tolist(), strict=True) if m]
        times, censored = pooled.times[self.measured], pooled.censored[self.measured]
        reached = budget if pooled.max_steps is None else min(budget, int(pooled.max_steps))
        stops = self.witness_step if self.witness_step and self.state.x.step >= self.witness_step else reached
        by_temperature = {tau: MeetingTimes(times=times[torch.tensor([t == tau for t in taus])],
                                            censored=censored[torch.tensor([t == tau for t in taus])],
                                            max_steps=stops if tau in self.config.coupling.witness_temperatures
                                            else reached)
                          for tau in self.config.temperatures}
        end = (self.state.x.tokens != self.state.y).sum(1)[self.measured].tolist()
        chain_rows = self.num_chains * self.state.x.step
        witness_rows = {tau: int(self.witness_rows[torch.tensor([t == tau for t in self.row_temperatures])].sum())
                        for tau in self.config.temperatures}
        return CouplingResult(times=by_temperature, hamming_start=self.hamming_start, hamming_end=end,
                              seconds=round(ledger.phases["chains and pairs"].seconds, 2),
                              rows=self.state.rows - chain_rows, lower=self.lower_bounds(),
                              witness_rows=witness_rows)


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
