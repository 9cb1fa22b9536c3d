"""Parallel decoding: the error of committing ``K`` masked positions in one step, measured against the model itself.

A masked diffusion LM that commits the positions ``S = (s_1, ..., s_K)`` of a row ``x`` at once draws each from its
marginal with all of ``S`` masked, so the committed values follow the **parallel law**

    P(y) = prod_k q_k(y_k | x_{-S}),

while committing them one at a time in the order given (commit ``s_1``, recompute, commit ``s_2``, ...) follows the
model's **sequential law**

    Q(y) = prod_k q_k(y_k | x_{-S}, y_1, ..., y_{k-1}),   positions s_{k+1}, ..., s_K still masked,

both under the sampler's law: ``q = softmax(l / tau)`` over the allowed ids, truncated to the top-k / nucleus where
asked, exactly as :class:`~mlm_dynamics.GlauberSampler` proposes. Reported per row:

- ``tv = TV(Q, P)``: the smallest probability, over all ways of driving both with shared randomness, that the
  parallel commit differs from the sequential one (the maximal coupling attains it);
- ``kl = KL(Q || P)`` in nats: what sampling the product costs against the sequential law (``inf`` where a
  truncated parallel law excludes a value the sequential one draws);
- ``disagreement``: the probability that the two differ when driven by the same uniforms through inverse-CDF draws
  in id order, as the samplers here draw (``>= tv``);
- ``order_spread``: the largest ``TV(Q, Q_sigma)`` over other orders ``sigma`` (first the reversed order, then
  random ones). Compatible conditionals (those of one joint law, e.g. a Gibbs field's exact block marginals) give
  one sequential law for every order, so a positive spread certifies incompatibility (the rectangle test's
  question, asked of the decoding step).

**Exact** by enumeration when the tree of sequential forwards is small: with ``V'`` allowed ids, ``1 + V' + ... +
V'^(K-1)`` rows per row (prefixes of probability 0 under a truncated law are skipped) and ``V'^K`` joint values; the
dense tables make every order and every statistic exact. **Monte Carlo** beyond: ``N`` draws ``y ~ Q`` per row,
``1 + N (K - 1)`` forward rows (plus ``N (K - 1)`` per extra order, to evaluate ``Q_sigma`` at the draws), and
unbiased estimators in which the last position is summed out exactly (its law given each drawn prefix ``u`` is known
from the last forward: Rao-Blackwellised), with ``r(u) = P(u) / Q(u)``:

    tv = E_Q[ sum_v (q_K(v | u) - r(u) p_K(v))_+ ],   kl = E_Q[ -log r(u) + KL(q_K(. | u) || p_K) ],
    disagreement = E[1{parallel != sequential}].

The ``tv`` and ``disagreement`` terms lie in ``[0, 1]``; their interval (``method``) is either ``betting``, the
hedged-capital confidence set of Waudby-Smith and Ramdas (2024), valid at every ``N`` without a normal
approximation (:func:`~.means.betting_interval`), or ``student``: mean +- t sd / sqrt N, approximate
(``tests/test_parallel.py`` measures the achieved coverage of both against exact values). The ``kl`` terms are
unbounded, so no finite-sample interval holds for their mean without a bound on them: ``kl_low`` is the lower limit
that TV's gives, ``max(2 t^2, -log(1 - t^2))`` at ``t = tv_low`` (Pinsker; Bretagnolle-Huber), valid at the same
level, and ``kl_high`` is ``nan`` (no finite-sample upper limit; the estimate ``kl`` is unbiased).

**Influence estimate** (:func:`first_order_error`): the chain rule for total variation gives, since ``P`` is a
product and ``Q``'s first factor is ``P``'s,

    TV(Q, P) <= sum_{k >= 2} E_{y ~ Q}[ TV(q_k(. | y_{<k}), q_k(. | all masked)) ],

with equality for ``K = 2``. Bounding each term by the single-position influences at the all-masked context,

    a_kj = E_{v ~ q_j}[ TV(q_k(. | y_j = v), q_k(. | all masked)) ]   (top-m values v; the mass left out counts 1),

gives ``E1 = min(1, sum_k sum_{j < k} a_kj)``: ``K m`` forward rows. For ``K = 2`` it is an upper bound, equal to
the error when ``m`` covers the support. For ``K > 2`` it is a first-order estimate, not a bound: it bounds the error
when committing other positions of the set never increases the influence of ``j`` on ``k``, and no quantity read
from one position at a time can bound it in general (a position that reads the parity of two others is moved by
neither alone; error 1/2, estimate 0). On tiny random BERTs it fell below the exact error in 1-12 % of sets at
``K = 3, 4`` (docs/concepts/parallel-decoding.md gives the numbers).

**Confidence certificate**: with confidences ``c_i = max_v q_i(v | all masked)`` (the sampler's law), every law whose
marginals are the ``q_i`` puts at least ``1 - delta`` on the modal tuple, ``delta = sum_{i in S} (1 - c_i)``
(Frechet-Hoeffding); both ``P`` and a compatible ``Q`` then do, so ``TV(Q, P) <= delta``. The confidence rules of
Fast-dLLM and its successors rest on this; a measured ``tv`` above ``delta`` shows conditionals whose sequential law
does not keep their own marginals (:func:`confidence_profile` checks the rules step by step).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from scipy import stats
from torch import Tensor

from .._random import Randomness, as_generator
from ..models.base import Denoiser, check_attention_mask, require_integer
from ..models.full_sequence import FullSequenceDenoiser, padded_rows
from ..models.toy import enumerate_states
from ..sampling.categorical import check_temperature, check_truncation, inverse_cdf, tempered_log_probs
from .means import betting_interval

Law = Callable[[Tensor], Tensor]


@dataclass
class ParallelCommitError:
    """:func:`parallel_commit_error` per row (see the module docstring for each quantity).

    Attributes:
        tv, kl, disagreement: ``[B]`` estimates (exact values when ``exact``).
        tv_low, tv_high, disagreement_low, disagreement_high, kl_low, kl_high: ``[B]`` interval ends at ``level``
            (equal to the estimate when exact). ``kl_low`` is the bound TV's lower limit gives (module docstring),
            ``kl_high`` ``nan`` in Monte Carlo: no finite-sample upper limit exists for unbounded terms.
        order_spread, order_spread_high: ``[B]`` largest TV to another order's sequential law, and its upper
            interval end (``nan`` without other orders).
        certificate: ``[B]`` the Frechet-Hoeffding bound ``sum_i (1 - c_i)`` (valid for compatible conditionals).
        positions: ``[B, K]`` the positions in the order the sequential law committed them.
        exact: whether the values were enumerated; samples: Monte Carlo draws per row (0 when exact).
        level: the intervals' level; forward_rows: rows through the model (with ``first_order``'s).
        first_order: the influence estimate of the same set from the same root forward (:func:`first_order_error`),
            where ``top_m`` was given.
        confidence: ``[B, K]`` each position's confidence ``c_i`` under the sampler's law with the whole set masked,
            in the order of ``positions`` (two nearly equal ones: a near-tie, whose commit order a sampler may take
            either way).
    """

    positions: Tensor
    tv: Tensor
    tv_low: Tensor
    tv_high: Tensor
    kl: Tensor
    kl_low: Tensor
    kl_high: Tensor
    disagreement: Tensor
    disagreement_low: Tensor
    disagreement_high: Tensor
    order_spread: Tensor
    order_spread_high: Tensor
    certificate: Tensor
    exact: bool
    samples: int
    level: float
    forward_rows: int
    first_order: FirstOrderError | None = None
    confidence: Tensor | None = None

    def summary(self) -> dict[str, float]:
        """Means over rows of ``tv``, its interval ends, ``kl``, ``disagreement``, ``order_spread`` and the
        ``certificate``; ``tv_max``; ``certificate_violated``: the fraction of rows whose error exceeds the
        certificate for sure (``tv_low > certificate``); ``exact`` (1/0), ``samples``, ``forward_rows``."""
        def mean(values: Tensor) -> float:
            finite = values[~values.isnan()]
            return float(finite.mean()) if len(finite) else math.nan

        return {"tv": mean(self.tv), "tv_low": mean(self.tv_low), "tv_high": mean(self.tv_high),
                "tv_max": float(self.tv.max()), "kl": mean(self.kl), "disagreement": mean(self.disagreement),
                "order_spread": mean(self.order_spread), "certificate": mean(self.certificate),
                "certificate_violated": float((self.tv_low > self.certificate + 1e-12).double().mean()),
                "exact": float(self.exact), "samples": float(self.samples), "forward_rows": float(self.forward_rows)}


def confidences(law: Tensor) -> Tensor:
    """``[..., K]`` confidence ``max_v q(v)`` of each position's law ``[..., K, V]`` (log-probabilities)."""
    return law.exp().amax(-1)


