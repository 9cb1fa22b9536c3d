"""The ``run`` job: Glauber chains on one model, with coupling, rectangle, margin and influence sections.

``run_chains(config, out_dir)`` loads the model, steps the chains (checkpointing every ``run.checkpoint_every``
steps), then measures the sections and returns a :class:`ChainRunResult`; :mod:`mlm_dynamics.report` writes it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..diagnostics.influence import InfluenceEstimate, estimate_influence
from ..diagnostics.margins import LocalMargins, local_margins
from ..diagnostics.meeting import MeetingTimes
from ..diagnostics.rectangle import RectangleReport, sample_rectangles
from ..models.base import Denoiser
from ..sampling.coupling import CoupledGlauberChains, randomize_sites
from ..sampling.energy import PseudoLogLikelihoodEnergy
from ..sampling.glauber import ChainState, GlauberSampler
from .checkpoint import RunInterrupted, fingerprint, load_checkpoint, save_checkpoint
from .common import Codec, build_model, start_tokens, window_sites
from .config import RunConfig, to_dict


@dataclass
class CouplingResult:
    """Meeting times of maximally coupled pairs (start sequence vs random tokens) and their Hamming distances."""

    times: MeetingTimes
    hamming_start: list[int]
    hamming_end: list[int]
    seconds: float


@dataclass
class ChainRunResult:
    """Everything the ``run`` job measured; :func:`mlm_dynamics.report.run_report` turns it into JSON."""

    config: RunConfig
    model: dict[str, float]
    chains: dict[str, Any]
    final_sequences: list[str]
    trajectory: list[dict[str, Any]] = field(default_factory=list)
    coupling: CouplingResult | None = None
    rectangle: RectangleReport | None = None
    margins: dict[str, LocalMargins] | None = None
    influence: InfluenceEstimate | None = None


def run_chains(config: RunConfig, out_dir: Path | None = None, *, resume: bool = False) -> ChainRunResult:
    """Run the job described by ``config`` (validated); checkpoints go to ``out_dir/checkpoint.pt``.

    With ``resume=True`` the chains, their RNG and the report's accumulators continue from the checkpoint, which
    must come from the same model, chains and sampler config and the same start state (verified), up to
    ``run.num_steps``; the result is bit-identical to an uninterrupted run.
    """
    config.validate()
    if (resume or config.run.checkpoint_every) and out_dir is None:
        raise ValueError("out_dir is required for checkpoints and --resume")
    t0 = time.perf_counter()
    denoiser, codec = build_model(config.model)
    load_seconds = time.perf_counter() - t0
    tokens = start_tokens(config.chains.sequences, config.chains.num_chains, codec).to(denoiser.device)
    sites = window_sites(denoiser, tokens, config.chains.window)
    sampler = GlauberSampler(denoiser, **to_dict(config.sampler))
    state = sampler.init_state(tokens, seed=config.chains.seed, sites=sites)
    start = state.tokens.clone()
    pll = PseudoLogLikelihoodEnergy(denoiser, sites=sites)
    start_energy = pll(start)
    checkpoint_path = None if out_dir is None else out_dir / "checkpoint.pt"
    fingerprints = {"config": fingerprint(config.resume_fingerprint()), "start_state": fingerprint([start, sites])}
    progress: dict[str, Any] = {"changes": torch.zeros(sites.shape, dtype=torch.long, device=tokens.device),
                                "changed_steps": torch.zeros(tokens.shape[0], device=tokens.device),
                                "log_prob_sum": 0.0, "rows": []}
    checkpoint_step = None
    if resume:
        assert checkpoint_path is not None
        saved, checkpoint_step = load_checkpoint(checkpoint_path, fingerprints=fingerprints,
                                                 map_location=tokens.device)
        state, progress = ChainState.from_state_dict(saved["chains"], tokens.device), saved["progress"]
        if state.step > config.run.num_steps:
            raise ValueError(f"run.num_steps {config.run.num_steps} is below the checkpoint's step {state.step}")
        # the previous run's final step is recorded even off the record grid; it is not final any more
        progress["rows"] = [r for r in progress["rows"] if r["step"] % config.run.record_every == 0]

    num_steps, record_every, every = config.run.num_steps, config.run.record_every, config.run.checkpoint_every
    first_step = state.step
    t1 = time.perf_counter()
    try:
        for record in sampler.run(state, num_steps - state.step):
            moved = record.new_tokens != record.old_tokens
            progress["changed_steps"] += moved.any(1).float()
            progress["log_prob_sum"] += float(record.log_prob.mean())
            progress["changes"] += ((sites[:, :, None] == record.positions[:, None, :]) & moved[:, None, :]).any(2)
            if record.step % record_every == 0 or record.step == num_steps:
                progress["rows"] += _trajectory_rows(record.step, state.tokens, start, codec)
            if every and checkpoint_path is not None and (record.step % every == 0 or record.step == num_steps):
                save_checkpoint(checkpoint_path, {"chains": state.state_dict(), "progress": progress},
                                fingerprints=fingerprints, step=record.step)
                checkpoint_step = record.step
    except KeyboardInterrupt:
        raise RunInterrupted(state.step, checkpoint_path if checkpoint_step is not None else None,
                             checkpoint_step) from None
    chain_seconds = time.perf_counter() - t1
    end_energy = pll(state.tokens)
    hamming = (state.tokens != start).sum(1).float()
    final_rows = [row for row in progress["rows"] if row["step"] == num_steps]
    chains = {
        "num_chains": tokens.shape[0], "num_sites": sites.shape[1], "num_steps": num_steps,
        "steps_per_second": round((num_steps - first_step) / max(chain_seconds, 1e-9), 3),
        "change_rate": float(progress["changed_steps"].mean() / num_steps),
        "mean_log_prob_of_proposal": progress["log_prob_sum"] / num_steps,
        "hamming_to_start_mean": float(hamming.mean()), "hamming_to_start_max": int(hamming.max()),
        "site_change_counts": progress["changes"].sum(0).tolist(),
        "pll_energy_start_mean": float(start_energy.mean()), "pll_energy_end_mean": float(end_energy.mean()),
        "unique_final_sequences": len({row["sequence"] for row in final_rows}),
    }
    result = ChainRunResult(
        config=config, chains=chains, trajectory=progress["rows"],
        model={"vocab_size": denoiser.vocab.size, "parameters": sum(p.numel() for p in denoiser.parameters()),
               "load_seconds": round(load_seconds, 2)},
        final_sequences=[codec.decode(t.tolist()) for t in state.tokens])
    generator = torch.Generator(device=tokens.device).manual_seed(config.chains.seed + 1)
    if config.coupling.enabled:
        result.coupling = measure_coupling(sampler, start, sites, config.coupling.num_pairs,
                                           config.coupling.max_steps, generator)
    if config.rectangle.enabled:
        spec = config.rectangle
        result.rectangle = sample_rectangles(denoiser, state.tokens, pairs_per_context=spec.pairs_per_context,
                                             num_tokens=spec.num_tokens, max_distance=spec.max_distance,
                                             temperature=config.sampler.temperature, sites=sites,
                                             generator=generator)
    if config.margins.enabled:
        result.margins = {name: local_margins(denoiser, t, sites=sites)
                          for name, t in (("start", start), ("final", state.tokens))}
    if config.influence.enabled:
        result.influence = measure_influence(denoiser, state.tokens, sites, config, generator)
    return result


def _trajectory_rows(step: int, tokens: Tensor, start: Tensor, codec: Codec) -> list[dict[str, Any]]:
    hamming = (tokens != start).sum(1).tolist()
    return [{"step": step, "chain": chain, "hamming_to_start": int(hamming[chain]),
             "sequence": codec.decode(tokens[chain].tolist())} for chain in range(tokens.shape[0])]


def measure_coupling(sampler: GlauberSampler, start: Tensor, sites: Tensor, num_pairs: int, max_steps: int,
                     generator: torch.Generator) -> CouplingResult:
    """Pairs from the first start sequence vs uniformly random tokens on its sites, for ``max_steps`` steps."""
    x0 = start[:1].expand(num_pairs, -1).clone()
    pair_sites = sites[:1].expand(num_pairs, -1)
    y0 = randomize_sites(sampler.denoiser, x0, pair_sites, generator)
    t0 = time.perf_counter()
    chains = CoupledGlauberChains(sampler)
    seed = int(torch.randint(2**31, (1,), generator=generator, device=generator.device))
    state = chains.init_state(x0, y0, seed=seed, sites=pair_sites)
    initial = (state.x.tokens != state.y).sum(1).tolist()
    times = chains.run(state, max_steps)
    return CouplingResult(times=times, hamming_start=initial, hamming_end=(state.x.tokens != state.y).sum(1).tolist(),
                          seconds=round(time.perf_counter() - t0, 2))


def measure_influence(denoiser: Denoiser, tokens: Tensor, sites: Tensor, config: RunConfig,
                      generator: torch.Generator) -> InfluenceEstimate:
    """Influence among the first ``influence.max_sites`` resampled sites (sums over those sites: lower estimates)."""
    spec = config.influence
    return estimate_influence(denoiser, tokens[: spec.num_contexts], temperatures=spec.temperatures,
                              sites=sites[0, : spec.max_sites], replacements=spec.replacements, generator=generator)
