"""Probes of one run each: meeting times of coupled chains, the rectangle test, influence coefficients."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress

import torch

from .._random import as_generator
from ..diagnostics.influence import InfluenceEstimate, check_temperatures, estimate_influence
from ..diagnostics.meeting import MeetingTimes, cover_time_quantile, lagged_meeting_times, meeting_times_of
from ..diagnostics.rectangle import RectangleReport, check_rectangle_options, sample_rectangles
from ..diagnostics.witness import nearer_start
from ..metrics.aggregates import MeetingTimeMetric, MixingLowerBoundMetric, RectanglePrevalence
from ..models.base import Denoiser, OutOfTime
from ..sampling.categorical import check_temperature
from ..sampling.coupling import CoupledGlauberChains, CoupledState, randomize_sites
from ..sampling.glauber import GlauberSampler
from .base import LOGGER, SCHEDULE_KEYS, MetricKey, Probe
from .starts import StartStates

_QUANTILE_KEYS = tuple(
    key for q, label in (("median", "median"), ("q90", "90 % quantile of the"))
    for key in (
        MetricKey(f"meeting_time_{q}", f"Kaplan-Meier {label} steps until a coupled pair (start row, random filling) "
                  "meets; not logged where it lies beyond the censored pairs (then _lower_bound is)",
                  "single-site steps", "when the pairs determine it"),
        MetricKey(f"meeting_time_{q}_lower_bound", f"the estimated {q} lies beyond this (the budget): more pairs than "
                  "the quantile allows had not met (an estimate of a lower bound; _low is the covered one)",
                  "single-site steps", f"when the {q} is censored"),
        MetricKey(f"meeting_time_{q}_low", f"lower end of the order-statistic interval of the {q}",
                  "single-site steps"),
        MetricKey(f"meeting_time_{q}_high", "upper end of that interval (not logged where unbounded: the rank lies "
                  "among censored pairs)", "single-site steps", "when bounded"),
        MetricKey(f"meeting_time_{q}_confidence", "the coverage that interval achieves with this many pairs (exact "
                  "binomial; never more than the pairs allow)", "probability")))
_MEETING_KEYS = (
    *_QUANTILE_KEYS,
    MetricKey("meeting_time_restricted_mean", "E min(T, budget): the mean meeting time up to the budget (a lower bound "
              "of the mean when pairs are censored)", "single-site steps"),
    MetricKey("meeting_time_restricted_mean_low", "lower end of its Kolmogorov-Smirnov interval (coverage >= 95 %)",
              "single-site steps"),
    MetricKey("meeting_time_restricted_mean_high", "upper end of that interval", "single-site steps"),
    MetricKey("censored_fraction", "fraction of pairs that had not met within the budget", "fraction"),
    MetricKey("budget", "steps each pair was followed at most", "single-site steps"),
    MetricKey("num_pairs", "coupled pairs, pooled over ranks", "count"),
)
_LOWER_KEYS = (
    MetricKey("tv_lower", "95 % lower confidence limit of the total variation between the laws of the chains from "
              "the start rows and from their random fillings at the pairs' last step (paired witness: nearer its "
              "start row than its filling; exact binomial); a certificate of slow mixing, not an estimate",
              "probability"),
    MetricKey("d_lower", "tv_lower / 2: 95 % lower confidence limit of d(t) = max_x TV(P^t(x, .), pi) at that step",
              "probability"),
    MetricKey("mixing_time_exceeds", "t_mix(1/4) exceeds this many steps, certified at 95 % (d_lower > 1/4); not "
              "logged when nothing is certified", "single-site steps", "when certified"),
    MetricKey("chains_needed", "pairs (pooled over ranks) with which a witness that separates every pair would "
              "certify t_mix(1/4) > the steps run", "count"),
)


def _check_int(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


class MeetingTimeProbe(Probe):
    """Maximally coupled Glauber chains from each start row and from a uniformly random filling of its sites.

    Logs :meth:`~mlm_dynamics.diagnostics.MeetingTimes.summary` (the upper side of mixing) and, from the same pairs
    at no further forward, the certified lower side: ``tv_lower``, ``d_lower``, ``mixing_time_exceeds`` and
    ``chains_needed`` of :func:`~mlm_dynamics.diagnostics.witness.mixing_lower_bound` (paired, witness
    :func:`~mlm_dynamics.diagnostics.witness.nearer_start`, at the pairs' last step: a pair that met counts 0); with
    ``lag``, also L-lag meeting times of two independent random fillings of each row and the bounds
    ``tv_bound_t{t}`` on ``TV(mu_0 P^t, pi)`` (with their upper confidence limits ``tv_bound_t{t}_high``) for
    ``mu_0`` the uniform filling of the sites. Cost per run: at most ``max_steps`` forwards of ``<= 2 B`` rows
    (twice with ``lag``). Pooled over ranks. A run the scheduler stops at the end of its budget
    (:func:`~mlm_dynamics.models.base.forward_deadline`) keeps the meeting times so far, censored at the steps
    reached (``budget`` says how many), and leaves the lagged pairs out.
    """

    group = "mixing"
    pooled = True
    keys = (*_MEETING_KEYS, *_LOWER_KEYS,
            *(MetricKey(f"lagged/{k.name}", f"L-lag coupling: {k.meaning}", k.unit, "with lag")
              for k in _MEETING_KEYS),
            MetricKey("lagged/tv_bound_t{t}", "L-lag estimate of a bound on TV(mu_0 P^t, pi) after t steps; 1 at "
                      "every t once a pair is censored (its term is unbounded)", "probability",
                      "with lag, for each t in t_values"),
            MetricKey("lagged/tv_bound_t{t}_high", "95 % upper confidence limit of that bound for meeting times up "
                      "to the budget (betting); 1 once a pair is censored", "probability",
                      "with lag, for each t in t_values"), *SCHEDULE_KEYS)

    def __init__(self, *, temperature: float = 1.0, max_steps: int = 200, lag: int | None = None,
                 t_values: Sequence[int] = (0, 50, 100)) -> None:
        self.temperature = check_temperature(temperature)
        self.max_steps = _check_int("max_steps", max_steps, 1)
        self.lag = None if lag is None else _check_int("lag", lag, 1)
        if any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in t_values):
            raise ValueError(f"t_values must be integer steps >= 0, got {list(t_values)}")
        self.t_values = tuple(t_values)
        self.meeting = MeetingTimeMetric()
        self.lower = MixingLowerBoundMetric()
        self.lagged = MeetingTimeMetric(tv_steps=self.t_values) if lag else None
        self.latest: MeetingTimes | None = None
        self._draws: list[dict[str, list[int]]] = []
        self._said_short = False

    def draws(self) -> list[dict[str, list[int]]]:
        """The first pair of the latest run: both chains at step 0, and where they met (or both at its end)."""
        return list(self._draws)

    def forward_rows(self, rows: int, sites: int) -> int:
        """``2 B max_steps`` (twice that, plus the lag, with ``lag``): an upper bound, met pairs leave the batch."""
        pairs = 2 * rows * self.max_steps
        return pairs if self.lag is None else 2 * pairs + rows * self.lag

    def smaller_run(self, sites: int) -> tuple[str, int] | None:
        """Fewer steps, down to the median time a random scan takes to choose each of ``sites`` sites
        (:func:`~mlm_dynamics.diagnostics.meeting.cover_time_quantile`): a pair censored at a smaller budget says
        nothing about the model, since even a perfect coupling meets there less than half the time; the pairs are
        censored at the smaller budget, which ``budget`` logs. None with ``lag`` (its bounds need the full budget)."""
        return None if self.lag is not None else ("max_steps", cover_time_quantile(max(sites, 1)))

    def measure(self, denoiser: Denoiser, starts: StartStates, generator: torch.Generator) -> dict[str, float]:
        """Run coupled pairs from the starts against independent fillings; meeting-time summary (and lagged bounds)."""
        self._draws = []  # a run that fails or is discarded leaves no draws behind
        self._say_if_short(int(starts.counts.max()))
        sampler = GlauberSampler(denoiser, self.temperature)
        chains = CoupledGlauberChains(sampler, freeze_met=True)  # a met pair needs no more rows
        tokens, sites, counts = starts.tokens, starts.sites, starts.counts
        y0 = randomize_sites(denoiser, tokens, sites, generator, site_counts=counts)
        state = chains.init_state(tokens, y0, generator=as_generator(generator, "pairs"), sites=sites,
                                  site_counts=counts, attention_mask=starts.attention_mask)
        stopped = False
        try:
            chains.run(state, self.max_steps)
        except OutOfTime:  # the scheduler's budget ended the run: the times so far, censored where not met
            if state.x.step == 0:
                raise
            stopped = True
        self.latest = meeting_times_of(state)
        self._draws = [_pair_draw(tokens[0], y0[0], state)]
        self.meeting.to(tokens.device).reset()  # states on the model's device, so DDP can gather them
        self.meeting.update(self.latest)
        metrics = dict(self.meeting.compute())
        witness = nearer_start(tokens, y0)
        self.lower.to(tokens.device).reset()
        self.lower.update(witness(state.x.tokens).to(tokens.device), witness(state.y).to(tokens.device),
                          int(state.x.step))
        metrics.update(self.lower.compute())
        if self.lagged is not None and self.lag is not None and not stopped:
            with suppress(OutOfTime):  # the budget ended the run among the lagged pairs: those are left out
                x0 = randomize_sites(denoiser, tokens, sites, generator, site_counts=counts)
                y0 = randomize_sites(denoiser, tokens, sites, generator, site_counts=counts)
                lagged = lagged_meeting_times(sampler, x0, y0, lag=self.lag, max_steps=self.max_steps,
                                              generator=as_generator(generator, "lagged"), sites=sites,
                                              site_counts=counts, attention_mask=starts.attention_mask)
                self.lagged.to(tokens.device).reset()
                self.lagged.update(lagged)
                metrics.update({f"lagged/{k}": v for k, v in self.lagged.compute().items()})
        return metrics

    def _say_if_short(self, sites: int) -> None:
        """Once: a warning when ``max_steps`` is below the median steps a random scan needs to choose each of the
        longest row's ``sites`` (:func:`cover_time_quantile`): most pairs are then censored whatever the model."""
        needed = cover_time_quantile(max(sites, 1))
        if self.max_steps < needed and not self._said_short:
            self._said_short = True
            LOGGER.warning(f"MeetingTimeProbe: max_steps={self.max_steps} is below the {needed} steps a random scan "
                           f"needs to choose all {sites} sites of the longest start row half the time, so even a "
                           "perfect coupling would leave most pairs censored at the budget: a censored median says "
                           f"little about the model here. Raise max_steps to {needed} or more, or start from shorter "
                           "rows.")


def _pair_draw(x0: torch.Tensor, y0: torch.Tensor, state: CoupledState) -> dict[str, list[int]]:
    """Pair 0 as ``label -> ids``: its chains at step 0 and at the end, or where they met (one line: met pairs leave
    the batch together)."""
    steps, met_at = int(state.x.step), int(state.met_at[0])
    ends = ({f"x = y from step {met_at} (met)": state.x.tokens[0].tolist()} if met_at >= 0 else
            {f"x at step {steps} (not met)": state.x.tokens[0].tolist(),
             f"y at step {steps} (not met)": state.y[0].tolist()})
    return {"x (start row) at step 0": x0.tolist(), "y (random filling) at step 0": y0.tolist(), **ends}


class RectangleProbe(Probe):
    """Rectangle statistics on the start rows: prevalence of incompatible conditionals and ``|R|`` quantiles.

    Cost per run: ``B * pairs_per_context * (2 num_tokens + 2)`` forward rows. Pooled over ranks.
    """

    group = "rectangle"
    pooled = True
    keys = (MetricKey("prevalence", "fraction of rectangles whose |R| exceeds the float tolerance: conditionals "
                                    "that no joint distribution has", "fraction"),
            MetricKey("abs_r_median", "median |log cross-ratio| R of the rectangles (0 for compatible conditionals)",
                      "nats"),
            MetricKey("abs_r_q90", "90 % quantile of |R|", "nats"),
            MetricKey("tolerance_median", "median float tolerance below which |R| counts as zero", "nats"),
            MetricKey("num_rectangles", "rectangles, pooled over ranks", "count"), *SCHEDULE_KEYS)

    def __init__(self, *, pairs_per_context: int = 4, num_tokens: int = 4, max_distance: int | None = None,
                 temperature: float = 1.0) -> None:
        check_rectangle_options(pairs_per_context=pairs_per_context, num_tokens=num_tokens, max_distance=max_distance)
        self.pairs_per_context, self.num_tokens, self.max_distance = pairs_per_context, num_tokens, max_distance
        self.temperature = check_temperature(temperature)
        self.prevalence = RectanglePrevalence()
        self.latest: RectangleReport | None = None

    def forward_rows(self, rows: int, sites: int) -> int:
        """``B pairs_per_context (2 num_tokens + 2)``."""
        return rows * self.pairs_per_context * (2 * self.num_tokens + 2)

    def smaller_run(self, sites: int) -> tuple[str, int] | None:
        """Fewer rectangles per start row, down to one (``num_rectangles`` logs how many)."""
        del sites
        return "pairs_per_context", 1

    def measure(self, denoiser: Denoiser, starts: StartStates, generator: torch.Generator) -> dict[str, float]:
        """Sample rectangles around the starts; their summary."""
        self.latest = sample_rectangles(denoiser, starts.tokens, pairs_per_context=self.pairs_per_context,
                                        num_tokens=self.num_tokens, max_distance=self.max_distance,
                                        temperature=self.temperature, sites=starts.sites, site_counts=starts.counts,
                                        generator=generator, attention_mask=starts.attention_mask)
        self.prevalence.to(starts.tokens.device).reset()
        self.prevalence.update(self.latest)
        return dict(self.prevalence.compute())


class DobrushinProbe(Probe):
    """Influence coefficients on the first ``max_sites`` sites shared by every start row, over a temperature grid.

    Logs the Dobrushin coefficient per temperature and the grid and sensitivity estimates of tau*. The sums run over
    the probed sites only and over the sampled replacements, so they are lower estimates of the full Dobrushin sums:
    a value below 1 is not a certificate (tau* is optimistic), and no mixing-time bound is derived from them.
    Cost per run: ``B n (1 + replacements (n - 1))`` forward rows, n = ``max_sites``. Rank 0 only.
    """

    group = "influence"
    keys = (MetricKey("dobrushin_tau{t}", "largest estimated column sum of influences at temperature t (a lower "
                                          "estimate of Dobrushin's coefficient)", "dimensionless",
                      "for each t in temperatures"),
            MetricKey("row_sum_max_tau{t}", "largest estimated row sum of influences at temperature t",
                      "dimensionless", "for each t in temperatures"),
            MetricKey("tau_star", "lowest grid temperature whose estimated coefficient is below 1 (not logged if "
                                  "none is)", "temperature"),
            MetricKey("tau_star_sensitivity", "temperature where the logit-sensitivity bound on the coefficient "
                                              "reaches 1", "temperature"), *SCHEDULE_KEYS)

    def __init__(self, *, temperatures: Sequence[float] = (0.5, 1.0, 2.0), max_sites: int = 8,
                 replacements: int = 1) -> None:
        self.max_sites = _check_int("max_sites", max_sites, 2)
        self.replacements = _check_int("replacements", replacements, 1)
        self.temperatures = tuple(check_temperatures(temperatures))
        self.latest: InfluenceEstimate | None = None

    def forward_rows(self, rows: int, sites: int) -> int:
        """``B n (1 + replacements (n - 1))`` with ``n = min(max_sites, sites)``."""
        n = min(self.max_sites, sites)
        return rows * n * (1 + self.replacements * (n - 1))

    def measure(self, denoiser: Denoiser, starts: StartStates, generator: torch.Generator) -> dict[str, float]:
        """Estimate influences at each temperature; the Dobrushin estimates."""
        self.latest = estimate_influence(denoiser, starts.tokens, temperatures=self.temperatures,
                                         sites=shared_sites(starts)[: self.max_sites],
                                         replacements=self.replacements, generator=generator,
                                         attention_mask=starts.attention_mask)
        return self.latest.summary()


def shared_sites(starts: StartStates) -> torch.Tensor:
    """Positions resampled in every start row, in order (rows of a padded batch share their first positions)."""
    valid = torch.arange(starts.sites.shape[1], device=starts.sites.device) < starts.counts[:, None]
    common = set(starts.sites[0, valid[0]].tolist())
    for row, keep in zip(starts.sites[1:], valid[1:], strict=True):
        common &= set(row[keep].tolist())
    if len(common) < 2:
        raise ValueError("start_tokens: the start rows share fewer than 2 resampleable positions; influence needs "
                         "sites common to every row")
    return torch.tensor(sorted(common), device=starts.sites.device)


__all__ = ["DobrushinProbe", "MeetingTimeProbe", "RectangleProbe", "shared_sites"]
