"""The schedule never hurts the loop it watches: a failing run is caught, warned about once and counted (strict=True
re-raises), and the diagnostics stay within ``overhead`` of the loop's own wall-clock time. Time is a fake clock here
(the schedule reads ``time.perf_counter``), so the budget arithmetic is checked exactly, not timed."""

from __future__ import annotations

import warnings

import pytest
import torch

from mlm_dynamics.models.base import OutOfTime, forward_deadline
from mlm_dynamics.probes import MeetingTimeProbe, base
from mlm_dynamics.probes.base import Probe, ScheduledProbe, WeightsNotRestored
from mlm_dynamics.probes.starts import BatchRows, start_states
from mlm_dynamics.training.masked_lm import tiny_bert_denoiser


class Clock:
    """``time.perf_counter`` under test: advances only when told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Costly(Probe):
    """A probe whose run takes ``cost`` seconds of the fake clock and raises ``error`` when set."""

    group = "costly"

    def __init__(self, clock: Clock, cost: float, error: Exception | None = None) -> None:
        self.clock, self.cost, self.error = clock, cost, error

    def keys(self):
        return ()

    def measure(self, denoiser, starts, generator):
        self.clock.now += self.cost
        if self.error is not None:
            raise self.error
        return {"value": float(torch.rand((), generator=generator))}

    def forward_rows(self, rows, sites):
        return 100


class Chatty(Probe):
    """A probe that says a run costs ``claimed`` forward rows but computes ``rows`` (4 at a time, each forward on
    the fake clock through the fixture): its estimate before the first run is ``rows / claimed`` times too low."""

    group = "chatty"

    def __init__(self, rows: int, claimed: int) -> None:
        self.rows, self.claimed = rows, claimed

    def keys(self):
        return ()

    def measure(self, denoiser, starts, generator):
        for _ in range(self.rows // 4):
            denoiser.conditional_logits(starts.tokens, starts.sites[:, :1])
        return {"value": float(torch.rand((), generator=generator))}

    def forward_rows(self, rows, sites):
        return self.claimed


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(base.time, "perf_counter", fake)
    return fake


@pytest.fixture
def denoiser(clock):
    """A tiny BERT whose forward takes 0.02 s of the fake clock per row of 32 tokens (proportional to the tokens):
    the estimate of a Costly run (100 rows) on the training batch is its true cost, 2 s (one estimate: 4 rows,
    0.08 s); on the setup's 8-token placeholder row a quarter of it."""
    model = tiny_bert_denoiser(generator=0)
    forward = model.conditional_logits

    def timed(tokens, *args, **kwargs):
        logits = forward(tokens, *args, **kwargs)  # (refused before it starts, under a deadline that has passed)
        clock.now += 0.02 * tokens.numel() / 32
        return logits

    model.conditional_logits = timed
    return model


def batch() -> torch.Tensor:
    tokens = torch.randint(5, 24, (4, 32), generator=torch.Generator().manual_seed(0))
    tokens[:, 0], tokens[:, -1] = 1, 2
    return tokens


def run_slowed_after_the_estimate(scheduled: ScheduledProbe, denoiser, clock: Clock, step: int) -> dict:
    """The due ``step`` (0.5 s of loop), whose run's estimate (4 forwards) is timed at the usual rate and whose
    forwards after it take ten times as long (a busy machine): what the run logged."""
    forward, calls = denoiser.conditional_logits, []

    def busy(tokens, *args, **kwargs):
        logits = forward(tokens, *args, **kwargs)
        calls.append(1)
        clock.now += 9 * 0.02 * tokens.numel() / 32 if len(calls) > 4 else 0.0
        return logits

    denoiser.conditional_logits = busy
    clock.now += 0.5
    scheduled.capture(batch())
    assert scheduled.due(step)
    return scheduled.run(denoiser.model, denoiser, stage="train")