def _overlap(first: Tensor, second: Tensor) -> Tensor:
    """``[..., V]`` length of ``I_A(v) & I_B(v)`` for the inverse-CDF intervals of two laws (log-probs ``[..., V]``,
    ids in order): the probability that one uniform picks ``v`` under both."""
    a, b = first.exp().cumsum(-1), second.exp().cumsum(-1)
    low = torch.maximum(torch.nn.functional.pad(a[..., :-1], (1, 0)), torch.nn.functional.pad(b[..., :-1], (1, 0)))
    return (torch.minimum(a, b) - low).clamp_min(0)


class _Tree:
    """The rows' sequential forwards: the law of the next position of an order given committed values."""

    def __init__(self, denoiser: Denoiser, tokens: Tensor, positions: Tensor, mask: Tensor | None, law: Law,
                 chunk_size: int, *, check: bool = True) -> None:
        self.denoiser, self.tokens, self.positions, self.mask = denoiser, tokens, positions, mask
        self.law, self.chunk_size, self.rows = law, chunk_size, 0
        self.checked = not check  # once per call, on its first forward of two rows or more (the root's, or for one
        # row the first batch of its prefixes): the rows of its other trees are these rows
        self.root = law(self._logits(tokens, positions, mask))  # [B, K, V], all of S masked: the parallel marginals

    def head(self, n: int) -> _Tree:
        """The tree of the first ``n`` positions, sharing this one's root (no forward; its ``rows`` start at 0)."""
        tree = _Tree.__new__(_Tree)
        tree.denoiser, tree.tokens, tree.mask, tree.law = self.denoiser, self.tokens, self.mask, self.law
        tree.chunk_size, tree.rows, tree.checked = self.chunk_size, 0, self.checked
        tree.positions, tree.root = self.positions[:, :n], self.root[:, :n]
        return tree

    def by_confidence(self) -> None:
        """Reorder each row's positions (and laws) by decreasing confidence: the order samplers commit in."""
        order = confidences(self.root).argsort(dim=1, descending=True, stable=True)
        self.positions = self.positions.gather(1, order)
        self.root = self.root.gather(1, order[..., None].expand_as(self.root))

    def _logits(self, tokens: Tensor, positions: Tensor, mask: Tensor | None) -> Tensor:
        self.rows += int(tokens.shape[0])
        logits = self.denoiser.chunked_conditional_logits(tokens, positions, self.chunk_size, mask).double()
        if not self.checked and tokens.shape[0] > 1:
            check_rows_independent(self.denoiser, tokens, positions, mask, logits)
            self.rows, self.checked = self.rows + 1, True
        return logits

    def next_law(self, rows: Tensor, order: list[int], values: Tensor) -> Tensor:
        """``[N, V]`` law of position ``order[k]`` for rows ``rows [N]`` (indices into the batch) with the first
        ``k = values.shape[1]`` positions of ``order`` committed to ``values [N, k]`` (the rest masked)."""
        k = values.shape[1]
        if k == 0:
            return self.root[rows, order[0]]
        cols = torch.tensor(order, device=self.tokens.device)
        filled = self.tokens[rows].scatter(1, self.positions[rows][:, cols[:k]], values)
        mask = None if self.mask is None else self.mask[rows]
        return self.law(self._logits(filled, self.positions[rows][:, cols[k:]], mask))[:, 0]


def _gap(first: Tensor, second: Tensor) -> float:
    """The largest difference of two logit tensors as log-probabilities over their last axis (NaN as none)."""
    return float((first.log_softmax(-1) - second.log_softmax(-1)).abs().nan_to_num(0.0).max())


def check_rows_independent(denoiser: Denoiser, tokens: Tensor, positions: Tensor, mask: Tensor | None,
                           logits: Tensor, tolerance: float = 1e-3) -> None:
    """A ValueError when the batch's last row, computed alone, differs from its value in the batch ``logits
    [B, K, V]`` by more than ``tolerance`` in log-probability: a model whose rows depend on each other (attention or
    normalisation across the batch, batches of three or more only) or on their place in the batch gives no row a law
    of its own, so no error of it is any sequence's. The last row is the one that a dependence on the rows before it,
    on the batch's size or on the row's index shows in. When they differ, the row alone once more tells a model that
    is not deterministic (two calls on one row differ: dropout on, noise drawn in the forward) from one whose rows
    interact, and the message names which. Float rounding between batch sizes stays near 1e-6, far below. Cost: one
    forward row (two when refused; none for one row)."""
    if tokens.shape[0] < 2:
        return
    last = slice(-1, None)

    def alone() -> Tensor:
        return denoiser.conditional_logits(tokens[last], positions[last], None if mask is None else mask[last])[0]

    first = alone().double()
    gap = _gap(first, logits[-1])
    if gap <= tolerance:
        return
    again = _gap(alone().double(), first)
    if again > tolerance:
        raise ValueError(f"denoiser: it is not deterministic: two calls on the same row give conditionals that "
                         f"differ by {again:.3g} in log-probability (dropout in train mode, or noise drawn in its "
                         "forward), so its errors would be of no law; measure it in eval mode, without noise")
    raise ValueError(f"denoiser: its conditionals for a row depend on the other rows of the batch or on the row's "
                     f"place in it (row {tokens.shape[0] - 1} alone differs from the same row in a batch of "
                     f"{tokens.shape[0]} by {gap:.3g} in log-probability): its errors would be of no sequence's law; "
                     "measure a model whose rows are independent")


def _orders(k: int, orders: int, generator: torch.Generator) -> list[list[int]]:
    """The given order, then the reversed one, then ``orders - 1`` random permutations."""
    given = list(range(k))
    others = [given[::-1]] if orders >= 1 and k > 1 else []
    others += [torch.randperm(k, generator=generator).tolist() for _ in range(orders - 1)] if k > 1 else []
    return [given, *others]


def _exact_tables(tree: _Tree, order: list[int], allowed: Tensor) -> tuple[Tensor, Tensor]:
    """``(log Q [B, A^K] in canonical column order, agreement [B])`` by enumeration over the ``A`` allowed ids."""
    batch, k_total = tree.positions.shape
    a = len(allowed)
    logq = tree.root[:, order[0]][:, allowed]  # [B, A]
    agree = _overlap(tree.root[:, order[0]], tree.root[:, order[0]])[:, allowed]
    for k in range(1, k_total):
        prefixes = allowed[enumerate_states(k, a, device=allowed.device)]  # [A^k, k] ids
        live = torch.isfinite(logq)  # [B, A^k]
        rows, index = live.nonzero(as_tuple=True)
        law = torch.full((batch, a ** k, tree.root.shape[-1]), -math.inf, dtype=torch.float64,
                         device=logq.device)
        overlap = torch.zeros_like(law)
        if len(rows):
            step = tree.next_law(rows, order, prefixes[index])
            law[rows, index] = step
            overlap[rows, index] = _overlap(step, tree.root[rows, order[k]])
        logq = (logq[..., None] + law[..., allowed]).reshape(batch, -1)
        agree = (agree[..., None] * overlap[..., allowed]).reshape(batch, -1)
    # axes follow the order's columns (first committed most significant): permute them to columns 0..K-1
    shape = (batch, *([a] * k_total))
    inverse = [1 + order.index(c) for c in range(k_total)]
    logq = logq.reshape(shape).permute(0, *inverse).reshape(batch, -1)
    return logq, agree.sum(-1)


def _parallel_table(tree: _Tree, allowed: Tensor) -> Tensor:
    """``[B, A^K]`` log P in canonical column order."""
    par = tree.root[:, :, allowed]  # [B, K, A]
    table = par[:, 0]
    for k in range(1, par.shape[1]):
        table = (table[..., None] + par[:, k, None, :]).reshape(par.shape[0], -1)
    return table


def _tv(logq: Tensor, logp: Tensor) -> Tensor:
    return 0.5 * (logq.exp() - logp.exp()).abs().sum(-1)


