"""The ``run`` job: Glauber chains on one model, with semantics, coupling, rectangle, margin and influence sections.

``run_chains(config, out_dir)`` loads the model, steps the chains (checkpointing every ``run.checkpoint_every``
steps), then measures the sections and returns a :class:`ChainRunResult`; :mod:`mlm_dynamics.report` writes it.
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .._io import AppendLog
from .._random import as_generator
from ..diagnostics.claims import ClaimsReport, Evidence, assess_claims
from ..diagnostics.influence import InfluenceEstimate, estimate_influence
from ..diagnostics.margins import LocalMargins, local_margins
from ..diagnostics.meeting import MeetingTimes, meeting_times_of
from ..diagnostics.rectangle import RectangleReport, sample_rectangles
from ..embedders.base import HiddenStateEmbedder, cosine_distance
from ..models.base import Denoiser
from ..models.huggingface import MaskedLMDenoiser
from ..sampling.coupling import CoupledGlauberChains, randomize_sites, resampled_mask
from ..sampling.energy import PseudoLogLikelihoodEnergy
from ..sampling.glauber import ChainState, GlauberSampler
from ..tracking.drift import random_fill_distances, random_fill_scale
from ..tracking.monitor import ChainMonitor
from ..tracking.traps import TrapEvent, TrapTracker, trap_statistics
from .checkpoint import RunInterrupted, fingerprint, load_checkpoint, restoring, save_checkpoint
from .common import Codec, build_model, crop_context, provenance, start_tokens, window_sites
from .config import ConfigError, RunConfig, to_dict


@dataclass
class CouplingResult:
    """Meeting times of maximally coupled pairs (start sequence vs random tokens) per temperature of the ladder, and
    the pairs' Hamming distances at the start and at the end (0 once met)."""

    times: dict[float, MeetingTimes]
    hamming_start: list[int]
    hamming_end: list[int]
    seconds: float
    rows: int = 0


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
    """Everything the ``run`` job measured; :func:`mlm_dynamics.report.run_report` turns it into JSON."""

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
    notes: list[str] = field(default_factory=list)
    claims: ClaimsReport | None = None
    environment: dict[str, str] = field(default_factory=dict)


