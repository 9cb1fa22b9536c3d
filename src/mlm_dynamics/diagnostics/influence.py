"""Dobrushin influence coefficients and the high-temperature contraction bound.

Influence of site ``j`` on site ``i`` at temperature tau:

    alpha_ij(tau) = sup { TV(p_i^tau(. | x_{-i}), p_i^tau(. | y_{-i})) : x, y differ only at j },   alpha_ii = 0.

Estimated here over sampled contexts and replacement tokens (max and mean; the max is a lower estimate of the sup).
If ``alpha(tau) = max_j sum_i alpha_ij(tau) < 1`` (column sums), path coupling under the maximal coupling gives
``E d(X_t, Y_t) <= n exp(-(1 - alpha) t / n)`` and

    t_mix(eps) <= ceil(n (log n + log(1 / eps)) / (1 - alpha)).

Logit sensitivity ``L_ij = sup osc(l_i(x_{-i}) - l_i(y_{-i}))`` (oscillation = max - min over allowed tokens) bounds
``alpha_ij(tau) <= tanh(L_ij / (4 tau))`` at every tau, so one estimate of ``L`` gives a whole temperature curve.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .._random import Randomness, as_generator
from ..models.base import Denoiser, check_attention_mask, require_integer
from ..sampling.categorical import check_temperature, tempered_log_probs


def softmax_tv_bound(oscillation: Tensor, temperature: float) -> Tensor:
    """``tanh(osc / (4 tau))``: bounds ``TV(softmax(u / tau), softmax(v / tau))`` where ``osc = osc(u - v)``."""
    return torch.tanh(oscillation / (4 * temperature))


def mixing_time_bound(dobrushin: Tensor | float, num_sites: int, eps: float = 0.25) -> Tensor:
    """``ceil(n (log n + log 1/eps) / (1 - alpha))`` single-site steps where ``alpha < 1``, ``inf`` elsewhere.

    A bound on ``t_mix(eps)`` only when ``alpha`` is an upper bound of Dobrushin's coefficient; a sampled
    :class:`InfluenceEstimate` is a lower estimate, so its summary does not report this value."""
    alpha = torch.as_tensor(dobrushin, dtype=torch.float64)
    bound = torch.ceil(num_sites * (math.log(num_sites) + math.log(1 / eps)) / (1 - alpha))
    return torch.where(alpha < 1, bound, torch.full_like(bound, math.inf))


@dataclass
class InfluenceEstimate:
    """Estimated influences on ``n`` sites for a grid of temperatures.

    Attributes:
        temperatures: ``[T]``.
        sites: ``[n]`` positions in the sequence.
        alpha_max / alpha_mean: ``[T, n, n]``, entry ``[t, i, j]`` = influence of site j on site i.
        logit_sensitivity: ``[n, n]`` max oscillation of the logit change at i when j changes (tau-free).
    """

    temperatures: Tensor
    sites: Tensor
    alpha_max: Tensor
    alpha_mean: Tensor
    logit_sensitivity: Tensor

    @property
    def column_sums(self) -> Tensor:
        """``[T, n]``: total influence of each site j on all others, ``sum_i alpha_ij``."""
        return self.alpha_max.sum(1)

    @property
    def row_sums(self) -> Tensor:
        """``[T, n]``: total influence on each site i, ``sum_j alpha_ij`` (classical Dobrushin uniqueness)."""
        return self.alpha_max.sum(2)

    @property
    def dobrushin(self) -> Tensor:
        """``[T]``: ``alpha(tau) = max_j sum_i alpha_ij``, the path-coupling contraction coefficient."""
        return self.column_sums.amax(1)

    def contraction_temperature(self) -> float:
        """Grid estimate of tau*, above which ``alpha(tau) < 1`` at every grid point (interpolated in log tau).

        ``inf`` if even the largest grid temperature has ``alpha >= 1``; the smallest grid temperature if all
        contract.
        """
        alpha, temps = self.dobrushin.double(), self.temperatures.double()
        order = temps.argsort()
        alpha, temps = alpha[order], temps[order]
        failing = (alpha >= 1).nonzero()
        if not len(failing):
            return float(temps[0])
        last = int(failing[-1])
        if last == len(temps) - 1:
            return math.inf
        lo, hi = temps[last].log(), temps[last + 1].log()
        weight = (alpha[last] - 1) / (alpha[last] - alpha[last + 1])
        return float((lo + weight * (hi - lo)).exp())

    def sensitivity_temperature(self) -> float:
        """tau* from the logit-sensitivity bound: the root of ``max_j sum_i tanh(L_ij / (4 tau)) = 1``."""
        return sensitivity_contraction_temperature(self.logit_sensitivity)

    def summary(self) -> dict[str, float]:
        """Per grid temperature ``t``: ``dobrushin_tau{t}``, ``row_sum_max_tau{t}``; ``tau_star`` (``inf`` if no grid
        temperature contracts) and ``tau_star_sensitivity``. The sums run over :attr:`sites` and the sampled contexts
        only, so they are lower estimates of the coefficients: no mixing-time bound follows from them
        (:func:`mixing_time_bound` needs an upper bound)."""
        out: dict[str, float] = {}
        for tau, alpha, rows in zip(self.temperatures.tolist(), self.dobrushin.tolist(),
                                    self.row_sums.amax(1).tolist(), strict=True):
            out[f"dobrushin_tau{tau:g}"] = alpha
            out[f"row_sum_max_tau{tau:g}"] = rows
        out["tau_star"] = self.contraction_temperature()
        out["tau_star_sensitivity"] = self.sensitivity_temperature()
        return out


def sensitivity_contraction_temperature(sensitivity: Tensor, iterations: int = 200) -> float:
    """Root in tau of ``max_j sum_i tanh(L_ij / (4 tau)) = 1`` (decreasing in tau), by bisection in log tau."""
    def total(tau: float) -> float:
        return float(softmax_tv_bound(sensitivity.double(), tau).sum(0).max())

    if total(1e-12) < 1:
        return 0.0
    lo, hi = -20.0, 20.0
    for _ in range(iterations):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if total(math.exp(mid)) >= 1 else (lo, mid)
    return math.exp(hi)


def check_temperatures(temperatures: Sequence[float]) -> list[float]:
    """A ValueError naming ``temperatures`` unless they form a non-empty sequence of finite numbers > 0."""
    values = list(temperatures)
    if not values:
        raise ValueError("temperatures must be a non-empty sequence of finite numbers > 0, got []")
    return [check_temperature(t, f" (in temperatures {values})") for t in values]


@torch.no_grad()
def estimate_influence(denoiser: Denoiser, contexts: Tensor, *, temperatures: Sequence[float] = (1.0,),
                       sites: Tensor | None = None, replacements: int | None = 1,
                       generator: Randomness = 0, chunk_size: int = 256,
                       attention_mask: Tensor | None = None) -> InfluenceEstimate:
    """Estimate ``alpha_ij(tau)`` on ``contexts [C, L]`` (shared sites; ``attention_mask [C, L]``: each context's
    padding, carried to every row built from it).

    For each context, site j and replacement token b != x_j (``replacements`` drawn uniformly from the allowed
    tokens, or all of them when ``None``), compares the conditionals at every other site i under ``x`` and
    ``x[j <- b]``, at every temperature of the grid.

    Cost: ``C n (1 + R (n - 1))`` forward rows (R replacements, n sites), ``chunk_size`` rows per forward; memory
    holds the logits of one (context, site j) group at a time, ``R (n - 1) x V``.

    Examples:
        On an Ising chain with coupling ``J`` an inner site's two neighbours each move it by ``tanh(2 J / tau) / 2``
        at most, so the largest row sum is ``tanh(2 J / tau)``; the estimate finds it (it can never exceed it):

        >>> import math, torch
        >>> from mlm_dynamics import PairwiseMRFDenoiser, estimate_influence
        >>> ising = PairwiseMRFDenoiser.ising_chain(5, coupling=1.0)
        >>> contexts = torch.randint(2, (8, 5), generator=torch.Generator().manual_seed(0))
        >>> estimate = estimate_influence(ising, contexts, temperatures=[1.0, 4.0], replacements=None)
        >>> [round(value, 6) for value in estimate.row_sums.amax(1).tolist()]
        [0.964028, 0.462117]
        >>> round(math.tanh(2.0), 6), round(math.tanh(0.5), 6)
        (0.964028, 0.462117)
    """
    temps = torch.tensor(check_temperatures(temperatures), dtype=torch.float64)
    if replacements is not None and replacements < 1:
        raise ValueError(f"replacements must be >= 1 or None (all tokens), got {replacements}")
    require_integer("contexts", contexts)
    if contexts.dim() != 2 or contexts.shape[0] == 0:
        raise ValueError(f"contexts must be a non-empty [C, L] tensor (no contexts, no estimate), got "
                         f"{tuple(contexts.shape)}")
    device = contexts.device
    if sites is not None:
        require_integer("sites", sites)
    mask = check_attention_mask(attention_mask, contexts)
    if sites is None:
        sites = denoiser.padded_sites(contexts, attention_mask=mask)[0][0] if mask is not None else \
            denoiser.resampleable_sites(contexts)[0]
    sites = sites.to(device).long()
    if mask is not None and not bool(mask[:, sites].all()):
        raise ValueError("sites: a site is padding in some context (attention_mask 0 there)")
    if sites.dim() != 1 or len(sites) < 2:
        raise ValueError(f"sites must be a 1-D tensor of at least 2 positions, got {tuple(sites.shape)}")
    if len(sites.unique()) != len(sites):
        raise ValueError(f"sites must be distinct positions, got {sites.tolist()}")
    if sites.min() < 0 or sites.max() >= contexts.shape[1]:
        raise ValueError(f"sites must lie in [0, {contexts.shape[1]}), got {sites.tolist()}")
    allowed = denoiser.vocab.allowed_mask(device)
    allowed_ids = allowed.nonzero().squeeze(1)
    n, num_t = len(sites), len(temps)
    alpha_max = torch.zeros(num_t, n, n, dtype=torch.float64, device=device)
    alpha_sum = torch.zeros_like(alpha_max)
    counts = torch.zeros(n, dtype=torch.float64, device=device)
    sensitivity = torch.zeros(n, n, dtype=torch.float64, device=device)
    generator = as_generator(generator, device=device)

    def site_logits(rows: Tensor, positions: Tensor, row_mask: Tensor | None) -> Tensor:
        masks = None if row_mask is None else row_mask.expand(len(rows), -1)
        return denoiser.chunked_conditional_logits(rows, positions, chunk_size, masks)[:, 0].double()

    for index, context in enumerate(contexts):
        row_mask = None if mask is None else mask[index]
        base = site_logits(context.expand(n, -1), sites[:, None], row_mask)  # [n, V], row i = l_i(x)
        base_probs = torch.stack([tempered_log_probs(base, allowed, float(t), dtype=torch.float64).exp()
                                  for t in temps])  # [T, n, V]
        for j in range(n):
            current = context[sites[j]]
            choices = allowed_ids[allowed_ids != current]
            if replacements is not None:
                pick = torch.randperm(len(choices), generator=generator, device=generator.device)[:replacements]
                choices = choices[pick.to(device)]
            others = torch.cat([torch.arange(j, device=device), torch.arange(j + 1, n, device=device)])
            changed = context.expand(len(choices), -1).clone()
            changed[:, sites[j]] = choices
            rows = changed.repeat_interleave(len(others), 0)  # [R (n - 1), L]
            positions = sites[others].repeat(len(choices))[:, None]
            logits = site_logits(rows, positions, row_mask).view(len(choices), len(others), -1)
            delta = logits - base[others]
            osc = delta.masked_fill(~allowed, -math.inf).amax(-1) - delta.masked_fill(~allowed, math.inf).amin(-1)
            sensitivity[others, j] = torch.maximum(sensitivity[others, j], osc.amax(0))
            for t_index, t in enumerate(temps.tolist()):
                probs = tempered_log_probs(logits, allowed, t, dtype=torch.float64).exp()
                tv = 0.5 * (probs - base_probs[t_index, others]).abs().sum(-1)  # [R, n - 1]
                alpha_max[t_index, others, j] = torch.maximum(alpha_max[t_index, others, j], tv.amax(0))
                alpha_sum[t_index, others, j] += tv.sum(0)
            counts[j] += len(choices)
    return InfluenceEstimate(temperatures=temps, sites=sites, alpha_max=alpha_max,
                             alpha_mean=alpha_sum / counts.clamp_min(1), logit_sensitivity=sensitivity)


__all__ = ["InfluenceEstimate", "check_temperatures", "estimate_influence", "mixing_time_bound",
           "sensitivity_contraction_temperature", "softmax_tv_bound"]
