"""Results of a (temperature x length) sweep: one :class:`SweepCell` per cell, and the grid-level analysis.

A cell holds the raw meeting times of its pairs (censored ones at the budget, with their flags), the start kind of
each pair, the resampled positions, drift hitting times, the change rate and optional L-lag times. Its summaries are
censoring-aware (:mod:`.survival`): Kaplan-Meier quantiles with order-statistic intervals (a censored quantile is a
lower bound, never a value) and the restricted mean up to the budget with its interval, for all pairs and for each
start kind separately (a pair from the natural start against a random filling, and one from two random fillings, can
behave differently at low temperature). They are deterministic functions of the cell's own times.

:func:`analyse_grid` fits ``T = n (C(tau) log n + B)`` per temperature whose pairs all met, and brackets the slow
region at each length (:func:`~.scaling.slow_brackets`: slow where the cell's witness certifies it, fast where the
meeting times show it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from ..sampling.grid import START_KINDS
from .bracket import MixingBracket, mixing_bracket
from .meeting import HittingTimes, MeetingTimes
from .scaling import ScalingFit, SlowBracket, fit_by_temperature, fit_scaling, slow_brackets
from .survival import DEFAULT_CONFIDENCE, SurvivalSummary, estimate_quantile, summarise_survival
from .witness import PairedWitness


@dataclass
class SweepCell:
    """One (temperature, length) cell.

    Attributes:
        temperature, num_sites: the cell; ``sites`` the positions its pairs and chains resample.
        meeting: meeting times of its pairs (the budget where censored).
        kinds: ``[P]`` index of each pair's start kind in :data:`~mlm_dynamics.sampling.grid.START_KINDS`.
        hitting: drift hitting times per threshold; ``change_rate``: fraction of drift-chain steps that changed a
            token; ``drift_curve``: mean relative drift at the observation steps.
        lagged: L-lag meeting times, if run.
        coupling_trace: ``[observations, P]`` resampled sites where each pair's two chains differ, every
            ``trace_every`` steps from step 0 to the budget (0 once met: met pairs stay together).
        draws: the first pair of each start kind as text: ``kind``, ``met_at`` (-1: never met), ``x_start``,
            ``y_start``, ``x_end`` and ``y_end`` (at the meeting, or at the budget).
        witness: the paired witness test of the natural-random pairs (the slow side), None where the cell has too
            few of them.
        survival, by_kind: censoring-aware summaries of all pairs and of each start kind present.
        bracket: both sides of ``t_mix(1/4)`` from the natural-random pairs (:func:`~.bracket.mixing_bracket`):
            certified slow by the witness, certified fast by their meeting times, or undecided.
        looks: the natural-random pairs at each planned look of a sequential design (None: a fixed design);
            ``needs``: what the design's planner priced for an undecided cell; ``rows``: the forward rows the
            cell's pairs spent.
    """

    temperature: float
    num_sites: int
    sites: list[int]
    meeting: MeetingTimes
    kinds: Tensor
    hitting: dict[float, HittingTimes] = field(default_factory=dict)
    change_rate: float = math.nan
    lagged: MeetingTimes | None = None
    drift_curve: list[float] = field(default_factory=list)
    coupling_trace: Tensor | None = None
    trace_every: int = 1
    draws: list[dict[str, Any]] = field(default_factory=list)
    witness: PairedWitness | None = None
    survival: SurvivalSummary | None = None
    by_kind: dict[str, SurvivalSummary] = field(default_factory=dict)
    bracket: MixingBracket | None = None
    looks: tuple[int, ...] | None = None
    needs: str | None = None
    rows: int = 0

    def summarise(self, confidence: float = DEFAULT_CONFIDENCE) -> None:
        """Fill :attr:`survival`, :attr:`by_kind` (intervals at ``confidence``) and :attr:`bracket`."""
        budget = self.meeting.budget
        times, censored = self.meeting.times, self.meeting.censored
        self.survival = summarise_survival(times, censored, budget, confidence=confidence)
        self.by_kind = {name: summarise_survival(times[self.kinds == k], censored[self.kinds == k], budget,
                                                 confidence=confidence)
                        for k, name in enumerate(START_KINDS) if (self.kinds == k).any()}
        self.bracket = mixing_bracket(self.start_pairs, None if self.witness is None else self.witness.bound(),
                                      looks=self.looks, needs=self.needs)

    @property
    def start_pairs(self) -> MeetingTimes:
        """Meeting times of the natural-random pairs: the two starts both sides of :attr:`bracket` compare."""
        chosen = self.kinds == START_KINDS.index("natural-random")
        return MeetingTimes(times=self.meeting.times[chosen], censored=self.meeting.censored[chosen],
                            lag=self.meeting.lag, max_steps=self.meeting.max_steps)

    def state_dict(self) -> dict[str, Any]:
        """The measurements (not the summaries, which :meth:`summarise` recomputes), as tensors and numbers."""
        def times(value: MeetingTimes) -> dict[str, Any]:
            return {"times": value.times, "censored": value.censored, "lag": value.lag, "max_steps": value.max_steps}

        return {"temperature": self.temperature, "num_sites": self.num_sites, "sites": list(self.sites),
                "meeting": times(self.meeting), "kinds": self.kinds,
                "hitting": {str(k): times(v) for k, v in self.hitting.items()}, "change_rate": self.change_rate,
                "lagged": None if self.lagged is None else times(self.lagged), "drift_curve": list(self.drift_curve),
                "coupling_trace": self.coupling_trace, "trace_every": self.trace_every,
                "draws": [dict(draw) for draw in self.draws],
                "witness": None if self.witness is None else self.witness.state_dict(),
                "looks": None if self.looks is None else list(self.looks), "needs": self.needs, "rows": self.rows}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> SweepCell:
        """A cell from :meth:`state_dict` (checkpoints and shard files)."""
        return cls(temperature=float(state["temperature"]), num_sites=int(state["num_sites"]),
                   sites=list(state["sites"]), meeting=MeetingTimes(**state["meeting"]), kinds=state["kinds"],
                   hitting={float(k): HittingTimes(**v) for k, v in state["hitting"].items()},
                   change_rate=float(state["change_rate"]),
                   lagged=None if state["lagged"] is None else MeetingTimes(**state["lagged"]),
                   drift_curve=list(state["drift_curve"]), coupling_trace=state.get("coupling_trace"),
                   trace_every=int(state.get("trace_every", 1)), draws=list(state.get("draws", [])),
                   witness=None if state.get("witness") is None else PairedWitness(**state["witness"]),
                   looks=None if state.get("looks") is None else tuple(state["looks"]), needs=state.get("needs"),
                   rows=int(state.get("rows", 0)))

    @property
    def n_log_n(self) -> float:
        """``n log n`` for this cell's number of sites: the unit of the ``C(tau) n log n`` fit."""
        return self.num_sites * math.log(self.num_sites)

    def summary(self, tv_steps: Sequence[int] = ()) -> dict[str, float]:
        """The cell's row: the censoring-aware summary of all pairs (:meth:`~.survival.SurvivalSummary.summary`) and
        of each start kind (``{kind}/...``), the median and restricted mean over ``n log n``, hitting-time medians
        per threshold (``hitting_time_median_d{d}``, missing with ``..._lower_bound_d{d}`` where censored), the change
        rate, TV bounds and both sides of ``t_mix(1/4)`` (``mixing_time_exceeds``, ``forgotten_by``, ``nan`` where
        not certified; ``witness_horizon``, ``tv_lower``, ``d_lower``, ``witness_pairs``, ``tv_lower_t{t}`` at each
        horizon)."""
        out = {"temperature": self.temperature, "num_sites": float(self.num_sites)}
        if self.survival is not None:
            out.update(self.survival.summary())
            out["meeting_time_median_over_n_log_n"] = self.survival.median.value / self.n_log_n
            out["meeting_time_restricted_mean_over_n_log_n"] = self.survival.restricted_mean / self.n_log_n
        for kind, summary in self.by_kind.items():
            out.update({f"{kind}/{key}": value for key, value in summary.summary().items()})
        out["change_rate"] = self.change_rate
        for threshold, times in self.hitting.items():
            median = estimate_quantile(times.times, times.censored, 0.5)
            out.update({f"{key}_d{threshold:g}": value for key, value in median.summary("hitting_time").items()})
            out[f"hitting_censored_fraction_d{threshold:g}"] = times.censored_fraction
        if self.lagged is not None:
            out.update({k: v for k, v in self.lagged.summary(tv_steps=tv_steps).items() if k.startswith("tv_bound")})
        if self.bracket is not None:
            sides = self.bracket.summary()
            out.update({"mixing_time_exceeds": sides["mixing_time_exceeds"], "forgotten_by": sides["forgotten_by"],
                        "witness_horizon": sides["horizon"], "pairs": sides["pairs"], "look": sides["look"]})
        out["rows"] = float(self.rows)
        if self.witness is not None:
            lower = self.witness.bound()
            out.update({"tv_lower": float(lower.tv_lower[-1]), "d_lower": float(lower.d_lower[-1]),
                        "witness_pairs": float(lower.num_chains)})
            out.update({k: v for k, v in lower.summary().items() if k.startswith("tv_lower_t")})
        return out