def run_chains(config: RunConfig, out_dir: Path | None = None, *, resume: bool = False) -> ChainRunResult:
    """Run the job described by ``config`` (validated); checkpoints go to ``out_dir/checkpoint.pt``.

    With ``resume=True`` the chains, their RNG and the report's accumulators continue from the checkpoint, which
    must come from the same model, chains and sampler config and the same start state (verified), up to
    ``run.num_steps``; the result is bit-identical to an uninterrupted run.
    """
    config.validate()
    if resume and out_dir is None:
        raise ValueError("out_dir is required for --resume")
    t0 = time.perf_counter()
    denoiser, codec = build_model(config.model)
    load_seconds = time.perf_counter() - t0
    tokens = start_tokens(config.chains.sequences, config.chains.num_chains, codec,
                          max_length=denoiser.vocab.max_length).to(denoiser.device)
    window, notes = config.chains.window, []
    if config.chains.crop is not None:
        assert window is not None  # checked by validate
        tokens, first, note = crop_context(denoiser, tokens, window[0], window[1], config.chains.crop,
                                          key="chains.crop")
        window, notes = [first, first + window[1] - window[0]], [note]
    sites = window_sites(denoiser, tokens, window)
    temperatures = config.per_chain_temperatures()
    sampler = GlauberSampler(denoiser, torch.tensor(temperatures, dtype=torch.float64), **to_dict(config.sampler))
    state = sampler.init_state(tokens, generator=config.chains.seed, sites=sites)
    start = state.tokens.clone()
    pll = PseudoLogLikelihoodEnergy(denoiser, sites=sites)
    start_energy = pll(start)
    checkpoint_path = None if out_dir is None else out_dir / "checkpoint.pt"
    fingerprints = {"config": fingerprint(config.resume_fingerprint()), "start_state": fingerprint([start, sites])}
    progress: dict[str, Any] = {"changes": torch.zeros(sites.shape, dtype=torch.long, device=tokens.device),
                                "changed_steps": torch.zeros(tokens.shape[0], device=tokens.device),
                                "log_prob_sum": 0.0}
    generator = as_generator(config.chains.seed, "coupling", device=tokens.device)
    watch = _Semantics(denoiser, state, config) if config.semantics.enabled else None
    num_steps, record_every, every = config.run.num_steps, config.run.record_every, config.run.checkpoint_every
    trajectory = _Trajectory(None if out_dir is None else out_dir / "trajectory.csv")
    if resume:
        assert checkpoint_path is not None and out_dir is not None
        saved, saved_step = load_checkpoint(checkpoint_path, fingerprints=fingerprints, map_location=tokens.device)
        if saved_step > num_steps:
            raise ConfigError(f"run.num_steps: {num_steps} is below step {saved_step}, where the checkpoint "
                              f"{checkpoint_path} stopped; resume with run.num_steps >= {saved_step}")
        with restoring(checkpoint_path):
            state, progress = ChainState.from_state_dict(saved["chains"], tokens.device), saved["progress"]
            trajectory.resume(int(progress["trajectory_bytes"]))
            if watch is not None:
                watch.resume(progress["semantics"], out_dir / "semantics.bin")
    else:
        trajectory.start()
        if watch is not None and out_dir is not None:
            watch.log_to(out_dir / "semantics.bin")

    first_step = state.step
    t1 = time.perf_counter()
    try:
        for record in sampler.run(state, num_steps - state.step):
            moved = record.new_tokens != record.old_tokens
            progress["changed_steps"] += moved.any(1).float()
            progress["log_prob_sum"] += float(record.log_prob.mean())
            progress["changes"] += ((sites[:, :, None] == record.positions[:, None, :]) & moved[:, None, :]).any(2)
            if record.step % record_every == 0:
                trajectory.add(_trajectory_rows(record.step, state.tokens, start, codec))
            if watch is not None:
                watch.observe(state)
            if every and checkpoint_path is not None and (record.step % every == 0 or record.step == num_steps):
                progress["trajectory_bytes"] = trajectory.sync()  # the records hold what the checkpoint holds
                if watch is not None:
                    progress["semantics"] = watch.state_dict()
                save_checkpoint(checkpoint_path, {"chains": state.state_dict(), "progress": progress},
                                fingerprints=fingerprints, step=record.step)
    except KeyboardInterrupt:
        raise RunInterrupted(f" at step {state.step}") from None
    if num_steps % record_every:  # the final state, off the recording grid: after every checkpoint, so a longer
        trajectory.add(_trajectory_rows(num_steps, state.tokens, start, codec))  # resumed run does not keep it
    trajectory.sync()
    chain_seconds = time.perf_counter() - t1
    end_energy = pll(state.tokens)
    hamming = (state.tokens != start).sum(1).float()
    by_temperature = []
    for tau in sorted(set(temperatures)):
        rows = torch.tensor([t == tau for t in temperatures], device=tokens.device)
        by_temperature.append({"temperature": tau, "change_rate": float(progress["changed_steps"][rows].mean()
                                                                         / num_steps),
                               "hamming_to_start_mean": float(hamming[rows].mean())})
    chains = {
        "num_chains": tokens.shape[0], "num_sites": sites.shape[1], "num_steps": num_steps,
        "by_temperature": by_temperature,
        "steps_per_second": round((num_steps - first_step) / max(chain_seconds, 1e-9), 3),
        "change_rate": float(progress["changed_steps"].mean() / num_steps),
        "mean_log_prob_of_proposal": progress["log_prob_sum"] / num_steps,
        "hamming_to_start_mean": float(hamming.mean()), "hamming_to_start_max": int(hamming.max()),
        "site_change_counts": progress["changes"].sum(0).tolist(),
        "pll_energy_start_mean": float(start_energy.mean()), "pll_energy_end_mean": float(end_energy.mean()),
        "unique_final_sequences": len({codec.decode(t.tolist()) for t in state.tokens}),
    }
    result = ChainRunResult(
        config=config, chains=chains, trajectory=trajectory.rows,
        model={"vocab_size": denoiser.vocab.size, "parameters": sum(p.numel() for p in denoiser.parameters()),
               "load_seconds": round(load_seconds, 2)},
        final_sequences=[codec.decode(t.tolist()) for t in state.tokens],
        start_sequences=[codec.decode(t.tolist()) for t in start], notes=notes,
        environment=provenance(config.model, denoiser))
    if watch is not None:
        result.semantics = watch.result(temperatures)
    if config.coupling.enabled:
        result.coupling = measure_coupling(denoiser, config, start, sites, config.temperatures, generator)
    if config.rectangle.enabled:
        spec = config.rectangle
        result.rectangle = sample_rectangles(denoiser, state.tokens, pairs_per_context=spec.pairs_per_context,
                                             num_tokens=spec.num_tokens, max_distance=spec.max_distance,
                                             temperature=config.main_temperature, sites=sites,
                                             generator=generator)
    if config.margins.enabled:
        result.margins = {name: local_margins(denoiser, t, sites=sites)
                          for name, t in (("start", start), ("final", state.tokens))}
    if config.influence.enabled:
        result.influence = measure_influence(denoiser, state.tokens, sites, config, generator)
    result.claims = run_claims(result)
    return result


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


