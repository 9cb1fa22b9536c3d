"""Watch a sampler you cannot edit: every denoising step of an unmodified ``generate()``, through the model's forward.

``monitor_sampler(model, run)`` wraps ``model``'s forward (calls through ``model(...)`` and direct
``model.forward(...)`` calls alike; restored afterwards), calls ``run()`` (your sampler, as it is), and takes each
outermost forward call as one denoising step: the tokens it was given are the state before the step, the logits it
returned are what the step draws from. Calls the model makes to itself (a submodule's forward) and calls the monitor's
own embedder makes count once or not at all (a re-entrancy guard). Between two steps it counts the positions that
left the mask (committed) and the unmasked tokens that changed (overwritten), and measures the **effective
temperature** of the committed tokens against the step's own logits
(:func:`~mlm_dynamics.diagnostics.decoding.surprisal_statistics`): a loop that commits the most confident draws first
is a cooled sampler, whatever temperature it draws at. The final state (``run()``'s return value) is always
observed, also when it falls between observation steps. A sequence that grows (semi-autoregressive samplers: BD3-LM
appends blocks) is compared on its common prefix, and a :class:`~.monitor.ChainMonitor` restarts a phase at each new
width (``width{L}``). A call with a KV cache (``past_key_values``: Fast-dLLM's prefix cache calls the model on the
sequence's tail from the current block on, its dual cache on the block alone, marked by ``replace_position``) is
placed into the whole sequence as the last call left it; a commit where no call computed logits, or a window that
cannot be placed, stops the watch with one warning instead of reading misaligned rows.

With ``parallel=True`` each step's committed set is also measured against the model itself
(:func:`~mlm_dynamics.diagnostics.parallel.parallel_commit_error`): per row, the error of committing those positions
at once against committing them one at a time, most confident first (exact where the tree is small, else
``parallel_samples`` draws with an interval), the influence estimate of the set and its Frechet-Hoeffding
certificate, through the model's exact adapter (:func:`~mlm_dynamics.models.families.denoiser_for`, or the
``denoiser`` given). A greedy sampler (``temperature=0``, LLaDA's and Fast-dLLM's default) has no law to compare,
so its step is measured as what it is: the committed tokens against the sequential greedy decode from the same state
in the same order (commit one, run the forward, take the next position's argmax, ...), how many differ, exactly
(:func:`~mlm_dynamics.diagnostics.parallel.greedy_commit_error`: ``K - 1`` forward rows); :func:`decode_agreement`
compares whole decodes (the user's threshold against one token per forward: agreement, exact matches, forwards
saved). A sampler watched at a temperature above 0 whose every commit was its argmax is warned about as greedy.

The mask id and the logit shift (Dream's logits at ``i - 1`` predict token ``i``) come from the model's family
(:mod:`~mlm_dynamics.models.families`) unless given. Cost: without ``parallel``, no forwards beyond the sampler's
own (and, at the monitor's observation steps, its embedder's), a copy of each step's logits at the masked positions
(kept on the model's device: the memory) and 17 softmaxes per committed token for the effective temperature:
``benchmarks/bench_monitor_cost.py`` measured 1.11x the sampler's own time (7 ms per committed token) at
``V = 150,000`` on 2 CPU cores, where 121 float64 softmaxes moved to the CPU had cost 5.3x.
With ``parallel``, per step and row committing ``K >= 2`` positions, the forward rows of
:func:`~mlm_dynamics.diagnostics.parallel.parallel_commit_error` and ``K top_m`` more (Monte Carlo: about
``1 + parallel_samples (K - 1)``; greedy: ``K - 1``), on the steps that fit within ``overhead`` of the sampler's
own time (all with ``overhead=None``); the seconds they took are in :attr:`SamplerTrace.parallel_seconds`.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor, nn

from ..diagnostics.decoding import TEMPERATURE_GRID, effective_temperature_from, surprisal_statistics
from ..diagnostics.parallel import enumerable, greedy_commit_error, parallel_commit_error
from ..diagnostics.witness import clopper_pearson_lower
from ..models.base import Denoiser, check_overhead
from ..models.families import FAMILIES, check_named_family, denoiser_for, detect_family, family_mask_id
from ..models.full_sequence import FullSequenceDenoiser, padded_rows
from ..sampling.categorical import check_truncation, tempered_log_probs
from .monitor import ChainMonitor


@dataclass
class SamplerTrace:
    """What :func:`monitor_sampler` saw.

    Attributes:
        steps: denoising steps observed (outermost forward calls).
        widths: sequence length at each step (growing for semi-autoregressive samplers).
        masked_fraction: fraction of positions still masked at each step.
        committed, overwritten: per step, positions that left the mask and unmasked tokens that changed.
        start: the tokens of the first step (the prompts and the masked region), for :func:`decode_agreement`.
        final: the tokens ``run()`` returned.
        temperature, mask_id: the sampler's temperature and mask id the watch read it with.
        effective: effective temperature of the committed tokens against the logits they were drawn from
            (``effective_temperature``, ``surprisal_mean``, ``entropy_mean``, ``surprisal_gap_z``; empty when
            nothing was committed) and ``argmax_fraction``, the share of commits that were their position's argmax
            (alone for a greedy sampler, ``temperature=0``).
        looks_greedy: where a sampler watched at a temperature above 0 committed only argmax tokens, more than a
            sampler at that temperature plausibly does (:data:`GREEDY_EVIDENCE`; warned once as well), why its
            measurements are those of a sampler that never ran; ``None`` otherwise.
        metrics: the monitor's scalars at its observation steps (the last one the final state's).
        output: ``run()``'s return value as it was.
        problem: why the watch stopped early or saw nothing (warned once as well), ``None`` when it watched every
            step; the sampler's output is kept either way.
        padding: at the first step, rows padded (left, or a right-padded prompt before the masked region) with no
            attention mask passed (warned once as well; :func:`padded_rows`), ``None`` otherwise.
        parallel: with ``parallel=True`` and ``temperature=0`` (a greedy sampler), per step: ``k``, ``k_max``,
            ``differ`` (mean over the measured rows of the committed tokens that the sequential greedy decode from the
            same state, most confident first, commits otherwise:
            :func:`~mlm_dynamics.diagnostics.parallel.greedy_commit_error`), ``differ_max``, ``differ_tokens`` and
            ``tokens`` (their sums), ``exact_match`` (share of rows with none differing), ``near_ties`` (share of
            rows with a tie in the commit order or in a sequential argmax), ``exact`` (1), ``rows``, ``rows_of``.
            With a temperature above 0, per step: ``k`` (mean committed per row), ``k_max``, ``tv`` (mean over rows
            of the error of committing the row's set at once; 0 for a single position), ``tv_low``/``tv_high`` (its
            interval, means), ``tv_max``, ``first_order`` (influence estimate, mean), ``certificate`` (mean
            Frechet-Hoeffding certificate), ``violated`` (fraction of rows whose error exceeds it for sure) and
            ``exact`` (1 when every set was enumerated), ``rows`` (the rows measured: the first ``rows`` of the
            ``rows_of`` that committed two or more, as many as fit within ``overhead``; the means are over them),
            ``near_ties`` (fraction of rows with two committed
            positions whose confidences differ by less than :data:`TIE`: their order, and so the error, may go either
            way) and, with ``order_spread=True``, ``order_spread``/``order_spread_max`` (the error between the assumed
            order and the reversed one, mean and largest over rows).
        parallel_seconds: the time the parallel measurement took (the sampler's own time excluded).
        parallel_problem: why the parallel measurement stopped (warned once), ``None`` when it ran at every step.
        parallel_order: the commit order the parallel measurement assumed (:data:`ORDER`).
        parallel_steps: the steps measured (the entries of :attr:`parallel`, in order), as indices into
            :attr:`committed`: the transition each measured; parallel_skipped: the steps
            committing two or more positions of which no row was, to keep the measurement within ``overhead``;
            parallel_rows_total: the rows, over all steps, that committed two or more positions.
    """

    steps: int = 0
    widths: list[int] = field(default_factory=list)
    masked_fraction: list[float] = field(default_factory=list)
    committed: list[int] = field(default_factory=list)
    overwritten: list[int] = field(default_factory=list)
    start: Tensor | None = None
    final: Tensor | None = None
    temperature: float = 1.0
    mask_id: int | None = None
    effective: dict[str, float] = field(default_factory=dict)
    looks_greedy: str | None = None
    metrics: list[dict[str, float]] = field(default_factory=list)
    output: Any = None
    problem: str | None = None
    padding: str | None = None
    parallel: list[dict[str, float]] = field(default_factory=list)
    parallel_seconds: float = 0.0
    parallel_problem: str | None = None
    parallel_order: str | None = None
    parallel_steps: list[int] = field(default_factory=list)
    parallel_skipped: int = 0
    parallel_rows_total: int = 0

    def summary(self) -> dict[str, float]:
        """``steps``, ``committed``, ``overwritten`` (totals), ``overwrite_fraction`` (of commits), the final width and
        the effective temperature. With ``parallel``, always (``nan`` where no step was measured):
        ``parallel_steps_measured``, ``parallel_rows_measured``, ``parallel_rows_total`` (rows, over all steps, that
        committed two or more positions), ``parallel_skipped``, ``parallel_measured_share`` (measured over total),
        ``parallel_seconds``, ``parallel_k_mean``, ``parallel_k_max``, ``parallel_near_ties`` (mean over steps of the
        share of rows); for a greedy sampler ``parallel_differ_mean`` (over steps), ``parallel_differ_max``,
        ``parallel_differ_share`` (differing tokens over measured committed tokens) and ``parallel_exact_match``
        (mean over steps); else ``parallel_tv_mean`` (over steps), ``parallel_tv_max``, ``parallel_tv_high_max``,
        ``parallel_first_order_max``, ``parallel_certificate_violated`` (mean over steps of the share of rows) and,
        with ``order_spread=True``, ``parallel_order_spread_max``."""
        committed, overwritten = sum(self.committed), sum(self.overwritten)
        out = {"steps": float(self.steps), "committed": float(committed), "overwritten": float(overwritten),
               "overwrite_fraction": overwritten / committed if committed else math.nan,
               "final_width": float(self.widths[-1]) if self.widths else math.nan, **self.effective}
        if self.parallel_order is not None:
            out.update(self._parallel_summary())
        return out

    def _parallel_summary(self) -> dict[str, float]:
        def column(key: str) -> torch.Tensor:
            return torch.tensor([step[key] for step in self.parallel if key in step], dtype=torch.float64)

        def reduce(key: str, how: str) -> float:
            values = column(key)
            return float(getattr(values, how)()) if len(values) else math.nan

        rows = float(column("rows").sum())
        out = {"parallel_steps_measured": float(len(self.parallel)), "parallel_rows_measured": rows,
               "parallel_rows_total": float(self.parallel_rows_total), "parallel_skipped": float(self.parallel_skipped),
               "parallel_measured_share": rows / self.parallel_rows_total if self.parallel_rows_total else math.nan,
               "parallel_seconds": self.parallel_seconds, "parallel_k_mean": reduce("k", "mean"),
               "parallel_k_max": reduce("k_max", "max"), "parallel_near_ties": reduce("near_ties", "mean")}
        if self.temperature == 0:
            tokens = float(column("tokens").sum())
            return {**out, "parallel_differ_mean": reduce("differ", "mean"),
                    "parallel_differ_max": reduce("differ_max", "max"),
                    "parallel_differ_share": float(column("differ_tokens").sum()) / tokens if tokens else math.nan,
                    "parallel_exact_match": reduce("exact_match", "mean")}
        out.update({"parallel_tv_mean": reduce("tv", "mean"), "parallel_tv_max": reduce("tv_max", "max"),
                    "parallel_tv_high_max": reduce("tv_high", "max"),
                    "parallel_first_order_max": reduce("first_order", "max"),
                    "parallel_certificate_violated": reduce("violated", "mean")})
        if any("order_spread" in step for step in self.parallel):
            out["parallel_order_spread_max"] = reduce("order_spread_max", "max")
        return out


def _tokens_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Tensor | None:
    for value in (*args[:1], *(kwargs.get(k) for k in ("input_ids", "indices", "x"))):
        if isinstance(value, Tensor) and value.dim() == 2 and not value.dtype.is_floating_point:
            return value
    return None


def _logits_of(output: Any) -> Tensor | None:
    logits = getattr(output, "logits", None)
    if logits is None:
        logits = output[0] if isinstance(output, tuple) and output else output
    return logits if isinstance(logits, Tensor) and logits.dim() == 3 else None


def _final_tokens(output: Any) -> Tensor:
    for value in (output, getattr(output, "sequences", None), output[0] if isinstance(output, tuple) else None):
        if isinstance(value, Tensor) and value.dim() == 2:
            if value.dtype.is_floating_point or value.dtype == torch.bool:
                raise ValueError(f"run: the sampler returned {value.dtype} values [B, L], not token ids; "
                                 "monitor_sampler needs the final tokens (an integer tensor)")
            return value
    raise ValueError(f"run: the sampler returned a {type(output).__name__}; monitor_sampler needs the final tokens "
                     "[B, L] (a tensor, a tuple starting with one, or an output with .sequences)")


def _row_mask(args: tuple[Any, ...], kwargs: dict[str, Any], tokens: Tensor) -> Tensor | None:
    """The rows' padding as a bool ``[B, L]`` from what the sampler passed: a 2-D ``attention_mask`` (LLaDA) or the
    diagonal of a 4-D boolean mask (Dream, as keyword or second argument); ``None`` when there is none."""
    for value in (kwargs.get("attention_mask"), args[1] if len(args) > 1 else None):
        if isinstance(value, Tensor) and value.dim() == 2 and tuple(value.shape) == tuple(tokens.shape):
            return value.bool()
        if isinstance(value, Tensor) and value.dim() == 4 and value.dtype == torch.bool:
            return value[:, 0].diagonal(dim1=-2, dim2=-1)
    return None


TIE = 1e-4
"""Two committed positions whose confidences differ by less than this are a near-tie: float rounding, another
batch shape or bf16 can put either first, and the error may depend on which."""

GREEDY_EVIDENCE = 1e-3
"""A sampler watched at a temperature above 0 whose commits were all argmax, with a probability below this under
that temperature, is warned about as greedy."""

ORDER = "most confident first (the sampler's own order is not visible to the watch)"
"""The commit order the parallel measurement assumes within a step."""


class _Parallel:
    """The per-step parallel measurement (``monitor_sampler(parallel=True)``); ``order_spread``: also the largest
    error between the assumed order and the reversed one, per row."""

    def __init__(self, denoiser: Denoiser, temperature: float, samples: int, top_m: int,
                 order_spread: bool = False, top_k: int | None = None, top_p: float | None = None,
                 top_p_first: bool = False) -> None:
        self.denoiser, self.temperature, self.samples, self.top_m = denoiser, temperature, samples, top_m
        self.top_k, self.top_p, self.top_p_first = top_k, top_p, top_p_first
        self.greedy = temperature == 0
        self.orders = 1 if order_spread else 0
        self.generator = torch.Generator(device=denoiser.device).manual_seed(0)

    def predicted_rows(self, counts: Tensor) -> int:
        """Forward rows :meth:`measure` will take for rows committing ``counts [B]`` positions (the cost formulas of
        :func:`~mlm_dynamics.diagnostics.parallel.parallel_commit_error`: its exact tree where small, else its Monte
        Carlo draws, plus ``k top_m`` for the influence estimate and the one row of its batch check; greedy: the
        ``k - 1`` rows of :func:`~mlm_dynamics.diagnostics.parallel.greedy_commit_error`)."""
        allowed = int(self.denoiser.vocab.allowed_mask().sum())
        rows = 0
        for k in sorted(set(counts.tolist()) - {0, 1}):
            if self.greedy:
                rows += int((counts == k).sum()) * (k - 1) + 1
                continue
            tree = sum(allowed ** j for j in range(k))
            per_row = tree * (1 + self.orders) if enumerable(allowed, k) else \
                1 + self.samples * (k - 1) * (1 + self.orders)
            rows += int((counts == k).sum()) * (per_row + k * self.top_m) + 1
        return rows

    def measure(self, before: Tensor, committed: Tensor, mask: Tensor | None, after: Tensor,
                confidence: Tensor) -> dict[str, float]:
        """Per row of ``before [B, L]`` the set ``committed [B, L]`` (its tokens in ``after``, each position's
        confidence in ``confidence [B, L]``, for the greedy order): the means of :attr:`SamplerTrace.parallel`."""
        if self.greedy:
            return self._measure_greedy(before, committed, mask, after, confidence)
        device = self.denoiser.device
        counts = committed.sum(1)
        zeros = torch.zeros(len(counts), dtype=torch.float64)
        tv, low, high, first, certificate = zeros.clone(), zeros.clone(), zeros.clone(), zeros.clone(), zeros.clone()
        ties, spread = torch.zeros(len(counts), dtype=torch.bool), torch.full((len(counts),), math.nan,
                                                                             dtype=torch.float64)
        exact = True
        for k in sorted(set(counts.tolist()) - {0, 1}):
            rows = (counts == k).nonzero().squeeze(1)
            positions = committed[rows].nonzero()[:, 1].view(len(rows), k).to(device)
            tokens = before[rows].to(device)
            row_mask = None if mask is None else mask[rows].to(device)
            error = parallel_commit_error(self.denoiser, tokens, positions, temperature=self.temperature,
                                          top_k=self.top_k, top_p=self.top_p, orders=self.orders,
                                          samples=self.samples, order="confidence", generator=self.generator,
                                          attention_mask=row_mask, top_m=self.top_m,
                                          top_p_first=self.top_p_first)
            assert error.first_order is not None and error.confidence is not None  # asked for with top_m
            estimate = error.first_order
            gaps = error.confidence.sort(1, descending=True).values.diff(dim=1).abs()  # [N, k - 1]
            ties[rows] = (gaps < TIE).any(1).cpu()
            spread[rows] = error.order_spread.cpu()
            tv[rows], low[rows], high[rows] = error.tv.cpu(), error.tv_low.cpu(), error.tv_high.cpu()
            first[rows], certificate[rows] = estimate.estimate.cpu(), error.certificate.cpu()
            exact &= error.exact
        single = counts == 1  # one position: no error; its certificate is 1 - c, not needed
        certificate[single] = math.nan
        measured = counts >= 2
        return {"k": float(counts.double().mean()), "k_max": float(counts.max()), "tv": float(tv.mean()),
                "tv_low": float(low.mean()), "tv_high": float(high.mean()), "tv_max": float(tv.max()),
                "first_order": float(first.mean()),
                "certificate": float(certificate[measured].mean()) if bool(measured.any()) else math.nan,
                "violated": float((low[measured] > certificate[measured] + 1e-12).double().mean())
                if bool(measured.any()) else 0.0, "exact": float(exact),
                "near_ties": float(ties[measured].double().mean()) if bool(measured.any()) else 0.0,
                **({"order_spread": float(spread[measured].mean()) if bool(measured.any()) else 0.0,
                    "order_spread_max": float(spread[measured].max()) if bool(measured.any()) else 0.0}
                   if self.orders else {})}

    def _measure_greedy(self, before: Tensor, committed: Tensor, mask: Tensor | None, after: Tensor,
                        confidence: Tensor) -> dict[str, float]:
        """A greedy step: per row, the committed tokens against the sequential greedy decode from the same state,
        most confident first (:func:`~mlm_dynamics.diagnostics.parallel.greedy_commit_error`)."""
        device = self.denoiser.device
        counts = committed.sum(1)
        differ = torch.zeros(len(counts), dtype=torch.long)
        ties = torch.zeros(len(counts), dtype=torch.bool)
        for k in sorted(set(counts.tolist()) - {0, 1}):
            rows = (counts == k).nonzero().squeeze(1)
            positions = committed[rows].nonzero()[:, 1].view(len(rows), k)
            order = confidence[rows].gather(1, positions).argsort(dim=1, descending=True, stable=True)
            positions = positions.gather(1, order)
            error = greedy_commit_error(self.denoiser, before[rows].to(device), positions.to(device),
                                        after[rows].gather(1, positions).to(device),
                                        attention_mask=None if mask is None else mask[rows].to(device))
            gaps = confidence[rows].gather(1, positions).diff(dim=1).abs()  # the commit order's near-ties
            differ[rows], ties[rows] = error.differ.cpu(), error.near_ties.cpu() | (gaps < TIE).any(1)
        measured = counts >= 2
        return {"k": float(counts.double().mean()), "k_max": float(counts.max()),
                "differ": float(differ[measured].double().mean()), "differ_max": float(differ.max()),
                "differ_tokens": float(differ.sum()), "tokens": float(counts[measured].sum()),
                "exact_match": float((differ[measured] == 0).double().mean()),
                "near_ties": float(ties[measured].double().mean()), "exact": 1.0}


def _vocab_size(model: nn.Module) -> int | None:
    """The model's vocabulary size where it says (``config.vocab_size``, an embedding's rows), else ``None``."""
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    if isinstance(size, int):
        return size
    if isinstance(model, nn.Embedding):
        return model.num_embeddings
    return None


class _Watcher:
    """The watch's state: the previous step's tokens and logits, and the running sums."""

    def __init__(self, mask_id: int, shift: int, temperature: float, monitor: ChainMonitor | None,
                 parallel: _Parallel | None = None, top_k: int | None = None, top_p: float | None = None,
                 overhead: float | None = None, padding_id: int | None = None, top_p_first: bool = False) -> None:
        self.mask_id, self.shift, self.temperature, self.monitor = mask_id, shift, temperature, monitor
        self.padding_id = padding_id
        self.top_k, self.top_p, self.top_p_first = top_k, top_p, top_p_first
        self.parallel, self.overhead = parallel, overhead
        self.started, self.watch_seconds = time.perf_counter(), 0.0  # the sampler's own time: the rest
        self.row_seconds: float | None = None  # seconds per forward row, from the sampler's calls, then measured
        self.row_mask: Tensor | None = None  # the padding of the step being accounted (for the parallel measure)
        self.depth, self.busy = 0, False
        self.trace = SamplerTrace()
        self.previous: tuple[Tensor, Tensor] | None = None  # tokens, logits at their masked positions ([N, V])
        self.total, self.squares = torch.zeros((), dtype=torch.float64), torch.zeros((), dtype=torch.float64)
        self.expected = torch.zeros(len(TEMPERATURE_GRID), dtype=torch.float64)
        self.full: Tensor | None = None  # the whole sequence as the last call left it (a cached call's window in)
        self.count = 0
        self.argmax = 0  # commits that were their position's argmax (a greedy sampler's every one)
        self.unread = 0  # outermost calls whose tokens [B, L] (integers) or logits [B, L, V] could not be read

    def watch(self, forward: Callable[..., Any]) -> Callable[..., Any]:
        """``forward`` wrapped: every call, through ``model(...)`` or ``model.forward(...)`` directly (bd3lms'
        sampler), is seen; only the outermost one counts as a step."""
        def watched(*args: Any, **kwargs: Any) -> Any:
            self.depth += 1
            called = time.perf_counter()
            try:
                output = forward(*args, **kwargs)
            finally:
                self.depth -= 1
            returned = time.perf_counter()
            if not self.depth and not self.busy and self.row_seconds is None and self.parallel is not None:
                tokens = _tokens_of(args, kwargs)  # the first step's rows: the sampler's own rate
                if tokens is not None:
                    self.row_seconds = (returned - called) / max(tokens.shape[0], 1)
            try:
                self.after(args, kwargs, output)
            except Exception as error:  # the watch's own failure: it stops, the sampler runs on with its output
                self.busy = False
                self.trace.problem = (f"the watch stopped at step {self.trace.steps + 1} ({type(error).__name__}: "
                                      f"{error}); the sampler ran on and its output is returned as it was")
            finally:
                if not self.depth and not self.busy:
                    self.watch_seconds += time.perf_counter() - returned
            return output

        return watched

    def after(self, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        if self.depth or self.busy or self.trace.problem is not None:
            return
        tokens, logits = _tokens_of(args, kwargs), _logits_of(output)
        if tokens is None or logits is None:
            self.unread += 1
            return
        if not 0 <= self.mask_id < logits.shape[-1]:
            self.trace.problem = (f"mask_id: {self.mask_id} is not an id of the model's {logits.shape[-1]}-token "
                                  "vocabulary; nothing was watched")
            return
        if self.previous is not None and tokens.shape[0] != self.previous[0].shape[0]:
            self.trace.problem = (f"the model saw {tokens.shape[0]} rows at step {self.trace.steps + 1} after "
                                  f"{self.previous[0].shape[0]} (classifier-free guidance doubles the batch): the "
                                  f"watch stopped there, the sampler ran on")
            return
        logits = logits.detach()
        if kwargs.get("past_key_values") is not None:  # a KV-cached call on a window of the sequence
            placed = self._place(tokens.detach(), logits, kwargs.get("replace_position"))
            if placed is None:
                return
            tokens, logits = placed
        self.full = tokens.detach().to("cpu", copy=True)
        if self.shift:  # position i is predicted at i - shift
            logits = torch.cat([logits[:, : self.shift], logits[:, : -self.shift]], dim=1)
        mask = _row_mask(args, kwargs, tokens)
        if self.previous is None and mask is None and self.padding_id is not None:
            self._check_padding(tokens)
        self.step(tokens.detach(), logits)
        self.row_mask = None if mask is None else mask.detach().cpu()

    def _check_padding(self, tokens: Tensor) -> None:
        """At the first step, padded prompts passed without an attention mask: warned once, and said in the trace
        (the sampler's model attended to the padding, so its conditionals, and what the watch reads from them, are
        those of the padded rows, not the prompts')."""
        left, right = padded_rows(tokens.detach().cpu(), self.mask_id, int(self.padding_id or 0))
        if left or right:
            kind = ("start with" if left else "end their prompt, right before the masked region, with (right "
                    "padding, as Fast-dLLM builds batched prompts, if it is not the prompt's own)")
            self.trace.padding = (f"rows {(left or right)[:5]} {kind} the padding id {self.padding_id} and the "
                                  "sampler passed no attention_mask: the model attends to the padding, so the "
                                  "conditionals (and what is measured from them) are those of the padded rows; "
                                  "pass the attention mask to the model, or decode each prompt unpadded")
            warnings.warn(f"monitor_sampler: {self.trace.padding}", RuntimeWarning, stacklevel=4)
            if self.parallel is not None and isinstance(self.parallel.denoiser, FullSequenceDenoiser):
                self.parallel.denoiser.warned_padding = True  # said once, not again by the measurement's forwards

    def _place(self, window: Tensor, logits: Tensor, replace: Any) -> tuple[Tensor, Tensor] | None:
        """A call on a window of the sequence with a KV cache (Fast-dLLM's prefix cache: the suffix from the current
        block on; its dual cache: the block, where ``replace_position`` marks it): the full sequence as the last
        full call left it with the window written in, and logits with the window's rows in place (NaN elsewhere:
        never computed, so a commit there stops the watch). ``None`` (the watch stopped, said once) where the window
        cannot be placed."""
        full, width = self.full, window.shape[1]
        if full is None:  # the first call, with a cache it is about to fill: the whole sequence
            return window, logits
        if full.shape[0] != window.shape[0] or width > full.shape[1]:
            self.trace.problem = (f"a KV-cached call at step {self.trace.steps + 1} on {width} positions that no "
                                  "earlier full call places: the watch stopped there, the sampler ran on")
            return None
        offset = full.shape[1] - width  # the prefix cache: the window is the sequence's tail
        if isinstance(replace, Tensor) and replace.dtype == torch.bool and replace.shape[-1] == full.shape[1]:
            columns = replace.reshape(-1, full.shape[1])[0].nonzero().squeeze(1).cpu()
            if len(columns) != width or (len(columns) and bool((columns.diff() != 1).any())):
                self.trace.problem = (f"replace_position marks {len(columns)} positions for a window of {width} at "
                                      f"step {self.trace.steps + 1}: the watch stopped there, the sampler ran on")
                return None
            offset = int(columns[0]) if len(columns) else offset
        tokens = full.to(window.device).clone()
        tokens[:, offset:offset + width] = window
        placed = logits.new_full((*tokens.shape, logits.shape[-1]), math.nan)
        placed[:, offset:offset + width] = logits
        return tokens, placed

    def step(self, tokens: Tensor, logits: Tensor | None) -> None:
        """Account the transition from the previous step to ``tokens``; keep ``tokens`` and its masked logits."""
        tokens = tokens.to("cpu", copy=True)  # samplers write into their state in place
        masked = tokens == self.mask_id
        if self.previous is not None:
            self.transition(*self.previous, tokens)
        elif self.monitor is not None:
            self._restart(tokens)
        if logits is not None:
            self.trace.steps += 1
            self.trace.widths.append(tokens.shape[1])
            self.trace.masked_fraction.append(float(masked.double().mean()))
            kept = logits[masked.to(logits.device)].float()  # stays on the model's device
            kept[:, self.mask_id] = -math.inf  # the mask id is never drawn
            if self.previous is None:
                self.trace.start = tokens
            self.previous = (tokens, kept)
        self._observe(tokens, masked, force=logits is None)

    def transition(self, before: Tensor, logits: Tensor, after: Tensor) -> None:
        width = min(before.shape[1], after.shape[1])
        was_masked = before[:, :width] == self.mask_id
        now = after[:, :width]
        committed = was_masked & (now != self.mask_id)
        self.trace.committed.append(int(committed.sum()))
        self.trace.overwritten.append(int((~was_masked & (now != before[:, :width])).sum()))
        confidence = torch.full(committed.shape, math.nan, dtype=torch.float64)
        if committed.any():
            index = torch.zeros_like(before, dtype=torch.bool)
            index[:, :width] = committed
            chosen = index[before == self.mask_id]  # logits rows follow the previous masked positions, row-major
            rows = logits[chosen]  # one copy of the committed positions' logits, read below
            if bool(rows.isnan().all(-1).any()):
                raise ValueError("a position was committed whose logits the sampler's last (KV-cached) call did not "
                                 "compute, so its law is unknown")
            draws = now[committed]
            if self.parallel is not None and self.parallel.greedy:  # the greedy measurement's commit order
                confidence[committed] = rows.softmax(-1).amax(-1).double().cpu()
            self.argmax += int((rows.argmax(-1).cpu() == draws).sum())  # a greedy sampler's every commit
            if self.temperature > 0:
                if self.top_k is not None or self.top_p is not None:  # the law the sampler draws from: truncated
                    allowed = torch.ones(rows.shape[-1], dtype=torch.bool, device=rows.device)
                    kept = tempered_log_probs(rows, allowed, self.temperature, top_k=self.top_k, top_p=self.top_p,
                                              top_p_first=self.top_p_first)
                    rows = rows.masked_fill(kept == -math.inf, -math.inf)
                total, squares, expected = surprisal_statistics(rows, draws, self.temperature)
                self.total, self.squares = self.total + total, self.squares + squares
                self.expected = self.expected + expected
            self.count += int(committed.sum())
        if self.parallel is not None:
            self._measure_parallel(before[:, :width], committed, now, confidence)
        if after.shape[1] != before.shape[1] and self.monitor is not None:
            self._restart(after)

    def _measure_parallel(self, before: Tensor, committed: Tensor, after: Tensor, confidence: Tensor) -> None:
        """The error of the step's committed sets on as many of its rows (those committing two or more positions,
        first ones first) as keep the measurement within ``overhead`` of the sampler's own time so far, each row's
        cost predicted from its forward rows; a step with no row that fits is skipped (counted). A failure stops
        this measurement only (warned once)."""
        assert self.parallel is not None
        counts = committed.sum(1)
        candidates = (counts >= 2).nonzero().squeeze(1)
        if not len(candidates):
            return
        self.trace.parallel_rows_total += len(candidates)
        chosen = len(candidates)
        if self.overhead is not None:
            left = self.overhead * (time.perf_counter() - self.started - self.watch_seconds) \
                - self.trace.parallel_seconds
            while chosen and self.parallel.predicted_rows(counts[candidates[:chosen]]) * (self.row_seconds or 0.0) \
                    > left:
                chosen -= 1
            if not chosen:
                self.trace.parallel_skipped += 1
                return
        rows = candidates[:chosen]
        predicted = self.parallel.predicted_rows(counts[rows])
        self.busy = True
        started = time.perf_counter()
        mask = self.row_mask if self.row_mask is None or self.row_mask.shape == before.shape else None
        try:
            with torch.no_grad():
                measured = self.parallel.measure(before[rows], committed[rows], None if mask is None else mask[rows],
                                                 after[rows], confidence[rows])
            self.trace.parallel.append({**measured, "rows": float(chosen), "rows_of": float(len(candidates))})
            self.trace.parallel_steps.append(len(self.trace.committed) - 1)
            self.row_seconds = max(self.row_seconds or 0.0, (time.perf_counter() - started) / max(predicted, 1))
        except (ValueError, RuntimeError) as error:
            self.trace.parallel_problem = (f"the parallel measurement stopped at step {self.trace.steps}: {error}; "
                                           "the sampler and the rest of the watch ran on")
            warnings.warn(f"monitor_sampler: {self.trace.parallel_problem}", RuntimeWarning, stacklevel=2)
            self.parallel = None
        finally:
            self.trace.parallel_seconds += time.perf_counter() - started
            self.busy = False

    def _restart(self, tokens: Tensor) -> None:
        assert self.monitor is not None
        self.busy = True
        try:
            self.monitor.start(tokens, step=self.trace.steps, phase=f"width{tokens.shape[1]}")
        finally:
            self.busy = False

    def _observe(self, tokens: Tensor, masked: Tensor, *, force: bool) -> None:
        if self.monitor is None:
            return
        self.busy = True
        try:
            out = self.monitor.observe(tokens, step=self.trace.steps + (1 if force else 0), masked=masked,
                                       force=force)
        finally:
            self.busy = False
        if out is not None:
            self.trace.metrics.append(out)

    def finish(self, output: Any) -> SamplerTrace:
        """The trace of the run that returned ``output``; whatever fails here is the trace's ``problem`` (warned
        once), never an exception: ``output`` is always returned as it was."""
        self.trace.output = output
        try:
            return self._finish(output)
        except Exception as error:
            self.trace.problem = self.trace.problem or (f"the watch could not finish ({type(error).__name__}: "
                                                        f"{error}); the sampler's output is returned as it was")
            warnings.warn(f"monitor_sampler: {self.trace.problem}", RuntimeWarning, stacklevel=3)
            return self.trace

    def _finish(self, output: Any) -> SamplerTrace:
        final = _final_tokens(output)
        self.trace.final = final.cpu()
        if self.trace.problem is None and not self.trace.steps:
            self.trace.problem = (
                "the sampler never called the watched model with token ids [B, L] and got logits [B, L, V] back "
                f"({self.unread} calls it could not read): is it another instance (watch the one the sampler "
                "calls: for a Lightning module that calls its backbone, the module or the backbone), or does it "
                "feed embeddings or floats?")
        seen = None if self.previous is None else self.previous[0].shape[0]
        if self.trace.problem is None and seen is not None and final.shape[0] != seen:
            self.trace.problem = (f"run returned {final.shape[0]} rows where the model saw {seen} at every step "
                                  "(classifier-free guidance?): the per-step statistics include rows that are not "
                                  "the sampler's output, and the final state was not watched")
        elif self.trace.problem is None:
            self.step(final, None)
        if self.trace.problem is not None:
            warnings.warn(f"monitor_sampler: {self.trace.problem}", RuntimeWarning, stacklevel=3)
        if self.count and self.temperature == 0:
            self.trace.effective = {"argmax_fraction": self.argmax / self.count}
        elif self.count:
            self.trace.effective = {**effective_temperature_from(self.total, self.squares, self.expected, self.count,
                                                                 self.temperature),
                                    "argmax_fraction": self.argmax / self.count}
            self._check_greedy()
        self._check_parallel_measured()
        return self.trace

    def _check_greedy(self) -> None:
        """A sampler watched at a temperature above 0 whose every commit was its position's argmax, where a sampler
        drawing at that temperature does so with probability (the product of the draws' probabilities)
        below :data:`GREEDY_EVIDENCE`: warned once and said in :attr:`SamplerTrace.looks_greedy`."""
        chance = math.exp(-float(self.total))
        if self.argmax == self.count and chance < GREEDY_EVIDENCE:
            self.trace.looks_greedy = (
                f"all {self.count} commits were their position's argmax, which a sampler drawing at temperature "
                f"{self.temperature:g} does with probability {chance:.2g}: the sampler looks greedy, and what was "
                f"measured is for a temperature-{self.temperature:g} sampler that never ran; pass temperature=0")
            warnings.warn(f"monitor_sampler: {self.trace.looks_greedy}", RuntimeWarning, stacklevel=4)

    def _check_parallel_measured(self) -> None:
        """``parallel=True`` with steps that committed two or more positions, none of which was measured (every one
        over the ``overhead`` budget): warned once and said in :attr:`SamplerTrace.parallel_problem`."""
        if self.parallel is not None and self.trace.parallel_skipped and not self.trace.parallel:
            self.trace.parallel_problem = (
                f"no step was measured: {self.trace.parallel_skipped} steps committed two or more positions and none "
                "fitted within the overhead budget (raise overhead=, or None to measure every step)")
            warnings.warn(f"monitor_sampler: {self.trace.parallel_problem}", RuntimeWarning, stacklevel=4)


@dataclass
class DecodeAgreement:
    """:func:`decode_agreement`: a decode against a reference decode of the same prompts.

    Attributes:
        row_agreement: ``[B]`` per prompt, the share of its generated positions (masked in the first step, or
            appended later) where the two decodes chose the same token.
        token_agreement: the share over all generated positions.
        exact_match: the share of prompts whose generated tokens are all the reference's; exact_match_low: its
            one-sided Clopper-Pearson lower limit at ``level``, for prompts drawn like these.
        forwards, reference_forwards: the model calls each decode made (outermost forwards, the watch's steps);
            forwards_saved: ``1 - forwards / reference_forwards``.
        level: the lower limit's level.
    """

    row_agreement: Tensor
    token_agreement: float
    exact_match: float
    exact_match_low: float
    forwards: int
    reference_forwards: int
    forwards_saved: float
    level: float

    def summary(self) -> dict[str, float]:
        """The scalars: ``token_agreement``, ``exact_match``, ``exact_match_low``, ``forwards``,
        ``reference_forwards``, ``forwards_saved``, ``prompts``."""
        return {"token_agreement": self.token_agreement, "exact_match": self.exact_match,
                "exact_match_low": self.exact_match_low, "forwards": float(self.forwards),
                "reference_forwards": float(self.reference_forwards), "forwards_saved": self.forwards_saved,
                "prompts": float(len(self.row_agreement))}


def decode_agreement(trace: SamplerTrace, reference: SamplerTrace, *, level: float = 0.95) -> DecodeAgreement:
    """How a decode (``trace``: say Fast-dLLM at its threshold, or LLaDA at ``K`` tokens a step, greedy) agrees with
    a reference decode of the same prompts (``reference``: the same sampler committing one token per forward), both
    watched by :func:`monitor_sampler`: per prompt and overall, the share of generated tokens that agree, the share
    of prompts decoded exactly as the reference (with a lower confidence limit), and the forwards saved. For greedy
    decodes the comparison is deterministic; for sampled ones it compares two draws (run both with one seed, or read
    the per-step ``tv`` of ``parallel=True`` instead). Cost: none (the traces' tokens)."""
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    for name, seen in (("trace", trace), ("reference", reference)):
        if not isinstance(seen, SamplerTrace) or seen.start is None or seen.final is None:
            raise ValueError(f"{name} must be a SamplerTrace of a watched decode (monitor_sampler) that saw its first "
                             "step and its output")
    assert trace.start is not None and trace.final is not None  # checked above, for the type checker
    assert reference.start is not None and reference.final is not None
    if trace.start.shape != reference.start.shape or not torch.equal(trace.start, reference.start):
        raise ValueError(f"reference: its first step's tokens {tuple(reference.start.shape)} are not the trace's "
                         f"{tuple(trace.start.shape)}: decode the same prompts with the same masked region")
    if trace.final.shape != reference.final.shape:
        raise ValueError(f"reference: its output {tuple(reference.final.shape)} is not shaped like the trace's "
                         f"{tuple(trace.final.shape)}")
    generated = torch.ones(trace.final.shape, dtype=torch.bool)
    generated[:, : trace.start.shape[1]] = trace.start == trace.mask_id
    counts = generated.sum(1)
    if not bool((counts > 0).all()):
        raise ValueError("trace: a prompt with no masked position in its first step generated nothing to compare")
    agree = (trace.final == reference.final) & generated
    rows = agree.sum(1).double() / counts
    exact = int((agree.sum(1) == counts).sum())
    return DecodeAgreement(row_agreement=rows, token_agreement=float(agree.sum()) / float(counts.sum()),
                           exact_match=exact / len(rows), exact_match_low=clopper_pearson_lower(exact, len(rows),
                                                                                                1 - level),
                           forwards=trace.steps, reference_forwards=reference.steps,
                           forwards_saved=1 - trace.steps / reference.steps if reference.steps else math.nan,
                           level=float(level))


def sampler_denoiser(denoiser: Denoiser) -> Denoiser:
    """A diffusion family's ``denoiser`` with the law its own sampler commits from: every id but the mask (LLaDA's
    and Dream's samplers draw over the whole vocabulary, BOS and EOS included, and a drawn mask commits nothing;
    MDLM's, BD3-LM's and SEDD's exclude the mask state), where the product's own chains leave the special tokens
    alone. Other denoisers (a masked LM's) are returned as they are. Cost: none."""
    if isinstance(denoiser, FullSequenceDenoiser):
        denoiser.vocab = replace(denoiser.vocab, forbidden_ids=(denoiser.mask_id,))
        denoiser.forbidden = ~denoiser.vocab.allowed_mask(denoiser.forbidden.device)
    return denoiser


def monitor_sampler(model: nn.Module, run: Callable[[], Any], monitor: ChainMonitor | None = None, *,
                    mask_id: int | None = None, logit_shift: int | None = None,
                    temperature: float = 1.0, parallel: bool = False, parallel_samples: int = 64,
                    top_m: int = 8, denoiser: Denoiser | None = None, family: str | None = None,
                    order_spread: bool = False, top_k: int | None = None, top_p: float | None = None,
                    overhead: float | None = 0.05, top_p_first: bool | None = None) -> SamplerTrace:
    """Run ``run()`` (a sampler calling ``model``, unmodified) and watch each of its denoising steps; see the module
    docstring. ``temperature``: the temperature the sampler draws at (the reference of the effective temperature and
    of the parallel measurement; 0 for a greedy sampler, whose commits are checked against their argmax and, with
    ``parallel``, against the sequential greedy decode);
    ``top_k``/``top_p``: the sampler's truncation (nucleus sampling), the law both measure against, applied
    together in the family's own order (``top_p_first``: ``None`` for the family's, Dream's the nucleus first,
    else the top-k first; or say which).
    ``parallel``: measure each step's committed sets (``parallel_samples`` Monte Carlo draws where the tree is large,
    ``top_m`` values per position for the influence estimate) through ``denoiser`` (default: the model's exact
    adapter, :func:`~mlm_dynamics.models.families.denoiser_for`), committed most confident first
    (:attr:`SamplerTrace.parallel_order`; near-ties flagged per step); ``order_spread=True`` also measures the error
    between that order and the reversed one (one more order's forwards). ``overhead``: the parallel measurement takes
    at most this fraction of the sampler's own time so far (each row's cost predicted from its forward rows at the
    rate the sampler's calls and the earlier measurements showed): a step measures as many of its rows as fit, a step
    with none is skipped and counted (:attr:`SamplerTrace.parallel_steps`, ``parallel_skipped``); ``None`` measures
    every row of every step (a few prompts, not production decoding). Whatever fails inside the watch stops the watch
    (:attr:`SamplerTrace.problem`, warned once); ``run()``'s output is always returned in
    :attr:`SamplerTrace.output`. The mask id and the logit shift come, first to last, from ``mask_id=`` and
    ``logit_shift=``, the ``denoiser=`` given, the family named by ``family=`` (a fork of a registered family, such
    as Fast-dLLM's ``fastdllm_dream``, follows its conventions) or detected from the model.

    Examples:
        A toy loop that reveals one position per step with a greedy pick, watched as if it drew at temperature 1: a
        cooled sampler (effective temperature below the asked 1), also warned about as greedy (pass
        ``temperature=0`` for such a loop):

        >>> import torch
        >>> from mlm_dynamics.tracking.sampler_monitor import monitor_sampler
        >>> net = torch.nn.Embedding(5, 5)          # any model: logits [B, L, V] from tokens [B, L]; id 4 = mask
        >>> def sample():
        ...     x = torch.full((2, 6), 4)
        ...     for k in range(6):
        ...         logits = net(x)
        ...         x[:, k] = logits[:, k, :4].argmax(-1)
        ...     return x
        >>> trace = monitor_sampler(net, sample, mask_id=4)
        >>> trace.steps, sum(trace.committed), trace.effective["effective_temperature_upper_bound"]
        (6, 12, 0.25)
    """
    if not callable(run):
        raise ValueError(f"run must be a callable that runs the sampler (e.g. lambda: model.generate(...)), got "
                         f"{type(run).__name__}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature) \
            or temperature < 0:
        raise ValueError(f"temperature must be the sampler's temperature, a finite number >= 0 (0: greedy, argmax "
                         f"commits), got {temperature!r}")
    check_truncation(top_k, top_p)
    check_overhead(overhead)
    if mask_id is not None and (isinstance(mask_id, bool) or not isinstance(mask_id, int) or mask_id < 0):
        raise ValueError(f"mask_id must be a token id (an integer >= 0), got {mask_id!r}")
    size = _vocab_size(model)
    if mask_id is not None and size is not None and mask_id >= size:
        raise ValueError(f"mask_id: {mask_id} is not an id of the model's {size}-token vocabulary")
    if family is not None and family not in FAMILIES:
        raise ValueError(f"family must be one of {sorted(FAMILIES)}, got {family!r}")
    detected = detect_family(model)
    check_named_family(FAMILIES[family] if family is not None else None, detected, model)
    chosen = FAMILIES[family] if family is not None else detected
    if mask_id is None and denoiser is not None:
        mask_id = denoiser.vocab.mask_id
    if mask_id is None:
        if chosen is None:
            raise ValueError(f"mask_id: a {type(model).__name__} (model_type "
                             f"{getattr(getattr(model, 'config', None), 'model_type', None)!r}) is no known diffusion "
                             "family, so its mask id is unknown; pass family= naming the family it follows (one of "
                             f"{sorted(FAMILIES)}) or mask_id= (and logit_shift=)")
        mask_id = family_mask_id(chosen, model)
    if logit_shift is None:
        logit_shift = int(getattr(denoiser, "logit_shift", 0)) if denoiser is not None else (
            chosen.logit_shift if chosen is not None else 0)
    elif denoiser is not None and logit_shift != int(getattr(denoiser, "logit_shift", 0)):
        raise ValueError(f"logit_shift: {logit_shift} disagrees with the denoiser's {denoiser.logit_shift}; the watch "
                         "and the denoiser would read each position's logits at different places; leave one out")
    elif denoiser is None and chosen is not None and logit_shift != chosen.logit_shift:
        raise ValueError(f"logit_shift: {logit_shift} contradicts the {chosen.name} family's {chosen.logit_shift} "
                         f"({'named by family=' if family is not None else 'detected from the model'}): each "
                         "position's logits would be read at the wrong place; leave logit_shift out")
    shift = logit_shift
    if top_p_first is not None and not isinstance(top_p_first, bool):
        raise ValueError(f"top_p_first must be True, False or None (the family's order), got {top_p_first!r}")
    nucleus_first = top_p_first if top_p_first is not None else bool(chosen is not None and chosen.top_p_first)
    measure = None
    if parallel:
        if isinstance(parallel_samples, bool) or not isinstance(parallel_samples, int) or parallel_samples < 2:
            raise ValueError(f"parallel_samples must be an integer >= 2, got {parallel_samples!r}")
        if denoiser is None:
            try:
                denoiser = sampler_denoiser(denoiser_for(model, family=family))
            except ValueError as error:
                raise ValueError(f"denoiser: parallel=True reads the model's conditionals, and {error}; pass "
                                 "denoiser=") from None
        if denoiser.vocab.mask_id != mask_id:
            raise ValueError(f"denoiser: its mask id {denoiser.vocab.mask_id} is not the sampler's {mask_id}")
        measure = _Parallel(denoiser, temperature, parallel_samples, top_m, order_spread, top_k, top_p,
                            nucleus_first)
    padding_id = getattr(denoiser, "padding_id", None) if denoiser is not None else \
        getattr(getattr(model, "config", None), "pad_token_id", None) if chosen is not None else None
    watcher = _Watcher(mask_id, shift, temperature, monitor, measure, top_k, top_p, overhead,
                       padding_id if isinstance(padding_id, int) and padding_id != mask_id else None, nucleus_first)
    watcher.trace.parallel_order = ORDER if measure is not None else None
    watcher.trace.temperature, watcher.trace.mask_id = float(temperature), mask_id
    own = model.__dict__.get("forward")  # an instance attribute of its own, put back afterwards
    model.forward = watcher.watch(model.forward)
    try:
        output = run()
    finally:
        if own is None:
            del model.forward
        else:
            model.forward = own
    return watcher.finish(output)


__all__ = ["GREEDY_EVIDENCE", "ORDER", "TIE", "DecodeAgreement", "SamplerTrace", "decode_agreement", "monitor_sampler",
           "padded_rows"]
