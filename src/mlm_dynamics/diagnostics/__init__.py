"""Pure diagnostics: functions over tensors and result dataclasses, each with one ``summary() -> dict[str, float]``.

Quantiles of fully observed values follow :mod:`.quantiles`; censored times (meeting, hitting, dwell) go through
:mod:`.survival` (Kaplan-Meier quantiles with order-statistic intervals); both name keys the same way.
"""

from .convergence import ess, rhat
from .influence import InfluenceEstimate, estimate_influence, mixing_time_bound, softmax_tv_bound
from .margins import LocalMargins, escape_probability_bound, local_margins
from .meeting import HittingTimes, MeetingTimes
from .quantiles import DEFAULT_LEVELS, quantile_key, quantile_summary, quantiles
from .rectangle import RectangleReport, float_tolerance, rectangle_grid, sample_rectangles
from .scaling import Growth, ScalingFit, SlowBracket, fit_by_temperature, fit_scaling, growth_exponent, slow_brackets
from .survival import QuantileEstimate, SurvivalSummary, estimate_quantile, summarise_survival
from .witness import MixingLowerBound, Witness, chains_to_certify, mixing_lower_bound

__all__ = [
           "DEFAULT_LEVELS",
           "Growth",
           "HittingTimes",
           "InfluenceEstimate",
           "LocalMargins",
           "MeetingTimes",
           "MixingLowerBound",
           "QuantileEstimate",
           "RectangleReport",
           "ScalingFit",
           "SlowBracket",
           "SurvivalSummary",
           "Witness",
           "chains_to_certify",
           "escape_probability_bound",
           "ess",
           "estimate_influence",
           "estimate_quantile",
           "fit_by_temperature",
           "fit_scaling",
           "float_tolerance",
           "growth_exponent",
           "local_margins",
           "mixing_lower_bound",
           "mixing_time_bound",
           "quantile_key",
           "quantile_summary",
           "quantiles",
           "rectangle_grid",
           "rhat",
           "sample_rectangles",
           "slow_brackets",
           "softmax_tv_bound",
           "summarise_survival",
]