def measure_coupling(denoiser: Denoiser, config: RunConfig, start: Tensor, sites: Tensor,
                     temperatures: list[float], generator: torch.Generator) -> CouplingResult:
    """``coupling.num_pairs`` pairs per temperature, the first start sequence vs uniformly random tokens on its sites,
    all temperatures in one batch (per-row temperatures; met pairs leave the batch), for ``coupling.max_steps``."""
    num_pairs, max_steps = config.coupling.num_pairs, config.coupling.max_steps
    rows = num_pairs * len(temperatures)
    x0 = start[:1].expand(rows, -1).clone()
    pair_sites = sites[:1].expand(rows, -1)
    y0 = randomize_sites(denoiser, x0, pair_sites, generator)
    ladder = torch.tensor(temperatures, dtype=torch.float64).repeat_interleave(num_pairs)
    sampler = GlauberSampler(denoiser, ladder, **to_dict(config.sampler))
    t0 = time.perf_counter()
    chains = CoupledGlauberChains(sampler, freeze_met=True)
    state = chains.init_state(x0, y0, generator=as_generator(generator, "pairs"), sites=pair_sites)
    initial = (state.x.tokens != state.y).sum(1).tolist()
    pooled = meeting_times_of(chains.run(state, max_steps))
    times = {tau: MeetingTimes(times=pooled.times[k * num_pairs:(k + 1) * num_pairs],
                               censored=pooled.censored[k * num_pairs:(k + 1) * num_pairs], max_steps=pooled.max_steps)
             for k, tau in enumerate(temperatures)}
    return CouplingResult(times=times, hamming_start=initial, hamming_end=(state.x.tokens != state.y).sum(1).tolist(),
                          seconds=round(time.perf_counter() - t0, 2), rows=state.rows)


def measure_influence(denoiser: Denoiser, tokens: Tensor, sites: Tensor, config: RunConfig,
                      generator: torch.Generator) -> InfluenceEstimate:
    """Influence among the first ``influence.max_sites`` resampled sites (sums over those sites: lower estimates)."""
    spec = config.influence
    return estimate_influence(denoiser, tokens[: spec.num_contexts], temperatures=config.temperatures,
                              sites=sites[0, : spec.max_sites], replacements=spec.replacements, generator=generator)


class _Semantics:
    """A :class:`~mlm_dynamics.tracking.ChainMonitor` in hidden-state space pooled over the resampled sites, with
    radii calibrated to the distance from the start to random fillings, plus every observation's embeddings and
    basins for the landscape: in memory, and with an output directory appended to ``semantics.bin`` (one record of
    step, basins and float32 embeddings per observation), so a checkpoint stores that file's length, not them."""

    def __init__(self, denoiser: Denoiser, state: ChainState, config: RunConfig) -> None:
        if not isinstance(denoiser, MaskedLMDenoiser):
            raise ConfigError("semantics needs a masked LM's hidden states; set semantics.enabled=false")
        spec = config.semantics
        mask = resampled_mask(state)
        hidden = HiddenStateEmbedder(denoiser)

        def embedder(tokens: Tensor) -> Tensor:
            return hidden(tokens, mask)

        start = state.tokens.clone()
        generator = as_generator(config.chains.seed, "drift-scale", device=start.device)
        self.scale = float(random_fill_scale(random_fill_distances(
            embedder, denoiser, start, state.sites, samples=spec.reference_samples, generator=generator,
            site_counts=state.counts)))
        self.monitor = ChainMonitor(embedder, every=spec.every,
                                    thresholds=[t * self.scale for t in spec.thresholds],
                                    traps=TrapTracker(radius=spec.trap_radius * self.scale, dwell=spec.dwell,
                                                      basin_radius=spec.basin_radius * self.scale),
                                    temperature=config.main_temperature, prefix="", keep_history=1)
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
        if self.monitor.observe(state) is None:
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


__all__ = ["TRAJECTORY_FIELDS", "ChainRunResult", "CouplingResult", "SemanticsResult", "measure_coupling",
           "measure_influence", "run_chains", "run_claims"]
