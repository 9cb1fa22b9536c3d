"""Trap-triggered interventions: act on a chain once its :class:`~.monitor.ChainMonitor` flags it trapped.

After each ``monitor.observe(state)`` call ``intervention.after_observe(state)``; a chain inside an open trap (and,
with ``min_margin``, whose mean local margin at entry reached it: the escape bound is small) gets one of:

- ``"bump"``: its temperature is multiplied by ``factor`` for ``duration`` steps (the sampler must have per-chain
  temperatures; a scalar one is expanded);
- ``"block"``: its ``block`` lowest-margin sites are set to uniformly random allowed tokens at once (a block move
  single-site updates would almost never make);
- ``"restart"``: the chain restarts from random tokens on its sites (or from ``restarts[c]`` if given).

Every intervention is recorded with its outcome: escaped when a later observation finds the chain outside the trap
(the monitor closed it), with the steps it took. Interventions change the chain: its law is no longer the Glauber
chain's; they are tools to explore, measured in ``benchmarks/bench_tempering.py``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor

from .._random import Randomness, as_generator
from ..diagnostics.margins import local_margins
from ..diagnostics.quantiles import quantile_summary
from ..sampling.coupling import randomize_sites
from ..sampling.glauber import ChainState, GlauberSampler
from .monitor import ChainMonitor

KINDS = ("bump", "block", "restart")


@dataclass
class InterventionEvent:
    """One intervention: the chain, the step it fired, its kind, and when (if) the chain left the trap."""
    chain: int
    step: int
    kind: str
    escaped_at: int | None = None

    @property
    def steps_to_escape(self) -> int | None:
        """Steps from the intervention to the escape (``None`` while the chain has not escaped)."""
        return None if self.escaped_at is None else self.escaped_at - self.step


class TrapIntervention:
    """See the module docstring."""

    def __init__(self, monitor: ChainMonitor, sampler: GlauberSampler, kind: str, *, duration: int = 20,
                 factor: float = 4.0, block: int = 2, min_margin: float | None = None,
                 restarts: Tensor | None = None, generator: Randomness = 0) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if monitor.traps is None:
            raise ValueError("monitor: trap detection is off (pass traps=TrapTracker(...) to the monitor)")
        for name, value in (("duration", duration), ("block", block)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not factor > 1:
            raise ValueError(f"factor must be > 1, got {factor}")
        self.monitor, self.sampler, self.kind = monitor, sampler, kind
        self.duration, self.factor, self.block, self.min_margin = duration, factor, block, min_margin
        self.restarts = restarts
        self.generator = as_generator(generator)
        self.events: list[InterventionEvent] = []
        self.open: dict[int, InterventionEvent] = {}  # chain -> its latest event not yet escaped
        self.base: Tensor | None = None
        self.bumped_until: Tensor | None = None

    def before_step(self, state: ChainState) -> None:
        """Restore the temperature of chains whose bump has run out (call before each sampler step)."""
        if self.base is None or self.bumped_until is None:
            return
        expired = (self.bumped_until >= 0) & (self.bumped_until <= state.step)
        if expired.any():
            assert isinstance(self.sampler.temperature, Tensor)
            self.sampler.temperature[expired.to(self.sampler.temperature.device)] = self.base[expired]
            self.bumped_until[expired] = -1

    @torch.no_grad()
    def after_observe(self, state: ChainState) -> list[InterventionEvent]:
        """Record escapes and intervene on newly trapped chains; returns the new events."""
        traps = self.monitor.traps
        assert traps is not None
        for chain, event in list(self.open.items()):
            if traps.open_event[chain] is None:  # the monitor closed its trap: escaped
                event.escaped_at = state.step
                del self.open[chain]
        new = []
        for chain, index in enumerate(traps.open_event):
            if index is None or chain in self.open:
                continue
            margin = traps.events[index].margin
            if self.min_margin is not None and (margin is None or margin < self.min_margin):
                continue
            self._apply(state, chain)
            event = InterventionEvent(chain=chain, step=state.step, kind=self.kind)
            self.events.append(event)
            self.open[chain] = event
            new.append(event)
        return new

    def _apply(self, state: ChainState, chain: int) -> None:
        counts = state.site_counts
        sites = state.sites[chain, : int(counts[chain])]
        if self.kind == "bump":
            if not isinstance(self.sampler.temperature, Tensor):
                self.sampler.temperature = torch.full((state.tokens.shape[0],), self.sampler.temperature,
                                                      dtype=torch.float64, device=state.tokens.device)
            if self.base is None or self.bumped_until is None:
                self.base = self.sampler.temperature.clone().cpu()
                self.bumped_until = torch.full((state.tokens.shape[0],), -1, dtype=torch.long)
            self.sampler.temperature[chain] = float(self.base[chain]) * self.factor
            self.bumped_until[chain] = state.step + self.duration
            return
        if self.kind == "restart":
            if self.restarts is not None:
                state.tokens[chain] = self.restarts[chain % len(self.restarts)].to(state.tokens.device)
                return
            chosen = sites
        else:
            margins = local_margins(self.sampler.denoiser, state.tokens[chain:chain + 1], sites=sites[None])
            order = margins.margin[0].nan_to_num(nan=float("inf")).argsort()
            chosen = sites[order[: self.block].to(sites.device)]
        row = state.tokens[chain:chain + 1]
        state.tokens[chain:chain + 1] = randomize_sites(self.sampler.denoiser, row, chosen[None], self.generator)

    def state_dict(self) -> dict[str, Any]:
        """Everything to continue bit-identically: the random stream, the events (open ones by index), the bumps and
        the sampler's per-chain temperatures they changed."""
        return {"rng": self.generator.get_state(), "events": [asdict(e) for e in self.events],
                "open": {chain: self.events.index(event) for chain, event in self.open.items()},
                "base": self.base, "bumped_until": self.bumped_until,
                "temperature": self.sampler.temperature.clone() if isinstance(self.sampler.temperature, Tensor)
                else self.sampler.temperature}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.generator.set_state(state["rng"])
        self.events = [InterventionEvent(**e) for e in state["events"]]
        self.open = {int(chain): self.events[index] for chain, index in state["open"].items()}
        self.base, self.bumped_until = state["base"], state["bumped_until"]
        temperature = state["temperature"]
        self.sampler.temperature = temperature.clone() if isinstance(temperature, Tensor) else float(temperature)

    def summary(self) -> dict[str, float]:
        """``interventions``, ``escaped_fraction`` and the median ``steps_to_escape`` of the escaped ones."""
        escaped = [e.steps_to_escape for e in self.events if e.steps_to_escape is not None]
        return {"interventions": float(len(self.events)),
                "escaped_fraction": len(escaped) / len(self.events) if self.events else float("nan"),
                **quantile_summary("steps_to_escape", torch.tensor(escaped, dtype=torch.float64), (0.5,))}


__all__ = ["KINDS", "InterventionEvent", "TrapIntervention"]
