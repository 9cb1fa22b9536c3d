"""Scheduled diagnostics, framework-free: what a diagnostic run is, when it happens and what it may touch.

A :class:`Probe` measures one diagnostic on a denoiser from start states (coupled chains, rectangles, influence,
long-run chains). A :class:`ScheduledProbe` owns everything around it that every training loop needs: the schedule
(every N optimizer steps, at validation end, at predict end), the start states read from the loop's batches, the
time budget, the weights to measure (``weights=``: an EMA context), the random stream and the state that a
checkpoint keeps. The Lightning callbacks (:mod:`mlm_dynamics.callbacks`) are thin adapters over it, as are the
integrations for other loops; a plain loop calls it directly::

    scheduled = ScheduledProbe(MeetingTimeProbe(max_steps=200), every_n_steps=500)
    scheduled.prepare(model, denoiser)                    # checks now, not at the first run
    for step, batch in enumerate(loader, 1):
        ...                                               # the user's optimizer step
        scheduled.capture(batch)
        if scheduled.due(step):
            metrics = scheduled.run(model, denoiser, stage="train")

**Non-interference.** A run changes nothing the watched loop can see: it happens under :func:`.isolated` (eval
mode inside, every submodule's own train/eval flag restored, no gradients, the global random state restored), draws
all its randomness from its own generator (kept in :meth:`ScheduledProbe.state_dict`), and verifies that a
``weights=`` context put the parameters back. At validation end, when the module has already swapped other weights
in (an EMA ``store``/``copy_to`` in its ``on_validation_epoch_start``), ``weights=`` is not applied a second time.

**Metric names** are ``{prefix}{group}/{stage}/{name}``: ``mixing/train/meeting_time_median`` for a run every N
training steps, ``mixing/val/...`` at validation end, ``mixing/predict/...`` at predict end; each value is logged
once, at the step it was measured (:func:`metric_key_table` lists every name).

**Cost is the user's budget.** ``overhead`` (default 0.05) caps the diagnostics at that fraction of the watched loop's
own wall-clock time (training and evaluation alike): a due run happens only when the seconds spent so far plus the
expected cost of one run fit within ``overhead`` times the loop's seconds; otherwise it is skipped and counted
(``skipped_runs``), and every run logs the realised fraction (``overhead``). The diagnostics' seconds are all the probe
does (copying start rows, runs, estimates, the adapter logging a run's values: :meth:`ScheduledProbe.charged`) and what
a run leaves behind: the excess of the optimizer step right after a run over a typical step (cold caches, kernels
re-selected for the training shapes). The loop's seconds leave out what every probe of the process spent, so several
probes on one loop share it without counting each other's runs as loop time. The expected cost is the last run's with
its after-effect, and before the first run an estimate from the probe's forward rows and a timed forward (the fastest of
three after a warm-up), at setup and again on the first training batch (:attr:`ScheduledProbe.estimate`, one line the
adapters log when the run is set up). An estimate can be wrong (a busy machine, a first run on longer rows), so a run is
also held to what is left of the budget when it starts: past it, the next forward pass is refused
(:func:`~mlm_dynamics.models.base.forward_deadline`), the run is counted (``stopped_runs``), its partial results are
logged where the probe can state them honestly (meeting times censored at the steps reached, with their ``budget``) and
discarded otherwise, and the next run waits for the full cost it showed; the diagnostics therefore exceed ``overhead``
by at most one forward pass. ``budget_seconds`` is an absolute cap on top. A loop too short for a full run still gets
one measurement: a first run that does not fit runs smaller when the probe has a smaller run that still measures what
its keys name (:meth:`Probe.smaller_run`: fewer coupled steps, but no fewer than a random scan needs to choose every
site half the time; fewer rectangles; fewer long-run steps), sized to what is left of ``overhead`` at the full run's
expected seconds per forward row, and logs ``run_fraction``; later runs are full ones, each when it fits.

**Failures never end the run.** A run that fails (a numerical refusal, running out of memory, a model quirk) is
caught, warned about once per cause with what to change, counted (``failed_runs``, logged), and the loop goes on;
``strict=True`` (tests, CI) re-raises. A ``weights=`` context that leaves other parameters in the module is not a
failure of the diagnostic but a broken contract with the loop: it always raises.

**Several processes** (DDP): every rank calls :meth:`ScheduledProbe.run` at the same points; the budget is decided
on the maximum of the ranks' seconds (an all-reduce), pooled probes (meeting times, rectangles) measure on every
rank and reduce through torchmetrics (their logged ``overhead`` is the busiest rank's), the others run on rank 0
only. Runs are not stopped mid-way there (the ranks must end a run at the same points): the estimate alone holds
them to the budget.
"""

from __future__ import annotations

import abc
import json
import logging
import math
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import nn

