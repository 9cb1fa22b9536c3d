"""How meeting times grow with the number of sites: ``C(tau)``, growth exponents, and where the slow region lies.

Fast mixing predicts ``E T = n (A log n + B)``: the coupling of ``n`` sites completes after about ``log n`` sweeps of
the slowest mode, so ``A = C(tau)`` is the ``n log n`` constant and ``B`` an ``O(n)`` term, often negative at small
``n`` (on the 1-D Ising chain ``A = 1 / (1 - tanh(2 J / tau))``). :func:`fit_scaling` estimates both by least squares
of ``T / n`` on ``log n`` over every pair, and the log-log slope of ``T`` against ``n log n`` (about 1 where mixing is
``O(n log n)``), each with a Student-t interval over the pairs. A censored time is only a lower bound, so a
temperature with any censored pair gets no fit (never a fit on a hand-picked subset of its lengths).

That ``C`` is the fit on the lengths used, not the ``n log n`` constant: at small ``n`` the slowest mode of a finite
chain is faster than the infinite one's (on the free Ising path its rate is about ``1 - tanh(2J/tau) cos(pi / (n + 1))``
against ``1 - tanh(2J/tau)``), so the fit on n = 4..32 expects 14 %, 22 % and 32 % less than the constant at tau = 4, 2
and 1.4. ``C_inf`` extrapolates: the fit of ``T / n = C log n + B + D / n`` (an ``O(1)`` term ``D`` in ``T`` that
absorbs most of the finite-size bias) with a Student-t interval on a heteroscedasticity-consistent variance; it needs
four lengths (with three it passes through their means exactly, leaving no check of its form) and is about 3.5 times
wider. It is still a fit at small ``n``: what the ``D / n`` term leaves of the bias grows as the chain's correlation
length approaches the shortest length. How often each interval covers the Ising chain's exact constant over independent
replicates is measured by ``benchmarks/scaling_constant_coverage.py``: at n = 4..32, 0.94 to 0.82 for ``C_inf``'s 95 %
interval from tau = 4 to 1, short of its level (docs/concepts/verdicts.md).

Growth between two lengths ``n1 < n2`` is the exponent ``k = log(Q2 / Q1) / log(n2 / n1)`` of a quantile ``Q`` of
the meeting times (``T ~ n^k``): about 1.3-1.6 for ``n log n`` at small ``n``, at most about 3 for a chain whose
slowness is polynomial (the 1-D Ising chain below its correlation length, ``n^2 e^{2J/tau}`` to ``n^3``), and
unbounded for metastable chains whose escape time grows exponentially in ``n`` (Curie-Weiss below ``tau = J``).
:func:`growth_exponent` bounds ``k`` with the one-sided order-statistic bounds of :mod:`.survival`, which hold under
censoring: a censored quantile at the larger length contributes its lower bound, so a budget never fakes growth.

The slow region at one length is bracketed without the budget (:func:`slow_bracket`): a temperature is slow when its
median meeting time is at least :data:`SLOW_FACTOR` times the one at the highest grid temperature (same length),
fast when it is confidently below that.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from scipy import stats
from torch import Tensor

from .meeting import MeetingTimes
from .survival import DEFAULT_CONFIDENCE, quantile_bounds

SLOW_FACTOR = 10.0  # slow: a certified t_mix(1/4) at least this many times the highest temperature's median meeting


def _least_squares(x: Tensor, y: Tensor, confidence: float) -> tuple[float, float, float, float]:
    """``(slope, intercept, slope_low, slope_high)`` of ``y = slope x + intercept``, Student-t interval at
    ``confidence`` with ``N - 2`` degrees of freedom (``nan`` interval for ``N < 3`` or no spread in ``x``)."""
    x_centred = x - x.mean()
    spread = float((x_centred * x_centred).sum())
    if spread <= 0:
        return math.nan, math.nan, math.nan, math.nan
    slope = float((x_centred * (y - y.mean())).sum()) / spread
    intercept = float(y.mean()) - slope * float(x.mean())
    dof = len(x) - 2
    if dof < 1:
        return slope, intercept, math.nan, math.nan
    residual = y - (slope * x + intercept)
    error = math.sqrt(float((residual * residual).sum()) / dof / spread)
    half = float(stats.t.ppf((1 + confidence) / 2, dof)) * error
    return slope, intercept, slope - half, slope + half


def _extrapolate(n: Tensor, times: Tensor, confidence: float) -> tuple[float, float, float, float]:
    """``(C, D, C_low, C_high)`` of the least-squares fit ``T / n = C log n + B + D / n`` over pairs (``n, times
    [N]``); ``nan`` with fewer than four lengths (three would fix the three coefficients from their means alone).

    The interval is Student-t with ``N - 3`` degrees of freedom on the HC3 (heteroscedasticity-consistent)
    variance ``(X^T X)^-1 X^T diag(r_i^2 / (1 - h_i)^2) X (X^T X)^-1``, with residuals ``r`` and leverages ``h``:
    meeting times spread in proportion to their mean, so the longest chains' points are the noisiest and a pooled
    residual variance understates the constant's."""
    if len(torch.unique(n)) < 4:
        return math.nan, math.nan, math.nan, math.nan
    design = torch.stack([n.log(), torch.ones_like(n), 1 / n], 1)  # [N, 3]
    dof = len(n) - 3  # >= 1 with four lengths
    target = times / n
    bread = torch.linalg.inv(design.T @ design)
    coef = bread @ design.T @ target
    residual = target - design @ coef
    leverage = torch.einsum("ij,jk,ik->i", design, bread, design)
    meat = design.T @ (design * (residual / (1 - leverage).clamp_min(1e-12)).square()[:, None])
    variance = float((bread @ meat @ bread)[0, 0])
    half = float(stats.t.ppf((1 + confidence) / 2, dof)) * math.sqrt(variance)
    constant = float(coef[0])
    return constant, float(coef[2]), constant - half, constant + half


