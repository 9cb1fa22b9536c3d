"""Online monitoring of running chains: drift, traps, basins, topics, Hamming distance; no Lightning needed.

Use it in a plain sampling loop::

    monitor = ChainMonitor(embedder, every=20, loggers=[CSVLogger("logs")])
    monitor.start(state)
    for record in sampler.run(state, 1000):
        monitor.observe(state)            # embeds and logs only every 20 steps

or in any decoding loop, on plain token tensors (inside a LightningModule's ``predict_step`` too, with
``loggers=trainer.loggers``)::

    monitor.start(x, step=0, phase="decode")
    for k in range(steps):
        x = denoise(x)
        monitor.observe(x, step=k + 1, masked=x == mask_id)   # still-masked positions count as unchanged
    monitor.start(x, step=steps, phase="refine")              # drift, R-hat and traps restart, keys refine/...

The Lightning callbacks in :mod:`mlm_dynamics.callbacks` drive the same class.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..diagnostics.convergence import ess, rhat
from ..diagnostics.margins import local_margins
from ..embedders.base import Embedder, as_embedder
from ..models.base import Denoiser
from ..sampling.glauber import ChainState
from .drift import DriftTracker
from .traps import TopicAttraction, TrapTracker


class ChainMonitor:
    """Every ``every`` steps: embed the chains once and update drift, traps and topics; return and log scalars.

    From the fourth observation on, the rank-normalised split R-hat and bulk ESS of two scalar projections across
    chains (drift and Hamming distance to start) are logged as well: chains from different starts that have not
    forgotten them show R-hat well above 1.

    Args:
        embedder: tokens -> embeddings; any plain function is wrapped so that its rows are normalised.
        every: observation interval in steps (the embedding cost is paid only then).
        thresholds: drift thresholds whose hitting times are tracked.
        traps: a :class:`~mlm_dynamics.tracking.traps.TrapTracker` (``None`` disables trap detection).
        topics: a :class:`~mlm_dynamics.tracking.traps.TopicAttraction` (``None`` disables it).
        margin_denoiser: if given, the mean local margin of each chain at observations (``B n`` forward rows each)
            is logged and attached to traps as evidence.
        temperature: tau of the chain, for the margin escape bound.
        loggers: objects with ``log_metrics(dict, step)`` (Lightning loggers work standalone).
        prefix: metric-name prefix.
        keep_history: how many of the latest observations' scalars :attr:`history` keeps (``None``: all); a long run
            that only reports the last one keeps its checkpoints small with 1.

    Examples:
        Watch four Glauber chains, embedding their states every 10 steps (any function of the tokens will do):

        >>> import torch
        >>> import torch.nn.functional as F
        >>> from mlm_dynamics import ChainMonitor, GlauberSampler, PairwiseMRFDenoiser, TrapTracker
        >>> sampler = GlauberSampler(PairwiseMRFDenoiser.ising_chain(6, coupling=1.0), temperature=1.0)
        >>> chains = sampler.init_state(torch.zeros(4, 6, dtype=torch.long), generator=0)
        >>> monitor = ChainMonitor(lambda tokens: F.one_hot(tokens, 2).flatten(1).double(), every=10,
        ...                        traps=TrapTracker(radius=0.05, dwell=20))
        >>> monitor.start(chains)
        >>> for _ in sampler.run(chains, 50):
        ...     _ = monitor.observe(chains)  # the scalars of step 10, 20, ... (None between observations)
        >>> sorted(key for key in monitor.history[-1] if key.startswith("chains/drift"))
        ['chains/drift_max', 'chains/drift_mean']
    """

    def __init__(self, embedder: Embedder, *, every: int = 10, thresholds: Sequence[float] = (0.1, 0.2, 0.3),
                 traps: TrapTracker | None = None, topics: TopicAttraction | None = None,
                 margin_denoiser: Denoiser | None = None, temperature: float = 1.0, loggers: Sequence = (),
                 prefix: str = "chains/", keep_history: int | None = None) -> None:
        if keep_history is not None and (isinstance(keep_history, bool) or not isinstance(keep_history, int)
                                         or keep_history < 1):
            raise ValueError(f"keep_history must be an integer >= 1 or None, got {keep_history!r}")
        self.keep_history = keep_history
        embedder = as_embedder(embedder)  # plain functions get normalised rows, as in the callbacks
        self.drift = DriftTracker(embedder, thresholds=thresholds, every=every)
        self.embedder, self.traps, self.topics = embedder, traps, topics
        self.margin_denoiser, self.temperature = margin_denoiser, temperature
        self.loggers, self.prefix = list(loggers), prefix
        self.start_tokens: Tensor | None = None
        self.history: list[dict] = []
        self.projections: dict[str, list[Tensor]] = {"drift": [], "hamming": []}
        self.phase: str | None = None

    def start(self, state: ChainState | Tensor, *, step: int | None = None, phase: str | None = None) -> None:
        """Take ``state`` (chains, or tokens ``[B, L]`` at ``step``) as the start: drift, the convergence
        projections and traps are measured from here; with ``phase``, metric names get ``{phase}/``."""
        tokens, step = _tokens_and_step(state, step)
        self.start_tokens, self.phase = tokens.clone(), phase
        self.drift.start(tokens, step=step)
        self.projections = {"drift": [], "hamming": []}
        if self.traps is not None and self.traps.anchor is not None:
            self.traps = self.traps.fresh()

    @torch.no_grad()
    def observe(self, state: ChainState | Tensor, *, step: int | None = None, masked: Tensor | None = None,
                force: bool = False) -> dict[str, float] | None:
        """Update at the state's step (or ``step`` for plain tokens) if due, or whatever the step with ``force``
        (the final state of a decoding loop); ``masked [B, L]`` marks positions still masked (left out of the
        Hamming distance and of margins). Returns the logged scalars (``None`` if not due)."""
        if self.start_tokens is None:
            raise RuntimeError("call start(state) before observe")
        tokens, step = _tokens_and_step(state, step)
        if tuple(tokens.shape) != tuple(self.start_tokens.shape):
            raise ValueError(f"tokens: shape {tuple(tokens.shape)} differs from the start's "
                             f"{tuple(self.start_tokens.shape)}; a sampler that grows its sequence starts a new phase "
                             "at each width: monitor.start(tokens, step=..., phase=...) (monitor_sampler does)")
        sites, counts = (state.sites, state.counts) if isinstance(state, ChainState) else (None, None)
        drift = self.drift.observe(step, tokens, force=force)
        if drift is None:
            return None
        p = self.prefix if self.phase is None else f"{self.prefix}{self.phase}/"
        embeddings, hit_at = self.drift.latest_embeddings, self.drift.hit_at
        assert embeddings is not None and hit_at is not None  # set by every due observation
        differs = tokens != self.start_tokens
        if masked is not None:
            differs &= ~masked.to(differs.device)
        hamming = differs.sum(1).double()
        metrics = {f"{p}drift_mean": float(drift.mean()), f"{p}drift_max": float(drift.max()),
                   f"{p}hamming_to_start": float(hamming.mean())}
        self.projections["drift"].append(drift.double().cpu())
        self.projections["hamming"].append(hamming.cpu())
        if len(self.projections["drift"]) >= 4 and tokens.shape[0] > 1:
            for name, values in self.projections.items():
                draws = torch.stack(values, 1)  # [B, observations]
                metrics[f"{p}rhat_{name}"] = float(rhat(draws))
                metrics[f"{p}ess_{name}"] = float(ess(draws))
        for threshold, hit in zip(self.drift.thresholds.tolist(), hit_at, strict=True):
            metrics[f"{p}hit_fraction_d{threshold:g}"] = float((hit >= 0).float().mean())
        margin = None
        if self.margin_denoiser is not None:
            if sites is None:
                sites, counts = self.margin_denoiser.padded_sites(tokens)
            margins = local_margins(self.margin_denoiser, tokens, sites=sites, site_counts=counts)
            margin = margins.margin.nanmean(1)
            metrics.update({f"{p}{k}": v for k, v in margins.summary(self.temperature).items()})
        if self.traps is not None:
            trapped = self.traps.observe(step, embeddings, tokens, margin)
            metrics[f"{p}trap_rate"] = float(trapped.float().mean())
            metrics[f"{p}num_basins"] = float(len(self.traps.basin_visits))
            metrics[f"{p}recurrent_basins"] = float(len(self.traps.recurrent_basins))
            dwell = self.traps.dwell_times(include_open=True)
            if dwell.numel():
                metrics[f"{p}dwell_time_mean"] = float(dwell.mean())
        if self.topics is not None:
            self.topics.observe(embeddings)
            for name, fraction in self.topics.fractions().items():
                metrics[f"{p}topic/{name}"] = fraction
        self.history.append({"step": step, **metrics})
        if self.keep_history is not None:
            del self.history[: -self.keep_history]
        for logger in self.loggers:
            logger.log_metrics(metrics, step=step)
        return metrics

    def state_dict(self) -> dict:
        """Every tracker's state and the history, for checkpoints."""
        return {"start_tokens": self.start_tokens, "phase": self.phase, "drift": self.drift.state_dict(),
                "history": list(self.history),
                "projections": {k: torch.stack(v, 1) if v else None for k, v in self.projections.items()},
                "traps": None if self.traps is None else self.traps.state_dict(),
                "topics": None if self.topics is None else self.topics.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.start_tokens, self.history = state["start_tokens"], list(state["history"])
        self.phase = state.get("phase")
        self.projections = {k: [] if v is None else list(v.unbind(1)) for k, v in state["projections"].items()}
        self.drift.load_state_dict(state["drift"])
        if self.traps is not None and state["traps"] is not None:
            self.traps.load_state_dict(state["traps"])
        if self.topics is not None and state["topics"] is not None:
            self.topics.load_state_dict(state["topics"])


def _tokens_and_step(state: ChainState | Tensor, step: int | None) -> tuple[Tensor, int]:
    if isinstance(state, ChainState):
        return state.tokens, state.step if step is None else step
    if step is None:
        raise ValueError("step is required when observing plain token tensors")
    return state, step


__all__ = ["ChainMonitor"]
