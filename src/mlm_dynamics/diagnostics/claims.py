"""The paper's claims, checked against what a run measured: a verdict, its evidence, its sample size and its power.

arXiv 2605.16378 claims, for Glauber dynamics on MLM conditionals:

1. ``incompatible``: the conditionals are generally incompatible (no joint distribution has them);
2. ``fast_mixing``: at high temperature, meeting times grow like ``n log n`` (O(n log n) mixing);
3. ``boundary_moves_up``: the boundary ``tau_c(n)`` moves to higher temperature as ``n`` grows;
4. ``metastable``: below the boundary the chains are metastable (escape times exponential in ``n``);
5. ``dobrushin``: above the Dobrushin temperature ``tau*`` (influence coefficient below 1) mixing is O(n log n).

Every verdict is ``holds``, ``does not hold`` or ``inconclusive``, and no rule reads the step budget: a censored time
is a lower bound, which can only weaken the evidence, never create it. The rules (operating characteristics on models
whose truth is known are on the documentation page "How the verdicts are decided"):

- ``incompatible`` holds when one rectangle has ``|R|`` above the float tolerance (a certificate); no sample of
  rectangles certifies compatibility, so it is never ``does not hold``.
- ``fast_mixing`` is judged at the highest grid temperature from :func:`~.scaling.fit_scaling` (every pair of every
  length; a censored pair leaves it inconclusive): it holds when the Student-t interval of the slope of ``log T``
  against ``log(n log n)`` lies below the slope ``n^2`` has at the grid's lengths (:func:`quadratic_slope`, 1.33 for
  n = 4..16, 1.39 for 4..32; ``n log n`` has 1, or a little more with a negative ``O(n)`` term), and does not hold
  when it lies above. So ``n^2`` growth passes with probability at most 2.5 %; growth between ``n log n`` and
  ``n^2`` (``n^1.5`` has slope about 1.05 here) cannot be told from ``n log n`` at these lengths.
- ``metastable`` reads the growth exponent ``k`` of the 90 % meeting-time quantile between the smallest and largest
  length at each temperature (:func:`~.scaling.growth_exponent`). It holds when at some temperature the lower bound
  of ``k`` exceeds :data:`KAPPA` = 3: faster growth than any polynomial slow-down at these lengths (the 1-D Ising
  chain, which has no transition, grows at most like ``n^3`` below its correlation length), as escape times
  exponential in ``n`` do. It does not hold when every temperature's upper bound is below ``KAPPA``.
- ``boundary_moves_up`` holds when some temperature is metastable in that sense and a higher one confidently grows
  slower than ``n^KAPPA``: the ratio of their meeting times then grows faster than any power of ``n``, so wherever
  one puts the boundary between slow and fast (a factor over the fast phase), it reaches higher temperatures as
  ``n`` grows. It does not hold when no temperature can be metastable. The per-length brackets of the slow region
  (:func:`~.scaling.slow_brackets`) are its evidence.
- ``dobrushin`` stays inconclusive: a sampled influence coefficient is a lower estimate of Dobrushin's, so only an
  estimate of 1 or more certifies anything (that the condition fails there).

Bonferroni: every bound a claim uses holds simultaneously with probability at least ``1 - ALPHA``; the pairs of one
length share random numbers across temperatures, which a union bound allows. Each growth claim needs enough pairs
per cell for a finite upper bound at its per-bound confidence (:func:`minimum_pairs`); below that it is
inconclusive and says so. ``power`` is the plug-in power: the fraction of resamples of the design (pairs resampled
within each length, jointly across temperatures, as they share random numbers) in which the rule says ``holds``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import torch

from .._random import Randomness, as_generator
from .influence import InfluenceEstimate
from .meeting import MeetingTimes
from .rectangle import RectangleReport
from .scaling import Growth, fit_scaling, growth_exponent, slow_brackets

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


def quadratic_slope(lengths: Sequence[int], counts: Sequence[int]) -> float:
    """The least-squares slope of ``log(n^2)`` on ``log(n log n)`` over ``counts[k]`` pairs at each ``lengths[k]``:
    what ``n^2`` growth looks like to :func:`~.scaling.fit_scaling` at this design."""
    n = torch.cat([torch.full((c,), float(k), dtype=torch.float64) for k, c in zip(lengths, counts, strict=True)])
    x, y = (n * n.log()).log(), 2 * n.log()
    x = x - x.mean()
    return float((x * (y - y.mean())).sum() / (x * x).sum())


def _fast_mixing_verdict(times: Cells) -> tuple[str, list[str]]:
    top = max(tau for tau, _ in times)
    fit = fit_scaling({n: t for (tau, n), t in times.items() if tau == top})
    if fit.note:
        return OPEN, [f"tau={top:g}: {fit.note}"]
    if math.isnan(fit.slope_low):
        return OPEN, [f"tau={top:g}: too few pairs for an interval of the slope"]
    limit = quadratic_slope(fit.lengths, [times[(top, n)].times.numel() for n in fit.lengths])
    verdict = HOLDS if fit.slope_high < limit else FAILS if fit.slope_low > limit else OPEN
    ratios = ", ".join(f"{fit.mean_times[n] / (n * math.log(n)):.3g}" for n in fit.lengths)
    return verdict, [f"tau={top:g}: slope of log T on log(n log n) {fit.slope:.2f} [{fit.slope_low:.2f}, "
                     f"{fit.slope_high:.2f}] ({fit.confidence:.0%} Student-t over {fit.num_pairs} pairs, n = "
                     f"{fit.lengths}); mean T / (n log n): {ratios}; C(tau) = {fit.C:.3g} [{fit.C_low:.3g}, "
                     f"{fit.C_high:.3g}] from T = n (C log n + B), B = {fit.B:.3g}",
                     f"rule: holds when the interval lies below {limit:.3g}, the slope of n^2 at these lengths (n log "
                     "n has 1; growth between the two is not told apart), does not hold when it lies above"]


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
    needed = minimum_pairs(CLAIM_LEVEL, confidence)
    fewest = min(t.times.numel() for t in times.values())
    lines = [f"tau={g.temperature:g}: {g.describe()}" for g in growths]
    lines.append(f"k: exponent of the {CLAIM_LEVEL:.0%} meeting-time quantile (T ~ n^k); bounds from order "
                 f"statistics, each at {confidence:.4f}, all together at >= {1 - ALPHA:.0%}; a censored quantile "
                 "enters as its lower bound")
    if fewest < needed:
        lines.append(f"{fewest} pairs per cell: an upper bound on the quantile at this confidence needs >= {needed}")
    return lines


def _metastable_verdict(times: Cells) -> tuple[str, list[str]]:
    if len({n for _, n in times}) < 2:
        return OPEN, ["one length only: growth in n needs at least two"]
    growths = _growths(times)
    slow = [g for g in growths if g.low > KAPPA]
    if slow:
        verdict = HOLDS
    elif all(g.high < KAPPA for g in growths):
        verdict = FAILS
    else:
        verdict = OPEN
    rule = (f"rule: holds when some temperature's lower bound exceeds {KAPPA:g} (faster than any polynomial "
            f"slow-down at these lengths), does not hold when every upper bound is below {KAPPA:g}")
    return verdict, [*_growth_lines(growths, times), rule]


def _boundary_verdict(times: Cells) -> tuple[str, list[str]]:
    if len({n for _, n in times}) < 2:
        return OPEN, ["one length only"]
    growths = _growths(times)
    slow = [g.temperature for g in growths if g.low > KAPPA]
    fast = [g.temperature for g in growths if g.high < KAPPA]
    brackets = [b.describe() for b in slow_brackets(times)]
    if slow and any(tau > min(slow) for tau in fast):
        verdict = HOLDS
    elif len(fast) == len(growths):
        verdict = FAILS
    else:
        verdict = OPEN
    rule = (f"rule: holds when a temperature grows faster than n^{KAPPA:g} (lower bound) and a higher one slower "
            "(upper bound): their ratio then outgrows every power of n, so the slow region reaches higher temperatures "
            "as n grows; does not hold when no temperature can grow that fast")
    return verdict, [*_growth_lines(growths, times), rule,
                     "slow region per length (median at least 10x the highest temperature's; each end at >= 95 %): "
                     + "; ".join(brackets)]


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
        lines.append(f"plug-in power at this design: {power:.2f} (fraction of {evidence.power_resamples} resamples of "
                     "the pairs in which the rule says holds)")
    return Claim(name, statement, verdict, lines, _design(evidence.times), power)


def fast_mixing(evidence: Evidence) -> Claim:
    """``O(n log n)`` mixing at the highest grid temperature (see the module docstring)."""
    return _scaling_claim("fast_mixing", "at high temperature, meeting times grow like n log n (O(n log n) mixing)",
                          _fast_mixing_verdict, evidence)


def metastability(evidence: Evidence) -> Claim:
    """Metastable: growth faster than ``n^KAPPA`` at some temperature (see the module docstring); the time trapped
    is shown beside it."""
    claim = _scaling_claim("metastable", "below the boundary the chains are metastable: escape times grow "
                           "exponentially in n", _metastable_verdict, evidence)
    if evidence.trapped:
        claim.evidence.append("time trapped (drift within the trap radius for the dwell): " +
                              ", ".join(f"tau={tau:g}: {fraction:.0%}"
                                        for tau, fraction in sorted(evidence.trapped.items())))
    return claim


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
              dobrushin_claim]
    return ClaimsReport(claims=claims, contradictions=contradictions)


__all__ = ["ALPHA", "CLAIM_LEVEL", "FAILS", "HOLDS", "KAPPA", "OPEN", "POWER_RESAMPLES", "Claim",
           "ClaimsReport", "Evidence", "assess_claims", "boundary_moves_up", "dobrushin", "fast_mixing",
           "incompatibility", "metastability", "minimum_pairs", "quadratic_slope"]