def kl_lower_from_tv(tv_low: Tensor) -> Tensor:
    """``KL(Q || P) >= max(2 t^2, -log(1 - t^2))`` for ``TV(Q, P) >= t`` (Pinsker; Bretagnolle-Huber): a lower limit
    on ``kl`` at the level of ``tv_low [B]``. Cost: none."""
    t = tv_low.clamp(0, 1).double()
    return torch.maximum(2 * t**2, -torch.log1p(-(t**2)))


def _kl(logq: Tensor, logp: Tensor) -> Tensor:
    q = logq.exp()
    terms = torch.where(q > 0, q * (logq - logp), torch.zeros_like(q))
    return terms.sum(-1)


def _draw(tree: _Tree, order: list[int], uniforms: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Sequential draws in ``order`` from ``uniforms [B, N, K]`` (inverse CDF): ``(values [B, N, K] in column order,
    log Q [B, N], agree [B, N], last [B, N, V])``; agree: the parallel draw from the same uniforms is the same tuple;
    last: the law of the last position of the order given each draw's prefix."""
    batch, samples, k_total = uniforms.shape
    rows = torch.arange(batch, device=uniforms.device).repeat_interleave(samples)
    values = torch.zeros(batch * samples, k_total, dtype=torch.long, device=uniforms.device)
    logq = torch.zeros(batch * samples, dtype=torch.float64, device=uniforms.device)
    agree = torch.ones(batch * samples, dtype=torch.bool, device=uniforms.device)
    flat = uniforms.reshape(batch * samples, k_total)
    law = tree.root[rows, order[0]]
    for k, column in enumerate(order):
        law = tree.next_law(rows, order, values[:, order[:k]])
        drawn = inverse_cdf(law.exp(), flat[:, column])
        parallel = inverse_cdf(tree.root[rows, column].exp(), flat[:, column])
        values[:, column] = drawn
        logq += law.gather(1, drawn[:, None]).squeeze(1)
        agree &= drawn == parallel
    return (values.view(batch, samples, k_total), logq.view(batch, samples), agree.view(batch, samples),
            law.view(batch, samples, -1))


def interval(terms: Tensor, level: float, method: str) -> tuple[Tensor, Tensor]:
    """``(low, high)`` for the mean of iid ``terms [..., N]`` in ``[0, 1]``: ``betting``
    (:func:`~.means.betting_interval`, coverage guaranteed) or ``student`` (mean +- t sd / sqrt N, approximate: 0.92
    achieved at a nominal 0.95 with 32 and 64 draws, 0.81 with 16, on tiny BERTs), clipped to ``[0, 1]``."""
    if method == "betting":
        return betting_interval(terms, level)
    n = terms.shape[-1]
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * terms.std(-1) / math.sqrt(n)
    mean = terms.mean(-1)
    return (mean - half).clamp(0, 1), (mean + half).clamp(0, 1)


def _log_sequential(tree: _Tree, order: list[int], values: Tensor) -> Tensor:
    """``log Q_order`` of ``values [B, N, K]`` (column order): ``K - 1`` forwards of ``B N`` rows."""
    batch, samples, k_total = values.shape
    rows = torch.arange(batch, device=values.device).repeat_interleave(samples)
    flat = values.reshape(batch * samples, k_total)
    total = torch.zeros(batch * samples, dtype=torch.float64, device=values.device)
    for k, column in enumerate(order):
        law = tree.next_law(rows, order, flat[:, order[:k]])
        total += law.gather(1, flat[:, column : column + 1]).squeeze(1)
    return total.view(batch, samples)


def _sampler_law(denoiser: Denoiser, temperature: float, top_k: int | None, top_p: float | None,
                 device: torch.device, top_p_first: bool = False) -> Law:
    allowed = denoiser.vocab.allowed_mask(device)

    def law(logits: Tensor) -> Tensor:
        return tempered_log_probs(logits, allowed, temperature, top_k=top_k, top_p=top_p, dtype=torch.float64,
                                  top_p_first=top_p_first)

    return law


def check_commit_positions(denoiser: Denoiser, tokens: Tensor, positions: Tensor,
                           attention_mask: Tensor | None) -> Tensor | None:
    """The checked padding mask; ValueErrors naming ``tokens``, ``positions`` or ``attention_mask`` first."""
    require_integer("tokens", tokens)
    require_integer("positions", positions)
    if tokens.dim() != 2 or positions.dim() != 2 or positions.shape[0] != tokens.shape[0] or positions.shape[1] < 1:
        raise ValueError(f"positions must be [B, K] with K >= 1 for tokens [B, L] = {tuple(tokens.shape)}, got "
                         f"{tuple(positions.shape)}")
    if positions.min() < 0 or positions.max() >= tokens.shape[1]:
        raise ValueError(f"positions must lie in [0, {tokens.shape[1]}), got range [{int(positions.min())}, "
                         f"{int(positions.max())}]")
    ordered = positions.sort(1).values
    if bool((ordered[:, 1:] == ordered[:, :-1]).any()):
        raise ValueError("positions must be distinct within each row")
    mask = check_attention_mask(attention_mask, tokens)
    if mask is None and isinstance(denoiser, FullSequenceDenoiser) and denoiser.padding_id is not None \
            and not denoiser.warned_padding:  # the caller's rows, not the sequential forwards' (drawn EOS)
        right = padded_rows(tokens.long().scatter(1, positions.long(), denoiser.mask_id), denoiser.mask_id,
                            denoiser.padding_id)[1]
        if right:
            denoiser.warn_padding(right, "end their prompt, right before the masked positions, with")
    free = denoiser.free_mask(tokens, mask).gather(1, positions.long())
    if not bool(free.all()):
        row, column = (int(i) for i in (~free).nonzero()[0])
        position = int(positions[row, column])
        raise ValueError(f"positions: row {row}, position {position} (id {int(tokens[row, position])}) is a frame "
                         "token, padding or has no conditional (the model never resamples it)")
    return mask


MAX_ROWS = 4096
""":func:`parallel_commit_error`'s default bound on the forward rows per row of an exact enumeration."""


def enumerable(allowed: int, k: int, max_rows: int = MAX_ROWS) -> bool:
    """Whether the error of committing ``k`` positions over ``allowed`` ids is enumerated exactly: the tree of
    sequential forwards, ``1 + A + ... + A^(k-1)`` rows per row, fits in ``max_rows`` and the ``A^k`` joint values in
    ``16 max_rows`` (else Monte Carlo)."""
    return sum(allowed ** j for j in range(k)) <= max_rows and allowed ** k <= 16 * max_rows


@torch.no_grad()
def parallel_commit_error(denoiser: Denoiser, tokens: Tensor, positions: Tensor, *, temperature: float = 1.0,
                          top_k: int | None = None, top_p: float | None = None, orders: int = 1,
                          samples: int = 256, max_rows: int = MAX_ROWS, level: float = 0.95,
                          generator: Randomness = 0, attention_mask: Tensor | None = None,
                          order: Literal["given", "confidence"] = "given",
                          method: Literal["betting", "student"] = "betting", top_m: int | None = None,
                          chunk_size: int = 256, top_p_first: bool = False) -> ParallelCommitError:
    """The error of committing ``positions [B, K]`` of ``tokens [B, L]`` at once against one at a time in the
    column order given, or with ``order="confidence"`` the most confident first (each row's positions sorted by
    their parallel marginal's largest probability); see the module docstring for the laws and the estimators.

    Exact by enumeration when ``1 + A + ... + A^(K-1)`` rows per row fit in ``max_rows`` (``A``: allowed ids) and
    the ``A^K`` joint values in ``16 max_rows``; else Monte Carlo with ``samples`` draws per row. ``orders``: other
    orders compared for the spread (the reversed order first). The values at ``positions`` in ``tokens`` are
    ignored (masked). ``top_m``: also the influence estimate of the set (:attr:`ParallelCommitError.first_order`),
    sharing the root forward. ``top_p_first``: truncate to the nucleus before the top-k (Dream's order;
    :func:`~mlm_dynamics.sampling.categorical.tempered_log_probs`). Cost: exact ``B (1 + A + ... + A^(K-1))``
    forward rows per order; Monte Carlo
    ``B (1 + samples (K - 1) (1 + orders))``; with ``top_m``, ``B K top_m`` more; one more row for the call's first
    forward of two rows or more, the root's or one row's first prefixes (its last row alone: a model whose rows depend
    on each other, or that is not deterministic, is refused naming which, :func:`check_rows_independent`).

    Examples:
        Two positions of an independent model: committing them together is exact (error 0, up to the toy's float32
        rounding):

        >>> import torch
        >>> from mlm_dynamics import PairwiseMRFDenoiser
        >>> from mlm_dynamics.diagnostics.parallel import parallel_commit_error
        >>> free = PairwiseMRFDenoiser(torch.randn(4, 3), torch.zeros(4, 4, 3, 3))
        >>> error = parallel_commit_error(free, torch.zeros(2, 4, dtype=torch.long), torch.tensor([[0, 2], [1, 3]]))
        >>> error.exact, [round(v, 6) for v in error.tv.tolist()], [round(v, 6) for v in error.order_spread.tolist()]
        (True, [0.0, 0.0], [0.0, 0.0])
    """
    if order not in ("given", "confidence"):
        raise ValueError(f"order must be 'given' or 'confidence', got {order!r}")
    _check_estimation(temperature, top_k, top_p, level, method, orders=orders, samples=samples, max_rows=max_rows,
                      top_m=top_m)
    mask = check_commit_positions(denoiser, tokens, positions, attention_mask)
    device = tokens.device
    tree = _Tree(denoiser, tokens.long(), positions.to(device).long(), mask,
                 _sampler_law(denoiser, temperature, top_k, top_p, device, top_p_first), chunk_size)
    if order == "confidence":
        tree.by_confidence()
    error = _commit_error(tree, orders=orders, samples=samples, max_rows=max_rows, level=level, method=method,
                          generator=as_generator(generator, "parallel_commit_error", device=device))
    if top_m is not None:
        error.first_order = _first_order(tree, top_m)
        error.forward_rows = tree.rows
    return error


def _check_estimation(temperature: float, top_k: int | None, top_p: float | None, level: float, method: str,
                      **counts: int | None) -> None:
    """A ValueError naming the first argument of :func:`parallel_commit_error` out of its range (``counts``:
    ``orders >= 0``, ``samples >= 2``, ``max_rows >= 1``, ``top_m >= 1``; ``None`` skipped)."""
    check_temperature(temperature)
    check_truncation(top_k, top_p)
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    if method not in ("betting", "student"):
        raise ValueError(f"method must be 'betting' or 'student', got {method!r}")
    least = {"orders": 0, "samples": 2}
    for name, value in counts.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least.get(name, 1)):
            raise ValueError(f"{name} must be an integer >= {least.get(name, 1)}, got {value!r}")