@dataclass
class ScalingFit:
    """``T = n (A log n + B)`` and the log-log slope at one temperature, fitted on every pair of every length.

    Attributes:
        C, C_low, C_high: ``A``, the ``n log n`` constant ``C(tau)`` fitted on the lengths used, with its Student-t
            interval at ``confidence``; ``nan`` without a fit (see ``note``).
        B: the ``O(n)`` term.
        C_inf, C_inf_low, C_inf_high, D: the constant extrapolated with a finite-size term, ``T / n = C log n + B +
            D / n`` (module docstring), and its interval; ``nan`` with fewer than four lengths.
        slope, slope_low, slope_high: least-squares slope of ``log T`` against ``log(n log n)`` over the pairs, with
            its interval (1 for ``T`` proportional to ``n log n``).
        confidence: the confidence of both intervals.
        censored_fraction: fraction of censored pairs over every length of the temperature.
        lengths, num_pairs: the lengths and the number of pairs fitted.
        mean_times: mean time per length (uncensored temperatures only).
        note: why there is no fit, if there is none.
    """

    C: float
    C_low: float
    C_high: float
    B: float
    slope: float
    slope_low: float
    slope_high: float
    confidence: float
    censored_fraction: float
    lengths: list[int]
    num_pairs: int
    mean_times: dict[int, float] = field(default_factory=dict)
    note: str = ""
    C_inf: float = math.nan
    C_inf_low: float = math.nan
    C_inf_high: float = math.nan
    D: float = math.nan

    def summary(self) -> dict[str, float]:
        """``C``, its interval, ``B``, ``C_inf`` with its interval and ``D``, the slope and its interval, the censored
        fraction and the pairs fitted."""
        return {"C": self.C, "C_low": self.C_low, "C_high": self.C_high, "B": self.B, "C_inf": self.C_inf,
                "C_inf_low": self.C_inf_low, "C_inf_high": self.C_inf_high, "D": self.D, "slope": self.slope,
                "slope_low": self.slope_low, "slope_high": self.slope_high, "confidence": self.confidence,
                "censored_fraction": self.censored_fraction, "lengths_fitted": float(len(self.lengths)),
                "num_pairs": float(self.num_pairs)}


