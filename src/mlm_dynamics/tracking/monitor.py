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

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from ..diagnostics.convergence import ess, rhat
from ..diagnostics.margins import local_margins
from ..diagnostics.witness import mixing_lower_bound
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
        b_rows: ``[B]`` bool, True for the chains whose starts were drawn from a second law ``b`` (e.g. uniformly
            random fillings of the sites), each chain independent of the others; the rest start from ``a``. With
            it, the monitor certifies the slow side of mixing from the two groups at no forward
            (:func:`~mlm_dynamics.diagnostics.witness.mixing_lower_bound`, unpaired, the learned witness fitted on
            the first half of each group's rows and tested on the rest, ``m`` rows per group as in the smaller
            one): at observations 1, 2, 4, 8, ... since :meth:`start` the ``j``-th test runs at ``alpha 6 / (pi^2
            j^2)``, so every certificate of a phase holds together at ``level`` (Bonferroni over all tests; the
            doubling keeps a long run's late tests at a usable level). Logged there: ``tv_lower``, ``d_lower``,
            ``chains_needed``, and ``mixing_time_exceeds``, the largest step certified so far (``t_mix(1/4) > t``),
            once one is. Each group needs at least 4 chains.
        level: the simultaneous confidence level of those certificates.

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
                 prefix: str = "chains/", keep_history: int | None = None,
                 b_rows: Tensor | Sequence[bool] | None = None, level: float = 0.95) -> None:
        if keep_history is not None and (isinstance(keep_history, bool) or not isinstance(keep_history, int)
                                         or keep_history < 1):
            raise ValueError(f"keep_history must be an integer >= 1 or None, got {keep_history!r}")
        if not 0 < level < 1:
            raise ValueError(f"level must be in (0, 1), got {level}")
        self.b_rows = None if b_rows is None else torch.as_tensor(b_rows, dtype=torch.bool).cpu()
        if self.b_rows is not None and (self.b_rows.dim() != 1 or min(int(self.b_rows.sum()),
                                                                       int((~self.b_rows).sum())) < 4):
            raise ValueError(f"b_rows must be a 1-D bool mask with >= 4 chains in each group (half to learn the "
                             f"witness, half to test it), got shape {tuple(self.b_rows.shape)} with "
                             f"{int(self.b_rows.sum())} True")
        self.level = level
        self.observations = 0  # since start(): the tests of the lower bound run at 1, 2, 4, 8, ...
        self.certified_beyond: int | None = None
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
        if self.b_rows is not None and self.b_rows.numel() != tokens.shape[0]:
            raise ValueError(f"b_rows marks {self.b_rows.numel()} chains, the state has {tokens.shape[0]}")
        self.start_tokens, self.phase = tokens.clone(), phase
        self.observations, self.certified_beyond = 0, None
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
        self.observations += 1
        if self.b_rows is not None and self.observations & (self.observations - 1) == 0:  # 1, 2, 4, 8, ...
            metrics.update({f"{p}{k}": v for k, v in self._lower_bound(tokens, step).items()})
        self.history.append({"step": step, **metrics})
        if self.keep_history is not None:
            del self.history[: -self.keep_history]
        for logger in self.loggers:
            logger.log_metrics(metrics, step=step)
        return metrics

    def _lower_bound(self, tokens: Tensor, step: int) -> dict[str, float]:
        """The ``j``-th test of the two groups (``b_rows``), ``j = log2(observations) + 1``, at ``alpha 6 / (pi^2
        j^2)``: ``tv_lower``, ``d_lower``, ``chains_needed``, and ``mixing_time_exceeds`` once certified."""
        assert self.b_rows is not None
        test = self.observations.bit_length()
        level = 1 - (1 - self.level) * 6 / (math.pi ** 2 * test ** 2)
        a, b = tokens[~self.b_rows.to(tokens.device)], tokens[self.b_rows.to(tokens.device)]
        rows = min(a.shape[0], b.shape[0])
        bound = mixing_lower_bound(a[:rows], b[:rows], level=level, times=[step])
        if bound.mixing_time_exceeds is not None:
            self.certified_beyond = max(self.certified_beyond or 0, bound.mixing_time_exceeds)
        summary = bound.summary()
        out = {k: summary[k] for k in ("tv_lower", "d_lower", "chains_needed")}
        if self.certified_beyond is not None:
            out["mixing_time_exceeds"] = float(self.certified_beyond)
        return out

    def state_dict(self) -> dict:
        """Every tracker's state and the history, for checkpoints."""
        return {"start_tokens": self.start_tokens, "phase": self.phase, "drift": self.drift.state_dict(),
                "history": list(self.history), "observations": self.observations,
                "certified_beyond": self.certified_beyond,
                "projections": {k: torch.stack(v, 1) if v else None for k, v in self.projections.items()},
                "traps": None if self.traps is None else self.traps.state_dict(),
                "topics": None if self.topics is None else self.topics.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.start_tokens, self.history = state["start_tokens"], list(state["history"])
        self.phase = state.get("phase")
        self.observations, self.certified_beyond = state.get("observations", 0), state.get("certified_beyond")
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
