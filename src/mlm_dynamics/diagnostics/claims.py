"""The paper's claims, checked against what a run measured: a verdict, its evidence, and the contradictions named.

arXiv 2605.16378 claims, for Glauber dynamics on MLM conditionals:

1. ``incompatible``: the conditionals are generally incompatible (no joint distribution has them);
2. ``fast_mixing``: at high temperature, meeting times grow like ``n log n`` (O(n log n) mixing);
3. ``boundary_moves_up``: the boundary ``tau_c(n)`` moves to higher temperature as ``n`` grows;
4. ``metastable``: below the boundary the chains are metastable (pairs stay apart for the whole budget);
5. ``dobrushin``: above the Dobrushin temperature ``tau*`` (influence coefficient below 1) mixing is O(n log n).

Each :class:`Claim` gets ``holds``, ``does not hold`` or ``inconclusive`` with the evidence behind it, worded as what
each figure is. The rectangle test is a certificate: one rectangle beyond the float tolerance proves incompatibility.
A sampled influence coefficient is a lower estimate of Dobrushin's (a supremum over configurations), so an estimate
of 1 or more certifies that the condition fails, while an estimate below 1 certifies nothing. A ``tau*`` at the
lowest grid temperature means no temperature of the grid crossed 1 and is reported as below the grid. Where two
pieces of evidence disagree the disagreement is stated in :attr:`ClaimsReport.contradictions` instead of printing
both.

Rules (``lengths`` per temperature are the lengths whose pairs all met, :class:`~.scaling.ScalingFit`):
``fast_mixing`` is judged at the highest temperature with two such lengths: it holds when the bootstrap interval of
the log-log slope of ``T`` against ``n log n`` is at most 1 wide and not entirely above ``SLOPE_LIMIT``, and does not
hold when it is entirely above.
``boundary_moves_up`` holds when the bootstrap interval of ``tau_c`` at the largest length lies above that at the
smallest, and does not hold when it lies below. ``metastable`` holds when at the lowest temperature at least half of
the pairs at the largest length never met and censoring does not fall with ``n``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from .influence import InfluenceEstimate
from .rectangle import RectangleReport
from .scaling import BoundaryPoint, ScalingFit

HOLDS, FAILS, OPEN = "holds", "does not hold", "inconclusive"
SLOPE_LIMIT = 1.25  # a log-log slope above this is faster growth than n log n at the lengths of a grid


@dataclass
class Claim:
    """One claim of the paper with its verdict and the evidence behind it."""

    name: str
    statement: str
    verdict: str
    evidence: list[str] = field(default_factory=list)


@dataclass
class ClaimsReport:
    """Every claim, and the contradictions between pieces of evidence."""

    claims: list[Claim]
    contradictions: list[str]

    def to_dict(self) -> dict:
        """The claims and the contradictions between their evidence, as a JSON-ready dict."""
        return {"claims": [asdict(c) for c in self.claims], "contradictions": list(self.contradictions)}


@dataclass
class Evidence:
    """What the claims read. ``censored`` maps ``(tau, n)`` to the censored fraction of the cell's pairs and
    ``pairs`` to its number of pairs; ``fits``, ``boundary`` are per temperature and per length."""

    censored: Mapping[tuple[float, int], float]
    pairs: Mapping[tuple[float, int], int]
    budget: int
    fits: Mapping[float, ScalingFit] = field(default_factory=dict)
    boundary: Sequence[BoundaryPoint] = ()
    rectangles: RectangleReport | None = None
    influence: InfluenceEstimate | None = None
    trapped: Mapping[float, float] = field(default_factory=dict)  # fraction of observations in a trap, per tau


def _temperature(value: float) -> str:
    if value == 0:
        return "below the grid"
    return "above the grid" if math.isinf(value) else f"{value:.3g}"


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
    if count:
        return Claim("incompatible", statement, HOLDS, [line + ": any one of them certifies incompatibility"])
    return Claim("incompatible", statement, FAILS, [line + ": the probed rectangles are consistent with a joint"])


def fast_mixing(evidence: Evidence) -> Claim:
    """``O(n log n)`` mixing at high temperature: the log-log slope of the restricted mean against ``n log n``."""
    statement = "at high temperature, meeting times grow like n log n (O(n log n) mixing)"
    lines, verdicts = [], []
    for tau, fit in sorted(evidence.fits.items()):
        if len(fit.lengths) < 2:
            continue
        ratios = [fit.mean_times[n] / (n * math.log(n)) for n in fit.lengths]
        precise = fit.slope_high - fit.slope_low <= 1.0
        verdict = FAILS if fit.slope_low > SLOPE_LIMIT else HOLDS if precise else OPEN
        verdicts.append(verdict)
        lines.append(f"tau={tau:g}: slope of log T on log(n log n) {fit.slope:.2f} [{fit.slope_low:.2f}, "
                     f"{fit.slope_high:.2f}] over n = {fit.lengths}; T / (n log n) from {min(ratios):.2g} to "
                     f"{max(ratios):.2g}" + ("; faster than n log n here" if verdict == FAILS else ""))
    if not lines:
        return Claim("fast_mixing", statement, OPEN, ["no temperature has two lengths whose pairs all met"])
    lines.append(f"verdict from the highest temperature with two uncensored lengths (a slope interval entirely above "
                 f"{SLOPE_LIMIT} is faster growth; one wider than 1 is inconclusive)")
    return Claim("fast_mixing", statement, verdicts[-1], lines)


def boundary_moves_up(evidence: Evidence) -> Claim:
    """The phase boundary moves up with ``n``: ``tau_c(n)`` non-decreasing, judged on bootstrap intervals."""
    statement = "the boundary tau_c(n) moves to higher temperature as n grows"
    points = sorted(evidence.boundary, key=lambda p: p.num_sites)
    lines = [f"n={p.num_sites}: tau_c {_temperature(p.temperature) if p.status == 'interpolated' else p.status}"
             f" [{_temperature(p.low)}, {_temperature(p.high)}]" for p in points]
    if len(points) < 2:
        return Claim("boundary_moves_up", statement, OPEN, [*lines, "one length only"])
    first, last = points[0], points[-1]
    if math.isnan(first.low) or math.isnan(last.low):
        return Claim("boundary_moves_up", statement, OPEN, [*lines, "no bootstrap interval"])
    if last.low > first.high:
        return Claim("boundary_moves_up", statement, HOLDS, lines)
    if last.high < first.low:
        return Claim("boundary_moves_up", statement, FAILS, lines)
    return Claim("boundary_moves_up", statement, OPEN, [*lines, "the intervals of the smallest and largest n overlap"])


def metastability(evidence: Evidence) -> Claim:
    """Metastable below the boundary: censored fractions at the lowest temperature (and the time trapped)."""
    statement = "below the boundary the chains are metastable: coupled pairs stay apart for the whole budget"
    if not evidence.censored:
        return Claim("metastable", statement, OPEN, ["no coupled pairs"])
    lowest = min(tau for tau, _ in evidence.censored)
    row = sorted((n, fraction) for (tau, n), fraction in evidence.censored.items() if tau == lowest)
    lines = [f"tau={lowest:g}: never met within {evidence.budget} steps: " +
             ", ".join(f"n={n}: {fraction:.0%} of {evidence.pairs[(lowest, n)]}" for n, fraction in row)]
    if evidence.trapped:
        lines.append("time trapped (drift within the trap radius for the dwell): " +
                     ", ".join(f"tau={tau:g}: {fraction:.0%}" for tau, fraction in sorted(evidence.trapped.items())))
    largest = row[-1][1]
    if largest >= 0.5 and largest >= row[0][1]:
        return Claim("metastable", statement, HOLDS, lines)
    if max(evidence.censored.values()) == 0:
        return Claim("metastable", statement, OPEN, [*lines, "every pair of the grid met within the budget: the "
                                                            "grid does not reach a metastable regime"])
    return Claim("metastable", statement, OPEN, lines)


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
        stuck = [(n, share) for (t, n), share in sorted(evidence.censored.items()) if t == tau and share >= 0.5]
        if alpha < 1 and stuck:
            cells = ", ".join(f"{fraction:.0%} at n={n}" for n, fraction in stuck)
            contradictions.append(
                f"tau={tau:g}: the influence estimate {alpha:.2f} is below 1, yet pairs never met within "
                f"{evidence.budget} steps ({cells}): the estimate is a lower bound of Dobrushin's coefficient and does "
                "not show it below 1 there")
    return Claim("dobrushin", statement, OPEN, lines), contradictions


def assess_claims(evidence: Evidence) -> ClaimsReport:
    """Every claim of the module docstring on ``evidence``."""
    dobrushin_claim, contradictions = dobrushin(evidence)
    claims = [incompatibility(evidence), fast_mixing(evidence), boundary_moves_up(evidence), metastability(evidence),
              dobrushin_claim]
    return ClaimsReport(claims=claims, contradictions=contradictions)


__all__ = ["FAILS", "HOLDS", "OPEN", "SLOPE_LIMIT", "Claim", "ClaimsReport", "Evidence", "assess_claims",
           "boundary_moves_up", "dobrushin", "fast_mixing", "incompatibility", "metastability"]
