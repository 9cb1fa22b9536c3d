"""Sequential decisions on both sides of one cell: group-sequential exact tests that keep their level when the design
stops on what it saw.

A cell's coupled pairs (start ``a`` against start ``b``, :mod:`.bracket`) arrive in rounds; after each round the
design looks at them, and stops as soon as one side is certified. Testing each look at the full level would not be a
test at that level: with looks after 12, 16, 20, ... pairs the chance that some look succeeds under the null exceeds
``alpha`` (:func:`crossing_probability` measures how much). Here each side's level ``alpha`` is *spent* over a
schedule of looks fixed before any pair is seen, ``N_1 < ... < N_K`` pairs (:class:`Looks`; cumulative spending
``alpha(k) = alpha (N_k / N_K)^rho``, ``rho = 0.15``: most of the level at the first look, where 11 of 12 pairs
told apart and one tie certify, the rest for the looks that must forgive more ties and misses), and the boundary of
each look is the exact one: the largest rejection region such that the probability of crossing some boundary by look
``k`` is at most ``alpha(k)`` under every law of the null (a dynamic programme over the looks, exact, not a
Bonferroni sum). The design may stop at any look, or skip looks, on anything it saw; the probability that any look it
makes rejects a true null is at most ``alpha``.

- **slow** (``TV(a P^h, b P^h) > 2 epsilon`` at the witness horizon ``h``, so ``t_mix(epsilon) > h``): the paired
  differences ``D_i`` in ``{-1, 0, 1}`` of a binary witness fixed before the tested pairs (:mod:`.witness`), the
  statistic ``S_k = K+ - K-`` of the first ``N_k`` tested pairs, rejecting ``E D <= delta`` where ``S_k >= s_k(delta)``;
  the null's worst laws have ``E D = delta`` and the ties' share ``P(D = 0)`` a nuisance, maximized numerically as in
  :func:`~.witness.paired_sign_pvalue`. :func:`slow_lower` inverts it: the *repeated* lower confidence bound on
  ``E D <= TV`` at a look, valid at every look together. One look is the fixed-sample bound
  (:func:`~.witness.paired_sign_lower`), value for value.
- **fast** (``TV(a P^t, b P^t) <= epsilon``): the count ``K_k(t)`` of the first ``N_k`` pairs not met by ``t``
  (pairs not yet followed to ``t`` count as not met), rejecting ``P(T > t) >= epsilon`` where ``K_k(t) <= c_k``.
  The scan over ``t`` and over the times a look is re-read costs nothing: the false statement's event is contained in
  the crossing event of the true meeting times at the last ``t`` with ``TV > epsilon``, where ``P(T > t) > epsilon``
  (coupling inequality), and a binomial count crosses less often the larger its rate.

Each side is a test at ``alpha`` of its own statement: a ``slow`` verdict is false with probability at most
``alpha``, and so is a ``fast`` one (a two-sided bracket holds at ``1 - 2 alpha``). Cost: no forward rows; a
boundary set is ``O(K^2 N^2 G)`` array work for ``N`` pairs and a nuisance grid of ``G`` points (milliseconds), cached.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

RHO = 0.15  # the spending exponent: alpha(k) = alpha (N_k / N_K)^rho, most of the level to the early looks


@dataclass(frozen=True)
class Looks:
    """The planned looks of one side of a cell and the level each spends.

    Attributes:
        pairs: ``N_1 < ... < N_K`` pairs tested at the looks (the first is the first round).
        level: the side's confidence level ``1 - alpha``, spent over the looks.
        rho: the spending exponent: the level spent by look ``k`` is ``alpha (N_k / N_K)^rho``.

    Examples:
        >>> from mlm_dynamics.diagnostics.sequential import Looks
        >>> looks = Looks((12, 16, 24))
        >>> [round(a, 4) for a in looks.spent]
        [0.0451, 0.047, 0.05]
        >>> looks.slow_thresholds(0.5)  # K+ - K- needed at each look to certify TV > 1/2
        (11, 15, 21)
    """

    pairs: tuple[int, ...]
    level: float = 0.95
    rho: float = RHO

    def __post_init__(self) -> None:
        pairs = tuple(self.pairs)
        if not pairs or any(isinstance(n, bool) or not isinstance(n, int) for n in pairs) or pairs[0] < 1 or \
                any(b <= a for a, b in itertools.pairwise(pairs)):
            raise ValueError(f"looks: pairs must be increasing integers >= 1, got {list(self.pairs)}")
        if not 0 < self.level < 1:
            raise ValueError(f"looks: level must be in (0, 1), got {self.level}")
        if not self.rho > 0:
            raise ValueError(f"looks: rho must be > 0, got {self.rho}")
        object.__setattr__(self, "pairs", pairs)

    @property
    def alpha(self) -> float:
        """The side's error rate ``1 - level``."""
        return 1 - self.level

    @property
    def spent(self) -> tuple[float, ...]:
        """Cumulative level spent by each look, ``alpha (N_k / N_K)^rho`` (all of it at the last)."""
        last = self.pairs[-1]
        return tuple(self.alpha * (n / last) ** self.rho for n in self.pairs)

    def shifted(self, learn: int) -> Looks:
        """The looks of the tested pairs when the first ``learn`` pairs fit the witness (they are in every look of
        the fast side, in none of the slow side's)."""
        if learn >= self.pairs[0]:
            raise ValueError(f"looks: the first look ({self.pairs[0]} pairs) must exceed the {learn} learning pairs")
        return Looks(tuple(n - learn for n in self.pairs), self.level, self.rho)

    def at(self, pairs: int) -> int | None:
        """Index of the look at ``pairs`` pairs (the largest look not above it), None before the first."""
        index = int(np.searchsorted(np.asarray(self.pairs), pairs, side="right")) - 1
        return index if index >= 0 else None

    def slow_thresholds(self, delta: float) -> tuple[int, ...]:
        """``s_k``: the look-``k`` test rejects ``E D <= delta`` where ``K+ - K- >= s_k`` (``N_k + 1``: never)."""
        return _slow_boundaries(self.pairs, self.spent, round(delta, 12))[0]

    def fast_thresholds(self, epsilon: float) -> tuple[int, ...]:
        """``c_k``: the look-``k`` test rejects ``P(T > t) >= epsilon`` where at most ``c_k`` pairs are not met by
        ``t`` (``-1``: never)."""
        return _fast_boundaries(self.pairs, self.spent, round(epsilon, 12))