def _commit_error(tree: _Tree, *, orders: int, samples: int, max_rows: int, level: float,
                  method: Literal["betting", "student"], generator: torch.Generator) -> ParallelCommitError:
    """:func:`parallel_commit_error` of a tree whose root is computed (its rows counted)."""
    device = tree.tokens.device
    allowed = tree.denoiser.vocab.allowed_mask(device).nonzero().squeeze(1)
    batch, k_total = tree.positions.shape
    a = len(allowed)
    exact = enumerable(a, k_total, max_rows)
    certificate = (1 - confidences(tree.root)).sum(-1)
    sequence = _orders(k_total, orders, generator)
    nan = torch.full((batch,), math.nan, dtype=torch.float64, device=device)
    if exact:
        logp = _parallel_table(tree, allowed)
        tables = [_exact_tables(tree, sigma, allowed) for sigma in sequence]
        logq, agree = tables[0]
        tv, kl = _tv(logq, logp), _kl(logq, logp)
        spread = torch.stack([_tv(logq, other) for other, _ in tables[1:]]).amax(0) if len(tables) > 1 else nan
        disagreement = 1 - agree
        return ParallelCommitError(positions=tree.positions, tv=tv, tv_low=tv, tv_high=tv, kl=kl, kl_low=kl, kl_high=kl,
                                   disagreement=disagreement, disagreement_low=disagreement,
                                   disagreement_high=disagreement, order_spread=spread, order_spread_high=spread,
                                   certificate=certificate, exact=True, samples=0, level=level,
                                   forward_rows=tree.rows, confidence=confidences(tree.root))
    uniforms = torch.rand(batch, samples, k_total, generator=generator, device=device, dtype=torch.float64)
    given = sequence[0]
    values, logq, agree, last = _draw(tree, given, uniforms)
    logp = tree.root.gather(2, values.transpose(1, 2)).sum(1)  # [B, N]: P at the draws
    # Rao-Blackwell over the last position: its law given each prefix is known, so sum it out exactly
    tail = values[..., given[-1]][..., None]
    last_p = tree.root[:, given[-1]][:, None, :]  # [B, 1, V]
    ratio = (logp - last_p.squeeze(1).gather(1, values[..., given[-1]]) - logq
             + last.gather(2, tail).squeeze(2)).exp()  # P(prefix) / Q(prefix)
    tv_terms = (last.exp() - ratio[..., None] * last_p.exp()).clamp_min(0).sum(-1).clamp(0, 1)
    inner = torch.where(last > -math.inf, last.exp() * (last - last_p), torch.zeros_like(last)).sum(-1)
    kl_terms = -ratio.log() + inner
    tv_low, tv_high = interval(tv_terms, level, method)
    mismatch = (~agree).double()
    d_low, d_high = interval(mismatch, level, method)
    kl = kl_terms.mean(-1)
    spread, spread_high = nan, nan
    if len(sequence) > 1:
        terms = torch.stack([(1 - (_log_sequential(tree, sigma, values) - logq).exp()).clamp_min(0)
                             for sigma in sequence[1:]])  # [orders, B, N]: TV(Q, Q_sigma) terms at Q's draws
        spread, spread_high = terms.mean(-1).amax(0), interval(terms, level, method)[1].amax(0)
    return ParallelCommitError(positions=tree.positions, tv=tv_terms.mean(-1), tv_low=tv_low, tv_high=tv_high, kl=kl,
                               kl_low=kl_lower_from_tv(tv_low), kl_high=torch.full_like(kl, math.nan),
                               disagreement=mismatch.mean(-1), disagreement_low=d_low, disagreement_high=d_high,
                               order_spread=spread, order_spread_high=spread_high, certificate=certificate,
                               exact=False, samples=samples, level=level, forward_rows=tree.rows,
                               confidence=confidences(tree.root))


GREEDY_TIE = 1e-4
"""Two ids whose log-probabilities at a position differ by less than this are an argmax near-tie: float rounding,
another batch shape or bf16 can make either the greedy pick."""


@dataclass
class GreedyCommitError:
    """:func:`greedy_commit_error` per row.

    Attributes:
        positions: ``[B, K]`` the committed positions, in the order the sequential decode commits them.
        parallel: ``[B, K]`` the tokens the parallel step committed there.
        sequential: ``[B, K]`` the sequential greedy decode's tokens (its first equals the parallel one's).
        differ: ``[B]`` how many of the ``K`` tokens differ (``0 .. K - 1``).
        first_differ: ``[B]`` the index into ``positions`` of the first token that differs, ``-1`` where none does.
        near_ties: ``[B]`` whether a sequential pick had a runner-up within :data:`GREEDY_TIE` in log-probability
            (that pick, and what follows it, may go the other way under other rounding).
        forward_rows: rows through the model (``B (K - 1)``, plus one for the batch check).
    """

    positions: Tensor
    parallel: Tensor
    sequential: Tensor
    differ: Tensor
    first_differ: Tensor
    near_ties: Tensor
    forward_rows: int

    def summary(self) -> dict[str, float]:
        """``differ`` (mean over rows), ``differ_max``, ``differ_share`` (differing tokens over committed tokens),
        ``exact_match`` (share of rows with no token differing), ``near_ties`` (share of rows) and
        ``forward_rows``."""
        return {"differ": float(self.differ.double().mean()), "differ_max": float(self.differ.max()),
                "differ_share": float(self.differ.sum()) / self.positions.numel(),
                "exact_match": float((self.differ == 0).double().mean()),
                "near_ties": float(self.near_ties.double().mean()), "forward_rows": float(self.forward_rows)}


