"""Certified lower bounds on mixing from witnesses: the slow side of the answer.

A coupling bounds mixing from above only (``d(t) <= P(T_meet > t)``); a pair that never met shows that the coupling
is slow, not that the chain is. The other side: for two initial laws ``a``, ``b`` of a chain with kernel ``P`` and
stationary law ``pi`` (which every irreducible finite chain has, incompatible conditionals included), and any
function ``f`` of the state with values in ``[0, 1]`` (a **witness**),

    TV(a P^t, b P^t) >= E_a f(X_t) - E_b f(Y_t)                                              (variational form of TV)
    d(t) = max_x TV(P^t(x, .), pi) >= TV(a P^t, pi) and likewise for b, so d(t) >= TV(a P^t, b P^t) / 2  (triangle).

So ``d(t) > epsilon`` - that is ``t_mix(epsilon) > t`` - once the witness gap exceeds ``2 epsilon``. Both sides of
the gap are means of iid terms in ``[0, 1]`` when chain ``i`` from ``a`` (row ``i`` of ``states_a``) and chain ``i``
from ``b`` are independent across ``i``; the two chains of one coupled pair may be dependent, since each keeps its
own marginal law and each side is bounded alone. A finite-sample lower confidence bound on ``E_a f`` and an upper one
on ``E_b f``, each at ``alpha / (2 m)`` for the ``m`` (time, witness) tests examined, give by Bonferroni a lower
bound on the gap that holds at every time and for every witness together with probability ``>= 1 - alpha``. Or,
``paired``, the differences ``D_i = f(X_i) - f(Y_i)`` of coupled pairs, iid across pairs, bound the gap ``E D`` at
``alpha / m``; once a pair has met its ``D_i`` is 0 for ever, so pairs frozen at meeting need no further steps:

- a **binary** witness (values in ``{0, 1}``): the exact Clopper-Pearson limits of a binomial proportion, or paired
  the exact limit of ``P(D = 1) - P(D = -1)`` from the counts of ``D_i`` in ``{1, 0, -1}``
  (:func:`paired_sign_lower`: a tie counts 0, not -1);
- any other: the betting limits of :mod:`.means` (valid at every sample size, no normal approximation).

``TV(a P^t, b P^t)`` never increases with ``t`` (a Markov kernel contracts TV), so a bound certified at ``t`` holds
at every earlier time: the reported ``tv_lower`` is the running maximum from the right. A witness may also depend on
row ``i``'s own starts (``nearer_start``): then the gap bounds the mean over rows of ``TV(P^t(a_i, .), P^t(b_i,
.))``, still at most ``2 d(t)``, provided the starts are drawn iid across rows, or are fixed and distinct with a
binary witness (the Clopper-Pearson limit then holds for independent rows of unequal means: Hoeffding, 1956, a
Poisson-binomial tail lies below the binomial one at the same mean; the betting limits need iid rows).

A witness must be fixed before the chains it is tested on are seen. The default (``witness=None``) learns one: a
classifier of agreement with the ``a`` side's most frequent token per position (naive Bayes, add-1/2 smoothing,
:func:`learned_witness`) fitted at each time on the first half of the rows, tested on the second half (a classifier
two-sample test; the split costs half the chains). Cost of the bound:
no forward rows beyond what the witnesses themselves run (an embedding or an energy per state examined).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy import special, stats
from torch import Tensor

from .means import betting_upper_limit
from .sequential import Looks, slow_lower

DEFAULT_EPSILON = 0.25
LEARNED = "learned"  # the name of the default witness


@dataclass(frozen=True)
class Witness:
    """A function ``f: [N, L] tokens -> [N]`` values in ``[0, 1]``, near 1 for chains like those from start ``a``.

    Attributes:
        name: the label reported with the bound it gives.
        fn: the function; it must be fixed before the chains it is tested on are seen.
        binary: True when every value is 0 or 1 (exact binomial limits apply; checked on every call).
    """

    name: str
    fn: Callable[[Tensor], Tensor]
    binary: bool = False

    def __call__(self, tokens: Tensor) -> Tensor:
        """``[N]`` float64 values of the witness on ``tokens [N, L]``, checked to lie in its range."""
        values = torch.as_tensor(self.fn(tokens)).detach().double().cpu()
        if values.shape != (tokens.shape[0],):
            raise ValueError(f"witness {self.name!r} must map [N, L] tokens to [N] values, got shape "
                             f"{tuple(values.shape)} for N = {tokens.shape[0]}")
        if self.binary and not bool(((values == 0) | (values == 1)).all()):
            raise ValueError(f"witness {self.name!r} is declared binary but returned values other than 0 and 1")
        if not bool(((values >= 0) & (values <= 1)).all()):
            raise ValueError(f"witness {self.name!r} must return values in [0, 1], got range "
                             f"[{float(values.min())}, {float(values.max())}]")
        return values


def _rows(reference: Tensor, name: str) -> Tensor:
    """``reference [L]`` or ``[N, L]`` as ``[1 or N, L]``."""
    reference = torch.as_tensor(reference)
    if reference.dim() not in (1, 2):
        raise ValueError(f"{name} must be [L] or [N, L], got shape {tuple(reference.shape)}")
    return reference if reference.dim() == 2 else reference[None]


def _cosine_distance(x: Tensor, y: Tensor) -> Tensor:
    """``1 - cos(x_i, y_i)`` rowwise for ``[N, D]`` and ``[N or 1, D]``."""
    return 1 - torch.nn.functional.cosine_similarity(x.double(), y.double(), dim=-1)


def nearer_start(starts_a: Tensor, starts_b: Tensor, *, embed: Callable[[Tensor], Tensor] | None = None) -> Witness:
    """Binary witness ``f_i(x) = 1[dist(x, a_i) < dist(x, b_i)]``: is the chain nearer its row's start from ``a``?

    ``starts_a``, ``starts_b``: ``[L]`` or ``[N, L]`` tokens (row ``i`` the starts of chain ``i`` of each side).
    ``dist`` is the Hamming distance, or with ``embed`` (``[N, L] -> [N, D]``, e.g. a
    :class:`~mlm_dynamics.SentenceEmbedder`) the cosine distance of embeddings. Ties count 0. Cost: none, or one
    embedding per state examined (the starts' embeddings once).

    Examples:
        >>> import torch
        >>> from mlm_dynamics.diagnostics.witness import nearer_start
        >>> f = nearer_start(torch.tensor([0, 0, 0]), torch.tensor([1, 1, 1]))
        >>> f(torch.tensor([[0, 0, 1], [1, 1, 0]])).tolist()
        [1.0, 0.0]
    """
    a, b = _rows(starts_a, "starts_a").cpu(), _rows(starts_b, "starts_b").cpu()
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"starts_a and starts_b must have the same length, got {a.shape[-1]} and {b.shape[-1]}")
    if embed is None:
        def hamming(tokens: Tensor) -> Tensor:
            x = tokens.cpu()
            return ((x != a).sum(-1) < (x != b).sum(-1)).double()
        return Witness("nearer_start", hamming, binary=True)
    ea, eb = embed(a), embed(b)

    def embedded(tokens: Tensor) -> Tensor:
        e = embed(tokens)
        return (_cosine_distance(e, ea.to(e.device)) < _cosine_distance(e, eb.to(e.device))).double().cpu()
    return Witness("nearer_start_embedding", embedded, binary=True)


def agreement(reference: Tensor, *, sites: Tensor | None = None) -> Witness:
    """Witness ``f_i(x) = (1 / n) sum_{j in sites} 1[x_j = r_ij]``: the share of the ``sites`` (``[n]`` positions;
    None: every position) agreeing with ``reference`` (``[L]`` or ``[N, L]``, e.g. the starts ``a``). Values in
    ``[0, 1]`` (betting limits). Cost: none."""
    r = _rows(reference, "reference").cpu()
    columns = slice(None) if sites is None else torch.as_tensor(sites).long().cpu()
    return Witness("agreement", lambda tokens: (tokens.cpu() == r)[:, columns].double().mean(-1))


def within_radius(embed: Callable[[Tensor], Tensor], center: Tensor, radius: float) -> Witness:
    """Binary witness ``f(x) = 1[1 - cos(e(x), c) <= radius]``: is the chain inside a basin, as the trap detector
    (:class:`~mlm_dynamics.TrapTracker`) draws one (center ``[D]`` or ``[N, D]``, cosine radius in ``(0, 2)``)?
    The basin must be fixed before the chains tested are seen (from other chains, or the starts). Cost: one
    embedding per state examined."""
    if not 0 < radius < 2:
        raise ValueError(f"radius must be a cosine distance in (0, 2), got {radius}")
    c = torch.as_tensor(center)

    def inside(tokens: Tensor) -> Tensor:
        e = embed(tokens)
        return (_cosine_distance(e, c.to(e.device)) <= radius).double().cpu()
    return Witness("within_radius", inside, binary=True)


def energy_below(energy: Callable[[Tensor], Tensor], threshold: float | Tensor) -> Witness:
    """Binary witness ``f_i(x) = 1[E(x) < threshold_i]`` for an energy such as the PLL energy
    (:class:`~mlm_dynamics.sampling.energy.PseudoLogLikelihoodEnergy`; a scalar or ``[N]`` threshold fixed in
    advance, e.g. the energy of the starts ``a``). Cost: the energy's own forward rows per state examined."""
    limit = torch.as_tensor(threshold, dtype=torch.float64)
    return Witness("energy_below", lambda tokens: (energy(tokens).double().cpu() < limit).double(), binary=True)


def token_profile(train_a: Tensor, train_b: Tensor) -> Witness:
    """Binary witness learned from chains ``train_a``, ``train_b`` ``[M, L]`` of the two starts: naive Bayes on
    per-position token counts, ``1[sum_j log((c_a[j, x_j] + 1/2) / (c_b[j, x_j] + 1/2)) > 0]`` (tokens unseen in
    training share one bucket). Valid on chains independent of the training ones; the learned witness
    (:func:`learned_witness`) reads agreement instead, which kept more pairs apart on AntiBERTy. Cost: none.

    Examples:
        >>> import torch
        >>> from mlm_dynamics.diagnostics.witness import token_profile
        >>> f = token_profile(torch.tensor([[0, 1], [0, 2]]), torch.tensor([[3, 1], [4, 2]]))
        >>> f(torch.tensor([[0, 9], [3, 9]])).tolist()
        [1.0, 0.0]
    """
    vocab = torch.unique(torch.cat([train_a, train_b]).cpu())
    length = train_a.shape[-1]

    def bucket(tokens: Tensor) -> Tensor:
        x = tokens.cpu()
        index = torch.searchsorted(vocab, x).clamp_max(vocab.numel() - 1)
        return torch.where(vocab[index] == x, index, torch.full_like(index, vocab.numel()))

    def counts(tokens: Tensor) -> Tensor:
        table = torch.zeros(length, vocab.numel() + 1, dtype=torch.float64)
        return table.scatter_add_(1, bucket(tokens).T, torch.ones(length, tokens.shape[0], dtype=torch.float64))

    log_ratio = (counts(train_a) + 0.5).log() - (counts(train_b) + 0.5).log()  # [L, U + 1]

    def classify(tokens: Tensor) -> Tensor:
        score = log_ratio.gather(1, bucket(tokens).T).sum(0)  # [N]
        return (score > 0).double()
    return Witness("token_profile", classify, binary=True)


def agreement_profile(train_a: Tensor, train_b: Tensor) -> Witness:
    """Binary witness learned from chains ``train_a`` ``[M, L]``, ``train_b`` ``[M', L]`` of the two starts: naive
    Bayes on agreement with the reference ``r``, the most frequent token of ``train_a`` at each position,
    ``1[sum_j z_j log(p_a[j] / p_b[j]) + (1 - z_j) log((1 - p_a[j]) / (1 - p_b[j])) > 0]``, ``z_j = 1[x_j = r_j]``,
    ``p_s[j] = (agreements of side s at j + 1/2) / (M_s + 1)``. Where the chains from ``b`` scatter over many tokens,
    each seen once or never in training, :func:`token_profile` scores those tokens near 0 and reads only the
    reference tokens a ``b`` chain shares with ``a``; lumping every other token into "not the reference" keeps their
    evidence. Valid on chains independent of the training ones. Cost: none.

    Examples:
        >>> import torch
        >>> from mlm_dynamics.diagnostics.witness import agreement_profile
        >>> f = agreement_profile(torch.tensor([[0, 1], [0, 1], [0, 2]]), torch.tensor([[3, 4], [5, 1], [6, 7]]))
        >>> f(torch.tensor([[0, 1], [0, 9], [8, 9]])).tolist()
        [1.0, 1.0, 0.0]
    """
    reference = train_a.cpu().mode(0).values  # [L]

    def rate(tokens: Tensor) -> Tensor:
        return ((tokens.cpu() == reference).double().sum(0) + 0.5) / (tokens.shape[0] + 1)

    rate_a, rate_b = rate(train_a), rate(train_b)
    agree, differ = (rate_a / rate_b).log(), ((1 - rate_a) / (1 - rate_b)).log()  # [L]

    def classify(tokens: Tensor) -> Tensor:
        z = (tokens.cpu() == reference).double()
        return ((z * agree + (1 - z) * differ).sum(-1) > 0).double()
    return Witness("agreement_profile", classify, binary=True)


def learned_witness(train_a: Tensor, train_b: Tensor) -> Witness:
    """The learned witness (named ``learned``): :func:`agreement_profile` fitted on the rows ``i`` of ``train_a``,
    ``train_b`` ``[M, L]`` whose two chains differ. Rows of coupled pairs that met are equal on both sides and
    carry nothing about the difference; fitted on, they would pull both sides' agreement rates together. With no
    differing row, the witness is 0 everywhere (no gap). Valid on chains independent of the training ones: the
    default witness of :func:`mixing_lower_bound` learns it on half the rows, the run job on the other temperatures'
    pairs, the sweep on the odd-numbered pairs of a cell. Cost: none.

    Examples:
        >>> import torch
        >>> from mlm_dynamics.diagnostics.witness import learned_witness
        >>> f = learned_witness(torch.tensor([[0, 1], [0, 1], [2, 2]]), torch.tensor([[3, 4], [5, 1], [2, 2]]))
        >>> f.name, f(torch.tensor([[0, 1], [6, 7]])).tolist()
        ('learned', [1.0, 0.0])
    """
    if train_a.shape != train_b.shape:
        raise ValueError(f"train_a and train_b must both be [M, L], got {tuple(train_a.shape)} and "
                         f"{tuple(train_b.shape)}")
    apart = (train_a != train_b).any(-1)
    if not bool(apart.any()):
        return Witness(LEARNED, lambda tokens: torch.zeros(tokens.shape[0], dtype=torch.float64), binary=True)
    fitted = agreement_profile(train_a[apart], train_b[apart])
    return Witness(LEARNED, fitted.fn, binary=True)


def clopper_pearson_lower(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson lower limit, at level ``1 - alpha``, of a binomial proportion with ``k`` of ``n``
    (the upper limit is ``1 - clopper_pearson_lower(n - k, n, alpha)``)."""
    return float(stats.beta.ppf(alpha, k, n - k + 1)) if k > 0 else 0.0


def _lower_limit(values: Tensor, binary: bool, alpha: float) -> float:
    """One-sided lower confidence limit, at level ``1 - alpha``, of the mean of independent ``values [N]`` in
    ``[0, 1]``: Clopper-Pearson for binary values, betting (:mod:`.means`) otherwise."""
    if binary:
        return clopper_pearson_lower(int(values.sum()), values.numel(), alpha)
    return 1 - float(betting_upper_limit(1 - values, 1 - alpha))


def _sign_tail(plus_minus: int, n: int, delta: float, minus_rate: np.ndarray) -> np.ndarray:
    """``P(K+ - K- >= plus_minus)`` for ``(K+, K0, K-)`` trinomial of ``n`` with ``P(D = -1) = minus_rate [G]`` and
    ``P(D = 1) = delta + minus_rate``: the sum over ``K- = j`` of ``Bin(j; n, m) P(Bin(n - j, p / (1 - m)) >=
    plus_minus + j)``. Cost: ``O(n G)``."""
    minus = np.arange(n + 1)[:, None]
    plus_rate = np.clip((delta + minus_rate) / np.maximum(1 - minus_rate, 1e-300), 0, 1)
    log_pmf = (special.gammaln(n + 1) - special.gammaln(minus + 1) - special.gammaln(n - minus + 1)
               + special.xlogy(minus, minus_rate) + special.xlog1py(n - minus, -minus_rate))  # Bin(j; n, m)
    above = np.minimum(plus_minus + minus - 1, n - minus)  # bdtrc is nan beyond n, where the tail is 0
    return (np.exp(log_pmf) * special.bdtrc(above, n - minus, plus_rate)).sum(0)


def paired_sign_pvalue(delta: float, plus: int, ties: int, minus: int) -> float:
    """p-value of ``E D <= delta`` for iid ``D_i`` in ``{-1, 0, 1}`` seen ``plus``, ``ties``, ``minus`` times: the
    largest ``P(K+ - K- >= plus - minus)`` over the laws with ``P(D = 1) - P(D = -1) = delta`` (the nuisance
    ``P(D = -1) = m`` in ``[0, (1 - delta) / 2]``, maximized on a grid of ``G = 65 + 8 sqrt(N)`` points, then twice
    on as fine a grid between the best point's neighbours: the ends are grid points, and an interior maximum, where
    the tail is flat to first order, is met within ``(2 / G)^2 / G`` of the interval, so that its value is missed
    by a second-order amount). Laws with a smaller ``E D`` give a smaller tail
    (moving mass up raises ``K+ - K-``), so the p-value covers the whole null and increases with ``delta``. Cost:
    ``O(N^1.5)``."""
    n, observed = plus + ties + minus, plus - minus
    low, high, points = 0.0, (1 - delta) / 2, 65 + math.ceil(8 * math.sqrt(n))
    best = 0.0
    for _ in range(3):
        grid = np.linspace(low, high, points)
        tails = _sign_tail(observed, n, delta, grid)
        index = int(np.argmax(tails))
        best = max(best, float(tails[index]))
        low, high = grid[max(index - 1, 0)], grid[min(index + 1, points - 1)]
    return best


@functools.lru_cache(maxsize=65536)
def paired_sign_lower(plus: int, ties: int, minus: int, alpha: float) -> float:
    """Exact one-sided lower limit, at level ``1 - alpha`` and clamped at 0, of ``E D = P(D = 1) - P(D = -1)`` for
    iid ``D_i`` in ``{-1, 0, 1}`` (the paired differences of a binary witness): ``inf {delta :
    paired_sign_pvalue(delta) > alpha}`` by bisection to ``1e-7``, rounded down. Without ties it is the
    Clopper-Pearson bound ``2 q - 1`` on ``P(D = 1)`` (to ``1e-7``); with ties it counts a tie as 0 where that bound
    counts it as -1 (10 of 11 pairs separated and one tie: 0.50 against 0.27 at 95 %). Cost: ``O(N^1.5)`` per
    bisection step, 24 steps; cached, as resampled pairs repeat counts.

    Examples:
        >>> from mlm_dynamics.diagnostics.witness import paired_sign_lower
        >>> round(paired_sign_lower(11, 0, 0, 0.05), 3), round(paired_sign_lower(10, 1, 0, 0.05), 3)
        (0.523, 0.495)
    """
    if min(plus, ties, minus) < 0 or plus + ties + minus < 1:
        raise ValueError(f"plus, ties and minus must be counts with a positive sum, got {plus}, {ties}, {minus}")
    if paired_sign_pvalue(0.0, plus, ties, minus) > alpha:
        return 0.0
    low, high = 0.0, 1.0
    while high - low > 1e-7:
        middle = (low + high) / 2
        low, high = (low, middle) if paired_sign_pvalue(middle, plus, ties, minus) > alpha else (middle, high)
    return low


def _gap_lower(fa: Tensor, fb: Tensor, binary: bool, alpha: float, paired: bool) -> float:
    """Lower limit, at level ``1 - alpha``, of ``E f(X) - E f(Y)`` from witness values ``fa``, ``fb`` ``[N]``:
    unpaired, each side's limit at ``alpha / 2``; paired, from the differences ``D_i = f(X_i) - f(Y_i)``:
    :func:`paired_sign_lower` for a binary witness, ``2 q - 1`` from the betting limit ``q`` of the mean of
    ``(1 + D_i) / 2`` for any other."""
    if not paired:
        return _lower_limit(fa, binary, alpha / 2) - (1 - _lower_limit(1 - fb, binary, alpha / 2))
    difference = fa - fb
    if binary:
        plus, minus = int((difference > 0.5).sum()), int((difference < -0.5).sum())
        return paired_sign_lower(plus, difference.numel() - plus - minus, minus, alpha)
    return 2 * _lower_limit((1 + difference) / 2, binary, alpha) - 1


def _sequential_lower(fa: Tensor, fb: Tensor, looks: tuple[int, ...], alpha: float) -> float:
    """The repeated lower bound of ``E D`` at the look of ``fa.numel()`` pairs (:func:`~.sequential.slow_lower`)."""
    difference = fa - fb
    plus, minus = int((difference > 0.5).sum()), int((difference < -0.5).sum())
    plan = Looks(looks, 1 - alpha)
    look = plan.pairs.index(difference.numel())
    return slow_lower(plan, look, plus, difference.numel() - plus - minus, minus)


def chains_to_certify(epsilon: float = DEFAULT_EPSILON, level: float = 0.95, tests: int = 1, *,
                      paired: bool = False) -> int:
    """Least chains per start with which a binary witness that separates the two sides completely certifies
    ``d(t) > epsilon`` among ``tests`` Bonferroni tests: the least ``N`` with ``2 beta^(1/N) - 1 > 2 epsilon``, the
    Clopper-Pearson limit at ``N`` of ``N``, ``beta = alpha / (2 tests)`` for each side of the unpaired bound and
    ``alpha / tests`` paired. Double it for the learned witness, which tests half the chains.

    Examples:
        >>> from mlm_dynamics.diagnostics.witness import chains_to_certify
        >>> chains_to_certify(0.25, 0.95), chains_to_certify(0.25, 0.95, tests=4), chains_to_certify(paired=True)
        (13, 18, 11)
    """
    _check_level_epsilon(level, epsilon)
    if tests < 1:
        raise ValueError(f"tests must be >= 1, got {tests}")
    alpha = (1 - level) / (tests if paired else 2 * tests)
    return math.floor(math.log(alpha) / math.log((1 + 2 * epsilon) / 2)) + 1


def _check_level_epsilon(level: float, epsilon: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if not 0 < epsilon < 0.5:
        raise ValueError(f"epsilon must be in (0, 0.5): d(t) >= TV / 2 never certifies more, got {epsilon}")


@dataclass
class MixingLowerBound:
    """Lower confidence bounds on ``TV(a P^t, b P^t)`` and ``d(t)`` at the times examined (module docstring).

    Attributes:
        times: ``[T]`` steps (single-site updates per chain), increasing.
        tv_lower: ``[T]`` lower bound on ``TV(a P^t, b P^t)``, simultaneous over the times at ``level``.
        gap: ``[T]`` the observed witness gap ``mean f(X_t) - mean f(Y_t)`` of the witness that gave each time's
            bound: an estimate, not a bound.
        witness: ``[T]`` name of that witness.
        num_chains: chains per start the bound was tested on (half the rows for the learned witness).
        tests: the (time, witness) tests the level is shared over.
        level: the simultaneous confidence level.
        epsilon: the distance ``t_mix(epsilon)`` is certified against.
        learned: True when the witness was learned on the other half of the rows.
        paired: True when the bound came from the pairs' differences (``paired=True``).
        separated: ``[T]`` share of rows the chosen witness told apart the right way (``f(X_i) > f(Y_i)``; paired)
            or None: with ``gap`` it gives the shares of ties and reversals, what more pairs would certify.
    """

    times: Tensor
    tv_lower: Tensor
    gap: Tensor
    witness: list[str]
    num_chains: int
    tests: int
    level: float
    epsilon: float = DEFAULT_EPSILON
    learned: bool = False
    paired: bool = False
    separated: Tensor | None = None

    @property
    def d_lower(self) -> Tensor:
        """``[T]`` lower bound on ``d(t) = max_x TV(P^t(x, .), pi)``: ``tv_lower / 2``."""
        return self.tv_lower / 2

    @property
    def mixing_time_exceeds(self) -> int | None:
        """The largest ``t`` examined with ``d_lower > epsilon``: ``t_mix(epsilon) > t`` certified at ``level``;
        None if no time is certified."""
        certified = (self.d_lower > self.epsilon).nonzero()
        return int(self.times[certified[-1, 0]]) if certified.numel() else None

    @property
    def chains_needed(self) -> int:
        """Chains per start with which a completely separating witness would certify at this design
        (:func:`chains_to_certify` over ``tests``; doubled for the learned witness)."""
        return chains_to_certify(self.epsilon, self.level, self.tests, paired=self.paired) * (2 if self.learned else 1)

    def summary(self) -> dict[str, float]:
        """``mixing_time_exceeds`` (missing where nothing is certified), ``tv_lower`` and ``d_lower`` at the last
        time examined, ``tv_lower_t{t}`` at each time, ``num_chains``, ``chains_needed``, ``level``, ``epsilon``."""
        exceeds = self.mixing_time_exceeds
        out = {"mixing_time_exceeds": math.nan if exceeds is None else float(exceeds),
               "tv_lower": float(self.tv_lower[-1]), "d_lower": float(self.d_lower[-1]),
               "num_chains": float(self.num_chains), "chains_needed": float(self.chains_needed),
               "level": self.level, "epsilon": self.epsilon}
        out.update({f"tv_lower_t{int(t)}": float(v) for t, v in zip(self.times, self.tv_lower, strict=True)})
        return out


WitnessLike = Witness | Callable[[Tensor], Tensor]


def _witnesses(witness: WitnessLike | Sequence[WitnessLike]) -> list[Witness]:
    items = list(witness) if isinstance(witness, Sequence) else [witness]
    if not items:
        raise ValueError("witness must be None, a callable or a non-empty sequence of callables")
    out = []
    for index, item in enumerate(items):
        if not callable(item):
            raise ValueError(f"witness must be callable [N, L] -> [N], got {type(item).__name__}")
        out.append(item if isinstance(item, Witness) else Witness(getattr(item, "__name__", f"witness{index}"), item))
    return out


def _check_states(states_a: Tensor, states_b: Tensor, times: Tensor | Sequence[int] | None) -> tuple[Tensor, Tensor,
                                                                                                   Tensor]:
    a, b = torch.as_tensor(states_a), torch.as_tensor(states_b)
    for name, x in (("states_a", a), ("states_b", b)):
        if x.dim() not in (2, 3) or x.is_floating_point() or x.is_complex():
            raise ValueError(f"{name} must be integer tokens [T, N, L] or [N, L], got {x.dtype} of shape "
                             f"{tuple(x.shape)}")
    if a.shape != b.shape:
        raise ValueError(f"states_a and states_b must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dim() == 2:
        a, b = a[None], b[None]
    if times is None:
        if a.shape[0] != 1:
            raise ValueError(f"times is required for states of {a.shape[0]} times")
        steps = torch.zeros(1, dtype=torch.long)
    else:
        steps = torch.as_tensor(times)
        if steps.dim() != 1 or steps.numel() != a.shape[0] or steps.is_floating_point():
            raise ValueError(f"times must be 1-D integer steps, one per time of the states ({a.shape[0]}), got "
                             f"{tuple(steps.shape)} {steps.dtype}")
        if bool((steps < 0).any()) or bool((steps.diff() <= 0).any()):
            raise ValueError(f"times must be >= 0 and increasing, got {steps.tolist()}")
    return a, b, steps.long().cpu()


def mixing_lower_bound(states_a: Tensor, states_b: Tensor, *,
                       witness: WitnessLike | Sequence[WitnessLike] | None = None, level: float = 0.95,
                       epsilon: float = DEFAULT_EPSILON, times: Tensor | Sequence[int] | None = None,
                       paired: bool = False) -> MixingLowerBound:
    """Certified lower bounds on ``TV(a P^t, b P^t)`` and ``d(t)``, and on ``t_mix(epsilon)`` (module docstring).

    Args:
        states_a, states_b: ``[T, N, L]`` (or ``[N, L]`` for one time) tokens of ``N`` chains from start ``a`` and
            ``N`` from start ``b`` at the ``T`` times, independent across the ``N`` rows (row ``i`` of each may be
            the two chains of one coupled pair).
        witness: a callable ``[N, L] -> [N]`` with values in ``[0, 1]`` (high for chains like those from ``a``), a
            :class:`Witness`, a sequence of them (the best at each time, the choice paid for in the level), or None
            for the learned witness (fitted on the first ``N // 2`` rows, tested on the rest; ``N >= 4``).
        level: simultaneous confidence level over the times and witnesses.
        epsilon: ``t_mix(epsilon)`` is certified to exceed ``t`` where ``d_lower(t) > epsilon`` (``< 1/2``).
        times: ``[T]`` increasing steps of the states (may be omitted for one time).
        paired: bound the gap from the differences ``f(X_i) - f(Y_i)`` of coupled pairs rather than each side
            alone. Paired, a pair that met contributes 0 whatever happens after, so the states of met pairs may be
            those they met in (pairs frozen at meeting, as the meeting-time probe and sweep keep them); and a
            completely separated binary witness certifies from 11 pairs instead of 13 chains per side. Unpaired, a
            witness that separates the sides only partly keeps more of its gap.

    Returns:
        :class:`MixingLowerBound`. Cost: no forward rows beyond the witnesses' own.

    Examples:
        Chains that stayed at their starts: 16 per start certify ``t_mix(1/4) > 100``; chains that forgot them
        certify nothing:

        >>> import torch
        >>> from mlm_dynamics import mixing_lower_bound
        >>> from mlm_dynamics.diagnostics.witness import nearer_start
        >>> a, b = torch.zeros(16, 5, dtype=torch.long), torch.ones(16, 5, dtype=torch.long)
        >>> mixing_lower_bound(a, b, witness=nearer_start(a[0], b[0]), times=[100]).mixing_time_exceeds
        100
        >>> mixed = torch.randint(0, 2, (2, 16, 5), generator=torch.Generator().manual_seed(0))
        >>> print(mixing_lower_bound(mixed[0], mixed[1], witness=nearer_start(a[0], b[0]), times=[100])
        ...       .mixing_time_exceeds)
        None
    """
    _check_level_epsilon(level, epsilon)
    a, b, steps = _check_states(states_a, states_b, times)
    learned = witness is None
    rows = a.shape[1]
    if learned and rows < 4:
        raise ValueError(f"the learned witness needs >= 4 chains per start (half to learn, half to test), got {rows}")
    if not learned and rows < 2:
        raise ValueError(f"states need >= 2 chains per start, got {rows}")
    fixed = [] if witness is None else _witnesses(witness)
    half = rows // 2
    values_a, values_b = [], []
    for index in range(steps.numel()):
        if learned:
            candidates = [learned_witness(a[index, :half], b[index, :half])]
            test_a, test_b = a[index, half:], b[index, half:]
        else:
            candidates, test_a, test_b = fixed, a[index], b[index]
        values_a.append(torch.stack([w(test_a) for w in candidates]))
        values_b.append(torch.stack([w(test_b) for w in candidates]))
    return witness_bound(torch.stack(values_a), torch.stack(values_b), times=steps,
                         binary=[True] if learned else [w.binary for w in fixed],
                         names=[LEARNED] if learned else [w.name for w in fixed], level=level, epsilon=epsilon,
                         paired=paired, learned=learned)


def witness_bound(values_a: Tensor, values_b: Tensor, *, times: Tensor | Sequence[int], binary: Sequence[bool],
                  names: Sequence[str], level: float = 0.95, epsilon: float = DEFAULT_EPSILON, paired: bool = False,
                  learned: bool = False, looks: Sequence[int] | None = None) -> MixingLowerBound:
    """:class:`MixingLowerBound` from witness values already computed: ``values_a``, ``values_b`` ``[T, K, N]`` in
    ``[0, 1]`` for the ``K`` witnesses (``binary [K]``, ``names [K]``) on the ``N`` rows of each side at ``times
    [T]`` (the core of :func:`mixing_lower_bound`, for values pooled elsewhere, e.g. over DDP ranks). The level is
    shared over the ``T K`` tests; the bound at each time is the best witness's, made non-increasing in ``t``.

    ``looks`` (paired binary witnesses): the rows were tested in a sequential design whose looks were planned at
    these numbers of rows, ``N`` one of them (:mod:`.sequential`); each bound is then the repeated bound at that
    look (:func:`~.sequential.slow_lower`), valid although the design chose ``N`` on what it saw."""
    _check_level_epsilon(level, epsilon)
    plan = None
    if looks is not None and len(looks) > 1:
        if not paired or not all(binary) or values_a.shape[-1] not in tuple(looks):
            raise ValueError(f"looks: a sequential bound needs paired binary witnesses tested at one of the looks "
                             f"{list(looks)}, got {values_a.shape[-1]} rows")
        plan = tuple(int(n) for n in looks)
    steps = torch.as_tensor(times).long().cpu()
    if values_a.shape != values_b.shape or values_a.dim() != 3 or values_a.shape[:2] != (steps.numel(), len(names)):
        raise ValueError(f"values_a and values_b must both be [T, K, N] for T = {steps.numel()} times and K = "
                         f"{len(names)} witnesses, got {tuple(values_a.shape)} and {tuple(values_b.shape)}")
    if values_a.shape[-1] < 2:
        raise ValueError(f"the bound needs >= 2 rows per side, got {values_a.shape[-1]}")
    tests = steps.numel() * len(names)
    alpha = (1 - level) / tests
    raw, gap, chosen, separated = [], [], [], []
    for index in range(steps.numel()):
        best = max((_gap_lower(fa, fb, kind, alpha, paired) if plan is None else _sequential_lower(fa, fb, plan, alpha),
                    float(fa.mean() - fb.mean()), name,
                    float((fa > fb).double().mean()))
                   for fa, fb, kind, name in zip(values_a[index].double().cpu(), values_b[index].double().cpu(),
                                                 binary, names, strict=True))
        raw.append(max(best[0], 0.0))
        gap.append(best[1])
        chosen.append(best[2])
        separated.append(best[3])
    bound = torch.tensor(raw, dtype=torch.float64).flip(0).cummax(0).values.flip(0)  # TV never increases with t
    return MixingLowerBound(times=steps, tv_lower=bound, gap=torch.tensor(gap, dtype=torch.float64), witness=chosen,
                            num_chains=values_a.shape[-1], tests=tests, level=level, epsilon=epsilon,
                            learned=learned, paired=paired,
                            separated=torch.tensor(separated, dtype=torch.float64) if paired else None)


@dataclass
class PairedWitness:
    """A binary witness's values on the two chains of ``N`` coupled pairs at ``H`` horizons, kept so that the bound
    can be drawn at any level (a claim's Bonferroni share) and resampled (its plug-in power). A pair that met has the
    same value on both chains from then on (its states are those it met in).

    Attributes:
        times: ``[H]`` increasing steps.
        values_a, values_b: ``[H, N]`` witness values (0 or 1) of the chains from start ``a`` and from ``b``.
        name: the witness's name; ``learned``: fitted on pairs other than these (the design spends as many).
        looks: the tested pairs at each planned look of a sequential design (``N`` one of them), or None: a fixed
            number of pairs.
    """

    times: Tensor
    values_a: Tensor
    values_b: Tensor
    name: str = LEARNED
    learned: bool = True
    looks: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.looks is not None:
            self.looks = tuple(int(n) for n in self.looks)

    def bound(self, level: float = 0.95, epsilon: float = DEFAULT_EPSILON) -> MixingLowerBound:
        """The paired bound at ``level``, simultaneous over the horizons (:func:`witness_bound`; the repeated bound
        of the design's looks where there are several). Cost: none."""
        return witness_bound(self.values_a[:, None], self.values_b[:, None], times=self.times, binary=[True],
                             names=[self.name], level=level, epsilon=epsilon, paired=True, learned=self.learned,
                             looks=self.looks)

    def resampled(self, generator: torch.Generator) -> PairedWitness:
        """The same horizons with the pairs drawn with replacement (one draw for every horizon)."""
        pick = torch.randint(self.values_a.shape[1], (self.values_a.shape[1],), generator=generator)
        return PairedWitness(self.times, self.values_a[:, pick], self.values_b[:, pick], self.name, self.learned,
                             self.looks)

    def state_dict(self) -> dict[str, Any]:
        """Tensors and names, for checkpoints and shard files."""
        return {"times": self.times, "values_a": self.values_a, "values_b": self.values_b, "name": self.name,
                "learned": self.learned, "looks": None if self.looks is None else list(self.looks)}


def paired_learned_witness(states: Tensor, times: Sequence[int], *, learn: Tensor, test: Tensor) -> PairedWitness:
    """The learned witness on coupled pairs: at each horizon :func:`learned_witness` fitted on the pairs ``learn``
    and evaluated on the pairs ``test`` (``states [H, 2, P, L]``: both chains of ``P`` pairs, a met pair's two chains
    equal; ``learn``, ``test`` disjoint index tensors of independent pairs). Cost: none."""
    if not set(learn.tolist()).isdisjoint(test.tolist()):
        raise ValueError("learn and test must be disjoint pairs: a witness must be fixed before the pairs it is "
                         "tested on")
    values_a, values_b = [], []
    for index in range(states.shape[0]):
        witness = learned_witness(states[index, 0, learn], states[index, 1, learn])
        values_a.append(witness(states[index, 0, test]))
        values_b.append(witness(states[index, 1, test]))
    return PairedWitness(torch.as_tensor(list(times), dtype=torch.long), torch.stack(values_a),
                         torch.stack(values_b))


__all__ = ["DEFAULT_EPSILON", "MixingLowerBound", "PairedWitness", "Witness", "agreement", "agreement_profile",
           "chains_to_certify", "clopper_pearson_lower", "energy_below", "learned_witness", "mixing_lower_bound",
           "nearer_start", "paired_learned_witness", "paired_sign_lower", "paired_sign_pvalue", "token_profile",
           "within_radius", "witness_bound"]
