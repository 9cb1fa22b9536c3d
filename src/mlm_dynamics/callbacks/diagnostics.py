"""The diagnostic callbacks: thin adapters over :mod:`mlm_dynamics`'s framework-agnostic core."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.loggers import WandbLogger
from torch import Tensor

from ..coupling import CoupledGlauberChains, lagged_meeting_times, randomize_sites
from ..denoiser import Denoiser
from ..embedding import Embedder, HiddenStateEmbedder
from ..glauber import ChainState, GlauberSampler
from ..influence import estimate_influence, mixing_time_bound
from ..metrics import MeetingTimeMetric, RectanglePrevalence, TVBoundMetric
from ..monitor import ChainMonitor
from ..rectangle import sample_rectangles
from ..traps import TopicAttraction, TrapTracker
from .base import DiagnosticCallback


class MixingDiagnostics(DiagnosticCallback):
    """Coupled chains from the batch's sequences and from random restarts: meeting times, coalescence, TV bounds.

    Logs ``{prefix}mixing/meeting_q50``, ``.../meeting_q90`` (``inf`` when censored), ``.../coalesced`` and, with
    ``lag``, ``.../tv_bound@t`` for each ``t`` in ``t_values`` (L-lag bound, the partner chain started from another
    start row). Cost per run: at most ``max_steps`` forwards of ``<= 2 num_starts`` rows.
    """

    def __init__(self, *, temperature: float = 1.0, max_steps: int = 200, lag: int | None = None,
                 t_values: Sequence[int] = (0, 50, 100), **kwargs) -> None:
        super().__init__(**kwargs)
        self.temperature, self.max_steps, self.lag, self.t_values = temperature, max_steps, lag, tuple(t_values)
        self.meeting = MeetingTimeMetric()
        self.tv_bound = TVBoundMetric(lag, self.t_values) if lag else None

    def measure(self, denoiser: Denoiser, starts: Tensor, trainer: Trainer) -> dict[str, float]:
        sampler = GlauberSampler(denoiser, self.temperature)
        chains = CoupledGlauberChains(sampler)
        sites = denoiser.resampleable_sites(starts)
        y0 = randomize_sites(denoiser, starts, sites, self.generator)
        result = chains.run(chains.init_state(starts, y0, seed=self.next_seed(), sites=sites), self.max_steps)
        self.meeting.to(starts.device).reset()  # states on the model's device, so DDP can gather them
        self.meeting.update(result)
        p = f"{self.prefix}mixing/"
        metrics = {f"{p}meeting_{k}" if k != "coalesced" else f"{p}coalesced": float(v)
                   for k, v in self.meeting.compute().items()}
        if self.tv_bound is not None:
            partners = starts.roll(1, 0)
            lagged = lagged_meeting_times(sampler, starts, partners, lag=self.lag, max_steps=self.max_steps,
                                          seed=self.next_seed(), sites=sites)
            self.tv_bound.to(starts.device).reset()
            self.tv_bound.update(lagged)
            for t, bound in zip(self.t_values, self.tv_bound.compute().tolist()):
                metrics[f"{p}tv_bound@{t}"] = bound
        return metrics


class RectangleTest(DiagnosticCallback):
    """Rectangle statistics on the batch's sequences: prevalence of incompatibility and ``|R|`` quantiles.

    Cost per run: ``num_starts * pairs_per_context * (2 num_tokens + 2)`` forward rows.
    """

    def __init__(self, *, pairs_per_context: int = 4, num_tokens: int = 4, max_distance: int | None = None,
                 temperature: float = 1.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.pairs_per_context, self.num_tokens, self.max_distance = pairs_per_context, num_tokens, max_distance
        self.temperature = temperature
        self.prevalence = RectanglePrevalence()

    def measure(self, denoiser: Denoiser, starts: Tensor, trainer: Trainer) -> dict[str, float]:
        report = sample_rectangles(denoiser, starts, pairs_per_context=self.pairs_per_context,
                                   num_tokens=self.num_tokens, max_distance=self.max_distance,
                                   temperature=self.temperature, generator=self.generator)
        self.prevalence.to(starts.device).reset()
        self.prevalence.update(report.values, report.tolerance)
        return {f"{self.prefix}rectangle/{k}": float(v) for k, v in self.prevalence.compute().items()}


class InfluenceProbe(DiagnosticCallback):
    """Influence coefficients on the first ``max_sites`` sites of the batch's sequences, over a temperature grid.

    Logs the Dobrushin coefficient per temperature, the grid and sensitivity estimates of tau*, and the implied
    mixing-time bound. The sums run over the probed sites only, so with ``max_sites`` below the sequence length they
    are lower estimates of the full Dobrushin sums (and tau*, the bound, optimistic). Cost per run:
    ``num_starts * n (1 + replacements (n - 1))`` forward rows, n = ``max_sites``.
    """

    def __init__(self, *, temperatures: Sequence[float] = (0.5, 1.0, 2.0), max_sites: int = 8,
                 replacements: int = 1, **kwargs) -> None:
        super().__init__(**kwargs)
        if max_sites < 2:
            raise ValueError(f"max_sites must be >= 2, got {max_sites}")
        self.temperatures, self.max_sites, self.replacements = tuple(temperatures), max_sites, replacements

    def measure(self, denoiser: Denoiser, starts: Tensor, trainer: Trainer) -> dict[str, float]:
        sites = denoiser.resampleable_sites(starts)[0, : self.max_sites]
        estimate = estimate_influence(denoiser, starts, temperatures=self.temperatures, sites=sites,
                                      replacements=self.replacements, generator=self.generator)
        p = f"{self.prefix}influence/"
        metrics = {f"{p}dobrushin@{t:g}": float(a) for t, a in zip(self.temperatures, estimate.dobrushin)}
        metrics[f"{p}tau_star"] = estimate.contraction_temperature()
        metrics[f"{p}tau_star_sensitivity"] = estimate.sensitivity_temperature()
        bounds = mixing_time_bound(estimate.dobrushin, len(sites))
        for t, bound in zip(self.temperatures, bounds.tolist()):
            metrics[f"{p}tmix_bound@{t:g}"] = bound
        return metrics


class _PersistentChains(DiagnosticCallback):
    """Chains that live across runs (``steps_per_run`` steps each), watched by a :class:`ChainMonitor`."""

    monitor_prefix = "chains/"

    def __init__(self, *, embedder: Embedder | None = None, temperature: float = 1.0, steps_per_run: int = 50,
                 every: int = 10, thresholds: Sequence[float] = (0.1, 0.2, 0.3), codec=None,
                 table_rows: int = 8, **kwargs) -> None:
        super().__init__(**kwargs)
        if steps_per_run < 1:
            raise ValueError(f"steps_per_run must be >= 1, got {steps_per_run}")
        self.embedder, self.temperature, self.steps_per_run = embedder, temperature, steps_per_run
        self.every, self.thresholds, self.codec, self.table_rows = every, tuple(thresholds), codec, table_rows
        self.chain_state: ChainState | None = None
        self.monitor: ChainMonitor | None = None
        self._pending_state: dict | None = None

    def build_monitor(self, denoiser: Denoiser, embedder: Embedder) -> ChainMonitor:
        return ChainMonitor(embedder, every=self.every, thresholds=self.thresholds, temperature=self.temperature,
                            prefix=f"{self.prefix}{self.monitor_prefix}")

    def measure(self, denoiser: Denoiser, starts: Tensor, trainer: Trainer) -> dict[str, float]:
        sampler = GlauberSampler(denoiser, self.temperature)
        if self.monitor is None:
            embedder = self.embedder if self.embedder is not None else HiddenStateEmbedder(denoiser)
            self.monitor = self.build_monitor(denoiser, embedder)
            if self._pending_state is not None:
                self.chain_state = ChainState.from_state_dict(self._pending_state["chains"])
                self.monitor.load_state_dict(self._pending_state["monitor"])
            else:
                self.chain_state = sampler.init_state(starts, seed=self.next_seed())
                self.monitor.start(self.chain_state)
        metrics: dict[str, float] = {}
        for _ in sampler.run(self.chain_state, self.steps_per_run):
            metrics = self.monitor.observe(self.chain_state) or metrics
        if not metrics and self.monitor.history:
            metrics = {k: v for k, v in self.monitor.history[-1].items() if k != "step"}
        self._log_table(trainer)
        return metrics

    def _log_table(self, trainer: Trainer) -> None:
        """W&B only: a table of the current chain states and a line plot of each chain's drift so far."""
        wandb_loggers = [logger for logger in trainer.loggers if isinstance(logger, WandbLogger)]
        if not wandb_loggers:
            return
        drift = self.monitor.drift.latest
        rows = []
        for chain, tokens in enumerate(self.chain_state.tokens[: self.table_rows].tolist()):
            text = self.codec.decode(tokens) if self.codec is not None else " ".join(map(str, tokens))
            rows.append([self.chain_state.step, chain, float(drift[chain]), text])
        key = f"{self.prefix}{self.monitor_prefix}"
        steps = [entry["step"] for entry in self.monitor.history]
        trajectories = torch.stack(self.monitor.projections["drift"], 1)[: self.table_rows] if steps else None
        for logger in wandb_loggers:
            logger.log_table(key=f"{key}states", columns=["step", "chain", "drift", "state"], data=rows,
                             step=trainer.global_step)
            if trajectories is not None:
                import wandb

                plot = wandb.plot.line_series(xs=steps, ys=trajectories.tolist(),
                                              keys=[f"chain {c}" for c in range(len(trajectories))],
                                              title=f"{key}drift trajectories", xname="chain step")
                logger.experiment.log({f"{key}drift_trajectories": plot, "trainer/global_step": trainer.global_step})

    def extra_state(self) -> dict:
        if self.monitor is None:
            return {"chains": None, "monitor": None} if self._pending_state is None else dict(self._pending_state)
        return {"chains": self.chain_state.state_dict(), "monitor": self.monitor.state_dict()}

    def load_extra_state(self, state: dict) -> None:
        self.monitor, self.chain_state = None, None
        self._pending_state = state if state.get("chains") is not None else None