def fit_scaling(times_by_length: Mapping[int, MeetingTimes], *,
                confidence: float = DEFAULT_CONFIDENCE) -> ScalingFit:
    """Least-squares fits of ``T / n = A log n + B``, of ``T / n = C log n + B + D / n`` and of ``log T = slope
    log(n log n) + c`` over every pair of ``times_by_length`` (``{n: times}``), with Student-t intervals (``N - 2``
    degrees of freedom for ``N`` pairs, ``N - 3`` for the extrapolation).
    No fit (``nan``, with a ``note``) when a pair is censored, fewer than two lengths have ``n >= 2``, or there are
    fewer than three pairs."""
    if not times_by_length:
        raise ValueError("times_by_length must hold at least one length")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    lengths = sorted(n for n, t in times_by_length.items() if t.times.numel())
    flags = torch.cat([times_by_length[n].censored.bool().cpu() for n in lengths]) if lengths else torch.zeros(0)
    censored = float(flags.double().mean()) if flags.numel() else math.nan
    empty = ScalingFit(math.nan, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan, confidence, censored,
                       lengths, int(flags.numel()))
    if flags.any():
        cut = [n for n in lengths if times_by_length[n].censored.any()]
        empty.note = f"censored pairs at n = {cut}: their times are lower bounds, so no mean and no fit"
        return empty
    if len([n for n in lengths if n >= 2]) < 2 or flags.numel() < 3:
        empty.note = "a fit needs at least two lengths n >= 2 and three pairs"
        return empty
    n = torch.cat([torch.full((times_by_length[k].times.numel(),), float(k), dtype=torch.float64) for k in lengths])
    times = torch.cat([times_by_length[k].times.double().cpu() for k in lengths]).clamp_min(1.0)
    constant, offset, constant_low, constant_high = _least_squares(n.log(), times / n, confidence)
    slope, _, slope_low, slope_high = _least_squares((n * n.log()).log(), times.log(), confidence)
    means = {k: float(times_by_length[k].times.double().mean()) for k in lengths}
    quadratic = polynomial_slope(lengths, [times_by_length[k].times.numel() for k in lengths], 2.0)
    if slope_low > quadratic:  # no n log n law to take a constant from
        return ScalingFit(C=math.nan, C_low=math.nan, C_high=math.nan, B=math.nan, slope=slope, slope_low=slope_low,
                          slope_high=slope_high, confidence=confidence, censored_fraction=censored,
                          lengths=lengths, num_pairs=int(n.numel()), mean_times=means,
                          note=f"growth faster than n^2 at these lengths (slope of log T on log(n log n) "
                               f"[{slope_low:.2f}, {slope_high:.2f}], n^2 has {quadratic:.2f}): no n log n law, "
                               "so no C(tau)")
    limit, finite_size, limit_low, limit_high = _extrapolate(n, times, confidence)
    return ScalingFit(C=constant, C_low=constant_low, C_high=constant_high, B=offset, slope=slope,
                      slope_low=slope_low, slope_high=slope_high, confidence=confidence, censored_fraction=censored,
                      lengths=lengths, num_pairs=int(n.numel()), mean_times=means, C_inf=limit, C_inf_low=limit_low,
                      C_inf_high=limit_high, D=finite_size)


def polynomial_slope(lengths: Sequence[int], counts: Sequence[int], power: float) -> float:
    """The least-squares slope of ``log(n^power)`` on ``log(n log n)`` over ``counts[k]`` pairs at each
    ``lengths[k]``: what ``n^power`` growth looks like to :func:`fit_scaling` at this design (``n log n`` has 1;
    ``n^2`` has 1.33 at n = 4..16, 1.39 at 4..32; ``n^1.5`` has 1.00 and 1.04)."""
    n = torch.cat([torch.full((c,), float(k), dtype=torch.float64) for k, c in zip(lengths, counts, strict=True)])
    x, y = (n * n.log()).log(), power * n.log()
    x = x - x.mean()
    return float((x * (y - y.mean())).sum() / (x * x).sum())


@dataclass(frozen=True)
class ExponentialRate:
    """The rate ``r`` per site of ``log Q = a + k log n + r n`` for the ``level`` quantile ``Q`` of the meeting time
    at one temperature: growth faster than any polynomial where ``r > 0`` (``n^k`` has ``r = 0``, ``n log n`` a
    slightly negative one, ``e^{r n}`` the rate itself; the upper quantile reads the slow mode of a two-basin chain,
    whose pairs that start in one basin meet fast).

    Attributes:
        rate, low, high: the weighted least-squares ``r`` with its normal interval at ``confidence`` (``nan``
            without three lengths).
        censored: lengths whose quantile lies beyond the budget: it enters at the largest time seen there, a lower
            bound, which can only lower ``r``.
    """

    temperature: float
    rate: float
    low: float
    high: float
    confidence: float
    censored: list[int]
    lengths: list[int]

    def describe(self) -> str:
        """``rate 0.52 [0.11, 0.93] per site (n = [4, 8, 12])``, with the censored lengths."""
        censored = f"; quantile censored at n = {self.censored}, entered at the budget" if self.censored else ""
        return f"rate {self.rate:.3g} [{self.low:.3g}, {self.high:.3g}] per site (n = {self.lengths}{censored})"