@torch.no_grad()
def greedy_commit_error(denoiser: Denoiser, tokens: Tensor, positions: Tensor, values: Tensor, *,
                        attention_mask: Tensor | None = None, chunk_size: int = 256) -> GreedyCommitError:
    """What a greedy step that committed ``values [B, K]`` at ``positions [B, K]`` of ``tokens [B, L]`` at once (each
    its position's argmax with the whole set masked) would have committed one token per forward, in the column order
    given: the sequential greedy decode from the same state,

        y_1 = values_1,   y_k = argmax_v q_k(v | x_{-S}, y_1, ..., y_{k-1})   (positions s_{k+1}, ..., s_K masked),

    over the allowed ids, and how many of its ``K`` tokens differ from ``values``. Deterministic, so exact (no
    interval): ties in an argmax are flagged (:attr:`GreedyCommitError.near_ties`) rather than resolved. The values
    at ``positions`` in ``tokens`` are ignored (masked). Cost: ``B (K - 1)`` forward rows, one more for ``B > 1`` and
    ``K > 1`` (the batch's last row alone: :func:`check_rows_independent`).

    Examples:
        Two positions of an independent model decode the same one at a time as together:

        >>> import torch
        >>> from mlm_dynamics import PairwiseMRFDenoiser
        >>> from mlm_dynamics.diagnostics.parallel import greedy_commit_error
        >>> free = PairwiseMRFDenoiser(torch.tensor([[0.0, 1.0], [2.0, 0.0], [0.0, 0.0]]), torch.zeros(3, 3, 2, 2))
        >>> greedy_commit_error(free, torch.zeros(1, 3, dtype=torch.long), torch.tensor([[0, 1]]),
        ...                     torch.tensor([[1, 0]])).differ.tolist()
        [0]
    """
    mask = check_commit_positions(denoiser, tokens, positions, attention_mask)
    require_integer("values", values)
    if tuple(values.shape) != tuple(positions.shape):
        raise ValueError(f"values must be [B, K] like positions {tuple(positions.shape)}, got {tuple(values.shape)}")
    device = tokens.device
    allowed = denoiser.vocab.allowed_mask(device)
    positions, values = positions.to(device).long(), values.to(device).long()
    if values.min() < 0 or values.max() >= len(allowed) or not bool(allowed[values].all()):
        raise ValueError("values: a committed token is not an id the denoiser allows (mask, padding or outside the "
                         "vocabulary)")
    batch, k_total = positions.shape
    sequential, ties, rows = values.clone(), torch.zeros(batch, dtype=torch.bool, device=device), 0
    for k in range(1, k_total):
        filled = tokens.long().scatter(1, positions[:, :k], sequential[:, :k])
        logits = denoiser.chunked_conditional_logits(filled, positions[:, k:], chunk_size, mask).double()
        rows += batch
        if k == 1:
            check_rows_independent(denoiser, filled, positions[:, k:], mask, logits)
            rows += 1 if batch > 1 else 0
        law = logits[:, 0].masked_fill(~allowed, -math.inf).log_softmax(-1)
        top = law.topk(2, dim=-1).values
        ties |= (top[:, 0] - top[:, 1]) < GREEDY_TIE
        sequential[:, k] = law.argmax(-1)
    differs = sequential != values
    first = torch.where(differs.any(1), differs.double().argmax(1), torch.full_like(differs[:, 0], -1,
                                                                                    dtype=torch.long))
    return GreedyCommitError(positions=positions, parallel=values, sequential=sequential, differ=differs.sum(1),
                             first_differ=first, near_ties=ties, forward_rows=rows)


@dataclass
class FirstOrderError:
    """:func:`first_order_error` per row.

    Attributes:
        influence: ``[B, K, K]``, entry ``[k, j]`` = ``a_kj``, the expected TV that committing position ``j`` alone
            moves position ``k``'s law by (top-m values of ``j``, the left-out mass counted as 1).
        estimate: ``[B]`` ``min(1, sum_{j < k} a_kj)`` for the column order.
        left_out: ``[B, K]`` the mass of each position's law outside its top-m values.
        is_bound: whether ``estimate`` is an upper bound on the error (``K <= 2``; module docstring).
        forward_rows: rows through the model.
    """

    influence: Tensor
    estimate: Tensor
    left_out: Tensor
    is_bound: bool
    forward_rows: int

    def summary(self) -> dict[str, float]:
        """``first_order`` (mean over rows), ``first_order_max``, ``influence_max`` (largest ``a_kj``),
        ``left_out_max`` and ``first_order_is_bound`` (1/0)."""
        return {"first_order": float(self.estimate.mean()), "first_order_max": float(self.estimate.max()),
                "influence_max": float(self.influence.max()), "left_out_max": float(self.left_out.max()),
                "first_order_is_bound": float(self.is_bound), "forward_rows": float(self.forward_rows)}


@torch.no_grad()
def first_order_error(denoiser: Denoiser, tokens: Tensor, positions: Tensor, *, temperature: float = 1.0,
                      top_k: int | None = None, top_p: float | None = None, top_m: int = 8,
                      attention_mask: Tensor | None = None, chunk_size: int = 256) -> FirstOrderError:
    """The influence estimate of :func:`parallel_commit_error`'s ``tv`` (module docstring; an upper bound for
    ``K <= 2``): for each position ``j`` of ``positions [B, K]`` and each of its ``top_m`` most likely values, one row
    with only ``j`` committed.

    Cost: ``B (1 + K top_m)`` forward rows (against ``B (1 + A + ... + A^(K-1))`` for the exact error).
    """
    _check_estimation(temperature, top_k, top_p, 0.5, "betting", top_m=top_m)
    mask = check_commit_positions(denoiser, tokens, positions, attention_mask)
    device = tokens.device
    tree = _Tree(denoiser, tokens.long(), positions.to(device).long(), mask,
                 _sampler_law(denoiser, temperature, top_k, top_p, device), chunk_size)
    estimate = _first_order(tree, top_m)
    estimate.forward_rows = tree.rows
    return estimate


def _first_order(tree: _Tree, top_m: int) -> FirstOrderError:
    """:func:`first_order_error` of a tree whose root is computed: ``B K top_m`` more rows."""
    tokens, positions, mask, device = tree.tokens, tree.positions, tree.mask, tree.tokens.device
    rows_before = tree.rows
    batch, k_total = positions.shape
    m = min(top_m, tree.root.shape[-1])
    probs, values = tree.root.exp().topk(m, dim=-1)  # [B, K, m]
    left_out = (1 - probs.sum(-1)).clamp(0, 1)
    influence = torch.zeros(batch, k_total, k_total, dtype=torch.float64, device=device)
    if k_total > 1:
        for j in range(k_total):
            others = [c for c in range(k_total) if c != j]
            rows = torch.arange(batch, device=device).repeat_interleave(m)
            filled = tokens.long()[rows].scatter(1, positions[rows, j : j + 1], values[:, j].reshape(-1, 1))
            law = tree.law(tree._logits(filled, positions[rows][:, others], None if mask is None else mask[rows]))
            moved = 0.5 * (law.exp() - tree.root[rows][:, others].exp()).abs().sum(-1)  # [B m, K - 1]
            expected = (moved.view(batch, m, -1) * probs[:, j, :, None]).sum(1) + left_out[:, j, None]
            influence[:, others, j] = expected.clamp_max(1)
    estimate = torch.tril(influence, -1).sum((1, 2)).clamp_max(1)
    return FirstOrderError(influence=influence, estimate=estimate, left_out=left_out, is_bound=k_total <= 2,
                           forward_rows=tree.rows - rows_before)


RULES: tuple[str, ...] = ("threshold", "factor", "frechet")


def rule_commit_count(confidence: Tensor, rule: str, parameter: float) -> Tensor:
    """``[B]`` how many of the positions a confidence rule commits, from each row's confidences sorted in decreasing
    order ``confidence [B, M]`` (at least one, as the samplers always commit one):

    - ``threshold`` (Fast-dLLM, ``parameter`` = theta): every position with ``c >= theta``;
    - ``factor`` (Fast-dLLM, ``parameter`` = f): the largest ``n`` with ``(n + 1)(1 - c_(n)) < f``;
    - ``frechet`` (a Frechet-Hoeffding profile rule, ``parameter`` = eps): the largest ``n`` with
      ``sum_{i <= n} (1 - c_(i)) <= eps``, i.e. a certified joint correctness ``>= 1 - eps``.
    """
    n = torch.arange(1, confidence.shape[1] + 1, device=confidence.device)
    if rule == "threshold":
        keep = confidence >= parameter
    elif rule == "factor":
        keep = (n + 1) * (1 - confidence) < parameter
    elif rule == "frechet":
        keep = (1 - confidence).cumsum(1) <= parameter
    else:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    return keep.long().cumprod(1).sum(1).clamp_min(1)


THRESHOLD_GRID: tuple[float, ...] = (
    1.0, 0.999, 0.995, *(round(0.99 - 0.01 * i, 2) for i in range(50)), *(round(0.45 - 0.05 * i, 2) for i in range(8)))
"""The confidence thresholds a :class:`DecodingSetting` is chosen among, most cautious first; fixed before any row is
seen, as the fixed-sequence test needs."""


