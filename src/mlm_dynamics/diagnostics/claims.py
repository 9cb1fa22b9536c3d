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
- Slow-side words rest on certified lower bounds of mixing (:mod:`.witness`, per cell :attr:`Evidence.witness`),
  never on meeting times alone: a coupling that never meets may belong to a fast chain. Per cell ``(tau, n)`` the
  witness certifies ``t_mix(1/4) > L`` and the coupling of the same two starts ``t_mix(1/4) <= U``
  (:func:`~.bracket.forgotten_by` on :attr:`Evidence.start_pairs`), each drawn at the claim's Bonferroni share.
- ``metastable`` (escape times exponential in ``n``) needs three lengths ``n1 < n2 < n3`` (smallest, middle,
  largest): it holds when at some temperature the certified local exponent of ``t_mix(1/4)`` rises,
  ``log(L3 / U2) / log(n3 / n2) > log(U2 / L1) / log(n2 / n1)``; no polynomial (with any power of ``log n``) has a
  rising local exponent. It never says "does not hold" (a small rate is not told from polynomial growth at small
  ``n``). Its power is low: the two certified sides of one cell are a factor of at least ``ln 4 / ln(4/3)`` apart
  for an escape-time chain, so only growth far steeper than the lengths' polynomial slack is certified (the
  operating characteristics).
- ``faster_than_n3`` (a polynomial slow-down at least, at the lengths measured) holds when at some temperature
  ``L(n_max) > (n_max / n_min)^KAPPA U(n_min)`` (:data:`KAPPA` = 3), and does not hold - a fast-side statement, from
  the coupling - when at every temperature the :data:`CLAIM_LEVEL` meeting-time quantile's exponent between the
  smallest and largest length has its upper bound below ``KAPPA``.
- ``boundary_moves_up`` holds when some temperature is certified metastable and a higher one's meeting times grow
  confidently slower than ``n^KAPPA``: the ratio of their mixing times then grows without bound, so wherever one puts
  the boundary between slow and fast, it reaches higher temperatures as ``n`` grows. It never says "does not hold";
  the per-length brackets of the slow region (:func:`~.scaling.slow_brackets`, slow only where a witness certifies)
  are its evidence.
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
from dataclasses import asdict, dataclass, field, replace

import torch

