"""The paper's claims, checked against what a run measured: a verdict, its evidence, its sample size and its power.

arXiv 2605.16378 claims, for Glauber dynamics on MLM conditionals:

1. ``incompatible``: the conditionals are generally incompatible (no joint distribution has them);
2. ``fast_mixing``: at high temperature, meeting times grow like ``n log n`` (O(n log n) mixing);
3. ``boundary_moves_up``: the boundary ``tau_c(n)`` moves to higher temperature as ``n`` grows;
4. ``metastable``: below the boundary the chains are metastable (escape times exponential in ``n``);
5. ``dobrushin``: above the Dobrushin temperature ``tau*`` (influence coefficient below 1) mixing is O(n log n);

and, beside them, what the lengths measured can decide about a polynomial slow-down: ``faster_than_n3``.

Every verdict is ``holds``, ``does not hold`` or ``inconclusive``, and no rule reads the step budget: a censored time
is a lower bound, which can only weaken the evidence, never create it. The rules (operating characteristics on models
whose truth is known are on the documentation page "How the verdicts are decided"):

- ``incompatible`` holds when one rectangle has ``|R|`` above the float tolerance (a certificate); no sample of
  rectangles certifies compatibility, so it is never ``does not hold``.
- ``fast_mixing`` (``O(n log n)`` mixing) is judged at the highest grid temperature from
  :func:`~.scaling.fit_scaling` (every pair of every length; a censored pair leaves it inconclusive). It holds when
  the Student-t interval (two-sided at ``1 - ALPHA / 2``: margin for skewed log-times) of the slope of ``log T``
  against ``log(n log n)`` lies below the slope ``n^1.5`` has at the grid's lengths
  (:func:`~.scaling.polynomial_slope`): the nearest polynomial alternative is then excluded.
  At n = 4..16 ``n^1.5`` has slope 1.00, the same as ``n log n``, so no design on those lengths can tell them apart
  and the claim stays inconclusive there, saying so (and whether growth is at least slower than ``n^2``, slope
  1.33). It never says "does not hold": the claim is about temperatures high enough, and a grid whose top
  temperature grows faster has not reached them.
- ``metastable`` (escape times exponential in ``n``) needs three lengths: at each temperature ``log Q`` is regressed
  on ``[1, log n, n]`` for the :data:`CLAIM_LEVEL` quantile ``Q`` of each length (bootstrap variances, weighted
  least squares: :func:`~.scaling.exponential_rate`). A polynomial ``n^k`` has no ``n`` term (``n log n`` a slightly
  negative one), ``e^{r n}`` has ``r``; the claim holds when at some temperature the lower
  bound of ``r`` is above 0 (growth faster than any polynomial: pure ``n^4`` passes with probability about
  ``ALPHA / 2``). It assumes no additive offset dominates the small lengths (``a + n^2`` with a large ``a`` also
  curves upward). A censored quantile enters at the budget, which can only hide growth. It never says "does not hold": a
  small rate cannot be told from polynomial growth at small ``n``; the evidence states the smallest rate per site
  the design could detect (plug-in: the interval's half-width).
- ``faster_than_n3`` (a polynomial slow-down at least, at the lengths measured) reads the exponent between the
  smallest and largest length: it holds when at some temperature its lower bound exceeds :data:`KAPPA` = 3 and
  does not hold when every upper bound is below it (a statement about these lengths, which they can refute).
- ``boundary_moves_up`` holds when some temperature is metastable in the sense above and a higher one confidently
  grows slower than ``n^KAPPA``: the ratio of their meeting times then grows without bound, so wherever one puts the
  boundary between slow and fast (a factor over the fast phase), it reaches higher temperatures as ``n`` grows. A
  grid without a metastable temperature cannot see a transition, so it never says "does not hold"; the per-length
  brackets of the slow region (:func:`~.scaling.slow_brackets`) are its evidence.
- ``dobrushin`` stays inconclusive: a sampled influence coefficient is a lower estimate of Dobrushin's, so only an
  estimate of 1 or more certifies anything (that the condition fails there).

Bonferroni: every bound a claim uses holds simultaneously with probability at least ``1 - ALPHA``; the pairs of one
length share random numbers across temperatures, which a union bound allows. Each growth claim needs enough pairs
per cell for a finite upper bound at its per-bound confidence (:func:`minimum_pairs`); below that it is inconclusive
and says what limits it: the pairs, the step budget (a censored quantile) or both. ``power`` is a plug-in estimate:
the fraction of resamples of this one sample (pairs resampled within each length, jointly across temperatures, as
they share random numbers) in which the rule says ``holds``; it varies from sample to sample (0.40 to 1.00 over ten
Curie-Weiss samples whose replicate power is 0.74), so the design's power, over independent replicates, is the
operating-characteristics table of "How the verdicts are decided" (``benchmarks/claims_operating_characteristics.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

import torch

from .._random import Randomness, as_generator
from .influence import InfluenceEstimate
from .meeting import MeetingTimes
from .rectangle import RectangleReport
from .scaling import (
    ExponentialRate,
    Growth,
    exponential_rate,
    fit_scaling,
    growth_exponent,
    polynomial_slope,
    slow_brackets,
)

HOLDS, FAILS, OPEN = "holds", "does not hold", "inconclusive"
KAPPA = 3.0  # metastable: growth faster than n^KAPPA between the smallest and largest length
CLAIM_LEVEL = 0.9  # the meeting-time quantile the growth claims read: the slow mode of a two-basin chain
ALPHA = 0.05  # each claim's bounds hold together with probability at least 1 - ALPHA
POWER_RESAMPLES = 200


@dataclass
class Claim:
    """One claim of the paper with its verdict, the evidence behind it, the sample it rests on and its power.

    Attributes:
        sample: the design the verdict rests on, in words (pairs per cell, lengths, temperatures).
        power: plug-in power (fraction of resamples of the design in which the rule says ``holds``); ``nan`` for a
            certificate or a claim without a rule.
    """

    name: str
    statement: str
    verdict: str
    evidence: list[str] = field(default_factory=list)
    sample: str = ""
    power: float = math.nan


@dataclass
class ClaimsReport:
    """Every claim, and the contradictions between pieces of evidence."""

    claims: list[Claim]
    contradictions: list[str]

    def to_dict(self) -> dict:
        """The claims and the contradictions between their evidence, as a JSON-ready dict."""
        return {"claims": [asdict(c) for c in self.claims], "contradictions": list(self.contradictions)}


Cells = Mapping[tuple[float, int], MeetingTimes]


@dataclass
class Evidence:
    """What the claims read: the meeting times of each ``(tau, n)`` cell (the pairs of one length share random
    numbers across temperatures), the rectangle test, the influence estimate, the fraction of observations in a
    trap per temperature, and the number and stream of the power resamples (0: no power)."""

    times: Cells = field(default_factory=dict)
    rectangles: RectangleReport | None = None
    influence: InfluenceEstimate | None = None
    trapped: Mapping[float, float] = field(default_factory=dict)
    seed: Randomness = 0
    power_resamples: int = POWER_RESAMPLES


def minimum_pairs(level: float, confidence: float) -> int:
    """Fewest pairs per cell for which the ``level`` quantile has a finite upper bound at ``confidence``:
    ``1 - level^m >= confidence``."""
    return math.ceil(math.log(1 - confidence) / math.log(level) - 1e-12)


def _design(times: Cells) -> str:
    pairs = sorted({t.times.numel() for t in times.values()})
    lengths = sorted({n for _, n in times})
    temperatures = sorted({tau for tau, _ in times})
    count = f"{pairs[0]}" if len(pairs) == 1 else f"{pairs[0]}-{pairs[-1]}"
    return f"{count} pairs per cell; n = {lengths}; {len(temperatures)} temperatures"


def incompatibility(evidence: Evidence) -> Claim:
    """Conditionals incompatible: holds when a rectangle certifies it (``|R|`` above the float tolerance)."""
    statement = "the conditionals are incompatible: no joint distribution has them"
    report = evidence.rectangles
    if report is None or report.values.numel() == 0:
        return Claim("incompatible", statement, OPEN, ["no rectangle test was run"])
    count = int((report.values.abs() > report.tolerance).sum())
    total = report.values.numel()
    line = (f"{count} of {total} rectangles have |R| above the float tolerance (prevalence {report.prevalence:.3f}; "
            f"median |R| {float(report.values.abs().median()):.3g} nats)")
    sample = f"{total} rectangles"
    if count:
        return Claim("incompatible", statement, HOLDS, [line + ": any one of them certifies incompatibility"], sample)
    return Claim("incompatible", statement, OPEN,
                 [line + ": consistent with compatible conditionals, which no sample of rectangles can certify"],
                 sample)


def _fast_mixing_verdict(times: Cells) -> tuple[str, list[str]]:
    top = max(tau for tau, _ in times)
    fit = fit_scaling({n: t for (tau, n), t in times.items() if tau == top}, confidence=1 - ALPHA / 2)
    if fit.note:
        return OPEN, [f"tau={top:g}: {fit.note}"]
    if math.isnan(fit.slope_low):
        return OPEN, [f"tau={top:g}: too few pairs for an interval of the slope"]
    counts = [times[(top, n)].times.numel() for n in fit.lengths]
    nearest, quadratic = polynomial_slope(fit.lengths, counts, 1.5), polynomial_slope(fit.lengths, counts, 2.0)
    verdict = HOLDS if fit.slope_high < nearest else OPEN
    ratios = ", ".join(f"{fit.mean_times[n] / (n * math.log(n)):.3g}" for n in fit.lengths)
    lines = [f"tau={top:g}: slope of log T on log(n log n) {fit.slope:.2f} [{fit.slope_low:.2f}, "
             f"{fit.slope_high:.2f}] ({fit.confidence:.0%} Student-t over {fit.num_pairs} pairs, n = {fit.lengths}); "
             f"mean T / (n log n): {ratios}"]
    if verdict == HOLDS:
        lines.append(f"C(tau) = {fit.C:.3g} [{fit.C_low:.3g}, {fit.C_high:.3g}]: the fit T = n (C log n + B) on the "
                     f"lengths used, B = {fit.B:.3g}" + ("" if math.isnan(fit.C_inf) else
                     f"; extrapolated with a finite-size term D / n, C_inf = {fit.C_inf:.3g} [{fit.C_inf_low:.3g}, "
                     f"{fit.C_inf_high:.3g}]"))
    elif fit.slope_high < quadratic:
        lines.append(f"slower than n^2 at these lengths (its slope is {quadratic:.2f}), but n^1.5 (slope "
                     f"{nearest:.2f}) is not excluded: at n = {fit.lengths} it grows like n log n (slope 1); an "
                     f"interval narrower than {nearest - 1:.2f} on its upper side, or longer lengths, would separate "
                     "them")
    elif fit.slope_low > quadratic:
        lines.append(f"faster than n^2 at these lengths (its slope is {quadratic:.2f}): tau={top:g} may not be high "
                     "enough; a higher temperature, or longer lengths, would decide")
    lines.append(f"rule: holds when the interval lies below {nearest:.3g}, the slope of n^1.5 at these lengths (the "
                 "nearest polynomial alternative to n log n); never refuted (the claim is about high enough "
                 "temperatures)")
    return verdict, lines


def _growths(times: Cells) -> list[Growth]:
    """The growth exponent of :data:`CLAIM_LEVEL` between the smallest and largest length at each temperature, each
    cell bound at ``1 - ALPHA / (4 T)`` (four bounds per temperature, Bonferroni)."""
    lengths = sorted({n for _, n in times})
    small, large = lengths[0], lengths[-1]
    temperatures = sorted({tau for tau, n in times if n in (small, large)})
    confidence = 1 - ALPHA / (4 * len(temperatures))
    return [growth_exponent(times[(tau, small)], times[(tau, large)], small, large, temperature=tau,
                            level=CLAIM_LEVEL, confidence=confidence)
            for tau in temperatures if (tau, small) in times and (tau, large) in times]


def _growth_lines(growths: list[Growth], times: Cells) -> list[str]:
    confidence = growths[0].confidence
    lines = [f"tau={g.temperature:g}: {g.describe()}" for g in growths]
    lines.append(f"k: exponent of the {CLAIM_LEVEL:.0%} meeting-time quantile (T ~ n^k); bounds from order "
                 f"statistics, each at {confidence:.4f}, all together at >= {1 - ALPHA:.0%}; a censored quantile "
                 "enters as its lower bound")
    limit = _limit(times, confidence)
    return [*lines, limit] if limit else lines


def _pair_shortfall(times: Cells, confidence: float) -> tuple[int, int] | None:
    """``(fewest, needed)`` when some cell has fewer pairs than a bound on the ``CLAIM_LEVEL`` quantile needs at
    ``confidence`` (:func:`minimum_pairs`), else ``None``."""
    needed = minimum_pairs(CLAIM_LEVEL, confidence)
    fewest = min(t.times.numel() for t in times.values())
    return (fewest, needed) if fewest < needed else None


def _limit(times: Cells, confidence: float) -> str:
    """What keeps a quantile's upper bound infinite, if anything: the step budget (the quantile is censored), the
    number of pairs, or both."""
    censored = sorted({n for (_, n), t in times.items() if t.censored_fraction > 1 - CLAIM_LEVEL})
    shortfall = _pair_shortfall(times, confidence)
    pairs = (f"{shortfall[0]} pairs per cell: an upper bound on the quantile at this confidence needs >= "
             f"{shortfall[1]}" if shortfall else "")
    if censored:
        return (f"the step budget limits the decision{'' if pairs else ', not the pairs'}: the {CLAIM_LEVEL:.0%} "
                f"quantile is censored at n = {censored} (bounded from below only); a larger budget "
                f"(grid.max_steps) would decide" + (f"; and {pairs}" if pairs else ""))
    return pairs


def _rates(times: Cells) -> list[ExponentialRate]:
    """Per temperature with every length, the exponential rate net of polynomial growth, each two-sided interval at
    ``1 - ALPHA / (2 T)`` (Bonferroni over the temperatures, and a factor 2 of margin for the skewed log-times of
    exponential-like meeting times, with which a normal lower bound errs more often than its level)."""
    lengths = sorted({n for _, n in times})
    temperatures = sorted({tau for tau, n in times if all((tau, m) in times for m in lengths)})
    confidence = 1 - ALPHA / (2 * max(len(temperatures), 1))
    return [exponential_rate({n: times[(tau, n)] for n in lengths}, temperature=tau, level=CLAIM_LEVEL,
                             confidence=confidence, generator=as_generator(0, "exponential rate", tau))
            for tau in temperatures]


def _metastable_verdict(times: Cells) -> tuple[str, list[str]]:
    lengths = sorted({n for _, n in times})
    if len(lengths) < 3:
        return OPEN, [f"n = {lengths}: exponential against polynomial growth needs three lengths"]
    rates = _rates(times)
    if not rates:
        return OPEN, ["no temperature has every length"]
    lines = [f"tau={r.temperature:g}: {r.describe()}" for r in rates]
    shortfall = _pair_shortfall(times, rates[0].confidence)
    if shortfall:
        fewest, needed = shortfall
        return OPEN, [*lines, f"{fewest} pairs per cell: the {CLAIM_LEVEL:.0%} quantile of so few pairs is one of "
                              "their largest times, whose bootstrap spread understates its own, so these intervals "
                              f"decide nothing; a rate at this confidence needs >= {needed} pairs per cell"]
    verdict = HOLDS if any(r.low > 0 for r in rates) else OPEN
    widths = [(r.high - r.low) / 2 for r in rates if math.isfinite(r.high) and not r.censored]
    if verdict == OPEN and widths:
        lines.append(f"smallest escape rate this design could detect (plug-in: the interval's half-width where no "
                     f"quantile is censored): about {min(widths):.2g} per site; smaller rates are not told from "
                     "polynomial growth at these lengths (longer lengths or more pairs would)")
    elif verdict == OPEN:
        lines.append("no temperature has its quantile below the budget at every length, so the smallest rate this "
                     "design could detect is unknown (a censored quantile's interval measures the budget, not "
                     "the chain)")
    if any(r.censored for r in rates):
        lines.append("a censored quantile enters at the budget, a lower bound: it can only hide growth, never create "
                     "it; a larger budget (grid.max_steps) shows more")
    lines.append(f"rule: log Q = a + k log n + r n for the {CLAIM_LEVEL:.0%} meeting-time quantile Q (bootstrap "
                 f"variances, weighted least squares); holds when at some temperature the lower bound of r (at "
                 f"{rates[0].confidence:.4f} each, all together at >= {1 - ALPHA:.0%}) is above 0: growth faster "
                 "than any polynomial (n^k has r = 0, n log n slightly below); never refuted (a small rate is not "
                 "told from polynomial growth at small n)")
    return verdict, lines


def _cubic_verdict(times: Cells) -> tuple[str, list[str]]:
    if len({n for _, n in times}) < 2:
        return OPEN, ["one length only: growth in n needs at least two"]
    growths = _growths(times)
    verdict = HOLDS if any(g.low > KAPPA for g in growths) else FAILS if all(g.high < KAPPA for g in growths) \
        else OPEN
    rule = (f"rule: holds when some temperature's lower bound exceeds {KAPPA:g}, does not hold when every upper "
            f"bound is below {KAPPA:g} (a statement about these lengths)")
    return verdict, [*_growth_lines(growths, times), rule]


def _boundary_verdict(times: Cells) -> tuple[str, list[str]]:
    lengths = sorted({n for _, n in times})
    if len(lengths) < 3:
        return OPEN, [f"n = {lengths}: a metastable temperature needs three lengths"]
    slow = [r.temperature for r in _rates(times) if r.low > 0]
    fast = [g.temperature for g in _growths(times) if g.high < KAPPA]
    brackets = [b.describe() for b in slow_brackets(times)]
    verdict = HOLDS if slow and any(tau > min(slow) for tau in fast) else OPEN
    lines = [f"metastable (exponential rate above 0) at tau = {slow}" if slow else "no temperature is metastable "
             "here: this grid cannot see a transition, so it cannot refute one (a lower temperature, or longer "
             "lengths, would)", f"confidently slower than n^{KAPPA:g} at tau = {fast}",
             "rule: holds when a metastable temperature has a higher one that grows slower than "
             f"n^{KAPPA:g}: their ratio then grows without bound, so the slow region reaches higher temperatures as "
             "n grows; never refuted",
             "slow region per length (median at least 10x the highest temperature's; each end at >= 95 %): "
             + "; ".join(brackets)]
    return verdict, lines


def _resampled(times: Cells, generator: torch.Generator) -> dict[tuple[float, int], MeetingTimes]:
    """The cells with their pairs resampled with replacement: within each length, one draw of pair indices for every
    temperature (the pairs of one length share random numbers across temperatures)."""
    out = {}
    for n in sorted({n for _, n in times}):
        column = {tau: t for (tau, m), t in times.items() if m == n}
        count = min(t.times.numel() for t in column.values())
        pick = torch.randint(count, (count,), generator=generator)
        for tau, t in column.items():
            out[(tau, n)] = MeetingTimes(times=t.times.cpu()[pick], censored=t.censored.cpu()[pick], lag=t.lag,
                                         max_steps=t.max_steps)
    return out


def _power(rule: Callable[[Cells], tuple[str, list[str]]], evidence: Evidence, name: str) -> float:
    count = evidence.power_resamples
    if count < 1 or len({n for _, n in evidence.times}) < 2:
        return math.nan
    generator = as_generator(evidence.seed, "claims", name)
    return sum(rule(_resampled(evidence.times, generator))[0] == HOLDS for _ in range(count)) / count


def _scaling_claim(name: str, statement: str, rule: Callable[[Cells], tuple[str, list[str]]],
                   evidence: Evidence) -> Claim:
    if not evidence.times:
        return Claim(name, statement, OPEN, ["no coupled pairs"])
    verdict, lines = rule(evidence.times)
    power = _power(rule, evidence, name)
    if not math.isnan(power):
        lines.append(f"plug-in power {power:.2f}: the fraction of {evidence.power_resamples} resamples of this "
                     "sample's pairs in which the rule says holds; one sample's estimate, which varies from sample "
                     "to sample (the design's power over replicates: the docs' operating characteristics)")
    return Claim(name, statement, verdict, lines, _design(evidence.times), power)


def fast_mixing(evidence: Evidence) -> Claim:
    """``O(n log n)`` mixing at the highest grid temperature (see the module docstring)."""
    return _scaling_claim("fast_mixing", "at high temperature, meeting times grow like n log n (O(n log n) mixing)",
                          _fast_mixing_verdict, evidence)


def metastability(evidence: Evidence) -> Claim:
    """Metastable: growth faster than any polynomial at some temperature (a rising local exponent; see the module
    docstring); the time trapped is shown beside it."""
    claim = _scaling_claim("metastable", "below the boundary the chains are metastable: escape times grow "
                           "exponentially in n", _metastable_verdict, evidence)
    if evidence.trapped:
        claim.evidence.append("time trapped (drift within the trap radius for the dwell): " +
                              ", ".join(f"tau={tau:g}: {fraction:.0%}"
                                        for tau, fraction in sorted(evidence.trapped.items())))
    return claim


def faster_than_cubic(evidence: Evidence) -> Claim:
    """Growth faster than ``n^KAPPA`` between the smallest and largest length at some temperature."""
    return _scaling_claim("faster_than_n3", f"at some temperature meeting times grow faster than n^{KAPPA:g} at the "
                          "lengths measured (a polynomial slow-down at least)", _cubic_verdict, evidence)


def boundary_moves_up(evidence: Evidence) -> Claim:
    """The boundary moves up with ``n`` (see the module docstring)."""
    return _scaling_claim("boundary_moves_up", "the boundary tau_c(n) moves to higher temperature as n grows",
                          _boundary_verdict, evidence)


def dobrushin(evidence: Evidence) -> tuple[Claim, list[str]]:
    """The Dobrushin claim, and the contradictions between the influence estimate and the meeting times."""
    statement = "above the Dobrushin temperature tau* (influence coefficient below 1) mixing is O(n log n)"
    estimate = evidence.influence
    if estimate is None:
        return Claim("dobrushin", statement, OPEN, ["no influence estimate was run"]), []
    coefficients = dict(zip(estimate.temperatures.tolist(), estimate.dobrushin.tolist(), strict=True))
    failing = [tau for tau, alpha in coefficients.items() if alpha >= 1]
    lines = ["estimated coefficient (a lower estimate over " f"{len(estimate.sites)} sites): " +
             ", ".join(f"tau={tau:g}: {alpha:.2f}" for tau, alpha in sorted(coefficients.items()))]
    if failing:
        lines.append(f"certified: the condition fails at tau <= {max(failing):g} (an estimate of 1 or more is a "
                     "lower bound on the coefficient)")
    below = sorted(tau for tau, alpha in coefficients.items() if alpha < 1)
    if below and min(below) == min(coefficients):
        lines.append("every grid temperature has an estimate below 1: tau* is below the grid, and an estimate "
                     "below 1 certifies nothing")
    elif below:
        lines.append(f"estimates below 1 from tau={min(below):g}: not a certificate (the estimate only bounds the "
                     "coefficient from below)")
    contradictions = []
    for tau, alpha in sorted(coefficients.items()):
        stuck = [(n, t.censored_fraction) for (t_, n), t in sorted(evidence.times.items())
                 if t_ == tau and t.censored_fraction >= 0.5]
        if alpha < 1 and stuck:
            cells = ", ".join(f"{fraction:.0%} at n={n}" for n, fraction in stuck)
            contradictions.append(
                f"tau={tau:g}: the influence estimate {alpha:.2f} is below 1, yet pairs never met within the budget "
                f"({cells}): the estimate is a lower bound of Dobrushin's coefficient and does not show it below 1 "
                "there")
    sample = f"{len(estimate.sites)} sites, {len(coefficients)} temperatures"
    return Claim("dobrushin", statement, OPEN, lines, sample), contradictions


def assess_claims(evidence: Evidence) -> ClaimsReport:
    """Every claim of the module docstring on ``evidence``."""
    dobrushin_claim, contradictions = dobrushin(evidence)
    claims = [incompatibility(evidence), fast_mixing(evidence), boundary_moves_up(evidence), metastability(evidence),
              faster_than_cubic(evidence), dobrushin_claim]
    return ClaimsReport(claims=claims, contradictions=contradictions)


__all__ = ["ALPHA", "CLAIM_LEVEL", "FAILS", "HOLDS", "KAPPA", "OPEN", "POWER_RESAMPLES", "Claim",
           "ClaimsReport", "Evidence", "assess_claims", "boundary_moves_up", "dobrushin", "fast_mixing",
           "faster_than_cubic", "incompatibility", "metastability", "minimum_pairs"]
