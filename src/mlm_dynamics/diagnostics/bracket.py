"""Both sides of the answer for one cell: a certified lower bound on mixing (witnesses) beside the coupling's upper
side, and the verdict they decide together.

For chains from start ``a`` (a run's start rows) and start ``b`` (random fillings), coupled pair by pair:

- **slow**: ``t_mix(1/4) > t`` certified at 95 % by a witness at the design's horizon ``t``
  (:mod:`.witness`: ``d(t) >= TV(a P^t, b P^t) / 2``);
- **fast**: the pairs met, so ``TV(a P^t, b P^t) <= P(T_meet > t) <= 1/4`` certified at 95 % at some ``t`` within the
  budget: the Clopper-Pearson upper limit of the share of pairs not met by ``t`` (censored pairs count as not met) is
  at most ``1/4``. The scan over ``t`` needs no correction: the share not met never increases with ``t``, so the
  first ``t`` where a wrong statement could be made is the last ``t`` with ``P(T > t) > 1/4``, one binomial test.
  It says that chains from the two starts have forgotten them, not that ``d(t)`` is small (other starts may be
  slower); the report says so;
- **undecided** otherwise, with what it would need: pairs (for a side whose observed share would decide with more
  pairs) or steps (for a side that no number of pairs decides at this horizon).

Where the pairs came in rounds of a sequential design that stopped on what it saw (``looks``), both sides are the
group-sequential tests of :mod:`.sequential` at the look reached; each side keeps its 95 %.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

from .meeting import MeetingTimes
from .sequential import Looks
from .sequential import forgotten_by as sequential_forgotten_by
from .witness import DEFAULT_EPSILON, MixingLowerBound, clopper_pearson_lower, paired_sign_pvalue

LEVEL = 0.95


def _upper_limit(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson upper limit of a binomial proportion with ``k`` of ``n``."""
    return 1 - clopper_pearson_lower(n - k, n, alpha)


def pairs_to_decide(share: float, threshold: float, *, above: bool, level: float = LEVEL,
                    most: int = 100_000) -> int | None:
    """Least ``N`` at which an observed ``share`` (kept as ``round(share N)`` of ``N``) puts the one-sided
    Clopper-Pearson limit beyond ``threshold``: the lower limit above it (``above=True``) or the upper limit below it;
    None when the share itself is not beyond the threshold (no number of pairs decides it) or ``most`` is not
    enough."""
    if (share <= threshold) if above else (share >= threshold):
        return None
    alpha, n = 1 - level, 1
    while n <= most:
        k = round(share * n)
        if (clopper_pearson_lower(k, n, alpha) > threshold) if above else (_upper_limit(k, n, alpha) <= threshold):
            return n
        n = n + 1 if n < 64 else math.ceil(n * 1.05)
    return None


def pairs_to_separate(separated: float, reversed_share: float, epsilon: float = DEFAULT_EPSILON, *,
                      level: float = LEVEL) -> int | None:
    """About how many coupled pairs a binary witness that tells apart a share ``separated`` of them the right way
    and ``reversed_share`` the wrong way (the rest ties) needs to certify ``d(t) > epsilon``: the least ``N <= 1024``
    at which :func:`~.witness.paired_sign_pvalue` of ``2 epsilon`` is at most ``1 - level`` with the shares kept by
    rounding (doubling, then bisection: an estimate within a few pairs), beyond that the normal approximation
    ``z^2 (1 - 4 epsilon^2) / (gap - 2 epsilon)^2`` (the p-value's worst law at ``E D = 2 epsilon`` has no ties, so
    its variance). None when the gap ``separated - reversed_share`` is not above ``2 epsilon``: no number of pairs
    certifies it. Cost: ``O(log N)`` p-values of up to 1024 pairs."""
    gap = separated - reversed_share
    if gap <= 2 * epsilon:
        return None

    def certifies(n: int) -> bool:
        plus, minus = round(separated * n), round(reversed_share * n)
        return paired_sign_pvalue(2 * epsilon, plus, n - plus - minus, minus) <= 1 - level

    high, most = 1, 1024
    while not certifies(high):
        if high == most:
            z = float(stats.norm.ppf(level))
            return max(most + 1, math.ceil(z ** 2 * (1 - 4 * epsilon ** 2) / (gap - 2 * epsilon) ** 2))
        high *= 2
    low = high // 2  # 0 or a size that does not certify
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if certifies(middle) else (middle, high)
    return high