def rows_for_guarantee(share: float, level: float) -> int:
    """The fewest calibration rows for which any setting can be certified to keep the target on ``share`` of fresh
    rows at ``level``: with none of ``n`` rows over it, the binomial p-value ``share^n`` must reach ``1 - level``,
    ``n >= log(1 - level) / log(share)`` (29 at 90 % and 95 %)."""
    return math.ceil(math.log(1 - level) / math.log(share) - 1e-12)


SHARE, LEVEL = 0.9, 0.95
"""The default guarantee of a :class:`DecodingSetting`: at least ``SHARE`` of fresh rows keep the target, with
probability ``LEVEL`` over the calibration rows; the summaries, logs and reports state settings at these."""

ROWS_NEEDED = rows_for_guarantee(SHARE, LEVEL)
"""The fewest calibration rows for a setting at the default guarantee (29)."""


def fixed_sequence(over: Tensor, share: float, level: float) -> tuple[int, Tensor]:
    """Learn-then-Test with fixed-sequence testing (Angelopoulos, Bates, Candes, Jordan and Lei): ``over [N, C]``
    says, for each of ``N`` calibration rows (i.i.d. draws of the decoding states) and ``C`` candidate settings in a
    fixed order, whether the row passes the target at that setting. Each null ``R_c > 1 - share`` (the share of fresh
    rows over the target) is tested with the exact binomial p-value ``p_c = P(Bin(N, 1 - share) <= #over_c)``, in
    order, while ``p_c <= 1 - level``; stopping at the first that is not rejected keeps the family-wise error at
    ``1 - level`` without a multiplicity correction. Returns the index of the last candidate certified (``-1`` for
    none) and the p-values ``[C]`` (``nan`` past the stop). Cost: no forward."""
    counts = over.sum(0).tolist()
    p_values = torch.full((over.shape[1],), math.nan, dtype=torch.float64)
    last = -1
    for c, failures in enumerate(counts):
        p_values[c] = float(stats.binom.cdf(failures, over.shape[0], 1 - share))
        if p_values[c] > 1 - level:
            break
        last = c
    return last, p_values


@dataclass(frozen=True)
class DecodingSetting:
    """For one error target: the one confidence threshold and the one K a sampler can be set to, each with a
    distribution-free guarantee (:meth:`ConfidenceProfile.setting`): with probability at least ``level`` over the
    calibration rows, the share of fresh rows (decoding states drawn as the calibration rows were) whose error stays
    at or below ``target`` is at least ``share``. Certified by Learn-then-Test (:func:`fixed_sequence`) over a grid
    fixed in advance: thresholds :data:`THRESHOLD_GRID` from 1 down, K from 2 up; one position a step (threshold 1,
    ``K = 1``) commits nothing at once and needs no test.

    Attributes:
        target: the error the setting keeps (a row's error read as its interval's upper end: exact where
            enumerated); share: the guaranteed share of fresh rows kept; level: the guarantee's probability.
        threshold: commit every candidate whose confidence is at least this (the most confident one always): the
            smallest value of the grid certified, with every larger one before it.
        k: commit the ``k`` most confident: the largest certified, with every smaller one.
        calibrated_on: the calibration rows; rows_needed: the fewest that can certify anything at ``share`` and
            ``level`` (:func:`rows_for_guarantee`).
        threshold_over, k_over: calibration rows over the target at the chosen threshold and K.
        threshold_p, k_p: their binomial p-values (``nan`` for one position a step, certified by construction).
    """

    target: float
    share: float
    level: float
    threshold: float
    k: int
    calibrated_on: int
    rows_needed: int
    threshold_over: int
    k_over: int
    threshold_p: float
    k_p: float

    def summary(self) -> dict[str, float]:
        """``threshold``, ``k``, ``share``, ``level``, the calibration counts and the p-values."""
        return {"threshold": self.threshold, "k": float(self.k), "share": self.share, "level": self.level,
                "calibrated_on": float(self.calibrated_on), "rows_needed": float(self.rows_needed),
                "threshold_over": float(self.threshold_over), "k_over": float(self.k_over),
                "threshold_p": self.threshold_p, "k_p": self.k_p}


