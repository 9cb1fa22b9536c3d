"""Parallel decoding on a schedule: how many positions could the model being trained commit in one step?"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..diagnostics.parallel import (
    DEFAULT_RULES,
    ConfidenceProfile,
    check_rules,
    check_targets,
    confidence_profile,
    random_window,
)
from ..models.base import Denoiser
from ..sampling.categorical import check_temperature
from .base import SCHEDULE_KEYS, MetricKey, Probe
from .mixing import _check_int
from .starts import StartStates


class ParallelDecodingProbe(Probe):
    """A window of ``window`` consecutive resampled positions of each start row, masked: the error of committing its
    ``n`` most confident positions at once against one at a time (:func:`~mlm_dynamics.diagnostics.parallel.
    confidence_profile`, ``n = 1 .. window``), with the influence estimate and the Frechet-Hoeffding certificate of
    each set, the sets the confidence ``rules`` commit and whether their certificate held, and for each error
    ``target`` the ``K`` (and the confidence threshold) that would have kept it. Each row's window starts at a
    random offset (from the run's generator). Rank 0 only.

    Cost per run: at most ``B (1 + sum_{n=2}^{window} (2 + samples (n - 1) + n top_m))`` forward rows (exact
    enumeration where it is no dearer).
    """

    group = "parallel"
    keys = (MetricKey("tv_k{n}", "error of committing the n most confident window positions at once against one at "
                                 "a time (total variation of the two laws; mean over rows)", "probability",
                      "for each n in 1..window"),
            MetricKey("tv_high_k{n}", "upper end of that error's interval (the exact value where enumerated)",
                      "probability", "for each n in 1..window"),
            MetricKey("first_order_k{n}", "influence estimate of that error from one committed position at a time "
                                          "(an upper bound for n <= 2)", "probability", "for each n in 1..window"),
            MetricKey("certificate_k{n}", "Frechet-Hoeffding certificate sum (1 - c_i) of the set (bounds the error "
                                          "when the conditionals are compatible; above 1 it bounds nothing)",
                      "probability sum", "for each n in 1..window"),
            MetricKey("{rule}/k", "positions the confidence rule commits (threshold theta, factor f, frechet eps)",
                      "count", "for each rule"),
            MetricKey("{rule}/tv", "measured error of the set the rule commits", "probability", "for each rule"),
            MetricKey("{rule}/certificate", "the rule's certificate for that set", "probability sum",
                      "for each rule"),
            MetricKey("{rule}/violated", "fraction of rows where the error exceeds the certificate for sure",
                      "fraction", "for each rule"),
            MetricKey("{rule}/capped", "fraction of rows where the rule would commit more than the window",
                      "fraction", "for each rule"),
            MetricKey("k_for_tv{target}", "the one K to set: the largest certified (Learn-then-Test) to keep the "
                                          "target error on 90 % of fresh rows with probability 95 %; nan with "
                                          "fewer rows than that needs (29)", "count", "for each target"),
            MetricKey("threshold_for_tv{target}", "the one confidence threshold to set, certified the same way",
                      "probability", "for each target"),
            MetricKey("k_over_for_tv{target}", "share of the calibration rows over the target at that K",
                      "fraction", "for each target"),
            MetricKey("threshold_over_for_tv{target}", "share of the calibration rows over the target at that "
                                                       "threshold", "fraction", "for each target"),
            MetricKey("exact", "1 when every error was enumerated exactly, 0 when some are Monte Carlo estimates",
                      "flag"),
            MetricKey("forward_rows", "rows through the model in the run", "count"), *SCHEDULE_KEYS)

    def __init__(self, *, window: int = 4, temperature: float = 1.0,
                 rules: Sequence[tuple[str, float]] = DEFAULT_RULES, targets: Sequence[float] = (0.01, 0.05),
                 samples: int = 32, top_m: int = 4) -> None:
        self.window = _check_int("window", window, 2)
        self.samples = _check_int("samples", samples, 2)
        self.top_m = _check_int("top_m", top_m, 1)
        self.temperature = check_temperature(temperature)
        self.rules, self.targets = check_rules(rules), check_targets(targets)
        self.latest: ConfidenceProfile | None = None

    def bind(self, denoiser: Denoiser, sample: StartStates) -> None:
        """The window must fit in the rows' resampled positions."""
        self._check_fits(sample)

    def _check_fits(self, starts: StartStates) -> None:
        """A ValueError naming ``window`` when a row has fewer resampled positions than the window (checked on every
        run's rows: a batch of shorter rows than the first is never measured with a smaller window unsaid)."""
        if int(starts.counts.min()) < self.window:
            raise ValueError(f"window: {self.window} positions do not fit in a start row with "
                             f"{int(starts.counts.min())} resampled positions; use a smaller window")

    def forward_rows(self, rows: int, sites: int) -> int:
        """``B (1 + sum_{n=2}^{w} (2 + samples (n - 1) + n top_m))``, ``w = min(window, sites)``."""
        w = min(self.window, sites)
        return rows * (1 + sum(2 + self.samples * (n - 1) + n * self.top_m for n in range(2, w + 1)))

    def measure(self, denoiser: Denoiser, starts: StartStates, generator: torch.Generator) -> dict[str, float]:
        """Mask a window of each row, profile its commits; the profile's summary."""
        self._check_fits(starts)
        candidates = random_window(starts.sites, starts.counts, self.window, generator)
        self.latest = confidence_profile(denoiser, starts.tokens, candidates, max_k=self.window, rules=self.rules,
                                         targets=self.targets, temperature=self.temperature, samples=self.samples,
                                         top_m=self.top_m, generator=generator,
                                         attention_mask=starts.attention_mask)
        return self.latest.summary()


__all__ = ["ParallelDecodingProbe"]