@dataclass
class MixingBracket:
    """Both sides of mixing in one cell (module docstring).

    Attributes:
        slow_beyond: ``t`` with ``t_mix(1/4) > t`` certified at ``level`` (the witness horizon), or None.
        forgotten_by: the first ``t`` at which ``TV(a P^t, b P^t) <= 1/4`` is certified at ``level`` by the
            coupling, or None.
        horizon: the witness test's step (``slow`` is judged there).
        budget: the steps the pairs were followed.
        needs: what an undecided cell would need (empty when decided).
        level: the confidence of each side.
        pairs: the pairs from the two starts the sides were decided on.
        looks: the pairs at each planned look of a sequential design (``pairs`` one of them), or None.
    """

    slow_beyond: int | None
    forgotten_by: int | None
    horizon: int | None
    budget: int
    needs: str = ""
    level: float = LEVEL
    pairs: int = 0
    looks: tuple[int, ...] | None = None

    @property
    def look(self) -> int | None:
        """1-based number of the look the sides were decided at (None for a fixed number of pairs)."""
        return None if self.looks is None or self.pairs not in self.looks else self.looks.index(self.pairs) + 1

    @property
    def verdict(self) -> str:
        """``slow``, ``fast`` or ``undecided`` (``slow`` where both sides are certified: they concern different
        times, and a lower bound on ``t_mix`` is the stronger word about the sampler)."""
        if self.slow_beyond is not None:
            return "slow"
        return "fast" if self.forgotten_by is not None else "undecided"

    def summary(self) -> dict[str, float]:
        """``mixing_time_exceeds`` (:attr:`slow_beyond`, the witness bound's own key) and ``forgotten_by`` (``nan``
        where not certified), ``horizon``, ``budget``, ``level``."""
        def value(x: int | None) -> float:
            return math.nan if x is None else float(x)

        return {"mixing_time_exceeds": value(self.slow_beyond), "forgotten_by": value(self.forgotten_by),
                "horizon": value(self.horizon), "budget": float(self.budget), "level": self.level,
                "pairs": float(self.pairs), "look": value(self.look)}

    def design(self) -> str:
        """``14 pairs, look 2 of 6`` for a sequential design, ``14 pairs`` for a fixed one."""
        look = self.look
        return f"{self.pairs} pairs" + ("" if look is None or self.looks is None else
                                        f", look {look} of {len(self.looks)}")

    def text(self) -> str:
        """One line: the verdict with its certified numbers, or what it would need."""
        if self.verdict == "slow":
            return f"slow: t_mix(1/4) > {self.slow_beyond} steps ({self.level:.0%}; {self.design()})"
        if self.verdict == "fast":
            return (f"fast from these starts: TV <= 1/4 by step {self.forgotten_by} ({self.level:.0%}; "
                    f"{self.design()}; other starts may be slower)")
        return f"undecided: {self.needs}"

    def cell_text(self) -> str:
        """The bracket on ``t_mix(1/4)`` in a few characters, for a figure's cell: ``> 80``, ``<= 95`` (from these
        starts), ``> 80, <= 400``, or ``?``."""
        sides = ([f"> {self.slow_beyond}"] if self.slow_beyond is not None else []) + \
            ([f"<= {self.forgotten_by}"] if self.forgotten_by is not None else [])
        return ", ".join(sides) if sides else "?"