def _nuisance_grid(delta: float, pairs: int) -> np.ndarray:
    """``P(D = -1)`` on ``[0, (1 - delta) / 2]``: the null laws with ``E D = delta`` (the worst ones)."""
    return np.linspace(0.0, (1 - delta) / 2, 65 + math.ceil(8 * math.sqrt(pairs)))


def _trinomial_sums(count: int, minus: np.ndarray, delta: float) -> np.ndarray:
    """``[G, 2 count + 1]`` law of ``K+ - K-`` (index ``s + count``) of ``count`` iid ``D`` with ``P(D = -1) =
    minus [G]`` and ``P(D = 1) = delta + minus``."""
    plus = np.clip(delta + minus, 0, 1)
    zero = np.clip(1 - plus - minus, 0, 1)
    law = np.ones((minus.size, 1))
    for _ in range(count):
        nxt = np.zeros((minus.size, law.shape[1] + 2))
        nxt[:, :-2] += law * minus[:, None]
        nxt[:, 1:-1] += law * zero[:, None]
        nxt[:, 2:] += law * plus[:, None]
        law = nxt
    return law


def _advance(alive: np.ndarray, step: np.ndarray, count: int) -> np.ndarray:
    """Convolve the sub-law ``alive [G, 2 N + 1]`` of ``K+ - K-`` with the law ``step [G, 2 count + 1]`` of the next
    ``count`` pairs' sum (values beyond ``+-N`` cannot occur: the array is sized for the last look)."""
    out = np.zeros_like(alive)
    width = alive.shape[1]
    for j in range(2 * count + 1):
        shift = j - count
        if shift >= 0:
            out[:, shift:] += alive[:, :width - shift] * step[:, j:j + 1]
        else:
            out[:, :shift] += alive[:, -shift:] * step[:, j:j + 1]
    return out