def exponential_rate(times_by_length: Mapping[int, MeetingTimes], *, temperature: float, level: float = 0.9,
                     confidence: float = DEFAULT_CONFIDENCE, resamples: int = 200,
                     generator: torch.Generator | None = None) -> ExponentialRate:
    """:class:`ExponentialRate` from ``{n: times}``: the log of each length's Kaplan-Meier ``level`` quantile, its
    variance from ``resamples`` bootstrap resamples of that length's pairs, and the weighted least-squares fit on
    ``[1, log n, n]`` (weights: the inverse variances; the lengths are independent samples, so the coefficient's
    variance is the fit's ``(X' W X)^{-1}``). Cost: ``resamples`` quantiles per length."""
    lengths = sorted(n for n, t in times_by_length.items() if t.times.numel())
    if len(lengths) < 3:
        return ExponentialRate(temperature, math.nan, math.nan, math.nan, confidence, [], lengths)
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    logs, variances, censored = [], [], []
    for length in lengths:
        cell = times_by_length[length]
        # censoring happens at the budget only, above every met pair: the Kaplan-Meier quantile is the empirical one
        # with the censored pairs last, and a quantile that lands on one lies beyond the budget
        values = cell.times.double().cpu().masked_fill(cell.censored.bool().cpu(), math.inf)
        index = math.ceil(level * len(values)) - 1
        budget = max(float(cell.times.max()), 1.0)
        picks = torch.randint(len(values), (resamples, len(values)), generator=generator)
        both = torch.cat([values[None], values[picks]]).sort(1).values[:, index]  # the sample, then resamples
        if math.isinf(float(both[0])):
            censored.append(length)
        log_quantile = both.clamp(1.0, budget).log()
        logs.append(float(log_quantile[0]))
        variances.append(max(float(log_quantile[1:].var()), 1e-6))
    sizes = torch.tensor(lengths, dtype=torch.float64)
    design = torch.stack([torch.ones_like(sizes), sizes.log(), sizes], 1)
    weights = 1 / torch.tensor(variances, dtype=torch.float64)
    covariance = torch.linalg.inv(design.T @ (weights[:, None] * design))
    beta = covariance @ design.T @ (weights * torch.tensor(logs, dtype=torch.float64))
    rate, error = float(beta[2]), math.sqrt(float(covariance[2, 2]))
    half = float(stats.norm.ppf((1 + confidence) / 2)) * error
    return ExponentialRate(temperature, rate, rate - half, rate + half, confidence, censored, lengths)


def fit_by_temperature(times: Mapping[float, Mapping[int, MeetingTimes]], *,
                       confidence: float = DEFAULT_CONFIDENCE) -> dict[float, ScalingFit]:
    """:func:`fit_scaling` for each temperature of ``{tau: {n: times}}``."""
    return {tau: fit_scaling(by_n, confidence=confidence) for tau, by_n in sorted(times.items())}


@dataclass(frozen=True)
class Growth:
    """The exponent ``k`` of ``Q(level) ~ n^k`` between two lengths at one temperature.

    Attributes:
        temperature, small, large: the temperature and the two lengths.
        exponent: ``log(Q2 / Q1) / log(n2 / n1)`` of the Kaplan-Meier quantiles (``nan`` where one is censored).
        low, high: bounds from the one-sided order-statistic bounds of both quantiles, each at ``confidence``
            (``-inf`` / ``inf`` where the data bound nothing); both hold together with probability at least
            ``1 - 4 (1 - confidence)``.
    """

    temperature: float
    small: int
    large: int
    level: float
    exponent: float
    low: float
    high: float
    confidence: float

    def describe(self) -> str:
        """``n=4->16: k 2.9 [1.2, 4.6]`` (``k >= ...`` where the larger quantile is censored)."""
        point = "unknown" if math.isnan(self.exponent) else f"{self.exponent:.2f}"
        return f"n={self.small}->{self.large}: k {point} [{self.low:.2f}, {self.high:.2f}]"


def growth_exponent(small: MeetingTimes, large: MeetingTimes, num_small: int, num_large: int, *, temperature: float,
                    level: float, confidence: float) -> Growth:
    """:class:`Growth` of the ``level`` quantile from ``small`` (``num_small`` sites) to ``large``; each cell's bound
    holds with probability at least ``confidence`` (see :func:`~.survival.quantile_bounds`)."""
    if not 2 <= num_small < num_large:
        raise ValueError(f"lengths must satisfy 2 <= small < large, got {num_small}, {num_large}")
    scale = math.log(num_large / num_small)
    q_small = small.quantiles([level])[0].item()
    q_large = large.quantiles([level])[0].item()
    low_small, high_small = quantile_bounds(small.times, small.censored, level, confidence)
    low_large, high_large = quantile_bounds(large.times, large.censored, level, confidence)

    def ratio(top: float, bottom: float) -> float:
        if bottom <= 0 or math.isinf(top):
            return math.inf
        return -math.inf if top <= 0 or math.isinf(bottom) else math.log(top / bottom) / scale

    exponent = math.nan if math.isinf(q_small) or math.isinf(q_large) else ratio(max(q_large, 1), max(q_small, 1))
    return Growth(temperature=temperature, small=num_small, large=num_large, level=level, exponent=exponent,
                  low=ratio(max(low_large, 1), high_small), high=ratio(high_large, max(low_small, 1)),
                  confidence=confidence)