def forgotten_by(meeting: MeetingTimes, level: float = LEVEL, epsilon: float = DEFAULT_EPSILON) -> int | None:
    """The first met time ``t`` at which the Clopper-Pearson upper limit (at ``level``) of the share of pairs not met
    by ``t`` (censored pairs count as not met) is at most ``epsilon``: ``TV(a P^t, b P^t) <= epsilon`` certified, so
    ``t_mix(epsilon) <= t`` from these starts (module docstring: the scan needs no correction). None if no such
    ``t``. Cost: none."""
    n = meeting.times.numel()
    for t in sorted({int(t) for t, c in zip(meeting.times.tolist(), meeting.censored.tolist(), strict=True)
                     if not c}):
        k = int(((meeting.times > t) | meeting.censored).sum())
        if _upper_limit(k, n, 1 - level) <= epsilon:
            return t
    return None


def mixing_bracket(meeting: MeetingTimes, lower: MixingLowerBound | None, *, epsilon: float = DEFAULT_EPSILON,
                   looks: tuple[int, ...] | None = None, needs: str | None = None) -> MixingBracket:
    """The two sides of one cell from its coupled pairs' meeting times (upper side) and the paired witness bound of
    the same or further pairs at one horizon (``lower``; None where no witness was tested). ``looks``: the pairs at
    the planned looks of a sequential design (the meeting times' pairs one of them): the fast side is then its
    group-sequential test (:func:`~.sequential.forgotten_by`), and ``lower`` must be the design's repeated bound;
    ``needs``: what an undecided cell would need, as the design's planner prices it (default: priced here for a
    fixed number of pairs). Cost: none."""
    budget = int(meeting.budget)
    n = meeting.times.numel()
    sequential = looks is not None and len(looks) > 1
    if sequential:
        assert looks is not None
        if n not in looks:
            raise ValueError(f"looks: the {n} pairs are not one of the planned looks {list(looks)}")
        forgotten = sequential_forgotten_by(Looks(looks, LEVEL), looks.index(n), meeting.times.tolist(),
                                            meeting.censored.tolist(), epsilon)
    else:
        forgotten = forgotten_by(meeting, LEVEL, epsilon)
    slow_beyond = None if lower is None else lower.mixing_time_exceeds
    horizon = None if lower is None else int(lower.times[-1])
    planned = tuple(looks) if sequential and looks is not None else None
    if needs is not None:
        return MixingBracket(slow_beyond=slow_beyond, forgotten_by=forgotten, horizon=horizon, budget=budget,
                             needs="" if slow_beyond is not None or forgotten is not None else needs, pairs=n,
                             looks=planned)
    needs_list = []
    if slow_beyond is None and forgotten is None:
        if lower is not None:
            gap = float(lower.gap[-1])
            separated = float(lower.separated[-1]) if lower.separated is not None else max(gap, 0.0)
            pairs = pairs_to_separate(separated, separated - gap, epsilon)
            needs_list.append(f"slow side: {pairs} pairs at step {horizon} if they separate as these did"
                         if pairs is not None else
                         f"slow side: the witness gap is {gap:.0%} of pairs at step {horizon} (separated less "
                         f"reversed); no number of pairs certifies t_mix(1/4) > {horizon} unless it exceeds "
                         f"{2 * epsilon:.0%} (a stronger witness, or starts further apart)")
        else:
            needs_list.append("slow side: no witness was tested (the run job tests at coupling.witness_steps; a sweep "
                              "cell needs 3 or more natural-random pairs)")
        unmet = float(((meeting.times >= budget) | meeting.censored).float().mean()) if n else 1.0
        pairs = pairs_to_decide(unmet, epsilon, above=False)
        needs_list.append(f"fast side: {pairs} pairs if they meet as these did" if pairs is not None else
                          f"fast side: {unmet:.0%} of pairs had not met by step {budget}: more steps")
    return MixingBracket(slow_beyond=slow_beyond, forgotten_by=forgotten, horizon=horizon, budget=budget,
                         needs="; ".join(needs_list), pairs=n, looks=planned)


__all__ = ["MixingBracket", "forgotten_by", "mixing_bracket", "pairs_to_decide", "pairs_to_separate"]