from .._random import as_generator
from ..models.base import Denoiser, OutOfTime, check_overhead, forward_deadline
from .isolation import isolated, parameter_checksum
from .starts import BatchRows, StartStates, TokenRows, batch_rows, load_tokens, pad_rows, placeholder_rows, start_states

STAGES: tuple[str, ...] = ("train", "val", "predict")
FAILURES = (ValueError, RuntimeError, FloatingPointError, IndexError, TypeError, ArithmeticError, MemoryError)
LOGGER = logging.getLogger("mlm_dynamics")

Weights = Callable[[Any], AbstractContextManager[Any]]


@dataclass(frozen=True)
class MetricKey:
    """One logged quantity: ``name`` after ``{group}/{stage}/`` (``{...}`` marks a part filled in per option),
    what it means, its unit, and when it is logged beyond every run."""

    name: str
    meaning: str
    unit: str
    when: str = ""


SCHEDULE_KEYS = (
    MetricKey("failed_runs", "runs that failed so far (the loop went on; a warning named the cause and the fix)",
              "count"),
    MetricKey("skipped_runs", "due runs skipped so far to keep the diagnostics within overhead of the loop's time",
              "count"),
    MetricKey("stopped_runs", "runs stopped at the end of the budget left to them (partial results logged only where "
                              "they are honest, e.g. meeting times censored at the steps reached; the next run waits "
                              "for the full cost they showed)", "count"),
    MetricKey("overhead", "seconds of diagnostics over the loop's own seconds so far (realised; capped by "
                          "overhead=)", "fraction", "once the loop has run"),
    MetricKey("run_fraction", "this run's forward rows over a full run's: 1, or less for a first run that did not "
                              "fit within overhead and ran smaller (fewer steps or rectangles: the probe's own keys "
                              "say how many), or for a run stopped at its budget (the share it realised)",
              "fraction"),
)


class Probe(abc.ABC):
    """One diagnostic measured on a denoiser from start states; stateful probes keep their state in
    :meth:`state_dict`."""

    group: ClassVar[str]
    pooled: ClassVar[bool] = False  # True: measured on every rank and pooled; False: rank 0 only
    keys: ClassVar[tuple[MetricKey, ...]]

    def bind(self, denoiser: Denoiser, sample: StartStates) -> None:
        """Checks and preparation before the first run, on one start row (wrong embedder, anchors of another
        dimension, a misnamed module fail here, not mid-run). Default: nothing."""
        del denoiser, sample

    @abc.abstractmethod
    def measure(self, denoiser: Denoiser, starts: StartStates, generator: torch.Generator) -> dict[str, float]:
        """The diagnostic's scalars (names without group or stage), drawing only from ``generator``."""

    def draws(self) -> list[dict[str, list[int]]]:
        """Sequences the latest run drew, as a few groups of ``label -> token ids`` (the others of a group are shown
        against its first); default: none."""
        return []

    def forward_rows(self, rows: int, sites: int) -> int | None:
        """The most forward rows one run can cost on ``rows`` start rows of ``sites`` resampled positions (the cost
        estimate before the first run); ``None``: unknown (the first run is then not budgeted ahead)."""
        del rows, sites
        return None

    def smaller_run(self, sites: int) -> tuple[str, int] | None:
        """The integer option a smaller run lowers and the least value at which a run from rows of at most ``sites``
        resampled positions still measures what the keys name (the scheduler runs such a run when a first run does
        not fit within ``overhead``, :meth:`forward_rows` sizing it); ``None``: no smaller run. Default: none."""
        del sites
        return None

    def state_dict(self) -> dict[str, Any]:
        """The probe's own state (empty for stateless probes), saved with the schedule's."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        del state


def check_every(value: object, name: str) -> None:
    """A ValueError naming ``name`` unless ``value`` is ``None`` or an integer >= 1 (a step interval)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name} must be an integer >= 1 (run every N optimizer steps) or None, got {value!r}")


class _SharedClock:
    """The seconds every :class:`ScheduledProbe` of this process has spent on diagnostics: each probe's loop clock
    leaves them out, so one probe's run (or setup, or an adapter's logging) never counts as the loop's time of
    another probe watching the same loop."""

    seconds = 0.0


_SHARED = _SharedClock()


