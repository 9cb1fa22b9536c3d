"""The rectangle test: a deterministic certificate that MLM conditionals are incompatible.

For a context ``x``, sites ``i != j``, tokens ``a, a'`` at ``i`` and ``b, b'`` at ``j``, write ``l_i^(b)`` for the
logits at ``i`` (masked) when ``x_j = b``, and ``l_j^(a)`` for those at ``j`` when ``x_i = a``. The two monotone paths
from ``(a, b)`` to ``(a', b')`` sum the log-ratios

    L1 = [l_i^(b)[a'] - l_i^(b)[a]] + [l_j^(a')[b'] - l_j^(a')[b]]     (i first, then j)
    L2 = [l_j^(a)[b'] - l_j^(a)[b]] + [l_i^(b')[a'] - l_i^(b')[a]]     (j first, then i)

and ``R = (L1 - L2) / tau``. With ``S[a, b] = l_j^(a)[b] - l_i^(b)[a]``, ``R`` is the double difference
``S[a', b'] - S[a', b] - S[a, b'] + S[a, b]``. Conditionals of a joint give ``S`` = f(a) + g(b), hence ``R = 0``;
``R != 0`` for one rectangle proves that no joint has these conditionals. Normalisers cancel, so logits suffice.

Cost: for token sets ``A`` at ``i`` and ``B`` at ``j``, ``|A| + |B|`` masked forward rows give all
``C(|A|, 2) C(|B|, 2)`` rectangles (one row per ``b`` masking ``i``, one per ``a`` masking ``j``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from einops import rearrange
from torch import Tensor

from .._random import Randomness, as_generator
from ..models.base import Denoiser, check_attention_mask, require_integer
from ..sampling.categorical import check_temperature
from .quantiles import DEFAULT_LEVELS, quantile_summary


@torch.no_grad()
def rectangle_grid(denoiser: Denoiser, contexts: Tensor, i: Tensor, j: Tensor, tokens_i: Tensor, tokens_j: Tensor,
                   *, temperature: float = 1.0, chunk_size: int = 256,
                   attention_mask: Tensor | None = None) -> Tensor:
    """All rectangle statistics ``R[c, a, a', b, b']`` of shape ``[C, A, A, B, B]``.

    Args:
        contexts: ``[C, L]`` sequences; ``i``, ``j``: ``[C]`` distinct positions; ``tokens_i``: ``[C, A]`` and
            ``tokens_j``: ``[C, B]`` candidate tokens (indices ``a, a'`` and ``b, b'`` refer to these lists).
        attention_mask: optional ``[C, L]`` padding of each context (carried to every row built from it).

    Cost: ``C (A + B)`` forward rows, in chunks of ``chunk_size``.
    """
    temperature = check_temperature(temperature)
    num_contexts = contexts.shape[0]
    for name, value in (("i", i), ("j", j)):
        if value.shape != (num_contexts,):
            raise ValueError(f"{name} must have shape [C] = [{num_contexts}], got {tuple(value.shape)}")
    for name, value in (("tokens_i", tokens_i), ("tokens_j", tokens_j)):
        if value.dim() != 2 or value.shape[0] != num_contexts or value.shape[1] < 2:
            raise ValueError(f"{name} must have shape [C, K] with K >= 2, got {tuple(value.shape)}")
    if (i == j).any():
        raise ValueError("i and j must differ in every context")
    num_a, num_b = tokens_i.shape[1], tokens_j.shape[1]
    # rows masking i with x_j = b, then rows masking j with x_i = a
    with_b = contexts[:, None, :].repeat(1, num_b, 1).scatter(2, j[:, None, None].expand(-1, num_b, 1),
                                                              tokens_j[..., None])
    with_a = contexts[:, None, :].repeat(1, num_a, 1).scatter(2, i[:, None, None].expand(-1, num_a, 1),
                                                              tokens_i[..., None])
    rows = torch.cat([with_b.flatten(0, 1), with_a.flatten(0, 1)])
    positions = torch.cat([i.repeat_interleave(num_b), j.repeat_interleave(num_a)])[:, None]
    masks = None if attention_mask is None else torch.cat([attention_mask.repeat_interleave(num_b, 0),
                                                          attention_mask.repeat_interleave(num_a, 0)])
    logits = denoiser.chunked_conditional_logits(rows, positions, chunk_size, masks)[:, 0].double()
    logits_i = logits[: num_contexts * num_b].view(num_contexts, num_b, -1)  # l_i^(b)
    logits_j = logits[num_contexts * num_b:].view(num_contexts, num_a, -1)  # l_j^(a)
    at_i = logits_i.gather(2, tokens_i[:, None, :].expand(-1, num_b, -1))  # [C, b, a] = l_i^(b)[a]
    at_j = logits_j.gather(2, tokens_j[:, None, :].expand(-1, num_a, -1))  # [C, a, b] = l_j^(a)[b]
    s = at_j - rearrange(at_i, "c b a -> c a b")
    s1 = rearrange(s, "c a b -> c 1 a 1 b")  # S[a', b']
    r = (s1 - rearrange(s, "c a b -> c 1 a b 1") - rearrange(s, "c a b -> c a 1 1 b")
         + rearrange(s, "c a b -> c a 1 b 1"))
    return r / temperature


@dataclass
class RectangleReport:
    """Sampled rectangles and their statistics.

    Attributes:
        values: ``[N]`` R of every distinct rectangle (``a < a'``, ``b < b'`` in candidate order).
        distances: ``[N]`` ``|i - j|`` of each rectangle's sites.
        tolerance: ``[N]`` per-rectangle threshold for float error.
    """

    values: Tensor
    distances: Tensor
    tolerance: Tensor

    @property
    def prevalence(self) -> float:
        """Fraction of rectangles with ``|R|`` above tolerance (each such one certifies incompatibility)."""
        if self.values.numel() == 0:
            return math.nan
        return float((self.values.abs() > self.tolerance).double().mean())

    @classmethod
    def concatenate(cls, reports: Sequence[RectangleReport]) -> RectangleReport:
        """One report of the rectangles of several (contexts of different lengths are sampled separately)."""
        return cls(values=torch.cat([r.values for r in reports]), distances=torch.cat([r.distances for r in reports]),
                   tolerance=torch.cat([r.tolerance for r in reports]))

    def summary(self, levels: Sequence[float] = DEFAULT_LEVELS) -> dict[str, float]:
        """``num_rectangles``, ``prevalence``, ``abs_r_median``, ``abs_r_q90``, ... and ``tolerance_median``."""
        out = {"num_rectangles": float(self.values.numel()), "prevalence": self.prevalence,
               **quantile_summary("abs_r", self.values.abs(), levels)}
        out.update(quantile_summary("tolerance", self.tolerance, (0.5,)))
        return out


def float_tolerance(logit_scale: Tensor, temperature: float, dtype: torch.dtype = torch.float32) -> Tensor:
    """Threshold ``max(1e-3, 1000 * eps(dtype) * scale) / tau`` for ``|R|`` (eight logits of size ``scale`` enter R)."""
    return torch.clamp(1000 * torch.finfo(dtype).eps * logit_scale, min=1e-3) / temperature


def check_rectangle_options(*, pairs_per_context: int, num_tokens: int, token_choice: str = "topk",
                            min_distance: int = 1, max_distance: int | None = None) -> None:
    """ValueErrors naming the option, for :func:`sample_rectangles` and the callbacks that call it."""
    if token_choice not in ("topk", "uniform"):
        raise ValueError(f"token_choice must be 'topk' or 'uniform', got {token_choice!r}")
    if pairs_per_context < 1:
        raise ValueError(f"pairs_per_context must be >= 1, got {pairs_per_context}")
    if num_tokens < 2:
        raise ValueError(f"num_tokens must be >= 2 (a rectangle needs two tokens per site), got {num_tokens}")
    if min_distance < 1 or (max_distance is not None and max_distance < min_distance):
        raise ValueError(f"min_distance must be >= 1 and max_distance >= min_distance, got {min_distance}, "
                         f"{max_distance}")


@torch.no_grad()
def sample_rectangles(denoiser: Denoiser, contexts: Tensor, *, pairs_per_context: int = 4, num_tokens: int = 4,
                      token_choice: str = "topk", min_distance: int = 1, max_distance: int | None = None,
                      temperature: float = 1.0, sites: Tensor | None = None, site_counts: Tensor | None = None,
                      generator: Randomness, chunk_size: int = 256,
                      attention_mask: Tensor | None = None) -> RectangleReport:
    """Sample rectangles on ``contexts [C, L]`` and compute R for each.

    ``sites`` (``[n]`` shared or ``[C, n]``; default: each context's non-frame, non-padding positions) are the
    candidate sites; with ``site_counts [C]`` context ``c`` uses its first ``site_counts[c]`` (padded batches, see
    :meth:`~mlm_dynamics.models.Denoiser.padded_sites`). ``attention_mask [C, L]`` marks each context's padding, which
    every row built from the context carries to the model.

    Each context gets ``pairs_per_context`` site pairs with ``min_distance <= |i - j| <= max_distance`` (positions in
    the sequence), and ``num_tokens`` candidates per site: the top-k of the site's conditional
    (``token_choice="topk"``, so the probabilities are not negligible) or uniform allowed tokens (``"uniform"``).
    Cost: ``C * pairs_per_context * (2 num_tokens + 2)`` forward rows (2 for the sites' own conditionals, which
    give the top-k candidates and the logit scale of the float tolerance). Site pairs and uniform tokens are drawn
    from ``generator`` (a generator on any device, or an int seed for a CPU one).

    Examples:
        A joint distribution passes every rectangle; deliberately incompatible conditionals fail them:

        >>> import torch
        >>> from mlm_dynamics import PairwiseMRFDenoiser, sample_rectangles
        >>> contexts = torch.zeros(2, 4, dtype=torch.long)
        >>> joint = PairwiseMRFDenoiser.random(4, 3, generator=0)
        >>> sample_rectangles(joint, contexts, num_tokens=2, generator=0).prevalence
        0.0
        >>> no_joint = PairwiseMRFDenoiser.random(4, 3, compatible=False, generator=0)
        >>> sample_rectangles(no_joint, contexts, num_tokens=2, generator=0).prevalence
        1.0
    """
    check_rectangle_options(pairs_per_context=pairs_per_context, num_tokens=num_tokens, token_choice=token_choice,
                            min_distance=min_distance, max_distance=max_distance)
    temperature = check_temperature(temperature)
    require_integer("contexts", contexts)
    generator = as_generator(generator)
    allowed = denoiser.vocab.allowed_mask(contexts.device)
    if num_tokens > int(allowed.sum()):
        raise ValueError(f"num_tokens {num_tokens} exceeds the {int(allowed.sum())} allowed tokens")
    mask = check_attention_mask(attention_mask, contexts)
    if sites is None and mask is not None:
        sites, site_counts = denoiser.padded_sites(contexts, attention_mask=mask)
    sites = denoiser.resampleable_sites(contexts) if sites is None else sites.expand(contexts.shape[0], -1)
    pair_i, pair_j, owners = [], [], []
    for c in range(contexts.shape[0]):
        row = sites[c] if site_counts is None else sites[c, : int(site_counts[c])]
        candidates = [(a, b) for a, b in itertools.combinations(row.tolist(), 2)
                      if min_distance <= b - a <= (max_distance if max_distance is not None else b - a)]
        if not candidates:
            raise ValueError(f"no site pair with distance in [{min_distance}, {max_distance}]")
        picks = torch.randint(len(candidates), (pairs_per_context,), generator=generator, device=generator.device)
        for pick in picks.tolist():
            a, b = candidates[pick]
            pair_i.append(a)
            pair_j.append(b)
            owners.append(c)
    device = contexts.device
    i, j = torch.tensor(pair_i, device=device), torch.tensor(pair_j, device=device)
    owner = torch.tensor(owners, device=device)
    rows, masks = contexts[owner], None if mask is None else mask[owner]
    base = denoiser.chunked_conditional_logits(torch.cat([rows, rows]), torch.cat([i, j])[:, None], chunk_size,
                                               None if masks is None else torch.cat([masks, masks]))[:, 0]
    base = base.masked_fill(~allowed, -math.inf)
    if token_choice == "topk":
        tokens_i, tokens_j = base.topk(num_tokens, dim=-1).indices.chunk(2)
    else:
        weights = allowed.double().to(generator.device).expand(2 * len(i), -1)
        tokens_i, tokens_j = torch.multinomial(weights, num_tokens, generator=generator).to(device).chunk(2)
    grid = rectangle_grid(denoiser, rows, i, j, tokens_i, tokens_j, temperature=temperature, chunk_size=chunk_size,
                          attention_mask=masks)
    upper_a = torch.triu_indices(num_tokens, num_tokens, 1, device=device)
    values = grid[:, upper_a[0], upper_a[1]][:, :, upper_a[0], upper_a[1]].flatten(1)  # [P, pairs_a * pairs_b]
    scale = base.masked_fill(~allowed, 0.0).abs().amax(-1).view(2, -1).amax(0).to(values.dtype)
    per_pair = values.shape[1]
    return RectangleReport(values=values.flatten(), distances=(j - i).abs().repeat_interleave(per_pair),
                           tolerance=float_tolerance(scale, temperature).repeat_interleave(per_pair))


__all__ = ["RectangleReport", "check_rectangle_options", "float_tolerance", "rectangle_grid", "sample_rectangles"]