def _paths(pairs: Sequence[int], thresholds: Sequence[int], minus: np.ndarray, delta: float,
           size: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Follow ``K+ - K-`` over the looks ``pairs`` (sub-laws ``[G, 2 size + 1]``, index ``s + size``), removing the
    paths at or above each look's threshold (``thresholds`` may stop short of ``pairs``: later looks are not cut).
    Returns the sub-law after the last look and the probability of having crossed by each cut look, ``[G]`` each."""
    alive = np.zeros((minus.size, 2 * size + 1))
    alive[:, size] = 1.0
    crossed, out, before = np.zeros(minus.size), [], 0
    for k, n in enumerate(pairs):
        alive = _advance(alive, _trinomial_sums(n - before, minus, delta), n - before)
        if k < len(thresholds):
            index = max(thresholds[k] + size, 0)
            crossed = crossed + alive[:, index:].sum(1)
            alive[:, index:] = 0
            out.append(crossed.copy())
        before = n
    return alive, out


def _crossing(pairs: Sequence[int], thresholds: Sequence[int], minus: np.ndarray, delta: float) -> np.ndarray:
    """``[G]`` probability of crossing some slow boundary by the last look, per nuisance value."""
    return _paths(pairs, thresholds, minus, delta, pairs[-1])[1][-1]


@functools.lru_cache(maxsize=4096)
def _slow_boundaries(pairs: tuple[int, ...], spent: tuple[float, ...], delta: float) -> tuple[tuple[int, ...],
                                                                                               float]:
    """``(thresholds, size)``: the exact group-sequential boundaries of the slow side and the largest crossing
    probability over the null's nuisance. Each look's threshold is the least whose crossing probability by that look
    stays within its spending on a grid of the nuisance, then checked on the grid zoomed twice around its maximum (as
    :func:`~.witness.paired_sign_pvalue` does, so that a maximum between grid points is missed by a second-order
    amount only) and raised by one while the zoomed maximum exceeds the spending."""
    thresholds: list[int] = []
    size = pairs[-1]
    minus = _nuisance_grid(delta, size)
    for k, (n, budget) in enumerate(zip(pairs, spent, strict=True)):
        alive, crossed = _paths(pairs[: k + 1], thresholds, minus, delta, size)
        before = crossed[-1] if crossed else np.zeros(minus.size)
        tails = np.cumsum(alive[:, ::-1], 1)[:, ::-1]  # [G, 2 N + 1]: P(no crossing before, S_k >= index - N)
        worst = (before[:, None] + tails).max(0)
        candidates = np.nonzero(worst <= budget)[0]
        s = int(candidates[0]) - size if candidates.size else n + 1
        s = max(s, -n)
        while s <= n and _zoomed_max(pairs[: k + 1], [*thresholds, s], delta) > budget:
            s += 1
        thresholds.append(s)
    return tuple(thresholds), _zoomed_max(pairs, thresholds, delta)


def _zoomed_max(pairs: Sequence[int], thresholds: Sequence[int], delta: float) -> float:
    """Largest probability of crossing some boundary by the last look over the null's nuisance, on a grid zoomed
    twice around its maximum."""
    low, high = 0.0, (1 - delta) / 2
    points = 65 + math.ceil(8 * math.sqrt(pairs[-1]))
    best = 0.0
    for _ in range(3):
        minus = np.linspace(low, high, points)
        crossed = _crossing(pairs, thresholds, minus, delta)
        index = int(np.argmax(crossed))
        best = max(best, float(crossed[index]))
        low, high = minus[max(index - 1, 0)], minus[min(index + 1, points - 1)]
    return best


@functools.lru_cache(maxsize=4096)
def _fast_boundaries(pairs: tuple[int, ...], spent: tuple[float, ...], epsilon: float) -> tuple[int, ...]:
    """The exact group-sequential boundaries of the fast side: the largest ``c_k`` with ``P(cross by k) <=
    alpha(k)`` for the count not met ``~ Binomial(N_k, epsilon)`` (the null's worst law: a larger rate crosses less
    often)."""
    last = pairs[-1]
    alive = np.zeros(last + 1)
    alive[0] = 1.0
    crossed, before, out = 0.0, 0, []
    for n, budget in zip(pairs, spent, strict=True):
        alive = np.convolve(alive, stats.binom.pmf(np.arange(n - before + 1), n - before, epsilon))[: last + 1]
        below = np.cumsum(alive)
        allowed = np.nonzero(crossed + below <= budget)[0]
        c = int(allowed[-1]) if allowed.size else -1
        if c >= 0:
            crossed += float(below[c])
            alive[: c + 1] = 0
        out.append(c)
        before = n
    return tuple(out)


def crossing_probability(looks: Looks, *, delta: float | None = None, epsilon: float | None = None,
                         thresholds: Sequence[int] | None = None, minus: float | None = None) -> float:
    """Exact probability that some look crosses its boundary: the slow side's under ``E D = delta`` with ``P(D =
    -1) = minus`` (None: the largest over that nuisance), or the fast side's under ``P(T > t) = epsilon``.
    ``thresholds`` (default: the design's own) lets a test measure other rules, e.g. every look at the full level
    (peeking without correction). Cost: ``O(K N^2)``."""
    if (delta is None) == (epsilon is None):
        raise ValueError("crossing_probability: give delta (slow side) or epsilon (fast side)")
    if delta is not None:
        own = looks.slow_thresholds(delta) if thresholds is None else list(thresholds)
        if minus is None:
            return _zoomed_max(looks.pairs, own, delta)
        return float(_crossing(looks.pairs, own, np.array([minus]), delta)[0])
    assert epsilon is not None
    own = looks.fast_thresholds(epsilon) if thresholds is None else list(thresholds)
    last = looks.pairs[-1]
    alive = np.zeros(last + 1)
    alive[0] = 1.0
    crossed, before = 0.0, 0
    for n, c in zip(looks.pairs, own, strict=True):
        alive = np.convolve(alive, stats.binom.pmf(np.arange(n - before + 1), n - before, epsilon))[: last + 1]
        if c >= 0:
            crossed += float(alive[: c + 1].sum())
            alive[: c + 1] = 0
        before = n
    return crossed


def uncorrected(looks: Looks, side: str, value: float) -> tuple[int, ...]:
    """The boundaries of testing every look at the full level as if it were the only one (peeking without
    correction): the fixed-sample exact test at ``N_k`` pairs, for :func:`crossing_probability` to measure.
    ``side``: ``slow`` (``value`` = delta) or ``fast`` (epsilon)."""
    return tuple((Looks((n,), looks.level, looks.rho).slow_thresholds(value)[0] if side == "slow" else
                  Looks((n,), looks.level, looks.rho).fast_thresholds(value)[0]) for n in looks.pairs)


@functools.lru_cache(maxsize=65536)
def _slow_lower(looks: Looks, look: int, statistic: int) -> float:
    def rejects(delta: float) -> bool:
        return statistic >= looks.slow_thresholds(delta)[look]

    if not rejects(0.0):
        return 0.0
    low, high = 0.0, 1.0
    while high - low > 1e-6:
        middle = (low + high) / 2
        low, high = (middle, high) if rejects(middle) else (low, middle)
    return low


def slow_lower(looks: Looks, look: int, plus: int, ties: int, minus: int) -> float:
    """Repeated lower confidence bound on ``E D = P(D = 1) - P(D = -1)`` (hence on ``TV(a P^h, b P^h)``) at look
    ``look`` (index into ``looks.pairs``) from the counts of the first ``N_look`` tested pairs: the largest
    ``delta`` whose group-sequential test rejects ``E D <= delta`` there (bisection to ``1e-6``, rounded down;
    boundaries non-decreasing in ``delta``). Valid at every look together at ``looks.level``; one look gives the
    fixed-sample limit (:func:`~.witness.paired_sign_lower`, to ``1e-6``). Cost: about 20 boundary sets, cached.

    Examples:
        >>> from mlm_dynamics.diagnostics.sequential import Looks, slow_lower
        >>> looks = Looks((12, 16, 24))
        >>> round(slow_lower(looks, 0, 12, 0, 0), 3), round(slow_lower(looks, 1, 15, 1, 0), 3)
        (0.545, 0.632)
    """
    if plus + ties + minus != looks.pairs[look]:
        raise ValueError(f"slow_lower: {plus + ties + minus} pairs counted at look {look}, which tests "
                         f"{looks.pairs[look]}")
    return _slow_lower(looks, look, plus - minus)


def forgotten_by(looks: Looks, look: int, times: Sequence[int], censored: Sequence[bool],
                 epsilon: float) -> int | None:
    """The first ``t`` at which look ``look`` certifies ``TV(a P^t, b P^t) <= epsilon``: at most ``c_look`` of its
    pairs not met by ``t`` (``times [N_look]`` their meeting ages, or where ``censored`` the age they were followed
    to, counted as not met beyond it). None where no ``t`` does. Cost: none."""
    if len(times) != looks.pairs[look]:
        raise ValueError(f"forgotten_by: {len(times)} pairs at look {look}, which tests {looks.pairs[look]}")
    allowed = looks.fast_thresholds(epsilon)[look]
    for t in sorted({int(t) for t, c in zip(times, censored, strict=True) if not c}):
        if sum(1 for u, c in zip(times, censored, strict=True) if c or u > t) <= allowed:
            return t
    return None


def continuation(looks: Looks, look: int, shares: tuple[float, float, float] | float, state: int, *,
                 side: str, value: float) -> tuple[float, list[float]]:
    """``(expected further pairs, [chance decided by each later look])``: from look ``look`` with statistic
    ``state`` (``K+ - K-`` slow, the count not met fast) not yet across, the pairs the later looks would add until
    one crosses, and the chance that one has crossed by each of them, if the pairs go on as ``shares`` say (slow: the
    plug-in ``(P(D = 1), P(D = 0), P(D = -1))``; fast: the plug-in ``P(T > t)``). The planner's price of a cell.
    Cost: ``O(K N^2)``."""
    last = looks.pairs[-1]
    if side == "slow":
        assert isinstance(shares, tuple)
        plus, _, minus = shares
        thresholds = looks.slow_thresholds(value)
        alive = np.zeros((1, 2 * last + 1))
        alive[0, min(max(state, -last), last) + last] = 1.0
    elif side == "fast":
        thresholds = looks.fast_thresholds(value)
        alive = np.zeros((1, last + 1))
        alive[0, min(state, last)] = 1.0
    else:
        raise ValueError(f"side must be 'slow' or 'fast', got {side!r}")
    expected, decided, chances, before = 0.0, 0.0, [], looks.pairs[look]
    for k in range(look + 1, len(looks.pairs)):
        n = looks.pairs[k] - before
        expected += n * float(alive.sum())
        if side == "slow":
            alive = _advance(alive, _trinomial_sums(n, np.array([minus]), plus - minus), n)
            index = max(thresholds[k] + last, 0)
            decided += float(alive[:, index:].sum())
            alive[:, index:] = 0
        else:
            rate = float(shares) if not isinstance(shares, tuple) else shares[0]
            alive = np.convolve(alive[0], stats.binom.pmf(np.arange(n + 1), n, rate))[None, : last + 1]
            c = thresholds[k]
            if c >= 0:
                decided += float(alive[0, : c + 1].sum())
                alive[0, : c + 1] = 0
        chances.append(decided)
        before = looks.pairs[k]
    return expected, chances


__all__ = ["RHO", "Looks", "continuation", "crossing_probability", "forgotten_by", "slow_lower", "uncorrected"]