class ScheduledProbe:
    """A probe with its schedule, start states, budget, weights and random stream (see the module docstring).

    Args:
        probe: the diagnostic.
        every_n_steps: run every N optimizer steps (``None``: never during training).
        at_validation, at_predict: run at validation end / predict end.
        start_tokens: start sequences (a tensor, ragged id lists, or a JSON/YAML file of them); default: the first
            rows of the latest batch seen by :meth:`capture`.
        batch_to_tokens: maps a batch of another shape to a token tensor or a mapping with ``input_ids``.
        num_starts: rows taken from a batch.
        budget_seconds: stop scheduling once this many seconds of diagnostics were spent (``None``: no budget).
        overhead: the largest fraction of the loop's wall-clock time the diagnostics may take (``None``: no cap).
        strict: re-raise a failing run instead of warning and counting it (for tests and CI).
        seed: seed of the probe's own generator.
        prefix: prepended to every metric name.
        weights: ``weights(module)`` returns a context manager under which to measure (e.g. EMA weights); it must
            leave the parameters as it found them.

    Examples:
        In any training loop: hand it each batch, ask whether the step is due, run it (isolated: the model's modes,
        the global random state and grad mode are as they were afterwards):

        >>> import torch
        >>> from mlm_dynamics import ScheduledProbe
        >>> from mlm_dynamics.probes import MeetingTimeProbe
        >>> from mlm_dynamics.training.masked_lm import tiny_bert_denoiser
        >>> denoiser = tiny_bert_denoiser(generator=0)             # MaskedLMDenoiser(your_model, tokenizer=...)
        >>> batch = torch.randint(5, 24, (4, 10), generator=torch.Generator().manual_seed(0))
        >>> batch[:, 0], batch[:, -1] = 1, 2                       # [CLS] ... [SEP]
        >>> scheduled = ScheduledProbe(MeetingTimeProbe(max_steps=50), every_n_steps=2,
        ...                            overhead=None)                   # every due run; the default: <= 5 % of the loop
        >>> scheduled.prepare(denoiser.model, denoiser)             # checks before the first run
        >>> state = torch.random.get_rng_state()
        >>> for step in range(1, 5):                                # ... your optimizer steps ...
        ...     scheduled.capture(batch)
        ...     if scheduled.due(step):
        ...         metrics = scheduled.run(denoiser.model, denoiser, stage="train")
        >>> metrics["mixing/train/num_pairs"], metrics["mixing/train/meeting_time_median_confidence"]
        (4.0, 0.875)
        >>> median = "mixing/train/meeting_time_median"   # logged, or (censored) only its lower bound
        >>> (median in metrics) != (f"{median}_lower_bound" in metrics)
        True
        >>> torch.equal(torch.random.get_rng_state(), state), denoiser.model.training
        (True, True)
    """

    def __init__(self, probe: Probe, *, every_n_steps: int | None = None, at_validation: bool = True,
                 at_predict: bool = False, start_tokens: TokenRows | str | None = None,
                 batch_to_tokens: Callable[[Any], Any] | None = None, num_starts: int = 4,
                 budget_seconds: float | None = None, seed: int = 0, prefix: str = "",
                 weights: Weights | None = None, overhead: float | None = 0.05, strict: bool = False) -> None:
        check_every(every_n_steps, "every_n_steps")
        check_overhead(overhead)
        if isinstance(num_starts, bool) or not isinstance(num_starts, int) or num_starts < 1:
            raise ValueError(f"num_starts must be an integer >= 1, got {num_starts!r}")
        if budget_seconds is not None and not budget_seconds > 0:
            raise ValueError(f"budget_seconds must be > 0 or None (no budget), got {budget_seconds}; a budget of "
                             "zero would never run the diagnostics")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise ValueError(f"seed must be an integer in [0, 2^63), got {seed!r}")
        if weights is not None and not callable(weights):
            raise ValueError(f"weights must be a function of the module returning a context manager, got {weights!r}")
        self.probe = probe
        self.every_n_steps, self.at_validation, self.at_predict = every_n_steps, at_validation, at_predict
        self.start_tokens = load_tokens(start_tokens)
        self.batch_to_tokens, self.num_starts = batch_to_tokens, num_starts
        self.budget_seconds, self.prefix, self.weights = budget_seconds, prefix, weights
        self.overhead, self.strict = (None if overhead is None else float(overhead)), strict
        self.generator = as_generator(seed)
        self.runs, self.seconds_used, self.last_step = 0, 0.0, -1
        self.failed_runs, self.skipped_runs, self.stopped_runs = 0, 0, 0
        self.loop_seconds = 0.0  # the watched loop's own wall-clock seconds so far (diagnostics excluded)
        self.estimate: float | None = None  # expected seconds of the next run
        self.estimate_line = ""
        self._measured_estimate: float | None = None  # the smallest estimate timed on real start rows so far
        self._next_estimate = 0.0  # the loop's seconds at which that estimate is timed again (before a first run)
        self._seen_step, self._loop_at_step, self._after_run = -1, 0.0, False
        self._typical_step: float | None = None  # the loop's seconds per optimizer step, away from runs
        self._left_behind, self._after_runs, self._last_run_seconds = 0.0, 0, 0.0  # charged after runs; runs; last
        self._mark: float | None = None
        self._shared_at_mark = 0.0
        self._warned: set[str] = set()
        self.latest: BatchRows | None = None
        self._batch: Any = None  # the batch captured last, read when a run needs it
        self.last_metrics: dict[str, float] = {}
        self._evaluation_weights: torch.Tensor | None = None

    # -- start states ------------------------------------------------------------------------------------------------
    def tick(self) -> None:
        """Count the loop's wall-clock time since the last tick (or the end of the last run): what ``overhead`` is a
        fraction of, less what every probe of the process spent on diagnostics meanwhile (another probe's run is not
        this loop's time). ``capture``, ``due`` and ``run`` tick; a loop that calls none of them between steps loses
        no time, it is counted at the next call."""
        now = time.perf_counter()
        if self._mark is not None:
            self.loop_seconds += max(0.0, now - self._mark - (_SHARED.seconds - self._shared_at_mark))
        self._restart(now)

    def _restart(self, now: float | None = None) -> None:
        """The loop's clock runs again from ``now`` (default: this instant)."""
        self._mark = time.perf_counter() if now is None else now
        self._shared_at_mark = _SHARED.seconds

    def _spent(self, seconds: float, *, charged: bool = True) -> None:
        """Diagnostics that took ``seconds`` just ended: this probe's (unless not ``charged``: the setup), and off
        every probe's loop clock."""
        if charged:
            self.seconds_used += seconds
        _SHARED.seconds += seconds
        self._restart()

    @contextmanager
    def charged(self) -> Iterator[None]:
        """Diagnostics work outside a run (an adapter logging a run's values or drawing its figures): its seconds
        count as this probe's, and off every probe's loop clock."""
        self.tick()
        started = time.perf_counter()
        try:
            yield
        finally:
            self._spent(time.perf_counter() - started)

    def capture(self, batch: Any) -> None:
        """Keep ``batch`` as the source of the next run's starts (unless ``start_tokens`` were given): a reference
        only, its first rows are copied when a run needs them (:meth:`starts`), so a step whose run is not due
        costs nothing; the first batch is read at once, so a batch the probe cannot read is said at the start. A
        batch that cannot be read is warned about once and leaves the previous starts (``strict=True``: a
        ValueError)."""
        self.tick()
        if self.start_tokens is None:
            self._batch = batch
            if self.latest is None:
                self._read_batch()

    def _read_batch(self) -> None:
        """Copy the first rows of the batch captured last into :attr:`latest`; the copy's seconds count as
        diagnostics, not as the loop's."""
        if self._batch is None:
            return
        batch, self._batch = self._batch, None
        self.tick()
        started = time.perf_counter()
        try:
            self.latest = batch_rows(batch, self.num_starts, self.batch_to_tokens)
        except ValueError as error:  # a batch the probe cannot read never ends the fit (unless strict)
            if self.strict:
                raise
            self._warn_once("capture", f"{type(self.probe).__name__}: {error}; the runs fail until a batch can "
                            "be read (failed_runs counts them), the fit goes on")
        finally:
            self._spent(time.perf_counter() - started)

    def starts(self, denoiser: Denoiser) -> StartStates:
        """The start states of the next run, on the denoiser's device."""
        self._read_batch()
        if self.start_tokens is not None:
            rows = (BatchRows(self.start_tokens) if isinstance(self.start_tokens, torch.Tensor)
                    else pad_rows(self.start_tokens, denoiser.vocab.pad_id))
            rows = BatchRows(rows.input_ids[: self.num_starts], None if rows.attention_mask is None
                             else rows.attention_mask[: self.num_starts])
        elif self.latest is not None:
            rows = self.latest
        else:
            raise RuntimeError(f"{type(self.probe).__name__}: no start tokens yet (no batch seen and no start_tokens)")
        return start_states(denoiser, rows)

    # -- schedule ------------------------------------------------------------------------------------------------------
    def due(self, step: int) -> bool:
        """Whether optimizer step ``step`` runs the probe; True at most once per step (gradient accumulation calls
        again with the same step) and never at step 0."""
        self.tick()
        if step != self._seen_step:
            self._seen_step = step
            self._account_step()
        if not self.every_n_steps or step <= 0 or step % self.every_n_steps or step == self.last_step:
            return False
        self.last_step = step
        return True

    def _account_step(self) -> None:
        """Once per optimizer step: the loop's seconds since the previous step. The step after a run is charged its
        excess over the typical step (an average of the steps after no run) to the diagnostics: what a run leaves
        behind (cold caches, kernels re-selected for the training shapes) is its cost, not the loop's. The excess is
        signed, so that step-time noise cancels over the runs (charging only its positive part would bill every run
        for noise, about 0.4 standard deviations of a step each), and the total charged never goes below 0; the next
        run's estimate is the last run's seconds plus the mean charged per run."""
        seconds = self.loop_seconds - self._loop_at_step
        if self._after_run:
            if self._typical_step is not None:
                excess = max(seconds - self._typical_step, -self._left_behind)
                self._left_behind += excess
                self._after_runs += 1
                self.loop_seconds -= excess
                self.seconds_used += excess
                if self.runs or self.stopped_runs:  # the next run will leave as much behind as runs did on average
                    self.estimate = self._last_run_seconds + self._left_behind / self._after_runs
        elif self._loop_at_step > 0:
            self._typical_step = seconds if self._typical_step is None else 0.9 * self._typical_step + 0.1 * seconds
        self._after_run = False
        self._loop_at_step = self.loop_seconds

    def prepare(self, module: nn.Module, denoiser: Denoiser) -> None:
        """Check everything a run needs before the first one: the denoiser's output shape, the start tokens, and the
        probe's own options on one start row (:meth:`Probe.bind`), under the same isolation as a run; estimate a
        run's cost; the loop's clock starts here (the setup's seconds are not the loop's, nor the budget's)."""
        started = time.perf_counter()
        rows = self.starts(denoiser) if self.start_tokens is not None else start_states(denoiser,
                                                                                        placeholder_rows(denoiser))
        with isolated(module, denoiser, device=denoiser.device):
            mask = None if rows.attention_mask is None else rows.attention_mask[:1]
            sample = StartStates(rows.tokens[:1], rows.sites[:1], rows.counts[:1], mask)
            denoiser.conditional_logits(sample.tokens, sample.sites[:, :1], mask)  # raises on a wrong output shape
            self.probe.bind(denoiser, sample)
        self.estimate = self._estimate(module, denoiser, rows)
        if self.start_tokens is not None:
            self._measured_estimate = self.estimate
        if self.estimate_line:
            LOGGER.info(self.estimate_line)
        self._spent(time.perf_counter() - started, charged=False)

    def _estimate(self, module: nn.Module, denoiser: Denoiser, rows: StartStates) -> float | None:
        """The expected seconds of a run on ``rows``: the fastest of three timed forwards of ``num_starts`` rows like
        them after one untimed warm-up (isolated; the first pass of a shape pays for kernel set-up, which made the
        estimate 5 to 9 times too high), per row, times the probe's forward rows for such a run (``None`` when the
        probe cannot say); sets the cost line. Cost: ``4 num_starts`` forward rows."""
        rows_per_run = self.probe.forward_rows(self.num_starts, int(rows.counts.max()))
        if rows_per_run is None:
            return None
        index = torch.arange(self.num_starts) % len(rows.tokens)  # num_starts rows, repeating the ones there are
        mask = None if rows.attention_mask is None else rows.attention_mask[index]
        times = []
        with isolated(module, denoiser, device=denoiser.device):
            for _ in range(4):
                started = time.perf_counter()
                denoiser.conditional_logits(rows.tokens[index], rows.sites[index, :1], mask)
                times.append(time.perf_counter() - started)
        per_row = min(times[1:]) / self.num_starts
        self.estimate_line = cost_line(type(self.probe).__name__, rows_per_run, per_row * rows_per_run, self.overhead)
        return per_row * rows_per_run

    def note_evaluation_start(self, module: nn.Module) -> None:
        """Call when validation starts, before the module's own hook: remembers the training weights, so that a
        module that swaps other weights in for validation is recognised at its end (only with ``weights=``)."""
        self._evaluation_weights = parameter_checksum(module) if self.weights is not None else None

    # -- a run ---------------------------------------------------------------------------------------------------------
    def run(self, module: nn.Module, denoiser: Denoiser, *, stage: str) -> dict[str, float] | None:
        """Measure now, isolated (see the module docstring): the metrics under their full names, or ``None`` when
        the budget is spent or this rank does not measure. Every rank must call it at the same points."""
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
        self.tick()
        if (self.overhead is not None and self.runs == self.stopped_runs == 0
                and self.loop_seconds >= self._next_estimate
                and (self.latest is not None or self._batch is not None or self.start_tokens is not None)):
            self._estimate_on_starts(module, denoiser)
        spent = _max_over_ranks(self.seconds_used)
        if self.budget_seconds is not None and spent >= self.budget_seconds:
            return None
        fits = _all_ranks(self.affordable(spent))
        options, fraction = ({}, 1.0) if fits else self._smaller_run(denoiser, spent)
        if not fits and not _all_ranks(bool(options)):  # every rank runs, or none
            self.skipped_runs += 1
            if self.skipped_runs == 1:
                LOGGER.info(f"{type(self.probe).__name__}: a due run was skipped to keep the diagnostics within "
                            f"overhead={self.overhead} of the loop's time ({spent:.1f} s used, a run costs about "
                            f"{self.estimate or 0:.1f} s, {self.loop_seconds:.1f} s of loop so far); runs resume as "
                            "the loop goes on, skipped_runs counts them. Raise overhead= or make a run cheaper.")
            return None
        if not self.probe.pooled and _rank() != 0:
            return None
        name = f"{self.prefix}{self.probe.group}/{stage}/"
        self._read_batch()  # only now that a run happens: a skipped step copies nothing (unless _smaller_run read it)
        allowed = self._allowed(spent)
        started = time.perf_counter()
        if options:
            LOGGER.info(f"{type(self.probe).__name__}: a first run did not fit within overhead={self.overhead} of the "
                        f"loop ({spent:.1f} s used, a run costs about {self.estimate or 0:.1f} s, "
                        f"{self.loop_seconds:.1f} s of loop so far); a smaller one runs instead, "
                        f"{', '.join(f'{k}={v}' for k, v in options.items())} ({fraction:.0%} of a full run's forward "
                        "rows; run_fraction logs it); full runs follow when they fit.")
        try:
            with forward_deadline(math.inf if allowed is None else allowed) as limit, _options(self.probe, options):
                metrics = self._measure(module, denoiser, stage)
        except OutOfTime:
            metrics = {}
        except FAILURES as error:
            if self.strict or isinstance(error, WeightsNotRestored):
                raise
            self.failed_runs += 1
            self._warn_once(f"failed:{type(error).__name__}", failure_message(type(self.probe).__name__, error))
            metrics = {}
        finally:
            elapsed = time.perf_counter() - started
            self._spent(elapsed)  # the run's own time is not the loop's
            self._after_run = True
        if limit.refused:
            if metrics and not self._reached_least(denoiser, limit.rows):
                metrics = {}  # cut short below the least run the probe stands for: not the run its keys name
            total = self._stopped(denoiser, elapsed, limit.rows, kept=bool(metrics))
            if total:
                fraction = limit.rows / total  # the share of a full run it realised, not the one planned
        if metrics:
            self.runs += 1
            if not limit.refused:  # a smaller run's seconds per forward row, times a full run's rows
                self.estimate = self._last_run_seconds = elapsed / fraction
        if self.budget_seconds is not None and self.seconds_used >= self.budget_seconds and _rank() == 0:
            warnings.warn(f"{type(self.probe).__name__}: diagnostics budget of {self.budget_seconds}s spent; no "
                          "further runs", stacklevel=2)
        share = self.seconds_used / self.loop_seconds if self.loop_seconds > 0 else math.nan
        if self.probe.pooled:  # every rank measured: log the busiest rank's fraction, the same value on every rank
            share = _max_over_ranks(share)
        bookkeeping = {"failed_runs": float(self.failed_runs), "skipped_runs": float(self.skipped_runs),
                       "stopped_runs": float(self.stopped_runs), "overhead": share, "run_fraction": fraction}
        self.last_metrics = {f"{name}{key}": value for key, value in {**metrics, **bookkeeping}.items()}
        return self.last_metrics

    def _estimate_on_starts(self, module: nn.Module, denoiser: Denoiser) -> None:
        """Before the first run: the estimate timed on the run's own start rows (the setup's placeholder rows may be
        far shorter), at the first due step and again each time the loop's seconds double, keeping the smallest (a
        busy machine only ever inflates a timing, and an inflated estimate that never fits would never be
        corrected by a run). Its forwards count as diagnostics; rows that cannot be used are left to the run, which
        says why."""
        self._next_estimate = 2 * self.loop_seconds
        started = time.perf_counter()
        with suppress(*FAILURES):
            timed = self._estimate(module, denoiser, self.starts(denoiser))
            if timed is not None:
                self._measured_estimate = min(timed, self._measured_estimate or timed)
                self.estimate = self._measured_estimate
        self._spent(time.perf_counter() - started)

    def _smaller_run(self, denoiser: Denoiser, spent: float) -> tuple[dict[str, int], float]:
        """Before the first measurement, when a full run does not fit: the probe's option
        (:meth:`Probe.smaller_run`) lowered to the largest value whose forward rows fit what is left of ``overhead``
        (and of ``budget_seconds``) at the full run's expected seconds per row, if that is not below the probe's
        least value; with the fraction of a full run's forward rows it costs. ``({}, 1.0)``: no smaller run."""
        if self.runs or self.overhead is None or not self.estimate:
            return {}, 1.0
        try:
            sites = int(self.starts(denoiser).counts.max())
        except FAILURES:  # no readable starts: the run's own path says why
            return {}, 1.0
        smaller, full = self.probe.smaller_run(sites), self.probe.forward_rows(self.num_starts, sites)
        if smaller is None or not full:
            return {}, 1.0
        left = self.overhead * self.loop_seconds - spent
        if self.budget_seconds is not None:
            left = min(left, self.budget_seconds - spent)
        option, least = smaller
        for value in range(int(getattr(self.probe, option)) - 1, least - 1, -1):
            with _options(self.probe, {option: value}):
                rows = self.probe.forward_rows(self.num_starts, sites)
            if rows is not None and rows * self.estimate <= left * full:
                return {option: value}, rows / full
        return {}, 1.0

    def _allowed(self, spent: float) -> float | None:
        """The seconds this run may take before it is stopped: what is left of ``overhead`` times the loop's seconds
        (and of ``budget_seconds``); ``None``: no limit (neither cap set, or several processes, whose runs must end
        at the same points: their runs are held to the estimate only)."""
        left = [self.overhead * self.loop_seconds - spent] if self.overhead is not None else []
        if self.budget_seconds is not None:
            left.append(self.budget_seconds - spent)
        if not left or (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return None
        return max(0.0, min(left))

    def _stopped(self, denoiser: Denoiser, seconds: float, rows: int, *, kept: bool) -> int | None:
        """A run reached the end of its budget after ``seconds`` and ``rows`` forward rows: it is counted
        (``stopped_runs``), its partial results are logged if the probe could state them honestly (``kept``:
        meeting times censored at the steps reached, once the run got as far as its least value)
        and discarded otherwise, and the next run waits for the full cost it showed: ``seconds`` times the probe's
        forward rows over the rows done (twice ``seconds`` when the probe cannot say), never less than the estimate
        it started on. Returns a full run's forward rows (``None``: the probe cannot say)."""
        self.stopped_runs += 1
        total = self.probe.forward_rows(self.num_starts, int(self.starts(denoiser).counts.max()))
        grown = seconds * total / rows if total is not None and total > rows > 0 else 2 * seconds
        self.estimate = self._last_run_seconds = max(grown, self.estimate or 0.0)
        LOGGER.info(f"{type(self.probe).__name__}: a run was stopped at the end of its budget after {seconds:.1f} s "
                    f"({rows} forward rows{'' if total is None else f' of at most {total}'})"
                    f"{', its results kept as far as they went' if kept else ' and discarded'}; the next one waits "
                    f"until about {self.estimate:.1f} s fit within overhead={self.overhead} of the loop (stopped_runs "
                    "counts them). Raise overhead= or make a run cheaper.")
        return total

    def _reached_least(self, denoiser: Denoiser, rows: int) -> bool:
        """Whether a run stopped after ``rows`` forward rows got as far as the least run the probe stands for (its
        :meth:`Probe.smaller_run` at the least value: a meeting-time run that covers the sites); always for a probe
        without a smaller run. Conservative: a full run's rows at that value are an upper bound."""
        try:
            sites = int(self.starts(denoiser).counts.max())
        except FAILURES:
            return True
        smaller = self.probe.smaller_run(sites)
        if smaller is None:
            return True
        option, least = smaller
        with _options(self.probe, {option: least}):
            needed = self.probe.forward_rows(self.num_starts, sites)
        return needed is None or rows >= needed

    def affordable(self, spent: float) -> bool:
        """Whether one more run (expected: :attr:`estimate` seconds) keeps the diagnostics within ``overhead`` of
        the loop's seconds so far (always, without an overhead cap or an estimate)."""
        if self.overhead is None or self.estimate is None:
            return True
        return spent + self.estimate <= self.overhead * self.loop_seconds

    def _measure(self, module: nn.Module, denoiser: Denoiser, stage: str) -> dict[str, float]:
        starts = self.starts(denoiser)
        swapped = (stage == "val" and self._evaluation_weights is not None
                   and not torch.equal(parameter_checksum(module), self._evaluation_weights))
        use_weights = self.weights is not None and not swapped
        with isolated(module, denoiser, device=denoiser.device):
            before = parameter_checksum(module) if use_weights else None
            with self.weights(module) if use_weights and self.weights is not None else nullcontext():
                metrics = self.probe.measure(denoiser, starts, self.generator)
            if before is not None and not torch.equal(parameter_checksum(module), before):
                raise WeightsNotRestored(f"weights: the context of {type(self.probe).__name__} left other parameters "
                                         "in the module than it found; it must restore them (EMA: store, copy_to, "
                                         "then restore)")
        return metrics

    def finish(self) -> None:
        """At the end of the loop: a warning when due runs were all skipped (nothing was measured), saying what one
        run costs and how much loop time it would need at this ``overhead``. Adapters call it when the loop ends."""
        if self.runs or self.stopped_runs or not self.skipped_runs or self.overhead is None:
            return
        cost = self.estimate or 0.0
        self._warn_once("never", f"{type(self.probe).__name__}: none of its {self.skipped_runs} due runs fitted "
                        f"within overhead={self.overhead:.3g} of the loop's {self.loop_seconds:.3g} s (a run costs "
                        f"about {cost:.3g} s, so one needs about {cost / self.overhead:.3g} s of loop): nothing was "
                        "measured. Raise overhead=, or make a run cheaper (fewer steps or starts).")

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned and _rank() == 0:
            self._warned.add(key)
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    # -- state ---------------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Schedule, runs so far, seconds used (and the loop's), failures and skips, the random stream and the
        probe's state."""
        self._read_batch()  # the latest starts go with the checkpoint
        return {"runs": self.runs, "seconds_used": self.seconds_used, "last_step": self.last_step,
                "loop_seconds": self.loop_seconds, "failed_runs": self.failed_runs,
                "skipped_runs": self.skipped_runs, "stopped_runs": self.stopped_runs, "estimate": self.estimate,
                "rng": self.generator.get_state(), "last_metrics": dict(self.last_metrics),
                "latest": None if self.latest is None else self.latest.state_dict(),
                "probe": self.probe.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned; the next run draws what it would have drawn."""
        self.runs, self.seconds_used = int(state["runs"]), float(state["seconds_used"])
        self.last_step = int(state.get("last_step", -1))
        self.loop_seconds = float(state.get("loop_seconds", 0.0))
        self.failed_runs, self.skipped_runs = int(state.get("failed_runs", 0)), int(state.get("skipped_runs", 0))
        self.stopped_runs = int(state.get("stopped_runs", 0))
        self.estimate = state.get("estimate", self.estimate)
        self.generator.set_state(state["rng"])
        self.last_metrics = dict(state["last_metrics"])
        self.latest = None if state.get("latest") is None else BatchRows(**state["latest"])
        self.probe.load_state_dict(state.get("probe", {}))


@contextmanager
def _options(probe: Probe, options: dict[str, int]) -> Iterator[None]:
    """``probe`` with ``options`` set (a smaller run), its own values back afterwards."""
    saved = {name: getattr(probe, name) for name in options}
    for name, value in options.items():
        setattr(probe, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(probe, name, value)


class WeightsNotRestored(RuntimeError):
    """A ``weights=`` context left other parameters in the module: always raised, never counted as a failed run."""


DRAWS_FILE = "mlm_dynamics-draws.jsonl"


def draw_text(denoiser: Denoiser, ids: list[int]) -> str:
    """Token ids as text, one space-separated piece per token (so that changes line up position by position):
    the denoiser's tokenizer's tokens where it has one, the ids otherwise; padding left out."""
    ids = [i for i in ids if i != denoiser.vocab.pad_id]
    tokenizer = getattr(denoiser, "tokenizer", None)
    pieces = tokenizer.convert_ids_to_tokens(ids) if tokenizer is not None else [str(i) for i in ids]
    return " ".join(str(piece) for piece in pieces)


def append_draws(folder: str | Path, step: int, key: str, denoiser: Denoiser,
                 groups: list[dict[str, list[int]]]) -> None:
    """Append one line to ``folder/``:data:`DRAWS_FILE` beside a run's logged values: ``step``, the metric ``key``
    prefix (``mixing/val``) and the run's draws as text (:func:`draw_text`), which ``mlm-dynamics report`` shows.
    Nothing for a run without draws."""
    if not groups:
        return
    record = {"step": step, "key": key,
              "draws": [{label: draw_text(denoiser, ids) for label, ids in group.items()} for group in groups]}
    path = Path(folder) / DRAWS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


def failure_message(probe: str, error: BaseException) -> str:
    """One warning for a failed run: the probe, the cause and what to change; the loop goes on."""
    if isinstance(error, torch.OutOfMemoryError | MemoryError):
        fix = "lower num_starts, max_steps or the probe's sizes, or run it at validation only"
    elif isinstance(error, FloatingPointError):
        fix = "the model produced NaN/inf logits (diverging training?) or the temperature is too small for them"
    else:
        fix = "the message names the parameter or the model's quirk"
    return (f"{probe}: a diagnostics run failed and was skipped; the fit goes on ({type(error).__name__}: {error}). "
            f"{fix}. It is counted in failed_runs; pass strict=True to raise instead.")


def cost_line(probe: str, rows: int, seconds: float, overhead: float | None) -> str:
    """``MeetingTimeProbe: at most 1600 forward rows per run, about 12 s here; at overhead=0.05 ...``."""
    line = f"{probe}: at most {rows} forward rows per run, about {seconds:.3g} s here"
    if overhead is not None:
        line += f"; at overhead={overhead:g} a run needs about {seconds / overhead:.3g} s of the loop's own time"
    return line


def _all_ranks(flag: bool) -> bool:
    """``flag`` on every process of the default group (min over ranks): a skip decided together."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    on = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    value = torch.tensor(float(flag), dtype=torch.float64, device=on)
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return bool(value > 0)


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _max_over_ranks(seconds: float) -> float:
    """The largest ``seconds`` over the processes of the default group (every rank calls this at the same points)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return seconds
    on = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    value = torch.tensor(seconds, dtype=torch.float64, device=on)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return float(value)


__all__ = ["FAILURES", "SCHEDULE_KEYS", "STAGES", "MetricKey", "Probe", "ScheduledProbe", "WeightsNotRestored",
           "check_every", "cost_line", "failure_message"]