@dataclass(frozen=True)
class SlowBracket:
    """Where the slow region ends at one length: every temperature up to ``slow_up_to`` is certified slow (a witness
    certifies ``t_mix(1/4)`` beyond :data:`SLOW_FACTOR` times the upper bound of the highest grid temperature's
    median meeting time), ``fast_from`` is the lowest temperature above it whose median meeting time is confidently
    below that factor of the highest temperature's (the coupling's side); ``0``: no grid temperature is certified
    slow, ``inf``: none above is confidently fast. Each statement holds with probability at least ``confidence``."""

    num_sites: int
    slow_up_to: float
    fast_from: float
    confidence: float

    def describe(self) -> str:
        """``n=8: slow up to 0.5, fast from 1`` in words."""
        slow = (f"no temperature certified {SLOW_FACTOR:g}x slower than the highest" if self.slow_up_to == 0
                else f"certified slow up to tau={self.slow_up_to:g}")
        fast = ("none above confidently fast (below the highest temperature)" if math.isinf(self.fast_from)
                else f"fast (< {SLOW_FACTOR:g}x) from tau={self.fast_from:g}")
        return f"n={self.num_sites}: {slow}, {fast}"


def slow_bracket(num_sites: int, times_by_temperature: Mapping[float, MeetingTimes], *,
                 confidence: float = DEFAULT_CONFIDENCE,
                 slow_beyond: Mapping[float, int | None] | None = None) -> SlowBracket:
    """:class:`SlowBracket` at one length from the median meeting times of each temperature (``{tau: times}``, the
    highest temperature the reference) and the witness-certified lower bounds ``slow_beyond`` (``{tau: t}``,
    ``t_mix(1/4) > t`` at ``(1 + confidence) / 2``; a temperature missing or None is not certified). A censored
    meeting time is never evidence of slowness: only a certified lower bound puts a temperature in the slow region.
    Each comparison uses one-sided bounds at ``(1 + confidence) / 2``; cells share random numbers across
    temperatures, which union bounds allow."""
    taus = sorted(times_by_temperature)
    side = (1 + confidence) / 2
    certified = slow_beyond or {}
    reference = times_by_temperature[taus[-1]]
    ref_low, ref_high = quantile_bounds(reference.times, reference.censored, 0.5, side)
    slow_up_to, fast_from = 0.0, math.inf
    for tau in taus[:-1]:
        times = times_by_temperature[tau]
        _, high = quantile_bounds(times.times, times.censored, 0.5, side)
        lower = certified.get(tau)
        if math.isfinite(ref_high) and lower is not None and lower >= SLOW_FACTOR * max(ref_high, 1):
            slow_up_to, fast_from = tau, math.inf
        elif math.isinf(fast_from) and high < SLOW_FACTOR * max(ref_low, 1) and tau > slow_up_to:
            fast_from = tau
    return SlowBracket(num_sites=num_sites, slow_up_to=slow_up_to, fast_from=fast_from, confidence=confidence)


def slow_brackets(times: Mapping[tuple[float, int], MeetingTimes], *, confidence: float = DEFAULT_CONFIDENCE,
                  slow_beyond: Mapping[tuple[float, int], int | None] | None = None) -> list[SlowBracket]:
    """:func:`slow_bracket` for each length of ``{(tau, n): times}`` (lengths with at least two temperatures), with
    the certified lower bounds ``slow_beyond`` of ``{(tau, n): t}``."""
    lengths = sorted({n for _, n in times})
    certified = slow_beyond or {}
    out = []
    for n in lengths:
        column = {tau: t for (tau, m), t in times.items() if m == n}
        if len(column) >= 2:
            out.append(slow_bracket(n, column, confidence=confidence,
                                    slow_beyond={tau: t for (tau, m), t in certified.items() if m == n}))
    return out


__all__ = ["SLOW_FACTOR", "ExponentialRate", "Growth", "ScalingFit", "SlowBracket", "exponential_rate",
           "fit_by_temperature", "fit_scaling", "growth_exponent", "polynomial_slope", "slow_bracket", "slow_brackets"]