def loop(scheduled: ScheduledProbe, denoiser, clock: Clock, steps: int, step_seconds: float) -> list[dict]:
    """``steps`` optimizer steps of ``step_seconds`` each, the probe asked at every one."""
    logged = []
    for step in range(1, steps + 1):
        clock.now += step_seconds
        scheduled.capture(batch())
        if scheduled.due(step):
            metrics = scheduled.run(denoiser.model, denoiser, stage="train")
            if metrics is not None:
                logged.append(metrics)
    return logged


@pytest.mark.parametrize("fraction", [0.01, 0.05, 0.2])
def test_the_diagnostics_stay_within_the_requested_fraction_of_the_loop(clock, denoiser, fraction):
    scheduled = ScheduledProbe(Costly(clock, cost=2.0), every_n_steps=1, overhead=fraction)
    scheduled.prepare(denoiser.model, denoiser)
    logged = loop(scheduled, denoiser, clock, steps=4000, step_seconds=0.5)
    # every run starts only when spent + cost <= fraction * loop, so the realised fraction never exceeds it ...
    realised = [m["costly/train/overhead"] for m in logged]
    assert max(realised) <= fraction + 1e-12
    # ... and a run happens as soon as it fits: at the end the realised fraction is within one run's cost of it
    # (2 s over 2000 s of loop: 0.001), i.e. within 20 % of every fraction asked here
    assert scheduled.seconds_used / scheduled.loop_seconds == pytest.approx(fraction, abs=2.0 / 2000 + 1e-9)
    assert scheduled.loop_seconds == pytest.approx(2000.0)  # the runs' own seconds are not the loop's
    assert scheduled.runs + scheduled.skipped_runs == 4000 and scheduled.skipped_runs > 0
    skipped = [m["costly/train/skipped_runs"] for m in logged]  # logged with each run: the count so far
    assert skipped == sorted(skipped) and 0 < skipped[-1] <= scheduled.skipped_runs


def test_probes_on_one_loop_do_not_count_each_others_runs_or_logging_as_loop_time(clock, denoiser):
    """Two probes asked at every step of one loop (1 s a step), the first also charged 0.25 s of logging after each
    of its runs: each probe's loop clock holds the loop's 200 s exactly (the other's runs, estimates and setup, and
    the logging, left out), and each stays within its fraction of it. Counting the other's runs as loop time (about
    20 s of them) would inflate the loop to about 220 s and let each probe spend 10 % more than asked."""
    first = ScheduledProbe(Costly(clock, cost=2.0), every_n_steps=1, overhead=0.1)
    second = ScheduledProbe(Costly(clock, cost=3.0), every_n_steps=1, overhead=0.1)
    for scheduled in (first, second):
        scheduled.prepare(denoiser.model, denoiser)
    for step in range(1, 201):
        clock.now += 1.0
        for scheduled in (first, second):
            scheduled.capture(batch())
            if scheduled.due(step) and scheduled.run(denoiser.model, denoiser, stage="train") is not None \
                    and scheduled is first:
                with first.charged():
                    clock.now += 0.25
    assert first.loop_seconds == pytest.approx(200.0) and second.loop_seconds == pytest.approx(200.0)
    assert first.runs > 0 and second.runs > 0
    # first: runs of 2 s, each followed by 0.25 s of logging that the next estimate does not know about, so the
    # realised fraction may pass 0.1 by the logging of its last run only
    assert 0.1 - 2.25 / 200 <= first.seconds_used / 200 <= 0.1 + 0.25 / 200
    assert 0.1 - 3.0 / 200 <= second.seconds_used / 200 <= 0.1


def test_forward_deadline_refuses_the_next_forward_once_passed(clock, denoiser):
    """Each forward of 4 rows of 32 tokens takes 0.08 s of the fake clock: a 0.2 s deadline lets three start (the
    third begins at 0.16 s and ends at 0.24 s: one forward past it) and refuses the fourth, with 12 rows counted."""
    tokens = batch()
    sites = torch.full((4, 1), 3)
    done = 0
    with forward_deadline(0.2) as limit:
        try:
            for _ in range(10):
                denoiser.conditional_logits(tokens, sites)
                done += 1
        except OutOfTime:
            pass
    assert limit.refused and done == 3 and limit.rows == 12 and clock.now == pytest.approx(0.24)
    denoiser.conditional_logits(tokens, sites)  # outside the block: no deadline