def certify_setting(confidence: Tensor, over: Callable[[Tensor], Tensor], max_k: int, *, target: float,
                    share: float, level: float) -> DecodingSetting:
    """The :class:`DecodingSetting` certified on calibration rows with confidences ``confidence [B, M]`` (sorted in
    decreasing order), where ``over(commits [B]) -> [B]`` says whether each row passes the target when committing its
    ``commits`` most confident candidates (a row committing more than ``max_k``, unmeasured, must count as over):
    :func:`fixed_sequence` over :data:`THRESHOLD_GRID` and over ``K = 2 .. max_k``. The rows must be independent
    draws of the decoding states the setting will meet (the user's prompts, or the model's own states); a ValueError
    naming ``share``/``level``, or how many rows are needed where they are too few for any guarantee. Cost: no
    forward."""
    for name, value in (("share", share), ("level", level)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
            raise ValueError(f"{name} must lie in (0, 1), got {value!r}")
    rows = confidence.shape[0]
    needed = rows_for_guarantee(share, level)
    if rows < needed:
        raise ValueError(f"rows: a setting that keeps the target on {share:.0%} of fresh rows with probability "
                         f"{level:.0%} needs at least {needed} calibration rows; the profile has {rows} (measure "
                         "more prompts or decoding states)")
    thresholds, ks = THRESHOLD_GRID[1:], list(range(2, max_k + 1))
    by_threshold = torch.stack([over(rule_commit_count(confidence, "threshold", value)) for value in thresholds],
                               1).cpu()
    by_k = torch.stack([over(torch.full((rows,), n, device=confidence.device)) for n in ks], 1).cpu() if ks else \
        torch.zeros(rows, 0, dtype=torch.bool)
    last, p_threshold = fixed_sequence(by_threshold, share, level)
    last_k, p_k = fixed_sequence(by_k, share, level)
    return DecodingSetting(target=target, share=float(share), level=float(level),
                           threshold=thresholds[last] if last >= 0 else THRESHOLD_GRID[0],
                           k=ks[last_k] if last_k >= 0 else 1, calibrated_on=rows, rows_needed=needed,
                           threshold_over=int(by_threshold[:, last].sum()) if last >= 0 else 0,
                           k_over=int(by_k[:, last_k].sum()) if last_k >= 0 else 0,
                           threshold_p=float(p_threshold[last]) if last >= 0 else math.nan,
                           k_p=float(p_k[last_k]) if last_k >= 0 else math.nan)


@dataclass
class ConfidenceProfile:
    """:func:`confidence_profile`: the error of committing a row's ``n`` most confident candidates at once, for
    ``n = 1 .. max_k``, and what the confidence rules would have committed.

    Attributes:
        positions, confidence: ``[B, M]`` the candidates sorted by decreasing confidence, and the confidences.
        tv, tv_low, tv_high: ``[B, max_k]`` the error of the top ``n`` (column ``n - 1``; 0 at ``n = 1``) and its
            interval (equal to it where exact).
        first_order: ``[B, max_k]`` the influence estimate of the same sets (a bound up to ``n = 2``).
        certificate: ``[B, max_k]`` the Frechet-Hoeffding certificate ``sum_{i <= n} (1 - c_(i))`` of each set, from
            its own marginals (for a model without a mask id, whose other candidates keep their tokens, these differ
            from :attr:`confidence`).
        exact: ``[max_k]`` whether each ``n`` was enumerated.
        rules: ``{(rule, parameter)}`` checked by :meth:`summary`; targets: the error targets it answers for.
        level, forward_rows: the intervals' level and the rows through the model.
    """

    positions: Tensor
    confidence: Tensor
    tv: Tensor
    tv_low: Tensor
    tv_high: Tensor
    first_order: Tensor
    certificate: Tensor
    exact: Tensor
    rules: tuple[tuple[str, float], ...]
    targets: tuple[float, ...]
    level: float
    forward_rows: int

    @property
    def max_k(self) -> int:
        """The largest set measured."""
        return int(self.tv.shape[1])

    def rule_outcome(self, rule: str, parameter: float) -> dict[str, Tensor]:
        """Per row: ``k`` committed (capped at ``max_k``; ``capped`` where the rule wanted more), its measured
        ``tv`` and interval, its ``certificate``, and ``violated``: the error exceeds the certificate for sure
        (``tv_low > certificate``). A ValueError naming ``rule``/``parameter`` as :func:`check_rules` does."""
        ((rule, parameter),) = check_rules([(rule, parameter)], "rule_outcome(rule, parameter)")
        wanted = rule_commit_count(self.confidence, rule, parameter)
        k = wanted.clamp_max(self.max_k)
        index = (k - 1)[:, None]
        certificate = self.certificate.gather(1, index)[:, 0]
        tv_low = self.tv_low.gather(1, index)[:, 0]
        return {"k": k, "capped": wanted > self.max_k, "tv": self.tv.gather(1, index)[:, 0], "tv_low": tv_low,
                "tv_high": self.tv_high.gather(1, index)[:, 0], "certificate": certificate,
                "violated": tv_low > certificate + 1e-12}

    def keep(self, target: float) -> tuple[Tensor, Tensor]:
        """``(k [B], threshold [B])``: the largest ``n <= max_k`` whose top-``n`` sets, and every smaller one, have an
        error below ``target`` for sure (``tv_high <= target``), and the confidence threshold that commits exactly
        them (the ``n``-th confidence). A ValueError naming ``target`` unless it is an error in (0, 1)."""
        (target,) = check_targets([target], "target")
        ok = (self.tv_high <= target).long().cumprod(1)
        k = ok.sum(1).clamp_min(1)
        return k, self.confidence.gather(1, (k - 1)[:, None])[:, 0]

    def _kept(self, rows: Tensor, commits: Tensor, target: float) -> Tensor:
        """Per row of ``rows``: whether committing its ``commits`` most confident candidates keeps the error at or
        below ``target`` for sure; a row that would commit more than ``max_k`` (an error not measured) does not."""
        k = commits.clamp(1, self.max_k)
        return (self.tv_high[rows].gather(1, (k - 1)[:, None])[:, 0] <= target) & (commits <= self.max_k)

    def setting(self, target: float, *, share: float = SHARE, level: float = LEVEL) -> DecodingSetting:
        """The one threshold and the one K for ``target``, each guaranteed to keep it on ``share`` of fresh rows with
        probability ``level`` over these rows (:func:`certify_setting`). A setting, not a mean: each row's own
        :meth:`keep` would commit more on some rows and pass the target on others. Cost: no forward."""
        (target,) = check_targets([target], "target")
        every = torch.arange(self.confidence.shape[0], device=self.confidence.device)
        return certify_setting(self.confidence, lambda commits: ~self._kept(every, commits, target), self.max_k,
                               target=target, share=share, level=level)

    def summary(self) -> dict[str, float]:
        """Means over rows: ``tv_k{n}``, ``tv_high_k{n}``, ``first_order_k{n}``, ``certificate_k{n}`` for each ``n``;
        per rule ``{rule}{parameter}/k``, ``/tv``, ``/certificate``, ``/violated`` (fraction of rows), ``/capped``;
        per target the :meth:`setting` (guaranteed on 90 % of fresh rows at 95 %; ``nan`` with fewer rows than that
        needs, :func:`rows_for_guarantee`): ``k_for_tv{target}``, ``threshold_for_tv{target}`` and the shares of
        these rows they left over the target, ``k_over_for_tv{target}``, ``threshold_over_for_tv{target}``;
        ``exact`` (1 when every ``n`` was enumerated) and ``forward_rows``."""
        out: dict[str, float] = {}
        for n in range(1, self.max_k + 1):
            out[f"tv_k{n}"] = float(self.tv[:, n - 1].mean())
            out[f"tv_high_k{n}"] = float(self.tv_high[:, n - 1].mean())
            out[f"first_order_k{n}"] = float(self.first_order[:, n - 1].mean())
            out[f"certificate_k{n}"] = float(self.certificate[:, n - 1].mean())
        for rule, parameter in self.rules:
            outcome = self.rule_outcome(rule, parameter)
            for key in ("k", "tv", "certificate", "violated", "capped"):
                out[f"{rule}{parameter:g}/{key}"] = float(outcome[key].double().mean())
        rows = self.confidence.shape[0]
        for target in self.targets:
            if rows < ROWS_NEEDED:
                values = (math.nan,) * 4
            else:
                setting = self.setting(target)
                values = (float(setting.k), setting.threshold, setting.k_over / rows, setting.threshold_over / rows)
            for key, value in zip(("k_for_tv", "threshold_for_tv", "k_over_for_tv", "threshold_over_for_tv"), values,
                                  strict=True):
                out[f"{key}{target:g}"] = value
        out["exact"] = float(bool(self.exact.all()))
        out["forward_rows"] = float(self.forward_rows)
        return out


@dataclass
class GreedyProfile:
    """:func:`greedy_profile`: a greedy decoding step's candidates, and how far committing the top ``n`` at once moves
    the tokens from the sequential greedy decode.

    Attributes:
        positions, confidence: ``[B, M]`` the candidates sorted by decreasing confidence (the largest probability of
            ``softmax(logits)`` over the allowed ids: the order LLaDA's and Fast-dLLM's greedy rules commit in), and
            the confidences.
        differ: ``[B, max_k]`` how many of the top ``n`` argmax tokens (column ``n - 1``) the sequential greedy
            decode of the same ``n`` positions commits otherwise (0 at ``n = 1``).
        near_ties: ``[B]`` a sequential argmax with a runner-up within :data:`GREEDY_TIE`.
        forward_rows: rows through the model.
    """

    positions: Tensor
    confidence: Tensor
    differ: Tensor
    near_ties: Tensor
    forward_rows: int

    @property
    def max_k(self) -> int:
        """The largest set measured."""
        return int(self.differ.shape[1])

    def setting(self, *, tolerance: int = 0, share: float = SHARE, level: float = LEVEL) -> DecodingSetting:
        """The one threshold and the one K whose committed tokens differ from the sequential greedy decode's in at
        most ``tolerance`` positions (0: the same tokens) on ``share`` of fresh rows, with probability ``level``
        over these rows (:func:`certify_setting`; the setting's ``target`` is ``tolerance``). Cost: no forward."""
        if isinstance(tolerance, bool) or not isinstance(tolerance, int) or tolerance < 0:
            raise ValueError(f"tolerance must be a count of differing tokens >= 0, got {tolerance!r}")

        def over(commits: Tensor) -> Tensor:
            index = (commits.clamp(1, self.max_k) - 1)[:, None]
            return (self.differ.gather(1, index)[:, 0] > tolerance) | (commits > self.max_k)

        return certify_setting(self.confidence, over, self.max_k, target=float(tolerance), share=share, level=level)

    def summary(self) -> dict[str, float]:
        """Per ``n``: ``differ_k{n}`` (mean over rows) and ``match_k{n}`` (share of rows whose top ``n`` match the
        sequential greedy decode); the :meth:`setting` at tolerance 0 (90 % of fresh rows, at 95 %; ``nan`` below
        the rows it needs): ``k_for_match``, ``threshold_for_match``; ``near_ties`` and ``forward_rows``."""
        out = {}
        for n in range(1, self.max_k + 1):
            out[f"differ_k{n}"] = float(self.differ[:, n - 1].double().mean())
            out[f"match_k{n}"] = float((self.differ[:, n - 1] == 0).double().mean())
        if self.confidence.shape[0] >= ROWS_NEEDED:
            setting = self.setting()
            out["k_for_match"], out["threshold_for_match"] = float(setting.k), setting.threshold
        else:
            out["k_for_match"] = out["threshold_for_match"] = math.nan
        out["near_ties"] = float(self.near_ties.double().mean())
        out["forward_rows"] = float(self.forward_rows)
        return out


@torch.no_grad()
def greedy_profile(denoiser: Denoiser, tokens: Tensor, candidates: Tensor, *, max_k: int = 8,
                   attention_mask: Tensor | None = None, chunk_size: int = 256) -> GreedyProfile:
    """One greedy decoding step with ``candidates [B, M]`` masked in ``tokens [B, L]``: the candidates sorted by
    confidence, each one's argmax, and for ``n = 1 .. max_k`` how many of the top ``n`` argmax tokens the sequential
    greedy decode of those ``n`` positions (most confident first; :func:`greedy_commit_error`) commits otherwise. One
    sequential path serves every ``n``: the decode of the top ``n`` is the first ``n`` picks of the decode of the top
    ``max_k``, since the later positions stay masked while the earlier ones are picked. Deterministic and exact (ties
    flagged). Cost: ``B`` rows for the confidences, ``B (max_k - 1)`` for the path, one for the batch check."""
    if isinstance(max_k, bool) or not isinstance(max_k, int) or max_k < 1:
        raise ValueError(f"max_k must be an integer >= 1, got {max_k!r}")
    mask = check_commit_positions(denoiser, tokens, candidates, attention_mask)
    if denoiser.vocab.mask_id is None:
        raise ValueError("denoiser: a greedy profile masks the candidates, and this denoiser has no mask id")
    device = tokens.device
    candidates = candidates.to(device).long()
    tokens = tokens.long().scatter(1, candidates, denoiser.vocab.mask_id)
    max_k = min(max_k, candidates.shape[1])
    allowed = denoiser.vocab.allowed_mask(device)
    logits = denoiser.chunked_conditional_logits(tokens, candidates, chunk_size, mask).double()
    law = logits.masked_fill(~allowed, -math.inf).log_softmax(-1)
    confidence, picks = law.exp().max(-1)
    order = confidence.argsort(dim=1, descending=True, stable=True)
    positions, confidence, picks = candidates.gather(1, order), confidence.gather(1, order), picks.gather(1, order)
    path = greedy_commit_error(denoiser, tokens, positions[:, :max_k], picks[:, :max_k], attention_mask=mask,
                               chunk_size=chunk_size)
    differ = (path.sequential != path.parallel).long().cumsum(1)
    return GreedyProfile(positions=positions, confidence=confidence, differ=differ, near_ties=path.near_ties,
                         forward_rows=candidates.shape[0] + path.forward_rows)


def check_rules(rules: Sequence[tuple[str, float]], name: str = "rules") -> tuple[tuple[str, float], ...]:
    """``rules`` as ``((rule, parameter), ...)``, or a ValueError naming ``name`` (nan is no parameter)."""
    checked = []
    for item in rules:
        if (not isinstance(item, (tuple, list)) or len(item) != 2 or item[0] not in RULES
                or isinstance(item[1], bool) or not isinstance(item[1], (int, float)) or not item[1] > 0):
            raise ValueError(f"{name} must be (rule, parameter) pairs with rule in {RULES} and a parameter > 0, got "
                             f"{item!r}" if name == "rules" else f"{name}: the rule must be one of {RULES} and its "
                             f"parameter a number > 0, got {item!r}")
        checked.append((str(item[0]), float(item[1])))
    return tuple(checked)


def check_targets(targets: Sequence[float], name: str = "targets") -> tuple[float, ...]:
    """``targets`` as floats, or a ValueError naming ``name`` unless each is an error in (0, 1) (nan is not)."""
    if any(isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < 1 for t in targets):
        shown = targets[0] if name == "target" else list(targets)
        raise ValueError(f"{name} must be {'an error' if name == 'target' else 'errors'} in (0, 1), got {shown!r}")
    return tuple(float(t) for t in targets)


def random_window(sites: Tensor, counts: Tensor, window: int, generator: torch.Generator) -> Tensor:
    """``[B, window]``: for each row, ``window`` consecutive entries of its first ``counts[b]`` sites
    (``sites [B, n_max]``), starting at an offset drawn uniformly from ``generator`` (one uniform per row)."""
    room = (counts.to(sites.device) - window + 1).double()
    offsets = (torch.rand(len(room), generator=generator, device=generator.device).to(sites.device) * room).long()
    return sites.gather(1, offsets[:, None] + torch.arange(window, device=sites.device))


DEFAULT_RULES: tuple[tuple[str, float], ...] = (("threshold", 0.9), ("factor", 1.0), ("frechet", 0.1))


@torch.no_grad()
def confidence_profile(denoiser: Denoiser, tokens: Tensor, candidates: Tensor, *, max_k: int = 8,
                       rules: Sequence[tuple[str, float]] = DEFAULT_RULES, targets: Sequence[float] = (0.01, 0.05),
                       temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                       samples: int = 64, max_rows: int | None = None, top_m: int = 8, level: float = 0.95,
                       generator: Randomness = 0, attention_mask: Tensor | None = None,
                       method: Literal["betting", "student"] = "betting") -> ConfidenceProfile:
    """One decoding step with ``candidates [B, M]`` masked in ``tokens [B, L]`` (written with the mask id when the
    model has one; other masked positions stay masked): the candidates sorted by confidence, the error of committing
    the top ``n`` at once for ``n = 1 .. max_k`` (a model without a mask id, a toy field, keeps the other
    candidates' tokens) (:func:`parallel_commit_error`, most confident first; exact where
    the tree is small, else ``samples`` draws) with the influence estimate of each set, and the confidence rules'
    sets and certificates (:meth:`ConfidenceProfile.summary`). ``method``: the Monte Carlo interval
    (:func:`interval`). ``max_rows``: the largest exact tree (default: for
    each ``n``, exact only where the tree costs no more rows than the ``1 + samples (n - 1)`` of Monte Carlo).

    Cost: ``B`` rows for the confidences (the root every set shares where the model has a mask id), then per
    ``n >= 2`` the sequential rows of :func:`parallel_commit_error` and those of :func:`first_order_error` (Monte
    Carlo: about ``B (samples (n - 1) + n top_m)``).
    """
    if isinstance(max_k, bool) or not isinstance(max_k, int) or max_k < 1:
        raise ValueError(f"max_k must be an integer >= 1, got {max_k!r}")
    _check_estimation(temperature, top_k, top_p, level, method, samples=samples, max_rows=max_rows, top_m=top_m)
    checked, chosen_targets = check_rules(rules), check_targets(targets)
    mask = check_commit_positions(denoiser, tokens, candidates, attention_mask)
    device = tokens.device
    candidates = candidates.to(device).long()
    mask_id = denoiser.vocab.mask_id
    shared = mask_id is not None
    if mask_id is not None:
        tokens = tokens.long().scatter(1, candidates, mask_id)
    max_k = min(max_k, candidates.shape[1])
    law = _sampler_law(denoiser, temperature, top_k, top_p, device)
    tree = _Tree(denoiser, tokens.long(), candidates, mask, law, 256)
    tree.by_confidence()
    batch = candidates.shape[0]
    confidence = confidences(tree.root)
    rows = tree.rows
    zeros = torch.zeros(batch, max_k, dtype=torch.float64, device=device)
    tv, tv_low, tv_high, first = zeros.clone(), zeros.clone(), zeros.clone(), zeros.clone()
    certificate = zeros.clone()
    certificate[:, 0] = 1 - confidence[:, 0]
    exact = torch.ones(max_k, dtype=torch.bool)
    for n in range(2, max_k + 1):
        # with a mask id every candidate is masked in the tokens, so the top n share the profile's root forward; a
        # toy field without one gives each set its own block marginals
        head = tree.head(n) if shared else _Tree(denoiser, tokens.long(), tree.positions[:, :n], mask, law, 256,
                                                 check=not tree.checked)
        error = _commit_error(head, orders=0, samples=samples, level=level,
                              max_rows=max_rows if max_rows is not None else 1 + samples * (n - 1), method=method,
                              generator=as_generator(generator, "confidence_profile", n, device=device))
        estimate = _first_order(head, top_m)
        tv[:, n - 1], tv_low[:, n - 1], tv_high[:, n - 1] = error.tv, error.tv_low, error.tv_high
        first[:, n - 1], certificate[:, n - 1] = estimate.estimate, error.certificate
        exact[n - 1] = error.exact
        rows, tree.checked = rows + head.rows, head.checked  # checked once per call, by whichever tree batched first
    return ConfidenceProfile(positions=tree.positions, confidence=confidence, tv=tv, tv_low=tv_low, tv_high=tv_high,
                             first_order=first, certificate=certificate, exact=exact, rules=checked,
                             targets=chosen_targets, level=level, forward_rows=rows)


__all__ = [
    "DEFAULT_RULES",
    "GREEDY_TIE",
    "LEVEL",
    "MAX_ROWS",
    "ROWS_NEEDED",
    "RULES",
    "SHARE",
    "THRESHOLD_GRID",
    "ConfidenceProfile",
    "DecodingSetting",
    "FirstOrderError",
    "GreedyCommitError",
    "GreedyProfile",
    "ParallelCommitError",
    "certify_setting",
    "check_commit_positions",
    "check_rows_independent",
    "check_rules",
    "confidence_profile",
    "confidences",
    "enumerable",
    "first_order_error",
    "fixed_sequence",
    "greedy_commit_error",
    "greedy_profile",
    "parallel_commit_error",
    "rows_for_guarantee",
    "rule_commit_count",
]