class SemanticDrift(_PersistentChains):
    """Long-run chains started from batch sequences: drift ``1 - cos(e(X_t), e(X_0))``, threshold hits, Hamming.

    ``embedder`` defaults to mean-pooled hidden states of the model's own encoder; pass a
    :class:`~mlm_dynamics.embedding.SentenceEmbedder` for text. Embeddings are computed every ``every`` steps only.
    """

    monitor_prefix = "drift/"


class TrapDetector(_PersistentChains):
    """Long-run chains with online trap, basin and topic detection (plus the drift scalars).

    Args:
        radius, dwell, hamming_radius, basin_radius: see :class:`~mlm_dynamics.traps.TrapTracker`.
        topic_anchors: optional ``{topic: [D] or [K, D] anchor embeddings}`` for topic attraction.
        topic_threshold: cosine similarity counted as "near" a topic.
        with_margins: log local margins (``B n`` forward rows per observation) and attach them to traps.
    """

    monitor_prefix = "traps/"

    def __init__(self, *, radius: float = 0.05, dwell: int = 50, hamming_radius: int | None = None,
                 basin_radius: float = 0.1, topic_anchors: dict[str, Tensor] | None = None,
                 topic_threshold: float = 0.5, with_margins: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.trap_options = dict(radius=radius, dwell=dwell, hamming_radius=hamming_radius, basin_radius=basin_radius)
        TrapTracker(**self.trap_options)  # validate now, not at the first run
        self.topic_anchors, self.topic_threshold, self.with_margins = topic_anchors, topic_threshold, with_margins

    def build_monitor(self, denoiser: Denoiser, embedder: Embedder) -> ChainMonitor:
        topics = None
        if self.topic_anchors:
            topics = TopicAttraction(self.topic_anchors, threshold=self.topic_threshold)
        return ChainMonitor(embedder, every=self.every, thresholds=self.thresholds,
                            traps=TrapTracker(**self.trap_options), topics=topics,
                            margin_denoiser=denoiser if self.with_margins else None, temperature=self.temperature,
                            prefix=f"{self.prefix}{self.monitor_prefix}")


__all__ = ["InfluenceProbe", "MixingDiagnostics", "RectangleTest", "SemanticDrift", "TrapDetector"]