@dataclass
class GridAnalysis:
    """Per temperature the ``C(tau)`` fits of meeting (and drift hitting) times; per length the slow region."""

    fits: dict[float, ScalingFit]
    hitting_fits: dict[float, dict[float, ScalingFit]]
    brackets: list[SlowBracket]


def analyse_grid(cells: Sequence[SweepCell], *, thresholds: Sequence[float] = (),
                 confidence: float = DEFAULT_CONFIDENCE) -> GridAnalysis:
    """Fits per temperature (:func:`~.scaling.fit_scaling`) and the slow region per length
    (:func:`~.scaling.slow_brackets`), intervals at ``confidence``."""
    temperatures = sorted({c.temperature for c in cells})
    rows = {tau: [c for c in cells if c.temperature == tau] for tau in temperatures}
    fits = fit_by_temperature({tau: {c.num_sites: c.meeting for c in row} for tau, row in rows.items()},
                              confidence=confidence)
    hitting_fits = {tau: {threshold: fit_scaling({c.num_sites: c.hitting[threshold] for c in row},
                                                 confidence=confidence)
                          for threshold in thresholds}
                    for tau, row in rows.items() if thresholds and all(c.hitting for c in row)}
    side = (1 + confidence) / 2
    certified = {(c.temperature, c.num_sites): None if c.witness is None else c.witness.bound(side).mixing_time_exceeds
                 for c in cells}
    brackets = slow_brackets({(c.temperature, c.num_sites): c.meeting for c in cells}, confidence=confidence,
                             slow_beyond=certified)
    return GridAnalysis(fits=fits, hitting_fits=hitting_fits, brackets=brackets)


__all__ = ["GridAnalysis", "SweepCell", "analyse_grid"]