@pytest.mark.parametrize("fraction", [0.01, 0.05, 0.2])
def test_a_run_costlier_than_its_estimate_is_stopped_at_the_budget(clock, denoiser, fraction):
    """A probe that claims 100 forward rows but computes 1000 (2 s estimated, 20 s true on the training batch):
    without the deadline its first run would take 20 s when 2 s fit, ten times its share. Held to what is left of the
    budget, no run ever takes the diagnostics past the fraction by more than one forward (0.08 s); a stopped run
    logs no value and counts in stopped_runs; its extrapolated cost (twice its seconds: the claim is exceeded, the
    probe cannot say more) lets later runs complete, and the realised fraction ends within 20 % of the request."""
    scheduled = ScheduledProbe(Chatty(rows=1000, claimed=100), every_n_steps=1, overhead=fraction)
    scheduled.prepare(denoiser.model, denoiser)
    logged = []
    for step in range(1, 20001):
        clock.now += 0.5
        scheduled.capture(batch())
        if scheduled.due(step) and (metrics := scheduled.run(denoiser.model, denoiser, stage="train")) is not None:
            logged.append(metrics)
            assert scheduled.seconds_used <= fraction * scheduled.loop_seconds + 0.08 + 1e-9
    stopped = [m for m in logged if "chatty/train/value" not in m]
    assert stopped and scheduled.stopped_runs == len(stopped) == stopped[-1]["chatty/train/stopped_runs"]
    assert scheduled.runs > 0 and scheduled.estimate == pytest.approx(20.0, rel=0.05)
    assert scheduled.seconds_used / scheduled.loop_seconds == pytest.approx(fraction, rel=0.2)


def test_a_meeting_time_run_stopped_below_the_cover_floor_is_not_logged_as_a_measurement(clock, denoiser):
    """The model gets ten times slower after the estimate (a busy machine): the first meeting-time run is stopped at
    what is left of the budget long before the 113 steps a random scan needs to choose the batch's 30 sites: its
    pairs' times censored there would say nothing about mixing, so nothing of it is logged but the bookkeeping
    (stopped_runs, run_fraction its realised share of a full run's rows), the diagnostics stay within the fraction
    but for one forward, and the next run waits for the full cost it showed."""
    scheduled = ScheduledProbe(MeetingTimeProbe(max_steps=200, temperature=0.05), every_n_steps=1, overhead=0.05)
    scheduled.prepare(denoiser.model, denoiser)
    loop(scheduled, denoiser, clock, steps=10, step_seconds=0.5)  # the estimate is timed on the batch
    forward = denoiser.conditional_logits

    def busy(tokens, *args, **kwargs):
        logits = forward(tokens, *args, **kwargs)
        clock.now += 9 * 0.02 * tokens.numel() / 32
        return logits

    denoiser.conditional_logits = busy
    logged, step = [], 10
    while not logged:
        step += 1
        clock.now += 0.5
        scheduled.capture(batch())
        if scheduled.due(step) and (metrics := scheduled.run(denoiser.model, denoiser, stage="train")) is not None:
            logged.append(metrics)
    first = logged[0]
    assert scheduled.stopped_runs == 1 and first["mixing/train/stopped_runs"] == 1.0 and scheduled.runs == 0
    assert not any(key.startswith(("mixing/train/meeting_time", "mixing/train/budget")) for key in first)
    assert 0 < first["mixing/train/run_fraction"] * 8 * 200 < 8 * 113  # its rows: below the cover floor's
    assert scheduled.seconds_used <= 0.05 * scheduled.loop_seconds + 1.6 + 1e-9  # one forward: 8 rows, 1.6 s
    assert scheduled.estimate > 4 * 8.0  # the full run at the slower speed: about 80 s