from .._random import Randomness, as_generator
from .bracket import forgotten_by
from .influence import InfluenceEstimate
from .meeting import MeetingTimes
from .rectangle import RectangleReport
from .scaling import (
    Growth,
    fit_scaling,
    growth_exponent,
    polynomial_slope,
    slow_brackets,
)
from .witness import PairedWitness

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
    numbers across temperatures), the certified sides of ``t_mix(1/4)`` per cell - ``witness``, the paired witness
    values (the slow side) and ``start_pairs``, the meeting times of the same two starts (the fast side) - the
    rectangle test, the influence estimate, the fraction of observations in a trap per temperature, and the number
    and stream of the power resamples (0: no power)."""

    times: Cells = field(default_factory=dict)
    witness: Mapping[tuple[float, int], PairedWitness] = field(default_factory=dict)
    start_pairs: Cells = field(default_factory=dict)
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


def _fast_mixing_verdict(evidence: Evidence) -> tuple[str, list[str]]:
    times = evidence.times
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


def _certified(evidence: Evidence, tau: float, n: int, alpha: float) -> tuple[int | None, int | None]:
    """``(lower, upper)`` on ``t_mix(1/4)`` in cell ``(tau, n)``, each at ``1 - alpha``: the witness's certified
    ``t_mix > lower`` (None: not certified or no witness) and the coupling's ``t_mix <= upper`` from the cell's two
    starts (None: not certified)."""
    witness, pairs = evidence.witness.get((tau, n)), evidence.start_pairs.get((tau, n))
    lower = None if witness is None else witness.bound(1 - alpha).mixing_time_exceeds
    upper = None if pairs is None or pairs.times.numel() == 0 else forgotten_by(pairs, 1 - alpha)
    return (lower if lower else None), (None if upper is None else max(upper, 1))  # t_mix > 0 says nothing


def _side(value: int | None, word: str) -> str:
    return f"{word} {value}" if value is not None else "not certified"


def _cubic_verdict(evidence: Evidence) -> tuple[str, list[str]]:
    times = evidence.times
    if len({n for _, n in times}) < 2:
        return OPEN, ["one length only: growth in n needs at least two"]
    lengths = sorted({n for _, n in times})
    small, large = lengths[0], lengths[-1]
    temperatures = sorted({tau for tau, n in times if (tau, small) in times and (tau, large) in times})
    alpha = ALPHA / (2 * len(temperatures))
    scale = math.log(large / small)
    certified, lines = [], []
    for tau in temperatures:
        _, upper = _certified(evidence, tau, small, alpha)
        lower, _ = _certified(evidence, tau, large, alpha)
        if lower is not None and upper is not None and math.log(lower / upper) / scale > KAPPA:
            certified.append(tau)
        lines.append(f"tau={tau:g}: t_mix(1/4) at n={small} {_side(upper, '<=')} (coupling), at n={large} "
                     f"{_side(lower, '>')} (witness)" + (f": k > {math.log(lower / upper) / scale:.2f}"
                                                         if lower is not None and upper is not None else ""))
    growths = _growths(times)
    verdict = HOLDS if certified else FAILS if all(g.high < KAPPA for g in growths) else OPEN
    rule = (f"rule: holds when at some temperature the witness's certified lower bound on t_mix(1/4) at n={large} "
            f"exceeds (n ratio)^{KAPPA:g} times the coupling's certified upper bound at n={small} (each at "
            f"{1 - alpha:.4f}, all together at >= {1 - ALPHA:.0%}): a slow-side word needs a certified lower bound, "
            "never censored meeting times alone; does not hold when at every temperature the meeting times "
            f"(the coupling's upper side) grow confidently slower than n^{KAPPA:g} (a statement about these lengths)")
    return verdict, [*lines, "meeting times (the fast side): " + "; ".join(_growth_lines(growths, times)), rule]


def _local_exponents(evidence: Evidence, tau: float, lengths: list[int], alpha: float) -> tuple[float, float] | None:
    """``(upper of the exponent from n1 to n2, lower of the exponent from n2 to n3)`` of ``t_mix(1/4)`` at ``tau``
    for the smallest, middle and largest length, from the witness's lower bounds at n1, n3 and the coupling's
    upper bound at n2 (each at ``1 - alpha``); None where one of them is not certified."""
    n1, n2, n3 = lengths[0], lengths[len(lengths) // 2], lengths[-1]
    low1, _ = _certified(evidence, tau, n1, alpha)
    _, up2 = _certified(evidence, tau, n2, alpha)
    low3, _ = _certified(evidence, tau, n3, alpha)
    if low1 is None or up2 is None or low3 is None:
        return None
    return math.log(up2 / low1) / math.log(n2 / n1), math.log(low3 / up2) / math.log(n3 / n2)


def _every_length(evidence: Evidence) -> tuple[list[int], list[float], float]:
    """``(lengths, temperatures with every length, alpha)``: the design the metastable rule reads, each of its
    three bounds per temperature at ``alpha = ALPHA / (3 T)``."""
    times = evidence.times
    lengths = sorted({n for _, n in times})
    temperatures = sorted({tau for tau, n in times if all((tau, m) in times for m in lengths)})
    return lengths, temperatures, ALPHA / (3 * max(len(temperatures), 1))


def _metastable_verdict(evidence: Evidence) -> tuple[str, list[str]]:
    lengths, temperatures, alpha = _every_length(evidence)
    if len(lengths) < 3:
        return OPEN, [f"n = {lengths}: exponential against polynomial growth needs three lengths"]
    if not temperatures:
        return OPEN, ["no temperature has every length"]
    if not evidence.witness:
        return OPEN, ["no witness test: a slow-side word needs a certified lower bound on mixing, and meeting times "
                      "that grow (or never end) bound it from above only"]
    n1, n2, n3 = lengths[0], lengths[len(lengths) // 2], lengths[-1]
    lines, verdict = [], OPEN
    for tau in temperatures:
        exponents = _local_exponents(evidence, tau, lengths, alpha)
        if exponents is None:
            sides = [_certified(evidence, tau, n, alpha) for n in (n1, n2, n3)]
            lines.append(f"tau={tau:g}: t_mix(1/4) at n={n1} {_side(sides[0][0], '>')}, at n={n2} "
                         f"{_side(sides[1][1], '<=')}, at n={n3} {_side(sides[2][0], '>')}: undecided")
        else:
            rising = exponents[1] > exponents[0]
            verdict = HOLDS if rising else verdict
            lines.append(f"tau={tau:g}: local exponent of t_mix(1/4) n={n1}->{n2} <= {exponents[0]:.2f}, "
                         f"n={n2}->{n3} > {exponents[1]:.2f}" + (": rising (faster than any polynomial)"
                                                                 if rising else ""))
    lines.append(f"rule: holds when at some temperature the certified local exponent of t_mix(1/4) between n={n2} "
                 f"and n={n3} (witness lower bound over coupling upper bound) exceeds its certified upper bound "
                 f"between n={n1} and n={n2} (each bound at {1 - alpha:.4f}, all together at >= {1 - ALPHA:.0%}): "
                 "a rising exponent, which no polynomial (with any power of log n) has; never refuted (a small rate "
                 "is not told from polynomial growth at small n); meeting times alone decide nothing here (a "
                 "coupling that never meets may belong to a fast chain); grid.witness_steps below the budget give the "
                 "smaller lengths a horizon they can be certified at")
    return verdict, lines


def _boundary_verdict(evidence: Evidence) -> tuple[str, list[str]]:
    times = evidence.times
    lengths, temperatures, alpha = _every_length(evidence)
    if len(lengths) < 3:
        return OPEN, [f"n = {lengths}: a metastable temperature needs three lengths"]
    slow = [tau for tau in temperatures
            if (e := _local_exponents(evidence, tau, lengths, alpha)) is not None and e[1] > e[0]]
    fast = [g.temperature for g in _growths(times) if g.high < KAPPA]
    certified = {cell: w.bound(1 - ALPHA / 2).mixing_time_exceeds for cell, w in evidence.witness.items()}
    brackets = [b.describe() for b in slow_brackets(times, slow_beyond=certified)]
    verdict = HOLDS if slow and any(tau > min(slow) for tau in fast) else OPEN
    lines = [f"metastable (certified rising exponent of t_mix) at tau = {slow}" if slow else "no temperature is "
             "certified metastable here: this grid cannot see a transition, so it cannot refute one (a lower "
             "temperature, longer lengths, or more pairs for the witness would)",
             f"meeting times confidently slower than n^{KAPPA:g} at tau = {fast}",
             "rule: holds when a certified metastable temperature has a higher one whose meeting times grow slower "
             f"than n^{KAPPA:g}: their ratio then grows without bound, so the slow region reaches higher "
             "temperatures as n grows; never refuted",
             "slow region per length (certified t_mix(1/4) at least 10x the highest temperature's median meeting "
             "time; each end at >= 95 %): " + "; ".join(brackets)]
    return verdict, lines


def _resampled(evidence: Evidence, generator: torch.Generator) -> Evidence:
    """The evidence with its pairs resampled with replacement: within each length, one draw of pair indices for
    every temperature (the pairs of one length share random numbers across temperatures), for the meeting times,
    the start pairs and the witness's tested pairs alike."""
    def times_of(cells: Cells) -> dict[tuple[float, int], MeetingTimes]:
        out = {}
        for n in sorted({n for _, n in cells}):
            column = {tau: t for (tau, m), t in cells.items() if m == n}
            count = min(t.times.numel() for t in column.values())
            pick = torch.randint(count, (count,), generator=generator)
            for tau, t in column.items():
                out[(tau, n)] = MeetingTimes(times=t.times.cpu()[pick], censored=t.censored.cpu()[pick], lag=t.lag,
                                             max_steps=t.max_steps)
        return out

    witness = {}
    for n in sorted({n for _, n in evidence.witness}):
        column = {tau: w for (tau, m), w in evidence.witness.items() if m == n}
        count = min(w.values_a.shape[1] for w in column.values())
        pick = torch.randint(count, (count,), generator=generator)
        for tau, w in column.items():
            looks = w.looks if w.looks is not None and count in w.looks else None  # plug-in power: any design
            witness[(tau, n)] = PairedWitness(w.times, w.values_a[:, pick], w.values_b[:, pick], w.name, w.learned,
                                              looks)
    return replace(evidence, times=times_of(evidence.times), start_pairs=times_of(evidence.start_pairs),
                   witness=witness)


def _power(rule: Callable[[Evidence], tuple[str, list[str]]], evidence: Evidence, name: str) -> float:
    count = evidence.power_resamples
    if count < 1 or len({n for _, n in evidence.times}) < 2:
        return math.nan
    generator = as_generator(evidence.seed, "claims", name)
    return sum(rule(_resampled(evidence, generator))[0] == HOLDS for _ in range(count)) / count


def _scaling_claim(name: str, statement: str, rule: Callable[[Evidence], tuple[str, list[str]]],
                   evidence: Evidence) -> Claim:
    if not evidence.times:
        return Claim(name, statement, OPEN, ["no coupled pairs"])
    verdict, lines = rule(evidence)
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