def test_a_loop_too_short_for_one_run_ends_with_a_warning_saying_what_it_needs(clock, denoiser):
    """A 2 s run at overhead=0.05 needs 40 s of loop; a 10 s loop skips every due run. The end of the loop says so
    once (nothing was measured) instead of leaving no trace; a loop where runs happened says nothing."""
    scheduled = ScheduledProbe(Costly(clock, cost=2.0), every_n_steps=1, overhead=0.05)
    scheduled.prepare(denoiser.model, denoiser)
    assert loop(scheduled, denoiser, clock, steps=20, step_seconds=0.5) == []
    with pytest.warns(RuntimeWarning, match=r"none of its 20 due runs fitted within overhead=0.05 of the loop's "
                                            r"10 s \(a run costs about 2 s, so one needs about 40 s of loop\)"):
        scheduled.finish()
    fresh = ScheduledProbe(Costly(clock, cost=2.0), every_n_steps=1, overhead=0.05)
    fresh.prepare(denoiser.model, denoiser)
    loop(fresh, denoiser, clock, steps=200, step_seconds=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fresh.finish()
    assert fresh.runs > 0


def test_without_a_cap_every_due_run_happens(clock, denoiser):
    scheduled = ScheduledProbe(Costly(clock, cost=2.0), every_n_steps=3, overhead=None)
    scheduled.prepare(denoiser.model, denoiser)
    logged = loop(scheduled, denoiser, clock, steps=30, step_seconds=0.5)
    assert len(logged) == scheduled.runs == 10 and scheduled.skipped_runs == 0
    assert logged[-1]["costly/train/overhead"] == pytest.approx(20.0 / 15.0)  # realised, reported even uncapped


def test_the_first_run_is_budgeted_from_an_estimate_on_the_training_batch(clock, denoiser):
    scheduled = ScheduledProbe(Costly(clock, cost=2.0), every_n_steps=1, overhead=0.05)
    scheduled.prepare(denoiser.model, denoiser)
    # at setup: the fastest of three timed forwards (after a warm-up) of num_starts placeholder rows (8 tokens), per
    # row, x the probe's 100 forward rows
    assert scheduled.estimate == pytest.approx(100 * 0.005)
    assert scheduled.estimate_line == ("Costly: at most 100 forward rows per run, about 0.5 s here; at overhead=0.05 "
                                       "a run needs about 10 s of the loop's own time")
    logged = loop(scheduled, denoiser, clock, steps=300, step_seconds=0.5)
    # before the first run the estimate is timed on the batch's 32-token rows (2 s, the true cost) at steps 1, 2, 4,
    # ..., 128 (each time the loop doubled: 8 x 4 forwards of 0.08 s, counted); the first run fits at step 183
    # (2.56 + 2 s within 5 % of 91.5 s of loop), the next at step 263 (4.56 + 2 s within 5 % of 131.5 s)
    assert scheduled.estimate == pytest.approx(2.0)
    assert [m["costly/train/skipped_runs"] for m in logged] == [182.0, 261.0]
    assert logged[0]["costly/train/overhead"] == pytest.approx(4.56 / 91.5)
    assert scheduled.seconds_used == pytest.approx(8 * 4 * 0.08 + 2 * 2.0)


def test_an_estimate_inflated_by_a_busy_machine_is_timed_again(clock, denoiser):
    """The first timing of the batch estimate hit a busy spell (10x slower, its warm-up and its three timed
    forwards); the retimings as the loop doubles keep the smallest, so the runs start instead of waiting forever for
    an estimate no run ever corrects: 3.2 s for the slow timing and 0.32 s for each retiming at steps 2, 4, ..., 256
    put the first run at step 311 (5.76 + 2 s within 5 % of 155.5 s), then every 80 steps (2 s more each)."""
    scheduled = ScheduledProbe(Costly(clock, cost=2.0), every_n_steps=1, overhead=0.05)
    scheduled.prepare(denoiser.model, denoiser)
    forward = denoiser.conditional_logits
    slow_once = [True] * 4

    def busy(tokens, *args, **kwargs):
        if slow_once.pop() if slow_once else False:
            clock.now += 9 * 0.02 * tokens.numel() / 32  # on top of the fixture's own cost
        return forward(tokens, *args, **kwargs)

    denoiser.conditional_logits = busy
    logged = loop(scheduled, denoiser, clock, steps=600, step_seconds=0.5)
    assert scheduled.estimate == pytest.approx(2.0) and len(logged) == 4  # (none without the retiming: 20 s)
    assert [m["costly/train/skipped_runs"] for m in logged] == [310.0, 389.0, 468.0, 547.0]


def test_a_failing_run_is_counted_warned_once_and_the_loop_goes_on(clock, denoiser):
    probe = Costly(clock, cost=0.1, error=ValueError("q: rows must sum to 1"))
    scheduled = ScheduledProbe(probe, every_n_steps=1, overhead=None)
    scheduled.prepare(denoiser.model, denoiser)
    state = torch.random.get_rng_state()
    with pytest.warns(RuntimeWarning, match=r"failed and was skipped.*ValueError: q: rows must sum to 1") as caught:
        logged = loop(scheduled, denoiser, clock, steps=3, step_seconds=1.0)
    assert len([w for w in caught if "failed" in str(w.message)]) == 1  # once per cause, not once per run
    assert [m["costly/train/failed_runs"] for m in logged] == [1.0, 2.0, 3.0]
    assert all("costly/train/value" not in m for m in logged) and scheduled.runs == 0
    assert torch.equal(torch.random.get_rng_state(), state) and denoiser.model.training
    probe.error = None  # the model recovers: the next due run measures again
    assert "costly/train/value" in loop(scheduled, denoiser, clock, steps=1, step_seconds=1.0)[0]


def test_strict_reraises_and_a_broken_weights_context_always_raises(clock, denoiser):
    strict = ScheduledProbe(Costly(clock, 0.1, error=RuntimeError("CUDA out of memory")), every_n_steps=1,
                            overhead=None, strict=True)
    strict.prepare(denoiser.model, denoiser)
    with pytest.raises(RuntimeError, match="out of memory"):
        loop(strict, denoiser, clock, steps=1, step_seconds=1.0)

    class Leaky:
        def __init__(self, module):
            self.module = module

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            with torch.no_grad():
                next(self.module.parameters()).add_(1.0)  # "restores" other weights than it found

    lenient = ScheduledProbe(Costly(clock, 0.1), every_n_steps=1, overhead=None, weights=Leaky)
    lenient.prepare(denoiser.model, denoiser)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not swallowed as a failed run
        with pytest.raises(WeightsNotRestored, match="weights: the context of Costly"):
            loop(lenient, denoiser, clock, steps=1, step_seconds=1.0)
    with torch.no_grad():
        next(denoiser.model.parameters()).sub_(1.0)


@pytest.mark.parametrize("overhead", [0, -0.1, 1.5, "5%", True])
def test_overhead_must_be_a_fraction(clock, overhead):
    with pytest.raises(ValueError, match="overhead must be a fraction"):
        ScheduledProbe(Costly(clock, 1.0), overhead=overhead)


def test_failures_skips_and_the_loop_clock_survive_a_checkpoint(clock, denoiser):
    scheduled = ScheduledProbe(Costly(clock, cost=2.0), every_n_steps=1, overhead=0.1)
    scheduled.prepare(denoiser.model, denoiser)
    loop(scheduled, denoiser, clock, steps=100, step_seconds=0.5)
    restored = ScheduledProbe(Costly(clock, cost=2.0), every_n_steps=1, overhead=0.1)
    restored.load_state_dict(scheduled.state_dict())
    assert (restored.loop_seconds, restored.seconds_used, restored.skipped_runs, restored.runs, restored.estimate) == (
        scheduled.loop_seconds, scheduled.seconds_used, scheduled.skipped_runs, scheduled.runs, scheduled.estimate)


def test_what_a_run_leaves_behind_is_charged_to_the_diagnostics(clock, denoiser):
    """A run that slows the next optimizer step (0.3 s here, as cold caches would) is charged that excess over the
    typical step: the loop's clock keeps only its own time, and the realised fraction stays within the request."""
    scheduled = ScheduledProbe(Costly(clock, cost=2.0), every_n_steps=1, overhead=0.1)
    scheduled.prepare(denoiser.model, denoiser)
    after_run = False
    for step in range(1, 2001):
        clock.now += 0.5 + (0.3 if after_run else 0.0)
        scheduled.capture(batch())
        after_run = scheduled.due(step) and scheduled.run(denoiser.model, denoiser, stage="train") is not None
    assert scheduled.loop_seconds == pytest.approx(1000.0)  # 2000 steps of 0.5 s: the 0.3 s are not the loop's
    # beyond the runs and the seven timed estimates (4 forwards of 0.08 s each) before the first one (steps 1, 2, 4,
    # ..., 64; it fits at step 85)
    charged = scheduled.seconds_used - 7 * 4 * 0.08 - 2.0 * scheduled.runs
    assert charged == pytest.approx(0.3 * scheduled.runs)
    assert 0.09 <= scheduled.seconds_used / scheduled.loop_seconds <= 0.1 + 1e-12
    assert scheduled.estimate == pytest.approx(2.3)


def test_step_time_noise_is_not_billed_to_the_runs(clock, denoiser):
    """Steps of 0.5 s +- 0.2 s (uniform, seeded), the same after a run as elsewhere: nothing is left behind, so the
    after-run charges must cancel. Charging the positive part of each excess would bill about 0.05 s per run (the
    mean of max(0, U) for U uniform on [-0.2, 0.2]), about 2.5 s over the 50 runs here; the signed charges sum to the
    noise of about 50 steps against the typical step, whose standard deviation is 0.115 sqrt(50) = 0.8 s, clamped at
    0 - far below 2.5 s in expectation. With this seed the total is fixed; the bound 1.25 s (half the biased bill)
    would fail if the positive part were charged."""
    noise = torch.rand(2000, generator=torch.Generator().manual_seed(3)) * 0.4 - 0.2
    scheduled = ScheduledProbe(Costly(clock, cost=2.0), every_n_steps=1, overhead=0.1)
    scheduled.prepare(denoiser.model, denoiser)
    for step in range(1, 2001):
        clock.now += 0.5 + float(noise[step - 1])
        scheduled.capture(batch())
        if scheduled.due(step):
            scheduled.run(denoiser.model, denoiser, stage="train")
    charged = scheduled.seconds_used - 7 * 4 * 0.08 - 2.0 * scheduled.runs  # beyond the runs and seven estimates
    assert scheduled.runs >= 40
    assert 0.0 <= charged <= 1.25


class Stepped(Probe):
    """``steps`` forwards of the 4 start rows (0.08 s each on the fake clock: 0.02 s per row), which a first run that
    does not fit may lower, down to ``least``."""

    group = "stepped"

    def __init__(self, steps: int, least: int) -> None:
        self.steps, self.least = steps, least

    def keys(self):
        return ()

    def measure(self, denoiser, starts, generator):
        for _ in range(self.steps):
            denoiser.conditional_logits(starts.tokens, starts.sites[:, :1])
        return {"steps": float(self.steps)}

    def forward_rows(self, rows, sites):
        return rows * self.steps

    def smaller_run(self, sites):
        return "steps", self.least


def test_a_first_run_that_does_not_fit_runs_smaller_using_what_is_left_and_says_so(clock, denoiser):
    """A full run (100 forwards, 8 s) needs 160 s of loop at overhead=0.05; the first due step comes at 50 s. The
    first run lowers its steps to the most that fit what is left (to one forward: one more would pass the cap), logs
    run_fraction = steps / 100 and keeps its estimate at the full run's 8 s (its seconds per row times the full
    rows); later due steps wait for a full run (no second smaller one), and the diagnostics never pass the cap. A
    scheduler that ignored the smaller run would log nothing at 50 s; one that kept the smaller run's seconds as its
    estimate (2 s) would start the full run far too early."""
    scheduled = ScheduledProbe(Stepped(steps=100, least=10), every_n_steps=100, overhead=0.05)
    scheduled.prepare(denoiser.model, denoiser)
    logged, caps = [], []
    for step in range(1, 801):
        clock.now += 0.5
        scheduled.capture(batch())
        if scheduled.due(step) and (metrics := scheduled.run(denoiser.model, denoiser, stage="train")) is not None:
            logged.append(metrics)
            caps.append(0.05 * scheduled.loop_seconds)
            assert scheduled.seconds_used <= caps[-1] + 1e-9
    first, steps = logged[0], int(logged[0]["stepped/train/steps"])
    assert 10 <= steps < 100 and first["stepped/train/run_fraction"] == steps / 100
    assert scheduled.probe.steps == 100  # its own option back
    seconds_after_first = 0.32 + steps * 0.08  # the estimate's 4 timed forwards on the batch, then the run
    assert seconds_after_first <= caps[0] < seconds_after_first + 0.08  # as many forwards as fit, not one fewer
    assert scheduled.estimate == pytest.approx(8.0)
    assert [m["stepped/train/steps"] for m in logged[1:]] == [100.0] * (len(logged) - 1) and len(logged) > 1
    assert all(m["stepped/train/run_fraction"] == 1.0 for m in logged[1:])
    assert logged[1]["stepped/train/skipped_runs"] > 0  # the due steps in between waited for the full cost


def test_a_smaller_run_cut_short_below_its_least_value_is_not_logged_as_a_measurement(clock, denoiser):
    """The first run does not fit and runs smaller (at least 10 of 100 steps); the model then gets ten times slower
    (a busy machine), so the deadline stops it after a few steps, below its least value: nothing it measured is
    logged (a run of 3 steps is not the run its keys name), stopped_runs counts it, and run_fraction is the share
    of a full run it realised (its rows over 400), not the share planned."""
    scheduled = ScheduledProbe(Stepped(steps=100, least=10), every_n_steps=100, overhead=0.05)
    scheduled.prepare(denoiser.model, denoiser)
    assert loop(scheduled, denoiser, clock, steps=99, step_seconds=0.5) == []
    logged = [run_slowed_after_the_estimate(scheduled, denoiser, clock, step=100)]
    assert scheduled.stopped_runs == 1 and scheduled.runs == 0 and len(logged) == 1
    assert "stepped/train/steps" not in logged[0] and logged[0]["stepped/train/stopped_runs"] == 1.0
    done = scheduled.last_metrics["stepped/train/run_fraction"] * 400
    assert done == int(done) and 0 < done < 4 * 10  # whole forwards of 4 rows, below the least run's 40 rows


def test_a_smaller_run_below_the_probes_least_value_is_not_run(clock, denoiser):
    """The same probe with least = 50: what fits at the first due steps (27 forwards at 50 s, 58 at 100 s) is below
    it at 50 s, so that step is skipped; at 100 s 58 >= 50 fit and run."""
    scheduled = ScheduledProbe(Stepped(steps=100, least=50), every_n_steps=100, overhead=0.05)
    scheduled.prepare(denoiser.model, denoiser)
    logged = loop(scheduled, denoiser, clock, steps=200, step_seconds=0.5)
    assert scheduled.skipped_runs == 1 and len(logged) == 1
    assert 50 <= logged[0]["stepped/train/steps"] < 100


def test_a_first_meeting_time_run_that_does_not_fit_follows_fewer_steps_but_no_fewer_than_cover_the_sites(
        clock, denoiser):
    """Coupled pairs on the batch's 30 sites (200 steps, 8 rows a step: 32 s, 640 s of loop at 5 %): at 250 s of
    loop the 12 s left allow 77 steps, below the 113 a random scan needs to choose all 30 sites half the time, so
    that due step is skipped; at 500 s about 154 steps fit and run, censored there (budget), with run_fraction
    saying what share of a full run it was, and the probe's max_steps back at 200."""
    scheduled = ScheduledProbe(MeetingTimeProbe(max_steps=200, temperature=0.05), every_n_steps=500, overhead=0.05)
    scheduled.prepare(denoiser.model, denoiser)
    logged = loop(scheduled, denoiser, clock, steps=1000, step_seconds=0.5)
    assert scheduled.skipped_runs == 1 and len(logged) == 1 and scheduled.probe.max_steps == 200
    fraction = logged[0]["mixing/train/run_fraction"]
    assert 113 <= fraction * 200 < 200 and logged[0]["mixing/train/budget"] <= fraction * 200
    assert logged[0]["mixing/train/num_pairs"] == 4.0


@pytest.mark.parametrize(("max_steps", "warned"), [(50, True), (113, False)])
def test_a_meeting_time_budget_below_the_cover_time_of_the_sites_is_said_once(denoiser, caplog, max_steps, warned):
    """The batch's rows have 30 sites, which a random scan chooses all of within 113 steps half the time: 50 steps
    leave most pairs censored whatever the model, and the probe says so once (two runs, one warning); 113 is
    quiet."""
    probe = MeetingTimeProbe(max_steps=max_steps)
    starts = start_states(denoiser, BatchRows(batch()))
    with caplog.at_level("WARNING", logger="mlm_dynamics"):
        for _ in range(2):
            probe.measure(denoiser, starts, torch.Generator().manual_seed(0))
    said = [r.getMessage() for r in caplog.records if "max_steps=" in r.getMessage()]
    assert said == (["MeetingTimeProbe: max_steps=50 is below the 113 steps a random scan needs to choose all 30 "
                     "sites of the longest start row half the time, so even a perfect coupling would leave most "
                     "pairs censored at the budget: a censored median says little about the model here. Raise "
                     "max_steps to 113 or more, or start from shorter rows."] if warned else [])


class Partial(Stepped):
    """:class:`Stepped` whose run, stopped at the budget, reports the steps it reached (as a meeting-time run
    reports pairs censored there)."""

    def measure(self, denoiser, starts, generator):
        done = 0
        try:
            for _ in range(self.steps):
                denoiser.conditional_logits(starts.tokens, starts.sites[:, :1])
                done += 1
        except OutOfTime:
            pass
        return {"steps": float(done)}


@pytest.mark.parametrize(("least", "kept"), [(10, True), (60, False)])
def test_a_stopped_run_is_kept_only_past_the_least_run_its_keys_stand_for(clock, denoiser, least, kept):
    """A full run (100 forwards of 4 rows, 8 s) at ten times the estimated cost is stopped at what is left of the
    budget (25 s of 500 s at 5 %), about 30 forwards in: past a least value of 10 its partial result is logged
    (steps reached, run_fraction its realised share), short of 60 it is not; either way stopped_runs counts it."""
    scheduled = ScheduledProbe(Partial(steps=100, least=least), every_n_steps=1000, overhead=0.05)
    scheduled.prepare(denoiser.model, denoiser)
    assert loop(scheduled, denoiser, clock, steps=999, step_seconds=0.5) == []
    metrics = run_slowed_after_the_estimate(scheduled, denoiser, clock, step=1000)
    assert scheduled.stopped_runs == 1 and metrics["stepped/train/stopped_runs"] == 1.0
    assert ("stepped/train/steps" in metrics) == kept
    fraction = metrics["stepped/train/run_fraction"]
    assert 10 < fraction * 100 < 60
    if kept:
        assert metrics["stepped/train/steps"] == fraction * 100  # the share it realised, in whole forwards
